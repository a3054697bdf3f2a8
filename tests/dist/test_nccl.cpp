// multi_gpu<nccl> on CUDA tensors: the communicator is bootstrapped over MPI at the first CUDA
// collective. Compiled wherever NCCL, CUDA and MPI are; it runs on a machine with one GPU per
// process (mpirun -np 1 on one GPU) and says it skipped elsewhere. Every process takes the same
// branch, so the collectives meet.
#include <catch2/catch.hpp>

#if defined(ACCEL_WITH_NCCL) && defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_MPI)

#include <vector>

#include "accel/backend/cuda/runtime.hpp"
#include "dist_fixture.hpp"

using namespace accel_dist_test;

TEST_CASE("NCCL gathers, broadcasts, reduces and pads CUDA tensors", "[dist][mpi][nccl]") {
  namespace dist = accel::dist;
  const dist::PartialState<accel::policy::multi_gpu<>> gpu;
  const int gpus = accel::cuda_device_count();
  if (!gpu.communicates() || gpus < gpu.local_world_size()) {
    WARN("NCCL path not run: needs mpirun and one GPU per process (" << gpus << " GPU(s), "
                                                                       << gpu.local_world_size() << " process(es))");
    return;
  }
  const int n = gpu.num_processes(), r = gpu.process_index();
  const Device dev = gpu.device();
  REQUIRE(dev.is_cuda());
  for (const DType d : all_dtypes()) {
    CAPTURE(accel::dtype_name(d), n);
    const Tensor mine = sample(d, r, Shape{2, 3}).to(dev);
    const Tensor all = dist::gather(gpu, mine);
    REQUIRE(all.device() == dev);
    REQUIRE(all.shape() == Shape{2 * n, 3});
    for (int p = 0; p < n; ++p) CHECK(values(all.narrow(0, 2 * p, 2)) == values(sample(d, p, Shape{2, 3})));

    Tensor into = Tensor::empty(Shape{2 * n, 3}, d, dev);
    dist::all_gather_into_tensor(gpu, into, mine);
    CHECK(values(into) == values(all));

    const Tensor b = dist::broadcast(gpu, mine, n - 1);
    CHECK(values(b) == values(sample(d, n - 1, Shape{2, 3})));

    const Tensor s = dist::reduce(gpu, mine, "sum");
    CHECK(s.device() == dev);
    std::vector<float> exact(6, 0.0f);
    for (int p = 0; p < n; ++p) {
      for (std::size_t i = 0; i < exact.size(); ++i) {
        const float v = sample_value(p, static_cast<std::int64_t>(i), d);
        exact[i] = d == DType::boolean ? static_cast<float>(exact[i] != 0 || v != 0) : exact[i] + v;
      }
    }
    CHECK(values(s) == rounded(exact, d, Shape{2, 3}));
    if (accel::is_floating_point(d)) {
      const auto half = values(dist::reduce(gpu, mine, "mean", 0.5));
      const auto expect = values(Tensor::from_vector(exact, Shape{2, 3}));
      for (std::size_t i = 0; i < half.size(); ++i) CHECK(half[i] == Approx(expect[i] / n * 0.5).epsilon(0.07));
    }
    const Tensor uneven = sample(d, r, Shape{r + 1, 2}).to(dev);
    CHECK(dist::pad_across_processes(gpu, uneven).shape() == Shape{n, 2});
  }
}

#endif
