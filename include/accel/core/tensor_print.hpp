// Tensor::str() and operator<<: torch's layout, summarised past 1000 elements.
#pragma once

#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>

#include "accel/core/tensor.hpp"

namespace accel {

namespace detail {

inline std::string format_element(double v, bool floating, bool is_bool) {
  if (is_bool) return v != 0.0 ? "True" : "False";
  if (!floating) return std::to_string(static_cast<long long>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e16) {
    std::snprintf(buf, sizeof buf, "%.0f.", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

inline void print_dim(std::ostream& os, const Tensor& h, std::vector<std::int64_t>& idx, std::size_t d,
                      bool summarize) {
  const bool floating = h.is_floating_point();
  const bool is_bool = h.dtype() == DType::boolean;
  if (d == h.dim()) {
    os << format_element(h.at<double>(std::span<const std::int64_t>(idx.data(), idx.size())), floating, is_bool);
    return;
  }
  const std::int64_t n = h.shape()[d];
  os << '[';
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarize && n > 6 && i == 3) {
      os << (d + 1 == h.dim() ? "..., " : "...,\n" + std::string(d + 8, ' '));
      i = n - 3;
    }
    idx[d] = i;
    print_dim(os, h, idx, d + 1, summarize);
    if (i + 1 < n) os << (d + 1 == h.dim() ? ", " : ",\n" + std::string(d + 8, ' '));
  }
  os << ']';
}

}  // namespace detail

inline std::string Tensor::str() const {
  if (!defined_) return "tensor(undefined)";
  std::ostringstream os;
  const std::string suffix =
      (dtype_ == DType::f32 || dtype_ == DType::i64 || dtype_ == DType::boolean
           ? std::string()
           : ", dtype=" + torch_dtype_string(dtype_)) +
      (device_.is_cpu() ? std::string() : ", device='" + device_.str() + "'");
  if (is_meta()) {
    os << "tensor(..., size=" << shape_.str() << suffix << ")";
    return os.str();
  }
  const Tensor h = to(Device::cpu());
  std::vector<std::int64_t> idx(dim(), 0);
  os << "tensor(";
  detail::print_dim(os, h, idx, 0, numel() > 1000);
  os << suffix << ')';
  return os.str();
}

inline std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace accel
