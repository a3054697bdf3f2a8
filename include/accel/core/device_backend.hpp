// DeviceBackend: the one seam between the header-only host code and the CUDA code.
//
//   DeviceBackend            one table of function pointers: runtime, kernel and op slots
//   cuda_backend()           the process-wide table; slots stay null until registered
//   device_backend(d)        the table for device d, or DeviceError saying how to enable CUDA
//   require_slot(fn, what)   a registered slot, or DeviceError naming it and its registrar
//   cuda_is_available(), cuda_device_count()
//
// Why a table of plain function pointers: the tensor layer and the host ops are compiled by g++
// without any CUDA header, and the kernels exist only in a translation unit that nvcc compiles.
// Neither side can name the other's functions; both can name this struct. Every slot has exactly
// one registrar, a start-up initializer in the header that implements it, so the table does not
// depend on the order in which translation units are initialised:
//
//   runtime slots   backend/cuda/runtime.hpp    host code over cudart; any TU built with
//                                               ACCEL_WITH_CUDA that includes it (accel.hpp does)
//   kernel slots    backend/cuda/kernels.cuh    nvcc: dtype conversion and pattern fill
//   op slots        ops/cuda/ops.cuh            nvcc: one per op of accel/ops
//   quant slots     quant/kernels/cuda/kernels.cuh      nvcc: packed-weight decoding and products
//
// A program therefore gets CUDA memory and copies from g++ code alone, and the kernels by
// compiling one .cu file that includes ops/cuda/ops.cuh (tests/cuda_kernels/cuda.cmake shows the
// CMake side). An empty kernel slot is not an error: the caller converts or fills through the
// host. An empty op slot is a DeviceError naming the op.
//
// Contract of the op slots: the host op (accel/ops/*.hpp) has validated every argument (dtypes,
// ranks, shapes, devices, broadcast), resolved defaults and negative dims, and allocated `out`
// on the inputs' GPU with the result's shape and dtype; it calls the slot only when `out` has
// elements. A slot launches its kernels on the current stream of that GPU and asserts no more
// than cheap invariants, in debug builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/shape.hpp"

namespace accel {

class Tensor;

/// The CUDA implementations of the ops (see the header comment for what a slot may assume).
struct DeviceOps {
  /// `batch` is the broadcast batch shape; empty when b is 2-d (a's leading dims fold into M).
  void (*matmul)(const Tensor& a, const Tensor& b, const Shape& batch, Tensor& out) = nullptr;
  /// `bias` may be undefined.
  void (*linear)(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) = nullptr;
  /// `a` and `b` are already expanded to out's shape; out's dtype is the promoted one.
  void (*add)(const Tensor& a, const Tensor& b, Tensor& out) = nullptr;
  void (*mul)(const Tensor& a, const Tensor& b, Tensor& out) = nullptr;
  void (*gelu)(const Tensor& x, bool tanh_approximation, Tensor& out) = nullptr;
  void (*silu)(const Tensor& x, Tensor& out) = nullptr;
  /// `dim` is already wrapped into [0, x.dim()).
  void (*softmax)(const Tensor& x, std::size_t dim, Tensor& out) = nullptr;
  /// `weight` / `bias` are undefined or [x.size(-1)] float tensors on x's GPU.
  void (*layer_norm)(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& out) = nullptr;
  void (*rms_norm)(const Tensor& x, const Tensor& weight, double eps, Tensor& out) = nullptr;
  /// Ids are range-checked on the GPU (ValueError): only the data can tell. Called whenever ids
  /// has elements, even when out has none (rows of width 0).
  void (*embedding)(const Tensor& ids, const Tensor& weight, Tensor& out) = nullptr;
  /// x [B, H, T, D], positions [T] or [B, T]; 2 * inv_freq.size() <= D.
  void (*rotary_embedding)(const Tensor& x, const Tensor& positions, const std::vector<double>& inv_freq,
                           double attention_scaling, bool interleaved, Tensor& out) = nullptr;
  /// q [B, Hq, T, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv]; `scale` resolved, `window` >= 0.
  void (*scaled_dot_product_attention)(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                       double scale, std::int64_t window, Tensor& out) = nullptr;
  /// `dim` is already wrapped; x has a non-empty extent there.
  void (*argmax)(const Tensor& x, std::size_t dim, Tensor& out) = nullptr;
  /// Tensors without elements are skipped; the others match out outside `dim`.
  void (*cat)(const std::vector<Tensor>& xs, std::size_t dim, Tensor& out) = nullptr;
};

/// The CUDA kernels of the packed weight formats (quant/kernels/cuda/kernels.cuh). Contract: the host
/// layer (quant/layers/device_linear.hpp) has checked dtypes, shapes and that every tensor is contiguous
/// on one GPU; `out` is allocated there. A ggml type travels as its GGUF type number (this layer
/// cannot name io's enum). The `*_gemv` slots take x [n, in] (float32 or bfloat16, 16-byte
/// aligned) with 1 <= n <= 8, an undefined or [out] float `bias`, and write out [n, out] in x's
/// dtype; the `*_dequantize` slots write W [out, in] as out's dtype (f32 / f16 / bf16). A slot
/// returning bool returns false for a type it has no kernel for.
struct DeviceQuantOps {
  /// W as ggml blocks: u8 [out, row bytes].
  bool (*ggml_dequantize)(const Tensor& packed, std::uint32_t ggml_type, Tensor& out) = nullptr;
  bool (*ggml_gemv)(const Tensor& x, const Tensor& packed, std::uint32_t ggml_type, const Tensor& bias,
                    Tensor& out) = nullptr;
  /// W as bitsandbytes 4-bit: u8 bytes (element 2i the high nibble of byte i) over the flattened
  /// [out, in], f32 `absmax` per `blocksize` elements, `lut` the 16 decoded code values. The GEMV
  /// needs in % 32 == 0.
  void (*bnb4_dequantize)(const Tensor& packed, const Tensor& absmax, const float* lut, std::int64_t blocksize,
                          Tensor& out) = nullptr;
  void (*bnb4_gemv)(const Tensor& x, const Tensor& packed, const Tensor& absmax, const float* lut,
                    std::int64_t blocksize, const Tensor& bias, Tensor& out) = nullptr;
  /// W[r, k] = codes[r, k] * scale[r] * multiplier: i8 codes [out, in], f32 scale [out].
  void (*int8_dequantize)(const Tensor& codes, const Tensor& scale, float multiplier, Tensor& out) = nullptr;
  void (*int8_gemv)(const Tensor& x, const Tensor& codes, const Tensor& scale, float multiplier, const Tensor& bias,
                    Tensor& out) = nullptr;
  /// W as Quanto / TorchAO codes (quant/formats/affine_scheme.hpp's affine_value): `codes` bytes [out, row
  /// bytes], f32 `scale` and `min` (undefined unless kind is zero_point) [out, groups] with `group`
  /// columns each; `kind` is the AffineKind's value.
  void (*affine_dequantize)(const Tensor& codes, const Tensor& scale, const Tensor& min, int kind, int bits,
                            std::int64_t group, Tensor& out) = nullptr;
  void (*affine_gemv)(const Tensor& x, const Tensor& codes, const Tensor& scale, const Tensor& min, int kind, int bits,
                      std::int64_t group, const Tensor& bias, Tensor& out) = nullptr;
};

/// Everything the host code asks of a device runtime and its kernels.
struct DeviceBackend {
  // ---- runtime slots (backend/cuda/runtime.hpp) ----
  int (*device_count)() noexcept = nullptr;
  /// Raw device memory; throws OutOfMemoryError. Counting is the caller's job.
  void* (*allocate)(int index, std::size_t nbytes) = nullptr;
  void (*deallocate)(int index, void* p) noexcept = nullptr;
  /// Page-locked host memory, or nullptr when the runtime cannot provide it.
  void* (*allocate_pinned)(std::size_t nbytes) noexcept = nullptr;
  void (*deallocate_pinned)(void* p) noexcept = nullptr;
  /// Copies bytes between any two of host / device memory. With `non_blocking`, the copy is
  /// queued on the current stream of the device involved and may still be running on return.
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
               bool non_blocking) = nullptr;
  /// Repeats a `pattern_bytes` pattern `count` times at dst (through fill_kernel when there is one).
  void (*fill)(Device d, void* dst, const void* pattern, std::size_t pattern_bytes, std::size_t count) = nullptr;
  /// Waits for all work queued on GPU `index`.
  void (*synchronize)(int index) = nullptr;
  /// Free and total bytes of GPU `index` as the driver sees them (other processes included).
  void (*mem_get_info)(int index, std::size_t* free_bytes, std::size_t* total_bytes) = nullptr;

  // ---- queues (backend/cuda/runtime.hpp): what an overlapped copy pipeline needs ----
  // Streams and events are opaque handles; a null stream names the calling thread's current
  // stream of the device (the one the ops queue on).
  /// A new non-blocking stream on GPU `index`, of the highest priority (copies must not queue
  /// behind compute); stream_destroy releases it.
  void* (*stream_create)(int index) = nullptr;
  void (*stream_destroy)(int index, void* stream) noexcept = nullptr;
  /// An event without timing on GPU `index`; event_destroy releases it.
  void* (*event_create)(int index) = nullptr;
  void (*event_destroy)(int index, void* event) noexcept = nullptr;
  /// Records `event` at the current end of `stream` of GPU `index`.
  void (*event_record)(int index, void* event, void* stream) = nullptr;
  /// Work queued on `stream` of GPU `index` after this call waits for `event`, on the GPU.
  void (*stream_wait_event)(int index, void* stream, void* event) = nullptr;
  /// Blocks the calling thread until the work recorded in `event` is done.
  void (*event_synchronize)(int index, void* event) = nullptr;
  /// Queues a copy on `stream` (one end on GPU `index`, the other host memory or the same GPU).
  /// Pinned host memory is copied by the DMA engine after the call returns, so it must stay as
  /// it is until an event recorded after the copy completes; pageable host memory goes through
  /// the backend's pinned staging and has been read when the call returns.
  void (*copy_on_stream)(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
                         void* stream) = nullptr;

  // ---- kernel slots (backend/cuda/kernels.cuh); false: no kernel for the request ----
  /// Converts `n` contiguous elements on GPU d, queued on its current stream.
  bool (*convert)(Device d, const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n) = nullptr;
  bool (*fill_kernel)(Device d, void* dst, const void* pattern, std::size_t pattern_bytes,
                      std::size_t count) = nullptr;

  // ---- op slots (ops/cuda/ops.cuh) ----
  DeviceOps ops;
  // ---- quant slots (quant/kernels/cuda/kernels.cuh) ----
  DeviceQuantOps quant;

  /// True once a runtime has registered itself.
  bool has_runtime() const noexcept { return allocate != nullptr; }
};

/// The process-wide CUDA table. Never destroyed: storages freed during static destruction may
/// still reach it.
inline DeviceBackend& cuda_backend() noexcept {
  static DeviceBackend* table = new DeviceBackend();
  return *table;
}

/// The table for `d` with its runtime registered, or a DeviceError naming what is missing.
inline const DeviceBackend& device_backend(Device d) {
  if (!d.is_cuda()) throw DeviceError("device " + d.str() + " has no device backend");
  const DeviceBackend& b = cuda_backend();
  if (!b.has_runtime()) {
    throw DeviceError("device " + d.str() +
                      " needs the CUDA backend: build with ACCEL_WITH_CUDA=ON (CUDA toolkit found "
                      "by CMake) and include accel/accel.hpp");
  }
  return b;
}

/// `fn` when registered, otherwise a DeviceError saying which op lacks a kernel and how to get it.
template <class Fn>
Fn require_slot(Fn fn, const char* op) {
  if (!fn) {
    throw DeviceError(std::string(op) +
                      ": no CUDA kernel registered; compile one translation unit with nvcc that "
                      "includes accel/ops/cuda/ops.cuh");
  }
  return fn;
}

/// Number of visible GPUs (0 without a CUDA runtime).
inline int cuda_device_count() {
  const DeviceBackend& b = cuda_backend();
  return b.device_count ? b.device_count() : 0;
}

/// True when a CUDA runtime is compiled in and sees at least one GPU.
inline bool cuda_is_available() { return cuda_device_count() > 0; }

}  // namespace accel
