// Vectorized f32 row kernels for the CPU ops (xsimd, the widest ISA the build enables).
//
//   binary_row<Op>(a, a_step, b, b_step, out, n)     out = a op b; a step of 0 broadcasts
//   silu_row / gelu_erf_row / gelu_tanh_row           out = f(in), in place allowed
//   softmax_row / rms_norm_row / layer_norm_row       one row of the normalizations
//   dot / axpy / scale_row / max_row                  the pieces attention is built from
//
// Every kernel reads and writes plain f32 spans of `n` elements (unaligned is fine) and is
// single-threaded: the ops split rows over threads. Reductions accumulate in f32 lanes.
//
// These run at the ISA the program is built for, unlike the dtype conversions (core/
// simd_arch.hpp), which dispatch at run time: xsimd 8.1 compiles a wider batch<float, A> and
// its exp / erf / tanh only in translation units built with A's -m flags, which a header cannot
// set for its users.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <xsimd/xsimd.hpp>

namespace accel::backend::cpu {

using fbatch = xsimd::batch<float>;
inline constexpr std::size_t simd_width = fbatch::size;

struct AddOp {
  template <class T>
  static T apply(const T& a, const T& b) {
    return a + b;
  }
};
struct MulOp {
  template <class T>
  static T apply(const T& a, const T& b) {
    return a * b;
  }
};

/// out[i] = Op(a[i * a_step], b[i * b_step]) with steps 0 (broadcast) or 1.
template <class Op>
inline void binary_row(const float* a, std::ptrdiff_t a_step, const float* b, std::ptrdiff_t b_step,
                       float* out, std::size_t n) noexcept {
  std::size_t i = 0;
  if (a_step == 1 && b_step == 1) {
    for (; i + simd_width <= n; i += simd_width) {
      Op::apply(fbatch::load_unaligned(a + i), fbatch::load_unaligned(b + i)).store_unaligned(out + i);
    }
    for (; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
  } else if (a_step == 1 && b_step == 0) {
    const fbatch bv(b[0]);
    for (; i + simd_width <= n; i += simd_width) {
      Op::apply(fbatch::load_unaligned(a + i), bv).store_unaligned(out + i);
    }
    for (; i < n; ++i) out[i] = Op::apply(a[i], b[0]);
  } else if (a_step == 0 && b_step == 1) {
    const fbatch av(a[0]);
    for (; i + simd_width <= n; i += simd_width) {
      Op::apply(av, fbatch::load_unaligned(b + i)).store_unaligned(out + i);
    }
    for (; i < n; ++i) out[i] = Op::apply(a[0], b[i]);
  } else {
    for (; i < n; ++i) out[i] = Op::apply(a[i * a_step], b[i * b_step]);
  }
}

/// x * sigmoid(x); exp overflow for very negative x yields -0, the correctly rounded limit.
inline void silu_row(const float* in, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
  const fbatch one(1.0f);
  for (; i + simd_width <= n; i += simd_width) {
    const fbatch x = fbatch::load_unaligned(in + i);
    (x / (one + xsimd::exp(-x))).store_unaligned(out + i);
  }
  for (; i < n; ++i) out[i] = in[i] / (1.0f + std::exp(-in[i]));
}

/// 0.5 x (1 + erf(x / sqrt 2)): torch's exact GELU.
inline void gelu_erf_row(const float* in, float* out, std::size_t n) noexcept {
  constexpr float inv_sqrt2 = 0.70710678118654752440f;
  std::size_t i = 0;
  const fbatch hv(0.5f), one(1.0f), k(inv_sqrt2);
  for (; i + simd_width <= n; i += simd_width) {
    const fbatch x = fbatch::load_unaligned(in + i);
    (hv * x * (one + xsimd::erf(x * k))).store_unaligned(out + i);
  }
  for (; i < n; ++i) out[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] * inv_sqrt2));
}

/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): torch's approximate='tanh'.
inline void gelu_tanh_row(const float* in, float* out, std::size_t n) noexcept {
  constexpr float k0 = 0.79788456080286535588f;  // sqrt(2 / pi)
  constexpr float k1 = 0.044715f;
  std::size_t i = 0;
  const fbatch hv(0.5f), one(1.0f), c0(k0), c1(k1);
  for (; i + simd_width <= n; i += simd_width) {
    const fbatch x = fbatch::load_unaligned(in + i);
    const fbatch inner = c0 * xsimd::fma(c1 * x * x, x, x);
    (hv * x * (one + xsimd::tanh(inner))).store_unaligned(out + i);
  }
  for (; i < n; ++i) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(k0 * (x + k1 * x * x * x)));
  }
}

/// Largest element (NaN if any element is NaN), -inf for n == 0.
inline float max_row(const float* x, std::size_t n) noexcept {
  std::size_t i = 0;
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  if (n >= simd_width) {
    fbatch mv = fbatch::load_unaligned(x);
    xsimd::batch_bool<float> nanv = mv != mv;
    for (i = simd_width; i + simd_width <= n; i += simd_width) {
      const fbatch v = fbatch::load_unaligned(x + i);
      mv = xsimd::max(mv, v);
      nanv = nanv | (v != v);
    }
    alignas(64) float lanes[simd_width];
    mv.store_unaligned(lanes);
    for (float v : lanes) m = std::max(m, v);
    nan = xsimd::any(nanv);
  }
  for (; i < n; ++i) {
    if (x[i] != x[i]) nan = true;
    m = std::max(m, x[i]);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

/// Sum of a[i] * b[i].
inline float dot(const float* a, const float* b, std::size_t n) noexcept {
  std::size_t i = 0;
  fbatch s0(0.0f), s1(0.0f);
  for (; i + 2 * simd_width <= n; i += 2 * simd_width) {
    s0 = xsimd::fma(fbatch::load_unaligned(a + i), fbatch::load_unaligned(b + i), s0);
    s1 = xsimd::fma(fbatch::load_unaligned(a + i + simd_width),
                    fbatch::load_unaligned(b + i + simd_width), s1);
  }
  for (; i + simd_width <= n; i += simd_width) {
    s0 = xsimd::fma(fbatch::load_unaligned(a + i), fbatch::load_unaligned(b + i), s0);
  }
  float s = xsimd::hadd(s0 + s1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

/// y += alpha * x.
inline void axpy(float alpha, const float* x, float* y, std::size_t n) noexcept {
  std::size_t i = 0;
  const fbatch av(alpha);
  for (; i + simd_width <= n; i += simd_width) {
    xsimd::fma(av, fbatch::load_unaligned(x + i), fbatch::load_unaligned(y + i)).store_unaligned(y + i);
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

/// x *= alpha.
inline void scale_row(float* x, float alpha, std::size_t n) noexcept {
  std::size_t i = 0;
  const fbatch av(alpha);
  for (; i + simd_width <= n; i += simd_width) (fbatch::load_unaligned(x + i) * av).store_unaligned(x + i);
  for (; i < n; ++i) x[i] *= alpha;
}

/// out = exp(in - max) / sum; a row of -inf gives NaN, as torch does.
inline void softmax_row(const float* in, float* out, std::size_t n) noexcept {
  const float m = max_row(in, n);
  const fbatch mv(m);
  fbatch acc(0.0f);
  std::size_t i = 0;
  for (; i + simd_width <= n; i += simd_width) {
    const fbatch e = xsimd::exp(fbatch::load_unaligned(in + i) - mv);
    e.store_unaligned(out + i);
    acc += e;
  }
  float sum = xsimd::hadd(acc);
  for (; i < n; ++i) {
    out[i] = std::exp(in[i] - m);
    sum += out[i];
  }
  scale_row(out, 1.0f / sum, n);
}

/// out = x * rsqrt(mean(x^2) + eps) * w (w may be null).
inline void rms_norm_row(const float* x, const float* w, float* out, std::size_t n, float eps) noexcept {
  const float ms = n ? dot(x, x, n) / static_cast<float>(n) : 0.0f;
  const float r = 1.0f / std::sqrt(ms + eps);
  const fbatch rv(r);
  std::size_t i = 0;
  if (w) {
    for (; i + simd_width <= n; i += simd_width) {
      (fbatch::load_unaligned(x + i) * rv * fbatch::load_unaligned(w + i)).store_unaligned(out + i);
    }
    for (; i < n; ++i) out[i] = x[i] * r * w[i];
  } else {
    for (; i + simd_width <= n; i += simd_width) (fbatch::load_unaligned(x + i) * rv).store_unaligned(out + i);
    for (; i < n; ++i) out[i] = x[i] * r;
  }
}

/// out = (x - mean) / sqrt(var + eps) * w + b, biased variance; w and b may be null.
inline void layer_norm_row(const float* x, const float* w, const float* b, float* out, std::size_t n,
                           float eps) noexcept {
  if (n == 0) return;
  fbatch acc(0.0f);
  std::size_t i = 0;
  for (; i + simd_width <= n; i += simd_width) acc += fbatch::load_unaligned(x + i);
  float sum = xsimd::hadd(acc);
  for (; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  // Two passes: the centred sum of squares does not cancel catastrophically.
  const fbatch mv(mean);
  acc = fbatch(0.0f);
  i = 0;
  for (; i + simd_width <= n; i += simd_width) {
    const fbatch d = fbatch::load_unaligned(x + i) - mv;
    acc = xsimd::fma(d, d, acc);
  }
  float sq = xsimd::hadd(acc);
  for (; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const float r = 1.0f / std::sqrt(sq / static_cast<float>(n) + eps);
  const fbatch rv(r);
  i = 0;
  for (; i + simd_width <= n; i += simd_width) {
    fbatch y = (fbatch::load_unaligned(x + i) - mv) * rv;
    if (w) y *= fbatch::load_unaligned(w + i);
    if (b) y += fbatch::load_unaligned(b + i);
    y.store_unaligned(out + i);
  }
  for (; i < n; ++i) {
    float y = (x[i] - mean) * r;
    if (w) y *= w[i];
    if (b) y += b[i];
    out[i] = y;
  }
}

}  // namespace accel::backend::cpu
