// Accelerate's utils/operations.py over nested data, built on recursively_apply:
//
//   send_to_device(data, device, non_blocking = false, skip_keys = {})   tensors (and .to()-able leaves) moved
//   find_device(data) -> optional<Device>       device of the first tensor
//   find_batch_size(data) -> int64              dim 0 of the first tensor; ValueError if none
//   ignorant_find_batch_size(data) -> optional<int64>   the same, nullopt where that throws
//   listify(data)                               tensors -> NestedList (nested lists of float / int / bool)
//   convert_to_fp32(data)                       f16 / bf16 tensors (and dtype()-carrying leaves) -> f32
//   convert_outputs_to_fp32(callable)           wraps a callable so that its result goes through convert_to_fp32
//   slice_tensors(data, Slice{start, stop, step})   views of rows start:stop:step of every tensor (Python rules)
//   get_data_structure(data) / initialize_tensors(info)   shapes + dtypes <-> empty tensors
//   get_shape(data)                             every tensor's shape as a vector<int64>
//   honor_type(like, values)                    a container of like's kind holding `values`
//
// Differences from Accelerate:
// - find_batch_size takes the first tensor in walk order. Accelerate follows only the first
//   element of each list and the first key of each dict, and raises when that is not a tensor
//   (TypeError) or is an empty container (ValueError). Wherever Accelerate returns a size, accel
//   returns the same one; where Accelerate raises, accel keeps looking. C++ batches are often
//   structs or tuples led by an id or a string, and a std::map's first key is its smallest, not
//   the first inserted, so "the first element" is rarely one the user chose.
// - A zero-dimensional first tensor is a ValueError (Accelerate: IndexError), and Accelerate's
//   TypeErrors (find_batch_size without a tensor, recursively_apply's error_on_other_type) are
//   ValueErrors: accel's hierarchy has no TypeError. ignorant_find_batch_size still answers
//   nullopt exactly where find_batch_size throws, as Accelerate's answers None.
// - listify gives a NestedList, not Python lists: each element keeps the kind torch's tolist()
//   gives it (double for floating tensors, an exact int64 for integer tensors, bool for bool).
// - slice_tensors takes a Slice of dim 0 (start, stop, step > 0). Accelerate forwards any index to
//   tensor[...] (an int, a tuple of slices, a mask); what it passes itself is always a slice of
//   rows, and other indexing belongs to the tensor layer. Its unused process_index and
//   num_processes parameters are dropped.
// - Besides lists, tuples and maps, optionals, variants, aggregates and nested_traits types are
//   walked (recursively_apply.hpp lists what that changes). Maps are walked in their own order: a
//   std::map by key, not by insertion as a Python dict, which decides "the first tensor" of
//   find_device and find_batch_size; a vector of pairs keeps insertion order.
// - Not here: the collectives (gather, gather_object, broadcast, broadcast_object_list, reduce,
//   pad_across_processes, pad_input_tensors, copy_tensor_to_devices, gather_tensor_shape,
//   verify_operation, chained_operation) belong to the distributed layer; GatheredParameters is
//   DeepSpeed's; the predicates is_torch_tensor / is_tensor_information / is_namedtuple are the
//   leaf tests tensor_leaf / tensor_information_leaf and the TupleLikeNested concept.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nested/for_each_leaf.hpp"
#include "accel/nested/recursively_apply.hpp"

namespace accel::nested {

// ---- send_to_device ------------------------------------------------------------------------------

/// A leaf that send_to_device moves: a Tensor, or any type with `x.to(Device)` or
/// `x.to(Device, bool non_blocking)` (a module, a user batch that knows how to move itself).
template <class T>
concept DeviceMovable = std::is_same_v<T, Tensor> || requires(const T& x, Device d) { x.to(d); } ||
                        requires(const T& x, Device d, bool non_blocking) { x.to(d, non_blocking); };

/// Leaf test matching DeviceMovable types.
struct device_movable_leaf : leaf_test {
  template <class T>
  static constexpr bool matches = DeviceMovable<std::remove_cvref_t<T>>;
};

/// Copies every tensor of `data` to `device` (tensors already there are shared, not copied).
/// Values of map entries whose key is in `skip` are passed through untouched, at every level.
/// A user leaf gets `non_blocking` when its `to(Device, bool)` takes it, else `to(Device)` is
/// called (Accelerate retries without the keyword when `.to` rejects it).
template <class Data>
auto send_to_device(const Data& data, Device device, bool non_blocking = false, const skip_keys& skip = {}) {
  auto move = [device, non_blocking](const auto& x) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, Tensor>) {
      return x.to(device, std::nullopt, non_blocking);
    } else if constexpr (requires { x.to(device, non_blocking); }) {
      return x.to(device, non_blocking);
    } else {
      return x.to(device);
    }
  };
  return recursively_apply(move, data, device_movable_leaf{}, skip);
}

// ---- find_device / find_batch_size ---------------------------------------------------------------

/// Device of the first tensor in walk order; nullopt when `data` holds no tensor.
template <class Data>
std::optional<Device> find_device(const Data& data) {
  std::optional<Device> found;
  for_each_leaf([&](const Tensor& t) { found = t.device(); return true; }, data);
  return found;
}

/// Extent of dim 0 of the first tensor in walk order (the batch size). ValueError when `data`
/// holds no tensor or the first one is zero-dimensional. Where Accelerate looks only at the first
/// element of each container, this keeps looking (see the differences above).
template <class Data>
std::int64_t find_batch_size(const Data& data) {
  const Tensor* first = nullptr;
  for_each_leaf([&](const Tensor& t) { first = &t; return true; }, data);
  if (!first) {
    throw ValueError("find_batch_size: no tensor found in a '" + std::string(type_name<Data>()) +
                     "'; can only find the batch size of tensors");
  }
  if (first->dim() == 0) {
    throw ValueError("find_batch_size: the first tensor is zero-dimensional (shape []), it has no batch dimension");
  }
  return first->shape()[0];
}

/// find_batch_size without the errors: nullopt when `data` holds no tensor or the first one is
/// zero-dimensional (Accelerate's ignorant_find_batch_size, which answers None).
template <class Data>
std::optional<std::int64_t> ignorant_find_batch_size(const Data& data) {
  const Tensor* first = nullptr;
  for_each_leaf([&](const Tensor& t) { first = &t; return true; }, data);
  if (!first || first->dim() == 0) return std::nullopt;
  return first->shape()[0];
}

// ---- listify -------------------------------------------------------------------------------------

/// A tensor as nested lists: a scalar (0-d tensor) or a list of NestedLists, one per row. A scalar
/// has the kind torch's tolist() gives it: a double (floating tensors), an exact int64 (integer
/// tensors) or a bool. Equality compares kinds too: 1 and 1.0 differ.
class NestedList {
 public:
  NestedList() = default;
  explicit NestedList(double v) : v_(v) {}
  explicit NestedList(bool v) : v_(v) {}
  /// An integer scalar, held exactly.
  template <std::integral I>
    requires(!std::is_same_v<I, bool> && (std::is_signed_v<I> || sizeof(I) < sizeof(std::int64_t)))
  explicit NestedList(I v) : v_(static_cast<std::int64_t>(v)) {}
  explicit NestedList(std::vector<NestedList> items) : v_(std::move(items)) {}

  bool is_scalar() const noexcept { return !std::holds_alternative<std::vector<NestedList>>(v_); }
  /// A scalar from an integer tensor.
  bool is_integer() const noexcept { return std::holds_alternative<std::int64_t>(v_); }
  /// A scalar from a bool tensor.
  bool is_bool() const noexcept { return std::holds_alternative<bool>(v_); }
  /// The value of any scalar as a double (an int64 beyond 2^53 rounds: read it with integer());
  /// ValueError for a list.
  double scalar() const {
    if (const auto* i = std::get_if<std::int64_t>(&v_)) return static_cast<double>(*i);
    if (const auto* b = std::get_if<bool>(&v_)) return *b ? 1.0 : 0.0;
    if (!is_scalar()) throw ValueError("NestedList: scalar() called on a list of " + std::to_string(size()));
    return std::get<double>(v_);
  }
  /// The exact value of an integer or bool scalar; ValueError for a floating scalar or a list.
  std::int64_t integer() const {
    if (const auto* i = std::get_if<std::int64_t>(&v_)) return *i;
    if (const auto* b = std::get_if<bool>(&v_)) return *b ? 1 : 0;
    throw ValueError(is_scalar() ? std::string("NestedList: integer() called on a floating scalar")
                                 : "NestedList: integer() called on a list of " + std::to_string(size()));
  }
  const std::vector<NestedList>& items() const {
    if (is_scalar()) throw ValueError("NestedList: items() called on a scalar");
    return std::get<std::vector<NestedList>>(v_);
  }
  std::size_t size() const noexcept {
    const auto* l = std::get_if<std::vector<NestedList>>(&v_);
    return l ? l->size() : 0;
  }
  const NestedList& operator[](std::size_t i) const { return items().at(i); }
  /// A 1-d list's values as doubles (ValueError if an element is itself a list).
  std::vector<double> values() const {
    std::vector<double> out;
    out.reserve(size());
    for (const auto& e : items()) out.push_back(e.scalar());
    return out;
  }
  /// A 1-d list's exact integer values (ValueError for a floating element or a nested list).
  std::vector<std::int64_t> integers() const {
    std::vector<std::int64_t> out;
    out.reserve(size());
    for (const auto& e : items()) out.push_back(e.integer());
    return out;
  }
  friend bool operator==(const NestedList&, const NestedList&) = default;

 private:
  std::variant<double, std::int64_t, bool, std::vector<NestedList>> v_{0.0};
};

namespace detail {
template <class T>
NestedList listify_rows(const T* p, const Shape& shape, std::size_t dim, const Shape& strides) {
  if (dim == shape.size()) return NestedList(*p);
  std::vector<NestedList> rows;
  rows.reserve(static_cast<std::size_t>(shape[dim]));
  for (std::int64_t i = 0; i < shape[dim]; ++i) rows.push_back(listify_rows(p + i * strides[dim], shape, dim + 1, strides));
  return NestedList(std::move(rows));
}
}  // namespace detail

/// Converts one tensor (any device, any dtype) to nested lists: floating values as double,
/// integers as exact int64, bools as bool.
inline NestedList listify(const Tensor& t) {
  if (t.is_meta()) throw DeviceError("listify: a meta tensor of shape " + t.shape().str() + " has no values");
  if (t.dtype() == DType::boolean) {
    const Tensor h = t.to(Device::cpu()).contiguous();
    return detail::listify_rows(h.data_ptr<bool>(), h.shape(), 0, h.strides());
  }
  if (!is_floating_point(t.dtype())) {
    const Tensor h = t.to(Device::cpu(), DType::i64).contiguous();
    return detail::listify_rows(h.data_ptr<std::int64_t>(), h.shape(), 0, h.strides());
  }
  const Tensor h = t.to(Device::cpu(), DType::f64).contiguous();
  return detail::listify_rows(h.data_ptr<double>(), h.shape(), 0, h.strides());
}

/// Every tensor of `data` as a NestedList, in the same structure.
template <class Data>
auto listify(const Data& data) {
  return recursively_apply([](const Tensor& t) { return listify(t); }, data);
}

// ---- convert_to_fp32 -----------------------------------------------------------------------------

/// A leaf convert_to_fp32 may convert: a Tensor, or a user type with `dtype()` and
/// `to(DType) -> itself` (Accelerate converts anything with a `dtype` attribute).
template <class T>
concept DTypeConvertible = std::is_same_v<T, Tensor> || requires(const T& x) {
  { x.dtype() } -> std::convertible_to<DType>;
  { x.to(DType::f32) } -> std::convertible_to<T>;
};

/// Leaf test: DTypeConvertible leaves whose dtype is f16 or bf16 (checked at run time).
struct half_precision_tensor_leaf : leaf_test {
  template <class T>
  static constexpr bool matches = DTypeConvertible<std::remove_cvref_t<T>>;
  template <class T>
  bool operator()(const T& x) const {
    const DType d = x.dtype();
    return d == DType::f16 || d == DType::bf16;
  }
};

/// f16 / bf16 leaves converted to f32; every other leaf, other tensors included, is kept.
template <class Data>
auto convert_to_fp32(const Data& data) {
  return recursively_apply(
      [](const auto& x) { return std::remove_cvref_t<decltype(x)>(x.to(DType::f32)); }, data,
      half_precision_tensor_leaf{});
}

/// Wraps `fn` so that whatever it returns goes through convert_to_fp32 (Accelerate's
/// ConvertOutputsToFp32). The wrapper owns a copy of `fn`.
template <class F>
auto convert_outputs_to_fp32(F fn) {
  return [fn = std::move(fn)](auto&&... args) mutable {
    return convert_to_fp32(fn(std::forward<decltype(args)>(args)...));
  };
}

// ---- slicing -------------------------------------------------------------------------------------

/// Rows start:stop:step with Python's rules: negative indices count from the end, bounds clamp;
/// the step must be positive, as torch requires.
struct Slice {
  std::int64_t start = 0;
  std::optional<std::int64_t> stop = std::nullopt;
  std::int64_t step = 1;

  /// The concrete [begin, end) for an extent `n` (begin <= end), before the step is applied.
  std::pair<std::int64_t, std::int64_t> resolve(std::int64_t n) const {
    auto fix = [n](std::int64_t i) { return i < 0 ? std::max<std::int64_t>(i + n, 0) : std::min(i, n); };
    const std::int64_t b = fix(start);
    const std::int64_t e = stop ? fix(*stop) : n;
    return {b, std::max(b, e)};
  }
};

/// Views of rows `slice` of dim 0 of every tensor (no copy). ShapeError for a 0-d tensor,
/// ValueError for a step that is not positive.
template <class Data>
auto slice_tensors(const Data& data, Slice slice) {
  if (slice.step <= 0) {
    throw ValueError("slice_tensors: step must be greater than zero, got " + std::to_string(slice.step));
  }
  return recursively_apply(
      [slice](const Tensor& t) {
        if (t.dim() == 0) throw ShapeError("slice_tensors: cannot slice a zero-dimensional tensor");
        const auto [b, e] = slice.resolve(t.shape()[0]);
        Tensor rows = t.narrow(0, b, e - b);
        if (slice.step == 1) return rows;
        Shape shape = rows.shape();
        shape[0] = (e - b + slice.step - 1) / slice.step;
        if (rows.is_meta()) return Tensor::empty(shape, rows.dtype(), Device::meta());
        Shape strides = rows.strides();
        strides[0] *= slice.step;
        return Tensor::from_storage(rows.storage(), rows.dtype(), shape, strides, rows.storage_offset());
      },
      data);
}

// ---- structure -----------------------------------------------------------------------------------

/// What get_data_structure keeps of a tensor (Accelerate's TensorInformation).
struct TensorInformation {
  Shape shape;
  DType dtype = DType::f32;
  friend bool operator==(const TensorInformation&, const TensorInformation&) = default;
};

/// Leaf test matching TensorInformation.
using tensor_information_leaf = leaf_of<TensorInformation>;

/// The same structure with each tensor replaced by its shape and dtype.
template <class Data>
auto get_data_structure(const Data& data) {
  return recursively_apply([](const Tensor& t) { return TensorInformation{t.shape(), t.dtype()}; }, data);
}

/// The same structure with each tensor replaced by its shape as a vector (Accelerate's get_shape,
/// which gives lists of ints).
template <class Data>
auto get_shape(const Data& data) {
  return recursively_apply(
      [](const Tensor& t) { return std::vector<std::int64_t>(t.shape().begin(), t.shape().end()); }, data);
}

/// The inverse: uninitialised tensors (on `device`, cpu by default) of the recorded shapes and dtypes.
template <class Data>
auto initialize_tensors(const Data& info, Device device = Device::cpu()) {
  return recursively_apply([device](const TensorInformation& i) { return Tensor::empty(i.shape, i.dtype, device); },
                           info, tensor_information_leaf{});
}

// ---- honor_type ----------------------------------------------------------------------------------

/// A container of `like`'s kind rebuilt from `values` (Accelerate's honor_type): a sequence gets
/// the values in order; a tuple-like gets them element by element (its arity must match).
template <class Like, class Values>
Like honor_type(const Like& like, Values&& values) {
  (void)like;
  if constexpr (SequenceNested<Like>) {
    return Like(std::begin(values), std::end(values));
  } else if constexpr (TupleLikeNested<Like>) {
    static_assert(std::tuple_size_v<std::remove_cvref_t<Values>> == std::tuple_size_v<Like>,
                  "honor_type: values must have the arity of the tuple-like type");
    return std::apply([](auto&&... v) { return Like{std::forward<decltype(v)>(v)...}; },
                      std::forward<Values>(values));
  } else {
    static_assert(detail::always_false_v<Like>, "honor_type: Like must be a sequence or a tuple-like type");
  }
}

}  // namespace accel::nested

namespace accel {
using nested::convert_outputs_to_fp32, nested::convert_to_fp32, nested::find_batch_size, nested::find_device,
    nested::for_each_leaf, nested::get_data_structure, nested::get_shape, nested::honor_type,
    nested::ignorant_find_batch_size, nested::initialize_tensors, nested::listify, nested::recursively_apply,
    nested::send_to_device, nested::slice_tensors;
}  // namespace accel
