// accel's collectives against raw MPI on the same bytes, in one run under mpirun:
//
//   mpirun -np 2 build/benchmarks/bench_collectives [--reps N]
//
// all-reduce  dist::reduce(state, t, "sum") of an f32 tensor  vs  MPI_Allreduce into a ready buffer
// all-gather  dist::gather(state, t)                          vs  MPI_Allgather into a ready buffer
// reducer     GradReducer::all_reduce over 64 MiB of f32 gradients in 98 tensors (with and without
//             gradient_as_bucket_view)                        vs  one in-place MPI_Allreduce of 64 MiB
//
// Sizes are each process's f32 bytes, 4 KiB to 64 MiB. A time is the slowest process's, between a
// barrier and the end of its call; each row prints the median of N repetitions (accel and raw
// alternate, first one then the other, so drift falls on both). GB/s is size / time (the
// algorithm bandwidth of nccl-tests). "overhead" is accel's median over raw's, minus one; the claim
// is <= 5% from 1 MiB up. Each variant receives into a buffer of its own (accel's results come
// from its recycled blocks, dist/result_pool.hpp). Three extra columns tell where a difference
// comes from:
//   reduce: "alloc+Allreduce" allocates a fresh result and reduces into it with the blocking call,
//           "Iallreduce+Wait" is the non-blocking call accel makes, with the algorithm accel chose
//           for the size (dist/mpi_tuning.hpp: Open MPI's ring from 256 KiB), waited for by
//           MPI_Wait instead of accel's polling, and "group op" accel's MpiGroup call alone
//           (non-blocking call and polling, no allocation);
//   gather: "alloc+Allgather" allocates a fresh result, "Iallgather+Wait" is libnbc's
//           non-blocking all-gather (accel's call above four processes; up to four it exchanges
//           point to point, dist/mpi.hpp), "group op" as above; and "into buffer" is
//           all_gather_into_tensor into a buffer kept across calls, as the raw call's is, with its
//           overhead over raw.
// Alone (one process) it says it needs mpirun and exits 0; without MPI it says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "accel/core/tensor.hpp"
#include "accel/dist/dist.hpp"

#if defined(ACCEL_WITH_MPI)
#include <mpi.h>
#endif

namespace {

#if defined(ACCEL_WITH_MPI)

using accel::DType;
using accel::Shape;
using accel::Tensor;
using State = accel::dist::PartialState<accel::policy::multi_cpu<>>;

template <class T>
void keep(const T& x) {
  asm volatile("" : : "g"(&x) : "memory");
}

/// The slowest process's seconds for one call of f, started together after a barrier.
double timed(const std::function<void()>& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Medians of each variant over `reps` rounds (after 2 warm-up rounds), the variants' order
/// rotating from round to round.
std::vector<double> medians(const std::vector<std::function<void()>>& variants, int reps) {
  std::vector<std::vector<double>> t(variants.size());
  for (int round = -2; round < reps; ++round) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const std::size_t v = (k + static_cast<std::size_t>(std::max(round, 0))) % variants.size();
      const double s = timed(variants[v]);
      if (round >= 0) t[v].push_back(s);
    }
  }
  std::vector<double> out;
  for (auto& x : t) out.push_back(median(std::move(x)));
  return out;
}

std::string size_name(std::size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

double gbps(std::size_t bytes, double s) { return static_cast<double>(bytes) / s / 1e9; }

void bench_reduce(const State& state, int reps, bool main) {
  if (main) {
    std::printf("\nall-reduce (sum, f32): accel::dist::reduce vs MPI_Allreduce, %d processes, median of %d\n",
                state.num_processes(), reps);
    std::printf("  %8s  %10s  %10s  %9s  |  %15s  %15s  %15s\n", "size", "accel GB/s", "MPI GB/s", "overhead",
                "alloc+Allreduce", "Iallreduce+Wait", "group op");
  }
  for (std::size_t bytes = 4u << 10; bytes <= (64u << 20); bytes *= 4) {
    const auto n = static_cast<std::int64_t>(bytes / 4);
    const Tensor t = Tensor::full(Shape{n}, 1.0);
    // Each variant receives into a buffer of its own: sharing one would leave it in the cache for
    // the next variant that uses it (15% at 16 MiB) and favour those.
    Tensor recv = Tensor::zeros(Shape{n}), recv_nb = Tensor::zeros(Shape{n}), recv_group = Tensor::zeros(Shape{n});
    const auto m = medians(
        {[&] { keep(accel::dist::reduce(state, t, "sum")); },
         [&] {
           MPI_Allreduce(t.data_ptr(), recv.data_ptr(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
         },
         [&] {
           Tensor c = Tensor::empty(Shape{n}, DType::f32, accel::Device::cpu());
           MPI_Allreduce(t.data_ptr(), c.data_ptr(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
           keep(c);
         },
         [&] {
           MPI_Request req;
           MPI_Iallreduce(t.data_ptr(), recv_nb.data_ptr(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                          &req);
           MPI_Wait(&req, MPI_STATUS_IGNORE);
         },
         [&] {
           state.mpi_group()->all_reduce(t.data_ptr(), recv_group.data_ptr(), static_cast<std::size_t>(n), DType::f32,
                                         accel::dist::detail::MpiReduce::sum, "bench");
         }},
        reps);
    if (main) {
      std::printf("  %8s  %10.2f  %10.2f  %8.1f%%  |  %10.2f GB/s  %10.2f GB/s  %10.2f GB/s\n", size_name(bytes).c_str(),
                  gbps(bytes, m[0]), gbps(bytes, m[1]), (m[0] / m[1] - 1) * 100, gbps(bytes, m[2]), gbps(bytes, m[3]),
                  gbps(bytes, m[4]));
    }
  }
}

void bench_gather(const State& state, int reps, bool main) {
  const int np = state.num_processes();
  if (main) {
    std::printf("\nall-gather (f32, each process's bytes): accel::dist::gather vs MPI_Allgather, %d processes, "
                "median of %d\n", np, reps);
    std::printf("  %8s  %10s  %10s  %9s  |  %11s  %9s  |  %15s  %15s  %15s\n", "size", "accel GB/s", "MPI GB/s",
                "overhead", "into buffer", "overhead", "alloc+Allgather", "Iallgather+Wait", "group op");
  }
  for (std::size_t bytes = 4u << 10; bytes <= (64u << 20); bytes *= 4) {
    const auto n = static_cast<std::int64_t>(bytes / 4);
    const Tensor t = Tensor::full(Shape{n}, 1.0);
    Tensor recv = Tensor::zeros(Shape{n * np}), recv_nb = Tensor::zeros(Shape{n * np});
    Tensor recv_group = Tensor::zeros(Shape{n * np}), into = Tensor::zeros(Shape{n * np});
    const int count = static_cast<int>(bytes);
    const auto m = medians(
        {[&] { keep(accel::dist::gather(state, t)); },
         [&] { MPI_Allgather(t.data_ptr(), count, MPI_BYTE, recv.data_ptr(), count, MPI_BYTE, MPI_COMM_WORLD); },
         [&] {
           Tensor out = Tensor::empty(Shape{n * np});
           MPI_Allgather(t.data_ptr(), count, MPI_BYTE, out.data_ptr(), count, MPI_BYTE, MPI_COMM_WORLD);
           keep(out);
         },
         [&] {
           MPI_Request req;
           MPI_Iallgather(t.data_ptr(), count, MPI_BYTE, recv_nb.data_ptr(), count, MPI_BYTE, MPI_COMM_WORLD, &req);
           MPI_Wait(&req, MPI_STATUS_IGNORE);
         },
         [&] { state.mpi_group()->all_gather(t.data_ptr(), bytes, recv_group.data_ptr(), "bench"); },
         [&] { accel::dist::all_gather_into_tensor(state, into, t); }},
        reps);
    if (main) {
      std::printf("  %8s  %10.2f  %10.2f  %8.1f%%  |  %11.2f  %8.1f%%  |  %10.2f GB/s  %10.2f GB/s  %10.2f GB/s\n",
                  size_name(bytes).c_str(), gbps(bytes, m[0]), gbps(bytes, m[1]), (m[0] / m[1] - 1) * 100,
                  gbps(bytes, m[5]), (m[5] / m[1] - 1) * 100, gbps(bytes, m[2]), gbps(bytes, m[3]), gbps(bytes, m[4]));
    }
  }
}

void bench_reducer(const State& state, int reps, bool main) {
  // A 16-layer model's f32 gradients: an 8 MiB embedding, per layer three 1 MiB matrices and three
  // 2 KiB biases, an 8 MiB head: 98 tensors, 64 MiB and 96 KiB.
  auto make = [] {
    std::vector<Tensor> g{Tensor::zeros(Shape{2048, 1024})};
    for (int l = 0; l < 16; ++l) {
      for (int k = 0; k < 3; ++k) {
        g.push_back(Tensor::zeros(Shape{512, 512}));
        g.push_back(Tensor::zeros(Shape{512}));
      }
    }
    g.push_back(Tensor::zeros(Shape{2048, 1024}));
    return g;
  };
  std::vector<Tensor> copied = make(), viewed = make();
  std::size_t bytes = 0;
  for (const Tensor& t : copied) bytes += t.nbytes();
  Tensor flat = Tensor::zeros(Shape{static_cast<std::int64_t>(bytes / 4)});
  const int count = static_cast<int>(bytes / 4);
  if (main) {
    std::printf("\nGradReducer::all_reduce (mean) of %zu f32 gradients, %.1f MiB, vs one MPI_Allreduce of the same "
                "bytes in place, %d processes, median of %d\n",
                copied.size(), static_cast<double>(bytes) / (1 << 20), state.num_processes(), reps);
    std::printf("  %-40s  %8s  %10s  %9s\n", "variant", "ms", "GB/s", "vs raw");
  }
  for (const double cap : {25.0, 4.0}) {
    accel::dist::GradReducer copying(state, copied, accel::dist::GradReducerOptions{.bucket_cap_mb = cap});
    accel::dist::GradReducer viewing(
        state, viewed, accel::dist::GradReducerOptions{.bucket_cap_mb = cap, .gradient_as_bucket_view = true});
    const auto m = medians(
        {[&] { copying.all_reduce(copied); }, [&] { viewing.all_reduce(viewed); },
         [&] { MPI_Allreduce(MPI_IN_PLACE, flat.data_ptr(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }},
        reps);
    if (main) {
      const std::string b = std::to_string(copying.buckets().size()) + " buckets of <= " +
                            std::to_string(static_cast<int>(cap)) + " MiB";
      std::printf("  %-40s  %8.2f  %10.2f  %8.1f%%\n", ("copy in/out, " + b).c_str(), m[0] * 1e3, gbps(bytes, m[0]),
                  (m[0] / m[2] - 1) * 100);
      std::printf("  %-40s  %8.2f  %10.2f  %8.1f%%\n", ("gradient_as_bucket_view, " + b).c_str(), m[1] * 1e3,
                  gbps(bytes, m[1]), (m[1] / m[2] - 1) * 100);
      std::printf("  %-40s  %8.2f  %10.2f  %9s\n", "raw MPI_Allreduce, one buffer", m[2] * 1e3, gbps(bytes, m[2]), "");
    }
  }
}

#endif

}  // namespace

int main(int argc, char** argv) {
#if !defined(ACCEL_WITH_MPI)
  (void)argc;
  std::printf("%s: accel was built without MPI (ACCEL_WITH_MPI); there is nothing to compare\n", argv[0]);
  return 0;
#else
  int reps = 15;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  const State state;
  if (state.num_processes() < 2) {
    std::printf("%s compares collectives between processes and needs several: mpirun -np 2 %s\n", argv[0], argv[0]);
    return 0;
  }
  const bool main_process = state.is_main_process();
  bench_reduce(state, reps, main_process);
  bench_gather(state, reps, main_process);
  bench_reducer(state, reps, main_process);
  std::fflush(stdout);
  return 0;
#endif
}
