// The main use of accel, end to end, on a model bigger than the memory it may use:
//
//   config.json --> model on meta (no bytes) --> sizes --> infer_auto_device_map(max_memory)
//     --> load_checkpoint_in_model: each weight read once, straight to its placement;
//         weights mapped to "disk" are recorded in the offload folder without a copy
//
//   big_model_inference                                   built-in LLaMA-shaped model, random weights
//   big_model_inference --config C.json --checkpoint P    your model (GPT-2 or LLaMA family)
//   options: --max-memory cpu=40MB  (default: about 60% of the model on the cpu, the rest on disk)
//            --dtype bfloat16       (the dtype the weights are sized and loaded in)
//
// With the built-in model the checkpoint is written first, as a sharded safetensors folder, to a
// temporary directory that is removed at the end. Every tensor is checked against the checkpoint
// after loading, and the weights kept in memory are compared with the budget.
#include <accel/accel.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace {

namespace fs = std::filesystem;

// A LLaMA of ~34M parameters (68 MB in bf16): big enough to need a split, small enough to write.
const char* const kDefaultConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 8192, "hidden_size": 512, "intermediate_size": 1408,
  "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"
})";

struct Args {
  std::optional<std::string> config, checkpoint, max_memory;
  accel::DType dtype = accel::DType::bf16;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "big_model_inference: %s\nusage: big_model_inference [--config C.json --checkpoint PATH] "
                       "[--max-memory cpu=40MB] [--dtype bfloat16]\n", msg);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing a value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--config") a.config = value;
    else if (flag == "--checkpoint") a.checkpoint = value;
    else if (flag == "--max-memory") a.max_memory = value;
    else if (flag == "--dtype") a.dtype = accel::dtype_from_string(value);
    else usage(("unknown option " + flag).c_str());
  }
  if (a.config.has_value() != a.checkpoint.has_value()) usage("--config and --checkpoint go together");
  return a;
}

double mib(double bytes) { return bytes / (1 << 20); }

bool same_bytes(const accel::Tensor& a, const accel::Tensor& b) {
  const accel::Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::string budget_str(const accel::MaxMemory& mm) {
  std::string out;
  for (const auto& [key, size] : mm) {
    char buf[64];
    if (key.is_disk()) std::snprintf(buf, sizeof buf, "disk");
    else std::snprintf(buf, sizeof buf, "%s=%.1fMiB", key.str().c_str(), mib(size.bytes()));
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

std::shared_ptr<accel::nn::Module> skeleton(const nlohmann::json& config, accel::DType dtype) {
  auto scope = accel::nn::init_empty_weights();
  return accel::models::model_from_hf_config(config, dtype);
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace accel;
  using clock = std::chrono::steady_clock;
  const Args args = parse(argc, argv);
  const nlohmann::json config =
      nlohmann::json::parse(args.config ? std::string(std::istreambuf_iterator<char>(std::ifstream(*args.config).rdbuf()), {})
                                        : std::string(kDefaultConfig));

  const fs::path work = fs::temp_directory_path() / ("accel_big_model_" + std::to_string(::getpid()));
  fs::create_directories(work);
  struct Cleanup {
    fs::path p;
    ~Cleanup() { std::error_code ec; fs::remove_all(p, ec); }
  } cleanup{work};

  std::string checkpoint;
  if (args.checkpoint) {
    checkpoint = *args.checkpoint;
  } else {
    // The built-in model's checkpoint: random weights, saved in 16 MB shards as transformers saves.
    auto source = models::model_from_hf_config(config, args.dtype);
    io::StateDict sd;
    set_seed(0);
    for (const auto& [name, t] : source->state_dict()) sd.insert_or_assign(name, randn(t.shape(), t.dtype()));
    checkpoint = (work / "checkpoint").string();
    const auto plan = io::save_sharded(sd, checkpoint, std::string("16MB"));
    std::printf("0. wrote the built-in model's checkpoint: %zu shards in %s\n", plan.filenames.size(), checkpoint.c_str());
  }

  // 1. The skeleton: every parameter on meta, no storage.
  const std::size_t cpu_before = memory_stats(Device::cpu()).allocated_bytes;
  auto t0 = clock::now();
  auto model = skeleton(config, args.dtype);
  const double build_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  std::int64_t params = 0;
  for (const auto& [n, t] : model->named_parameters()) params += t.numel();
  std::printf("1. %s on meta: %.1fM parameters in %.2f ms, %zu cpu bytes allocated (buffers stay on the cpu)\n", model->class_name().c_str(),
              params / 1e6, build_ms, memory_stats(Device::cpu()).allocated_bytes - cpu_before);

  // 2. Sizes, as Accelerate computes them.
  const auto sizes = calculate_maximum_sizes(*model);
  std::printf("2. total %.1f MiB, largest layer %.1f MiB (%s)\n", mib(sizes.total_size.bytes()),
              mib(sizes.largest_layer.max_size.bytes()),
              sizes.largest_layer.layer_names.empty() ? "-" : sizes.largest_layer.layer_names.front().c_str());

  // 3. The device map under the budget (GPUs would come first when present; this runs on the cpu).
  const MaxMemory max_memory =
      args.max_memory ? parse_max_memory(*args.max_memory)
                      : MaxMemory{{Placement::cpu(), ByteSize(static_cast<std::int64_t>(sizes.total_size.bytes() * 0.6))},
                                  {Placement::disk(), ByteSize(std::int64_t{1} << 50)}};
  std::optional<double> cpu_budget;
  for (const auto& [key, size] : max_memory) {
    if (key.is_cpu()) cpu_budget = size.bytes();
  }
  InferOptions opts;
  opts.no_split_module_classes = model->no_split_modules();
  opts.sizes.dtype = args.dtype;
  t0 = clock::now();
  const DeviceMap device_map = infer_auto_device_map(*model, max_memory, opts);
  const double plan_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  std::printf("3. device map in %.3f ms under max_memory %s:\n   %s\n", plan_ms, budget_str(max_memory).c_str(),
              to_ordered_json(device_map).dump().c_str());

  // 4. Load: cpu weights are views of the mapped shards, disk weights index entries into them.
  reset_peak_memory_stats(Device::cpu());
  t0 = clock::now();
  const LoadResult result = load_checkpoint_in_model(
      *model, checkpoint, {.device_map = device_map, .offload_folder = (work / "offload").string(), .dtype = args.dtype});
  const double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  std::map<std::string, double> held;
  for (const auto& [name, t] : model->state_dict()) held[t.device().str()] += static_cast<double>(t.nbytes());
  std::printf("4. loaded %zu files in %.1f ms: %zu missing, %zu unexpected keys; %zu weights offloaded to disk\n",
              result.checkpoint_files.size(), load_ms, result.missing_keys.size(), result.unexpected_keys.size(),
              result.offload_index.size());
  for (const auto& [dev, bytes] : held) {
    std::printf("   %-5s holds %8.1f MiB of weights\n", dev.c_str(), mib(bytes));
  }
  const double cpu_held = held.count("cpu") ? held["cpu"] : 0.0;
  const std::size_t peak = memory_stats(Device::cpu()).peak_allocated_bytes;
  std::printf("   cpu peak allocation during the load: %.1f MiB (weights in the cpu's share are mapped, not copied)\n",
              mib(static_cast<double>(peak)));

  // 5. Every loaded tensor equals the checkpoint's (disk ones read back through the offload folder).
  std::size_t checked = 0, differing = 0;
  std::optional<io::OffloadedWeightsLoader> offloaded;
  if (!result.offload_index.empty()) offloaded.emplace(std::nullopt, (work / "offload").string());
  for (const auto& file : io::resolve_checkpoint_files(checkpoint)) {
    if (!file.ends_with(".safetensors")) continue;
    const auto f = io::SafetensorsFile::open(file);
    for (const auto& name : f.keys()) {
      if (!model->has_tensor(name)) continue;
      const Tensor expect = f.tensor(name).to(args.dtype);
      const Tensor got = model->get_tensor(name).device().is_meta() ? offloaded->at(name) : model->get_tensor(name);
      ++checked;
      if (!same_bytes(got.to(Device::cpu()), expect)) ++differing;
    }
  }
  std::printf("5. %zu tensors compared with the checkpoint: %zu differ\n", checked, differing);
  const bool in_budget = !cpu_budget || cpu_held <= *cpu_budget;
  if (cpu_budget) {
    std::printf("   cpu weights %.1f MiB %s the %.1f MiB budget\n", mib(cpu_held), in_budget ? "within" : "OVER",
                mib(*cpu_budget));
  }
  return differing == 0 && in_budget && result.missing_keys.empty() ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "big_model_inference: %s\n", e.what());
  return 1;
}
