// dispatch_model, cpu_offload, disk_offload, cpu_offload_with_hook and
// load_checkpoint_and_dispatch on the GPT-2 and LLaMA test models: every placement and policy
// gives the logits and tokens of the plain model, bit for bit; bad offload files are typed errors.
#include <catch2/catch.hpp>

#include "../host_backed_cuda.hpp"
#include "../temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/big_modeling.hpp"
#include "accel/dispatch/dispatch_model.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/sharding.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/models.hpp"
#include "accel/nn/init.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

fs::path model_dir(const std::string& name) { return fs::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "models" / name; }

Tensor prompt() { return Tensor::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9}, Shape{1, 6}); }

const models::GenerationConfig greedy{.max_new_tokens = 5, .ignore_eos = true};

struct Reference {
  std::vector<float> logits;
  std::vector<std::vector<std::int64_t>> tokens;
};
Reference reference(const std::string& name) {
  auto p = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false});
  return {p.model->logits(prompt()).to_vector<float>(), models::generate(*p.model, prompt(), greedy).new_tokens};
}

/// The model of `name` on meta (config.json only), and the path of its checkpoint.
std::pair<std::shared_ptr<models::CausalLM>, std::string> meta_model(const std::string& name) {
  const auto config = nlohmann::json::parse(std::ifstream(model_dir(name) / "config.json"));
  auto guard = nn::init_empty_weights(false);
  return {models::causal_lm_from_hf_config(config, DType::f32), io::resolve_checkpoint_folder(model_dir(name)).path.string()};
}

/// One key per block: the base model's children (decoder layers one by one) and lm_head; layer i
/// and the head go to `odd` when i is odd, the rest to `even`.
DeviceMap block_map(nn::Module& root, Placement even, Placement odd, Placement head) {
  DeviceMap dm;
  const std::string base = root.find_submodule("transformer") ? "transformer" : "model";
  const std::string list = base == "transformer" ? "h" : "layers";
  for (const auto& [child, m] : root.get_submodule(base).named_children()) {
    if (child == list) {
      for (std::size_t i = 0; i < m->children().size(); ++i) {
        dm.set(base + "." + list + "." + std::to_string(i), i % 2 ? odd : even);
      }
    } else {
      dm.set(base + "." + child, even);
    }
  }
  dm.set("lm_head", head);
  return dm;
}

std::size_t meta_tensors(const nn::Module& m) {
  std::size_t n = 0;
  for (const auto& [name, t] : m.state_dict()) n += t.is_meta() ? 1 : 0;
  return n;
}

}  // namespace

/// CPU bytes allocated at the peak of one greedy generation, above what was held before it.
std::size_t generate_peak(models::CausalLM& lm) {
  const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
  reset_peak_memory_stats(Device::cpu());
  (void)models::generate(lm, prompt(), greedy);
  return memory_stats(Device::cpu()).peak_allocated_bytes - before;
}

TEMPLATE_TEST_CASE("Every placement and policy gives the plain model's logits and tokens", "[dispatch][offload]",
                   policy::sync_offload, policy::prefetch<1>, policy::prefetch<2>, policy::prefetch<4>) {
  for (const std::string name : {"tiny_llama", "tiny_gpt2", "tiny_llama_tied_headdim"}) {
    INFO(name);
    const Reference ref = reference(name);
    std::size_t plain_peak = 0;
    {
      auto p = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false});
      plain_peak = generate_peak(*p.model);
    }
    struct Case {
      const char* what;
      Placement even, odd, head;
    };
    // One placement for everything needs force_hooks (else dispatch_model refuses the disk).
    for (const Case c : {Case{"cpu and disk", Placement::cpu(), Placement::disk(), Placement::cpu()},
                         Case{"disk and cpu, head on disk", Placement::disk(), Placement::cpu(), Placement::disk()},
                         Case{"all on disk", Placement::disk(), Placement::disk(), Placement::disk()}}) {
      INFO(c.what);
      accel_test::TempDir dir;
      auto [lm, ckpt] = meta_model(name);
      nn::Module& root = lm->module();
      const DeviceMap dm = block_map(root, c.even, c.odd, c.head);
      load_checkpoint_in_model(root, ckpt, {.device_map = dm, .offload_folder = dir.str(), .show_progress = false});
      const bool one_place = c.even == c.odd && c.odd == c.head;
      if (one_place) {
        CHECK_THROWS_WITH(dispatch_model<TestType>(root, dm, {.offload_dir = dir.str()}), Catch::Contains("disk_offload"));
      }
      dispatch_model<TestType>(root, dm, {.offload_dir = dir.str(), .force_hooks = one_place});
      CHECK(meta_tensors(root) > 0);
      CHECK(root.hook() != nullptr);
      for (const Device& d : lm->layer_devices()) CHECK(d == Device::cpu());
      CHECK(lm->logits(prompt()).to_vector<float>() == ref.logits);
      CHECK(models::generate(*lm, prompt(), greedy).new_tokens == ref.tokens);
      CHECK(meta_tensors(root) > 0);  // parked again after the calls
      const auto stream = hooks::offload_stream(root);
      REQUIRE(stream != nullptr);
      CHECK(stream->depth() == TestType::prefetch_depth);
      {
        // The memory bound: N + 1 ring buffers of the largest block beyond what the plain model needs.
        const std::size_t ring = (TestType::prefetch_depth + 1) * (stream->slot_bytes() + io::WeightFileReader::alignment);
        CHECK(generate_peak(*lm) <= plain_peak + ring);
        CHECK(stream->buffers() <= TestType::prefetch_depth + 1);
        CHECK(stream->stats().bytes_read > 0);
      }
      CHECK_THROWS_AS(root.to(Device::cpu()), DeviceError);  // weights on meta: moving is refused
    }
  }
}

TEST_CASE("load_checkpoint_and_dispatch plans, loads and dispatches under a CPU budget", "[dispatch][offload]") {
  for (const std::string name : {"tiny_llama", "tiny_gpt2"}) {
    INFO(name);
    const Reference ref = reference(name);
    for (const std::string strategy : {"auto", "sequential", "balanced", "balanced_low_0"}) {
      INFO(strategy);
      accel_test::TempDir dir;
      auto [lm, ckpt] = meta_model(name);
      nn::Module& root = lm->module();
      std::int64_t total = 0;
      for (const auto& [n, t] : root.named_parameters()) total += static_cast<std::int64_t>(t.nbytes());
      // The smallest share of the weights that keeps some of them resident: the planner keeps the
      // largest layer free on the CPU for the offloaded ones, and in these tiny models the
      // embedding is a third of everything.
      MaxMemory mm;
      for (int tenth = 3; tenth < 10; ++tenth) {
        mm = MaxMemory{};
        mm.add(Placement::cpu(), ByteSize(total * tenth / 10));
        bool cpu = false;
        for (const auto& [k, p] : dispatch::resolve_device_map(root, strategy, mm, {.no_split_module_classes = root.no_split_modules()})) cpu |= p.is_cpu();
        if (cpu) break;
      }
      DeviceMap used;
      dispatch::load_checkpoint_and_dispatch(root, ckpt,
                                             {.device_map = std::string(strategy), .max_memory = mm,
                                              .no_split_module_classes = root.no_split_modules(),
                                              .offload_folder = dir.str(), .show_progress = false},
                                             &used);
      bool disk = false, cpu = false;
      for (const auto& [k, p] : used) {
        disk |= p.is_disk();
        cpu |= p.is_cpu();
      }
      CHECK(disk);
      CHECK(cpu);
      CHECK(lm->logits(prompt()).to_vector<float>() == ref.logits);
      CHECK(models::generate(*lm, prompt(), greedy).new_tokens == ref.tokens);
    }
    auto [lm, ckpt] = meta_model(name);
    CHECK_THROWS_AS(dispatch::load_checkpoint_and_dispatch(lm->module(), ckpt, {.device_map = std::string("fastest")}),
                    ValueError);
  }
}

TEST_CASE("Every format and every placement gives the same logits", "[dispatch][offload][formats]") {
  for (const std::string name : {"tiny_llama", "tiny_gpt2"}) {
    INFO(name);
    const Reference ref = reference(name);
    const io::StateDict weights = io::load_state_dict(io::resolve_checkpoint_folder(model_dir(name)).path.string());
    std::int64_t total = 0;
    for (const auto& [n, t] : weights) total += static_cast<std::int64_t>(t.nbytes());
    // The same weights as one safetensors file, safetensors shards, one pytorch_model.bin and .bin shards.
    for (const auto& [label, shard, safe] : std::vector<std::tuple<std::string, std::int64_t, bool>>{
             {"model.safetensors", total * 2, true}, {"safetensors shards", total / 4, true},
             {"pytorch_model.bin", total * 2, false}, {".bin shards", total / 4, false}}) {
      INFO(label);
      accel_test::TempDir folder;
      fs::copy_file(model_dir(name) / "config.json", folder.file("config.json"));
      const io::ShardPlan plan = io::save_sharded(weights, folder.str(), shard, safe);
      CHECK(plan.is_sharded() == (shard < total));
      auto plain = dispatch::load_pretrained_causal_lm(folder.str(), {.show_progress = false});
      CHECK(plain.model->logits(prompt()).to_vector<float>() == ref.logits);
      // Half the weights on the CPU and the rest on disk, under each policy, from each format.
      MaxMemory half;
      half.add(Placement::cpu(), ByteSize(total / 2));
      auto placed = [&](std::size_t depth) {
        INFO("prefetch depth " << depth);
        dispatch::PretrainedModel p = dispatch::load_pretrained_causal_lm(
            folder.str(), {.show_progress = false, .device_map = std::string("auto"), .max_memory = half, .offload_depth = depth});
        bool disk = false;
        for (const auto& [k, where] : *p.device_map) disk |= where.is_disk();
        CHECK(disk);
        CHECK(p.model->logits(prompt()).to_vector<float>() == ref.logits);
        CHECK(models::generate(*p.model, prompt(), greedy).new_tokens == ref.tokens);
      };
      placed(0);
      placed(1);
      placed(2);
    }
  }
}

TEST_CASE("cpu_offload and disk_offload keep the logits; a bad offload file is a typed error", "[dispatch][offload]") {
  for (const std::string name : {"tiny_llama", "tiny_gpt2"}) {
    INFO(name);
    const Reference ref = reference(name);
    {
      auto p = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false});
      cpu_offload(p.model->module(), {.execution_device = Device::cpu()});
      CHECK(meta_tensors(p.model->module()) > 0);
      CHECK(p.model->logits(prompt()).to_vector<float>() == ref.logits);
      CHECK(models::generate(*p.model, prompt(), greedy).new_tokens == ref.tokens);
    }
    accel_test::TempDir dir;
    {
      auto p = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false});
      std::size_t written = 0, total = 0;
      disk_offload(p.model->module(), dir.str(),
                   {.offload_progress = [&](std::size_t done, std::size_t all) { written = done, total = all; }});
      CHECK(fs::is_regular_file(dir.path / "index.json"));
      CHECK(total > 0);
      CHECK(written == total);
      CHECK(p.model->logits(prompt()).to_vector<float>() == ref.logits);
    }
    {
      // dispatch_model writes the disk blocks of a loaded model into offload_dir, and says so.
      accel_test::TempDir blocks;
      auto p = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false});
      nn::Module& root = p.model->module();
      std::size_t written = 0, total = 0;
      dispatch_model(root, block_map(root, Placement::cpu(), Placement::disk(), Placement::cpu()),
                     {.offload_dir = blocks.str(),
                      .offload_progress = [&](std::size_t done, std::size_t all) { written = done, total = all; }});
      CHECK(fs::is_regular_file(blocks.path / "index.json"));
      CHECK(total > 0);
      CHECK(written == total);
      CHECK(p.model->logits(prompt()).to_vector<float>() == ref.logits);
      CHECK(models::generate(*p.model, prompt(), greedy).new_tokens == ref.tokens);
    }
    // The folder is reused as it is: a missing file, then a truncated one, name the tensor.
    const std::string victim = name == "tiny_gpt2" ? "transformer.h.0.mlp.c_fc.weight" : "model.layers.0.mlp.up_proj.weight";
    const fs::path dat = dir.path / (victim + ".dat");
    const auto size = fs::file_size(dat);
    // Under sync_offload the call that needs the weight fails; under prefetch, already the
    // dispatch that registers it.
    auto offload_and_call = [&]<class Policy>(Policy) {
      auto p = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false});
      disk_offload<Policy>(p.model->module(), dir.str());
      (void)p.model->logits(prompt());
    };
    fs::rename(dat, dir.path / "moved.dat");
    CHECK_THROWS_WITH(offload_and_call(policy::sync_offload{}), Catch::Contains(victim));
    CHECK_THROWS_WITH(offload_and_call(policy::prefetch<2>{}), Catch::Contains(victim));
    fs::rename(dir.path / "moved.dat", dat);
    fs::resize_file(dat, size / 2);
    CHECK_THROWS_WITH(offload_and_call(policy::sync_offload{}), Catch::Contains(victim));
    CHECK_THROWS_WITH(offload_and_call(policy::prefetch<2>{}), Catch::Contains(victim));
    // A file changed after the model was dispatched: the read that meets it says so.
    fs::resize_file(dat, size);
    {
      auto p = dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false});
      disk_offload<policy::prefetch<2>>(p.model->module(), dir.str());
      CHECK(p.model->logits(prompt()).to_vector<float>() != ref.logits);  // the zeros the resize wrote back
      fs::resize_file(dat, size + 4096);
      // The first read after the change fails: in this forward, or (when the block was read ahead
      // before the change) in the next.
      CHECK_THROWS_WITH(
          [&] {
            (void)p.model->logits(prompt());
            (void)p.model->logits(prompt());
          }(),
          Catch::Contains(victim) && Catch::Contains("changed on disk"));
    }
  }
}

TEST_CASE("cpu_offload_with_hook chains three models", "[dispatch][offload]") {
  std::vector<dispatch::PretrainedModel> models;
  std::vector<Reference> refs;
  for (const std::string name : {"tiny_llama", "tiny_gpt2", "tiny_qwen2"}) {
    refs.push_back(reference(name));
    models.push_back(dispatch::load_pretrained_causal_lm(model_dir(name), {.show_progress = false}));
  }
  std::shared_ptr<hooks::UserCpuOffloadHook> prev;
  std::vector<std::shared_ptr<hooks::UserCpuOffloadHook>> handles;
  for (auto& m : models) {
    auto [model, hook] = cpu_offload_with_hook(m.model->module(), Device::cpu(), prev);
    CHECK(&model == &m.model->module());
    CHECK(hook->hook()->prev_module_hook() == prev);
    handles.push_back(hook);
    prev = hook;
  }
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < models.size(); ++i) {
      CHECK(models[i].model->logits(prompt()).to_vector<float>() == refs[i].logits);
    }
  }
  handles.back()->offload();
  for (auto& h : handles) h->remove();
  for (auto& m : models) CHECK(m.model->module().hook() == nullptr);
}

TEST_CASE("dispatch_model checks its map and its folder", "[dispatch][offload]") {
  auto [lm, ckpt] = meta_model("tiny_llama");
  nn::Module& root = lm->module();
  DeviceMap partial;
  partial.set("lm_head", Placement::cpu());
  CHECK_THROWS_AS(dispatch_model(root, partial), ValueError);
  DeviceMap dm = block_map(root, Placement::cpu(), Placement::disk(), Placement::cpu());
  CHECK_THROWS_WITH(dispatch_model(root, dm), Catch::Contains("offload_dir"));
  DeviceMap all_disk;
  all_disk.set("", Placement::disk());
  CHECK_THROWS_WITH(dispatch_model(root, all_disk), Catch::Contains("disk_offload"));
  DeviceMap all_cpu;
  all_cpu.set("", Placement::cpu());
  CHECK_THROWS_WITH(dispatch_model(root, all_cpu), Catch::Contains("meta"));
}

TEST_CASE("main_device runs a map of cpu and disk on that device, as Accelerate does", "[dispatch][offload]") {
  // cuda:0 here is host memory behind the runtime's allocation and copy slots: enough to see
  // where each block's hook runs it and what it streams, not to compute.
  accel_test::HostBackedCuda cuda;
  accel_test::TempDir dir;
  auto p = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.show_progress = false});
  nn::Module& root = p.model->module();
  const DeviceMap dm = block_map(root, Placement::cpu(), Placement::disk(), Placement::cpu());
  dispatch_model<policy::sync_offload>(root, dm, {.main_device = Device::cuda(0), .offload_dir = dir.str()});
  CHECK(root.execution_device() == Device::cuda(0));
  for (const Device& d : p.model->layer_devices()) CHECK(d == Device::cuda(0));
  // Every block runs on cuda:0 and streams its weights there: the cpu ones too.
  for (const char* name : {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.up_proj", "lm_head"}) {
    INFO(name);
    const auto* hook = hooks::find_hook<hooks::AlignDevicesHookBase>(root.get_submodule(name));
    REQUIRE(hook != nullptr);
    CHECK(hook->execution_device() == Device::cuda(0));
    CHECK(hook->offload());
    CHECK(root.get_submodule(name).find_parameter("weight")->is_meta());
  }
  CHECK_THROWS_AS(dispatch_model(root, dm, {.main_device = Device::meta(), .offload_dir = dir.str()}), ValueError);

  // Without main_device the same map runs on the CPU, its cpu blocks resident.
  auto q = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.show_progress = false});
  dispatch_model<policy::sync_offload>(q.model->module(), dm, {.offload_dir = dir.str()});
  CHECK(q.model->module().execution_device() == Device::cpu());
  CHECK_FALSE(hooks::has_offloaded_params(q.model->module().get_submodule("model.layers.0.self_attn.q_proj")));
  CHECK(hooks::has_offloaded_params(q.model->module().get_submodule("model.layers.1.self_attn.q_proj")));
}

TEST_CASE("load_pretrained_causal_lm keeps what generation needs free and lowers the read-ahead to fit", "[dispatch][offload]") {
  const Reference ref = reference("tiny_llama");
  const auto config = nlohmann::json::parse(std::ifstream(model_dir("tiny_llama") / "config.json"));
  auto [meta, ckpt] = meta_model("tiny_llama");
  std::int64_t weights = 0;
  for (const auto& [n, t] : meta->module().named_parameters()) weights += static_cast<std::int64_t>(t.nbytes());
  const std::int64_t tokens = 8;
  const plan::GenerationReserve roomy =
      plan::generation_reserve(meta->module(), config, DType::f32, {{Placement::cpu(), ByteSize(1 << 30)}}, tokens, 2);
  REQUIRE(roomy.all_fit);
  REQUIRE(roomy.reservations.size() == 2);  // nothing streams: no ring
  const ByteSize fixed = roomy.reservations[0].bytes + roomy.reservations[1].bytes;
  // Room for the layer the planner keeps and one more, not two: prefetch<2> becomes prefetch<1>.
  const ByteSize budget = fixed + roomy.layer * 2 + ByteSize(roomy.layer.floor_bytes() / 2);
  REQUIRE(budget < fixed + roomy.layer + ByteSize(weights));  // so blocks stream

  auto p = dispatch::load_pretrained_causal_lm(
      model_dir("tiny_llama"), {.show_progress = false, .device_map = std::string("auto"),
                                .max_memory = MaxMemory{{Placement::cpu(), budget}}, .reserve_tokens = tokens, .offload_depth = 2});
  REQUIRE(p.generation);
  CHECK(p.generation->asked_depth == 2);
  CHECK(p.offload_depth == 1);
  REQUIRE(p.generation->reservations.size() == 3);
  CHECK(p.generation->reservations[2].bytes == roomy.layer);
  CHECK(p.generation->reserve() == MaxMemory{{Placement::cpu(), fixed + roomy.layer}});
  const auto stream = hooks::offload_stream(p.model->module());
  REQUIRE(stream);
  CHECK(stream->depth() == 1);
  // What the plan put on the CPU leaves the reservations free.
  std::int64_t on_cpu = 0;
  for (const auto& [name, t] : p.model->module().named_parameters()) {
    if (p.device_map->lookup(name) == Placement::cpu()) on_cpu += static_cast<std::int64_t>(t.nbytes());
  }
  CHECK(ByteSize(on_cpu) + fixed + roomy.layer <= budget);
  CHECK(p.model->logits(prompt()).to_vector<float>() == ref.logits);

  // Without reserve_tokens the ring alone is kept: three layers' room holds the asked depth.
  const ByteSize ring_only = roomy.layer * 3;
  REQUIRE(ring_only < roomy.layer + ByteSize(weights));
  auto q = dispatch::load_pretrained_causal_lm(
      model_dir("tiny_llama"), {.show_progress = false, .device_map = std::string("auto"),
                                .max_memory = MaxMemory{{Placement::cpu(), ring_only}}, .offload_depth = 2});
  REQUIRE(q.generation);
  CHECK(q.offload_depth == 2);
  REQUIRE(q.generation->reservations.size() == 1);
  CHECK(q.generation->reservations[0].what.starts_with("read-ahead"));
  CHECK(q.model->logits(prompt()).to_vector<float>() == ref.logits);

  // A budget that cannot hold one block beside the KV cache and activations is refused, naming it.
  CHECK_THROWS_WITH(dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"),
                                                        {.show_progress = false, .device_map = std::string("auto"),
                                                         .max_memory = MaxMemory{{Placement::cpu(), fixed}}, .reserve_tokens = tokens}),
                    Catch::Contains("cannot hold one block"));
}

TEST_CASE("load_pretrained_causal_lm keeps keep_in_fp32_modules in float32", "[dispatch]") {
  auto p = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"),
                                               {.dtype = DType::bf16, .show_progress = false, .keep_in_fp32_modules = {"lm_head"}});
  nn::Module& root = p.model->module();
  CHECK(root.get_parameter("lm_head.weight").dtype() == DType::f32);
  CHECK(root.get_parameter("model.layers.0.mlp.up_proj.weight").dtype() == DType::bf16);
  // The kept head computes in float32 on the bfloat16 hidden states.
  const Tensor logits = p.model->logits(prompt());
  CHECK(logits.dtype() == DType::f32);
  CHECK(logits.size(2) == 128);
  // Against the all-bfloat16 model: the same hidden states, the head's product rounded less.
  auto all_bf16 = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.dtype = DType::bf16, .show_progress = false});
  const std::vector<float> want = all_bf16.model->logits(prompt()).to(DType::f32).to_vector<float>();
  const std::vector<float> got = logits.to_vector<float>();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(0.02).margin(0.02));
  // Generation holds its KV cache in the dtype the blocks compute in, not the kept head's.
  CHECK(p.model->activation_dtype() == DType::bf16);
  CHECK(models::generate(*p.model, prompt(), greedy).new_tokens.front().size() == 5);
}

namespace {
/// A backend that quantizes nothing and answers `placement` when it is given no map (a given map
/// is kept; no placement: no opinion, as QuantizerDefaults).
struct PlacingQuantizer : dispatch::QuantizerDefaults {
  explicit PlacingQuantizer(std::optional<plan::DeviceMap> p) : placement(std::move(p)) {}
  std::optional<plan::DeviceMap> placement;
  std::string name() const { return "placing"; }
  std::optional<plan::DeviceMap> update_device_map(std::optional<plan::DeviceMap> given) {
    return given ? given : placement;
  }
};
}  // namespace

TEST_CASE("load_pretrained_causal_lm consults the quantizer's update_device_map for a map or none", "[dispatch]") {
  const Reference ref = reference("tiny_llama");
  plan::DeviceMap head_on_disk, cpu;
  head_on_disk.set("model", Placement::cpu());
  head_on_disk.set("lm_head", Placement::disk());
  cpu.set("", Placement::cpu());
  // No map: the quantizer's placement is used, the head streamed from disk.
  auto placed = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"),
                                                    {.show_progress = false, .quantizer = PlacingQuantizer(head_on_disk)});
  REQUIRE(placed.device_map);
  CHECK(placed.device_map->lookup("lm_head.weight") == Placement::disk());
  CHECK(hooks::has_offloaded_params(placed.model->module().get_submodule("lm_head")));
  CHECK(placed.model->logits(prompt()).to_vector<float>() == ref.logits);
  // A given map is the quantizer's to keep; its "all on the CPU" for no map is a placement too.
  auto kept = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.show_progress = false, .device_map = cpu,
                                                                          .quantizer = PlacingQuantizer(head_on_disk)});
  CHECK(kept.device_map == cpu);
  auto on_cpu = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"),
                                                    {.show_progress = false, .quantizer = PlacingQuantizer(cpu)});
  CHECK(on_cpu.device_map == cpu);
  CHECK_FALSE(hooks::has_offloaded_params(on_cpu.model->module().get_submodule("lm_head")));
  // No opinion (the defaults' answer) leaves the model unplaced, as no quantizer does.
  auto unplaced = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"),
                                                      {.show_progress = false, .quantizer = PlacingQuantizer(std::nullopt)});
  CHECK_FALSE(unplaced.device_map);
  CHECK(unplaced.model->logits(prompt()).to_vector<float>() == ref.logits);
}
