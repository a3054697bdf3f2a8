// The nvcc half of the CUDA tests (see cuda_side.hpp): every kernel is compiled here, and the
// checks that need device-side code run on the host.
#include "cuda_side.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <sstream>
#include <vector>

#include "accel/backend/cuda/kernels.cuh"
#include "accel/backend/cuda/runtime.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/ops/cuda/ops.cuh"
#include "accel/quant/kernels/cuda/kernels.cuh"

namespace accel_test::cuda_side {

namespace {

/// Collects disagreements, keeping the first few for the message.
class Report {
 public:
  template <class A, class B>
  void expect_equal(const char* what, std::uint64_t input, A got, B want) {
    if (static_cast<std::uint64_t>(got) == static_cast<std::uint64_t>(want)) return;
    if (++count_ <= 8) {
      text_ << what << "(0x" << std::hex << input << "): got 0x" << static_cast<std::uint64_t>(got) << ", want 0x"
            << static_cast<std::uint64_t>(want) << std::dec << "\n";
    }
  }
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    if (++count_ <= 8) text_ << what << "\n";
  }
  std::string str() const {
    return count_ ? std::to_string(count_) + " disagreement(s):\n" + text_.str() : std::string();
  }

 private:
  std::size_t count_ = 0;
  std::ostringstream text_;
};

}  // namespace

std::string conversion_disagreements() {
  using accel::DType;
  Report r;
  // Inputs per source dtype, as raw bytes: every pattern of the 1- and 2-byte formats, special
  // and random f32 values, and f64 values mostly in the range where double rounding would show.
  std::vector<std::uint8_t> all8(256);
  for (unsigned c = 0; c < 256; ++c) all8[c] = static_cast<std::uint8_t>(c);
  std::vector<std::uint16_t> all16(65536);
  for (unsigned c = 0; c < 65536; ++c) all16[c] = static_cast<std::uint16_t>(c);
  std::mt19937 rng(7);
  std::vector<std::uint32_t> f32s = {0u,          0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                                     0x7f800001u, 0x477fe000u, 0x477ff000u, 0x43e00000u, 0x43e80000u,
                                     0x43f00000u, 0x00000001u, 0x33800000u, 0x387fc000u, 0x3b800000u};
  for (int i = 0; i < 300000; ++i) f32s.push_back(rng());
  std::mt19937_64 rng64(11);
  std::vector<std::uint64_t> f64s;
  for (int i = 0; i < 200000; ++i) {
    // Every third value has any exponent; the rest stay in the range where rounding is subtle.
    f64s.push_back(i % 3 == 0 ? rng64() : (rng64() & 0x800fffffffffffffull) | ((0x3e0ull + rng64() % 64) << 52));
  }
  auto source = [&](DType d) -> std::pair<const void*, std::size_t> {
    switch (accel::itemsize(d)) {
      case 1: return {all8.data(), all8.size()};
      case 2: return {all16.data(), all16.size()};
      case 4: return {f32s.data(), f32s.size()};
      default: return {f64s.data(), f64s.size()};
    }
  };
  auto is_nan = [](DType d, const std::uint8_t* p) {
    return accel::visit_dtype(d, [&](auto t) {
      typename decltype(t)::type v;
      std::memcpy(&v, p, sizeof v);
      return accel::convert_value<double>(v) != accel::convert_value<double>(v);
    });
  };
  for (DType from : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8_e4m3fn, DType::f8_e5m2}) {
    for (DType to : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8_e4m3fn, DType::f8_e5m2}) {
      if (from == to) continue;
      const auto [src, n] = source(from);
      const std::size_t isz = accel::itemsize(to);
      std::vector<std::uint8_t> host(n * isz), kernel(n * isz);
      accel::convert_elements(from, src, to, host.data(), n);
      accel::visit_dtype_constant(from, [&](auto s) {
        accel::visit_dtype_constant(to, [&](auto t) {
          constexpr DType S = decltype(s)::value, D = decltype(t)::value;
          if constexpr (accel::is_floating_point(S) && accel::is_floating_point(D) && S != D) {
            for (std::size_t i = 0; i < n; ++i) {
              accel::cuda::kernels::convert_element<S, D>(src, kernel.data(), static_cast<std::int64_t>(i));
            }
          }
        });
      });
      // Without F16C the host's f16 -> f32 keeps signalling NaNs signalling; the kernels follow
      // the F16C rule, so only the NaN-ness of those results is compared then.
#if defined(__F16C__)
      const bool nan_payloads_differ = false;
#else
      const bool nan_payloads_differ = from == DType::f16 && to == DType::f32;
#endif
      const std::string what = std::string(accel::dtype_name(from)) + "->" + std::string(accel::dtype_name(to));
      for (std::size_t i = 0; i < n; ++i) {
        std::uint64_t got = 0, want = 0, in = 0;
        std::memcpy(&got, kernel.data() + i * isz, isz);
        std::memcpy(&want, host.data() + i * isz, isz);
        std::memcpy(&in, static_cast<const std::uint8_t*>(src) + i * accel::itemsize(from), accel::itemsize(from));
        if (nan_payloads_differ && is_nan(to, host.data() + i * isz) && is_nan(to, kernel.data() + i * isz)) continue;
        r.expect_equal(what.c_str(), in, got, want);
      }
    }
  }
  return r.str();
}

std::string indexing_disagreements() {
  using accel::Shape;
  using accel::Tensor;
  namespace k = accel::cuda::kernels;
  namespace od = accel::cuda::ops::detail;
  Report r;
  // StridedIndex on a permuted, narrowed view.
  const Tensor base = Tensor::empty(Shape{4, 5, 6}, accel::DType::f32);
  const Tensor view = base.permute({2, 0, 1}).narrow(1, 1, 2);
  const auto ix = k::StridedIndex::of(view.shape(), view.strides());
  std::int64_t linear = 0;
  for (std::int64_t i = 0; i < view.size(0); ++i) {
    for (std::int64_t j = 0; j < view.size(1); ++j) {
      for (std::int64_t l = 0; l < view.size(2); ++l, ++linear) {
        r.expect(ix.offset(linear) == i * view.stride(0) + j * view.stride(1) + l * view.stride(2),
                 "StridedIndex offset of element " + std::to_string(linear));
      }
    }
  }
  // The binary kernel's coalesced dims reproduce both operands' broadcast offsets.
  const Tensor a = Tensor::empty(Shape{3, 1, 4, 5}, accel::DType::f32);
  const Tensor b = Tensor::empty(Shape{4, 2}, accel::DType::f32).t().unsqueeze(-1);  // [2, 4, 1], strided
  const Shape shape = accel::broadcast_shapes("add", a.shape(), b.shape());
  r.expect(shape == Shape({3, 2, 4, 5}), "broadcast shape " + shape.str());
  const Tensor ae = a.expand(shape), be = b.expand(shape);
  const auto c = od::coalesce(shape, ae.strides(), be.strides());
  const auto ia = k::StridedIndex::of(shape, ae.strides()), ib = k::StridedIndex::of(shape, be.strides());
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    std::int64_t rem = i, oa = 0, ob = 0;
    for (int d = c.nd - 1; d >= 0; --d) {  // the index loop of binary_kernel
      const std::int64_t q = rem % c.shape[d];
      rem /= c.shape[d];
      oa += q * c.sa[d];
      ob += q * c.sb[d];
    }
    r.expect(oa == ia.offset(i) && ob == ib.offset(i), "coalesced offsets of element " + std::to_string(i));
  }
  const Shape dense{3, 4, 5}, dense_strides{20, 5, 1};
  r.expect(od::coalesce(dense, dense_strides, dense_strides).nd == 1, "dense dims do not coalesce into one");
  r.expect(k::grid_for(0) == 1 && k::grid_for(std::int64_t{1} << 40) == (1u << 16), "grid_for bounds");
  return r.str();
}

bool kernels_and_ops_registered() {
  const accel::DeviceBackend& b = accel::cuda_backend();
  const accel::DeviceOps& t = b.ops;
  return b.device_count && b.allocate && b.deallocate && b.allocate_pinned && b.deallocate_pinned && b.copy &&
         b.fill && b.synchronize && b.convert == &accel::cuda::kernels::convert_on_device &&
         b.fill_kernel == &accel::cuda::kernels::fill_on_device && t.matmul && t.linear && t.add && t.mul &&
         t.softmax && t.layer_norm && t.rms_norm && t.gelu && t.silu && t.embedding && t.rotary_embedding &&
         t.scaled_dot_product_attention && t.argmax && t.cat && b.quant.ggml_dequantize && b.quant.ggml_gemv &&
         b.quant.bnb4_dequantize && b.quant.bnb4_gemv && b.quant.int8_dequantize && b.quant.int8_gemv &&
         b.quant.affine_dequantize && b.quant.affine_gemv;
}

accel::Tensor contiguous_on_device(const accel::Tensor& t) { return accel::cuda::contiguous(t); }

accel::Tensor direct_matmul(const accel::Tensor& a, const accel::Tensor& b) {
  // What accel::ops::matmul validates and computes before it calls the slot.
  auto batch_dims = [](const accel::Tensor& t) {
    return accel::Shape(std::span<const std::int64_t>(t.shape().data(), t.dim() - 2));
  };
  const accel::Shape batch = accel::broadcast_shapes("matmul", batch_dims(a), batch_dims(b));
  accel::Shape shape = batch;
  shape.push_back(a.size(-2));
  shape.push_back(b.size(-1));
  accel::Tensor out = accel::Tensor::empty(shape, a.dtype(), a.device());
  accel::cuda::ops::matmul(a, b, batch, out);
  return out;
}

}  // namespace accel_test::cuda_side
