// ProgressBar: a one-line, tqdm-style counter for loops over checkpoint shards.
//
//   ProgressBar bar("Loading checkpoint shards", files.size(), show_progress && files.size() > 1);
//   for (...) { ...; bar.update(); }
//
// It draws on stderr only when stderr is a terminal, so logs and pipes stay clean; tests pass
// their own stream. Each update redraws the line in place ("\r"); the destructor ends the line.
#pragma once

#include <cstddef>
#include <iostream>
#include <ostream>
#include <string>
#include <utility>

#include <unistd.h>

namespace accel::io {

class ProgressBar {
 public:
  /// Draws on std::cerr when `enabled` and stderr is a terminal.
  ProgressBar(std::string desc, std::size_t total, bool enabled)
      : ProgressBar(std::move(desc), total, enabled && ::isatty(STDERR_FILENO) ? &std::cerr : nullptr) {}
  /// Draws on `out` (nothing when null), terminal or not. `unit` follows the counts ("512/4096 MiB").
  ProgressBar(std::string desc, std::size_t total, std::ostream* out, std::string unit = "")
      : desc_(std::move(desc)), total_(total), out_(out), unit_(std::move(unit)) {
    draw();
  }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar() {
    if (out_) *out_ << '\n' << std::flush;
  }

  /// Counts `n` more steps done and redraws.
  void update(std::size_t n = 1) {
    done_ = done_ + n > total_ ? total_ : done_ + n;
    draw();
  }
  std::size_t done() const noexcept { return done_; }
  std::size_t total() const noexcept { return total_; }
  bool active() const noexcept { return out_ != nullptr; }

  /// The line as drawn: "desc:  50%|#####     | 1/2".
  std::string line() const {
    constexpr std::size_t width = 20;
    const std::size_t filled = total_ ? done_ * width / total_ : width;
    const std::size_t percent = total_ ? done_ * 100 / total_ : 100;
    std::string pct = std::to_string(percent);
    pct.insert(0, 3 - pct.size(), ' ');
    return desc_ + ": " + pct + "%|" + std::string(filled, '#') + std::string(width - filled, ' ') + "| " +
           std::to_string(done_) + "/" + std::to_string(total_) + unit_;
  }

 private:
  void draw() {
    if (out_) *out_ << '\r' << line() << std::flush;
  }

  std::string desc_;
  std::size_t total_;
  std::size_t done_ = 0;
  std::ostream* out_;
  std::string unit_;
};

}  // namespace accel::io
