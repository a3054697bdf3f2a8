// Fuzz target: the bitsandbytes state readers, quant_state_from_tensors and
// int8_weight_from_tensors, over the tensors of a safetensors file.
//
// The input is parsed with parse_safetensors_header and its tensors are built the way
// SafetensorsFile::tensor builds them (a view of the bytes, or a copy when they are not aligned
// for the dtype). Every layer the names point at is read the way BnbQuantizer reads it: 4-bit
// state under "<layer>.weight" (the prefix of each ".quant_state." name), int8 state under
// "<layer>" (the prefix of each ".SCB" name). A state the reader accepts is then decoded with
// dequantize_4bit / int8_vectorwise_dequant, so an accepted state whose sizes disagree with its
// tensors is caught here as an out-of-bounds read, not in a user's process.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "accel/core/errors.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"

namespace {

using accel::DType;
using accel::Tensor;

// A layer name may be repeated under many spellings; a few of each kind are enough to reach
// every branch, and the bound keeps each execution short.
constexpr std::size_t max_layers = 4;

void check(bool ok) {
  if (!ok) std::abort();
}

std::map<std::string, Tensor> tensors_of(const accel::io::SafetensorsHeader& h, const std::uint8_t* data) {
  std::map<std::string, Tensor> out;
  for (const auto& t : h.tensors) {
    const std::uint64_t off = h.data_start + t.begin;
    auto* p = const_cast<std::uint8_t*>(data) + off;
    Tensor v;
    if (off % accel::itemsize(t.dtype) != 0) {
      v = Tensor::empty(t.shape, t.dtype, accel::Device::cpu());
      if (t.nbytes()) std::memcpy(v.data_ptr(), p, t.nbytes());
    } else {
      v = Tensor::from_storage(accel::Storage::wrap(p, t.nbytes(), accel::Device::cpu(), nullptr, false), t.dtype,
                               t.shape);
    }
    out.emplace(t.name, v);
  }
  return out;
}

void use_4bit(const std::string& prefix, const std::map<std::string, Tensor>& tensors) {
  const auto s = accel::quant::quant_state_from_tensors(prefix, tensors);
  check(accel::quant::is_bnb_4bit_blocksize(s.blocksize));
  check(s.numel() >= 0 && s.code.numel() == 16);
  check(s.absmax.numel() == s.blocks());
  check(s.nested() == s.offset.has_value());
  // What the accepted state promises is decoded in full: absmax_f32 reads every absmax (and the
  // nested codes and their absmax), dequantize_4bit every packed byte.
  const auto absmax = s.absmax_f32();
  check(absmax.size() == static_cast<std::size_t>(s.blocks()));
  const auto packed = tensors.find(prefix);
  if (packed == tensors.end()) return;
  const Tensor w = accel::quant::dequantize_4bit(packed->second, s);
  check(w.shape() == s.shape && w.dtype() == s.dtype);
}

void use_int8(const std::string& prefix, const std::map<std::string, Tensor>& tensors) {
  const auto w = accel::quant::int8_weight_from_tensors(prefix, tensors);
  check(w.CB.dtype() == DType::i8 && w.CB.dim() == 2 && w.SCB.numel() == w.CB.size(0));
  const Tensor d = accel::quant::int8_vectorwise_dequant(w);
  check(d.shape() == w.CB.shape() && d.dtype() == DType::f32);
}

void use_header(const accel::io::SafetensorsHeader& h, const std::uint8_t* data) {
  const auto tensors = tensors_of(h, data);
  std::set<std::string> four_bit, int8;
  for (const auto& [name, t] : tensors) {
    if (const auto at = name.find(".quant_state."); at != std::string::npos && four_bit.size() < max_layers) {
      four_bit.insert(name.substr(0, at));
    }
    if (name.ends_with(".SCB") && int8.size() < max_layers) int8.insert(name.substr(0, name.size() - 4));
  }
  // Each reader refuses on its own: one layer's rejection must not hide another's bug.
  for (const auto& prefix : four_bit) {
    try {
      use_4bit(prefix, tensors);
    } catch (const accel::Error&) {
    }
  }
  for (const auto& prefix : int8) {
    try {
      use_int8(prefix, tensors);
    } catch (const accel::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const accel::io::ByteSpan bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    use_header(accel::io::parse_safetensors_header(bytes, "fuzz.safetensors"), data);
  } catch (const accel::Error&) {
  }
  return 0;
}
