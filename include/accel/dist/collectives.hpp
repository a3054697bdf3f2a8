// Accelerate's collectives over nested data (utils/operations.py), each a walk of its argument with
// recursively_apply and one collective per tensor, in walk order:
//
//   gather(state, data)                                 every process's tensors, concatenated along dim 0
//   all_gather_into_tensor(state, out, tensor)          the same for one tensor, into a caller's buffer
//   broadcast(state, data, from_process = 0)            from_process's tensors on every process
//   reduce(state, data, reduction = "mean", scale = 1)  "mean" | "sum" | "none" over the processes, times scale
//   pad_across_processes(state, data, dim = 0, pad_index = 0, pad_first = false)
//                                                       tensors padded along dim to the longest process's
//   gather_object(state, obj) -> vector                 every process's objects (dist/serialize.hpp)
//   broadcast_object_list(state, objects, from_process = 0) -> objects&   replaced by from_process's
//   wait_for_everyone(state)                            a barrier
//
// `state` is a PartialState<D>: under no_dist, and under multi_cpu<mpi> / multi_gpu<nccl> started
// alone, each is an identity (reduce still copies and scales). Otherwise CPU tensors travel over
// MPI and, under multi_gpu<nccl>, CUDA tensors over NCCL on the process's GPU; multi_cpu<mpi> takes
// CPU tensors only (DeviceError), and a meta tensor is a DeviceError everywhere. Every process must
// call the same collectives with the same structures, in the same order; in debug mode
// (PartialState::debug(), ACCELERATE_DEBUG_MODE=1) gather, broadcast and reduce first compare
// shapes and dtypes, pad_across_processes structure, dtypes and ranks, and a mismatch is a
// DistributedOperationException on every process (dist/verify.hpp). A leaf that is not a tensor is a
// ValueError naming its type (Accelerate's error_on_other_type).
//
// Dtypes: gather, broadcast and pad move bytes and take every dtype. reduce sums integers exactly
// (wrapping as torch does), ors bools ("sum" of bool is "any"), and sums f16 / bf16 / fp8 in f32
// over MPI, rounding once at the end (NCCL sums f16 / bf16 natively, and i16 / fp8 in i32 / f32).
// "mean" and a scale other than 1 need a floating dtype (DTypeError), as torch's in-place
// division does.
//
// Differences from Accelerate:
// - reduce applies `scale` on every backend and under no_dist (Accelerate: on XLA only). "none"
//   sums, as Accelerate's does (it skips only the division). An unknown reduction is a ValueError.
//   Over NCCL, mean and scale multiply each input by scale / num_processes before the sum (one
//   call), so the last bit may differ from (sum / n) * scale.
// - broadcast writes into the receivers' tensors when they are contiguous and writable (as
//   torch.distributed.broadcast does) and returns them; a read-only receiver (a memory-mapped
//   checkpoint tensor) gets a fresh tensor in the result instead. Use the result.
// - pad_across_processes exchanges each tensor's rank and extents in one fixed-size all-gather;
//   ranks that differ across processes are a ShapeError on every process, in and out of debug mode.
// - gather of a zero-dimensional tensor gives a 1-d tensor of num_processes values whenever a group
//   is joined (Accelerate: only for several processes).
// - reduce and gather return new tensors, but over MPI their host blocks come from the results of
//   earlier calls that the caller has dropped (dist/result_pool.hpp; not under a CPU budget): a
//   loop pays no first-touch page faults. release_cached_results() frees the idle blocks.
// - all_gather_into_tensor is torch.distributed's (Accelerate has none): into the caller's buffer.
// - gather_object concatenates when each process passes a sequence (Accelerate's flattening) and
//   otherwise returns one object per process (Accelerate fails on non-lists). broadcast_object_list
//   resizes the receivers' sequence to the sender's length (torch requires equal lengths).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/shape.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dist/mpi.hpp"
#include "accel/dist/nccl.hpp"
#include "accel/dist/partial_state.hpp"
#include "accel/dist/result_pool.hpp"
#include "accel/dist/serialize.hpp"
#include "accel/dist/verify.hpp"
#include "accel/nested/recursively_apply.hpp"
#include "accel/nested/traits.hpp"

namespace accel::dist {

namespace detail {

/// Where one tensor's collective runs.
enum class Route : std::uint8_t { local, mpi, nccl };

template <class D>
Route route(const PartialState<D>& state, const Tensor& t, const char* op) {
  if (!t.defined()) throw ValueError(std::string(op) + ": an undefined tensor has nothing to send");
  if (t.is_meta()) {
    throw DeviceError(std::string(op) + ": a meta tensor of shape " + t.shape().str() +
                      " has no data; load it or send_to_device it first");
  }
  if constexpr (D::id == DistributedType::no) {
    return Route::local;
  } else if constexpr (D::id == DistributedType::multi_cpu) {
    if (!t.is_cpu()) {
      throw DeviceError(std::string(op) + ": multi_cpu<mpi> communicates CPU tensors, got one on " +
                        t.device().str() + "; move it with send_to_device or build with multi_gpu<nccl>");
    }
    return state.communicates() ? Route::mpi : Route::local;
  } else {
    if (t.is_cuda()) {
      if (state.device() != t.device()) {
        throw DeviceError(std::string(op) + ": this process communicates on " + state.device().str() +
                          ", got a tensor on " + t.device().str());
      }
      return state.communicates() ? Route::nccl : Route::local;
    }
    if (!t.is_cpu()) throw DeviceError(std::string(op) + ": cannot communicate a tensor on " + t.device().str());
    return state.communicates() ? Route::mpi : Route::local;
  }
}

#if defined(ACCEL_WITH_MPI)
template <class D>
MpiGroup& mpi(const PartialState<D>& state) {
  return *state.mpi_group();
}
#endif

[[noreturn]] inline void no_nccl(const char* op) {
  throw DistributedError(std::string(op) +
                         ": a CUDA tensor under multi_gpu<nccl>, but accel was built without NCCL (ACCEL_WITH_NCCL)");
}

#if defined(ACCEL_WITH_NCCL) && defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_MPI)
template <class D>
NcclGroup& nccl(const PartialState<D>& state) {
  return NcclGroup::join(state.mpi_group(), state.device().index());
}
#endif

/// Moves a tensor's bytes between processes with MPI or NCCL.
template <class D>
void all_gather_raw(const PartialState<D>& state, Route r, const Tensor& in, Tensor& out, const char* op) {
  if (r == Route::mpi) {
#if defined(ACCEL_WITH_MPI)
    mpi(state).all_gather(in.data_ptr(), in.nbytes(), out.data_ptr(), op);
#endif
  } else {
#if defined(ACCEL_WITH_NCCL) && defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_MPI)
    nccl(state).all_gather(in.data_ptr(), in.nbytes(), out.data_ptr(), op);
#else
    no_nccl(op);
#endif
  }
}

template <class D>
void broadcast_raw(const PartialState<D>& state, Route r, const Tensor& buf, int from, const char* op) {
  if (r == Route::mpi) {
#if defined(ACCEL_WITH_MPI)
    mpi(state).broadcast(buf.data_ptr(), buf.nbytes(), from, op);
#endif
  } else {
#if defined(ACCEL_WITH_NCCL) && defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_MPI)
    nccl(state).broadcast(buf.data_ptr(), buf.nbytes(), from, op);
#else
    no_nccl(op);
#endif
  }
}

/// dst := src divided by `divisor` (when above 1), then multiplied by `scale` (when not 1), in one
/// pass: contiguous CPU tensors of f32 or f64 with src's element count; src may be dst.
inline void divide_and_scale(const Tensor& src, Tensor& dst, int divisor, double scale) {
  if (divisor <= 1 && scale == 1.0) {
    if (src.data_ptr() != dst.data_ptr()) std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
    return;
  }
  auto run = [&](const auto* in, auto* out) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(out)>>;
    const std::int64_t n = src.numel();
    const T d = static_cast<T>(divisor);
    const T s = static_cast<T>(scale);
    for (std::int64_t i = 0; i < n; ++i) {
      T v = in[i];
      if (divisor > 1) v /= d;
      if (scale != 1.0) v *= s;
      out[i] = v;
    }
  };
  if (src.dtype() == DType::f64) {
    run(src.data_ptr<double>(), dst.data_ptr<double>());
  } else {
    run(src.data_ptr<float>(), dst.data_ptr<float>());
  }
}
inline void divide_and_scale(Tensor& t, int divisor, double scale) { divide_and_scale(t, t, divisor, scale); }

/// The dtype a CPU reduction runs in: f32 for the floats MPI has no type for.
inline DType mpi_working_dtype(DType d) {
  switch (d) {
    case DType::f16:
    case DType::bf16:
    case DType::f8_e4m3fn:
    case DType::f8_e5m2: return DType::f32;
    default: return d;
  }
}

/// The dtype a NCCL reduction runs in.
inline DType nccl_working_dtype(DType d) {
  switch (d) {
    case DType::f8_e4m3fn:
    case DType::f8_e5m2: return DType::f32;
    case DType::i16: return DType::i32;
    default: return d;
  }
}

enum class Reduction : std::uint8_t { mean, sum, none };

inline Reduction parse_reduction(std::string_view r) {
  if (r == "mean") return Reduction::mean;
  if (r == "sum") return Reduction::sum;
  if (r == "none") return Reduction::none;
  throw ValueError("reduce: reduction must be \"mean\", \"sum\" or \"none\", got \"" + std::string(r) + "\"");
}

template <class D>
Tensor reduce_one(const PartialState<D>& state, const Tensor& t, Reduction how, double scale) {
  constexpr const char* op = "reduce";
  const Route r = route(state, t, op);
  const bool floating = is_floating_point(t.dtype());
  if (!floating && (how == Reduction::mean || scale != 1.0)) {
    throw DTypeError(std::string("reduce: ") + (how == Reduction::mean ? "\"mean\"" : "a scale other than 1") +
                     " needs a floating tensor, got " + std::string(dtype_name(t.dtype())) +
                     "; use \"sum\" with scale 1, or convert it to float32");
  }
  const int divisor = how == Reduction::mean ? state.num_processes() : 1;
  if (r == Route::nccl) {
#if defined(ACCEL_WITH_NCCL) && defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_MPI)
    const DType work = nccl_working_dtype(t.dtype());
    Tensor buf = work == t.dtype() ? t.clone() : t.to(work).contiguous();
    nccl(state).all_reduce(buf.data_ptr(), static_cast<std::size_t>(buf.numel()), work, scale / divisor, op);
    return work == t.dtype() ? buf : buf.to(t.dtype());
#else
    no_nccl(op);
#endif
  }
  const Tensor host = t.is_cpu() ? t : t.to(Device::cpu());
  const DType work = mpi_working_dtype(t.dtype());
  Tensor buf;
  if (r == Route::mpi) {
#if defined(ACCEL_WITH_MPI)
    // Out of place into a recycled block (dist/result_pool.hpp), from the input where it lies when
    // it can be (a copy first would cost a pass over it): Open MPI's in-place non-blocking
    // all-reduce ran at half the rate of its out-of-place one from 1 MiB up, and fresh result
    // blocks paid a page fault per page.
    const Tensor src = work == t.dtype() && host.is_contiguous() ? host : host.to(work).contiguous();
    buf = result_pool().empty(host.shape(), work);
    mpi(state).all_reduce(src.data_ptr(), buf.data_ptr(), static_cast<std::size_t>(buf.numel()), work,
                          work == DType::boolean ? MpiReduce::logical_or : MpiReduce::sum, op);
#endif
  } else {
    buf = work == t.dtype() ? host.clone() : host.to(work).contiguous();
  }
  if (floating) divide_and_scale(buf, divisor, scale);
  if (work != t.dtype()) buf = buf.to(t.dtype());
  return t.is_cpu() ? buf : buf.to(t.device());
}

template <class D>
Tensor gather_one(const PartialState<D>& state, const Tensor& t) {
  constexpr const char* op = "gather";
  const Route r = route(state, t, op);
  if (r == Route::local) return t;
  const Tensor in = (t.dim() == 0 ? t.reshape(Shape{1}) : t).contiguous();
  Shape shape = in.shape();
  shape[0] *= state.num_processes();
  Tensor out = r == Route::mpi ? result_pool().empty(shape, in.dtype()) : Tensor::empty(shape, in.dtype(), in.device());
  all_gather_raw(state, r, in, out, op);
  return out;
}

template <class D>
Tensor broadcast_one(const PartialState<D>& state, const Tensor& t, int from) {
  constexpr const char* op = "broadcast";
  const Route r = route(state, t, op);
  if (r == Route::local) return t;
  const bool writable = t.storage() && t.storage().writable();
  if (writable && t.is_contiguous()) {
    broadcast_raw(state, r, t, from, op);
    return t;
  }
  Tensor buf = t.clone();
  broadcast_raw(state, r, buf, from, op);
  if (!writable) return buf;
  Tensor view = t;
  view.copy_(buf);
  return t;
}

template <class D>
Tensor pad_one(const PartialState<D>& state, const Tensor& t, std::int64_t dim, double pad_index, bool pad_first) {
  constexpr const char* op = "pad_across_processes";
  const Route r = route(state, t, op);
  const auto ndim = static_cast<std::int64_t>(t.dim());
  if (dim >= ndim || dim < -ndim) return t;
  if (dim < 0) dim += ndim;
  if (r == Route::local) return t;
  std::int64_t max_size = t.shape()[static_cast<std::size_t>(dim)];
#if defined(ACCEL_WITH_MPI)
  // One fixed-size record per process (rank, then extents), so that even ranks that differ
  // cannot make the exchange itself mismatch.
  constexpr std::size_t record = max_dims + 1;
  std::vector<std::int64_t> mine(record, 0), all(record * static_cast<std::size_t>(state.num_processes()));
  mine[0] = ndim;
  for (std::size_t i = 0; i < t.dim(); ++i) mine[i + 1] = t.shape()[i];
  mpi(state).all_gather(mine.data(), record * sizeof(std::int64_t), all.data(), op);
  std::string listing;
  bool same_rank = true;
  for (int p = 0; p < state.num_processes(); ++p) {
    const std::int64_t* rec = all.data() + static_cast<std::size_t>(p) * record;
    same_rank = same_rank && rec[0] == ndim;
    listing += "\n  - Process " + std::to_string(p) + ": [";
    for (std::int64_t i = 0; i < rec[0] && i < static_cast<std::int64_t>(max_dims); ++i) {
      listing += (i ? ", " : "") + std::to_string(rec[i + 1]);
    }
    listing += "]";
    if (rec[0] == ndim) max_size = std::max(max_size, rec[dim + 1]);
  }
  if (!same_rank) {
    throw ShapeError("pad_across_processes: the processes' tensors have different numbers of dimensions at the "
                     "same position:" + listing);
  }
#endif
  const std::int64_t old = t.shape()[static_cast<std::size_t>(dim)];
  if (max_size == old) return t;
  Shape shape = t.shape();
  shape[static_cast<std::size_t>(dim)] = max_size;
  Tensor out = Tensor::full(shape, pad_index, t.dtype(), t.device());
  out.narrow(dim, pad_first ? max_size - old : 0, old).copy_(t);
  return out;
}

template <class D>
void check_process(const PartialState<D>& state, int from, const char* op) {
  if (from < 0 || from >= state.num_processes()) {
    throw ValueError(std::string(op) + ": from_process " + std::to_string(from) + " is not a process of 0.." +
                     std::to_string(state.num_processes() - 1));
  }
}

}  // namespace detail

/// Every process's tensors concatenated along dim 0, in process order, in `data`'s structure (a
/// zero-dimensional tensor counts as one row). Processes must pass equal shapes (pad them first
/// with pad_across_processes).
template <class D, class Data>
auto gather(const PartialState<D>& state, const Data& data) {
  verify_operation(state, "accel::dist::gather", data);
  return nested::recursively_apply([&](const Tensor& t) { return detail::gather_one(state, t); }, data,
                                   nested::error_on_other_type);
}

/// torch.distributed.all_gather_into_tensor: every process's `tensor` concatenated along dim 0
/// into `out`, which must be contiguous and writable, of `tensor`'s dtype and device, and of its
/// shape with dim 0 times num_processes (a zero-dimensional tensor counts as one row). Returns
/// `out`. ShapeError / DTypeError / DeviceError / ValueError name what differs.
template <class D>
Tensor& all_gather_into_tensor(const PartialState<D>& state, Tensor& out, const Tensor& tensor) {
  constexpr const char* op = "all_gather_into_tensor";
  verify_operation(state, "accel::dist::all_gather_into_tensor", tensor);
  const detail::Route r = detail::route(state, tensor, op);
  const Tensor in = (tensor.dim() == 0 ? tensor.reshape(Shape{1}) : tensor).contiguous();
  Shape want = in.shape();
  want[0] *= r == detail::Route::local ? 1 : state.num_processes();
  if (!out.defined()) throw ValueError(std::string(op) + ": the output tensor is undefined");
  if (out.dtype() != in.dtype()) {
    throw DTypeError(std::string(op) + ": the output is " + std::string(dtype_name(out.dtype())) + ", the input " +
                     std::string(dtype_name(in.dtype())));
  }
  if (out.device() != in.device()) {
    throw DeviceError(std::string(op) + ": the output is on " + out.device().str() + ", the input on " + in.device().str());
  }
  if (out.shape() != want) {
    throw ShapeError(std::string(op) + ": the output has shape " + out.shape().str() + ", the gather of " +
                     in.shape().str() + " over " + std::to_string(r == detail::Route::local ? 1 : state.num_processes()) +
                     " process(es) needs " + want.str());
  }
  if (!out.is_contiguous() || !out.storage() || !out.storage().writable()) {
    throw ValueError(std::string(op) + ": the output must be a contiguous, writable tensor");
  }
  if (r == detail::Route::local) {
    out.copy_(in.reshape(want));
  } else {
    detail::all_gather_raw(state, r, in, out, op);
  }
  return out;
}

/// `data` as process `from_process` holds it, on every process; receivers must pass tensors of the
/// same shapes and dtypes, which are overwritten in place where they are contiguous and writable.
template <class D, class Data>
auto broadcast(const PartialState<D>& state, const Data& data, int from_process = 0) {
  detail::check_process(state, from_process, "broadcast");
  verify_operation(state, "accel::dist::broadcast", data);
  return nested::recursively_apply([&](const Tensor& t) { return detail::broadcast_one(state, t, from_process); },
                                   data, nested::error_on_other_type);
}

/// New tensors holding the sum over the processes ("sum", and "none" as Accelerate), or the mean
/// ("mean"), multiplied by `scale`. ValueError for another reduction; DTypeError for "mean" or a
/// scale on integer and bool tensors.
template <class D, class Data>
auto reduce(const PartialState<D>& state, const Data& data, std::string_view reduction = "mean", double scale = 1.0) {
  const detail::Reduction how = detail::parse_reduction(reduction);
  verify_operation(state, "accel::dist::reduce", data);
  return nested::recursively_apply([&](const Tensor& t) { return detail::reduce_one(state, t, how, scale); }, data,
                                   nested::error_on_other_type);
}

/// Each tensor padded along `dim` (negative counts from the end) to the largest extent any process
/// has there, with `pad_index`, after the data (or before it with pad_first). Tensors with fewer
/// than dim + 1 dimensions are returned as they are; one that is already the largest is not copied.
template <class D, class Data>
auto pad_across_processes(const PartialState<D>& state, const Data& data, std::int64_t dim = 0, double pad_index = 0,
                          bool pad_first = false) {
  verify_operation(state, "accel::dist::pad_across_processes", data, VerifyLevel::ranks);
  return nested::recursively_apply(
      [&](const Tensor& t) { return detail::pad_one(state, t, dim, pad_index, pad_first); }, data,
      nested::error_on_other_type);
}

/// Every process's objects, in process order, on every process: the elements of each process's
/// sequence one after another, or one object per process for anything else. Objects travel in
/// dist/serialize.hpp's binary form (tensors arrive on the CPU).
template <class D, class T>
auto gather_object(const PartialState<D>& state, const T& obj) {
  if constexpr (nested::SequenceNested<T>) {
    using E = typename T::value_type;
    if (!state.communicates()) return std::vector<E>(obj.begin(), obj.end());
    std::vector<E> out;
#if defined(ACCEL_WITH_MPI)
    for (const auto& bytes : detail::mpi(state).all_gather_bytes(serialize(obj), "gather_object")) {
      auto part = deserialize<T>(bytes);
      out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
#endif
    return out;
  } else {
    if (!state.communicates()) return std::vector<T>{obj};
    std::vector<T> out;
#if defined(ACCEL_WITH_MPI)
    for (const auto& bytes : detail::mpi(state).all_gather_bytes(serialize(obj), "gather_object")) {
      out.push_back(deserialize<T>(bytes));
    }
#endif
    return out;
  }
}

/// Replaces `objects` (a vector of objects, or any serializable value) on every process with
/// process `from_process`'s, and returns it. Objects travel in dist/serialize.hpp's binary form.
template <class D, class T>
T& broadcast_object_list(const PartialState<D>& state, T& objects, int from_process = 0) {
  detail::check_process(state, from_process, "broadcast_object_list");
  if (!state.communicates()) return objects;
#if defined(ACCEL_WITH_MPI)
  std::vector<std::byte> bytes;
  if (state.process_index() == from_process) bytes = serialize(objects);
  detail::mpi(state).broadcast_bytes(bytes, from_process, "broadcast_object_list");
  if (state.process_index() != from_process) objects = deserialize<T>(bytes);
#endif
  return objects;
}

/// Blocks until every process has called it (PartialState::wait_for_everyone).
template <class D>
void wait_for_everyone(const PartialState<D>& state) {
  state.wait_for_everyone();
}

}  // namespace accel::dist
