// The gradient all-reduce of torch's DistributedDataParallel (its Reducer), over nested gradients,
// and the one-flag agreement a loss scaler needs:
//
//   GradReducer reducer(state, grads, kwargs)   plans buckets for `grads` (any nested structure of
//                                               floating tensors; kwargs: GradReducerOptions or
//                                               utils' DistributedDataParallelKwargs)
//   reducer.all_reduce(grads)                   every gradient := its mean over the processes
//   reducer.all_reduce(grads, accumulator)      the same when accumulator.should_all_reduce(), else
//                                               nothing at all (Accelerate's no_sync); says which
//   reducer.buckets(), reducer.all_reduce_count()   the plan and the collectives issued so far
//   any_process(state, flag) -> bool            true on every process when `flag` is true on any
//
// Buckets. Gradients are taken in reverse walk order (the walk of nested::for_each_leaf: tuples,
// sequences, maps by their own order, aggregates, optionals, variants, nested_traits types) and
// packed per (dtype, device) into flat buffers, one MPI all-reduce per bucket. A bucket closes when
// it holds bucket_cap_mb MiB or more of its gradients' own dtype, so its last gradient may take it
// past the cap, and a gradient larger than the cap ends the bucket it joins; buckets are reduced
// in the order their first gradient was taken. This is torch's assignment (compute_bucket_
// assignment_by_size over the reversed parameters): for the same tensors and cap the buckets hold
// the same gradients, and the first bucket holds the last layers', which a backward fills first.
// Every process must build its reducer from the same structure; debug mode (PartialState::debug())
// compares the processes' structures before planning and before every reduce (dist/verify.hpp).
//
// Values. Each bucket is summed over the processes and divided by num_processes(), rounded once
// (exactly reduce(state, data, "mean")). f32 and f64 are summed in their own type; f16, bf16 and
// the fp8 types are summed in f32 over MPI and rounded back once, so their buckets carry twice
// their bytes on the wire. In a world of one (no_dist, or one process) nothing is communicated and
// nothing is divided.
//
// Views. The buffers live as long as the reducer and are reused. Over MPI one staging block as
// large as the widest CPU bucket (twice that in f32 for f16 / bf16 / fp8) receives each sum, which
// comes back into the bucket divided in the same pass. With gradient_as_bucket_view the
// gradients in `grads` are replaced, at construction, by views into the buffers (holding their
// values): a backward that writes into them fills the buckets, and a reduce neither copies in nor
// out. A gradient the caller has since replaced by another tensor is copied in and then replaced
// by its view again; one held by a nested_traits type (reached read-only) is copied in and back.
// Without gradient_as_bucket_view every gradient is copied into its bucket and back after the
// reduce, in place: the caller's tensors keep their storage and strides.
//
// Devices. CPU gradients travel over MPI. Under multi_gpu<nccl>, CUDA gradients of the process's
// device are bucketed apart from CPU ones and travel over NCCL (NCCL sums f16 / bf16 natively and
// scales by 1 / num_processes() before the sum, as reduce does there). Under multi_cpu<mpi> a
// non-CPU gradient is a DeviceError, as in every collective; a meta gradient is a DeviceError.
//
// Errors name the gradient by its path from the root ("grads['blocks'][1].<field 0>"): a leaf that
// is not a tensor or an undefined tensor is a ValueError, a non-floating tensor a DTypeError, and
// a structure that differs from the planned one (count, shape, dtype, device) is a ValueError,
// ShapeError, DTypeError or DeviceError.
//
// Loss scaling. utils' DynamicLossScaler::unscale_(grads, state) and step(grads, state, f) call
// any_process(state, found_inf) (found by argument-dependent lookup, so utils needs no dist
// header), one MPI all-reduce of a bool, and every process then skips or takes the step together
// and backs off by the same factor.
//
// Differences from torch's DistributedDataParallel (and Accelerate's use of it):
// - No 1 MiB first bucket (torch's _DEFAULT_FIRST_BUCKET_BYTES). torch shrinks the first bucket so
//   that its all-reduce starts while the backward still runs; here the reduce runs after the
//   backward, bucket after bucket, and a small first bucket would only add one collective's latency.
// - The reduce is explicit (all_reduce after the backward), not driven by autograd hooks, so
//   communication does not overlap the backward; find_unused_parameters and static_graph have
//   nothing to act on and are not read; every gradient in the structure is reduced.
// - An undefined gradient is a ValueError (torch reduces zeros for an unused parameter under
//   find_unused_parameters); pass zeros.
// - Averaging divides after the sum (torch's default hook divides each gradient before it), so
//   the result is the sum rounded once and divided once, equal to reduce(state, g, "mean").
// - comm_hook / comm_wrapper (fp16, bf16, PowerSGD compression) are not implemented: a kwargs
//   struct asking for one is a ValueError. dim, broadcast_buffers and check_reduction concern the
//   module wrapper and are not read.
// - bucket_cap_mb may be fractional (torch: float; Accelerate: int).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/pfr.hpp>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/shape.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dist/collectives.hpp"
#include "accel/dist/mpi.hpp"
#include "accel/dist/nccl.hpp"
#include "accel/dist/partial_state.hpp"
#include "accel/dist/verify.hpp"
#include "accel/nested/traits.hpp"

namespace accel::dist {

// ---- options -------------------------------------------------------------------------------------

/// Keyword arguments of GradReducer: the fields of DistributedDataParallelKwargs that a gradient
/// all-reduce reads, with torch's defaults.
struct GradReducerOptions {
  /// Bucket capacity in MiB of the gradients' own dtype (torch's bucket_cap_mb); must be > 0.
  double bucket_cap_mb = 25;
  /// Gradients become views into the bucket buffers, so a reduce copies nothing in or out
  /// (torch's gradient_as_bucket_view); a gradient's layout then becomes contiguous.
  bool gradient_as_bucket_view = false;
};

/// Options a GradReducer takes: GradReducerOptions, or any struct with these two fields (utils'
/// DistributedDataParallelKwargs).
template <class K>
concept GradReducerKwargs = requires(const K& k) {
  { k.bucket_cap_mb } -> std::convertible_to<double>;
  { k.gradient_as_bucket_view } -> std::convertible_to<bool>;
};

/// What decides whether a step communicates: utils' GradientAccumulator, or anything with
/// should_all_reduce().
template <class G>
concept AllReduceGate = requires(const G& g) {
  { g.should_all_reduce() } -> std::convertible_to<bool>;
};

/// One bucket of a GradReducer's plan: gradients of one dtype on one device, flattened.
struct GradBucket {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  /// Walk-order indices of its gradients, in the order they sit in `buffer`.
  std::vector<std::size_t> leaves;
  /// The flat buffer: 1-d, as many elements as its gradients together.
  Tensor buffer;
  /// Bytes of `buffer`, the bytes its gradients take.
  std::size_t nbytes() const { return buffer.nbytes(); }
};

namespace detail {

/// One path step as Python indexes the container: ['key'], [3].
template <class K>
void grad_key_step(std::string& path, const K& k) {
  if constexpr (nested::detail::is_string_like_v<K>) {
    path += "['";
    path += std::string_view(k);
    path += "']";
  } else if constexpr (std::is_integral_v<K>) {
    path += '[' + std::to_string(k) + ']';
  } else {
    path += "[<key of type " + std::string(nested::type_name<K>()) + ">]";
  }
}

/// Calls f(tensor, path) on every tensor of `x` in for_each_leaf's order, the tensor mutable
/// where the container lets it be replaced; `path` names it from the root. Any other leaf is a
/// ValueError naming its path and type (Accelerate's error_on_other_type).
template <class F, class X>
void walk_gradients(X& x, std::string& path, F& f) {
  using T = std::remove_cv_t<X>;
  const std::size_t mark = path.size();
  if constexpr (std::is_same_v<T, Tensor>) {
    f(x, std::as_const(path));
  } else if constexpr (nested::CustomNested<T>) {
    std::size_t i = 0;
    nested::nested_traits<T>::for_each(x, [&](const auto& c) {
      path.resize(mark);
      grad_key_step(path, i++);
      walk_gradients(c, path, f);
    });
  } else if constexpr (nested::TupleLikeNested<T>) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((path.resize(mark), grad_key_step(path, I), walk_gradients(std::get<I>(x), path, f)), ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (nested::OptionalNested<T>) {
    if (x.has_value()) walk_gradients(*x, path, f);
  } else if constexpr (nested::VariantNested<T>) {
    if (!x.valueless_by_exception()) std::visit([&](auto& e) { walk_gradients(e, path, f); }, x);
  } else if constexpr (nested::MapNested<T>) {
    for (auto& kv : x) {
      path.resize(mark);
      grad_key_step(path, kv.first);
      walk_gradients(kv.second, path, f);
    }
  } else if constexpr (nested::SequenceNested<T>) {
    std::size_t i = 0;
    for (auto& e : x) {
      path.resize(mark);
      grad_key_step(path, i++);
      walk_gradients(e, path, f);
    }
  } else if constexpr (nested::AggregateNested<T>) {
    // Boost.PFR reflects fields by position only, so a field is named by its index.
    auto fields = boost::pfr::structure_tie(x);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((path.resize(mark), path += ".<field " + std::to_string(I) + ">", walk_gradients(std::get<I>(fields), path, f)),
       ...);
    }(std::make_index_sequence<std::tuple_size_v<decltype(fields)>>{});
  } else {
    throw ValueError("GradReducer: " + path + " is a '" + std::string(nested::type_name<T>()) +
                     "', not a gradient tensor; gradients must be tensors in tuples, sequences, maps or structs");
  }
  path.resize(mark);
}

/// Where one gradient sits in its bucket.
struct GradSlot {
  std::size_t bucket = 0;
  std::int64_t offset = 0;  ///< in elements of the bucket's buffer
  Shape shape;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  Tensor view;  ///< the gradient's place in the buffer, in its shape
};

/// A gradient met by a walk: the tensor, and its slot in the caller's structure when replaceable.
struct GradLeaf {
  const Tensor* tensor = nullptr;
  Tensor* slot = nullptr;
};

inline std::int64_t bucket_cap_bytes(double mb) {
  if (!std::isfinite(mb) || !(mb > 0)) {
    throw ValueError("GradReducer: bucket_cap_mb must be a positive number of MiB, got " + std::to_string(mb));
  }
  const double bytes = mb * 1024.0 * 1024.0;
  return bytes >= 9.0e18 ? INT64_MAX : std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes));
}

/// Compression hooks change what travels; rather than ignore one, refuse it.
template <class K>
void check_no_comm_hook(const K& k) {
  auto refuse = [](std::string_view field, std::string_view value) {
    if (value != "no") {
      throw ValueError("GradReducer: DistributedDataParallelKwargs." + std::string(field) + " = " + std::string(value) +
                       " is not implemented; gradients are all-reduced in their own dtype (leave it \"no\")");
    }
  };
  if constexpr (requires { std::string_view(to_string(k.comm_hook)); }) refuse("comm_hook", to_string(k.comm_hook));
  if constexpr (requires { std::string_view(to_string(k.comm_wrapper)); }) {
    refuse("comm_wrapper", to_string(k.comm_wrapper));
  }
}

}  // namespace detail

// ---- any_process ---------------------------------------------------------------------------------

/// True on every process when `flag` is true on any (one all-reduce of a bool over MPI; no
/// communication in a world of one). Every process must call it.
template <class D>
bool any_process(const PartialState<D>& state, bool flag) {
  if (!state.communicates() || state.num_processes() == 1) return flag;
#if defined(ACCEL_WITH_MPI)
  bool any = flag;
  detail::mpi(state).all_reduce(&any, 1, DType::boolean, detail::MpiReduce::logical_or, "any_process");
  return any;
#else
  return flag;
#endif
}

// ---- GradReducer ---------------------------------------------------------------------------------

/// Averages nested gradients over the processes in buckets, one all-reduce per bucket (torch's
/// DDP Reducer). Built once from the gradients' structure; the buckets and their buffers are kept.
template <policy::Distributed D>
class GradReducer {
 public:
  /// Plans the buckets for `grads` (ValueError / DTypeError / DeviceError naming a gradient that
  /// cannot be reduced). With gradient_as_bucket_view, `grads`' tensors become views into them.
  template <class Grads, GradReducerKwargs K = GradReducerOptions>
  GradReducer(const PartialState<D>& state, Grads& grads, const K& kwargs = {})
      : state_(state), views_(static_cast<bool>(kwargs.gradient_as_bucket_view)) {
    const std::int64_t cap = detail::bucket_cap_bytes(static_cast<double>(kwargs.bucket_cap_mb));
    detail::check_no_comm_hook(kwargs);
    verify_operation(state_, "accel::dist::GradReducer", grads);
    const std::vector<detail::GradLeaf> leaves = collect(grads, /*planned=*/false);
    plan(leaves, cap);
    if (views_) {
      for (std::size_t i = 0; i < leaves.size(); ++i) bind(leaves[i], slots_[i]);
    }
  }

  /// Every gradient of `grads` (the structure the reducer was built from) := its mean over the
  /// processes, in place: one all-reduce per bucket, in bucket order. Nothing to do in a world of
  /// one. Every process must call it.
  template <class Grads>
  void all_reduce(Grads& grads) {
    verify_operation(state_, "accel::dist::GradReducer::all_reduce", grads);
    const std::vector<detail::GradLeaf> leaves = collect(grads, /*planned=*/true);
    const bool comm = communicates();
    if (!comm && !views_) return;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      const GradBucket& bucket = buckets_[b];
      std::vector<bool> copied(bucket.leaves.size(), false);
      for (std::size_t j = 0; j < bucket.leaves.size(); ++j) {
        const std::size_t i = bucket.leaves[j];
        if (leaves[i].tensor->is_same(slots_[i].view)) continue;
        slots_[i].view.copy_(*leaves[i].tensor);
        copied[j] = true;
      }
      if (comm) reduce_bucket(b);
      for (std::size_t j = 0; j < bucket.leaves.size(); ++j) {
        if (!copied[j]) continue;
        const std::size_t i = bucket.leaves[j];
        if (views_ && leaves[i].slot) {
          *leaves[i].slot = slots_[i].view;
        } else if (comm) {
          Tensor dst = *leaves[i].tensor;
          dst.copy_(slots_[i].view);
        }
      }
    }
  }

  /// all_reduce(grads) when gate.should_all_reduce() (a sync step of the accumulation), else no
  /// communication and no change (Accelerate's no_sync). Returns whether it reduced. Every process
  /// must pass a gate in the same state.
  template <class Grads, AllReduceGate G>
  bool all_reduce(Grads& grads, const G& gate) {
    if (!static_cast<bool>(gate.should_all_reduce())) return false;
    all_reduce(grads);
    return true;
  }

  /// The buckets, in the order they are reduced.
  const std::vector<GradBucket>& buckets() const noexcept { return buckets_; }
  /// The bucket holding gradient `leaf` (walk order).
  std::size_t bucket_of(std::size_t leaf) const { return slots_.at(leaf).bucket; }
  /// Gradients in the planned structure.
  std::size_t num_gradients() const noexcept { return slots_.size(); }
  /// All-reduces issued so far: one per bucket per reduce with several processes.
  std::size_t all_reduce_count() const noexcept { return all_reduces_; }
  /// Whether gradients are views into the buckets.
  bool gradient_as_bucket_view() const noexcept { return views_; }

 private:
  bool communicates() const { return state_.communicates() && state_.num_processes() > 1; }

  /// The tensors of `grads` in walk order, each checked (against the plan once there is one).
  template <class Grads>
  std::vector<detail::GradLeaf> collect(Grads& grads, bool planned) const {
    std::vector<detail::GradLeaf> out;
    out.reserve(slots_.size());
    std::string path = "grads";
    auto visit = [&](auto& t, const std::string& where) {
      if (planned) {
        if (out.size() >= slots_.size()) {
          throw ValueError("GradReducer::all_reduce: " + where + " is gradient #" + std::to_string(out.size()) +
                           ", but the reducer was built for " + std::to_string(slots_.size()) +
                           " gradients; build a reducer for this structure");
        }
        check_planned(t, slots_[out.size()], where);
      } else {
        check_gradient(t, where);
      }
      detail::GradLeaf leaf{&t, nullptr};
      if constexpr (!std::is_const_v<std::remove_reference_t<decltype(t)>>) leaf.slot = &t;
      out.push_back(leaf);
    };
    detail::walk_gradients(grads, path, visit);
    if (planned && out.size() != slots_.size()) {
      throw ValueError("GradReducer::all_reduce: the gradients hold " + std::to_string(out.size()) +
                       " tensors, but the reducer was built for " + std::to_string(slots_.size()) +
                       "; build a reducer for this structure");
    }
    return out;
  }

  void check_gradient(const Tensor& t, const std::string& where) const {
    if (!t.defined()) {
      throw ValueError("GradReducer: " + where + " is an undefined tensor; give every gradient a value (zeros for "
                       "a parameter that took no part)");
    }
    if (t.is_meta()) {
      throw DeviceError("GradReducer: " + where + " is a meta tensor of shape " + t.shape().str() +
                        " and has no values to reduce");
    }
    if (!t.is_floating_point()) {
      throw DTypeError("GradReducer: " + where + " is a " + std::string(dtype_name(t.dtype())) + " tensor of shape " +
                       t.shape().str() + "; gradients are floating-point");
    }
    try {
      (void)detail::route(state_, t, "GradReducer");
    } catch (const DeviceError& e) {
      throw DeviceError(where + ": " + e.what());
    }
  }

  static void check_planned(const Tensor& t, const detail::GradSlot& s, const std::string& where) {
    const std::string built = "; the reducer was built for ";
    if (!t.defined()) throw ValueError("GradReducer::all_reduce: " + where + " is an undefined tensor");
    if (t.dtype() != s.dtype) {
      throw DTypeError("GradReducer::all_reduce: " + where + " is " + std::string(dtype_name(t.dtype())) + built +
                       std::string(dtype_name(s.dtype)));
    }
    if (t.device() != s.device) {
      throw DeviceError("GradReducer::all_reduce: " + where + " is on " + t.device().str() + built + s.device.str());
    }
    if (t.shape() != s.shape) {
      throw ShapeError("GradReducer::all_reduce: " + where + " has shape " + t.shape().str() + built + s.shape.str());
    }
  }

  /// torch's bucket assignment: reverse walk order, one open bucket per (dtype, device), closed
  /// once it reaches the cap; buckets ordered by the first gradient they took.
  void plan(const std::vector<detail::GradLeaf>& leaves, std::int64_t cap) {
    struct Open {
      std::vector<std::size_t> leaves;
      std::int64_t bytes = 0;
      std::size_t first = 0;  // position in the reversed order
    };
    std::vector<Open> closed;
    std::map<std::pair<int, std::string>, Open> open;
    const std::size_t n = leaves.size();
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t i = n - 1 - r;
      const Tensor& t = *leaves[i].tensor;
      Open& b = open[{static_cast<int>(t.dtype()), t.device().str()}];
      if (b.leaves.empty()) b.first = r;
      b.leaves.push_back(i);
      b.bytes += static_cast<std::int64_t>(t.nbytes());
      if (b.bytes >= cap) {
        closed.push_back(std::move(b));
        b = Open{};
      }
    }
    for (auto& [key, b] : open) {
      if (!b.leaves.empty()) closed.push_back(std::move(b));
    }
    std::sort(closed.begin(), closed.end(), [](const Open& a, const Open& b) { return a.first < b.first; });

    slots_.assign(n, {});
    buckets_.clear();
    std::size_t staging_bytes = 0;
    for (auto& c : closed) {
      const Tensor& first = *leaves[c.leaves.front()].tensor;
      GradBucket bucket{first.dtype(), first.device(), std::move(c.leaves), {}};
      std::int64_t numel = 0;
      for (const std::size_t i : bucket.leaves) numel += leaves[i].tensor->numel();
      bucket.buffer = Tensor::empty(Shape{numel}, bucket.dtype, bucket.device);
      std::int64_t offset = 0;
      for (const std::size_t i : bucket.leaves) {
        const Tensor& t = *leaves[i].tensor;
        slots_[i] = {buckets_.size(), offset, t.shape(), t.dtype(), t.device(),
                     bucket.buffer.narrow(0, offset, t.numel()).view(t.shape())};
        offset += t.numel();
      }
      if (bucket.device.is_cpu()) {
        const DType work = detail::mpi_working_dtype(bucket.dtype);
        // The sum, and for f16 / bf16 / fp8 their f32 copy before it.
        const std::size_t parts = work == bucket.dtype ? 1 : 2;
        staging_bytes = std::max(staging_bytes, parts * storage_nbytes(work, static_cast<std::size_t>(numel)));
      }
      buckets_.push_back(std::move(bucket));
    }
    // One staging block serves every CPU bucket in turn.
    if (communicates() && staging_bytes > 0) {
      staging_ = Storage::allocate(Device::cpu(), staging_bytes);
    } else {
      staging_ = Storage();
    }
  }

  /// Part `part` of the staging block as `numel` elements of `dtype`.
  Tensor staging(std::int64_t part, std::int64_t numel, DType dtype) const {
    return Tensor::from_storage(staging_, dtype, Shape{numel}, std::nullopt, part * numel);
  }

  /// Copies the gradient into its view and makes the caller's slot the view (or, read-only,
  /// leaves it: it is copied in and back at every reduce).
  static void bind(const detail::GradLeaf& leaf, detail::GradSlot& slot) {
    slot.view.copy_(*leaf.tensor);
    if (leaf.slot) *leaf.slot = slot.view;
  }

  void reduce_bucket(std::size_t b) {
    constexpr const char* op = "GradReducer::all_reduce";
    GradBucket& bucket = buckets_[b];
    const std::int64_t numel = bucket.buffer.numel();
    if (numel == 0) return;
    const int n = state_.num_processes();
    const detail::Route r = detail::route(state_, bucket.buffer, op);
    if (r == detail::Route::nccl) {
#if defined(ACCEL_WITH_NCCL) && defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_MPI)
      const DType work = detail::nccl_working_dtype(bucket.dtype);
      Tensor buf = work == bucket.dtype ? bucket.buffer : bucket.buffer.to(work);
      detail::nccl(state_).all_reduce(buf.data_ptr(), static_cast<std::size_t>(numel), work, 1.0 / n, op);
      if (work != bucket.dtype) bucket.buffer.copy_(buf);
#else
      detail::no_nccl(op);
#endif
    } else if (r == detail::Route::mpi) {
#if defined(ACCEL_WITH_MPI)
      // Out of place into the staging block, and back with the division in the same pass: Open
      // MPI's in-place non-blocking all-reduce ran at half the rate of its out-of-place one (a
      // bucket of 4 MiB, two processes), which costs more than the pass saves.
      const DType work = detail::mpi_working_dtype(bucket.dtype);
      Tensor src = bucket.buffer;
      if (work != bucket.dtype) {
        src = staging(1, numel, work);
        src.copy_(bucket.buffer);
      }
      Tensor sum = staging(0, numel, work);
      detail::mpi(state_).all_reduce(src.data_ptr(), sum.data_ptr(), static_cast<std::size_t>(numel), work,
                                     detail::MpiReduce::sum, op);
      if (work == bucket.dtype) {
        detail::divide_and_scale(sum, bucket.buffer, n, 1.0);
      } else {
        detail::divide_and_scale(sum, n, 1.0);
        bucket.buffer.copy_(sum);
      }
#endif
    } else {
      return;
    }
    ++all_reduces_;
  }

  PartialState<D> state_;
  bool views_;
  std::vector<GradBucket> buckets_;
  std::vector<detail::GradSlot> slots_;
  Storage staging_;
  std::size_t all_reduces_ = 0;
};

}  // namespace accel::dist
