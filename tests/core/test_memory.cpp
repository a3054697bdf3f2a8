// Allocator counters are exact: current and peak bytes follow every allocation and free, and a
// budget turns an over-large allocation into OutOfMemoryError carrying device and size.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "accel/core/mapped_file.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"

using namespace accel;

TEST_CASE("host allocations move current and peak counters exactly") {
  const Device cpu = Device::cpu();
  const auto base = memory_stats(cpu);
  reset_peak_memory_stats(cpu);
  REQUIRE(memory_stats(cpu).peak_allocated_bytes == base.allocated_bytes);
  {
    Tensor a = Tensor::empty({1000}, DType::f32);  // 4000 bytes
    REQUIRE(memory_stats(cpu).allocated_bytes == base.allocated_bytes + 4000);
    {
      Tensor b = Tensor::empty({10, 10}, DType::f64);  // 800 bytes
      Tensor view = b.narrow(0, 2, 3);                 // views allocate nothing
      REQUIRE(memory_stats(cpu).allocated_bytes == base.allocated_bytes + 4800);
    }
    REQUIRE(memory_stats(cpu).allocated_bytes == base.allocated_bytes + 4000);
    REQUIRE(memory_stats(cpu).peak_allocated_bytes == base.allocated_bytes + 4800);
    reset_peak_memory_stats(cpu);
    REQUIRE(memory_stats(cpu).peak_allocated_bytes == base.allocated_bytes + 4000);
  }
  const auto after = memory_stats(cpu);
  REQUIRE(after.allocated_bytes == base.allocated_bytes);
  REQUIRE(after.num_allocs == base.num_allocs + 2);
  REQUIRE(after.num_frees == base.num_frees + 2);
}

TEST_CASE("meta tensors cost nothing") {
  const auto base = memory_stats(Device::cpu());
  Tensor m = Tensor::empty({100000, 100000}, DType::f32, Device::meta());
  REQUIRE(m.numel() == 10'000'000'000LL);
  REQUIRE(m.nbytes() == 40'000'000'000ULL);
  REQUIRE_FALSE(m.storage());
  REQUIRE(m.data_ptr() == nullptr);
  REQUIRE(memory_stats(Device::cpu()).allocated_bytes == base.allocated_bytes);
  REQUIRE(memory_stats(Device::meta()).allocated_bytes == 0);
}

TEST_CASE("a memory budget raises OutOfMemoryError with the device and size") {
  const auto in_use = memory_stats(Device::cpu()).allocated_bytes;
  ScopedMemoryLimit limit(Device::cpu(), in_use + 1024);
  Tensor ok = Tensor::empty({256}, DType::f32);  // exactly the budget
  try {
    Tensor too_big = Tensor::empty({1}, DType::u8);
    FAIL("allocation over budget succeeded");
  } catch (const OutOfMemoryError& e) {
    REQUIRE(e.device() == "cpu");
    REQUIRE(e.requested_bytes() == 1);
    REQUIRE(std::string(e.what()).find("out of memory on cpu") != std::string::npos);
  }
  REQUIRE(memory_stats(Device::cpu()).allocated_bytes == in_use + 1024);
  REQUIRE(memory_stats(Device::cpu()).limit == in_use + 1024);
}

TEST_CASE("the system allocator's failure becomes OutOfMemoryError and leaves counters intact") {
  const auto before = memory_stats(Device::cpu()).allocated_bytes;
  REQUIRE_THROWS_AS(Storage::allocate(Device::cpu(), std::size_t{1} << 62), OutOfMemoryError);
  REQUIRE(memory_stats(Device::cpu()).allocated_bytes == before);
}

TEST_CASE("pinned host memory counts as cpu memory and as pinned") {
  const auto cpu0 = memory_stats(Device::cpu()).allocated_bytes;
  const auto pin0 = pinned_memory_stats().allocated_bytes;
  {
    Storage s = Storage::allocate_pinned(4096);
    REQUIRE(s.kind() == MemoryKind::pinned);
    REQUIRE(reinterpret_cast<std::uintptr_t>(s.data()) % host_alignment == 0);
    REQUIRE(memory_stats(Device::cpu()).allocated_bytes == cpu0 + 4096);
    REQUIRE(pinned_memory_stats().allocated_bytes == pin0 + 4096);
  }
  REQUIRE(memory_stats(Device::cpu()).allocated_bytes == cpu0);
  REQUIRE(pinned_memory_stats().allocated_bytes == pin0);
}

TEST_CASE("pin_memory copies a CPU tensor into pinned memory once") {
  const Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}).transpose(0, 1);
  CHECK_FALSE(t.is_pinned());
  const Tensor p = t.pin_memory();
  CHECK(p.is_pinned());
  CHECK(p.is_contiguous());
  CHECK(p.shape() == t.shape());
  CHECK(p.contiguous().to_vector<float>() == t.contiguous().to_vector<float>());
  CHECK(p.pin_memory().data_ptr() == p.data_ptr());  // pinned already: the same tensor
  CHECK_THROWS_AS(Tensor::empty({2}, DType::f32, Device::meta()).pin_memory(), DeviceError);
  CHECK_THROWS_AS(Tensor().pin_memory(), DeviceError);
}

TEST_CASE("CUDA devices without a backend raise DeviceError, not a crash") {
  if (cuda_device_count() > 0) {
    SUCCEED("a GPU is present; the CUDA tests cover it");
    return;
  }
  if (!cuda_backend().has_runtime()) {
    REQUIRE_THROWS_AS(Tensor::empty({4}, DType::f32, Device::cuda(0)), DeviceError);
  } else {
    REQUIRE_THROWS_AS(Tensor::empty({4}, DType::f32, Device::cuda(0)), Error);
  }
  REQUIRE_FALSE(cuda_is_available());
}

TEST_CASE("memory-mapped regions are zero-copy and keep the mapping alive") {
  const std::string path = "accel_test_mapped.bin";
  {
    std::ofstream f(path, std::ios::binary);
    const float values[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    f.write(reinterpret_cast<const char*>(values), sizeof values);
  }
  const auto before = memory_stats(Device::cpu());
  Tensor t;
  {
    auto file = MappedFile::open(path);
    REQUIRE(file->size() == 16);
    REQUIRE(memory_stats(Device::cpu()).mapped_bytes == before.mapped_bytes + 16);
    t = Tensor::from_storage(file->region(4, 12), DType::f32, {3});
    REQUIRE_THROWS_AS(file->region(8, 9), FormatError);
  }
  // The file object is gone; the tensor still reads the mapping.
  REQUIRE(t.at<float>({0}) == 2.0f);
  REQUIRE(t.at<float>({2}) == 4.0f);
  REQUIRE(t.storage().kind() == MemoryKind::mapped);
  REQUIRE_FALSE(t.storage().writable());
  REQUIRE_THROWS_AS(t.fill_(0.0), ValueError);
  REQUIRE(memory_stats(Device::cpu()).allocated_bytes == before.allocated_bytes);
  t = Tensor();
  REQUIRE(memory_stats(Device::cpu()).mapped_bytes == before.mapped_bytes);
  std::remove(path.c_str());
  REQUIRE_THROWS_AS(MappedFile::open("/nonexistent/accel.bin"), IOError);
}

namespace {
/// The kernel's THP mode ("always", "madvise", "never"), empty where THP does not exist.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const auto open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

/// AnonHugePages (bytes) of the mappings that overlap [p, p + n), from /proc/self/smaps (the
/// advice splits a block's mapping in up to three).
std::size_t anon_huge_bytes_in(const void* p, std::size_t n) {
  std::ifstream f("/proc/self/smaps");
  const auto begin = reinterpret_cast<std::uintptr_t>(p), end = begin + n;
  bool overlaps = false;
  std::size_t total = 0;
  std::string line;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      overlaps = lo < end && hi > begin;
      continue;
    }
    unsigned long kb = 0;
    if (overlaps && std::sscanf(line.c_str(), "AnonHugePages: %lu kB", &kb) == 1) total += kb * 1024;
  }
  return total;
}
}  // namespace

TEST_CASE("large host blocks ask for transparent huge pages before their first touch") {
  const std::string mode = thp_mode();
  if (mode != "always" && mode != "madvise") {
    WARN("transparent huge pages are '" << mode << "' here: nothing to check");
    return;
  }
  auto t = accel::Tensor::zeros({16 << 20}, accel::DType::f32);  // 64 MiB, touched by the fill
  const std::size_t huge = anon_huge_bytes_in(t.data_ptr(), t.nbytes());
  INFO("THP mode " << mode << ", AnonHugePages " << huge << " bytes of 64 MiB");
  // The kernel may find no free 2 MiB frame for some of them; most of the block must be huge.
  CHECK(huge >= (std::size_t{32} << 20));
}
