// Finding the largest batch that fits: Accelerate's find_executable_batch_size around a forward.
//
//   auto step = find_executable_batch_size([&](std::int64_t batch_size) { ... }, 128);
//   step();   runs with 128, and after each OutOfMemoryError with int(0.9 * size), until one fits
//
// The memory here is the CPU's, capped with a ScopedMemoryLimit so the search has something to
// hit on any machine: one row of the forward is measured first, and the cap leaves room for about
// 20 rows above the model's weights. An allocation past the cap throws OutOfMemoryError inside the
// forward; unwinding frees what the failed attempt held, and the wrapper retries smaller. The size
// it settles on is remembered, so the next call (the next epoch) starts there with no retries.
// On a GPU the cap is the card itself: the same wrapper turns CUDA's out-of-memory into retries.
#include <cstdio>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/ops/elementwise.hpp"
#include "accel/utils/memory.hpp"
#include "accel/utils/random.hpp"

using namespace accel;

namespace {

const char* const kConfig = R"({"model_type": "llama", "vocab_size": 512, "hidden_size": 128,
  "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 128})";

constexpr std::int64_t kSeqLen = 32;

/// A batch of `rows` sequences of token ids.
Tensor make_batch(std::int64_t rows) {
  return randint(0, 512, {rows, kSeqLen});
}

}  // namespace

int main() try {
  auto lm = models::causal_lm_from_hf_config(nlohmann::json::parse(kConfig));
  set_seed(0);
  for (const auto& [name, p] : lm->module().named_parameters()) {
    if (p.dim() == 2) Tensor(p).copy_(ops::mul(randn(p.shape()), Tensor::full({}, 0.05)));
  }

  // What one row costs at its peak: the budget is written in rows of it.
  const Device cpu = Device::cpu();
  const std::size_t held = memory_stats(cpu).allocated_bytes;
  reset_peak_memory_stats(cpu);
  (void)lm->logits(make_batch(1));
  const std::size_t per_row = memory_stats(cpu).peak_allocated_bytes - held;
  const ScopedMemoryLimit limit(cpu, held + 20 * per_row);
  std::printf("one row of %lld tokens peaks at %.1f KiB; the cpu may hold %.1f KiB more than the weights\n",
              static_cast<long long>(kSeqLen), per_row / 1024.0, 20 * per_row / 1024.0);

  std::vector<std::int64_t> tried;
  std::int64_t failures = 0;
  auto forward = find_executable_batch_size(
      [&](std::int64_t batch_size) {
        tried.push_back(batch_size);
        try {
          return lm->logits(make_batch(batch_size)).shape()[0];
        } catch (const OutOfMemoryError&) {
          ++failures;
          throw;  // the wrapper's cue to retry smaller
        }
      },
      /*starting_batch_size=*/128);

  const std::int64_t rows = forward();
  const std::vector<std::int64_t> searched = tried;
  std::printf("tried:");
  for (auto b : searched) std::printf(" %lld", static_cast<long long>(b));
  std::printf("\nsettled on a batch of %lld after %lld out-of-memory failures\n", static_cast<long long>(rows),
              static_cast<long long>(failures));
  const bool freed = memory_stats(cpu).allocated_bytes == held;
  std::printf("memory after the search: %s\n", freed ? "back to the weights alone" : "NOT given back");

  // The next call starts from the remembered size: one try, no failure.
  tried.clear();
  const std::int64_t again = forward();
  std::printf("second call: batch %lld, %zu try\n", static_cast<long long>(again), tried.size());

  // The search is right when it followed Accelerate's rule from 128, every size but the last
  // failed, and the last is the one that ran.
  bool rule = searched.front() == 128;
  for (std::size_t i = 1; i < searched.size(); ++i) rule &= searched[i] == searched[i - 1] * 9 / 10;
  const bool ok = rule && failures + 1 == static_cast<std::int64_t>(searched.size()) && rows == searched.back() &&
                  failures > 0 && freed && again == rows && tried.size() == 1;
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "find_executable_batch_size: %s\n", e.what());
  return 1;
}
