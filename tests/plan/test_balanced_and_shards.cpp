#include <catch2/catch.hpp>

#include "conformance_spec.hpp"

#include <string>

#include "accel/nn/spec.hpp"
#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/shard_checkpoint.hpp"

using namespace accel;
using plan::MaxMemory;

namespace {
using accel_test::spec;
}  // namespace

TEST_CASE("get_balanced_memory spreads the model over the GPUs", "[plan][balanced]") {
  auto m = spec("toy_model_for_test");
  MaxMemory mm{{Placement::gpu(0), ByteSize(300)}, {Placement::gpu(1), ByteSize(300)}};
  auto b = get_balanced_memory(*m, mm);
  CHECK(b.entries()[0].second == ByteSize(215));  // 236 // 2 + int(1.25 * 78)
  CHECK(b.entries()[1].second == ByteSize(300));  // the last GPU keeps its budget
  mm.add(Placement::gpu(2), ByteSize(300));
  b = get_balanced_memory(*m, mm, {}, {}, /*low_zero=*/true);
  CHECK(b.entries()[0].second == ByteSize(0));
  CHECK(b.entries()[1].second == ByteSize(215));
  // Ids need not start at 0 and disk passes through (Accelerate crashes on both).
  MaxMemory odd{{Placement::gpu(3), ByteSize(300)}, {Placement::gpu(1), ByteSize(300)}, {Placement::disk(), ByteSize(1000)}};
  b = get_balanced_memory(*m, odd, {}, {}, true);
  REQUIRE(b.size() == 3);
  CHECK(b.entries()[0].first == Placement::gpu(1));
  CHECK(b.entries()[2].first == Placement::disk());
  CHECK(b.entries()[2].second == ByteSize(1000));
  MaxMemory cpu{{Placement::cpu(), ByteSize(10)}};
  CHECK(get_balanced_memory(*m, cpu) == cpu);
}

TEST_CASE("shard_checkpoint starts a shard when the next tensor overflows", "[plan][shard]") {
  std::vector<plan::ShardTensor> ts;
  int ids[7];
  const std::int64_t g = 1'500'000'000;  // 6 GB of float32
  const std::int64_t s = 500'000'000;    // 2 GB
  ts.push_back({"a", DType::f32, Shape{g}, &ids[0]});
  ts.push_back({"b", DType::f32, Shape{g}, &ids[1]});
  ts.push_back({"c", DType::f32, Shape{s}, &ids[2]});
  ts.push_back({"d", DType::f32, Shape{g}, &ids[3]});
  ts.push_back({"d_alias", DType::f32, Shape{g}, &ids[3]});
  ts.push_back({"e", DType::f32, Shape{s}, &ids[4]});
  ts.push_back({"f", DType::f32, Shape{s}, &ids[5]});
  const auto p = shard_checkpoint(ts);
  REQUIRE(p.shards.size() == 3);
  CHECK(p.shards[0].first == "pytorch_model-00001-of-00003.bin");
  CHECK(p.shards[2].second == std::vector<std::string>{"d", "d_alias", "e", "f"});
  REQUIRE(p.index);
  CHECK(p.index->total_size == ByteSize(24'000'000'000LL));

  const auto big_first = shard_checkpoint(ts, std::int64_t{1000}, "model.safetensors");
  CHECK(big_first.shards[0].second.empty());  // the first tensor already overflows
  CHECK(big_first.shards[1].first == "model-00002-of-00007.safetensors");

  auto m = spec("toy_model_for_test_tied");
  const auto tied = shard_checkpoint(plan::shard_tensors_of(*m), std::int64_t{60});
  CHECK(tied.shards[1].second == std::vector<std::string>{"linear1.weight", "linear2.weight"});
  const auto one = shard_checkpoint(plan::shard_tensors_of(*m), "1KB");
  CHECK(one.shards.size() == 1);
  CHECK_FALSE(one.index);
  CHECK_THROWS_AS(shard_checkpoint(ts, "10TB"), ValueError);
}
