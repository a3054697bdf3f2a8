// Allocator counters are exact: current and peak bytes follow every allocation and free, and a
// budget turns an over-large allocation into OutOfMemoryError carrying device and size.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
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

namespace {
/// The host block cache at `bytes` for one test, emptied before and after, its cap restored.
class ScopedHostCache {
 public:
  explicit ScopedHostCache(std::size_t bytes) : previous_(accel::host_cache_stats().limit) {
    accel::empty_host_cache();
    accel::set_host_cache_limit(bytes);
  }
  ~ScopedHostCache() {
    accel::empty_host_cache();
    accel::set_host_cache_limit(previous_);
  }
  ScopedHostCache(const ScopedHostCache&) = delete;
  ScopedHostCache& operator=(const ScopedHostCache&) = delete;

 private:
  std::size_t previous_;
};
}  // namespace

TEST_CASE("freed host blocks are reused for the next request of their size, outside the counters") {
  ScopedHostCache scope(std::size_t{8} << 20);
  const Device cpu = Device::cpu();
  const auto base = memory_stats(cpu);
  const auto s0 = host_cache_stats();
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({100'000}, DType::f32);  // 400'000 bytes: cached as 401'408 (98 pages)
    first = a.data_ptr();
  }
  auto s1 = host_cache_stats();
  REQUIRE(s1.cached_blocks == 1);
  REQUIRE(s1.cached_bytes == 401'408);
  REQUIRE(memory_stats(cpu).allocated_bytes == base.allocated_bytes);  // cached is not allocated
  {
    Tensor b = Tensor::empty({100'000}, DType::f32);
    REQUIRE(b.data_ptr() == first);  // the same block, its pages already mapped
    REQUIRE(host_cache_stats().cached_bytes == 0);
    REQUIRE(memory_stats(cpu).allocated_bytes == base.allocated_bytes + 400'000);
    Tensor c = Tensor::empty({100'001}, DType::f32);  // 400'004 bytes: the same 98 pages, a new block
    REQUIRE(c.data_ptr() != first);
    Tensor d = Tensor::empty({200'000}, DType::f32);  // another size: never the cached class
    Tensor small = Tensor::empty({100}, DType::f32);  // under 64 KiB: not cached at all
  }
  const auto s2 = host_cache_stats();
  REQUIRE(s2.hits == s0.hits + 1);
  REQUIRE(s2.misses == s0.misses + 3);  // a, c, d
  REQUIRE(s2.cached_blocks == 3);
  REQUIRE(s2.cached_bytes == 2 * 401'408 + 802'816);
  const auto after = memory_stats(cpu);
  REQUIRE(after.allocated_bytes == base.allocated_bytes);
  REQUIRE(after.num_allocs == base.num_allocs + 5);  // a, b (a cache hit is still one), c, d, small
  REQUIRE(after.num_frees == base.num_frees + 5);
  empty_host_cache();
  REQUIRE(host_cache_stats().cached_bytes == 0);
  REQUIRE(host_cache_stats().evictions == s2.evictions + 3);
}

TEST_CASE("the host block cache keeps at most its cap, giving back the oldest blocks first") {
  ScopedHostCache scope(std::size_t{1} << 20);  // 1 MiB
  const void* oldest = nullptr;
  const void* newest = nullptr;
  {
    Tensor a = Tensor::empty({100'000}, DType::f32);  // 401'408 bytes cached
    Tensor b = Tensor::empty({100'000}, DType::f32);
    Tensor c = Tensor::empty({100'000}, DType::f32);
    oldest = a.data_ptr();
    newest = c.data_ptr();
    a = Tensor();
    b = Tensor();
    c = Tensor();  // the third does not fit beside two: `a`, the oldest, goes back
  }
  REQUIRE(host_cache_stats().cached_blocks == 2);
  REQUIRE(host_cache_stats().cached_bytes == 2 * 401'408);
  {
    Tensor again = Tensor::empty({100'000}, DType::f32);
    REQUIRE(again.data_ptr() == newest);  // most recently freed first
    REQUIRE(again.data_ptr() != oldest);
  }
  {
    Tensor big = Tensor::empty({1 << 20}, DType::f32);  // 4 MiB: over the cap, freed at once
  }
  REQUIRE(host_cache_stats().cached_bytes == 2 * 401'408);
  set_host_cache_limit(0);  // off: empties the cache and stops caching
  REQUIRE(host_cache_stats().cached_bytes == 0);
  { Tensor a = Tensor::empty({100'000}, DType::f32); }
  REQUIRE(host_cache_stats().cached_blocks == 0);
}

TEST_CASE("under a cpu memory limit, held and cached bytes together stay within it") {
  ScopedHostCache scope(std::size_t{64} << 20);
  const Device cpu = Device::cpu();
  const std::size_t in_use = memory_stats(cpu).allocated_bytes;
  const std::size_t limit = in_use + (std::size_t{3} << 20);  // 3 MiB of room
  ScopedMemoryLimit cap(cpu, limit);
  auto within = [&] { return memory_stats(cpu).allocated_bytes + host_cache_stats().cached_bytes <= limit; };
  {
    Tensor a = Tensor::empty({256 << 10}, DType::f32);  // 1 MiB
    Tensor b = Tensor::empty({256 << 10}, DType::f32);  // 1 MiB
    REQUIRE(within());
  }
  REQUIRE(host_cache_stats().cached_bytes == std::size_t{2} << 20);  // both fit the room
  REQUIRE(within());
  {
    // 2.5 MiB fits the limit only if the cache gives its 2 MiB back first.
    Tensor big = Tensor::empty({640 << 10}, DType::f32);
    REQUIRE(within());
    REQUIRE(host_cache_stats().cached_bytes == 0);
    Tensor small = Tensor::empty({64 << 10}, DType::f32);  // 256 KiB
    REQUIRE(within());
    big = Tensor();  // 2.5 MiB freed beside 256 KiB held: fits the room, kept
    REQUIRE(within());
    Tensor other = Tensor::empty({128 << 10}, DType::f32);  // 512 KiB of another size
    REQUIRE(within());
  }
  REQUIRE(within());
  REQUIRE_THROWS_AS(Tensor::empty({1 << 20}, DType::f32), OutOfMemoryError);  // 4 MiB never fits
  REQUIRE(within());
}

TEST_CASE("ACCEL_HOST_CACHE_BYTES sets the cap, and a value that is not a size is an error") {
  ::setenv("ACCEL_HOST_CACHE_BYTES", "1GiB", 1);
  REQUIRE(detail::host_cache_limit_from_env() == (std::size_t{1} << 30));
  ::setenv("ACCEL_HOST_CACHE_BYTES", "0", 1);
  REQUIRE(detail::host_cache_limit_from_env() == 0);
  ::setenv("ACCEL_HOST_CACHE_BYTES", "lots", 1);
  REQUIRE_THROWS_WITH(detail::host_cache_limit_from_env(), Catch::Contains("ACCEL_HOST_CACHE_BYTES"));
  ::unsetenv("ACCEL_HOST_CACHE_BYTES");
}
