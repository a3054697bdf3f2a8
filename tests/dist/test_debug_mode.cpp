// Debug mode (ACCELERATE_DEBUG_MODE / ACCEL_DEBUG_MODE): a collective whose processes disagree on
// shapes is a DistributedOperationException on every process, listing each one's shapes, instead
// of a hang. Each test here ends; ctest's timeout catches one that would not.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "accel/utils/environment.hpp"
#include "dist_fixture.hpp"

using namespace accel_dist_test;
namespace dist = accel::dist;

TEST_CASE("debug mode reads ACCEL_DEBUG_MODE, else ACCELERATE_DEBUG_MODE", "[dist][mpi]") {
  {
    auto env = accel::patch_environment({{"ACCELERATE_DEBUG_MODE", "1"}, {"ACCEL_DEBUG_MODE", "0"}});
    CHECK_FALSE(dist::debug_mode_from_env());
  }
  {
    auto env = accel::patch_environment({{"ACCELERATE_DEBUG_MODE", "true"}});
    CHECK(dist::debug_mode_from_env());
  }
  {
    auto env = accel::patch_environment({{"ACCEL_DEBUG_MODE", "maybe"}});
    CHECK_THROWS_AS(dist::debug_mode_from_env(), accel::ValueError);
  }
}

TEST_CASE("debug mode: a shape mismatch is an error on every process, naming each one's shapes", "[dist][mpi]") {
  DebugScope debug(true);
  const int n = world(), r = rank();
  // Process r sends r + 1 rows: with two processes or more, the shapes differ.
  const std::map<std::string, Tensor> mine{{"logits", Tensor::zeros(Shape{r + 1, 2})}};
  for (int op = 0; op < 3; ++op) {
    CAPTURE(op);
    auto call = [&] {
      if (op == 0) (void)dist::gather(state(), mine);
      if (op == 1) (void)dist::broadcast(state(), mine);
      if (op == 2) (void)dist::reduce(state(), mine, "sum");
    };
    if (n == 1) {
      CHECK_NOTHROW(call());
      continue;
    }
    try {
      call();
      FAIL("no DistributedOperationException on process " << r);
    } catch (const dist::DistributedOperationException& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Contains("Cannot apply desired operation due to shape mismatches"));
      CHECK_THAT(what, Catch::Contains(op == 0 ? "`accel::dist::gather`"
                                               : op == 1 ? "`accel::dist::broadcast`" : "`accel::dist::reduce`"));
      for (int p = 0; p < n; ++p) {
        CHECK_THAT(what, Catch::Contains("Process " + std::to_string(p) + ": {'logits': float32[" +
                                         std::to_string(p + 1) + ", 2]}"));
      }
    }
  }
  // Agreeing shapes pass the check, and the group is still usable.
  const Tensor same = Tensor::ones(Shape{2});
  CHECK(values(dist::reduce(state(), same, "sum")) == std::vector<double>{1.0 * n, 1.0 * n});
}

TEST_CASE("debug mode compares dtypes and structure too", "[dist][mpi]") {
  DebugScope debug(true);
  const int n = world(), r = rank();
  const Tensor mine = Tensor::zeros(Shape{2}, r == 0 ? DType::f32 : DType::f16);
  std::vector<Tensor> list(static_cast<std::size_t>(r == 0 ? 1 : 2), Tensor::zeros(Shape{2}));
  if (n == 1) {
    CHECK_NOTHROW(dist::gather(state(), mine));
    CHECK_NOTHROW(dist::gather(state(), list));
    return;
  }
  CHECK_THROWS_WITH(dist::gather(state(), mine), Catch::Contains("Process 1: float16[2]"));
  CHECK_THROWS_WITH(dist::reduce(state(), list), Catch::Contains("Process 0: [float32[2]]"));
}

TEST_CASE("pad_across_processes: debug mode lets extents differ, not ranks", "[dist][mpi]") {
  const int n = world(), r = rank();
  {
    DebugScope debug(true);
    const Tensor uneven = Tensor::zeros(Shape{r + 1, 2});
    CHECK(dist::pad_across_processes(state(), uneven).shape() == Shape{n, 2});
    const Tensor ranks = Tensor::zeros(r == 0 ? Shape{2} : Shape{2, 1});
    if (n > 1) {
      CHECK_THROWS_AS(dist::pad_across_processes(state(), ranks), dist::DistributedOperationException);
    }
  }
  // Out of debug mode the exchange of extents still notices, on every process.
  const Tensor ranks = Tensor::zeros(r == 0 ? Shape{2} : Shape{2, 1});
  if (n > 1) {
    CHECK_THROWS_AS(dist::pad_across_processes(state(), ranks), accel::ShapeError);
    CHECK_THROWS_WITH(dist::pad_across_processes(state(), ranks), Catch::Contains("Process 1: [2, 1]"));
  } else {
    CHECK(dist::pad_across_processes(state(), ranks).is_same(ranks));
  }
}

TEST_CASE("describe_shapes prints the structure as Python would", "[dist]") {
  struct Pair {
    Tensor a;
    std::optional<Tensor> b;
  };
  const std::map<std::string, Pair> data{{"x", {Tensor::zeros(Shape{2, 3}, DType::i64), std::nullopt}}};
  CHECK(dist::describe_shapes(data) == "{'x': (int64[2, 3], None)}");
  CHECK(dist::describe_shapes(std::vector<Tensor>{Tensor::zeros(Shape{}, DType::boolean)}) == "[bool[]]");
}
