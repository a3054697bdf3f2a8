#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "config_fixture.hpp"

#include "accel/plan/runtime_reserve.hpp"

using namespace accel;

namespace {
using accel_test::config;
}  // namespace

TEST_CASE("KV cache of Llama-2-7b from its config.json", "[plan][reserve][kv]") {
  const auto j = config("llama2_7b");
  const plan::KVCacheShape s = plan::kv_cache_shape_from_hf_config(j, 4096, 1, DType::f16);
  CHECK(s.layers == 32);
  CHECK(s.kv_heads == 32);
  CHECK(s.head_dim == 128);  // 4096 / 32
  CHECK(s.max_seq == 4096);
  CHECK(s.batch == 1);
  CHECK(s.dtype == DType::f16);
  // 2 (K and V) x 32 layers x 32 KV heads x 128 x 4096 tokens x 2 bytes: 2 GiB.
  CHECK(plan::estimate_kv_cache_bytes(s) == ByteSize(2LL * 32 * 32 * 128 * 4096 * 1 * 2));
  CHECK(plan::estimate_kv_cache_bytes(s) == ByteSize(std::int64_t{2} << 30));
  // Without a length the config's max_position_embeddings (4096) is the length.
  CHECK(plan::kv_cache_shape_from_hf_config(j).max_seq == 4096);
  const auto batch8 = plan::kv_cache_shape_from_hf_config(j, 2048, 8, DType::bf16);
  CHECK(plan::estimate_kv_cache_bytes(batch8) == ByteSize(2LL * 32 * 32 * 128 * 2048 * 8 * 2));
  const auto f32 = plan::kv_cache_shape_from_hf_config(j, 100, 3, DType::f32);
  CHECK(plan::estimate_kv_cache_bytes(f32) == ByteSize(2LL * 32 * 32 * 128 * 100 * 3 * 4));
  // The overload on the parsed struct agrees.
  CHECK(plan::estimate_kv_cache_bytes(plan::kv_cache_shape(models::llama_config_from_json(j), 4096, 1, DType::f16)) ==
        plan::estimate_kv_cache_bytes(s));
}

TEST_CASE("KV cache of a grouped-query config counts KV heads, not query heads", "[plan][reserve][kv]") {
  const auto j = config("tinyllama_1.1b");  // 22 layers, 32 query heads, 4 KV heads, hidden 2048
  const auto s = plan::kv_cache_shape_from_hf_config(j, std::nullopt, 1, DType::bf16);
  CHECK(s.layers == 22);
  CHECK(s.kv_heads == 4);
  CHECK(s.head_dim == 64);
  CHECK(s.max_seq == 2048);
  CHECK(plan::estimate_kv_cache_bytes(s) == ByteSize(2LL * 22 * 4 * 64 * 2048 * 1 * 2));
  CHECK(plan::estimate_kv_cache_bytes(s) == ByteSize(44LL << 20));

  // An explicit head_dim wins over hidden_size / num_attention_heads (Gemma, Qwen3 habit), and a
  // missing num_key_value_heads means one KV head per query head.
  const auto explicit_head = nlohmann::json::parse(R"({"model_type": "mistral", "hidden_size": 2048,
      "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "num_hidden_layers": 18,
      "max_position_embeddings": 8192})");
  const auto e = plan::kv_cache_shape_from_hf_config(explicit_head, 1000, 2, DType::f16);
  CHECK(e.head_dim == 256);
  CHECK(e.kv_heads == 2);
  CHECK(plan::estimate_kv_cache_bytes(e) == ByteSize(2LL * 18 * 2 * 256 * 1000 * 2 * 2));
  const auto mha = nlohmann::json::parse(R"({"model_type": "qwen2", "hidden_size": 1024, "num_attention_heads": 16,
      "num_hidden_layers": 4})");
  const auto m = plan::kv_cache_shape_from_hf_config(mha, 10);
  CHECK(m.kv_heads == 16);
  CHECK(m.head_dim == 64);
  CHECK(m.dtype == DType::f16);
  CHECK(plan::kv_cache_shape_from_hf_config(mha).max_seq == 2048);  // transformers' LlamaConfig default
}

TEST_CASE("KV cache of GPT-2 from its config.json", "[plan][reserve][kv]") {
  const auto j = config("gpt2");
  const auto s = plan::kv_cache_shape_from_hf_config(j, std::nullopt, 1, DType::f16);
  CHECK(s.layers == 12);
  CHECK(s.kv_heads == 12);
  CHECK(s.head_dim == 64);  // 768 / 12
  CHECK(s.max_seq == 1024);  // n_positions
  CHECK(plan::estimate_kv_cache_bytes(s) == ByteSize(2LL * 12 * 12 * 64 * 1024 * 2));
  CHECK(plan::estimate_kv_cache_bytes(s) == ByteSize(36LL << 20));
}

TEST_CASE("KV cache from a config: bad configs are refused", "[plan][reserve][kv]") {
  CHECK_THROWS_AS(plan::kv_cache_shape_from_hf_config(nlohmann::json{{"model_type", "bert"}}, 10), ValueError);
  CHECK_THROWS_AS(plan::kv_cache_shape_from_hf_config(nlohmann::json::object(), 10), ValueError);
  // Inconsistent or out-of-range fields are errors in the config file: FormatError naming the key.
  CHECK_THROWS_AS(plan::kv_cache_shape_from_hf_config(
                      nlohmann::json{{"model_type", "llama"}, {"hidden_size", 100}, {"num_attention_heads", 3}}, 10),
                  FormatError);
  CHECK_THROWS_AS(plan::kv_cache_shape_from_hf_config(
                      nlohmann::json{{"model_type", "llama"}, {"num_attention_heads", 0}}, 10),
                  FormatError);
  CHECK_THROWS_AS(plan::kv_cache_shape_from_hf_config(nlohmann::json{{"model_type", "gpt2"}, {"n_head", 5}}, 10),
                  FormatError);
  CHECK_THROWS_AS(plan::kv_cache_shape_from_hf_config(nlohmann::json{{"model_type", "llama"}, {"num_hidden_layers", "32"}}, 10),
                  FormatError);
  CHECK_THROWS_AS(plan::estimate_kv_cache_bytes(plan::kv_cache_shape_from_hf_config(config("llama2_7b"), -1)), ValueError);
}

TEST_CASE("A config's KV cache spread over the GPUs becomes a planner reserve", "[plan][reserve][kv]") {
  const ByteSize kv = plan::estimate_kv_cache_bytes(plan::kv_cache_shape_from_hf_config(config("llama2_7b"), 4096, 1, DType::f16));
  const plan::MaxMemory r = plan::spread_kv_cache_reserve(kv, {0, 1}, ByteSize(512LL << 20));
  REQUIRE(r.size() == 2);
  CHECK(r.entries()[0].first == Placement::gpu(0));
  CHECK(r.entries()[1].first == Placement::gpu(1));
  CHECK(r.entries()[0].second == ByteSize((1LL << 30) + (512LL << 20)));
  CHECK(r.entries()[1].second == ByteSize((1LL << 30) + (512LL << 20)));
  // Three GPUs: the share rounds up so the reserve never falls short of the cache.
  const plan::MaxMemory r3 = plan::spread_kv_cache_reserve(kv, {0, 1, 2});
  CHECK(r3.entries()[0].second * 3 >= kv);
  CHECK(plan::spread_kv_cache_reserve(kv, {}).empty());
}
