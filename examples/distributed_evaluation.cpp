// Distributed evaluation, launched with mpirun: each process scores its share of the samples,
// the predictions (of a different length on each process) are padded to the longest
// (pad_across_processes) and gathered, and every process holds all of them in sample order.
//
//   mpirun -np 2 ./distributed_evaluation        (alone it is a world of one and needs no MPI_Init)
//
// The "model" predicts, for sample s, the row s*10, s*10+1, ... of a length that depends on the
// process (2 + rank), so the rows only line up after padding with -1. The program checks the
// gathered matrix against what one process computing everything would have, and the reduced
// count of samples, and exits 1 on any difference.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "accel/dist/dist.hpp"

using namespace accel;

int main() {
  const dist::PartialState<policy::multi_cpu<>> state;
  std::vector<int> samples(10);
  std::iota(samples.begin(), samples.end(), 0);
  const std::vector<int> mine = state.split_between_processes(samples);

  const std::int64_t width = 2 + state.process_index();
  std::vector<float> rows;
  for (const int s : mine) {
    for (std::int64_t j = 0; j < width; ++j) rows.push_back(static_cast<float>(s * 10 + j));
  }
  const Tensor predictions = Tensor::from_vector(rows, Shape{static_cast<std::int64_t>(mine.size()), width});
  const Tensor padded = dist::pad_across_processes(state, predictions, /*dim=*/1, /*pad_index=*/-1);
  const Tensor all = dist::gather(state, padded);
  const Tensor count = dist::reduce(state, Tensor::from_vector(std::vector<float>{float(mine.size())}, Shape{1}), "sum");

  // What one process would have: sample s belongs to the process whose share holds it.
  const int world = state.num_processes();
  const std::int64_t widest = 2 + world - 1;
  bool ok = all.shape() == Shape{10, widest} && count.to_vector<float>() == std::vector<float>{10.0f};
  const auto got = all.to_vector<float>();
  for (int s = 0; ok && s < 10; ++s) {
    // Accelerate's split: the first size % world shares are one longer.
    int owner = 0;
    for (std::size_t begin = 0, r = 0; r < static_cast<std::size_t>(world); ++r) {
      const std::size_t len = samples.size() / world + (r < samples.size() % world ? 1 : 0);
      if (static_cast<std::size_t>(s) >= begin && static_cast<std::size_t>(s) < begin + len) owner = static_cast<int>(r);
      begin += len;
    }
    for (std::int64_t j = 0; j < widest; ++j) {
      const float want = j < 2 + owner ? static_cast<float>(s * 10 + j) : -1.0f;
      ok = ok && got[static_cast<std::size_t>(s * widest + j)] == want;
    }
  }
  if (state.is_main_process()) {
    std::printf("%d process(es), %zu samples here, gathered %s predictions padded with -1:\n", world, mine.size(),
                all.shape().str().c_str());
    for (int s = 0; s < 10; ++s) {
      std::printf("  sample %d:", s);
      for (std::int64_t j = 0; j < widest; ++j) std::printf(" %g", got[static_cast<std::size_t>(s * widest + j)]);
      std::printf("\n");
    }
    std::printf("%s\n", ok ? "every process holds every prediction, in sample order" : "MISMATCH");
  }
  return ok ? 0 : 1;
}
