// Quanto and TorchAO weight schemes: every row of the scheme table quantizes within half a step
// (float8 within its relative precision), packs codes low bits first, and computes through
// AffineLinear as the float product of the weight it stands for; the configs read and write their
// JSON and refuse what the libraries refuse; quantize on load swaps the layers, keeps the CPU peak
// near the quantized size, stays within documented logit bounds and dequantizes back; a quantizer
// comes from any quantization_config, and PipelineQuantizationConfig picks one per component.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"
#include "quant_test_support.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/models/generate.hpp"
#include "accel/quant/layers/affine_linear.hpp"
#include "accel/quant/quantizers/auto_quantizer.hpp"
#include "accel/quant/quantizers/bnb.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/quant/quantizers/pipeline_config.hpp"
#include "accel/quant/quantizers/quanto.hpp"
#include "accel/quant/quantizers/torchao.hpp"

// A namespace of its own: the layer's tests compile as one translation unit.
namespace quant_affine_test {

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::quant;

namespace {

using accel_test::model_dir;

using accel_test::rel_err;

Tensor random_matrix(std::int64_t rows, std::int64_t cols, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (auto& x : v) x = d(g);
  return Tensor::from_vector(v, Shape{rows, cols});
}

Tensor prompt() { return Tensor::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, Shape{1, 8}); }

const AffineScheme all_schemes[] = {AffineScheme::quanto_int8,
                                    AffineScheme::quanto_int4,
                                    AffineScheme::quanto_int2,
                                    AffineScheme::quanto_float8,
                                    AffineScheme::torchao_int8_weight_only,
                                    AffineScheme::torchao_int4_weight_only,
                                    AffineScheme::torchao_int8_dynamic_activation_int8_weight,
                                    AffineScheme::torchao_float8_weight_only};

}  // namespace

TEST_CASE("every affine scheme quantizes within half a step and dequantizes what it stands for", "[quant][affine]") {
  // 300 columns: groups of 128, 128 and a last one of 44.
  const Tensor w = random_matrix(7, 300, 1);
  const auto wv = w.to_vector<float>();
  for (const auto s : all_schemes) {
    const auto& info = affine_scheme_info(s);
    INFO(info.name);
    CHECK(info.scheme == s);
    const AffineWeight q = quantize_affine(s, w);
    CHECK(q.codes.dtype() == affine_code_dtype(s));
    CHECK(q.codes.shape() == affine_code_shape(s, 300, 7));
    const std::int64_t groups = info.group == 0 ? 1 : 3;
    CHECK(q.scale.shape() == Shape{7, groups});
    CHECK(q.min.defined() == (info.kind == AffineKind::zero_point));
    const auto deq = dequantize_affine(s, q).to_vector<float>();
    const auto sc = q.scale.to_vector<float>();
    for (std::int64_t r = 0; r < 7; ++r) {
      for (std::int64_t c = 0; c < 300; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * 300 + c);
        const float step = sc[static_cast<std::size_t>(r * groups + (info.group == 0 ? 0 : c / 128))];
        if (info.kind == AffineKind::float8) {
          // e4m3: 3 mantissa bits, half an ulp relative; the smallest values are subnormal (2^-9 s).
          CHECK(std::fabs(deq[i] - wv[i]) <= std::fabs(wv[i]) / 16 + step * 0x1p-10f + 1e-7f);
        } else {
          CHECK(std::fabs(deq[i] - wv[i]) <= step * 0.5f * (1 + 1e-5f) + 1e-6f);
        }
      }
    }
    // The scale of each row (first group) follows the table.
    float amax = 0, lo = wv[0], hi = wv[0];
    for (int c = 0; c < 300; ++c) amax = std::max(amax, std::fabs(wv[static_cast<std::size_t>(c)]));
    for (int c = 0; c < 128; ++c) lo = std::min(lo, wv[static_cast<std::size_t>(c)]), hi = std::max(hi, wv[static_cast<std::size_t>(c)]);
    if (info.kind == AffineKind::zero_point) {
      CHECK(sc[0] == (hi - lo) / static_cast<float>(info.qmax));
      CHECK(q.min.to_vector<float>()[0] == lo);
    } else {
      CHECK(sc[0] == amax / info.divisor);
    }
  }
}

TEST_CASE("affine codes: half to even, clamped, packed low bits first, all-equal groups", "[quant][affine]") {
  // quanto int8: s = 127 / 127 = 1, so codes are the values rounded half to even.
  const Tensor w = Tensor::from_vector(std::vector<float>{127, 2.5f, -2.5f, 3.5f, -127, 0.5f, 1.5f, 0}, Shape{1, 8});
  const auto q8 = quantize_affine(AffineScheme::quanto_int8, w);
  CHECK(q8.codes.to_vector<std::int8_t>() == std::vector<std::int8_t>{127, 2, -2, 4, -127, 0, 2, 0});
  // torchao int8_weight_only: s = 127 / 127.5, so 127 / s = 127.5 rounds to 128 and clamps to 127.
  CHECK(quantize_affine(AffineScheme::torchao_int8_weight_only, w).codes.to_vector<std::int8_t>()[0] == 127);
  // int4 / int2 with a min: column 2i in the low nibble (int2: column 4i in the lowest two bits).
  const Tensor ramp = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 15, 14, 13, 12}, Shape{1, 8});
  const auto q4 = quantize_affine(AffineScheme::quanto_int4, ramp);
  CHECK(q4.scale.to_vector<float>()[0] == 1.0f);
  CHECK(q4.codes.to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0x10, 0x32, 0xEF, 0xCD});
  const Tensor four = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 3, 2, 1, 0}, Shape{1, 8});
  const auto q2 = quantize_affine(AffineScheme::quanto_int2, four);
  CHECK(q2.codes.to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0xE4, 0x1B});
  // An all-equal group: scale 0, every value the min.
  const Tensor flat = Tensor::full({2, 64}, 0.75f);
  for (const auto s : all_schemes) {
    INFO(affine_scheme_info(s).name);
    const auto deq = dequantize_affine(s, quantize_affine(s, flat)).to_vector<float>();
    for (const float v : deq) CHECK(std::fabs(v - 0.75f) <= 0.75f / 16);
  }
  const auto zero = dequantize_affine(AffineScheme::quanto_int8, quantize_affine(AffineScheme::quanto_int8, Tensor::zeros({2, 8})));
  for (const float v : zero.to_vector<float>()) CHECK(v == 0.0f);
  CHECK_THROWS_AS(quantize_affine(AffineScheme::quanto_int4, w, -1), ValueError);
  CHECK_THROWS_AS(quantize_affine(AffineScheme::quanto_int4, Tensor::zeros({8})), ShapeError);
}

TEST_CASE("AffineLinear computes the float product of the weight its codes stand for", "[quant][affine]") {
  const std::int64_t in = 200, out = 37;
  const Tensor w = random_matrix(out, in, 2, 0.1f);
  const Tensor bias = random_matrix(1, out, 3).reshape({out});
  for (const auto s : all_schemes) {
    const auto& info = affine_scheme_info(s);
    INFO(info.name);
    AffineLinear layer(in, out, s, info.group == 0 ? 0 : 64, /*bias=*/true);
    CHECK(layer.group_size() == (info.group == 0 ? in : 64));
    layer.set_quantized_weight(quantize_affine(s, w, layer.group_size()), Device::cpu());
    layer.parameter_cell("bias")->data = bias;
    const Tensor wd = layer.dequantized_weight();
    // 1 and 4 rows: tiles of decoded rows; 20 rows: the dequantized weight through ops::linear.
    for (const std::int64_t rows : {1, 4, 20}) {
      INFO(rows << " rows");
      const Tensor x = random_matrix(rows, in, 4 + static_cast<unsigned>(rows));
      const Tensor want = ops::linear(x, wd, bias);
      const Tensor got = layer.forward(x);
      CHECK(got.shape() == want.shape());
      // int8 activations: each row's codes carry half a step of amax / 127.
      CHECK(rel_err(got.to_vector<float>(), want.to_vector<float>()) < (info.dynamic_activation ? 0.02 : 1e-5));
      CHECK(layer.forward(x.to(DType::bf16)).dtype() == DType::bf16);
    }
  }
  AffineLinear layer(in, out, AffineScheme::quanto_int8);
  layer.set_quantized_weight(quantize_affine(AffineScheme::quanto_int8, w), Device::cpu());
  CHECK_THROWS_AS(layer.forward(Tensor::zeros({1, 100})), ShapeError);
  CHECK_THROWS_AS(layer.set_quantized_weight(quantize_affine(AffineScheme::quanto_int8, random_matrix(5, in, 9)), Device::cpu()),
                  ShapeError);
  CHECK_THROWS_AS(AffineLinear(0, 4, AffineScheme::quanto_int8), ValueError);
}

TEST_CASE("QuantoConfig and TorchAoConfig read and write Diffusers' JSON and refuse what it refuses", "[quant][affine]") {
  const QuantoConfig qc{.weights_dtype = "int4", .modules_to_not_convert = std::vector<std::string>{"lm_head"}};
  CHECK(qc.to_json() == nlohmann::json{{"quant_method", "quanto"}, {"weights_dtype", "int4"}, {"modules_to_not_convert", {"lm_head"}}});
  CHECK(QuantoConfig::from_json(qc.to_json()).scheme() == AffineScheme::quanto_int4);
  CHECK(QuantoConfig::from_json({{"quant_method", "quanto"}}).weights_dtype == "int8");
  CHECK(QuantoConfig::from_json({{"quant_method", "quanto"}, {"weights", "float8"}}).scheme() == AffineScheme::quanto_float8);
  CHECK_THROWS_WITH(QuantoConfig::from_json({{"quant_method", "quanto"}, {"weights_dtype", "int3"}}),
                    Catch::Contains("'float8', 'int8', 'int4', 'int2'"));
  CHECK_THROWS_AS(QuantoConfig::from_json({{"quant_method", "quanto"}, {"activations", "int8"}}), ValueError);
  CHECK_THROWS_AS(QuantoConfig::from_json({{"quant_method", "torchao"}}), ValueError);

  const TorchAoConfig tc{.quant_type = "int4wo", .quant_type_kwargs = {{"group_size", 64}}};
  CHECK(tc.to_json() == nlohmann::json{{"quant_method", "torchao"}, {"quant_type", "int4wo"},
                                       {"quant_type_kwargs", {{"group_size", 64}}}, {"modules_to_not_convert", nullptr}});
  CHECK(TorchAoConfig::from_json(tc.to_json()).group_size() == 64);
  CHECK(TorchAoConfig{.quant_type = "int4_weight_only"}.group_size() == 128);
  for (const char* t : {"int8wo", "int8_weight_only", "int8dq", "int8_dynamic_activation_int8_weight", "float8wo",
                        "float8wo_e4m3", "float8_weight_only"}) {
    CHECK_NOTHROW(TorchAoConfig{.quant_type = t}.validate());
  }
  CHECK_THROWS_WITH(TorchAoConfig{.quant_type = "int4dq"}.validate(), Catch::Contains("supported: int8wo"));
  CHECK_THROWS_AS(TorchAoConfig{.quant_type = "float8wo_e5m2"}.validate(), ValueError);
  CHECK_THROWS_WITH((TorchAoConfig{.quant_type = "int4wo", .quant_type_kwargs = {{"group_size", 100}}}.validate()),
                    Catch::Contains("32, 64, 128 or 256"));
  CHECK_THROWS_AS((TorchAoConfig{.quant_type = "int8wo", .quant_type_kwargs = {{"group_size", 64}}}.validate()), ValueError);
  CHECK_THROWS_AS(TorchAoConfig::from_json({{"quant_method", "torchao"}}), ValueError);
  // A quant_method that is not a string is a ValueError, not a JSON type error (found by fuzzing).
  const nlohmann::json odd = {{"quant_method", {{"group_size", 64}}}};
  CHECK_THROWS_AS(TorchAoConfig::from_json(odd), ValueError);
  CHECK_THROWS_AS(QuantoConfig::from_json(odd), ValueError);
  CHECK_THROWS_AS(GGUFQuantizationConfig::from_json(odd), ValueError);
  CHECK_THROWS_AS(BitsAndBytesConfig::from_json(odd), ValueError);

  // One function for every quant_method.
  CHECK(quantizer_from_config(qc.to_json()).name() == "quanto");
  CHECK(quantizer_from_config(tc.to_json()).target<TorchAoQuantizer>()->scheme() == AffineScheme::torchao_int4_weight_only);
  CHECK(quantizer_from_config({{"quant_method", "gguf"}}).name() == "gguf");
  CHECK(quantizer_from_config({{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}).name() == "bitsandbytes");
  CHECK_THROWS_WITH(quantizer_from_config({{"quant_method", "awq"}}), Catch::Contains("'bitsandbytes', 'gguf', 'quanto', 'torchao'"));
  CHECK_THROWS_AS(quantizer_from_config(nlohmann::json::object()), ValueError);
}

TEST_CASE("PipelineQuantizationConfig gives each component its quantizer", "[quant][affine]") {
  const PipelineQuantizationConfig by_backend{.quant_backend = "bitsandbytes_4bit",
                                              .quant_kwargs = {{"bnb_4bit_quant_type", "nf4"}},
                                              .components_to_quantize = std::vector<std::string>{"transformer"}};
  const auto j = by_backend.config_for("transformer");
  REQUIRE(j);
  CHECK((*j)["quant_method"] == "bitsandbytes");
  CHECK((*j)["load_in_4bit"] == true);
  CHECK(by_backend.quantizer_for("transformer")->target<BnbQuantizer>()->config().bnb_4bit_quant_type == BnbQuantType::nf4);
  CHECK_FALSE(by_backend.config_for("vae"));
  CHECK(PipelineQuantizationConfig{.quant_backend = "torchao", .quant_kwargs = {{"quant_type", "int8wo"}}}.quantizer_for("vae"));

  const PipelineQuantizationConfig by_map{
      .quant_mapping = {{"transformer", QuantoConfig{.weights_dtype = "int4"}.to_json()},
                        {"text_encoder", GGUFQuantizationConfig{.quant_type = GgmlType::q8_0}.to_json()}}};
  CHECK(by_map.quantizer_for("transformer")->name() == "quanto");
  CHECK(by_map.quantizer_for("text_encoder")->name() == "gguf");
  CHECK_FALSE(by_map.quantizer_for("vae"));

  CHECK_THROWS_WITH(PipelineQuantizationConfig{}.validate(), Catch::Contains("quant_mapping"));
  CHECK_THROWS_WITH((PipelineQuantizationConfig{.quant_backend = "quanto", .quant_mapping = by_map.quant_mapping}.validate()),
                    Catch::Contains("not both"));
  CHECK_THROWS_WITH(PipelineQuantizationConfig{.quant_backend = "awq"}.validate(), Catch::Contains("'bitsandbytes_4bit'"));
  CHECK_THROWS_AS((PipelineQuantizationConfig{.quant_backend = "quanto", .quant_kwargs = {{"weights_dtype", "int3"}}}.validate()),
                  ValueError);
  CHECK_THROWS_WITH((PipelineQuantizationConfig{.quant_mapping = {{"unet", {{"quant_method", "torchao"}, {"quant_type", "x"}}}}}.validate()),
                    Catch::Contains("quant_mapping['unet']"));
}

TEST_CASE("Quanto and TorchAO quantize on load: swapped layers, the quantized peak, logits within bounds",
          "[quant][affine]") {
  // Documented bounds: logits RMS relative to the float model on the reference models and a random
  // 256-wide LLaMA; the largest measured of the three in the comment.
  struct Case {
    AnyQuantizer q;
    double bound;
  };
  auto cases = [] {
    return std::vector<Case>{
        {QuantoQuantizer({.weights_dtype = "int8"}), 0.03},   // 0.022
        {QuantoQuantizer({.weights_dtype = "float8"}), 0.12}, // 0.096
        {QuantoQuantizer({.weights_dtype = "int4"}), 0.35},   // 0.29 (groups of 128)
        {QuantoQuantizer({.weights_dtype = "int2"}), 1.3},    // 1.07: four levels per group
        {TorchAoQuantizer({.quant_type = "int8wo"}), 0.03},   // 0.024
        {TorchAoQuantizer({.quant_type = "int4wo", .quant_type_kwargs = {{"group_size", 32}}}), 0.3},  // 0.25
        {TorchAoQuantizer({.quant_type = "int8dq"}), 0.05},   // 0.038
        {TorchAoQuantizer({.quant_type = "float8wo"}), 0.12}, // 0.096
    };
  };
  accel_test::TempDir dir;
  const std::vector<fs::path> models = {model_dir("tiny_llama"), model_dir("tiny_gpt2"),
                                        accel_test::write_random_llama(dir, "llama256")};
  for (const auto& path : models) {
    auto ref = dispatch::load_pretrained_causal_lm(path.string(), {.dtype = DType::f32, .show_progress = false});
    const Tensor ref_logits = ref.model->logits(prompt());
    for (auto& c : cases()) {
      auto* base = c.q.target<QuantoQuantizer>() ? static_cast<AffineQuantizerBase*>(c.q.target<QuantoQuantizer>())
                                                  : static_cast<AffineQuantizerBase*>(c.q.target<TorchAoQuantizer>());
      const auto& info = affine_scheme_info(base->scheme());
      INFO(path.filename().string() << " " << info.name);
      const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
      reset_peak_memory_stats(Device::cpu());
      auto p = dispatch::load_pretrained_causal_lm(path.string(), {.dtype = DType::f32, .show_progress = false, .quantizer = c.q});
      const std::size_t peak = memory_stats(Device::cpu()).peak_allocated_bytes - before;
      const std::size_t held = memory_stats(Device::cpu()).allocated_bytes - before;
      std::size_t swapped = 0, largest = 0;
      for (const auto& [n, m] : p.model->module().named_modules()) {
        if (auto* a = dynamic_cast<AffineLinear*>(m)) {
          ++swapped;
          CHECK(a->scheme() == base->scheme());
          // The codes are quantize_affine's of the float weight ([out, in]; a Conv1D's transposed).
          const bool conv1d = ref.model->module().get_submodule(n).class_name() == "Conv1D";
          const Tensor wf = ref.model->module().get_parameter(n + ".weight");
          largest = std::max(largest, static_cast<std::size_t>(wf.nbytes()));
          const AffineWeight want = quantize_affine(base->scheme(), (conv1d ? wf.t() : wf).contiguous(), a->group_size());
          CHECK(a->quantized_weight().codes.to_vector<std::uint8_t>() == want.codes.to(DType::u8).to_vector<std::uint8_t>());
          CHECK(a->quantized_weight().scale.to_vector<float>() == want.scale.to_vector<float>());
        }
      }
      CHECK(swapped == base->swapped());
      CHECK(swapped >= 4);
      CHECK_FALSE(dynamic_cast<AffineLinear*>(p.model->module().find_submodule("lm_head")));
      // One float weight in flight (converted once) besides what the model keeps.
      CHECK(peak <= held + 2 * largest + (std::size_t{64} << 10));
      const double err = rel_err(p.model->logits(prompt()).to_vector<float>(), ref_logits.to_vector<float>());
      std::printf("[affine] %s %s: %zu layers, logits error %.4f (bound %.2f), peak - held %zu bytes\n",
                  path.filename().c_str(), std::string(info.name).c_str(), swapped, err, c.bound, peak - held);
      CHECK(err < c.bound);
      c.q.dequantize(p.model->module());
      for (const auto& [n, m] : p.model->module().named_modules()) CHECK_FALSE(dynamic_cast<AffineLinear*>(m));
      if (path.filename() == "tiny_gpt2") {
        CHECK(p.model->module().get_submodule("transformer.h.0.attn.c_attn").class_name() == "Conv1D");
      }
      if (!info.dynamic_activation) {
        CHECK(rel_err(p.model->logits(prompt()).to_vector<float>(), ref_logits.to_vector<float>()) < c.bound);
      }
    }
  }
  QuantoQuantizer q;
  CHECK(q.update_torch_dtype(std::nullopt) == DType::f32);
  CHECK(TorchAoQuantizer().update_torch_dtype(std::nullopt) == DType::bf16);
}

TEST_CASE("weights quantized on load and placed on disk compute what they compute in memory", "[quant][affine]") {
  // Half the quantized bytes as the CPU budget: the rest of the layers go to the offload folder as
  // their codes and scales, and the prefetching hooks bring them back per call.
  accel_test::TempDir dir;
  const fs::path model = accel_test::write_random_llama(dir, "llama256");
  std::vector<AnyQuantizer> qs = {TorchAoQuantizer({.quant_type = "int4wo"}), QuantoQuantizer({.weights_dtype = "float8"}),
                                  TorchAoQuantizer({.quant_type = "int8dq"}),
                                  GgufQuantizer({.compute_dtype = DType::f32, .quant_type = GgmlType::q4_k}),
                                  BnbQuantizer(BitsAndBytesConfig{.load_in_4bit = true}, DType::f32)};
  for (auto& q : qs) {
    INFO(q.name());
    auto in_memory = dispatch::load_pretrained_causal_lm(model.string(), {.dtype = DType::f32, .show_progress = false, .quantizer = q});
    const auto want = in_memory.model->logits(prompt()).to_vector<float>();
    std::size_t quantized = 0;
    for (const auto& [n, m] : in_memory.model->module().named_modules()) {
      if (m->class_name() == "Linear" || n.empty()) continue;
      if (m->class_name() != "LlamaRMSNorm" && m->class_name() != "Embedding") {
        for (const auto& [pn, t] : m->named_parameters("", false)) quantized += t.nbytes();
      }
    }
    REQUIRE(quantized > 0);
    MaxMemory half;
    half.add(Placement::cpu(), ByteSize(static_cast<std::int64_t>(quantized / 2)));
    auto placed = dispatch::load_pretrained_causal_lm(
        model.string(), {.dtype = DType::f32, .show_progress = false, .device_map = std::string("auto"), .max_memory = half,
                         .quantizer = q, .offload_depth = 2});
    bool disk = false;
    for (const auto& [k, where] : *placed.device_map) disk |= where.is_disk();
    CHECK(disk);
    CHECK(placed.load.missing_keys.empty());
    CHECK(placed.model->logits(prompt()).to_vector<float>() == want);
  }
  // A checkpoint stored quantized (a GGUF file's blocks are read as they are) is not quantized on
  // load; its blocks go to disk as bytes (test_ggml_linear.cpp).
}

}  // namespace quant_affine_test
