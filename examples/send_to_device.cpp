// Moving a whole batch, whatever its shape, with one call: Accelerate's send_to_device.
//
//   auto on_gpu = send_to_device(batch, Device::cuda(0));                               every tensor moved
//   auto on_gpu = send_to_device(batch, Device::cuda(0), false, nested::skip_keys{"labels"});   labels stay
//
// The batch is walked at compile time: maps, vectors, tuples, optionals, variants and plain
// structs are rebuilt around the moved tensors; strings and numbers are copied as they are; a
// type of your own moves when it has `to(Device)`. A tensor already on the target is shared, not
// copied, so sending a CPU batch to the CPU costs nothing. The target here is the first GPU when
// there is one; without a GPU it is the meta device, which shows the same walk: every moved
// tensor keeps its shape and dtype and drops its bytes.
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "accel/core/device_backend.hpp"
#include "accel/nested/nested.hpp"

using namespace accel;

namespace {

/// A leaf of the user's own: send_to_device calls its to(Device).
struct Image {
  Tensor pixels;
  std::string path;
  Image to(Device d) const { return {pixels.to(d), path}; }
};

Tensor ids(std::vector<std::int64_t> v) { return Tensor::from_vector(v, Shape{1, static_cast<std::int64_t>(v.size())}); }

}  // namespace

int main() try {
  const Device target = cuda_is_available() ? Device::cuda(0) : Device::meta();
  std::map<std::string, Tensor> text{{"input_ids", ids({5, 6, 7, 8})},
                                     {"attention_mask", ids({1, 1, 1, 0})},
                                     {"labels", ids({6, 7, 8, -100})}};
  std::vector<Image> images{{Tensor::ones({3, 4, 4}), "cat.png"}, {Tensor::zeros({3, 4, 4}), "dog.png"}};
  // (text, images, a note, the step): what a data loader of a multimodal model might yield.
  auto batch = std::make_tuple(text, images, std::string("shard-03"), 1200);

  // Already on the CPU: the same tensors come back.
  auto same = send_to_device(batch, Device::cpu());
  const bool shared = std::get<0>(same).at("input_ids").is_same(text.at("input_ids")) &&
                      std::get<1>(same)[0].pixels.is_same(images[0].pixels);
  std::printf("to cpu: tensors shared, not copied: %s\n", shared ? "yes" : "NO");

  // To the target, leaving the labels where they are (the loss is computed on the CPU).
  auto moved = send_to_device(batch, target, /*non_blocking=*/false, nested::skip_keys{"labels"});
  const auto& [m_text, m_images, note, step] = moved;
  bool ok = shared;
  for (const auto& [key, t] : m_text) {
    const bool skipped = key == "labels";
    const bool right = skipped ? t.is_same(text.at(key)) : t.device() == target && t.shape() == text.at(key).shape();
    std::printf("  %-15s %-7s %s%s\n", key.c_str(), t.device().str().c_str(), t.shape().str().c_str(),
                skipped ? "  (skip_keys: the same tensor)" : "");
    ok &= right;
  }
  for (std::size_t i = 0; i < m_images.size(); ++i) {
    std::printf("  %-15s %-7s %s\n", m_images[i].path.c_str(), m_images[i].pixels.device().str().c_str(),
                m_images[i].pixels.shape().str().c_str());
    ok &= m_images[i].pixels.device() == target && m_images[i].path == images[i].path;
  }
  std::printf("  note \"%s\", step %d: copied as they are\n", note.c_str(), step);
  ok &= note == "shard-03" && step == 1200;

  // The values survive the trip (only a real device holds them; meta keeps shapes alone).
  if (!target.is_meta()) {
    auto back = send_to_device(moved, Device::cpu());
    ok &= std::get<0>(back).at("input_ids").to_vector<std::int64_t>() == text.at("input_ids").to_vector<std::int64_t>();
    ok &= std::get<1>(back)[0].pixels.to_vector<float>() == images[0].pixels.to_vector<float>();
  }

  // The walk also answers questions about a batch: where it is and how many rows it has.
  std::printf("find_device: %s, find_batch_size: %lld\n", find_device(moved)->str().c_str(),
              static_cast<long long>(find_batch_size(moved)));
  ok &= find_device(moved) == target && find_batch_size(moved) == 1;
  std::printf("%s\n", ok ? "every tensor where it should be" : "MISPLACED tensors");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "send_to_device: %s\n", e.what());
  return 1;
}
