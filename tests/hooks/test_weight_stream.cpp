// WeightStream and WeightFileReader: units read ahead in call order into a bounded ring, calls out
// of order still served, bytes exact at any offset, changed files and bad ranges typed errors.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/hooks/weight_stream.hpp"
#include "accel/io/weight_reader.hpp"

using namespace accel;

namespace {

/// A file of `n` int32 values start, start + 1, ...
std::string write_ints(const accel_test::TempDir& dir, const std::string& name, std::int32_t start, std::size_t n) {
  std::vector<std::int32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<std::int32_t>(i);
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * 4));
  return path;
}

io::WeightLocation loc(const std::string& name, const std::string& file, std::uint64_t first, std::int64_t count) {
  return {name, file, first * 4, static_cast<std::uint64_t>(count) * 4, DType::i32, Shape{count}, DType::i32};
}

std::vector<std::int32_t> values(const Tensor& t) { return t.to_vector<std::int32_t>(); }

}  // namespace

TEST_CASE("WeightFileReader reads exact bytes at any offset and refuses changed files", "[hooks][stream]") {
  accel_test::TempDir dir;
  const std::string path = write_ints(dir, "a.bin", 0, 5000);
  io::WeightFileReader r;
  CHECK(r.open(path, "w"));  // ext4 and most disks take direct reads
  const std::uint64_t offset = 4 * 1001, n = 4 * 7;
  std::vector<std::byte> buf(io::WeightFileReader::aligned_extent(offset, n) + 2 * io::WeightFileReader::alignment);
  auto* dst = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(buf.data()) + 4095) / 4096 * 4096);
  const std::byte* p = r.read(path, offset, n, dst, "w");
  std::int32_t got[7];
  std::memcpy(got, p, sizeof got);
  CHECK(got[0] == 1001);
  CHECK(got[6] == 1007);
  CHECK_THROWS_AS(r.read(path, 4 * 4999, 8, dst, "past the end"), FormatError);
  CHECK_THROWS_AS(r.read(path, offset, n, dst + 1, "unaligned"), ValueError);
  std::filesystem::resize_file(path, 4 * 6000);
  CHECK_THROWS_WITH(r.read(path, offset, n, dst, "w"), Catch::Contains("changed on disk") && Catch::Contains("'w'"));
  CHECK_THROWS_AS(io::WeightFileReader().read(dir.file("missing.bin"), 0, 4, dst, "gone"), IOError);
}

TEST_CASE("A stream reads units ahead in a ring of depth + 1 buffers", "[hooks][stream]") {
  accel_test::TempDir dir;
  const std::string a = write_ints(dir, "a.bin", 0, 100000), b = write_ints(dir, "b.bin", 1000000, 100000);
  hooks::WeightStream s(2);
  std::vector<std::size_t> ids;
  for (int u = 0; u < 6; ++u) {
    // Two weights in a, one in b, at odd offsets; unit 5 is the largest.
    const std::int64_t n = u == 5 ? 3000 : 1000;
    ids.push_back(s.add_unit("unit" + std::to_string(u),
                             {loc("x" + std::to_string(u), a, 10000 * u + 3, n), loc("y" + std::to_string(u), a, 10000 * u + 5003, 7),
                              loc("z" + std::to_string(u), b, 777 * u + 1, 5)}));
  }
  const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
  reset_peak_memory_stats(Device::cpu());
  for (int round = 0; round < 3; ++round) {
    for (std::size_t u : ids) {
      std::vector<Tensor> w = s.acquire(u);
      REQUIRE(w.size() == 3);
      CHECK(values(w[0]).front() == static_cast<std::int32_t>(10000 * u + 3));
      CHECK(values(w[0]).back() == static_cast<std::int32_t>(10000 * u + 3 + w[0].numel() - 1));
      CHECK(values(w[1]) == std::vector<std::int32_t>{static_cast<std::int32_t>(10000 * u + 5003), static_cast<std::int32_t>(10000 * u + 5004),
                                                      static_cast<std::int32_t>(10000 * u + 5005), static_cast<std::int32_t>(10000 * u + 5006),
                                                      static_cast<std::int32_t>(10000 * u + 5007), static_cast<std::int32_t>(10000 * u + 5008),
                                                      static_cast<std::int32_t>(10000 * u + 5009)});
      CHECK(values(w[2]).front() == static_cast<std::int32_t>(1000000 + 777 * u + 1));
      w.clear();
      s.release(u);
    }
  }
  CHECK(s.buffers() <= 3);  // fewer when a buffer was released before the reader needed another
  const std::size_t ring = 3 * (s.slot_bytes() + io::WeightFileReader::alignment);
  CHECK(memory_stats(Device::cpu()).peak_allocated_bytes - before <= ring);
  // Out of order: asked-for units are served whatever was read ahead.
  for (std::size_t u : {4, 1, 1, 5, 0, 3}) {
    auto w = s.acquire(u);
    CHECK(values(w[2]).front() == static_cast<std::int32_t>(1000000 + 777 * u + 1));
    w.clear();
    s.release(u);
  }
  CHECK(s.buffers() <= 3);
  CHECK(s.stats().bytes_read > 0);
  CHECK_THROWS_AS(s.acquire(99), KeyError);
}

TEST_CASE("A unit asked for twice before its release is served, not waited for", "[hooks][stream]") {
  accel_test::TempDir dir;
  const std::string a = write_ints(dir, "a.bin", 0, 1000);
  for (std::size_t depth : {0, 2}) {
    hooks::WeightStream s(depth);
    const std::size_t u = s.add_unit("u", {loc("w", a, 7, 3)});
    auto first = s.acquire(u);
    auto again = s.acquire(u);
    CHECK(values(again[0]) == values(first[0]));
    first.clear();
    again.clear();
    s.release(u);
  }
}

TEST_CASE("A unit larger than the buffers, added after they were made, gets a buffer of its size", "[hooks][stream]") {
  accel_test::TempDir dir;
  const std::string a = write_ints(dir, "a.bin", 0, 100000);
  for (std::size_t depth : {0, 1}) {
    hooks::WeightStream s(depth);
    const std::size_t small = s.add_unit("small", {loc("w", a, 3, 10)});
    auto w = s.acquire(small);
    w.clear();
    s.release(small);
    const std::size_t large = s.add_unit("large", {loc("big", a, 5, 90000)});
    auto v = s.acquire(large);
    CHECK(values(v[0]).back() == 5 + 90000 - 1);
    v.clear();
    s.release(large);
  }
}

TEST_CASE("Depth 0 reads each unit when asked, into one buffer", "[hooks][stream]") {
  accel_test::TempDir dir;
  const std::string a = write_ints(dir, "a.bin", 0, 20000);
  hooks::WeightStream s(0);
  const std::size_t u0 = s.add_unit("u0", {loc("w0", a, 10, 100)});
  const std::size_t u1 = s.add_unit("u1", {loc("w1", a, 5000, 300)});
  for (int i = 0; i < 3; ++i) {
    for (std::size_t u : {u0, u1}) {
      auto w = s.acquire(u);
      CHECK(values(w[0]).front() == (u == u0 ? 10 : 5000));
      w.clear();
      s.release(u);
    }
  }
  CHECK(s.buffers() == 1);
  CHECK(s.stats().bytes_read == 3 * (100 + 300) * 4);
}

TEST_CASE("A view kept past release keeps its bytes; a failed read is rethrown and can be retried", "[hooks][stream]") {
  accel_test::TempDir dir;
  const std::string a = write_ints(dir, "a.bin", 0, 20000);
  hooks::WeightStream s(1);
  const std::size_t u0 = s.add_unit("u0", {loc("w0", a, 0, 100)});
  const std::size_t u1 = s.add_unit("u1", {loc("w1", a, 5000, 100)});
  Tensor kept = s.acquire(u0).front();
  s.release(u0);
  for (int i = 0; i < 4; ++i) {
    for (std::size_t u : {u1, u0}) {
      auto w = s.acquire(u);
      w.clear();
      s.release(u);
    }
  }
  CHECK(values(kept).front() == 0);  // never overwritten: the ring took a fresh buffer instead
  CHECK(values(kept).back() == 99);

  std::filesystem::resize_file(a, 4 * 1000);  // u1's range is gone now
  // A unit read ahead before the change is served as read; the first read after it fails.
  std::string error;
  for (int i = 0; i < 3 && error.empty(); ++i) {
    for (std::size_t u : {u1, u0}) {
      try {
        auto w = s.acquire(u);
        w.clear();
        s.release(u);
      } catch (const IOError& e) {
        error = e.what();
        break;
      }
    }
  }
  CHECK_THAT(error, Catch::Contains("changed on disk"));
  CHECK_THROWS_AS(s.acquire(u1), IOError);  // still failing, still typed
  CHECK_THROWS_AS(s.acquire(u0), IOError);
}
