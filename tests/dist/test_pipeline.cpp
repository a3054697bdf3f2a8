// A model split across processes: rank placements and their JSON, the plan across ranks' budgets,
// and, with 1, 2 and 3 processes, the test models loaded in parts with every process computing the
// single-process logits and tokens bit for bit, each process holding its own blocks only and its
// allocator peak within its budget.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/dist/split_model.hpp"
#include "accel/models/generate.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/quant/quantizers/auto_quantizer.hpp"
#include "accel/quant/quantizers/bnb.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/quant/quantizers/quanto.hpp"
#include "accel/quant/quantizers/torchao.hpp"
#include "../temp_dir.hpp"
#include "dist_fixture.hpp"

// Everything in a namespace of its own: the layer's tests compile as one translation unit, and
// these using-directives must not reach the other files.
namespace dist_split_test {

namespace fs = std::filesystem;
using namespace accel;
using namespace accel_dist_test;

namespace {

fs::path model_dir(const std::string& name) { return fs::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "models" / name; }

Tensor prompt() { return Tensor::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, Shape{1, 8}); }

/// The reference: the whole model in this process, no hooks.
struct Reference {
  std::vector<float> logits;
  std::vector<std::int64_t> tokens;
};
Reference reference(const std::string& name) {
  auto p = dispatch::load_pretrained_causal_lm(model_dir(name));
  Reference r;
  r.logits = p.model->logits(prompt()).to(DType::f32).to_vector<float>();
  r.tokens = models::generate(*p.model, prompt(), {.max_new_tokens = 12, .ignore_eos = true}).new_tokens.front();
  return r;
}

/// Bytes of the parameters and buffers of `model` that hold data here.
double resident_bytes(nn::Module& model) {
  double b = 0;
  for (const auto& [name, t] : model.state_dict()) {
    // inv_freq is computed at construction on every process, in no checkpoint
    if (!t.is_meta() && !name.ends_with("inv_freq")) b += static_cast<double>(t.nbytes());
  }
  return b;
}

}  // namespace

TEST_CASE("Rank placements parse, print and refuse what is not one", "[dist][split]") {
  CHECK(dist::parse_rank_placement("rank1:cpu") == dist::RankPlacement{1, Placement::cpu()});
  CHECK(dist::parse_rank_placement("rank0:disk") == dist::RankPlacement{0, Placement::disk()});
  CHECK(dist::parse_rank_placement("rank12:cuda:3") == dist::RankPlacement{12, Placement::gpu(3)});
  CHECK(dist::parse_rank_placement("rank2:1") == dist::RankPlacement{2, Placement::gpu(1)});
  CHECK(dist::parse_rank_placement("rank3:cuda:0").str() == "rank3:0");
  for (const char* bad : {"cpu", "rank:cpu", "rankX:cpu", "rank1", "rank1:", "rank1:meta", "rank1:gpu", "rank-1:cpu",
                          "rank1:cuda:x", "rank99999999999:cpu"}) {
    INFO(bad);
    CHECK_THROWS_AS(dist::parse_rank_placement(bad), ValueError);
  }
  dist::SplitDeviceMap sm;
  sm.set("model.embed_tokens", {0, Placement::cpu()});
  sm.set("model.layers", {1, Placement::gpu(0)});
  sm.set("lm_head", {1, Placement::disk()});
  const auto j = dist::to_json(sm);
  CHECK(j.dump() == R"({"model.embed_tokens":"rank0:cpu","model.layers":"rank1:0","lm_head":"rank1:disk"})");
  CHECK(dist::split_device_map_from_json(j) == sm);
  CHECK(sm.lookup("model.layers.1.mlp.up_proj.weight") == dist::RankPlacement{1, Placement::gpu(0)});
  CHECK_FALSE(sm.lookup("model.norm.weight"));
  CHECK(sm.ranks() == std::vector<int>{0, 1});
  const plan::DeviceMap local = sm.local(0);
  CHECK(local.find("model.embed_tokens") == Placement::cpu());
  CHECK(local.find("model.layers") == Placement(Device::meta()));
  CHECK_THROWS_AS(dist::split_device_map_from_json(nlohmann::json{{"lm_head", "cpu"}}), ValueError);
  CHECK_THROWS_AS(dist::split_device_map_from_json(nlohmann::json{{"lm_head", 1}}), ValueError);
  CHECK_THROWS_AS(dist::split_device_map_from_json(nlohmann::json::array()), ValueError);
}

TEST_CASE("infer_split_device_map fills the ranks in order within their budgets", "[dist][split]") {
  std::shared_ptr<models::CausalLM> meta;
  {
    auto guard = nn::init_empty_weights(false);
    meta = models::causal_lm_from_hf_config(nlohmann::json::parse(std::ifstream(model_dir("tiny_llama") / "config.json")));
  }
  nn::Module& m = meta->module();
  const plan::ModuleSizes sizes = plan::compute_module_sizes(m);
  const double total = sizes[""].bytes();
  const double layer = sizes["model.layers.0"].bytes();
  dist::SplitPlanOptions opts;
  opts.infer.no_split_module_classes = m.no_split_modules();

  SECTION("two ranks of 60% each: rank 0 first, then rank 1, each within its budget") {
    const ByteSize b(static_cast<std::int64_t>(0.6 * total));
    const auto sm = dist::infer_split_device_map(m, {{{Placement::cpu(), b}}, {{Placement::cpu(), b}}}, opts);
    dist::check_split_device_map(m, sm, 2);
    CHECK(sm.ranks() == std::vector<int>{0, 1});
    std::map<int, double> held;
    int last = 0;
    for (const auto& [name, p] : sm) {
      CHECK(p.where == Placement::cpu());
      CHECK(p.rank >= last);  // contiguous: the ranks only go up along the model
      last = p.rank;
      held[p.rank] += sizes[name].bytes();
    }
    CHECK(held[0] <= b.bytes());
    CHECK(held[1] <= b.bytes());
  }
  SECTION("balanced evens two large budgets") {
    const ByteSize big(static_cast<std::int64_t>(10 * total));
    dist::SplitPlanOptions balanced = opts;
    balanced.strategy = "balanced";
    const auto sm = dist::infer_split_device_map(m, {{{Placement::cpu(), big}}, {{Placement::cpu(), big}}}, balanced);
    CHECK(sm.ranks() == std::vector<int>{0, 1});
    dist::SplitPlanOptions sequential = opts;
    sequential.strategy = "sequential";
    const auto unbalanced = dist::infer_split_device_map(m, {{{Placement::cpu(), big}}, {{Placement::cpu(), big}}}, sequential);
    const auto automatic = dist::infer_split_device_map(m, {{{Placement::cpu(), big}}, {{Placement::cpu(), big}}}, opts);
    CHECK(automatic == sm);
    CHECK(unbalanced.ranks() == std::vector<int>{0});
  }
  SECTION("what fits nowhere goes to disk on the last rank naming one, which keeps a layer free") {
    const ByteSize small(static_cast<std::int64_t>(0.4 * total));
    const auto sm = dist::infer_split_device_map(
        m, {{{Placement::cpu(), small}}, {{Placement::cpu(), small}, {Placement::disk(), ByteSize(1 << 30)}}}, opts);
    bool disk = false;
    double rank1 = 0;
    for (const auto& [name, p] : sm) {
      if (p.where.is_disk()) {
        disk = true;
        CHECK(p.rank == 1);
      } else if (p.rank == 1) {
        rank1 += sizes[name].bytes();
      }
    }
    CHECK(disk);
    CHECK(rank1 + layer <= small.bytes());
  }
  SECTION("a rank with a GPU and a CPU fills the GPU first") {
    const ByteSize half(static_cast<std::int64_t>(0.5 * total));
    const auto sm = dist::infer_split_device_map(m, {{{Placement::gpu(0), ByteSize(static_cast<std::int64_t>(layer * 1.5))},
                                                      {Placement::cpu(), ByteSize(static_cast<std::int64_t>(total))}}},
                                                 opts);
    bool gpu = false, cpu_after = false;
    for (const auto& [name, p] : sm) {
      CHECK(p.rank == 0);
      if (p.where.is_gpu()) {
        CHECK_FALSE(cpu_after);
        gpu = true;
      } else {
        cpu_after = true;
      }
    }
    CHECK(gpu);
    CHECK(cpu_after);
    (void)half;
  }
  CHECK_THROWS_AS(dist::infer_split_device_map(m, {}, opts), ValueError);
  CHECK_THROWS_AS(dist::infer_split_device_map(m, {{{Placement::disk(), ByteSize(1 << 20)}}}, opts), ValueError);
  dist::SplitPlanOptions greedy;
  greedy.strategy = "greedy";
  CHECK_THROWS_AS(dist::infer_split_device_map(m, {{{Placement::cpu(), ByteSize(1 << 20)}}}, greedy), ValueError);
}

TEST_CASE("A model split across the processes computes the single-process logits and tokens", "[dist][split][mpi]") {
  const int n = world(), me = rank();
  for (const std::string name : {"tiny_llama", "tiny_gpt2", "tiny_llama_tied_headdim"}) {
    INFO(name << " on " << n << " processes, this one " << me);
    const Reference ref = reference(name);
    const bool gpt2 = name == "tiny_gpt2";
    const std::string base = gpt2 ? "transformer" : "model";
    // Each group on the next process, round robin, so each boundary changes process. GPT-2 adds
    // its two embeddings' outputs, so they stay together; a tied head goes with the embedding it
    // shares.
    const std::vector<std::vector<std::string>> groups =
        gpt2 ? std::vector<std::vector<std::string>>{{"transformer.wte", "transformer.wpe"}, {"transformer.h.0"},
                                                     {"transformer.h.1"}, {"transformer.ln_f"}, {"lm_head"}}
             : std::vector<std::vector<std::string>>{{"model.embed_tokens"}, {"model.layers.0"}, {"model.layers.1"},
                                                     {"model.norm"}, {"lm_head"}, {"model.rotary_emb"}};
    const auto config = nlohmann::json::parse(std::ifstream(model_dir(name) / "config.json"));
    const bool tied = config.value("tie_word_embeddings", gpt2);
    dist::SplitDeviceMap sm;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      for (const auto& e : groups[i]) {
        const int r = static_cast<int>(i) % n;
        sm.set(e, {(e == "lm_head" && tied) ? 0 : r, Placement::cpu()});
      }
    }
    auto m = dist::load_pretrained_split(state(), model_dir(name), {}, {.split_map = sm});
    // Only this process's blocks hold data.
    for (const auto& [t, value] : m.model.model->module().state_dict()) {
      if (t.ends_with("inv_freq")) continue;  // computed at construction, in no checkpoint
      const auto p = sm.lookup(t);
      REQUIRE(p);
      INFO(t);
      CHECK(value.is_meta() == (p->rank != me));
    }
    const auto logits = m.model.model->logits(prompt()).to(DType::f32).to_vector<float>();
    CHECK(logits == ref.logits);
    const auto tokens = models::generate(*m.model.model, prompt(), {.max_new_tokens = 12, .ignore_eos = true}).new_tokens.front();
    CHECK(tokens == ref.tokens);
    if (n > 1) {
      CHECK(m.stages.stats().broadcasts > 0);
      CHECK(m.stages.stats().transfers > 0);
    }
  }
}

TEST_CASE("A planned split keeps each process within its budget", "[dist][split][mpi]") {
  const int n = world();
  const std::string name = "tiny_llama";
  const Reference ref = reference(name);
  std::shared_ptr<models::CausalLM> meta;
  {
    auto guard = nn::init_empty_weights(false);
    meta = models::causal_lm_from_hf_config(nlohmann::json::parse(std::ifstream(model_dir(name) / "config.json")));
  }
  const double total = plan::compute_module_sizes(meta->module())[""].bytes();
  // Each process gets a little more than its share of the weights, and keeps room for what runs.
  const ByteSize weights(static_cast<std::int64_t>(total / n + 0.35 * total));
  const ByteSize running(1 << 20);
  plan::MaxMemory mine{{Placement::cpu(), weights + running}};
  reset_peak_memory_stats(Device::cpu());
  const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
  dist::SplitLoadOptions so{.max_memory = mine};
  so.plan.strategy = "sequential";
  auto m = dist::load_pretrained_split(state(), model_dir(name),
                                       {.disable_mmap = true, .reserve = {{Placement::cpu(), running}}}, so);
  // A share and a third each: two processes are needed, a third has room to spare.
  CHECK(m.split_map.ranks().size() == static_cast<std::size_t>(std::min(n, 2)));
  const double held = resident_bytes(m.model.model->module());
  CHECK(held <= weights.bytes());
  double all = 0;
  for (double h : dist::gather_object(state(), std::vector<double>{held})) all += h;
  double stored = 0;  // what the checkpoint holds
  for (const auto& [t, value] : meta->module().state_dict()) {
    if (!t.ends_with("inv_freq")) stored += static_cast<double>(value.nbytes());
  }
  CHECK(all == stored);
  const auto tokens = models::generate(*m.model.model, prompt(), {.max_new_tokens = 12, .ignore_eos = true}).new_tokens.front();
  CHECK(tokens == ref.tokens);
  const double peak = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes - before);
  CHECK(peak <= (weights + running).bytes());
}

namespace {

/// A fresh quantizer of each kind the library has (they keep per-load state).
std::vector<std::pair<std::string, std::function<dispatch::AnyQuantizer()>>> quantizers() {
  return {
      {"bitsandbytes nf4", [] { return quant::BnbQuantizer({.load_in_4bit = true, .bnb_4bit_quant_type = quant::BnbQuantType::nf4}); }},
      {"bitsandbytes int8", [] { return quant::BnbQuantizer({.load_in_8bit = true}); }},
      {"gguf q8_0", [] { return quant::GgufQuantizer({.quant_type = io::GgmlType::q8_0}); }},
      {"quanto int8", [] { return quant::QuantoQuantizer({.weights_dtype = "int8"}); }},
      {"torchao int8wo", [] { return quant::TorchAoQuantizer({.quant_type = "int8wo"}); }},
  };
}

/// Layers of `model` computing on quantized weights (quant::count_quantized_layers), and how many
/// of them hold their weight here.
std::pair<std::size_t, std::size_t> quantized_layers(nn::Module& model) {
  std::size_t here = 0;
  for (const auto& [path, m] : model.named_modules()) {
    // A quantized layer is a leaf: the one module its own count finds.
    if (m->named_children().empty() && quant::count_quantized_layers(*m) == 1) {
      const Tensor* w = m->find_parameter("weight");
      here += w && !w->is_meta();
    }
  }
  return {quant::count_quantized_layers(model), here};
}

}  // namespace

TEST_CASE("A quantized model split across the processes computes the single-process tokens", "[dist][split][mpi][quant]") {
  const int n = world(), me = rank();
  const std::string name = "tiny_llama";
  const std::vector<std::vector<std::string>> groups{{"model.embed_tokens"}, {"model.layers.0"}, {"model.layers.1"},
                                                     {"model.norm"}, {"lm_head"}, {"model.rotary_emb"}};
  dist::SplitDeviceMap sm;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    for (const auto& e : groups[i]) sm.set(e, {static_cast<int>(i) % n, Placement::cpu()});
  }
  for (const auto& [label, make] : quantizers()) {
    INFO(label << " on " << n << " processes, this one " << me);
    auto one = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false, .quantizer = make()});
    const auto want = one.model->logits(prompt()).to(DType::f32).to_vector<float>();
    const auto want_tokens = models::generate(*one.model, prompt(), {.max_new_tokens = 12, .ignore_eos = true}).new_tokens.front();
    const auto [layers, held_by_one] = quantized_layers(one.model->module());
    REQUIRE(layers > 0);
    CHECK(held_by_one == layers);

    auto m = dist::load_pretrained_split(state(), model_dir(name), {.show_progress = false, .quantizer = make()},
                                         {.split_map = sm});
    // The same layers are swapped on every process; each holds the quantized weights of its own
    // blocks only, and all of them hold each layer once.
    const auto [split_layers, held] = quantized_layers(m.model.model->module());
    CHECK(split_layers == layers);
    if (n > 1) CHECK(held < layers);
    std::size_t all = 0;
    for (std::size_t h : dist::gather_object(state(), std::vector<std::size_t>{held})) all += h;
    CHECK(all == layers);
    CHECK(m.model.model->logits(prompt()).to(DType::f32).to_vector<float>() == want);
    CHECK(models::generate(*m.model.model, prompt(), {.max_new_tokens = 12, .ignore_eos = true}).new_tokens.front() ==
          want_tokens);
  }
}

TEST_CASE("A folder saved quantized splits across the processes, planned by its quantized sizes", "[dist][split][mpi][quant]") {
  const int n = world();
  const std::string name = "tiny_llama";
  const quant::BitsAndBytesConfig nf4{.load_in_4bit = true, .bnb_4bit_quant_type = quant::BnbQuantType::nf4};
  auto one = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false, .quantizer = quant::BnbQuantizer(nf4)});
  const auto want_tokens = models::generate(*one.model, prompt(), {.max_new_tokens = 12, .ignore_eos = true}).new_tokens.front();
  accel_test::TempDir saved;  // one per process: each reads its own copy
  quant::save_bnb_model(one.model->module(), one.config, saved.str(), nf4);
  const auto quantizer = [&] { return quant::quantizer_from_config(dispatch::read_model_config(saved.path).at("quantization_config")); };
  // What the planner will count: the swapped layers' packed bytes, not float weights.
  double held_one = resident_bytes(one.model->module());
  std::shared_ptr<models::CausalLM> meta;
  {
    auto guard = nn::init_empty_weights(false);
    meta = models::causal_lm_from_hf_config(one.config);
  }
  const double float_bytes = plan::compute_module_sizes(meta->module())[""].bytes();
  REQUIRE(held_one < 0.8 * float_bytes);
  // Each process a little more than its share of the quantized weights: too little for a float
  // split, enough for the quantized one.
  const ByteSize weights(static_cast<std::int64_t>(held_one / n + 0.35 * held_one));
  const ByteSize running(1 << 20);
  // The quantizer keeps 10% of each budget free (Diffusers' headroom): the budget is sized so
  // that what is left for the weights is still `weights`.
  const ByteSize budget(static_cast<std::int64_t>(std::ceil((weights + running).bytes() / 0.9)) + 16);
  dist::SplitLoadOptions so{.max_memory = plan::MaxMemory{{Placement::cpu(), budget}}};
  so.plan.strategy = "sequential";
  reset_peak_memory_stats(Device::cpu());
  const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
  auto m = dist::load_pretrained_split(state(), saved.path,
                                       {.disable_mmap = true, .reserve = {{Placement::cpu(), running}}, .quantizer = quantizer()}, so);
  CHECK(m.split_map.ranks().size() == static_cast<std::size_t>(std::min(n, 2)));
  for (const auto& [k, p] : m.split_map) CHECK_FALSE(p.where.is_disk());
  const double held = resident_bytes(m.model.model->module());
  CHECK(held <= weights.bytes());
  CHECK(models::generate(*m.model.model, prompt(), {.max_new_tokens = 12, .ignore_eos = true}).new_tokens.front() == want_tokens);
  const double peak = static_cast<double>(memory_stats(Device::cpu()).peak_allocated_bytes - before);
  CHECK(peak <= budget.bytes());
}

}  // namespace dist_split_test
