// Accelerate's utils/operations.py over nested data, built on recursively_apply:
//
//   send_to_device(data, device, non_blocking = false, skip_keys = {})   tensors (and .to()-able leaves) moved
//   find_device(data) -> optional<Device>       device of the first tensor
//   find_batch_size(data) -> int64              dim 0 of the first tensor; ValueError if none
//   listify(data)                               tensors -> NestedList (nested vectors of double)
//   convert_to_fp32(data)                       f16 / bf16 tensors -> f32, others untouched
//   convert_outputs_to_fp32(callable)           wraps a callable so that its result goes through convert_to_fp32
//   slice_tensors(data, Slice{start, stop})     views of rows [start, stop) of every tensor (Python slicing rules)
//   get_data_structure(data) / initialize_tensors(info)   shapes + dtypes <-> empty tensors
//   honor_type(like, values)                    a container of like's kind holding `values`
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
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

/// A leaf that send_to_device moves: a Tensor, or any type with `x.to(Device)` (a module, a user
/// batch that knows how to move itself).
template <class T>
concept DeviceMovable = std::is_same_v<T, Tensor> || requires(const T& x, Device d) { x.to(d); };

/// Leaf test matching DeviceMovable types.
struct device_movable_leaf : leaf_test {
  template <class T>
  static constexpr bool matches = DeviceMovable<std::remove_cvref_t<T>>;
};

/// Copies every tensor of `data` to `device` (tensors already there are shared, not copied).
/// Values of map entries whose key is in `skip` are passed through untouched, at every level.
template <class Data>
auto send_to_device(const Data& data, Device device, bool non_blocking = false, const skip_keys& skip = {}) {
  auto move = [device, non_blocking](const auto& x) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, Tensor>) {
      return x.to(device, std::nullopt, non_blocking);
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
/// holds no tensor or the first one is zero-dimensional.
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

// ---- listify -------------------------------------------------------------------------------------

/// A tensor as nested lists: a scalar (0-d tensor) or a list of NestedLists, one per row.
class NestedList {
 public:
  NestedList() = default;
  explicit NestedList(double v) : v_(v) {}
  explicit NestedList(std::vector<NestedList> items) : v_(std::move(items)) {}

  bool is_scalar() const noexcept { return std::holds_alternative<double>(v_); }
  /// The value of a scalar; ValueError for a list.
  double scalar() const {
    if (!is_scalar()) throw ValueError("NestedList: scalar() called on a list of " + std::to_string(size()));
    return std::get<double>(v_);
  }
  const std::vector<NestedList>& items() const {
    if (is_scalar()) throw ValueError("NestedList: items() called on a scalar");
    return std::get<std::vector<NestedList>>(v_);
  }
  std::size_t size() const noexcept { return is_scalar() ? 0 : std::get<1>(v_).size(); }
  const NestedList& operator[](std::size_t i) const { return items().at(i); }
  /// A 1-d list's values (ValueError if an element is itself a list).
  std::vector<double> values() const {
    std::vector<double> out;
    out.reserve(size());
    for (const auto& e : items()) out.push_back(e.scalar());
    return out;
  }
  friend bool operator==(const NestedList&, const NestedList&) = default;

 private:
  std::variant<double, std::vector<NestedList>> v_{0.0};
};

namespace detail {
inline NestedList listify_rows(const double* p, const Shape& shape, std::size_t dim, const Shape& strides) {
  if (dim == shape.size()) return NestedList(*p);
  std::vector<NestedList> rows;
  rows.reserve(static_cast<std::size_t>(shape[dim]));
  for (std::int64_t i = 0; i < shape[dim]; ++i) rows.push_back(listify_rows(p + i * strides[dim], shape, dim + 1, strides));
  return NestedList(std::move(rows));
}
}  // namespace detail

/// Converts one tensor (any device, any dtype) to nested lists of double.
inline NestedList listify(const Tensor& t) {
  if (t.is_meta()) throw DeviceError("listify: a meta tensor of shape " + t.shape().str() + " has no values");
  const Tensor h = t.to(Device::cpu(), DType::f64).contiguous();
  return detail::listify_rows(h.data_ptr<double>(), h.shape(), 0, h.strides());
}

/// Every tensor of `data` as a NestedList, in the same structure.
template <class Data>
auto listify(const Data& data) {
  return recursively_apply([](const Tensor& t) { return listify(t); }, data);
}

// ---- convert_to_fp32 -----------------------------------------------------------------------------

/// Leaf test: tensors whose dtype is f16 or bf16 (checked at run time).
struct half_precision_tensor_leaf : leaf_test {
  template <class T>
  static constexpr bool matches = tensor_leaf::matches<T>;
  bool operator()(const Tensor& t) const noexcept { return t.dtype() == DType::f16 || t.dtype() == DType::bf16; }
};

/// f16 / bf16 tensors converted to f32; every other leaf, other tensors included, is kept.
template <class Data>
auto convert_to_fp32(const Data& data) {
  return recursively_apply([](const Tensor& t) { return t.to(DType::f32); }, data, half_precision_tensor_leaf{});
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

/// Rows [start, stop) with Python's rules: negative indices count from the end, bounds clamp.
struct Slice {
  std::int64_t start = 0;
  std::optional<std::int64_t> stop = std::nullopt;

  /// The concrete [begin, end) for an extent `n` (begin <= end).
  std::pair<std::int64_t, std::int64_t> resolve(std::int64_t n) const {
    auto fix = [n](std::int64_t i) { return i < 0 ? std::max<std::int64_t>(i + n, 0) : std::min(i, n); };
    const std::int64_t b = fix(start);
    const std::int64_t e = stop ? fix(*stop) : n;
    return {b, std::max(b, e)};
  }
};

/// Views of rows `slice` of dim 0 of every tensor (no copy). ShapeError for a 0-d tensor.
template <class Data>
auto slice_tensors(const Data& data, Slice slice) {
  return recursively_apply(
      [slice](const Tensor& t) {
        if (t.dim() == 0) throw ShapeError("slice_tensors: cannot slice a zero-dimensional tensor");
        const auto [b, e] = slice.resolve(t.shape()[0]);
        return t.narrow(0, b, e - b);
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
using nested::convert_outputs_to_fp32;
using nested::convert_to_fp32;
using nested::find_batch_size;
using nested::find_device;
using nested::for_each_leaf;
using nested::get_data_structure;
using nested::honor_type;
using nested::initialize_tensors;
using nested::listify;
using nested::recursively_apply;
using nested::send_to_device;
using nested::slice_tensors;
}  // namespace accel
