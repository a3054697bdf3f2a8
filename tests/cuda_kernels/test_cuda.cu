// The nvcc half of the CUDA tests (see cuda_side.hpp): every kernel is compiled here, and the
// checks that need device-side code run on the host.
#include "cuda_side.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

#include "accel/backend/cuda/float_codec.cuh"
#include "accel/backend/cuda/kernels.cuh"
#include "accel/ops/cuda/ops.cuh"
#include "accel/backend/cuda/runtime.hpp"

namespace accel_test::cuda_side {

namespace codec = accel::cuda::codec;

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

std::string codec_disagreements() {
  Report r;
  auto bits = [](float f) { return codec::bits_of(f); };
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto h = accel::half::from_bits(static_cast<std::uint16_t>(c));
    const auto b = accel::bfloat16::from_bits(static_cast<std::uint16_t>(c));
    r.expect_equal("decode<f16>", c, bits(codec::decode<codec::f16>(c)), bits(static_cast<float>(h)));
    r.expect_equal("decode<bf16>", c, bits(codec::decode<codec::bf16>(c)), bits(static_cast<float>(b)));
    // The bulk f16 -> f32 conversion (F16C) quietens signalling NaNs; decode_f16 does too.
    const std::uint32_t want = (c & 0x7fffu) > 0x7c00u ? bits(static_cast<float>(h)) | 0x00400000u
                                                       : bits(static_cast<float>(h));
    r.expect_equal("decode_f16", c, bits(codec::decode_f16(c)), want);
  }
  for (std::uint32_t c = 0; c < 256; ++c) {
    const auto e4 = accel::float8_e4m3fn::from_bits(static_cast<std::uint8_t>(c));
    const auto e5 = accel::float8_e5m2::from_bits(static_cast<std::uint8_t>(c));
    r.expect_equal("decode<e4m3fn>", c, bits(codec::decode<codec::e4m3fn>(c)), bits(static_cast<float>(e4)));
    r.expect_equal("decode<e5m2>", c, bits(codec::decode<codec::e5m2>(c)), bits(static_cast<float>(e5)));
  }
  std::mt19937 rng(7);
  std::vector<std::uint32_t> patterns = {0u,          0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                                         0x7f800001u, 0x477fe000u, 0x477ff000u, 0x43e00000u, 0x43e80000u,
                                         0x43f00000u, 0x00000001u, 0x33800000u, 0x387fc000u, 0x3b800000u};
  for (int i = 0; i < 300000; ++i) patterns.push_back(rng());
  for (std::uint32_t u : patterns) {
    const float f = codec::float_of(u);
    r.expect_equal("encode<f16>", u, codec::encode<codec::f16>(f), accel::half(f).bits);
    r.expect_equal("encode<bf16>", u, codec::encode<codec::bf16>(f), accel::bfloat16(f).bits);
    r.expect_equal("encode<e4m3fn>", u, codec::encode<codec::e4m3fn>(f), accel::float8_e4m3fn(f).bits);
    r.expect_equal("encode<e5m2>", u, codec::encode<codec::e5m2>(f), accel::float8_e5m2(f).bits);
    if (!std::isnan(f)) r.expect_equal("f32_to_f64", u, codec::bits_of(codec::f32_to_f64(f)), codec::bits_of(double(f)));
  }
  std::mt19937_64 rng64(11);
  for (int i = 0; i < 200000; ++i) {
    // Every third value has any exponent; the rest stay in the range where rounding is subtle.
    const std::uint64_t u = i % 3 == 0 ? rng64() : (rng64() & 0x800fffffffffffffull) | ((0x3e0ull + rng64() % 64) << 52);
    const double d = codec::double_of(u);
    r.expect_equal("f64->f16", u, codec::encode<codec::f16>(codec::narrow_double(d)), accel::half(d).bits);
    r.expect_equal("f64->bf16", u, codec::encode<codec::bf16>(codec::narrow_double(d)), accel::bfloat16(d).bits);
    r.expect_equal("f64->e4m3fn", u, codec::encode<codec::e4m3fn>(codec::narrow_double(d)), accel::float8_e4m3fn(d).bits);
    r.expect_equal("f64->e5m2", u, codec::encode<codec::e5m2>(codec::narrow_double(d)), accel::float8_e5m2(d).bits);
    if (!std::isnan(d)) r.expect_equal("f64_to_f32", u, bits(codec::f64_to_f32(d)), bits(static_cast<float>(d)));
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
  const Shape shape = od::broadcast("add", a.shape(), b.shape());
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
  const auto& h = accel::cuda::kernel_hooks();
  const auto& t = accel::ops::cuda_ops();
  return h.convert == &accel::cuda::kernels::convert_on_device && h.fill == &accel::cuda::kernels::fill_on_device &&
         t.matmul && t.linear && t.add && t.mul && t.softmax && t.layer_norm && t.rms_norm && t.gelu && t.silu &&
         t.embedding && t.rotary_embedding && t.scaled_dot_product_attention && t.argmax && t.cat;
}

accel::Tensor contiguous_on_device(const accel::Tensor& t) { return accel::cuda::contiguous(t); }

accel::Tensor direct_matmul(const accel::Tensor& a, const accel::Tensor& b) { return accel::cuda::ops::matmul(a, b); }

}  // namespace accel_test::cuda_side
