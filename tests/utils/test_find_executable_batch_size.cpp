#include <catch2/catch.hpp>

#include <new>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/core/tensor.hpp"
#include "accel/utils/memory.hpp"

using accel::Device;
using accel::DType;
using accel::Tensor;

TEST_CASE("find_executable_batch_size retries real allocation failures under a budget", "[utils]") {
  // One row of activations is 1 MiB of f32; the budget leaves room for 40 rows beyond what is
  // already held, so 128 and 64 fail inside Tensor::empty and 32 runs.
  const std::size_t row = std::size_t{1} << 20;
  const std::size_t held = accel::memory_stats(Device::cpu()).allocated_bytes;
  accel::ScopedMemoryLimit limit(Device::cpu(), held + 40 * row);
  std::vector<std::int64_t> tried;
  auto train = accel::find_executable_batch_size(
      [&](std::int64_t batch_size, int scale) {
        tried.push_back(batch_size);
        Tensor activations = Tensor::empty({batch_size, static_cast<std::int64_t>(row / 4)}, DType::f32);
        return batch_size * scale;
      },
      128);
  CHECK(train(10) == 320);
  CHECK(tried == std::vector<std::int64_t>{128, 64, 32});
  // Memory of failed attempts was given back.
  CHECK(accel::memory_stats(Device::cpu()).allocated_bytes == held);
}

TEST_CASE("find_executable_batch_size with Accelerate's x0.9 rule", "[utils]") {
  const std::size_t row = std::size_t{1} << 16;
  const std::size_t held = accel::memory_stats(Device::cpu()).allocated_bytes;
  accel::ScopedMemoryLimit limit(Device::cpu(), held + 100 * row);
  std::vector<std::int64_t> tried;
  auto run = accel::find_executable_batch_size(
      [&](std::int64_t bs) {
        tried.push_back(bs);
        (void)Tensor::empty({bs, static_cast<std::int64_t>(row)}, DType::u8);
        return bs;
      },
      128, accel::utils::accelerate_batch_size_rule{});
  CHECK(run() == 92);  // int(103 * 0.9)
  CHECK(tried == std::vector<std::int64_t>{128, 115, 103, 92});
}

TEST_CASE("find_executable_batch_size reports reaching zero and converts bad_alloc", "[utils]") {
  int calls = 0;
  auto never = accel::find_executable_batch_size(
      [&](std::int64_t) -> int {
        ++calls;
        throw std::bad_alloc();
      },
      8);
  try {
    never();
    FAIL("expected OutOfMemoryError");
  } catch (const accel::OutOfMemoryError& e) {
    CHECK_THAT(e.what(), Catch::Contains("No executable batch size found, reached zero"));
  }
  CHECK(calls == 4);  // 8, 4, 2, 1

  const std::size_t held = accel::memory_stats(Device::cpu()).allocated_bytes;
  accel::ScopedMemoryLimit limit(Device::cpu(), held + 16);
  auto too_big = accel::find_executable_batch_size([](std::int64_t bs) { return Tensor::empty({bs, 1024}).numel(); }, 4);
  try {
    too_big();
    FAIL("expected OutOfMemoryError");
  } catch (const accel::OutOfMemoryError& e) {
    CHECK(e.device() == "cpu");
    CHECK(e.requested_bytes() == 4096);  // the last real failure, at batch size 1
  }
  CHECK_THROWS_AS(accel::find_executable_batch_size([](std::int64_t) { return 0; }, 0), accel::ValueError);
  auto stuck = accel::find_executable_batch_size([](std::int64_t) -> int { throw std::bad_alloc(); }, 4,
                                                 [](std::int64_t b) { return b; });
  CHECK_THROWS_AS(stuck(), accel::ValueError);
  // Other exceptions are not retried.
  int n = 0;
  auto other = accel::find_executable_batch_size([&](std::int64_t) -> int { ++n; throw accel::ShapeError("x"); });
  CHECK_THROWS_AS(other(), accel::ShapeError);
  CHECK(n == 1);
}
