// GradReducer (dist/grad_reducer.hpp): torch's bucket assignment for several caps over nested
// gradients of mixed dtypes, exact means over 1, 2 and 3 processes, gradient_as_bucket_view's
// aliasing, accumulation gating without communication, typed errors naming the gradient, debug
// mode; and DynamicLossScaler agreeing on inf / NaN across processes (any_process).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "accel/utils/dataclasses.hpp"
#include "accel/utils/gradient_accumulation.hpp"
#include "accel/utils/loss_scaler.hpp"
#include "dist_fixture.hpp"

using namespace accel_dist_test;
namespace dist = accel::dist;

namespace {

struct Block {
  Tensor w;
  Tensor b;
};

/// Gradients of a small model: a tuple, a map of structs and a vector, four floating dtypes.
struct Grads {
  std::tuple<Tensor, Tensor> head;
  std::map<std::string, Block> blocks;
  std::vector<Tensor> extra;
};

// Walk order, dtype and size (bytes) of each gradient of make_grads:
//   0 head[0]        f32 [16]    64      4 blocks['b'].w  f32 [100]   400
//   1 head[1]        f64 [8]     64      5 blocks['b'].b  f16 [10]     20
//   2 blocks['a'].w  f32 [300]  1200     6 extra[0]       f32 [200]   800
//   3 blocks['a'].b  bf16 [10]    20     7 extra[1]       f64 [4]      32
struct LeafSpec {
  DType dtype;
  std::int64_t numel;
};
const std::vector<LeafSpec> specs{{DType::f32, 16},  {DType::f64, 8},  {DType::f32, 300}, {DType::bf16, 10},
                                  {DType::f32, 100}, {DType::f16, 10}, {DType::f32, 200}, {DType::f64, 4}};

/// Process r's value at flat index i of gradient `leaf`: small integers every dtype holds exactly,
/// whose mean over 3 processes is not a whole number.
float grad_value(int r, std::size_t leaf, std::int64_t i) {
  return static_cast<float>(r * r + static_cast<std::int64_t>(leaf) + i % 5);
}

Tensor grad_tensor(int r, std::size_t leaf) {
  std::vector<float> v(static_cast<std::size_t>(specs[leaf].numel));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = grad_value(r, leaf, static_cast<std::int64_t>(i));
  return Tensor::from_vector(v).to(specs[leaf].dtype);
}

Grads make_grads(int r) {
  return Grads{{grad_tensor(r, 0), grad_tensor(r, 1)},
               {{"a", Block{grad_tensor(r, 2), grad_tensor(r, 3)}}, {"b", Block{grad_tensor(r, 4), grad_tensor(r, 5)}}},
               {grad_tensor(r, 6), grad_tensor(r, 7)}};
}

std::vector<Tensor> leaves(const Grads& g) {
  return {std::get<0>(g.head),      std::get<1>(g.head),      g.blocks.at("a").w, g.blocks.at("a").b,
          g.blocks.at("b").w,       g.blocks.at("b").b,       g.extra[0],         g.extra[1]};
}

/// The mean over the processes of gradient `leaf`, as the reducer must round it: f64 summed and
/// divided in f64; f32, f16 and bf16 summed and divided in f32, then rounded to the dtype once.
std::vector<double> expected_mean(std::size_t leaf) {
  const int n = world();
  const std::int64_t numel = specs[leaf].numel;
  std::vector<double> out(static_cast<std::size_t>(numel));
  std::vector<float> f(out.size());
  for (std::int64_t i = 0; i < numel; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += grad_value(r, leaf, i);
    out[static_cast<std::size_t>(i)] = sum / n;
    f[static_cast<std::size_t>(i)] = static_cast<float>(sum) / static_cast<float>(n);
  }
  if (specs[leaf].dtype == DType::f64) return out;
  return rounded(f, specs[leaf].dtype, Shape{numel});
}

std::vector<double> own_values(std::size_t leaf) { return values(grad_tensor(rank(), leaf)); }

/// The walk-order indices of each bucket, in reduce order.
std::vector<std::vector<std::size_t>> layout(const dist::GradReducer<accel::policy::multi_cpu<>>& r) {
  std::vector<std::vector<std::size_t>> out;
  for (const auto& b : r.buckets()) out.push_back(b.leaves);
  return out;
}

std::size_t reduces_per_call(std::size_t buckets) { return world() > 1 ? buckets : 0; }

}  // namespace

TEST_CASE("GradReducer buckets gradients in reverse walk order per dtype, closing each at the cap", "[dist][mpi]") {
  using Buckets = std::vector<std::vector<std::size_t>>;
  SECTION("the default 25 MiB: one bucket per dtype, ordered by their first gradient in reverse order") {
    Grads g = make_grads(rank());
    dist::GradReducer reducer(state(), g);
    CHECK(layout(reducer) == Buckets{{7, 1}, {6, 4, 2, 0}, {5}, {3}});
    CHECK(reducer.buckets()[0].dtype == DType::f64);
    CHECK(reducer.buckets()[1].dtype == DType::f32);
    CHECK(reducer.buckets()[1].nbytes() == 800 + 400 + 1200 + 64);
    CHECK(reducer.buckets()[2].dtype == DType::f16);
    CHECK(reducer.buckets()[3].dtype == DType::bf16);
    CHECK(reducer.num_gradients() == 8);
  }
  SECTION("1 KiB: a bucket closes once it reaches the cap; a gradient above the cap gets its own") {
    Grads g = make_grads(rank());
    dist::GradReducer reducer(state(), g, dist::GradReducerOptions{.bucket_cap_mb = 1.0 / 1024});
    // f32 in reverse: 800 + 400 reaches 1024 and closes; 1200 alone closes; 64 is left open.
    CHECK(layout(reducer) == Buckets{{7, 1}, {6, 4}, {5}, {3}, {2}, {0}});
    CHECK(reducer.bucket_of(2) == 4);
  }
  SECTION("512 B: a gradient larger than the cap ends the open bucket it joins (torch's rule)") {
    Grads g = make_grads(rank());
    dist::GradReducer reducer(state(), g, dist::GradReducerOptions{.bucket_cap_mb = 1.0 / 2048});
    CHECK(layout(reducer) == Buckets{{7, 1}, {6}, {5}, {4, 2}, {3}, {0}});
  }
  SECTION("DistributedDataParallelKwargs' whole MiB, a gradient above 1 MiB") {
    std::vector<Tensor> g{Tensor::full(Shape{1000}, rank()), Tensor::full(Shape{300'000}, rank()),
                          Tensor::full(Shape{10}, rank())};
    dist::GradReducer reducer(state(), g, accel::DistributedDataParallelKwargs{.bucket_cap_mb = 1});
    CHECK(layout(reducer) == Buckets{{2, 1}, {0}});
    reducer.all_reduce(g);
    const double mean = (world() - 1) / 2.0;
    for (const Tensor& t : g) CHECK(values(t) == std::vector<double>(static_cast<std::size_t>(t.numel()), mean));
    CHECK(reducer.all_reduce_count() == reduces_per_call(2));
  }
}

TEST_CASE("GradReducer::all_reduce gives every process the exact mean, one all-reduce per bucket", "[dist][mpi]") {
  for (const double cap : {25.0, 1.0 / 1024, 1.0 / 2048, 1e-6}) {
    for (const bool as_view : {false, true}) {
      CAPTURE(cap, as_view, world());
      Grads g = make_grads(rank());
      dist::GradReducer reducer(state(), g, dist::GradReducerOptions{.bucket_cap_mb = cap, .gradient_as_bucket_view = as_view});
      reducer.all_reduce(g);
      const auto got = leaves(g);
      for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].dtype() == specs[i].dtype);
        CHECK(got[i].shape() == Shape{specs[i].numel});
        CHECK(values(got[i]) == expected_mean(i));
      }
      CHECK(reducer.all_reduce_count() == reduces_per_call(reducer.buckets().size()));
      if (cap == 1e-6) CHECK(reducer.buckets().size() == 8);  // every gradient exceeds 1 byte
    }
  }
}

TEST_CASE("gradient_as_bucket_view: gradients become views into the buckets, and stay them", "[dist][mpi]") {
  Grads g = make_grads(rank());
  const Tensor original = g.blocks.at("a").w;
  dist::GradReducer reducer(state(), g, dist::GradReducerOptions{.bucket_cap_mb = 1.0 / 1024, .gradient_as_bucket_view = true});
  REQUIRE(reducer.gradient_as_bucket_view());
  auto check_aliased = [&] {
    const auto now = leaves(g);
    for (std::size_t i = 0; i < now.size(); ++i) {
      CAPTURE(i);
      const Tensor& buffer = reducer.buckets()[reducer.bucket_of(i)].buffer;
      CHECK(now[i].shares_storage(buffer));
      CHECK(now[i].is_contiguous());
      const auto* lo = static_cast<const std::byte*>(buffer.data_ptr());
      const auto* p = static_cast<const std::byte*>(now[i].data_ptr());
      CHECK(p >= lo);
      CHECK(p + now[i].nbytes() <= lo + buffer.nbytes());
    }
  };
  check_aliased();
  // The values came along, and the caller's old tensor is no longer the gradient.
  for (std::size_t i = 0; i < specs.size(); ++i) CHECK(values(leaves(g)[i]) == own_values(i));
  CHECK_FALSE(g.blocks.at("a").w.shares_storage(original));

  // Writing into the bucket is writing the gradient (a backward filling its views).
  const auto before = leaves(g);
  Tensor buffer = reducer.buckets()[reducer.bucket_of(6)].buffer;
  buffer.fill_(7);
  CHECK(values(g.extra[0]) == std::vector<double>(200, 7.0));
  for (std::size_t i = 0; i < specs.size(); ++i) leaves(g)[i].copy_(grad_tensor(rank(), i));

  reducer.all_reduce(g);
  const auto after = leaves(g);
  for (std::size_t i = 0; i < after.size(); ++i) {
    CAPTURE(i);
    CHECK(after[i].is_same(before[i]));  // reduced in place, nothing re-bound
    CHECK(values(after[i]) == expected_mean(i));
  }

  // A gradient the caller replaced is copied in and becomes the view again.
  g.blocks.at("b").w = grad_tensor(rank(), 4).clone();
  g.extra[1] = grad_tensor(rank(), 7);
  for (const std::size_t i : {0, 1, 2, 3, 5, 6}) leaves(g)[i].copy_(grad_tensor(rank(), i));
  reducer.all_reduce(g);
  check_aliased();
  for (std::size_t i = 0; i < specs.size(); ++i) CHECK(values(leaves(g)[i]) == expected_mean(i));
}

TEST_CASE("without gradient_as_bucket_view, gradients keep their storage and strides", "[dist][mpi]") {
  Grads g = make_grads(rank());
  const auto before = leaves(g);
  dist::GradReducer reducer(state(), g, dist::GradReducerOptions{.bucket_cap_mb = 1.0 / 1024});
  reducer.all_reduce(g);
  const auto after = leaves(g);
  for (std::size_t i = 0; i < after.size(); ++i) {
    CAPTURE(i);
    CHECK(after[i].is_same(before[i]));
    CHECK_FALSE(after[i].shares_storage(reducer.buckets()[reducer.bucket_of(i)].buffer));
    CHECK(values(after[i]) == expected_mean(i));
  }
  // A non-contiguous gradient (a transposed view) is reduced through its bucket and written back.
  const Tensor scaled = Tensor::full(Shape{2, 3}, rank() * 6.0);
  std::vector<Tensor> t{scaled.transpose(0, 1)};
  REQUIRE_FALSE(t[0].is_contiguous());
  dist::GradReducer r2(state(), t);
  r2.all_reduce(t);
  CHECK(t[0].is_same(scaled.transpose(0, 1)));
  CHECK(values(scaled) == std::vector<double>(6, 3.0 * (world() - 1)));
}

TEST_CASE("GradReducer under gradient accumulation communicates on sync steps only", "[dist][mpi]") {
  for (const bool as_view : {false, true}) {
    CAPTURE(as_view);
    std::vector<Tensor> g{Tensor::zeros(Shape{64}), Tensor::zeros(Shape{5}, DType::bf16)};
    dist::GradReducer reducer(state(), g, dist::GradReducerOptions{.bucket_cap_mb = 1e-4, .gradient_as_bucket_view = as_view});
    const std::size_t per_sync = reduces_per_call(reducer.buckets().size());
    accel::GradientAccumulator acc(accel::GradientAccumulationPlugin{.num_steps = 3, .sync_with_dataloader = false});
    double own = 0, window = 0;  // this process's accumulated value; the sum of the window's batches
    for (int batch = 1; batch <= 6; ++batch) {
      CAPTURE(batch);
      acc.accumulate();
      // This batch's backward adds batch + 2 * rank to every gradient, in place.
      own += batch + 2 * rank();
      window += batch;
      for (Tensor& t : g) t.copy_(Tensor::full(t.shape(), own, t.dtype()));
      const bool reduced = reducer.all_reduce(g, acc);
      CHECK(reduced == (batch % 3 == 0));
      CHECK(reducer.all_reduce_count() == per_sync * static_cast<std::size_t>(batch / 3));
      // Untouched on other steps (this process's own sum, different on every process); the mean
      // of the processes' sums, window + 2 * 3 * (n - 1) / 2, on a sync step.
      const double expect = reduced ? window + 3.0 * (world() - 1) : own;
      for (const Tensor& t : g) CHECK(values(t) == std::vector<double>(static_cast<std::size_t>(t.numel()), expect));
      if (reduced) {
        for (Tensor& t : g) t.fill_(0);  // the optimizer's zero_grad, in place
        own = window = 0;
      }
    }
  }
}

TEST_CASE("a non-sync step sends nothing: process 0 may make such calls alone", "[dist][mpi]") {
  // Had any of process 0's extra calls communicated, it would wait for peers that never come (the
  // state's timeout), or meet the next sync step's all-reduce and garble its values.
  std::vector<Tensor> g{Tensor::full(Shape{8}, rank())};
  dist::GradReducer reducer(state(), g);
  struct Gate {
    bool sync;
    bool should_all_reduce() const { return sync; }
  };
  if (rank() == 0) {
    for (int i = 0; i < 5; ++i) CHECK_FALSE(reducer.all_reduce(g, Gate{false}));
    CHECK(reducer.all_reduce_count() == 0);
    CHECK(values(g[0]) == std::vector<double>(8, 0.0));
  }
  CHECK(reducer.all_reduce(g, Gate{true}));
  CHECK(values(g[0]) == std::vector<double>(8, (world() - 1) / 2.0));
}

TEST_CASE("GradReducer errors name the gradient", "[dist][mpi]") {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no exception";
  };
  SECTION("a non-floating gradient is a DTypeError") {
    std::map<std::string, Tensor> g{{"w", Tensor::zeros(Shape{2})}, {"ids", Tensor::zeros(Shape{2}, DType::i64)}};
    CHECK_THROWS_AS(dist::GradReducer(state(), g), accel::DTypeError);
    CHECK_THAT(message([&] { (void)dist::GradReducer(state(), g); }), Catch::Contains("grads['ids']") && Catch::Contains("int64"));
  }
  SECTION("a meta gradient is a DeviceError") {
    std::tuple<Tensor, std::vector<Tensor>> g{Tensor::zeros(Shape{2}), {Tensor::zeros(Shape{2}), Tensor::zeros(Shape{3}).to_meta()}};
    CHECK_THROWS_AS(dist::GradReducer(state(), g), accel::DeviceError);
    CHECK_THAT(message([&] { (void)dist::GradReducer(state(), g); }), Catch::Contains("grads[1][1]") && Catch::Contains("meta"));
  }
  SECTION("a leaf that is not a tensor, and an undefined tensor, are ValueErrors") {
    std::tuple<Tensor, int> g{Tensor::zeros(Shape{2}), 3};
    CHECK_THROWS_AS(dist::GradReducer(state(), g), accel::ValueError);
    CHECK_THAT(message([&] { (void)dist::GradReducer(state(), g); }), Catch::Contains("grads[1]") && Catch::Contains("int"));
    Block b{Tensor::zeros(Shape{2}), Tensor{}};
    CHECK_THROWS_AS(dist::GradReducer(state(), b), accel::ValueError);
    CHECK_THAT(message([&] { (void)dist::GradReducer(state(), b); }), Catch::Contains("grads.<field 1>"));
  }
  SECTION("a structure other than the planned one") {
    Grads g = make_grads(rank());
    dist::GradReducer reducer(state(), g);
    Grads other = make_grads(rank());
    other.blocks.at("b").w = Tensor::zeros(Shape{101});
    CHECK_THROWS_AS(reducer.all_reduce(other), accel::ShapeError);
    CHECK_THAT(message([&] { reducer.all_reduce(other); }), Catch::Contains("grads.<field 1>['b'].<field 0>"));
    other = make_grads(rank());
    other.extra[1] = other.extra[1].to(DType::f32);
    CHECK_THROWS_AS(reducer.all_reduce(other), accel::DTypeError);
    other = make_grads(rank());
    other.extra.push_back(Tensor::zeros(Shape{1}));
    CHECK_THROWS_AS(reducer.all_reduce(other), accel::ValueError);
    other.extra.resize(1);
    CHECK_THROWS_AS(reducer.all_reduce(other), accel::ValueError);
    CHECK(reducer.all_reduce_count() == 0);
  }
  SECTION("options") {
    std::vector<Tensor> g{Tensor::zeros(Shape{2})};
    CHECK_THROWS_AS(dist::GradReducer(state(), g, dist::GradReducerOptions{.bucket_cap_mb = 0}), accel::ValueError);
    CHECK_THROWS_AS(dist::GradReducer(state(), g, accel::DistributedDataParallelKwargs{.bucket_cap_mb = -1}),
                    accel::ValueError);
    accel::DistributedDataParallelKwargs hook;
    hook.comm_hook = accel::utils::DDPCommunicationHookType::fp16;
    CHECK_THAT(message([&] { (void)dist::GradReducer(state(), g, hook); }), Catch::Contains("comm_hook = fp16"));
  }
}

TEST_CASE("GradReducer in debug mode: structures that differ across processes fail on every process", "[dist][mpi]") {
  DebugScope debug(true);
  std::vector<Tensor> g{Tensor::zeros(Shape{rank() + 1, 2})};
  if (world() == 1) {
    dist::GradReducer reducer(state(), g);
    CHECK_NOTHROW(reducer.all_reduce(g));
    return;
  }
  try {
    dist::GradReducer reducer(state(), g);
    FAIL("no DistributedOperationException on process " << rank());
  } catch (const dist::DistributedOperationException& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("accel::dist::GradReducer") && Catch::Contains("float32[2, 2]"));
  }
  // Equal structures pass the check, and the reduce is checked too.
  std::vector<Tensor> same{Tensor::full(Shape{2, 2}, rank())};
  dist::GradReducer reducer(state(), same);
  reducer.all_reduce(same);
  CHECK(values(same[0]) == std::vector<double>(4, (world() - 1) / 2.0));
}

TEST_CASE("GradReducer under no_dist averages over one process without communicating", "[dist][mpi]") {
  const accel::dist::PartialState<> local;
  Grads g = make_grads(rank());
  dist::GradReducer reducer(local, g, dist::GradReducerOptions{.bucket_cap_mb = 1.0 / 1024, .gradient_as_bucket_view = true});
  reducer.all_reduce(g);
  CHECK(reducer.all_reduce_count() == 0);
  for (std::size_t i = 0; i < specs.size(); ++i) CHECK(values(leaves(g)[i]) == own_values(i));
  CHECK(leaves(g)[2].shares_storage(reducer.buckets()[reducer.bucket_of(2)].buffer));
  CHECK(dist::any_process(local, rank() == 0) == (rank() == 0));
}

TEST_CASE("any_process is true everywhere when one process says so", "[dist][mpi]") {
  CHECK_FALSE(dist::any_process(state(), false));
  CHECK(dist::any_process(state(), true));
  CHECK(dist::any_process(state(), rank() == world() - 1));
  CHECK(dist::any_process(state(), rank() == 0));
}

TEST_CASE("DynamicLossScaler agrees across processes: one process's inf makes every process skip and back off",
          "[dist][mpi]") {
  accel::DynamicLossScaler scaler(accel::GradScalerKwargs{.init_scale = 1024, .growth_interval = 2});
  auto grads_with_inf = [&](bool inf) {
    std::map<std::string, Tensor> g{{"w", Tensor::full(Shape{4}, 512.0)}, {"b", Tensor::full(Shape{2}, 256.0, DType::f16)}};
    if (inf) g["b"] = Tensor::from_vector(std::vector<float>{1, std::numeric_limits<float>::infinity()}).to(DType::f16);
    return g;
  };
  auto all_scales_equal = [&](double expect) {
    const auto scales = dist::gather_object(state(), scaler.get_scale());
    REQUIRE(scales.size() == static_cast<std::size_t>(world()));
    for (const double s : scales) CHECK(s == expect);
  };

  // Process 0 alone overflows: every process sees it and skips.
  auto g = grads_with_inf(rank() == 0);
  CHECK(scaler.unscale_(g, state()));
  int steps = 0;
  CHECK_FALSE(scaler.step(g, state(), [&] { ++steps; }));
  CHECK(steps == 0);
  scaler.update();
  all_scales_equal(512);

  // Clean everywhere: every process steps; two clean steps grow the scale on every process.
  for (int i = 0; i < 2; ++i) {
    auto clean = grads_with_inf(false);
    CHECK(scaler.step(clean, state(), [&] { ++steps; }));
    CHECK(values(clean.at("w")) == std::vector<double>(4, 1.0));
    scaler.update();
  }
  CHECK(steps == 2);
  all_scales_equal(1024);

  // The last process overflows and unscales without the state: step(grads, state, f) still agrees.
  auto late = grads_with_inf(rank() == world() - 1);
  CHECK(scaler.unscale_(late) == (rank() == world() - 1));
  CHECK_FALSE(scaler.step(late, state(), [&] { ++steps; }));
  scaler.update();
  CHECK(steps == 2);
  all_scales_equal(512);
  CHECK(scaler.growth_tracker() == 0);
}

TEST_CASE("DynamicLossScaler after a GradReducer: the reduce carries one process's NaN to all", "[dist][mpi]") {
  accel::DynamicLossScaler scaler(accel::GradScalerKwargs{.init_scale = 8});
  std::vector<Tensor> g{Tensor::full(Shape{3}, 8.0), Tensor::full(Shape{2}, 16.0, DType::bf16)};
  if (rank() == world() - 1) g[1] = Tensor::from_vector(std::vector<float>{std::nanf(""), 16}).to(DType::bf16);
  dist::GradReducer reducer(state(), g, dist::GradReducerOptions{.gradient_as_bucket_view = true});
  reducer.all_reduce(g);
  CHECK(std::isnan(values(g[1])[0]));
  CHECK(scaler.unscale_(g, state()));
  CHECK(values(g[0]) == std::vector<double>(3, 1.0));
  scaler.update();
  CHECK(scaler.get_scale() == 4);
}
