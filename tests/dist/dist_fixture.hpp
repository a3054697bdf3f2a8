// What the dist tests share: the process's multi_cpu<mpi> state (joined once, with a short timeout
// so that a broken test fails instead of hanging), per-process sample tensors and value readers.
// The same binary runs alone (a world of one) and under mpirun -np 2 and 3; every test computes
// what it expects from num_processes() and process_index(), and every process runs every test,
// so the collectives of all processes meet.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/core/dtype.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dist/dist.hpp"
#include "accel/utils/dataclasses.hpp"

namespace accel_dist_test {

using accel::Device;
using accel::DType;
using accel::Shape;
using accel::Tensor;
using CpuState = accel::dist::PartialState<accel::policy::multi_cpu<>>;

/// The process's multi_cpu<mpi> state; the first call joins MPI when mpirun started the binary.
inline const CpuState& state() {
  static const CpuState s(accel::InitProcessGroupKwargs{.backend = "mpi", .timeout = std::chrono::seconds(120)});
  return s;
}

inline int world() { return state().num_processes(); }

/// Turns debug mode on (or off) for the scope, on every process (each must construct one).
struct DebugScope {
  explicit DebugScope(bool on) : was(state().debug()) { state().set_debug(on); }
  ~DebugScope() { state().set_debug(was); }
  bool was;
};
inline int rank() { return state().process_index(); }

/// Every dtype the tensor layer has.
inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d{DType::f64, DType::f32, DType::f16,  DType::bf16, DType::f8_e4m3fn, DType::f8_e5m2,
                                    DType::i64, DType::i32, DType::i16, DType::i8,   DType::u8,        DType::boolean};
  return d;
}

/// The value process `r` puts at flat index `i` of its samples: small integers every dtype holds.
inline float sample_value(int r, std::int64_t i, DType d) {
  if (d == DType::boolean) return static_cast<float>((r + i) % 2);
  return static_cast<float>(r + i % 4);
}

/// Process `r`'s sample of dtype `d` and `shape`.
inline Tensor sample(DType d, int r, const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = sample_value(r, static_cast<std::int64_t>(i), d);
  return Tensor::from_vector(v, shape).to(d);
}

/// A tensor's values as doubles, row-major.
inline std::vector<double> values(const Tensor& t) {
  return t.to(Device::cpu(), DType::f64).contiguous().to_vector<double>();
}

/// `exact` (f32 values) rounded to `d` once, as values.
inline std::vector<double> rounded(const std::vector<float>& exact, DType d, const Shape& shape) {
  return values(Tensor::from_vector(exact, shape).to(d));
}

}  // namespace accel_dist_test
