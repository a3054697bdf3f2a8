// What inspect_checkpoint hashes for strided torch views (io/tensor_sha256.hpp): elements in C
// order for views that show each element once, stride-0 dimensions once, overlapping views by
// the storage they reach; and the progress bar on large checkpoints.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"
#include "../timing.hpp"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/io/inspect.hpp"
#include "accel/io/torch_bin_write.hpp"

using namespace accel;
using namespace accel::io;
using accel_test::TempDir;

namespace {

Tensor iota_f32(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from_vector(v, shape);
}

std::string contiguous_sha256(const Tensor& t) {
  const Tensor c = t.contiguous();
  return sha256_hex(c.data_ptr(), c.nbytes());
}

std::string view_sha256(const Tensor& t) { return tensor_sha256(t, plan_tensor_sha256(t)); }

}  // namespace

TEST_CASE("views that show each element once hash as their contiguous copy", "[io][inspect]") {
  const Tensor base = iota_f32({40, 30});
  for (const auto& [what, v] : {std::pair{"transpose", base.t()}, std::pair{"rows", base.narrow(0, 5, 20)},
                                std::pair{"columns", base.narrow(1, 3, 11)}, std::pair{"columns of the transpose", base.t().narrow(1, 2, 9)},
                                std::pair{"permuted 3-d", iota_f32({6, 7, 8}).permute({2, 0, 1})}}) {
    INFO(what);
    const TensorHashPlan p = plan_tensor_sha256(v);
    CHECK(p.what == HashedBytes::elements);
    CHECK(p.nbytes == v.nbytes());
    CHECK(view_sha256(v) == contiguous_sha256(v));
  }
  SECTION("larger than the staging buffer, gathered and in runs") {
    const Tensor big = iota_f32({1500, 700});
    CHECK(view_sha256(big.t()) == contiguous_sha256(big.t()));
    CHECK(view_sha256(big.narrow(1, 1, 600)) == contiguous_sha256(big.narrow(1, 1, 600)));
  }
}

TEST_CASE("stride-0 dimensions are hashed once, overlapping views by the storage they reach", "[io][inspect]") {
  const Tensor row = iota_f32({1, 4});
  const Tensor wide = row.expand({1000000, 3, 4});
  TensorHashPlan p = plan_tensor_sha256(wide);
  CHECK(p.what == HashedBytes::broadcast_once);
  CHECK(p.nbytes == 16);
  CHECK(view_sha256(wide) == contiguous_sha256(row));

  const Tensor storage = iota_f32({8});
  const Tensor windows = Tensor::from_storage(storage.storage(), DType::f32, {5, 4}, Shape{1, 1});  // unfold-like
  p = plan_tensor_sha256(windows);
  CHECK(p.what == HashedBytes::storage_span);
  CHECK(p.nbytes == 8 * 4);
  CHECK(view_sha256(windows) == contiguous_sha256(storage));
  CHECK(view_sha256(Tensor::from_storage(storage.storage(), DType::f32, {3, 2}, Shape{1, 2}, 1)) ==
        sha256_hex(static_cast<const char*>(storage.data_ptr()) + 4, 5 * 4));
}

TEST_CASE("inspect hashes torch.zeros(1).expand(10**9) from a tiny .bin without expanding it", "[io][inspect]") {
  TempDir dir;
  const std::string path = dir.file("expanded.bin");
  save_torch_bin({{"zeros_view", Tensor::zeros({1}).expand({1000000000})}, {"w", iota_f32({2, 3})}}, path);
  CHECK(std::filesystem::file_size(path) < 4096);

  // Hashing 4 GB would take seconds even optimised; one element takes nothing.
  const double bound = accel_test::seconds_bound(0.5);
  InspectResult r;
  const double seconds = accel_test::fastest_within(bound, [&] {
    const ScopedMemoryLimit cap(Device::cpu(), memory_stats(Device::cpu()).allocated_bytes + (std::size_t{16} << 20));
    return accel_test::seconds_of([&] { r = inspect_checkpoint(path); });
  });
  CHECK(seconds < bound);
  REQUIRE(r.tensors.size() == 2);
  const TensorSummary& v = r.tensors[0];
  CHECK(v.name == "zeros_view");
  CHECK(v.shape == Shape{1000000000});
  CHECK(v.nbytes == 4000000000u);
  CHECK(v.sha256_of == HashedBytes::broadcast_once);
  CHECK(v.sha256_nbytes == 4);
  const float zero = 0.0f;
  CHECK(v.sha256 == sha256_hex(&zero, sizeof zero));
  CHECK(r.tensors[1].sha256_of == HashedBytes::elements);
  CHECK(r.tensors[1].sha256 == contiguous_sha256(iota_f32({2, 3})));

  const auto j = inspect_to_json(r);
  CHECK(j["tensors"][0]["sha256_of"] == "broadcast_once");
  CHECK(j["tensors"][0]["sha256_nbytes"] == 4);
  CHECK_FALSE(j["tensors"][1].contains("sha256_of"));
  CHECK_THAT(format_inspect_table(r), Catch::Contains("(broadcast_once, 4 bytes hashed)"));
}

TEST_CASE("inspect draws its hashing progress only past the size threshold", "[io][inspect]") {
  TempDir dir;
  const std::string path = dir.file("m.bin");
  save_torch_bin({{"w", iota_f32({512, 1024})}}, path);
  std::ostringstream quiet, shown;
  inspect_checkpoint(path, {.progress = &quiet});
  CHECK(quiet.str().empty());
  inspect_checkpoint(path, {.progress = &shown, .progress_min_bytes = 1});
  CHECK_THAT(shown.str(), Catch::Contains("Hashing m.bin") && Catch::Contains("100%") && Catch::Contains("2/2 MiB"));
}
