// Tensor: dtype, device, shape, strides, offset and a shared Storage. A small value: copying a
// Tensor copies the view, never the bytes. Meta tensors have a shape and a dtype and no storage.
//
//   Tensor::empty / zeros / ones / full / from_vector / from_storage     factories
//   view reshape narrow select transpose permute unsqueeze squeeze expand view_as(dtype)   views
//   contiguous clone to(device, dtype, non_blocking) copy_ fill_                            copies
//   at<T>(i, j, ...) item<T>() data_ptr<T>()                                              access
//
// Errors name the operation, the shapes and the dtypes involved.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/shape.hpp"
#include "accel/core/storage.hpp"

namespace accel {

class Tensor {
 public:
  /// An undefined tensor (`defined()` is false).
  Tensor() = default;

  // ---- factories -----------------------------------------------------------------------------

  /// Uninitialised tensor; on meta it has no storage and costs nothing.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu()) {
    Tensor t;
    t.init_contiguous(shape, dtype, device);
    if (!device.is_meta()) {
      t.storage_ = Storage::allocate(device, checked_nbytes(shape, dtype, "empty"));
    }
    return t;
  }
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu()) {
    return full(shape, 0.0, dtype, device);
  }
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu()) {
    return full(shape, 1.0, dtype, device);
  }
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu()) {
    Tensor t = empty(shape, dtype, device);
    if (!device.is_meta()) t.fill_(value);
    return t;
  }
  /// A meta tensor of the same shape and dtype (what init_empty_weights produces).
  Tensor to_meta() const {
    Tensor t;
    t.init_contiguous(shape_, dtype_, Device::meta());
    return t;
  }

  /// A cpu tensor holding a copy of `values` with `shape` (a 1-d shape when omitted).
  template <Element T>
  static Tensor from_vector(const std::vector<T>& values, std::optional<Shape> shape = std::nullopt) {
    const Shape s = shape ? *shape : Shape{static_cast<std::int64_t>(values.size())};
    if (s.numel() != static_cast<std::int64_t>(values.size())) {
      throw ShapeError("from_vector: " + std::to_string(values.size()) +
                       " values do not fill shape " + s.str());
    }
    Tensor t = empty(s, dtype_of<T>);
    T* p = t.data_ptr<T>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    return t;
  }
  template <Element T>
  static Tensor from_vector(std::initializer_list<T> values, std::optional<Shape> shape = std::nullopt) {
    return from_vector(std::vector<T>(values), shape);
  }

  /// A view of `storage` (offset and strides in elements); checks that it stays in bounds.
  static Tensor from_storage(Storage storage, DType dtype, const Shape& shape,
                             std::optional<Shape> strides = std::nullopt, std::int64_t offset = 0) {
    Tensor t;
    t.defined_ = true;
    t.dtype_ = dtype;
    t.shape_ = shape;
    t.strides_ = strides ? *strides : contiguous_strides(shape);
    t.offset_ = offset;
    t.device_ = storage.device();
    t.storage_ = std::move(storage);
    if (t.strides_.size() != shape.size()) {
      throw ShapeError("from_storage: strides " + t.strides_.str() + " do not match shape " + shape.str());
    }
    t.check_in_bounds("from_storage");
    return t;
  }

  // ---- properties ----------------------------------------------------------------------------

  bool defined() const noexcept { return defined_; }
  DType dtype() const noexcept { return dtype_; }
  Device device() const noexcept { return device_; }
  const Shape& shape() const noexcept { return shape_; }
  const Shape& sizes() const noexcept { return shape_; }
  const Shape& strides() const noexcept { return strides_; }
  std::int64_t size(std::int64_t dim) const { return shape_[wrap_dim(dim, shape_.size(), "size")]; }
  std::int64_t stride(std::int64_t dim) const { return strides_[wrap_dim(dim, shape_.size(), "stride")]; }
  std::size_t dim() const noexcept { return shape_.size(); }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  std::size_t element_size() const { return itemsize(dtype_); }
  /// Bytes of the elements this view covers (numel x itemsize).
  std::size_t nbytes() const { return storage_nbytes(dtype_, static_cast<std::size_t>(numel())); }
  std::int64_t storage_offset() const noexcept { return offset_; }
  const Storage& storage() const noexcept { return storage_; }
  bool is_meta() const noexcept { return device_.is_meta(); }
  bool is_cpu() const noexcept { return device_.is_cpu(); }
  bool is_cuda() const noexcept { return device_.is_cuda(); }
  bool is_floating_point() const { return accel::is_floating_point(dtype_); }

  bool is_contiguous() const noexcept {
    std::int64_t expected = 1;
    for (std::size_t i = shape_.size(); i-- > 0;) {
      if (shape_[i] == 1) continue;
      if (strides_[i] != expected) return false;
      expected *= shape_[i];
    }
    return true;
  }

  /// Address of the first element (nullptr on meta).
  void* data_ptr() const {
    if (!storage_) return nullptr;
    return storage_.data() + static_cast<std::size_t>(offset_) * element_size();
  }
  template <Element T>
  T* data_ptr() const {
    if (dtype_of<T> != dtype_) {
      throw DTypeError("data_ptr<" + std::string(dtype_name(dtype_of<T>)) + ">: tensor is " +
                       std::string(dtype_name(dtype_)));
    }
    return static_cast<T*>(data_ptr());
  }

  /// Same storage, offset, shape, strides and dtype: the same view.
  bool is_same(const Tensor& o) const noexcept {
    return defined_ == o.defined_ && storage_ == o.storage_ && storage_ && offset_ == o.offset_ &&
           dtype_ == o.dtype_ && shape_ == o.shape_ && strides_ == o.strides_;
  }
  /// True when both views read bytes of one storage.
  bool shares_storage(const Tensor& o) const noexcept { return storage_ && storage_ == o.storage_; }

  // ---- views (no copy) -----------------------------------------------------------------------

  /// Same elements, new shape (one extent may be -1); needs a contiguous tensor.
  Tensor view(const Shape& shape) const {
    const Shape s = infer_shape(shape, "view");
    if (!is_contiguous()) {
      throw ShapeError("view: tensor of shape " + shape_.str() + " with strides " + strides_.str() +
                       " is not contiguous; use reshape()");
    }
    Tensor t = *this;
    t.shape_ = s;
    t.strides_ = contiguous_strides(s);
    return t;
  }
  /// A view when possible, a contiguous copy otherwise.
  Tensor reshape(const Shape& shape) const { return is_contiguous() ? view(shape) : contiguous().view(shape); }

  /// Elements [start, start + length) along `dim`.
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const {
    const std::size_t d = wrap_dim(dim, shape_.size(), "narrow");
    if (start < 0) start += shape_[d];
    if (start < 0 || length < 0 || start + length > shape_[d]) {
      throw ShapeError("narrow: range [" + std::to_string(start) + ", " + std::to_string(start + length) +
                       ") out of bounds for dimension " + std::to_string(dim) + " of shape " + shape_.str());
    }
    Tensor t = *this;
    t.shape_[d] = length;
    if (length > 0) t.offset_ += start * strides_[d];
    return t;
  }
  /// Drops dimension `dim` by taking element `index` of it.
  Tensor select(std::int64_t dim, std::int64_t index) const {
    const std::size_t d = wrap_dim(dim, shape_.size(), "select");
    if (index < 0) index += shape_[d];
    if (index < 0 || index >= shape_[d]) {
      throw ShapeError("select: index " + std::to_string(index) + " out of range for dimension " +
                       std::to_string(dim) + " of shape " + shape_.str());
    }
    Tensor t = *this;
    t.offset_ += index * strides_[d];
    t.shape_.erase(d);
    t.strides_.erase(d);
    return t;
  }
  Tensor transpose(std::int64_t d0, std::int64_t d1) const {
    const std::size_t a = wrap_dim(d0, shape_.size(), "transpose");
    const std::size_t b = wrap_dim(d1, shape_.size(), "transpose");
    Tensor t = *this;
    std::swap(t.shape_[a], t.shape_[b]);
    std::swap(t.strides_[a], t.strides_[b]);
    return t;
  }
  /// 2-d transpose.
  Tensor t() const {
    if (dim() != 2) throw ShapeError("t: expected a 2-d tensor, got shape " + shape_.str());
    return transpose(0, 1);
  }
  Tensor permute(std::initializer_list<std::int64_t> order) const {
    if (order.size() != dim()) {
      throw ShapeError("permute: " + std::to_string(order.size()) + " dims given for shape " + shape_.str());
    }
    Tensor t = *this;
    std::uint32_t seen = 0;
    std::size_t i = 0;
    for (std::int64_t o : order) {
      const std::size_t d = wrap_dim(o, dim(), "permute");
      if (seen & (1u << d)) throw ShapeError("permute: dimension repeated in the order");
      seen |= 1u << d;
      t.shape_[i] = shape_[d];
      t.strides_[i] = strides_[d];
      ++i;
    }
    return t;
  }
  Tensor unsqueeze(std::int64_t dim) const {
    const std::size_t d = wrap_dim(dim, shape_.size() + 1, "unsqueeze");
    Tensor t = *this;
    const std::int64_t st = d < shape_.size() ? shape_[d] * strides_[d] : 1;
    t.shape_.insert(d, 1);
    t.strides_.insert(d, st);
    return t;
  }
  Tensor squeeze(std::int64_t dim) const {
    const std::size_t d = wrap_dim(dim, shape_.size(), "squeeze");
    if (shape_[d] != 1) return *this;
    Tensor t = *this;
    t.shape_.erase(d);
    t.strides_.erase(d);
    return t;
  }
  Tensor flatten() const { return reshape(Shape{numel()}); }
  /// Broadcast view to `shape` (stride 0 on expanded dimensions), torch's rules.
  Tensor expand(const Shape& shape) const {
    if (shape.size() < dim()) {
      throw ShapeError("expand: cannot expand shape " + shape_.str() + " to " + shape.str());
    }
    Tensor t = *this;
    t.shape_ = shape;
    t.strides_ = shape;
    const std::size_t lead = shape.size() - dim();
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i < lead) {
        t.strides_[i] = 0;
        continue;
      }
      const std::int64_t have = shape_[i - lead];
      std::int64_t want = shape[i];
      if (want == -1) want = have, t.shape_[i] = have;
      if (have == want) {
        t.strides_[i] = strides_[i - lead];
      } else if (have == 1) {
        t.strides_[i] = 0;
      } else {
        throw ShapeError("expand: cannot expand shape " + shape_.str() + " to " + shape.str());
      }
    }
    return t;
  }
  /// Reinterprets the bytes as another dtype of the same element size (bf16 <-> i16, ...).
  Tensor view_as(DType dtype) const {
    if (itemsize(dtype) != element_size()) {
      throw DTypeError("view_as: cannot reinterpret " + std::string(dtype_name(dtype_)) + " (" +
                       std::to_string(element_size()) + " bytes) as " + std::string(dtype_name(dtype)) +
                       " (" + std::to_string(itemsize(dtype)) + " bytes)");
    }
    Tensor t = *this;
    t.dtype_ = dtype;
    return t;
  }

  // ---- copies (tensor_copy.hpp) --------------------------------------------------------------

  /// Copies `src` into this tensor, broadcasting and converting dtype and device as needed.
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  /// This tensor if already contiguous, else a contiguous copy on the same device.
  Tensor contiguous() const;
  /// A contiguous copy that owns its storage.
  Tensor clone() const;
  /// True when the bytes are page-locked host memory (Storage::allocate_pinned).
  bool is_pinned() const noexcept { return defined_ && storage_ && storage_.kind() == MemoryKind::pinned; }
  /// torch's pin_memory: this tensor when pinned already, else a contiguous copy in page-locked
  /// host memory (which a GPU copies from without staging). CPU tensors only.
  Tensor pin_memory() const;
  /// This tensor when device and dtype already match (no copy), otherwise a converted copy.
  Tensor to(Device device, std::optional<DType> dtype = std::nullopt, bool non_blocking = false,
            bool copy = false) const;
  Tensor to(DType dtype) const { return to(device_, dtype); }
  /// Sets every element to `value` converted to the tensor's dtype.
  Tensor& fill_(double value);

  /// Element at `index` converted to T (copies it to the host first if needed).
  template <Element T>
  T at(std::initializer_list<std::int64_t> index) const;
  template <Element T>
  T at(std::span<const std::int64_t> index) const;
  /// The single element of a one-element tensor.
  template <Element T>
  T item() const {
    if (numel() != 1) throw ShapeError("item: tensor of shape " + shape_.str() + " has " + std::to_string(numel()) + " elements");
    std::array<std::int64_t, max_dims> zero{};
    return at<T>(std::span<const std::int64_t>(zero.data(), dim()));
  }
  /// All elements, converted to T, in row-major order.
  template <Element T>
  std::vector<T> to_vector() const;

  /// torch-like text: tensor([[1., 2.]], dtype=torch.float16).
  std::string str() const;

 private:
  static std::size_t checked_nbytes(const Shape& shape, DType dtype, const char* op) {
    std::size_t n = 1;
    for (std::int64_t e : shape) {
      if (e < 0) throw ShapeError(std::string(op) + ": negative extent in shape " + shape.str());
      if (e != 0 && n > SIZE_MAX / static_cast<std::size_t>(e)) {
        throw ShapeError(std::string(op) + ": shape " + shape.str() + " overflows the address space");
      }
      n *= static_cast<std::size_t>(e);
    }
    // Strides and element counts are int64: a shape past INT64_MAX elements would wrap them.
    if (n > SIZE_MAX / itemsize(dtype) || n > static_cast<std::size_t>(INT64_MAX)) {
      throw ShapeError(std::string(op) + ": shape " + shape.str() + " overflows the address space");
    }
    return storage_nbytes(dtype, n);
  }
  void init_contiguous(const Shape& shape, DType dtype, Device device) {
    (void)checked_nbytes(shape, dtype, "tensor");
    defined_ = true;
    dtype_ = dtype;
    device_ = device;
    shape_ = shape;
    strides_ = contiguous_strides(shape);
    offset_ = 0;
  }
  Shape infer_shape(const Shape& shape, const char* op) const {
    Shape s = shape;
    std::int64_t known = 1;
    int infer = -1;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == -1) {
        if (infer >= 0) throw ShapeError(std::string(op) + ": only one dimension can be -1 in " + shape.str());
        infer = static_cast<int>(i);
      } else if (s[i] < 0) {
        throw ShapeError(std::string(op) + ": invalid extent in " + shape.str());
      } else {
        known *= s[i];
      }
    }
    if (infer >= 0) {
      if (known == 0 || numel() % known != 0) {
        throw ShapeError(std::string(op) + ": shape " + shape.str() + " is invalid for " + std::to_string(numel()) + " elements");
      }
      s[static_cast<std::size_t>(infer)] = numel() / known;
    }
    if (s.numel() != numel()) {
      throw ShapeError(std::string(op) + ": shape " + shape.str() + " is invalid for input of shape " + shape_.str());
    }
    return s;
  }
  void check_in_bounds(const char* op) const {
    if (numel() == 0) return;
    std::int64_t lo = offset_, hi = offset_;
    for (std::size_t i = 0; i < shape_.size(); ++i) {
      const std::int64_t span = (shape_[i] - 1) * strides_[i];
      (span < 0 ? lo : hi) += span;
    }
    const auto limit = static_cast<std::int64_t>(storage_.nbytes() / element_size());
    if (lo < 0 || hi >= limit) {
      throw ShapeError(std::string(op) + ": view of shape " + shape_.str() + ", strides " + strides_.str() +
                       ", offset " + std::to_string(offset_) + " exceeds a storage of " +
                       std::to_string(storage_.nbytes()) + " bytes");
    }
  }

  Storage storage_;
  Shape shape_;
  Shape strides_;
  std::int64_t offset_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  bool defined_ = false;

  friend struct detail_tensor_access;
};

}  // namespace accel

#include "accel/core/tensor_copy.hpp"
#include "accel/core/tensor_print.hpp"
