// Fuzz target: parse_gguf over arbitrary file bytes.
//
// A header the parser accepts is then used the way GgufFile and io::dequantize use it (the
// lookups, a view of each tensor's bytes, a Tensor over a plain tensor's bytes, dequantize_ggml
// over each tensor's bytes and shape), so an accepted header that would make a later read go out
// of bounds, overflow or disagree with the dequantizer is caught here, not in a user's process.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/ggml_types.hpp"
#include "accel/io/gguf.hpp"
#include "accel/quant/kernels/ggml_dot.hpp"

namespace {

using accel::io::GgmlType;
using accel::io::GgufHeader;
using accel::io::GgufTensorInfo;
using accel::io::GgufValue;
using accel::io::GgufValueType;

// Aliased tensors may each span the whole file, so the bytes one input can make us touch grow
// with the square of its length; these bounds keep every execution in milliseconds.
constexpr std::uint64_t max_dequantized_bytes = std::uint64_t{1} << 20;  // per tensor
constexpr std::uint64_t max_bytes_per_input = std::uint64_t{16} << 20;

// Where the sum of a tensor's bytes goes, so that reading them is not optimized away.
volatile unsigned byte_sum = 0;

void check(bool ok) {
  if (!ok) std::abort();
}

// The alternative of GgufValue::data that the documented mapping gives each value type.
std::size_t variant_index(GgufValueType t) {
  switch (t) {
    case GgufValueType::uint8:
    case GgufValueType::uint16:
    case GgufValueType::uint32:
    case GgufValueType::uint64: return 0;
    case GgufValueType::int8:
    case GgufValueType::int16:
    case GgufValueType::int32:
    case GgufValueType::int64: return 1;
    case GgufValueType::float32:
    case GgufValueType::float64: return 2;
    case GgufValueType::boolean: return 3;
    case GgufValueType::string: return 4;
    case GgufValueType::array: return 5;
  }
  std::abort();  // an enumerator the parser should never have produced
}

void check_value(const GgufValue& v, int depth) {
  check(accel::io::gguf_value_type_name(v.type) != "?");
  check(v.data.index() == variant_index(v.type));
  check(v.is_integer() == (v.data.index() <= 1));
  check(v.as_double().has_value() == (v.data.index() <= 2));
  if (const auto* u = std::get_if<std::uint64_t>(&v.data)) {
    const std::uint64_t limit = v.type == GgufValueType::uint8    ? 0xFF
                                : v.type == GgufValueType::uint16 ? 0xFFFF
                                : v.type == GgufValueType::uint32 ? 0xFFFFFFFF
                                                                  : UINT64_MAX;
    check(*u <= limit && v.as_uint() == *u);
  }
  if (const auto* s = std::get_if<std::int64_t>(&v.data)) {
    const std::int64_t limit = v.type == GgufValueType::int8    ? INT8_MAX
                               : v.type == GgufValueType::int16 ? INT16_MAX
                               : v.type == GgufValueType::int32 ? INT32_MAX
                                                                : INT64_MAX;
    check(*s <= limit && *s >= -limit - 1);
    check(v.as_uint().has_value() == (*s >= 0));
  }
  if (const auto* a = v.as_array()) {
    // An array at the depth limit is rejected, so only scalars sit at the deepest level.
    check(depth < accel::io::gguf_max_array_depth);
    for (const auto& item : a->items) {
      check(item.type == a->elem_type);
      check_value(item, depth + 1);
    }
  }
}

void check_metadata(const GgufHeader& h) {
  check(h.key_index.size() == h.metadata.size());
  for (const auto& [key, value] : h.metadata) {
    check(h.find(key) == &value);
    check_value(value, 0);
  }
  const auto* a = h.find("general.alignment");
  if (a) {
    check(a->type == GgufValueType::uint32 && a->as_uint() == h.alignment);
  } else {
    check(h.alignment == accel::io::gguf_default_alignment);
  }
  check(h.alignment != 0 && (h.alignment & (h.alignment - 1)) == 0);
}

// The extents' product, or nullopt when a partial product overflows int64 with no zero extent.
std::optional<std::uint64_t> product(const std::vector<std::uint64_t>& ne) {
  std::uint64_t p = 1;
  bool overflow = false;
  for (const auto e : ne) {
    if (e == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(p, e, &p) || p > static_cast<std::uint64_t>(INT64_MAX);
  }
  if (overflow) return std::nullopt;
  return p;
}

void check_tensor_info(const GgufHeader& h, const GgufTensorInfo& t, std::size_t size) {
  check(h.find_tensor(t.name) == &t);
  check(t.ne.size() <= accel::io::gguf_max_dims);
  const auto numel = product(t.ne);
  check(numel && *numel == t.numel);
  const auto& info = accel::io::ggml_type_info(t.type);
  check(accel::io::find_ggml_type(static_cast<std::uint32_t>(t.type)) == &info);
  const std::uint64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
  check(ne0 % info.block_size == 0);
  const std::uint64_t rows = ne0 == 0 ? 0 : t.numel / ne0;
  std::uint64_t nbytes = 0;
  check(!__builtin_mul_overflow(static_cast<std::uint64_t>(accel::io::ggml_row_nbytes(t.type, ne0)), rows, &nbytes));
  check(t.nbytes == nbytes);
  check(t.offset % h.alignment == 0);
  check(t.file_offset >= h.data_offset && t.file_offset - h.data_offset == t.offset);
  check(t.file_offset <= size && t.nbytes <= size - t.file_offset);
}

// GgufFile::tensor for a plain type: a Tensor over the bytes when they are aligned for the
// dtype, a copy otherwise.
void use_plain(const GgufTensorInfo& t, accel::DType dtype, const std::uint8_t* data) {
  const accel::Shape shape = t.shape();
  auto* p = const_cast<std::uint8_t*>(data) + t.file_offset;
  accel::Tensor v;
  if (t.file_offset % accel::itemsize(dtype) != 0) {
    v = accel::Tensor::empty(shape, dtype, accel::Device::cpu());
    if (t.nbytes) std::memcpy(v.data_ptr(), p, static_cast<std::size_t>(t.nbytes));
  } else {
    const auto s = accel::Storage::wrap(p, static_cast<std::size_t>(t.nbytes), accel::Device::cpu(), nullptr, false);
    v = accel::Tensor::from_storage(s, dtype, shape);
  }
  check(static_cast<std::uint64_t>(v.numel()) == t.numel && v.nbytes() == t.nbytes);
}

/// The first row's integer dot product at every kernel tier this CPU runs, against a fixed
/// activation row: the kernels index tables by bytes of the file (the lattice types' points, the
/// code books), so an accepted tensor must not make them read out of bounds; where everything is
/// finite the tiers agree with the portable kernel within a share of the terms' magnitude.
void use_dot(const GgufTensorInfo& t, accel::io::ByteSpan bytes, const std::vector<float>& w) {
  namespace quant = accel::quant;
  if (!quant::has_quantized_dot(t.type) || w.empty()) return;
  const std::size_t n = w.size();
  if (n % (quant::activation_is_q8_k(t.type) ? 256 : 32) != 0) return;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int>(i * 37 % 255) - 127) / 16.0f;
  quant::ActivationRow a;
  quant::quantize_activation(t.type, x.data(), n, a);
  double magnitude = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float xv = quant::activation_is_q8_k(t.type) ? a.q8_k[i / 256].d * a.q8_k[i / 256].qs[i % 256]
                                                         : accel::io::f16_scale(a.q8_0[i / 32].d) * a.q8_0[i / 32].qs[i % 32];
    magnitude += std::fabs(static_cast<double>(w[i]) * xv);
  }
  const float portable = quant::vec_dot(accel::simd::scalar{}, t.type, n, bytes.data(), a);
  quant::quant_ladder::for_each([&](auto arch) {
    using A = decltype(arch);
    if (!A::supported() || !A::available()) return;
    const float got = quant::vec_dot(arch, t.type, n, bytes.data(), a);
    if (std::isfinite(magnitude) && std::isfinite(portable) && std::isfinite(got)) {
      check(std::fabs(static_cast<double>(got) - portable) <= 1e-4 * magnitude + 1e-3);
    }
  });
}

void use_dequantized(const GgufTensorInfo& t, accel::io::ByteSpan bytes) {
  // Every type the header accepts dequantizes (the table's `dequantizable`, true for all).
  check(accel::io::ggml_type_info(t.type).dequantizable);
  const accel::Shape shape = t.shape();
  // The header already checked everything dequantize_ggml checks, so any refusal here is the
  // parser and the dequantizer disagreeing about an accepted tensor.
  try {
    const accel::Tensor out = accel::io::dequantize_ggml(t.type, bytes, shape);
    check(out.dtype() == accel::DType::f32 && static_cast<std::uint64_t>(out.numel()) == t.numel);
    check(out.shape() == shape);
    // The first row on its own decodes to the same bits as within the whole tensor.
    const std::uint64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    if (t.numel != 0) {
      std::vector<float> row(static_cast<std::size_t>(ne0));
      accel::io::dequantize_row(t.type, bytes.data(), row.data(), row.size());
      check(std::memcmp(row.data(), out.data_ptr(), row.size() * sizeof(float)) == 0);
      use_dot(t, bytes, row);
    }
  } catch (const accel::Error&) {
    std::abort();
  }
}

void use_header(const GgufHeader& h, const std::uint8_t* data, std::size_t size) {
  check(h.version == 2 || h.version == 3);
  check_metadata(h);
  // Magic, version and the two counts come before the first key.
  check(h.data_offset >= 24 && h.data_offset % h.alignment == 0);
  check(h.tensors.empty() || h.data_offset <= size);
  check(h.tensor_index.size() == h.tensors.size());
  std::uint64_t budget = max_bytes_per_input;
  for (const auto& t : h.tensors) {
    check_tensor_info(h, t, size);
    if (t.nbytes > budget) continue;
    budget -= t.nbytes;
    // GgufFile::bytes: a view of the tensor inside the file, read in full.
    const accel::io::ByteSpan bytes(reinterpret_cast<const std::byte*>(data) + t.file_offset,
                                    static_cast<std::size_t>(t.nbytes));
    unsigned sum = 0;
    for (const std::byte b : bytes) sum += static_cast<unsigned>(b);
    byte_sum = sum;
    const auto& info = accel::io::ggml_type_info(t.type);
    if (info.plain) use_plain(t, *info.plain, data);
    if (t.numel > max_dequantized_bytes / sizeof(float) || t.numel * sizeof(float) > budget) continue;
    budget -= t.numel * sizeof(float);
    use_dequantized(t, bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const accel::io::ByteSpan bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    use_header(accel::io::parse_gguf(bytes, "fuzz.gguf"), data, size);
  } catch (const accel::Error&) {
  }
  return 0;
}
