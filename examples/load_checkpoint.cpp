// Loading a checkpoint into a model built on meta, with one layer offloaded to disk.
//
// Writes a tiny two-layer checkpoint (model.safetensors) to a temporary folder, builds the same
// model under init_empty_weights (no bytes), loads it with a device map that keeps everything on
// the CPU except layers.1, which goes to disk, and prints where every tensor ended up. The disk
// layer costs no copy: its offload index entries point into the safetensors file.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <unistd.h>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"
#include "accel/plan/device_map.hpp"

namespace {

std::shared_ptr<accel::nn::Module> build_model() {
  using namespace accel::nn;
  auto root = std::make_shared<Module>("TinyModel");
  root->register_module("embed", std::make_shared<Embedding>(16, 8));
  auto layers = root->register_module("layers", std::make_shared<ModuleList>());
  layers->push_back(std::make_shared<Linear>(8, 8));
  layers->push_back(std::make_shared<Linear>(8, 8));
  root->register_module("norm", std::make_shared<LayerNorm>(8));
  return root;
}

}  // namespace

int main() {
  using namespace accel;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("accel_load_checkpoint_" + std::to_string(::getpid()));
  fs::create_directories(dir);

  // 1. A checkpoint: the model built on the cpu, its state dict saved as safetensors.
  {
    auto source = build_model();
    io::StateDict sd;
    for (const auto& [name, t] : source->state_dict()) sd.insert_or_assign(name, t);
    io::save_file(sd, (dir / "model.safetensors").string(), {{"format", "pt"}});
  }

  // 2. The model skeleton on meta: shapes and dtypes, no storage.
  std::shared_ptr<nn::Module> model;
  {
    auto scope = nn::init_empty_weights();
    model = build_model();
  }

  // 3. Load with one layer on disk.
  DeviceMap device_map;
  device_map.set("embed", Placement::cpu());
  device_map.set("layers.0", Placement::cpu());
  device_map.set("layers.1", Placement::disk());
  device_map.set("norm", Placement::cpu());
  const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
  const LoadResult result = load_checkpoint_in_model(
      *model, dir.string(), {.device_map = device_map, .offload_folder = (dir / "offload").string()});

  std::printf("%-18s %-10s %-8s %s\n", "tensor", "placement", "device", "shape");
  for (const auto& [name, t] : model->state_dict()) {
    const auto placement = device_map.lookup(name);
    std::printf("%-18s %-10s %-8s %s\n", name.c_str(), placement ? placement->str().c_str() : "-", t.device().str().c_str(),
                t.shape().str().c_str());
  }
  std::printf("\noffload index (%s):\n%s\n", (dir / "offload" / "index.json").string().c_str(),
              io::offload_index_json(result.offload_index).c_str());
  std::printf("\ncpu bytes allocated by the load: %zu (cpu weights are mapped views of the file)\n",
              memory_stats(Device::cpu()).allocated_bytes - before);
  std::printf("missing keys: %zu, unexpected keys: %zu\n", result.missing_keys.size(), result.unexpected_keys.size());

  model.reset();
  fs::remove_all(dir);
  return 0;
}
