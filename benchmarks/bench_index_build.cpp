// Building and querying the per-tensor indexes of a large mixture-of-experts model, next to the
// plain way of doing the same with the same containers, in one run.
//
//   offload index   one entry per disk weight (load_checkpoint_in_model, offload_state_dict):
//                   OffloadIndexMap::set against nlohmann::ordered_json's operator[]
//   device map      one lookup per tensor on a map split down to the experts:
//                   DeviceMap::lookup against a scan of every key for the longest covering one
//
// The shape is DeepSeek-V3's: 61 layers of 256 experts with three weights each (46,848 expert
// tensors; its whole index has about 91,000). ordered_json's operator[] and a key scan compare a
// name with every key already there, so both plain ways grow with the square of the count.
// Repetitions alternate between the two ways; medians are printed.
//
//   bench_index_build [layers=61] [experts=256] [repetitions=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/io/offload_index_map.hpp"
#include "accel/plan/device_map.hpp"

namespace {

using accel::Placement;
using accel::plan::DeviceMap;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::ordered_json entry_of(const std::string& name) {
  return {{"safetensors_file", "/models/model-00042-of-00163.safetensors"}, {"weight_name", name}, {"dtype", "bfloat16"}};
}

/// The longest key of `dm` covering `name`, found by looking at every key.
std::optional<Placement> scan_lookup(const DeviceMap& dm, const std::string& name) {
  std::optional<Placement> best;
  std::size_t best_len = 0;
  for (const auto& [k, p] : dm) {
    if (DeviceMap::covers(k, name) && (!best || k.size() > best_len)) {
      best = p;
      best_len = k.size();
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 61;
  const int experts = argc > 2 ? std::atoi(argv[2]) : 256;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<std::string> tensors;
  DeviceMap dm;
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts; ++e) {
      const std::string expert = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e);
      dm.set(expert, Placement::gpu(e % 8));
      for (const char* w : {"gate_proj", "up_proj", "down_proj"}) tensors.push_back(expert + "." + w + ".weight");
    }
  }
  std::printf("%zu expert tensors, a device map of %zu keys, medians of %d repetitions\n\n", tensors.size(), dm.size(),
              reps);

  std::vector<double> map_set, json_set, dm_lookup, scan;
  std::size_t sink = 0;
  bool agree = true;
  for (int r = 0; r < reps; ++r) {
    map_set.push_back(seconds([&] {
      accel::io::OffloadIndexMap ix;
      for (const auto& t : tensors) ix.set(t, entry_of(t));
      agree = agree && ix.size() == tensors.size();
    }));
    json_set.push_back(seconds([&] {
      accel::io::OffloadIndex ix = accel::io::OffloadIndex::object();
      for (const auto& t : tensors) ix[t] = entry_of(t);
      agree = agree && ix.size() == tensors.size();
    }));
    dm_lookup.push_back(seconds([&] {
      for (const auto& t : tensors) sink += dm.lookup(t).has_value();
    }));
    scan.push_back(seconds([&] {
      for (const auto& t : tensors) sink += scan_lookup(dm, t).has_value();
    }));
  }
  for (const auto& t : tensors) agree = agree && dm.lookup(t) == scan_lookup(dm, t);
  agree = agree && sink == 2 * static_cast<std::size_t>(reps) * tensors.size();
  const double a = median(map_set), b = median(json_set), c = median(dm_lookup), d = median(scan);
  std::printf("offload index, %zu entries     OffloadIndexMap %8.3f s   ordered_json operator[] %8.3f s   %6.0fx\n",
              tensors.size(), a, b, b / a);
  std::printf("device map, %zu lookups        DeviceMap::lookup %6.3f s   scan of every key       %8.3f s   %6.0fx\n",
              tensors.size(), c, d, d / c);
  std::printf("\nboth ways hold the same entries and find the same placements: %s\n", agree ? "yes" : "NO");
  return agree ? 0 : 1;
}
