// Progress of work counted in bytes (writing the default model, loading a checkpoint) for the
// `accel` commands: io::ProgressBar's line on stderr, counted in MiB.
//
//   progress_wanted(asked, quiet)           --progress, or stderr is a terminal; never under --quiet
//   ByteProgressBar bar("Loading checkpoint", progress_wanted(...) ? &std::cerr : nullptr);
//   load(..., {.progress = bar.callback()});   bar.finish();
//
// The total is learned from the first report, so a callee that sizes its work itself (the
// checkpoint loader sums its files) needs nothing more from the caller. The line is redrawn only
// when the MiB count changes, so a checkpoint of 100k small tensors costs as many redraws as MiB.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <functional>
#include <iostream>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "accel/io/progress.hpp"

namespace accel::cli {

/// Called with the bytes done so far and the total.
using ByteProgressFn = std::function<void(std::size_t done_bytes, std::size_t total_bytes)>;

/// Whether progress bars draw: when asked (--progress) or when stderr is a terminal, never under --quiet.
inline bool progress_wanted(bool asked, bool quiet) { return !quiet && (asked || ::isatty(STDERR_FILENO)); }

/// A progress line over a byte count (see the header comment); draws nothing when `out` is null.
class ByteProgressBar {
 public:
  ByteProgressBar(std::string desc, std::ostream* out) : desc_(std::move(desc)), out_(out) {}
  ByteProgressBar(const ByteProgressBar&) = delete;
  ByteProgressBar& operator=(const ByteProgressBar&) = delete;

  /// Counts `done` of `total` bytes and redraws when the MiB shown change.
  void update(std::size_t done, std::size_t total) {
    if (!out_ || finished_) return;
    constexpr std::size_t mib = std::size_t{1} << 20;
    if (!bar_) {
      total_mib_ = total == 0 ? 1 : (total + mib - 1) / mib;
      bar_.emplace(desc_, total_mib_, out_, " MiB");
    }
    const std::size_t shown = total == 0 ? total_mib_ : static_cast<std::size_t>(static_cast<double>(done) / static_cast<double>(total) * static_cast<double>(total_mib_));
    if (shown > bar_->done()) bar_->update(shown - bar_->done());
  }

  /// The update function, for options that take a callback; valid while this bar lives.
  ByteProgressFn callback() {
    if (!out_) return {};
    return [this](std::size_t done, std::size_t total) { update(done, total); };
  }

  /// Ends the line (once); later updates draw nothing.
  void finish() {
    finished_ = true;
    bar_.reset();
  }

 private:
  std::string desc_;
  std::ostream* out_;
  std::optional<io::ProgressBar> bar_;
  std::size_t total_mib_ = 0;
  bool finished_ = false;
};

}  // namespace accel::cli
