#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/core/tensor.hpp"
#include "accel/utils/memory.hpp"

using accel::Device;
using accel::DType;
using accel::Tensor;

namespace {
/// A function that fails with OutOfMemoryError above `fits` and records every size it is called with.
struct Fits {
  std::int64_t fits;
  std::vector<std::int64_t>* tried;
  std::int64_t operator()(std::int64_t bs) const {
    tried->push_back(bs);
    if (bs > fits) throw accel::OutOfMemoryError("cpu", static_cast<std::size_t>(bs), "test");
    return bs;
  }
};
}  // namespace

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
      128, accel::utils::halve_batch_size{});
  CHECK(train(10) == 320);
  CHECK(tried == std::vector<std::int64_t>{128, 64, 32});
  // Memory of failed attempts was given back.
  CHECK(accel::memory_stats(Device::cpu()).allocated_bytes == held);
}

TEST_CASE("find_executable_batch_size defaults to Accelerate's x0.9 rule", "[utils]") {
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
      128);
  CHECK(run() == 92);  // int(103 * 0.9)
  CHECK(tried == std::vector<std::int64_t>{128, 115, 103, 92});
  // The rule named explicitly is the same one.
  accel::utils::accelerate_batch_size_rule rule;
  CHECK(rule(10) == 9);
  CHECK(rule(9) == 8);
  CHECK(rule(1) == 0);
  CHECK(accel::utils::halve_batch_size{}(9) == 4);
}

TEST_CASE("find_executable_batch_size remembers the size across calls, as Accelerate's closure does", "[utils]") {
  std::vector<std::int64_t> tried;
  auto run = accel::find_executable_batch_size(Fits{100, &tried}, 128);
  CHECK(run.batch_size() == 128);
  CHECK(run() == 92);
  CHECK(tried == std::vector<std::int64_t>{128, 115, 103, 92});
  CHECK(run.batch_size() == 92);
  tried.clear();
  // The next call starts where the last one settled: no failed attempts are repeated.
  CHECK(run() == 92);
  CHECK(tried == std::vector<std::int64_t>{92});
  CHECK(run.starting_batch_size() == 128);

  SECTION("copies share the learned size, like one Python closure") {
    auto copy = run;
    std::function<std::int64_t()> erased = run;
    tried.clear();
    CHECK(copy() == 92);
    CHECK(tried == std::vector<std::int64_t>{92});
    // A size learned through one copy is seen by the others.
    int calls = 0;
    auto shrinking = accel::find_executable_batch_size(
        [&](std::int64_t bs) {
          ++calls;
          if (bs > 50 && calls <= 10) throw std::bad_alloc();
          return bs;
        },
        64, accel::utils::halve_batch_size{});
    auto other = shrinking;
    CHECK(other() == 32);
    CHECK(shrinking.batch_size() == 32);
    CHECK(shrinking() == 32);
    CHECK(erased() == 92);
  }
  SECTION("a failure that is not out-of-memory keeps the size lowered so far") {
    std::vector<std::int64_t> t2;
    int n = 0;
    auto f = accel::find_executable_batch_size(
        [&](std::int64_t bs) -> int {
          t2.push_back(bs);
          if (++n == 1) throw accel::OutOfMemoryError("cpu", 1);
          throw accel::ShapeError("bad input");
        },
        10);
    CHECK_THROWS_AS(f(), accel::ShapeError);
    CHECK(f.batch_size() == 9);
    CHECK(t2 == std::vector<std::int64_t>{10, 9});
  }
}

TEST_CASE("find_executable_batch_size: once zero is reached every later call fails at once", "[utils]") {
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
    CHECK(e.device() == "cpu");
  }
  CHECK(calls == 8);  // 8, 7, 6, 5, 4, 3, 2, 1 (int(1 * 0.9) == 0)
  CHECK(never.batch_size() == 0);
  try {
    never();
    FAIL("expected OutOfMemoryError");
  } catch (const accel::OutOfMemoryError& e) {
    CHECK_THAT(e.what(), Catch::Contains("No executable batch size found, reached zero"));
  }
  CHECK(calls == 8);  // the function was not run again

  calls = 0;
  auto counted = accel::find_executable_batch_size(
      [&](std::int64_t) -> int {
        ++calls;
        throw std::bad_alloc();
      },
      8, accel::utils::halve_batch_size{});
  CHECK_THROWS_AS(counted(), accel::OutOfMemoryError);
  CHECK(calls == 4);  // 8, 4, 2, 1
}

TEST_CASE("find_executable_batch_size reports the last real failure and rejects bad rules", "[utils]") {
  const std::size_t held = accel::memory_stats(Device::cpu()).allocated_bytes;
  {
    accel::ScopedMemoryLimit limit(Device::cpu(), held + 16);
    auto too_big =
        accel::find_executable_batch_size([](std::int64_t bs) { return Tensor::empty({bs, 1024}).numel(); }, 4);
    try {
      too_big();
      FAIL("expected OutOfMemoryError");
    } catch (const accel::OutOfMemoryError& e) {
      CHECK(e.device() == "cpu");
      CHECK(e.requested_bytes() == 4096);  // the last real failure, at batch size 1
    }
  }
  CHECK_THROWS_AS(accel::find_executable_batch_size([](std::int64_t) { return 0; }, 0), accel::ValueError);
  CHECK_THROWS_AS(accel::find_executable_batch_size([](std::int64_t) { return 0; }, -3), accel::ValueError);
  // A rule that does not go down would loop for ever in Accelerate.
  auto stuck = accel::find_executable_batch_size([](std::int64_t) -> int { throw std::bad_alloc(); }, 4,
                                                 [](std::int64_t b) { return b; });
  CHECK_THROWS_AS(stuck(), accel::ValueError);
  // A negative size counts as zero: the function never sees it.
  std::vector<std::int64_t> tried;
  auto negative = accel::find_executable_batch_size(Fits{0, &tried}, 4, [](std::int64_t) { return -1; });
  CHECK_THROWS_AS(negative(), accel::OutOfMemoryError);
  CHECK(tried == std::vector<std::int64_t>{4});
  CHECK(negative.batch_size() == 0);
  // Other exceptions are not retried.
  int n = 0;
  auto other = accel::find_executable_batch_size([&](std::int64_t) -> int { ++n; throw accel::ShapeError("x"); });
  CHECK_THROWS_AS(other(), accel::ShapeError);
  CHECK(n == 1);
}

TEST_CASE("find_executable_batch_size keeps reduce_batch_size_fn in both of its forms", "[utils]") {
  std::vector<std::int64_t> tried;
  // Unary: the failed size in, the next one out.
  auto unary = accel::find_executable_batch_size(Fits{20, &tried}, 100, [](std::int64_t b) { return b - 30; });
  CHECK(unary() == 10);
  CHECK(tried == std::vector<std::int64_t>{100, 70, 40, 10});
  // Nullary, as Accelerate's: the rule keeps its own state and returns the new size.
  tried.clear();
  std::int64_t next = 64;
  auto nullary = accel::find_executable_batch_size(Fits{20, &tried}, 64, [&next] { return next /= 4; });
  CHECK(nullary() == 16);
  CHECK(tried == std::vector<std::int64_t>{64, 16});
  CHECK(nullary.batch_size() == 16);
  tried.clear();
  CHECK(nullary() == 16);
  CHECK(tried == std::vector<std::int64_t>{16});
}

TEST_CASE("should_reduce_batch_size recognises out-of-memory failures the way Accelerate does", "[utils]") {
  CHECK(accel::should_reduce_batch_size(accel::OutOfMemoryError("cuda:0", 1)));
  CHECK(accel::should_reduce_batch_size(std::bad_alloc()));
  // Foreign errors (a libtorch caller's) by Accelerate's messages.
  CHECK(accel::should_reduce_batch_size(std::runtime_error("CUDA out of memory. Tried to allocate 2.00 GiB")));
  CHECK(accel::should_reduce_batch_size(std::runtime_error("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error")));
  CHECK(accel::should_reduce_batch_size(
      std::runtime_error("[enforce fail at alloc_cpu.cpp:83] DefaultCPUAllocator: can't allocate memory: you tried")));
  CHECK(accel::should_reduce_batch_size(std::runtime_error("FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed")));
  CHECK_FALSE(accel::should_reduce_batch_size(std::runtime_error("shape mismatch")));
  // accel's own errors are judged by type, not text.
  CHECK_FALSE(accel::should_reduce_batch_size(accel::ShapeError("CUDA out of memory. (not really)")));

  std::vector<std::int64_t> tried;
  auto foreign = accel::find_executable_batch_size(
      [&](std::int64_t bs) {
        tried.push_back(bs);
        if (bs > 8) throw std::runtime_error("CUDA out of memory. Tried to allocate 20.00 MiB");
        if (bs > 6) throw std::logic_error("not a memory problem");
        return bs;
      },
      10);
  CHECK_THROWS_AS(foreign(), std::logic_error);
  CHECK(tried == std::vector<std::int64_t>{10, 9, 8});
  CHECK(foreign.batch_size() == 8);
}

TEST_CASE("find_executable_batch_size copies called from several threads only lower the size", "[utils]") {
  std::atomic<int> calls{0};
  auto run = accel::find_executable_batch_size(
      [&](std::int64_t bs) {
        ++calls;
        if (bs > 37) throw accel::OutOfMemoryError("cpu", static_cast<std::size_t>(bs));
        return bs;
      },
      128);
  std::vector<std::int64_t> results(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([copy = run, &results, i]() mutable {
      for (int k = 0; k < 50; ++k) results[i] = copy();
    });
  }
  for (auto& t : threads) t.join();
  for (const std::int64_t r : results) {
    CHECK(r <= 37);
    CHECK(r == run.batch_size());
  }
  CHECK(run.batch_size() > 0);
}
