// Random generators, seeding and the random tensor factories.
//
//   Generator                     Philox4x32-10 counter generator: seed + offset, state as 16 bytes
//   default_generator()           the CPU generator the factories use by default
//   cuda_generator(i)             seed/offset bookkeeping per GPU (ACCEL_WITH_CUDA; no kernels here)
//   set_seed(seed, device_specific = false, deterministic = false)
//   rand / randn / randint        CPU tensors; the same seed gives the same values on any thread count
//   synchronize_rng_state(type, gen) / synchronize_rng_states(types)
//
// Element i of a draw uses Philox counter (offset + i), so values never depend on how the work is
// split over threads, and a draw advances the generator's offset by its element count.
//
// Differences from Accelerate:
// - The generators are Philox4x32-10, so a seed gives other values than torch's CPU generator
//   (a Mersenne Twister) and CUDA generator, and get_state() is 16 bytes (seed, offset), not
//   torch's state tensor: states do not move between the two. What a seed buys here is values
//   that do not change with the thread count.
// - set_seed seeds the library's generators (the CPU one and every GPU's) and std::srand; there is
//   no Python random, numpy or XLA to seed. device_specific adds the process index read from the
//   environment (RANK, else PMI_RANK, OMPI_COMM_WORLD_RANK, MV2_COMM_WORLD_RANK) where Accelerate
//   asks AcceleratorState; under torchrun, accelerate launch and mpirun the two agree.
// - set_seed(seed) with deterministic = false turns deterministic algorithms off again: the flag
//   is the library's own and set_seed is its only switch. Accelerate only ever switches torch's on.
// - synchronize_rng_state in one process checks its arguments and changes nothing, as Accelerate
//   does; across processes, utils/random_sync.hpp's overloads taking a dist::PartialState broadcast
//   the main process's get_state(). The type
//   is required (Accelerate's None does nothing), and types with no C++ backend (mlu, sdaa, musa,
//   npu, xla, xpu, hpu, neuron) are a ValueError (Accelerate: an AssertionError unless that device
//   is present). RNGType::cuda without a GPU does nothing (torch raises without CUDA).
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "accel/core/convert.hpp"
#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/utils/enums.hpp"
#include "accel/utils/environment.hpp"

namespace accel::utils {

namespace detail {

/// One Philox4x32-10 block: 4 random 32-bit words for (key, counter).
inline std::array<std::uint32_t, 4> philox4x32_10(std::uint64_t key, std::uint64_t counter_lo,
                                                  std::uint64_t counter_hi = 0) noexcept {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u, w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo), c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi), c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(m0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(m1) * c2;
    const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const std::uint32_t n1 = static_cast<std::uint32_t>(p1);
    const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const std::uint32_t n3 = static_cast<std::uint32_t>(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += w0;
    k1 += w1;
  }
  return {c0, c1, c2, c3};
}

inline constexpr std::uint64_t default_seed = 67280421310721ull;  // torch's default CPU seed

}  // namespace detail

/// A Philox4x32-10 generator: a 64-bit seed (the key) and a 64-bit offset (blocks consumed).
/// Thread-safe: draws reserve their counter range under a lock.
class Generator {
 public:
  static constexpr std::size_t state_size = 16;  ///< bytes of get_state(): seed then offset, little-endian

  explicit Generator(std::uint64_t seed = detail::default_seed, Device device = Device::cpu())
      : device_(device), seed_(seed) {}
  Generator(const Generator& o) : device_(o.device_) {
    std::lock_guard lock(o.mu_);
    seed_ = o.seed_;
    offset_ = o.offset_;
  }
  Generator& operator=(const Generator& o) {
    if (this != &o) {
      set_state(o.get_state());
      device_ = o.device_;
    }
    return *this;
  }

  /// Reseeds and rewinds to offset 0; returns *this.
  Generator& manual_seed(std::uint64_t seed) {
    std::lock_guard lock(mu_);
    seed_ = seed;
    offset_ = 0;
    return *this;
  }
  std::uint64_t initial_seed() const {
    std::lock_guard lock(mu_);
    return seed_;
  }
  std::uint64_t offset() const {
    std::lock_guard lock(mu_);
    return offset_;
  }
  /// The device whose draws this generator drives (cpu, or cuda:N for the CUDA state holders).
  Device device() const noexcept { return device_; }

  /// Seed and offset as 16 bytes.
  std::vector<std::uint8_t> get_state() const {
    std::lock_guard lock(mu_);
    std::vector<std::uint8_t> s(state_size);
    for (int i = 0; i < 8; ++i) {
      s[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(seed_ >> (8 * i));
      s[static_cast<std::size_t>(8 + i)] = static_cast<std::uint8_t>(offset_ >> (8 * i));
    }
    return s;
  }
  /// Restores get_state()'s bytes; ValueError for any other size.
  void set_state(const std::vector<std::uint8_t>& s) {
    if (s.size() != state_size) {
      throw ValueError("Generator::set_state: expected " + std::to_string(state_size) + " bytes of state, got " +
                       std::to_string(s.size()));
    }
    std::uint64_t seed = 0, off = 0;
    for (int i = 0; i < 8; ++i) {
      seed |= std::uint64_t{s[static_cast<std::size_t>(i)]} << (8 * i);
      off |= std::uint64_t{s[static_cast<std::size_t>(8 + i)]} << (8 * i);
    }
    std::lock_guard lock(mu_);
    seed_ = seed;
    offset_ = off;
  }

  /// Reserves `n` counters; returns the first. Draw i of the reservation is philox(seed, first + i).
  std::uint64_t reserve(std::uint64_t n) {
    std::lock_guard lock(mu_);
    const std::uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  /// The 4 words of counter `c` (pure: no state change).
  std::array<std::uint32_t, 4> block(std::uint64_t c) const { return detail::philox4x32_10(initial_seed(), c); }

 private:
  Device device_;
  mutable std::mutex mu_;
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

/// The process-wide CPU generator the tensor factories use by default.
inline Generator& default_generator() {
  static Generator g;
  return g;
}

#if defined(ACCEL_WITH_CUDA)
/// Seed/offset bookkeeping of GPU `index` (kernels that draw on the GPU read and advance it).
inline Generator& cuda_generator(int index = 0) {
  static const std::vector<std::unique_ptr<Generator>> gens = [] {
    std::vector<std::unique_ptr<Generator>> v;
    for (int i = 0; i < 64; ++i) v.push_back(std::make_unique<Generator>(detail::default_seed, Device::cuda(i)));
    return v;
  }();
  if (index < 0 || index >= 64) throw DeviceError("cuda_generator: invalid GPU index " + std::to_string(index));
  return *gens[static_cast<std::size_t>(index)];
}
#endif

namespace detail {
inline std::atomic<bool>& deterministic_flag() noexcept {
  static std::atomic<bool> on{false};
  return on;
}
/// This process's index, from the variables launchers set (torchrun's RANK, then MPI's), else 0.
inline std::uint64_t process_index_from_env() {
  return static_cast<std::uint64_t>(get_cpu_distributed_information().rank);
}
}  // namespace detail

/// Whether set_seed(..., deterministic = true) asked for deterministic algorithms (kernels that
/// have a faster non-deterministic variant read this).
inline bool are_deterministic_algorithms_enabled() noexcept { return detail::deterministic_flag(); }

/// Seeds every generator of the library (CPU, and each GPU's with CUDA) and std::srand.
/// device_specific adds the process index (RANK or MPI's rank variables, else 0), so processes
/// draw differently. ValueError when a rank variable is not an integer.
inline void set_seed(std::uint64_t seed, bool device_specific = false, bool deterministic = false) {
  if (device_specific) seed += detail::process_index_from_env();
  default_generator().manual_seed(seed);
#if defined(ACCEL_WITH_CUDA)
  for (int i = 0; i < 64; ++i) cuda_generator(i).manual_seed(seed);
#endif
  std::srand(static_cast<unsigned>(seed));
  detail::deterministic_flag() = deterministic;
}

// ---- factories -----------------------------------------------------------------------------------

namespace detail {

inline double u53(std::uint32_t hi, std::uint32_t lo) noexcept {
  return static_cast<double>(((std::uint64_t{hi} << 32) | lo) >> 11) * 0x1.0p-53;
}

/// Mantissa bits of a floating dtype (values drawn are multiples of 2^-bits, exact in the dtype).
inline int uniform_bits(DType d) {
  switch (d) {
    case DType::f64: return 53;
    case DType::f32: return 24;
    case DType::f16: return 11;
    case DType::bf16: return 8;
    case DType::f8_e4m3fn: return 4;
    case DType::f8_e5m2: return 3;
    default:
      throw DTypeError("rand/randn: expected a floating dtype, got " + std::string(dtype_name(d)));
  }
}

template <class Draw>
Tensor fill_random(const Shape& shape, DType dtype, Generator& gen, Draw draw) {
  Tensor t = Tensor::empty(shape, dtype);
  const auto n = static_cast<std::uint64_t>(t.numel());
  const std::uint64_t first = gen.reserve(n);
  const std::uint64_t key = gen.initial_seed();
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.data_ptr());
    parallel_for(static_cast<std::size_t>(n), std::size_t{1} << 14, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) p[i] = convert_value<T>(draw(philox4x32_10(key, first + i)));
    });
  });
  return t;
}

}  // namespace detail

/// Uniform values in [0, 1) (exact multiples of the dtype's resolution, never 1).
inline Tensor rand(const Shape& shape, DType dtype = DType::f32, Generator* generator = nullptr) {
  const int bits = detail::uniform_bits(dtype);
  const double scale = std::ldexp(1.0, -bits);
  return detail::fill_random(shape, dtype, generator ? *generator : default_generator(),
                             [bits, scale](const std::array<std::uint32_t, 4>& b) {
                               const std::uint64_t u = (std::uint64_t{b[0]} << 32) | b[1];
                               return static_cast<double>(u >> (64 - bits)) * scale;
                             });
}

/// Standard normal values (Box-Muller on two 53-bit uniforms per element).
inline Tensor randn(const Shape& shape, DType dtype = DType::f32, Generator* generator = nullptr) {
  (void)detail::uniform_bits(dtype);
  return detail::fill_random(shape, dtype, generator ? *generator : default_generator(),
                             [](const std::array<std::uint32_t, 4>& b) {
                               const double u1 = 1.0 - detail::u53(b[0], b[1]);  // (0, 1]
                               const double u2 = detail::u53(b[2], b[3]);
                               return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
                             });
}

/// Integers uniform in [low, high); any dtype that holds them (i64 by default).
inline Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype = DType::i64,
                      Generator* generator = nullptr) {
  if (high <= low) {
    throw ValueError("randint: expected low < high, got [" + std::to_string(low) + ", " + std::to_string(high) + ")");
  }
  if (dtype == DType::boolean && (low < 0 || high > 2)) throw ValueError("randint: bool tensors need [0, 2)");
  const std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  return detail::fill_random(shape, dtype, generator ? *generator : default_generator(),
                             [low, range](const std::array<std::uint32_t, 4>& b) {
                               const std::uint64_t u = (std::uint64_t{b[0]} << 32) | b[1];
                               return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + u % range);
                             });
}

// ---- synchronization -----------------------------------------------------------------------------

/// Makes every process's generator of `rng_type` equal to the main process's. With one process
/// this is a no-op that only checks its arguments; utils/random_sync.hpp's overload taking a
/// dist::PartialState broadcasts get_state(). `generator` is required for RNGType::generator. Types with no C++
/// meaning (mlu, npu, xla, ...) are a ValueError.
inline void synchronize_rng_state(RNGType rng_type, Generator* generator = nullptr) {
  switch (rng_type) {
    case RNGType::torch: (void)default_generator().get_state(); return;
    case RNGType::cuda:
#if defined(ACCEL_WITH_CUDA)
      (void)cuda_generator(0).get_state();
#endif
      return;
    case RNGType::generator:
      if (!generator) throw ValueError("synchronize_rng_state: RNGType::generator needs a generator");
      (void)generator->get_state();
      return;
    default:
      throw ValueError("synchronize_rng_state: RNGType '" + std::string(to_string(rng_type)) +
                       "' has no C++ meaning; use torch, cuda or generator");
  }
}

/// synchronize_rng_state for each type (single process: no-op; see above).
inline void synchronize_rng_states(std::initializer_list<RNGType> types, Generator* generator = nullptr) {
  for (RNGType t : types) synchronize_rng_state(t, generator);
}

/// The same with the types by name ("torch", "cuda", "generator"), as Accelerate accepts strings;
/// ValueError for a name that is not an RNGType.
inline void synchronize_rng_states(const std::vector<std::string>& types, Generator* generator = nullptr) {
  for (const std::string& t : types) synchronize_rng_state(enum_from_string<RNGType>(t), generator);
}

}  // namespace accel::utils

namespace accel {
using utils::default_generator, utils::Generator, utils::rand, utils::randint, utils::randn, utils::set_seed,
    utils::synchronize_rng_state, utils::synchronize_rng_states;
}  // namespace accel
