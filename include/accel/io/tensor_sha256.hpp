// plan_tensor_sha256(t) -> TensorHashPlan;  tensor_sha256(t, plan, on_bytes) -> lower-case hex
//
// Which bytes of a tensor view `accel inspect` fingerprints, and the streaming hash over them.
// The work is bounded by the storage the view reaches, never by its logical size, so a stride-0
// view of a billion elements over one stored float costs one float:
//   * elements: no element is shown twice; its elements in C order (for a contiguous tensor, its
//     bytes as stored; for a transpose or a slice, what .contiguous() would hold).
//   * broadcast_once: dimensions of stride 0 (expand, broadcast_to) taken at index 0, the rest in
//     C order: the hash of the tensor the broadcast was made from.
//   * storage_span: other views that show elements more than once (as_strided, unfold); the
//     storage bytes from the first element the view reaches to its last, in storage order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/sha256.hpp"

namespace accel::io {

/// What a tensor's SHA-256 covers (see the header comment).
enum class HashedBytes { elements, broadcast_once, storage_span };

/// "elements", "broadcast_once", "storage_span".
constexpr std::string_view hashed_bytes_name(HashedBytes h) {
  switch (h) {
    case HashedBytes::elements: return "elements";
    case HashedBytes::broadcast_once: return "broadcast_once";
    case HashedBytes::storage_span: return "storage_span";
  }
  return "?";
}

/// The walk tensor_sha256 makes: `sizes` x `strides` (in elements, C order, from `offset`).
struct TensorHashPlan {
  HashedBytes what = HashedBytes::elements;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  std::int64_t offset = 0;
  std::uint64_t nbytes = 0;  ///< bytes fed to SHA-256
};

namespace detail {

/// Whether distinct indices of (sizes, strides) always land on distinct elements: with the
/// dimensions sorted by stride, each stride must clear everything the smaller ones reach.
inline bool strides_never_overlap(const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& strides) {
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return strides[a] < strides[b]; });
  std::int64_t reach = 0;  // highest element offset the smaller dimensions reach
  for (const std::size_t d : order) {
    if (strides[d] <= reach) return false;
    reach += (sizes[d] - 1) * strides[d];
  }
  return true;
}

}  // namespace detail

/// Decides which bytes of `t` are hashed; see the header comment. A packed dtype (nf4, GGUF
/// blocks) must come contiguous: its elements have no byte address of their own.
inline TensorHashPlan plan_tensor_sha256(const Tensor& t) {
  TensorHashPlan p;
  p.offset = t.storage_offset();
  const auto item = static_cast<std::int64_t>(t.element_size());
  if (t.numel() == 0) return p;
  if (t.is_contiguous()) {
    p.nbytes = t.nbytes();
    return p;
  }
  if (dtype_info(t.dtype()).block_size != 1) {
    throw DTypeError("plan_tensor_sha256: a strided view of packed " + std::string(dtype_name(t.dtype())) +
                     " has no per-element bytes; hash its .contiguous()");
  }
  // Size-1 dimensions do not move; stride-0 ones show the same elements again.
  for (std::size_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] == 1) continue;
    if (t.strides()[d] == 0) {
      p.what = HashedBytes::broadcast_once;
      continue;
    }
    // Folds a dimension into the previous one when together they step evenly (a slice of rows).
    if (!p.sizes.empty() && p.strides.back() == t.sizes()[d] * t.strides()[d]) {
      p.sizes.back() *= t.sizes()[d];
      p.strides.back() = t.strides()[d];
    } else {
      p.sizes.push_back(t.sizes()[d]);
      p.strides.push_back(t.strides()[d]);
    }
  }
  if (!detail::strides_never_overlap(p.sizes, p.strides)) {
    std::int64_t last = 0;
    for (std::size_t d = 0; d < p.sizes.size(); ++d) last += (p.sizes[d] - 1) * p.strides[d];
    p.what = HashedBytes::storage_span;
    p.sizes = {last + 1};
    p.strides = {1};
  }
  std::int64_t n = 1;
  for (const std::int64_t s : p.sizes) n *= s;
  p.nbytes = static_cast<std::uint64_t>(n * item);
  return p;
}

/// SHA-256 of the bytes `plan` names, read from `t`'s host storage without copying more than a
/// small staging buffer; `on_bytes(n)` is told after every few MiB hashed (for a progress bar).
inline std::string tensor_sha256(const Tensor& t, const TensorHashPlan& plan,
                                 const std::function<void(std::uint64_t)>& on_bytes = {}) {
  constexpr std::size_t piece = std::size_t{16} << 20;  // between progress reports
  Sha256 h;
  const auto feed = [&](const unsigned char* p, std::size_t n) {
    for (std::size_t at = 0; at < n; at += piece) {
      const std::size_t k = std::min(piece, n - at);
      h.update(p + at, k);
      if (on_bytes) on_bytes(k);
    }
  };
  if (plan.nbytes == 0) return h.hex_digest();
  const auto* base = reinterpret_cast<const unsigned char*>(t.storage().data());
  const std::size_t item = t.element_size();
  const std::size_t nd = plan.sizes.size();
  if (nd == 0 || (nd == 1 && plan.strides[0] == 1)) {  // one run of bytes
    feed(base + static_cast<std::size_t>(plan.offset) * item, static_cast<std::size_t>(plan.nbytes));
    return h.hex_digest();
  }
  // Strided walk: the innermost dimension is one run when its stride is 1, else gathered element
  // by element; runs and gathered elements go through a staging buffer.
  const bool inner_dense = plan.strides[nd - 1] == 1;
  const std::size_t run = inner_dense ? static_cast<std::size_t>(plan.sizes[nd - 1]) * item : item;
  std::vector<unsigned char> stage(std::max<std::size_t>(std::size_t{1} << 20, run));
  std::size_t fill = 0;
  const auto put = [&](const unsigned char* p, std::size_t n) {
    if (fill + n > stage.size()) {
      feed(stage.data(), fill);
      fill = 0;
    }
    if (n >= stage.size()) {
      feed(p, n);
      return;
    }
    std::memcpy(stage.data() + fill, p, n);
    fill += n;
  };
  std::vector<std::int64_t> index(nd, 0);
  const std::size_t walked = inner_dense ? nd - 1 : nd;  // dimensions stepped one index at a time
  for (;;) {
    std::int64_t at = plan.offset;
    for (std::size_t d = 0; d < walked; ++d) at += index[d] * plan.strides[d];
    put(base + static_cast<std::size_t>(at) * item, run);
    std::size_t d = walked;
    while (d > 0 && ++index[d - 1] == plan.sizes[d - 1]) index[--d] = 0;
    if (d == 0) break;
  }
  feed(stage.data(), fill);
  return h.hex_digest();
}

}  // namespace accel::io
