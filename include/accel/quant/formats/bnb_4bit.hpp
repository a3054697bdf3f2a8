// bitsandbytes' 4-bit schemes (NF4, FP4), byte for byte: code books, block-wise absmax
// quantization, double quantization of the absmax, the QuantState and the tensors transformers
// saves for it, and a fused dequantize + GEMV.
//
//   bnb_4bit_table / bnb_4bit_info(t)             the two types' rows: name, quant_map, decoding table
//   quantize_nf4_value(x) / quantize_fp4_value(x) the CUDA kernels' decision trees (x already scaled)
//   create_dynamic_map(signed, max_exp, bits)     the 8-bit dynamic code of nested absmax (256 floats)
//   quantize_blockwise(a, n, code, bs)            8-bit blockwise codes + float32 absmax
//   dequantize_blockwise(q, n, absmax, code, bs)  back to float32
//   quantize_4bit(A, options) -> {packed, state}  Params4bit's quantization (packed u8 [(n+1)/2, 1])
//   dequantize_4bit(packed, state) -> Tensor      state.dtype, state.shape
//   quant_state_to_tensors(state, prefix)         "<prefix>.absmax", ".quant_map", ".nested_absmax",
//                                                 ".nested_quant_map", ".quant_state.bitsandbytes__<t>"
//   quant_state_from_tensors(prefix, tensors)     the inverse; FormatError naming the tensor at fault
//
// The reference is bitsandbytes 0.50.2.dev0 (bitsandbytes/functional.py: quantize_4bit,
// dequantize_4bit, quantize_blockwise, create_dynamic_map, get_4bit_type, QuantState.as_dict /
// from_dict; csrc/kernels.cu: kQuantizeBlockwise, dQuantizeNF4, dQuantizeFP4, dQuantize,
// kDequantizeBlockwise). The product over these weights, gemv_4bit, is layers/bnb_products.hpp's.
// Files in the wild are written by its CUDA kernels, so they are what is
// followed:
// - A block's absmax is max |x| in float32 after the weight was rounded to its dtype (the dtype the
//   model held it in: transformers quantizes the bf16 / f16 / f32 parameter it loaded). Values are
//   scaled by x * (1 / absmax) and coded by the kernels' decision trees (strict `>` at each
//   threshold: a value on a threshold takes the lower code). An all-zero block scales to NaN, which
//   the trees send to code 0 (NF4: -1.0, FP4: +0), as the kernels do; it decodes to zero.
// - Packing: element 2i is the high nibble of byte i, element 2i+1 the low one; an odd count pads
//   the last low nibble with the code of 0. Blocks run over the flattened tensor, not per row.
// - Double quantization: offset = mean(absmax), then absmax - offset is quantized with the signed
//   dynamic map in blocks of 256 (kQuantizeBlockwise's binary search with midpoints); decoding is
//   code * nested_absmax, then + offset, in float32.
// Where bitsandbytes cannot be matched bit for bit, and why:
// - offset is the mean rounded once from a double sum; torch's float32 reduction order depends on
//   the device and build, so it may differ in the last bit. Decoding a saved state uses the stored
//   offset and is exact.
// - The CUDA build uses --use_fast_math, so its 1 / absmax is the hardware's approximate reciprocal;
//   here it is IEEE division (what bnb's CPU kernels compute). They differ only where x / absmax
//   falls within an ulp of a threshold.
// - bnb's CPU and pure-torch backends quantize with float midpoints (torch.bucketize) or a 65536-bin
//   table, which disagree with its own CUDA trees near thresholds; the CUDA trees are followed.
// - quant_storage other than uint8 is a reinterpretation of the same bytes: quant_state_from_tensors
//   accepts a packed weight of any dtype with the right byte count; quantize_4bit writes uint8.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/float_types.hpp"
#include "accel/core/json_fields.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"

namespace accel::quant {

// ---- the two 4-bit types ---------------------------------------------------------------------

/// bitsandbytes' 4-bit data types.
enum class BnbQuantType : std::uint8_t { fp4, nf4 };

/// Everything about one 4-bit type, in one row (ggml's type-traits habit).
struct Bnb4bitTypeInfo {
  BnbQuantType type;
  std::string_view name;  ///< "fp4" / "nf4": bnb's quant_type and the quant_state key suffix
  /// get_4bit_type(name): the "quant_map" tensor, indexed by the 4-bit code.
  std::array<float, 16> code;
  /// What the dequantization kernels multiply by absmax: `code`, except that FP4's code 8 is -0.0
  /// (the kernels apply a sign; get_4bit_type builds its table from Python ints, where -0 == 0).
  std::array<float, 16> decode;
};

inline constexpr std::array<Bnb4bitTypeInfo, 2> bnb_4bit_table{{
    // FP4: 1 sign, 2 exponent, 1 mantissa bit with bias 2, in bit-pattern order, divided by 12.
    {BnbQuantType::fp4, "fp4",
     {0.0f, 0.0625f / 12.0f, 8.0f / 12.0f, 12.0f / 12.0f, 4.0f / 12.0f, 6.0f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f,
      0.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f, -4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f, -3.0f / 12.0f},
     {0.0f, 0.0625f / 12.0f, 8.0f / 12.0f, 12.0f / 12.0f, 4.0f / 12.0f, 6.0f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f,
      -0.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f, -4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f, -3.0f / 12.0f}},
    // NF4: quantiles of N(0, 1) normalised to [-1, 1] (create_normal_map(0.9677083)), as float32.
    {BnbQuantType::nf4, "nf4",
     {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f,
      1.0f},
     {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f,
      1.0f}},
}};

/// The table row of `t`.
constexpr const Bnb4bitTypeInfo& bnb_4bit_info(BnbQuantType t) { return bnb_4bit_table[static_cast<std::size_t>(t)]; }
constexpr std::string_view bnb_quant_type_name(BnbQuantType t) { return bnb_4bit_info(t).name; }

/// "nf4" / "fp4"; nullopt for anything else.
inline std::optional<BnbQuantType> try_bnb_quant_type(std::string_view s) {
  for (const auto& row : bnb_4bit_table) {
    if (s == row.name) return row.type;
  }
  return std::nullopt;
}

/// The block sizes quantize_4bit accepts.
inline constexpr std::array<std::int64_t, 8> bnb_4bit_blocksizes{32, 64, 128, 256, 512, 1024, 2048, 4096};

constexpr bool is_bnb_4bit_blocksize(std::int64_t b) {
  return std::find(bnb_4bit_blocksizes.begin(), bnb_4bit_blocksizes.end(), b) != bnb_4bit_blocksizes.end();
}

// ---- scalar coding -----------------------------------------------------------------------------

/// dQuantizeNF4: the code of x (already divided by its block's absmax). Thresholds are the
/// kernel's float literals, midpoints between neighbouring codes; NaN falls through to 0.
constexpr std::uint8_t quantize_nf4_value(float x) noexcept {
  if (x > 0.03979014977812767f) {
    if (x > 0.3893125355243683f) {
      if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 0b1111 : 0b1110;
      return x > 0.5016634166240692f ? 0b1101 : 0b1100;
    }
    if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 0b1011 : 0b1010;
    return x > 0.1202552504837513f ? 0b1001 : 0b1000;
  }
  if (x > -0.33967943489551544f) {
    if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 0b0111 : 0b0110;
    return x > -0.23460740596055984f ? 0b0101 : 0b0100;
  }
  if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 0b0011 : 0b0010;
  return x > -0.8480964004993439f ? 0b0001 : 0b0000;
}

/// dQuantizeFP4: sign bit from x < 0, then a search over |x| against the kernel's thresholds.
constexpr std::uint8_t quantize_fp4_value(float x) noexcept {
  const std::uint8_t sign = x < 0 ? 0b1000 : 0;
  const float a = x < 0 ? -x : x;  // fabsf; NaN stays NaN and lands on code 0
  if (a > 0.29166667f) {
    if (a > 0.583333f) return static_cast<std::uint8_t>((a > 0.8333333f ? 0b0011 : 0b0010) + sign);
    return static_cast<std::uint8_t>((a > 0.4166667f ? 0b0101 : 0b0100) + sign);
  }
  if (a > 0.0859375f) return static_cast<std::uint8_t>((a > 0.20833333f ? 0b0111 : 0b0110) + sign);
  return static_cast<std::uint8_t>((a > 0.00260417f ? 0b0001 : 0b0000) + sign);
}

constexpr std::uint8_t quantize_4bit_value(BnbQuantType t, float x) noexcept {
  return t == BnbQuantType::nf4 ? quantize_nf4_value(x) : quantize_fp4_value(x);
}

namespace detail {

/// torch.linspace(start, end, steps) in float32 as torch's CPU kernel computes it: the first half
/// from start, the second from end. Its AVX2 / AVX-512 builds contract `start + step * i` into one
/// FMA; that is what reproduces the dynamic map bitsandbytes users have (without the FMA, 21 of
/// the 256 entries differ in the last bit).
inline std::vector<float> torch_linspace_f32(float start, float end, std::int64_t steps) {
  std::vector<float> v(static_cast<std::size_t>(steps));
  if (steps == 1) {
    v[0] = start;
    return v;
  }
  const float step = (end - start) / static_cast<float>(steps - 1);
  const std::int64_t halfway = steps / 2;
  for (std::int64_t i = 0; i < steps; ++i) {
    v[static_cast<std::size_t>(i)] = i < halfway ? std::fma(step, static_cast<float>(i), start)
                                                 : std::fma(-step, static_cast<float>(steps - i - 1), end);
  }
  return v;
}

/// a * b + c with the product rounded first, whatever contraction the compiler is allowed.
inline float mul_then_add(float a, float b, float c) noexcept {
  volatile float p = a * b;
  return p + c;
}

}  // namespace detail

/// create_dynamic_map: the 8-bit "dynamic" code (a dynamic exponent and a shrinking fraction),
/// 256 sorted floats in [-1, 1]. The default is the signed map that double quantization uses.
inline std::vector<float> create_dynamic_map(bool is_signed = true, int max_exponent_bits = 7, int total_bits = 8) {
  std::vector<float> data;
  const int non_sign_bits = total_bits - 1;
  const int additional_items = (1 << (non_sign_bits - max_exponent_bits)) - 1;
  // Python's 10 ** k: an exact int for k >= 0, the nearest double otherwise; torch multiplies a
  // float32 tensor by it as float32.
  auto power = [](int k) { return static_cast<float>(std::pow(10.0, k)); };
  auto append = [&](std::int64_t items, float scale) {
    const auto b = detail::torch_linspace_f32(0.1f, 1.0f, items);
    for (std::size_t j = 0; j + 1 < b.size(); ++j) {
      const float mean = (b[j] + b[j + 1]) / 2.0f;
      data.push_back(scale * mean);
      if (is_signed) data.push_back(-scale * mean);
    }
  };
  int i = 0;
  for (; i < max_exponent_bits; ++i) {
    const std::int64_t items = is_signed ? (std::int64_t{1} << (i + non_sign_bits - max_exponent_bits)) + 1
                                         : (std::int64_t{1} << (i + non_sign_bits - max_exponent_bits + 1)) + 1;
    append(items, power(-(max_exponent_bits - 1) + i));
  }
  // bnb reuses the loop's last exponent here (its `i` after the loop is max_exponent_bits - 1).
  if (additional_items > 0) append(additional_items + 1, power(-(max_exponent_bits - 1) + (i - 1)));
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() != (std::size_t{1} << total_bits)) {
    throw ValueError("create_dynamic_map: " + std::to_string(data.size()) + " values for " +
                     std::to_string(total_bits) + " bits");
  }
  data.resize(std::max<std::size_t>(data.size(), 256), 0.0f);
  std::sort(data.begin(), data.end());
  return data;
}

/// The signed dynamic map, computed once.
inline const std::vector<float>& dynamic_map() {
  static const std::vector<float> map = create_dynamic_map();
  return map;
}

/// dQuantize<0>: a 7-step binary search over the sorted 256-entry `code`, then the nearer of the
/// two neighbours by their float midpoint (ties go to the pivot, as the kernel's `>` / `<` do).
inline std::uint8_t quantize_dynamic_value(const float* code, float x) noexcept {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f;
  float val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = code[pivot];
  }
  if (upper_pivot == 255) upper = code[upper_pivot];
  if (lower_pivot == 0) lower = code[lower_pivot];
  if (x > val) {
    const float midpoint = (upper + val) * 0.5f;
    return static_cast<std::uint8_t>(x > midpoint ? upper_pivot : pivot);
  }
  const float midpoint = (lower + val) * 0.5f;
  return static_cast<std::uint8_t>(x < midpoint ? lower_pivot : pivot);
}

/// quantize_blockwise (kQuantizeBlockwise, General8bit): per block of `blocksize`, absmax = max |a|
/// and each value's code for a * (1 / absmax). `q` gets n codes, `absmax` ceil(n / blocksize).
inline void quantize_blockwise(const float* a, std::size_t n, const float* code, std::size_t blocksize, std::uint8_t* q,
                               float* absmax) {
  for (std::size_t b = 0; b * blocksize < n; ++b) {
    const std::size_t lo = b * blocksize, hi = std::min(n, lo + blocksize);
    float m = 0.0f;
    for (std::size_t i = lo; i < hi; ++i) m = std::fmax(m, std::fabs(a[i]));
    absmax[b] = m;
    const float scale = 1.0f / m;
    for (std::size_t i = lo; i < hi; ++i) q[i] = quantize_dynamic_value(code, a[i] * scale);
  }
}

/// dequantize_blockwise (kDequantizeBlockwise, General8bit): code[q] * absmax, float32.
inline void dequantize_blockwise(const std::uint8_t* q, std::size_t n, const float* absmax, const float* code,
                                 std::size_t blocksize, float* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = code[q[i]] * absmax[i / blocksize];
}

// ---- QuantState ------------------------------------------------------------------------------

/// bnb's QuantState.state2: how the absmax of a double-quantized weight was itself quantized.
struct BnbNestedState {
  Tensor absmax;                  ///< float32 [ceil(blocks / blocksize)]
  Tensor code;                    ///< float32 [256]: the dynamic map ("nested_quant_map")
  std::int64_t blocksize = 256;
  DType dtype = DType::f32;       ///< the dtype of what was quantized (the absmax): float32
};

/// bnb's QuantState for a 4-bit weight.
struct BnbQuantState {
  /// float32 [blocks]; uint8 [blocks] (codes of the dynamic map) when nested.
  Tensor absmax;
  Shape shape;                    ///< the weight's shape ([out, in] for a Linear)
  Tensor code;                    ///< float32 [16]: get_4bit_type(quant_type) ("quant_map")
  DType dtype = DType::f32;       ///< the weight's dtype before quantization, and dequantize_4bit's
  std::int64_t blocksize = 64;
  BnbQuantType quant_type = BnbQuantType::fp4;
  std::optional<float> offset;    ///< mean of the absmax (nested only)
  std::optional<BnbNestedState> state2;

  bool nested() const noexcept { return state2.has_value(); }
  std::int64_t numel() const noexcept { return shape.numel(); }
  std::int64_t blocks() const noexcept { return (numel() + blocksize - 1) / blocksize; }

  /// The float32 absmax per block (decoded from the nested codes when nested).
  std::vector<float> absmax_f32() const {
    const auto nb = static_cast<std::size_t>(blocks());
    std::vector<float> out(nb);
    const Tensor a = absmax.to(Device::cpu()).contiguous();
    if (!nested()) {
      const Tensor f = a.to(DType::f32);
      if (nb) std::memcpy(out.data(), f.data_ptr<float>(), nb * sizeof(float));
      return out;
    }
    const Tensor na = state2->absmax.to(Device::cpu(), DType::f32).contiguous();
    const Tensor nc = state2->code.to(Device::cpu(), DType::f32).contiguous();
    const auto* q = a.data_ptr<std::uint8_t>();
    const auto* nabs = na.data_ptr<float>();
    const auto* code2 = nc.data_ptr<float>();
    const auto nbs = static_cast<std::size_t>(state2->blocksize);
    for (std::size_t i = 0; i < nb; ++i) out[i] = detail::mul_then_add(code2[q[i]], nabs[i / nbs], *offset);
    return out;
  }
};

/// What quantize_4bit does besides the data: the keyword arguments of bnb's quantize_4bit and
/// Params4bit.
struct Quantize4bitOptions {
  /// Elements per absmax block: 32, 64 (bnb's default), 128, ..., 4096.
  std::int64_t blocksize = 64;
  /// bnb's default is fp4, as here; transformers users mostly pick nf4.
  BnbQuantType quant_type = BnbQuantType::fp4;
  /// Double quantization of the absmax (bnb: compress_statistics; transformers:
  /// bnb_4bit_use_double_quant).
  bool compress_statistics = false;
  /// The dtype the model holds the weight in (transformers: torch_dtype); the input is rounded to
  /// it first and it becomes state.dtype. nullopt: the input's own dtype (f32 / f16 / bf16).
  std::optional<DType> dtype{};
};

/// quantize_4bit's result: the packed codes and the state that decodes them.
struct Bnb4bitWeight {
  Tensor packed;  ///< uint8 [(n + 1) / 2, 1]
  BnbQuantState state;
};

namespace detail {
inline void check_float_dtype(DType d, const std::string& what) {
  if (d != DType::f32 && d != DType::f16 && d != DType::bf16) {
    throw DTypeError(what + ": bitsandbytes quantizes float32, float16 or bfloat16, not " + std::string(dtype_name(d)));
  }
}
inline Tensor f32_tensor(std::span<const float> v, const Shape& s) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), s);
}
}  // namespace detail

/// Quantizes `a` (any shape, float32 / float16 / bfloat16, on the CPU) to 4 bits as bnb's
/// Params4bit does (see the header comment for the exact arithmetic).
inline Bnb4bitWeight quantize_4bit(const Tensor& a, const Quantize4bitOptions& options = {}) {
  const DType dtype = options.dtype.value_or(a.dtype());
  detail::check_float_dtype(a.dtype(), "quantize_4bit");
  detail::check_float_dtype(dtype, "quantize_4bit");
  if (!is_bnb_4bit_blocksize(options.blocksize)) {
    throw ValueError("quantize_4bit: blocksize " + std::to_string(options.blocksize) +
                     " is not one of 32, 64, 128, 256, 512, 1024, 2048, 4096");
  }
  const Tensor rounded = a.to(Device::cpu(), dtype).to(DType::f32).contiguous();
  const float* x = rounded.data_ptr<float>();
  const auto n = static_cast<std::size_t>(a.numel());
  const auto bs = static_cast<std::size_t>(options.blocksize);
  const std::size_t nb = (n + bs - 1) / bs;
  std::vector<float> absmax(nb);
  std::vector<std::uint8_t> packed((n + 1) / 2);
  const BnbQuantType t = options.quant_type;
  parallel_for(nb, 64, [&](std::size_t b0, std::size_t b1) {
    for (std::size_t b = b0; b < b1; ++b) {
      const std::size_t lo = b * bs, hi = std::min(n, lo + bs);
      float m = 0.0f;
      for (std::size_t i = lo; i < hi; ++i) m = std::fmax(m, std::fabs(x[i]));
      absmax[b] = m;
      const float scale = 1.0f / m;
      // Blocks hold an even count (blocksize >= 32), so a byte never straddles two blocks.
      for (std::size_t i = lo; i < hi; i += 2) {
        const std::uint8_t h = quantize_4bit_value(t, x[i] * scale);
        const std::uint8_t l = quantize_4bit_value(t, (i + 1 < hi ? x[i + 1] : 0.0f) * scale);
        packed[i / 2] = static_cast<std::uint8_t>((h << 4) | l);
      }
    }
  });

  Bnb4bitWeight w;
  w.packed = Tensor::from_vector(packed, Shape{static_cast<std::int64_t>(packed.size()), 1});
  BnbQuantState& s = w.state;
  s.shape = a.shape();
  s.dtype = dtype;
  s.blocksize = options.blocksize;
  s.quant_type = t;
  s.code = detail::f32_tensor(bnb_4bit_info(t).code, Shape{16});
  if (!options.compress_statistics) {
    s.absmax = detail::f32_tensor(absmax, Shape{static_cast<std::int64_t>(nb)});
    return w;
  }
  double sum = 0;
  for (float v : absmax) sum += v;
  const float offset = nb ? static_cast<float>(sum / static_cast<double>(nb)) : 0.0f;
  std::vector<float> centred(nb);
  for (std::size_t i = 0; i < nb; ++i) centred[i] = absmax[i] - offset;
  const auto& code2 = dynamic_map();
  std::vector<std::uint8_t> q(nb);
  std::vector<float> absmax2((nb + 255) / 256);
  quantize_blockwise(centred.data(), nb, code2.data(), 256, q.data(), absmax2.data());
  s.absmax = Tensor::from_vector(q, Shape{static_cast<std::int64_t>(nb)});
  s.offset = offset;
  s.state2 = BnbNestedState{detail::f32_tensor(absmax2, Shape{static_cast<std::int64_t>(absmax2.size())}),
                            detail::f32_tensor(code2, Shape{256}), 256, DType::f32};
  return w;
}

namespace detail {
/// The packed codes as bytes, whatever dtype stores them (bnb's quant_storage).
/// The packed weight as a contiguous CPU tensor of whole bytes, checked against the state's size:
/// the tensor itself when it already is one (a per-call copy would stream the weight twice).
inline Tensor packed_bytes(const Tensor& packed, const BnbQuantState& state, const std::string& what) {
  Tensor p = packed.to(Device::cpu()).contiguous();
  const std::size_t want = static_cast<std::size_t>((state.numel() + 1) / 2);
  if (p.nbytes() != want) {
    throw ShapeError(what + ": packed weight " + std::string(dtype_name(p.dtype())) + " " + p.shape().str() + " holds " +
                     std::to_string(p.nbytes()) + " bytes; a " + state.shape.str() + " weight needs " +
                     std::to_string(want));
  }
  return p;
}

/// The state's float32 absmax: the tensor's own values when it holds them already (a Linear4bit
/// decodes a nested absmax once), else absmax_f32() into `scratch`. Copying them on every call
/// (5.5M floats per token of a 483M model) cost the decode more than reading the weights' blocks.
inline const float* absmax_floats(const BnbQuantState& state, std::vector<float>& scratch) {
  const Tensor& a = state.absmax;
  if (!state.nested() && a.dtype() == DType::f32 && a.is_cpu() && a.is_contiguous() && a.numel() == state.blocks()) {
    return a.data_ptr<float>();
  }
  scratch = state.absmax_f32();
  return scratch.data();
}
}  // namespace detail

/// dequantize_4bit: each code's decode value times its block's float32 absmax, rounded once to
/// state.dtype; the result has state.shape.
inline Tensor dequantize_4bit(const Tensor& packed, const BnbQuantState& state) {
  const Tensor held = detail::packed_bytes(packed, state, "dequantize_4bit");
  const auto* bytes = static_cast<const std::uint8_t*>(held.data_ptr());
  const auto absmax = state.absmax_f32();
  const auto n = static_cast<std::size_t>(state.numel());
  const auto bs = static_cast<std::size_t>(state.blocksize);
  const auto& lut = bnb_4bit_info(state.quant_type).decode;
  Tensor out = Tensor::empty(state.shape, DType::f32);
  float* y = out.data_ptr<float>();
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t b = bytes[i / 2];
    y[i] = lut[i % 2 == 0 ? b >> 4 : b & 0x0F] * absmax[i / bs];
  }
  return state.dtype == DType::f32 ? out : out.to(state.dtype);
}

// ---- serialized form ---------------------------------------------------------------------------

/// Python's repr of a float (what json.dumps writes): shortest round-trip digits, fixed notation
/// for decimal exponents -4..15, else d.ddde+XX; NaN / Infinity as json.dumps spells them.
inline std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string s(buf, r.ptr);
  const bool neg = s[0] == '-';
  const std::size_t e = s.find('e');
  std::string digits;
  for (std::size_t i = neg ? 1 : 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  const int exp = std::stoi(s.substr(e + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const auto int_len = static_cast<std::size_t>(exp) + 1;
      std::string ip = digits.substr(0, std::min(int_len, digits.size()));
      ip.resize(int_len, '0');
      const std::string fp = digits.size() > int_len ? digits.substr(int_len) : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int a = exp < 0 ? -exp : exp;
    out += std::string("e") + (exp < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
  }
  return out;
}

/// The JSON bnb packs into "quant_state.bitsandbytes__<t>" (QuantState.as_dict(packed=True)'s
/// non-tensor items, json.dumps with its default separators), byte for byte:
/// {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [8, 64],
///  "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.0123}
inline std::string quant_state_json(const BnbQuantState& s) {
  std::string j = "{\"quant_type\": \"" + std::string(bnb_quant_type_name(s.quant_type)) +
                  "\", \"blocksize\": " + std::to_string(s.blocksize) + ", \"dtype\": \"" +
                  std::string(dtype_name(s.dtype)) + "\", \"shape\": [";
  for (std::size_t i = 0; i < s.shape.size(); ++i) j += (i ? ", " : "") + std::to_string(s.shape[i]);
  j += "]";
  if (s.nested()) {
    j += ", \"nested_blocksize\": " + std::to_string(s.state2->blocksize) + ", \"nested_dtype\": \"" +
         std::string(dtype_name(s.state2->dtype)) + "\", \"nested_offset\": " + python_float_repr(*s.offset);
  }
  return j + "}";
}

/// The tensors Linear4bit._save_to_state_dict writes beside "<prefix>" (the packed weight), in
/// its order: absmax, quant_map, [nested_absmax, nested_quant_map,] quant_state.bitsandbytes__<t>.
inline std::vector<std::pair<std::string, Tensor>> quant_state_to_tensors(const BnbQuantState& s,
                                                                          const std::string& prefix = "weight") {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back(prefix + ".absmax", s.absmax);
  out.emplace_back(prefix + ".quant_map", s.code);
  if (s.nested()) {
    out.emplace_back(prefix + ".nested_absmax", s.state2->absmax);
    out.emplace_back(prefix + ".nested_quant_map", s.state2->code);
  }
  const std::string j = quant_state_json(s);
  out.emplace_back(prefix + ".quant_state.bitsandbytes__" + std::string(bnb_quant_type_name(s.quant_type)),
                   Tensor::from_vector(std::vector<std::uint8_t>(j.begin(), j.end())));
  return out;
}

namespace detail {
inline const Tensor& require_tensor(const std::map<std::string, Tensor>& tensors, const std::string& name,
                                    const std::string& why) {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw FormatError(name + ": missing (" + why + ")");
  return it->second;
}
inline void check_tensor(const Tensor& t, const std::string& name, DType dtype, std::int64_t count) {
  if (t.dtype() != dtype || t.numel() != count) {
    throw FormatError(name + ": is " + std::string(dtype_name(t.dtype())) + " " + t.shape().str() + ", expected " +
                      std::to_string(count) + " " + std::string(dtype_name(dtype)) + " values");
  }
}
inline DType float_dtype_field(const nlohmann::json& j, const char* key, const std::string& name) {
  const std::string v = required_json_field<std::string, FormatError>(j, key, name);
  const auto d = try_dtype_from_string(v);
  if (!d || (*d != DType::f32 && *d != DType::f16 && *d != DType::bf16)) {
    throw FormatError(name + ": '" + key + "' is \"" + v + "\"; expected float32, float16 or bfloat16");
  }
  return *d;
}
}  // namespace detail

/// QuantState.from_dict over saved tensors: reads "<prefix>.quant_state.bitsandbytes__<t>" (exactly
/// one), "<prefix>.absmax", ".quant_map" and, when its JSON has nested_offset, ".nested_absmax" and
/// ".nested_quant_map", and checks them against each other and, when `tensors` holds "<prefix>", the
/// packed weight's byte count. Every disagreement is a FormatError naming the tensor.
/// Differences from bnb: it asserts or fails later (or reads garbage) where this names the tensor;
/// the JSON must carry shape (bnb allows null, which it cannot dequantize).
inline BnbQuantState quant_state_from_tensors(const std::string& prefix, const std::map<std::string, Tensor>& tensors) {
  const std::string qs_prefix = prefix + ".quant_state.";
  std::vector<std::string> found;
  for (auto it = tensors.lower_bound(qs_prefix); it != tensors.end() && it->first.starts_with(qs_prefix); ++it) {
    found.push_back(it->first);
  }
  if (found.size() != 1) {
    std::string list;
    for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
    throw FormatError(prefix + ": expected exactly one " + qs_prefix + "bitsandbytes__nf4 or __fp4 tensor, found " +
                      (found.empty() ? std::string("none") : list));
  }
  const std::string& qs_name = found[0];
  const std::string suffix = qs_name.substr(qs_prefix.size());
  const std::string tag = "bitsandbytes__";
  const auto key_type = suffix.starts_with(tag) ? try_bnb_quant_type(std::string_view(suffix).substr(tag.size())) : std::nullopt;
  if (!key_type) throw FormatError(qs_name + ": unknown quant_state key; allowed: bitsandbytes__fp4, bitsandbytes__nf4");

  const Tensor raw = tensors.at(qs_name).to(Device::cpu()).contiguous();
  if (raw.dtype() != DType::u8) throw FormatError(qs_name + ": is " + std::string(dtype_name(raw.dtype())) + ", expected uint8 JSON bytes");
  const auto* p = raw.data_ptr<std::uint8_t>();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(raw.numel())));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(qs_name + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw FormatError(qs_name + ": expected a JSON object");
  const std::string qt = required_json_field<std::string, FormatError>(j, "quant_type", qs_name);
  const auto type = try_bnb_quant_type(qt);
  if (!type) throw FormatError(qs_name + ": unknown quant_type \"" + qt + "\"; allowed: fp4, nf4");
  if (*type != *key_type) throw FormatError(qs_name + ": quant_type \"" + qt + "\" disagrees with the tensor's name");

  BnbQuantState s;
  s.quant_type = *type;
  s.blocksize = required_json_field<std::int64_t, FormatError>(j, "blocksize", qs_name);
  if (!is_bnb_4bit_blocksize(s.blocksize)) {
    throw FormatError(qs_name + ": blocksize " + std::to_string(s.blocksize) + " is not one of 32, 64, ..., 4096");
  }
  s.dtype = detail::float_dtype_field(j, "dtype", qs_name);
  if (!j.contains("shape") || !j.at("shape").is_array() || j.at("shape").size() > max_dims) {
    throw FormatError(qs_name + ": \"shape\" is missing or not a list of at most " + std::to_string(max_dims) + " sizes");
  }
  for (const auto& d : j.at("shape")) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0) throw FormatError(qs_name + ": \"shape\" holds " + d.dump());
    s.shape.push_back(d.get<std::int64_t>());
  }
  // The product with zeros counted as 1 is what a Tensor of this shape derives its strides from;
  // the 4096 of headroom keeps blocks() (numel + blocksize - 1) from overflowing too.
  std::int64_t extents = 1;
  for (const std::int64_t d : s.shape) {
    if (__builtin_mul_overflow(extents, std::max<std::int64_t>(d, 1), &extents) ||
        extents > INT64_MAX - bnb_4bit_blocksizes.back()) {
      throw FormatError(qs_name + ": \"shape\" " + s.shape.str() + " has more elements than a tensor can hold");
    }
  }

  const bool nested = j.contains("nested_offset");
  const std::string absmax_name = prefix + ".absmax", map_name = prefix + ".quant_map";
  s.absmax = detail::require_tensor(tensors, absmax_name, "the per-block absmax");
  detail::check_tensor(s.absmax, absmax_name, nested ? DType::u8 : DType::f32, s.blocks());
  s.code = detail::require_tensor(tensors, map_name, "the 4-bit code book");
  detail::check_tensor(s.code, map_name, DType::f32, 16);
  if (nested) {
    s.offset = static_cast<float>(required_json_field<double, FormatError>(j, "nested_offset", qs_name));
    BnbNestedState n;
    n.blocksize = required_json_field<std::int64_t, FormatError>(j, "nested_blocksize", qs_name);
    if (n.blocksize <= 0) throw FormatError(qs_name + ": nested_blocksize " + std::to_string(n.blocksize) + " is not positive");
    n.dtype = detail::float_dtype_field(j, "nested_dtype", qs_name);
    const std::string na = prefix + ".nested_absmax", nm = prefix + ".nested_quant_map";
    n.absmax = detail::require_tensor(tensors, na, "the absmax of the double-quantized absmax");
    // Rounded up without the sum (blocks + nested_blocksize - 1), which a huge nested_blocksize overflows.
    detail::check_tensor(n.absmax, na, DType::f32, s.blocks() / n.blocksize + (s.blocks() % n.blocksize != 0));
    n.code = detail::require_tensor(tensors, nm, "the dynamic map of the double-quantized absmax");
    detail::check_tensor(n.code, nm, DType::f32, 256);
    s.state2 = std::move(n);
  }
  if (const auto it = tensors.find(prefix); it != tensors.end()) {
    const std::size_t want = static_cast<std::size_t>((s.numel() + 1) / 2);
    if (it->second.nbytes() != want) {
      throw FormatError(prefix + ": packed weight " + std::string(dtype_name(it->second.dtype())) + " " +
                        it->second.shape().str() + " holds " + std::to_string(it->second.nbytes()) +
                        " bytes; its quant_state shape " + s.shape.str() + " needs " + std::to_string(want));
    }
  }
  return s;
}

}  // namespace accel::quant
