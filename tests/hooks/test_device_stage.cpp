// DeviceStage (the GPU half of prefetch<N>) over a stand-in device runtime: host memory behind
// cuda:0's slots, copies done at once, streams and events counted. It proves what needs no GPU:
// the bytes of every piece land where its view says, buffers stay within depth + 1, every
// acquire makes the compute stream wait for the copy and every release orders the next
// overwrite, disk units flow through the host stream, and the hooks use the stage on a GPU. The
// CUDA suite (tests/cuda_kernels) runs the same pipeline on a real device.
#include <catch2/catch.hpp>

#include "../host_backed_cuda.hpp"
#include "../temp_dir.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accel/core/device_backend.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/hooks/hooks.hpp"
#include "accel/io/offload.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/layers.hpp"

using namespace accel;

namespace device_stage_test {

struct Counts {
  std::atomic<int> streams{0}, compute_waits{0}, copy_waits{0}, compute_records{0}, copy_records{0}, syncs{0};
  std::atomic<std::uint64_t> copied{0};
};
Counts counts;
int fake_stream_tag;  // the copy stream's handle: its address

/// The host-backed stand-in (tests/host_backed_cuda.hpp) with counted streams and events.
class FakeCuda {
 public:
  FakeCuda() {
    counts.compute_waits = counts.copy_waits = counts.compute_records = counts.copy_records = counts.syncs = 0;
    counts.streams = 0;
    counts.copied = 0;
    DeviceBackend& b = cuda_backend();
    b.stream_create = [](int) -> void* {
      ++counts.streams;
      return &fake_stream_tag;
    };
    b.stream_destroy = [](int, void*) noexcept {};
    b.event_create = [](int) -> void* { return new int(0); };
    b.event_destroy = [](int, void* e) noexcept { delete static_cast<int*>(e); };
    b.event_record = [](int, void* e, void* s) {
      ++*static_cast<int*>(e);
      ++(s ? counts.copy_records : counts.compute_records);
    };
    b.stream_wait_event = [](int, void* s, void* e) {
      REQUIRE(*static_cast<int*>(e) > 0);  // waiting on an event never recorded would be a bug
      ++(s ? counts.copy_waits : counts.compute_waits);
    };
    b.event_synchronize = [](int, void*) { ++counts.syncs; };
    b.copy_on_stream = [](void* dst, Device dd, const void* src, Device sd, std::size_t n, void* s) {
      REQUIRE(s == &fake_stream_tag);  // copies go on the copy stream, never the compute one
      REQUIRE(dd.is_cuda());
      REQUIRE(sd.is_cpu());
      std::memcpy(dst, src, n);
      counts.copied += n;
    };
  }

 private:
  accel_test::HostBackedCuda host_;  // first: the slots above go on top of it
};

std::string write_floats(const accel_test::TempDir& dir, const std::string& name, float start, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * 4));
  return path;
}

std::vector<float> on_host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

}  // namespace device_stage_test

using namespace device_stage_test;

TEST_CASE("A device stage copies units ahead into depth + 1 device buffers, ordered by events", "[hooks][stage]") {
  FakeCuda fake;
  accel_test::TempDir dir;
  const std::string file = write_floats(dir, "w.bin", 0.0f, 20000);
  const Device gpu = Device::cuda(0);
  {
    hooks::WeightStream host(2);
    hooks::DeviceStage& stage = host.device_stage(gpu);
    CHECK(&stage == &host.device_stage(gpu));  // one per GPU
    CHECK(counts.streams == 1);
    std::vector<Tensor> kept;  // host pieces
    std::vector<std::size_t> ids;
    for (int u = 0; u < 5; ++u) {
      // Unit u: a host tensor of 300 + u floats, then one disk weight of 1000 floats at 1000 * u + 1.
      std::vector<float> v(300 + static_cast<std::size_t>(u));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
      kept.push_back(Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size())}));
      const std::size_t hu = host.add_unit("disk" + std::to_string(u),
                                           {{"d" + std::to_string(u), file, 4 * (1000 * static_cast<std::uint64_t>(u) + 1),
                                             4000, DType::f32, Shape{1000}, DType::f32}});
      ids.push_back(stage.add_unit("unit" + std::to_string(u), hu,
                                   {{DType::f32, Shape{300 + u}, std::nullopt, kept.back()},
                                    {DType::f32, Shape{1000}, 0, {}}}));
    }
    const std::size_t before = memory_stats(gpu).allocated_bytes;
    reset_peak_memory_stats(gpu);
    for (int round = 0; round < 3; ++round) {
      for (std::size_t u : ids) {
        std::vector<Tensor> w = stage.acquire(u);
        REQUIRE(w.size() == 2);
        CHECK(w[0].device() == gpu);
        CHECK(reinterpret_cast<std::uintptr_t>(w[1].data_ptr()) % hooks::DeviceStage::alignment == 0);
        const auto a = on_host(w[0]), b = on_host(w[1]);
        CHECK(a.size() == 300 + u);
        CHECK(a.back() == static_cast<float>(299 + u));
        CHECK(b.front() == static_cast<float>(1000 * u + 1));
        CHECK(b.back() == static_cast<float>(1000 * u + 1000));
        w.clear();
        stage.release(u);
      }
    }
    CHECK(stage.buffers() <= 3);
    CHECK(memory_stats(gpu).peak_allocated_bytes - before <= 3 * (stage.slot_bytes() + hooks::DeviceStage::alignment));
    // Each acquire waited (on the GPU) for its copy, each release was recorded for the next overwrite.
    CHECK(counts.compute_waits == 15);
    CHECK(counts.compute_records == 15);
    CHECK(counts.copy_records >= 15);
    CHECK(counts.copy_waits >= 15 - 3);  // every fill of a buffer used before
    CHECK(counts.syncs >= 15);           // each disk unit went back to the host ring after its copy
    CHECK(host.buffers() <= 3);
    // The last acquire queued the next round's first units: the ring's thread may be between a
    // copy and its count. Its queue is finite, so the two settle (under load, after a while).
    const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (stage.stats().bytes_read != counts.copied.load() && std::chrono::steady_clock::now() < settle) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(stage.stats().bytes_read == counts.copied.load());
  }
  CHECK(memory_stats(gpu).allocated_bytes == 0);
}

TEST_CASE("A device stage checks its pieces, and a failed disk read reaches the caller", "[hooks][stage]") {
  FakeCuda fake;
  accel_test::TempDir dir;
  const std::string file = write_floats(dir, "w.bin", 0.0f, 1000);
  {
    hooks::WeightStream host(1);
    hooks::DeviceStage& stage = host.device_stage(Device::cuda(0));
    CHECK_THROWS_AS(stage.add_unit("bad", std::nullopt, {{DType::f32, Shape{4}, std::nullopt, Tensor::ones({5})}}), ShapeError);
    CHECK_THROWS_AS(stage.add_unit("bad", std::nullopt, {{DType::f32, Shape{4}, 0, {}}}), ValueError);
    const std::size_t hu = host.add_unit("d", {{"d", file, 0, 4000, DType::f32, Shape{1000}, DType::f32}});
    const std::size_t u = stage.add_unit("u", hu, {{DType::f32, Shape{1000}, 0, {}}});
    std::filesystem::resize_file(file, 8000);
    CHECK_THROWS_WITH(stage.acquire(u), Catch::Contains("changed on disk"));
  }
  CHECK_THROWS_AS(hooks::WeightStream(1).device_stage(Device::cpu()), DeviceError);
}

TEST_CASE("Offloading hooks on a GPU under prefetch<N> take their weights from the device stage", "[hooks][stage]") {
  FakeCuda fake;
  accel_test::TempDir dir;
  const Device gpu = Device::cuda(0);
  {
    nn::Sequential net;
    std::vector<std::vector<float>> expect;
    for (int i = 0; i < 4; ++i) {
      auto l = std::make_shared<nn::Linear>(8, 8);
      l->find_tensor_cell("weight")->get()->data.fill_(0.5 * (i + 1));
      l->find_tensor_cell("bias")->get()->data.fill_(-1.0 * i);
      net.push_back(l);
    }
    for (const auto& [name, t] : net.state_dict()) expect.push_back(t.to_vector<float>());
    // Layers 0 and 1 stay in CPU memory, 2 and 3 go to an offload folder.
    io::StateDict in_memory, on_disk;
    for (const auto& [name, t] : net.state_dict()) (name[0] < '2' ? in_memory : on_disk).insert_or_assign(name, t.clone());
    io::offload_state_dict(dir.str(), on_disk);
    auto loader = std::make_shared<io::OffloadedWeightsLoader>(in_memory, dir.str());
    hooks::attach_align_device_hook<policy::prefetch<2>>(
        net, {.execution_device = gpu, .offload = true, .weights_map = hooks::WeightsMap(loader)});
    for (int pass = 0; pass < 2; ++pass) {
      auto scope = hooks::align_module_device(net);
      std::size_t k = 0;
      for (const auto& [name, t] : net.state_dict()) {
        CHECK(t.device() == gpu);
        CHECK(on_host(t) == expect[k++]);
      }
    }
    for (const auto& [name, t] : net.state_dict()) CHECK(t.is_meta());
    CHECK(counts.compute_waits == 8);  // four hooks, two passes
    CHECK(counts.copied >= 2 * 4 * (8 * 8 + 8) * 4);
    hooks::remove_hook_from_submodules(net);
  }
  CHECK(memory_stats(gpu).allocated_bytes == 0);
}
