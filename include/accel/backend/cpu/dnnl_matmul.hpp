// oneDNN matmul for the CPU ops: one engine, a stream per thread, and a primitive cache keyed by
// the full problem (dims, strides, dtypes, bias), so a transformer's repeated shapes pay
// oneDNN's primitive creation once.
//
//   dnnl_engine()                                   the process-wide CPU engine (under ACCEL_CPU_ARCH's cap)
//   dnnl_matmul(MatmulProblem, a, b, c, bias)       c[batch] = a[batch] x b[batch] (+ bias)
//   dnnl_has_matmul(a_type, b_type, c_type)         whether oneDNN implements those dtypes on this CPU
//   dnnl_u8s8_is_exact()                            whether its u8 x s8 products accumulate without saturating
//   dnnl_matmul_cache_size()                        inspection for tests
//
// oneDNN 2.x implements bf16 matmul only from AVX-512 on, and its u8 x s8 kernels without VNNI add
// pairs of products in saturating 16-bit arithmetic (VPMADDUBSW): the ops layer asks the two
// questions above at run time and takes its own kernels where the answer is no.
//
// Operands are strided views (any strides oneDNN accepts: one of the two matrix strides should
// be 1 for speed); the output is dense row-major. A batch stride of 0 broadcasts an operand.
// Execution uses a user-managed scratchpad per thread, so concurrent calls are safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <iterator>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "accel/core/errors.hpp"
#include "accel/core/simd_arch.hpp"

namespace accel::backend::cpu {

namespace detail {
/// Caps oneDNN at ACCEL_CPU_ARCH's tier when ONEDNN_MAX_CPU_ISA does not say otherwise, so that
/// one variable caps both. oneDNN takes a cap only before its first dispatch: in a program that
/// ran oneDNN before this engine existed, the cap stays what it was.
inline void cap_dnnl_isa() {
  const char* cap = std::getenv("ACCEL_CPU_ARCH");
  if (!cap || !*cap || std::getenv("ONEDNN_MAX_CPU_ISA") || std::getenv("DNNL_MAX_CPU_ISA")) return;
  (void)simd::detail::cpu();  // a cap that names no tier is a ValueError here
  // oneDNN's ISA of each of simd::tier_names, in its order (sse41 is oneDNN's lowest; an ARM
  // tier admits scalar only on x86).
  constexpr dnnl::cpu_isa isa_of_tier[] = {dnnl::cpu_isa::sse41, dnnl::cpu_isa::avx2, dnnl::cpu_isa::avx512_core,
                                           dnnl::cpu_isa::avx512_core_vnni, dnnl::cpu_isa::avx512_core_bf16,
                                           dnnl::cpu_isa::sse41, dnnl::cpu_isa::sse41};
  static_assert(std::size(isa_of_tier) == std::size(simd::tier_names));
  try {
    dnnl::set_max_cpu_isa(isa_of_tier[simd::tier_rank(cap)]);
  } catch (const dnnl::error&) {
  }
}
}  // namespace detail

/// The CPU engine every oneDNN primitive of the library runs on.
inline dnnl::engine& dnnl_engine() {
  static dnnl::engine engine = [] {
    detail::cap_dnnl_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

/// This thread's stream on `dnnl_engine()` (oneDNN streams are not shared across threads).
inline dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

/// One strided operand: element strides for batch, row and column.
struct MatrixLayout {
  std::int64_t batch_stride = 0;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 1;
};

/// A matmul problem: c[batch, M, N] = a[batch, M, K] x b[batch, K, N] (+ bias[N]).
struct MatmulProblem {
  std::int64_t batch = 1;
  std::int64_t m = 0, k = 0, n = 0;
  MatrixLayout a, b;
  dnnl::memory::data_type a_type = dnnl::memory::data_type::f32;
  dnnl::memory::data_type b_type = dnnl::memory::data_type::f32;
  dnnl::memory::data_type c_type = dnnl::memory::data_type::f32;
  bool has_bias = false;  ///< bias is f32 [N]
};

namespace detail {

using MatmulKey = std::array<std::int64_t, 14>;

inline MatmulKey matmul_key(const MatmulProblem& p) {
  return {p.batch,          p.m,
          p.k,              p.n,
          p.a.batch_stride, p.a.row_stride,
          p.a.col_stride,   p.b.batch_stride,
          p.b.row_stride,   p.b.col_stride,
          static_cast<std::int64_t>(p.a_type), static_cast<std::int64_t>(p.b_type),
          static_cast<std::int64_t>(p.c_type), p.has_bias ? 1 : 0};
}

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a_md, b_md, c_md, bias_md;
  std::size_t scratchpad_bytes = 0;
};

class MatmulCache {
 public:
  /// Bounded so that a model fed every sequence length does not grow without limit.
  static constexpr std::size_t capacity = 4096;

  std::shared_ptr<const CachedMatmul> get(const MatmulProblem& p) {
    const MatmulKey key = matmul_key(p);
    {
      std::lock_guard lock(mu_);
      if (auto it = map_.find(key); it != map_.end()) return it->second;
    }
    auto made = std::make_shared<const CachedMatmul>(create(p));
    std::lock_guard lock(mu_);
    if (map_.size() >= capacity) map_.clear();
    return map_.emplace(key, std::move(made)).first->second;
  }
  std::size_t size() {
    std::lock_guard lock(mu_);
    return map_.size();
  }
  void clear() {
    std::lock_guard lock(mu_);
    map_.clear();
  }

 private:
  static CachedMatmul create(const MatmulProblem& p) {
    using dims = dnnl::memory::dims;
    using md = dnnl::memory::desc;
    const bool batched = p.batch > 1;
    // A batch stride of 0 is oneDNN's broadcast: that operand gets batch extent 1.
    auto operand = [&](std::int64_t rows, std::int64_t cols, const MatrixLayout& l,
                       dnnl::memory::data_type t) {
      if (!batched) return md(dims{rows, cols}, t, dims{l.row_stride, l.col_stride});
      const std::int64_t b = l.batch_stride == 0 ? 1 : p.batch;
      const std::int64_t bs = l.batch_stride == 0 ? rows * cols : l.batch_stride;
      return md(dims{b, rows, cols}, t, dims{bs, l.row_stride, l.col_stride});
    };
    CachedMatmul c;
    c.a_md = operand(p.m, p.k, p.a, p.a_type);
    c.b_md = operand(p.k, p.n, p.b, p.b_type);
    c.c_md = batched ? md(dims{p.batch, p.m, p.n}, p.c_type, dims{p.m * p.n, p.n, 1})
                     : md(dims{p.m, p.n}, p.c_type, dims{p.n, 1});
    if (p.has_bias) {
      c.bias_md = batched ? md(dims{1, 1, p.n}, dnnl::memory::data_type::f32, dims{p.n, p.n, 1})
                          : md(dims{1, p.n}, dnnl::memory::data_type::f32, dims{p.n, 1});
    }
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      auto desc = p.has_bias ? dnnl::matmul::desc(c.a_md, c.b_md, c.bias_md, c.c_md)
                             : dnnl::matmul::desc(c.a_md, c.b_md, c.c_md);
      dnnl::matmul::primitive_desc pd(desc, attr, dnnl_engine());
      c.scratchpad_bytes = pd.scratchpad_desc().get_size();
      c.primitive = dnnl::matmul(pd);
    } catch (const dnnl::error& e) {
      throw DTypeError("matmul: oneDNN has no implementation for [" + std::to_string(p.batch) +
                       ", " + std::to_string(p.m) + ", " + std::to_string(p.k) + "] x [" +
                       std::to_string(p.k) + ", " + std::to_string(p.n) +
                       "] with these dtypes/strides (" + e.what() + ")");
    }
    return c;
  }

  std::mutex mu_;
  std::map<MatmulKey, std::shared_ptr<const CachedMatmul>> map_;
};

inline MatmulCache& matmul_cache() {
  (void)dnnl_engine();  // constructed first, so it is destroyed after the cached primitives
  static MatmulCache cache;
  return cache;
}

/// Grow-only per-thread scratch buffer for oneDNN's scratchpad.
inline void* scratch_buffer(std::size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    std::size_t n = 0;
    ~Buffer() { ::operator delete(p, std::align_val_t(64)); }
  };
  thread_local Buffer buf;
  if (bytes > buf.n) {
    ::operator delete(buf.p, std::align_val_t(64));
    buf.p = nullptr;
    buf.n = 0;
    buf.p = ::operator new(bytes, std::align_val_t(64));
    buf.n = bytes;
  }
  return buf.p;
}

}  // namespace detail

/// Runs `p` on raw pointers: a and b laid out as p describes, c dense row-major, bias f32 [N]
/// (or nullptr). Synchronous: the result is in c on return.
inline void dnnl_matmul(const MatmulProblem& p, const void* a, const void* b, void* c,
                        const float* bias = nullptr) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  auto prim = detail::matmul_cache().get(p);
  auto& eng = dnnl_engine();
  // oneDNN takes non-const handles; it only reads sources.
  dnnl::memory am(prim->a_md, eng, const_cast<void*>(a));
  dnnl::memory bm(prim->b_md, eng, const_cast<void*>(b));
  dnnl::memory cm(prim->c_md, eng, c);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (p.has_bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(prim->bias_md, eng, const_cast<float*>(bias)));
  if (prim->scratchpad_bytes > 0) {
    dnnl::memory::desc sd(dnnl::memory::dims{static_cast<std::int64_t>(prim->scratchpad_bytes)},
                          dnnl::memory::data_type::u8, dnnl::memory::dims{1});
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(sd, eng, detail::scratch_buffer(prim->scratchpad_bytes)));
  }
  auto& s = dnnl_stream();
  try {
    prim->primitive.execute(s, args);
    s.wait();
  } catch (const dnnl::error& e) {
    const std::string what = "matmul: oneDNN execution failed for [" + std::to_string(p.batch) + ", " +
                             std::to_string(p.m) + ", " + std::to_string(p.k) + "] x [" + std::to_string(p.k) +
                             ", " + std::to_string(p.n) + "]: " + e.what();
    if (e.status == dnnl_out_of_memory) throw OutOfMemoryError("cpu", prim->scratchpad_bytes, what);
    throw Error(what);
  }
}

/// Whether oneDNN has a matmul for these operand and result dtypes on this CPU (under its ISA
/// cap): asked once per triple by building a 2 x 2 primitive.
inline bool dnnl_has_matmul(dnnl::memory::data_type a, dnnl::memory::data_type b, dnnl::memory::data_type c) {
  static std::mutex mu;
  static std::map<std::array<int, 3>, bool> known;
  const std::array<int, 3> key{static_cast<int>(a), static_cast<int>(b), static_cast<int>(c)};
  std::lock_guard lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  bool ok = true;
  try {
    using md = dnnl::memory::desc;
    const dnnl::memory::dims dims{2, 2}, strides{2, 1};
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md(dims, a, strides), md(dims, b, strides), md(dims, c, strides)),
                                    dnnl_engine());
  } catch (const dnnl::error&) {
    ok = false;
  }
  return known.emplace(key, ok).first->second;
}

/// Whether oneDNN's u8 x s8 -> s32 matmul is exact here: with VNNI (VPDPBUSD) it accumulates four
/// products into 32 bits; below it, VPMADDUBSW saturates the sum of two products at 16 bits.
inline bool dnnl_u8s8_is_exact() {
  (void)dnnl_engine();  // the cap first
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto has = [isa](dnnl::cpu_isa i) { return (isa & static_cast<unsigned>(i)) == static_cast<unsigned>(i); };
  return has(dnnl::cpu_isa::avx512_core_vnni) || has(dnnl::cpu_isa::avx2_vnni);
}

/// Number of matmul primitives currently cached.
inline std::size_t dnnl_matmul_cache_size() { return detail::matmul_cache().size(); }

}  // namespace accel::backend::cpu
