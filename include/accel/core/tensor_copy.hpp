// Copy, conversion and fill for Tensor, on the host and across devices.
//
// Host copies run one converted row at a time (vectorized when both rows are dense), split over
// the CPU threads. Copies that touch a GPU go through the device backend's slots
// (core/device_backend.hpp): a direct transfer when the layouts allow it, a conversion kernel
// when one is registered, otherwise staged through host memory (correct for any strides, slower).
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "accel/core/convert.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"

namespace accel {

namespace detail {

/// Visits the rows (innermost dimension) of `shape` with two stride sets; f(a_off, b_off).
template <class F>
void for_each_row(const Shape& shape, const Shape& sa, const Shape& sb, std::size_t grain, F&& f) {
  const std::size_t nd = shape.size();
  if (nd <= 1) {
    f(std::int64_t{0}, std::int64_t{0});
    return;
  }
  const std::int64_t inner = shape[nd - 1];
  const std::int64_t total = shape.numel();
  if (total == 0 || inner == 0) return;
  const auto rows = static_cast<std::size_t>(total / inner);
  parallel_for(rows, std::max<std::size_t>(1, grain / static_cast<std::size_t>(inner)),
               [&](std::size_t b, std::size_t e) {
                 for (std::size_t r = b; r < e; ++r) {
                   std::int64_t rem = static_cast<std::int64_t>(r), oa = 0, ob = 0;
                   for (std::size_t d = nd - 1; d-- > 0;) {
                     const std::int64_t i = rem % shape[d];
                     rem /= shape[d];
                     oa += i * sa[d];
                     ob += i * sb[d];
                   }
                   f(oa, ob);
                 }
               });
}

/// Element-wise converting copy between two host views of the same shape.
inline void host_copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  if (src.is_contiguous() && dst.is_contiguous()) {
    convert_elements(src.dtype(), src.data_ptr(), dst.dtype(), dst.data_ptr(),
                     static_cast<std::size_t>(dst.numel()));
    return;
  }
  visit_dtype(src.dtype(), [&](auto st) {
    using S = typename decltype(st)::type;
    visit_dtype(dst.dtype(), [&](auto dt) {
      using D = typename decltype(dt)::type;
      const S* sp = static_cast<const S*>(src.data_ptr());
      D* dp = static_cast<D*>(dst.data_ptr());
      const std::size_t nd = dst.dim();
      const std::int64_t inner = nd ? dst.shape()[nd - 1] : 1;
      const std::int64_t ss = nd ? src.strides()[nd - 1] : 1;
      const std::int64_t ds = nd ? dst.strides()[nd - 1] : 1;
      for_each_row(dst.shape(), src.strides(), dst.strides(), std::size_t{1} << 15,
                   [&](std::int64_t so, std::int64_t doff) {
                     if (ss == 1 && ds == 1) {
                       convert_span<D>(sp + so, dp + doff, static_cast<std::size_t>(inner));
                     } else {
                       for (std::int64_t i = 0; i < inner; ++i) {
                         dp[doff + i * ds] = convert_value<D>(sp[so + i * ss]);
                       }
                     }
                   });
    });
  });
}

/// Element range [lo, hi] (relative to the storage) that a view touches.
inline std::pair<std::int64_t, std::int64_t> element_extent(const Tensor& t) {
  std::int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (std::size_t i = 0; i < t.dim(); ++i) {
    const std::int64_t span = (t.shape()[i] - 1) * t.strides()[i];
    (span < 0 ? lo : hi) += span;
  }
  return {lo, hi};
}

/// A host tensor with the same view of a copy of the device bytes `t` covers.
inline Tensor stage_to_host(const Tensor& t) {
  const auto [lo, hi] = element_extent(t);
  const auto count = static_cast<std::size_t>(hi - lo + 1);
  const std::size_t bytes = count * t.element_size();
  Storage host = Storage::allocate(Device::cpu(), bytes);
  device_backend(t.device())
      .copy(host.data(), Device::cpu(), t.storage().data() + static_cast<std::size_t>(lo) * t.element_size(),
            t.device(), bytes, /*non_blocking=*/false);
  return Tensor::from_storage(std::move(host), t.dtype(), t.shape(), t.strides(), t.storage_offset() - lo);
}

/// Writes the bytes of host view `h` (same layout as `t` after stage_to_host) back to device `t`.
inline void unstage_to_device(const Tensor& h, const Tensor& t) {
  const auto [lo, hi] = element_extent(t);
  const std::size_t bytes = static_cast<std::size_t>(hi - lo + 1) * t.element_size();
  device_backend(t.device())
      .copy(t.storage().data() + static_cast<std::size_t>(lo) * t.element_size(), t.device(),
            h.storage().data(), Device::cpu(), bytes, /*non_blocking=*/false);
}

inline void check_copy_args(const Tensor& dst, const Tensor& src, const char* op) {
  if (!dst.defined() || !src.defined()) throw ValueError(std::string(op) + ": undefined tensor");
  if (dst.is_meta()) throw DeviceError(std::string(op) + ": cannot write into a meta tensor of shape " + dst.shape().str());
  if (src.is_meta()) {
    throw DeviceError(std::string(op) + ": cannot copy out of a meta tensor of shape " + src.shape().str() +
                      " (it has no data; load its weights first)");
  }
  if (!dst.storage().writable()) {
    throw ValueError(std::string(op) + ": destination of shape " + dst.shape().str() +
                     " is read-only (a memory-mapped file); clone() it first");
  }
}

}  // namespace detail

inline Tensor& Tensor::copy_(const Tensor& src_in, bool non_blocking) {
  detail::check_copy_args(*this, src_in, "copy_");
  Tensor src = src_in.shape() == shape_ ? src_in : src_in.expand(shape_);
  if (numel() == 0) return *this;
  if (is_cpu() && src.is_cpu()) {
    detail::host_copy(src, *this);
    return *this;
  }
  const bool same_layout = src.dtype() == dtype_ && src.is_contiguous() && is_contiguous();
  if (same_layout) {  // one transfer, any direction
    device_backend(is_cuda() ? device_ : src.device())
        .copy(data_ptr(), device_, src.data_ptr(), src.device(), nbytes(), non_blocking);
    return *this;
  }
  if (is_cuda() && src.device() == device_ && src.is_contiguous() && is_contiguous()) {
    const DeviceBackend& b = device_backend(device_);
    if (b.convert && b.convert(device_, src.data_ptr(), src.dtype(), data_ptr(), dtype_,
                               static_cast<std::size_t>(numel()))) {
      if (!non_blocking) b.synchronize(device_.index());
      return *this;
    }
  }
  // General path through host memory.
  const Tensor host_src = src.is_cpu() ? src : detail::stage_to_host(src);
  if (is_cpu()) {
    detail::host_copy(host_src, *this);
  } else if (is_contiguous()) {
    Tensor tmp = Tensor::empty(shape_, dtype_, Device::cpu());
    detail::host_copy(host_src, tmp);
    device_backend(device_).copy(data_ptr(), device_, tmp.data_ptr(), Device::cpu(), nbytes(), false);
  } else {
    Tensor staged = detail::stage_to_host(*this);
    detail::host_copy(host_src, staged);
    detail::unstage_to_device(staged, *this);
  }
  return *this;
}

inline Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();  // a meta view gets contiguous strides too, so view() after it sees what real data would
}

inline Tensor Tensor::clone() const {
  if (is_meta()) return to_meta();
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_(*this);
  return t;
}

inline Tensor Tensor::pin_memory() const {
  if (!defined_ || !is_cpu()) {
    throw DeviceError("pin_memory: only CPU tensors can be pinned (got " + (defined_ ? device_.str() : std::string("an undefined tensor")) + ")");
  }
  if (is_pinned()) return *this;
  Tensor t = from_storage(Storage::allocate_pinned(static_cast<std::size_t>(numel()) * element_size()), dtype_, shape_);
  t.copy_(*this);
  return t;
}

inline Tensor Tensor::to(Device device, std::optional<DType> dtype, bool non_blocking, bool copy) const {
  const DType dt = dtype.value_or(dtype_);
  if (!copy && device == device_ && dt == dtype_) return *this;
  if (device.is_meta()) {
    Tensor t = to_meta();
    t.dtype_ = dt;
    return t;
  }
  Tensor t = empty(shape_, dt, device);
  t.copy_(*this, non_blocking);
  return t;
}

inline Tensor& Tensor::fill_(double value) {
  if (!defined_) throw ValueError("fill_: undefined tensor");
  if (is_meta()) return *this;  // nothing to write; torch does the same on meta
  if (!storage_.writable()) throw ValueError("fill_: tensor of shape " + shape_.str() + " is read-only");
  if (numel() == 0) return *this;
  visit_dtype(dtype_, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert_value<T>(value);
    if (is_cpu()) {
      T* p = static_cast<T*>(data_ptr());
      if (is_contiguous()) {
        parallel_for(static_cast<std::size_t>(numel()), std::size_t{1} << 16,
                     [&](std::size_t b, std::size_t e) { std::fill(p + b, p + e, v); });
        return;
      }
      const std::int64_t inner = dim() ? shape_[dim() - 1] : 1;
      const std::int64_t st = dim() ? strides_[dim() - 1] : 1;
      detail::for_each_row(shape_, strides_, strides_, std::size_t{1} << 15, [&](std::int64_t o, std::int64_t) {
        for (std::int64_t i = 0; i < inner; ++i) p[o + i * st] = v;
      });
    } else if (is_contiguous()) {
      device_backend(device_).fill(device_, data_ptr(), &v, sizeof(T), static_cast<std::size_t>(numel()));
    } else {
      Tensor h = detail::stage_to_host(*this);
      h.fill_(value);
      detail::unstage_to_device(h, *this);
    }
  });
  return *this;
}

template <Element T>
T Tensor::at(std::initializer_list<std::int64_t> index) const {
  return at<T>(std::span<const std::int64_t>(index.begin(), index.size()));
}

template <Element T>
T Tensor::at(std::span<const std::int64_t> index) const {
  if (index.size() != dim()) {
    throw ShapeError("at: " + std::to_string(index.size()) + " indices for a tensor of shape " + shape_.str());
  }
  if (is_meta()) throw DeviceError("at: a meta tensor has no data");
  std::int64_t off = offset_;
  for (std::size_t i = 0; i < index.size(); ++i) {
    std::int64_t ix = index[i] < 0 ? index[i] + shape_[i] : index[i];
    if (ix < 0 || ix >= shape_[i]) {
      throw ShapeError("at: index " + std::to_string(index[i]) + " out of range for dimension " +
                       std::to_string(i) + " of shape " + shape_.str());
    }
    off += ix * strides_[i];
  }
  alignas(8) std::array<std::byte, 16> buf{};
  const std::byte* src = storage_.data() + static_cast<std::size_t>(off) * element_size();
  if (is_cpu()) {
    std::memcpy(buf.data(), src, element_size());
  } else {
    device_backend(device_).copy(buf.data(), Device::cpu(), src, device_, element_size(), false);
  }
  return visit_dtype(dtype_, [&](auto tag) -> T {
    using E = typename decltype(tag)::type;
    E e;
    std::memcpy(&e, buf.data(), sizeof(E));
    return convert_value<T>(e);
  });
}

template <Element T>
std::vector<T> Tensor::to_vector() const {
  const Tensor h = to(Device::cpu(), dtype_of<T>).contiguous();
  const T* p = h.template data_ptr<T>();
  return std::vector<T>(p, p + h.numel());
}

}  // namespace accel
