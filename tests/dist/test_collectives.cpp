// gather, broadcast, reduce and pad_across_processes over tensors of every dtype nested in
// structs, tuples, maps and optionals, with 1, 2 and 3 processes; and their errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "dist_fixture.hpp"

using namespace accel_dist_test;
namespace dist = accel::dist;

namespace {

struct Batch {
  Tensor ids;
  std::map<std::string, Tensor> extra;
  std::tuple<Tensor, std::optional<Tensor>> pair;
};

const Shape batch_shape{2, 3};

Batch make_batch(DType d, int r) {
  return Batch{sample(d, r, batch_shape),
               {{"a", sample(d, r, Shape{4})}, {"b", sample(d, r, Shape{1, 2})}},
               {sample(d, r, Shape{3}), std::nullopt}};
}

/// Every tensor of a Batch, in walk order.
std::vector<Tensor> leaves(const Batch& b) { return {b.ids, b.extra.at("a"), b.extra.at("b"), std::get<0>(b.pair)}; }

}  // namespace

TEST_CASE("gather concatenates every process's tensors of every dtype along dim 0", "[dist][mpi]") {
  const int n = world();
  for (const DType d : all_dtypes()) {
    CAPTURE(accel::dtype_name(d), n);
    const Batch mine = make_batch(d, rank());
    const Batch all = dist::gather(state(), mine);
    REQUIRE_FALSE(std::get<1>(all.pair).has_value());
    const auto in = leaves(mine), out = leaves(all);
    for (std::size_t leaf = 0; leaf < in.size(); ++leaf) {
      Shape expect_shape = in[leaf].shape();
      expect_shape[0] *= n;
      CHECK(out[leaf].shape() == expect_shape);
      CHECK(out[leaf].dtype() == d);
      std::vector<double> expect;
      for (int r = 0; r < n; ++r) {
        const auto v = values(sample(d, r, in[leaf].shape()));
        expect.insert(expect.end(), v.begin(), v.end());
      }
      CHECK(values(out[leaf]) == expect);
    }
  }
}

TEST_CASE("gather turns a zero-dimensional tensor into one row per process", "[dist][mpi]") {
  const Tensor scalar = Tensor::full(Shape{}, rank() + 0.5, DType::f32);
  const Tensor all = dist::gather(state(), scalar);
  if (!state().communicates()) {
    CHECK(all.dim() == 0);
    return;
  }
  REQUIRE(all.shape() == Shape{world()});
  for (int r = 0; r < world(); ++r) CHECK(all.at<float>({r}) == r + 0.5f);
}

TEST_CASE("gather reads non-contiguous views and vectors of tensors", "[dist][mpi]") {
  const Tensor base = sample(DType::f32, rank(), Shape{3, 2});
  const std::vector<Tensor> mine{base.transpose(0, 1)};  // [2, 3], not contiguous
  const auto all = dist::gather(state(), mine);
  REQUIRE(all.size() == 1);
  REQUIRE(all[0].shape() == Shape{2 * world(), 3});
  for (int r = 0; r < world(); ++r) {
    const Tensor expect = sample(DType::f32, r, Shape{3, 2}).transpose(0, 1);
    CHECK(values(all[0].narrow(0, 2 * r, 2)) == values(expect));
  }
}

TEST_CASE("all_gather_into_tensor fills a caller's buffer, again and again, and checks it", "[dist][mpi]") {
  const int n = world();
  for (const DType d : all_dtypes()) {
    CAPTURE(accel::dtype_name(d), n);
    Tensor out = Tensor::empty(Shape{2 * n, 3}, d, accel::Device::cpu());
    const void* buffer = out.data_ptr();
    for (int round = 0; round < 2; ++round) {
      const Tensor mine = sample(d, rank() + round, Shape{2, 3});
      Tensor& same = dist::all_gather_into_tensor(state(), out, mine);
      CHECK(&same == &out);
      CHECK(out.data_ptr() == buffer);
      for (int r = 0; r < n; ++r) CHECK(values(out.narrow(0, 2 * r, 2)) == values(sample(d, r + round, Shape{2, 3})));
    }
  }
  const Tensor mine = sample(DType::f32, rank(), Shape{2, 3});
  Tensor scalar_rows = Tensor::empty(Shape{n}, DType::f32, accel::Device::cpu());
  dist::all_gather_into_tensor(state(), scalar_rows, Tensor::full(Shape{}, rank() + 0.5, DType::f32));
  for (int r = 0; r < n; ++r) CHECK(scalar_rows.at<float>({r}) == r + 0.5f);
  Tensor wrong_shape = Tensor::empty(Shape{2 * n + 1, 3}, DType::f32, accel::Device::cpu());
  CHECK_THROWS_AS(dist::all_gather_into_tensor(state(), wrong_shape, mine), accel::ShapeError);
  Tensor wrong_dtype = Tensor::empty(Shape{2 * n, 3}, DType::f16, accel::Device::cpu());
  CHECK_THROWS_AS(dist::all_gather_into_tensor(state(), wrong_dtype, mine), accel::DTypeError);
  Tensor strided = Tensor::empty(Shape{3, 2 * n}, DType::f32, accel::Device::cpu()).transpose(0, 1);
  CHECK_THROWS_WITH(dist::all_gather_into_tensor(state(), strided, mine), Catch::Contains("contiguous"));
}

TEST_CASE("broadcast gives every process the sender's tensors, written in place", "[dist][mpi]") {
  const int from = world() - 1;
  for (const DType d : all_dtypes()) {
    CAPTURE(accel::dtype_name(d));
    const Batch mine = make_batch(d, rank());
    const Batch got = dist::broadcast(state(), mine, from);
    const auto in = leaves(mine), out = leaves(got);
    for (std::size_t leaf = 0; leaf < in.size(); ++leaf) {
      CHECK(values(out[leaf]) == values(sample(d, from, in[leaf].shape())));
      CHECK(out[leaf].is_same(in[leaf]));  // contiguous and writable: in place
    }
  }
}

TEST_CASE("broadcast writes through a non-contiguous view", "[dist][mpi]") {
  Tensor base = sample(DType::i32, rank(), Shape{3, 2});
  const Tensor view = base.transpose(0, 1);
  const Tensor got = dist::broadcast(state(), view, 0);
  CHECK(values(got) == values(sample(DType::i32, 0, Shape{3, 2}).transpose(0, 1)));
  CHECK(values(base) == values(sample(DType::i32, 0, Shape{3, 2})));
}

TEST_CASE("broadcast rejects a process that does not exist", "[dist][mpi]") {
  const Tensor t = Tensor::zeros(Shape{2});
  CHECK_THROWS_AS(dist::broadcast(state(), t, world()), accel::ValueError);
  CHECK_THROWS_WITH(dist::broadcast(state(), t, -1), Catch::Contains("from_process -1 is not a process"));
}

TEST_CASE("reduce sums, averages and scales every dtype over the processes", "[dist][mpi]") {
  const int n = world();
  for (const DType d : all_dtypes()) {
    CAPTURE(accel::dtype_name(d), n);
    const Batch mine = make_batch(d, rank());
    const auto in = leaves(mine);
    // Exact sums in f32 (small integers), rounded once to the dtype: what accel promises.
    auto exact_sum = [&](const Shape& shape) {
      std::vector<float> s(static_cast<std::size_t>(shape.numel()), 0.0f);
      for (int r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < s.size(); ++i) {
          const float v = sample_value(r, static_cast<std::int64_t>(i), d);
          s[i] = d == DType::boolean ? static_cast<float>(s[i] != 0 || v != 0) : s[i] + v;
        }
      }
      return s;
    };
    for (const char* how : {"sum", "none"}) {
      const Batch got = dist::reduce(state(), mine, how);
      const auto out = leaves(got);
      for (std::size_t leaf = 0; leaf < in.size(); ++leaf) {
        CHECK(out[leaf].dtype() == d);
        CHECK(out[leaf].shape() == in[leaf].shape());
        CHECK_FALSE(out[leaf].shares_storage(in[leaf]));
        if (d == DType::u8 || d == DType::i8 || d == DType::i16 || d == DType::i32 || d == DType::i64 ||
            d == DType::boolean) {
          const auto s = exact_sum(in[leaf].shape());
          CHECK(values(out[leaf]) == std::vector<double>(s.begin(), s.end()));
        } else {
          CHECK(values(out[leaf]) == rounded(exact_sum(in[leaf].shape()), d, in[leaf].shape()));
        }
      }
    }
    if (!accel::is_floating_point(d)) {
      CHECK_THROWS_AS(dist::reduce(state(), mine, "mean"), accel::DTypeError);
      CHECK_THROWS_WITH(dist::reduce(state(), mine, "sum", 2.0), Catch::Contains("needs a floating tensor"));
      continue;
    }
    const Batch mean = dist::reduce(state(), mine);  // "mean" is the default
    const Batch scaled = dist::reduce(state(), mine, "mean", 0.5);
    const auto m = leaves(mean), sc = leaves(scaled);
    for (std::size_t leaf = 0; leaf < in.size(); ++leaf) {
      const auto s = exact_sum(in[leaf].shape());
      std::vector<float> avg(s.size()), half(s.size());
      for (std::size_t i = 0; i < s.size(); ++i) {
        avg[i] = s[i] / static_cast<float>(n);
        half[i] = avg[i] * 0.5f;
      }
      if (d == DType::f64) {
        // f64 sums and divides in f64: compare with the same arithmetic.
        std::vector<double> a(s.size()), h(s.size());
        for (std::size_t i = 0; i < s.size(); ++i) {
          a[i] = static_cast<double>(s[i]) / n;
          h[i] = a[i] * 0.5;
        }
        CHECK(values(m[leaf]) == a);
        CHECK(values(sc[leaf]) == h);
      } else {
        CHECK(values(m[leaf]) == rounded(avg, d, in[leaf].shape()));
        CHECK(values(sc[leaf]) == rounded(half, d, in[leaf].shape()));
      }
    }
  }
}

TEST_CASE("reduce and gather recycle the blocks of results the caller dropped, never one it still holds",
          "[dist][mpi]") {
  const int n = world();
  const bool recycles = state().communicates();  // started alone, collectives never reach MPI
  dist::release_cached_results();
  // 262,147 elements (1 MiB and a bit, not a multiple of the process count): the all-reduce takes
  // Open MPI's ring (dist/mpi_tuning.hpp), whose segments must not lose the remainder.
  const std::int64_t count = (std::int64_t{1} << 18) + 3;
  const Tensor mine = Tensor::full(Shape{count}, rank() + 1.0, DType::f32);
  const float total = static_cast<float>(n * (n + 1) / 2);
  auto all_equal = [&](const Tensor& t, float v) {
    const auto got = t.to_vector<float>();
    return std::all_of(got.begin(), got.end(), [&](float x) { return x == v; });
  };
  Tensor first = dist::reduce(state(), mine, "sum");
  const void* block = first.data_ptr();
  CHECK(all_equal(first, total));
  Tensor second = dist::reduce(state(), mine, "sum");
  CHECK(second.data_ptr() != block);
  CHECK(all_equal(first, total));
  const std::size_t before_drop = accel::memory_stats(Device::cpu()).allocated_bytes;
  first = Tensor();
  if (recycles) {
    // Idle, the block stays allocated (and counted) for the next result of its size.
    CHECK(accel::memory_stats(Device::cpu()).allocated_bytes == before_drop);
  }
  Tensor third = dist::reduce(state(), mine, "mean");
  if (recycles) CHECK(third.data_ptr() == block);
  CHECK(all_equal(third, total / static_cast<float>(n)));
  // A view keeps its block from being taken.
  const Tensor view = third.narrow(0, 0, 4);
  third = Tensor();
  Tensor fourth = dist::reduce(state(), mine, "sum");
  CHECK(fourth.data_ptr() != block);
  CHECK(fourth.data_ptr() != second.data_ptr());
  CHECK(all_equal(view, total / static_cast<float>(n)));
  CHECK(all_equal(fourth, total));

  Tensor gathered = dist::gather(state(), mine);
  const void* gathered_block = gathered.data_ptr();
  gathered = Tensor();
  gathered = dist::gather(state(), mine);
  if (recycles) CHECK(gathered.data_ptr() == gathered_block);
  for (int r = 0; r < n; ++r) CHECK(all_equal(gathered.narrow(0, r * count, count), r + 1.0f));

  // release_cached_results frees the idle blocks, and only those.
  second = Tensor();
  fourth = Tensor();
  gathered = Tensor();
  const std::size_t held = accel::memory_stats(Device::cpu()).allocated_bytes;
  dist::release_cached_results();
  const std::size_t released = held - accel::memory_stats(Device::cpu()).allocated_bytes;
  // second's and fourth's blocks and the gather's; third's stays with its view.
  CHECK(released == (recycles ? (2 + static_cast<std::size_t>(n)) * mine.nbytes() : 0));
  CHECK(all_equal(view, total / static_cast<float>(n)));

  // Under a CPU budget nothing idle is kept.
  {
    const accel::ScopedMemoryLimit budget(Device::cpu(), std::size_t{1} << 40);
    const std::size_t start = accel::memory_stats(Device::cpu()).allocated_bytes;
    Tensor r = dist::reduce(state(), mine, "sum");
    CHECK(all_equal(r, total));
    r = Tensor();
    CHECK(accel::memory_stats(Device::cpu()).allocated_bytes == start);
  }
}

TEST_CASE("reduce names the reductions it knows", "[dist][mpi]") {
  const Tensor t = Tensor::ones(Shape{2});
  CHECK_THROWS_AS(dist::reduce(state(), t, "max"), accel::ValueError);
  CHECK_THROWS_WITH(dist::reduce(state(), t, "max"), Catch::Contains("\"mean\", \"sum\" or \"none\""));
}

TEST_CASE("pad_across_processes pads uneven tensors to the longest, after or before the data", "[dist][mpi]") {
  const int n = world(), r = rank();
  for (const DType d : all_dtypes()) {
    CAPTURE(accel::dtype_name(d), n);
    // Process r holds r + 1 rows: the longest has n.
    const Tensor mine = sample(d, r, Shape{r + 1, 2});
    const double pad = d == DType::boolean ? 1.0 : (d == DType::u8 ? 7.0 : -1.0);
    for (const bool first : {false, true}) {
      std::map<std::string, Tensor> in{{"x", mine}};
      const auto padded = dist::pad_across_processes(state(), in, 0, pad, first);
      const Tensor& p = padded.at("x");
      REQUIRE(p.shape() == Shape{n, 2});
      const auto v = values(p);
      const auto own = values(mine);
      const std::int64_t pad_rows = n - (r + 1);
      const double pad_value = values(Tensor::full(Shape{1}, pad, d))[0];
      for (std::int64_t row = 0; row < n; ++row) {
        const bool is_pad = first ? row < pad_rows : row >= r + 1;
        const std::int64_t src = first ? row - pad_rows : row;
        for (std::int64_t c = 0; c < 2; ++c) {
          const double got = v[static_cast<std::size_t>(row * 2 + c)];
          CHECK(got == (is_pad ? pad_value : own[static_cast<std::size_t>(src * 2 + c)]));
        }
      }
      // Padded, the processes' tensors gather.
      const Tensor all = dist::gather(state(), p);
      CHECK(all.shape() == Shape{n * n, 2});
    }
  }
}

TEST_CASE("pad_across_processes pads along a negative dimension and leaves short tensors alone", "[dist][mpi]") {
  const int n = world(), r = rank();
  const Tensor mine = sample(DType::f32, r, Shape{2, r + 1});
  const auto [p, scalar, vec] = dist::pad_across_processes(
      state(), std::make_tuple(mine, Tensor::full(Shape{}, 3.0), sample(DType::f32, r, Shape{2})), -1);
  CHECK(p.shape() == Shape{2, n});
  CHECK(p.at<float>({1, n - 1}) == (r + 1 == n ? sample_value(r, 2 * (r + 1) - 1, DType::f32) : 0.0f));
  CHECK(scalar.dim() == 0);  // dim -1 is out of range for a scalar: returned as it is
  CHECK(vec.shape() == Shape{2});
  if (r + 1 == n) CHECK(p.is_same(mine));  // the longest is not copied
}

TEST_CASE("collectives take CPU tensors only under multi_cpu, and reject other leaves", "[dist][mpi]") {
  const Tensor meta = Tensor::empty(Shape{2}, DType::f32, Device::meta());
  CHECK_THROWS_AS(dist::gather(state(), meta), accel::DeviceError);
  CHECK_THROWS_WITH(dist::reduce(state(), meta), Catch::Contains("meta tensor of shape [2]"));
  const std::tuple<Tensor, int> mixed{Tensor::zeros(Shape{1}), 3};
  CHECK_THROWS_AS(dist::gather(state(), mixed), accel::ValueError);
  CHECK_THROWS_WITH(dist::broadcast(state(), mixed), Catch::Contains("unsupported leaf of type 'int'"));
}

TEST_CASE("no_dist collectives are identities, whatever launched the process", "[dist][mpi]") {
  const dist::PartialState<> one;
  CHECK(one.num_processes() == 1);
  CHECK(one.process_index() == 0);
  CHECK(one.distributed_type() == accel::DistributedType::no);
  CHECK_FALSE(one.backend().has_value());
  const Tensor t = sample(DType::f32, rank(), Shape{2});
  CHECK(dist::gather(one, t).is_same(t));
  CHECK(dist::broadcast(one, t).is_same(t));
  CHECK(dist::pad_across_processes(one, t).is_same(t));
  const Tensor doubled = dist::reduce(one, t, "sum", 2.0);
  CHECK_FALSE(doubled.shares_storage(t));
  CHECK(values(doubled) == std::vector<double>{2.0 * rank(), 2.0 * rank() + 2});
  CHECK(dist::gather_object(one, std::vector<int>{rank()}) == std::vector<int>{rank()});
  one.wait_for_everyone();
}
