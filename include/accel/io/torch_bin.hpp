// PyTorch checkpoint reader (torch.save's zip format, e.g. pytorch_model.bin), without Python.
//
//   StateDict sd = load_torch_bin("pytorch_model.bin");            // zero-copy mmap views
//   StateDict sd = parse_torch_bin(bytes, "name");                    // from memory (copies)
//
// The archive holds <prefix>/data.pkl (a pickle of an OrderedDict of tensors), one stored entry
// <prefix>/data/<key> per storage, and <prefix>/version. Tensors are rebuilt from
// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks) with
// persistent ids ('storage', torch.<T>Storage, key, location, numel): tensors that share a key
// share one accel Storage, and strided views keep their strides. Only the globals listed in
// `torch_bin_allowed_global` are accepted; anything else (os.system, builtins.eval, ...) is a
// FormatError "refusing to load global X": no code is ever executed.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/pickle.hpp"
#include "accel/core/regular_file.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/io/zip.hpp"

namespace accel::io {

/// DType of a torch storage class name ("FloatStorage" -> f32), or nullopt.
inline std::optional<DType> torch_storage_dtype(std::string_view cls) {
  static constexpr std::pair<std::string_view, DType> table[] = {
      {"DoubleStorage", DType::f64},  {"FloatStorage", DType::f32},
      {"HalfStorage", DType::f16},    {"BFloat16Storage", DType::bf16},
      {"Float8_e4m3fnStorage", DType::f8_e4m3fn}, {"Float8_e5m2Storage", DType::f8_e5m2},
      {"LongStorage", DType::i64},    {"IntStorage", DType::i32},
      {"ShortStorage", DType::i16},   {"CharStorage", DType::i8},
      {"ByteStorage", DType::u8},     {"BoolStorage", DType::boolean},
  };
  for (const auto& [name, d] : table) {
    if (name == cls) return d;
  }
  return std::nullopt;
}

/// torch's storage class name of `d` ("FloatStorage").
inline std::string torch_storage_class(DType d) {
  switch (d) {
    case DType::f64: return "DoubleStorage";
    case DType::f32: return "FloatStorage";
    case DType::f16: return "HalfStorage";
    case DType::bf16: return "BFloat16Storage";
    case DType::f8_e4m3fn: return "Float8_e4m3fnStorage";
    case DType::f8_e5m2: return "Float8_e5m2Storage";
    case DType::i64: return "LongStorage";
    case DType::i32: return "IntStorage";
    case DType::i16: return "ShortStorage";
    case DType::i8: return "CharStorage";
    case DType::u8: return "ByteStorage";
    case DType::boolean: return "BoolStorage";
  }
  throw DTypeError("no torch storage class for dtype " + std::to_string(int(d)));
}

/// The globals a state-dict pickle may name; everything else is refused.
inline bool torch_bin_allowed_global(std::string_view module, std::string_view name) {
  if (module == "collections" && name == "OrderedDict") return true;
  if (module == "torch._utils" && (name == "_rebuild_tensor_v2" || name == "_rebuild_parameter")) return true;
  return module == "torch" && torch_storage_dtype(name).has_value();
}

namespace detail {

/// Makes the storage for the zip entry at [offset, offset + nbytes): a view or a copy.
using StorageMaker = std::function<Storage(std::uint64_t offset, std::uint64_t nbytes, DType dtype)>;

inline std::int64_t pick_int(const pickle::Ref& r, const std::string& where, const char* what) {
  if (r->kind != pickle::Kind::integer) throw FormatError(where + ": " + what + " is not an integer");
  return r->integer;
}

inline std::vector<std::int64_t> pick_int_tuple(const pickle::Ref& r, const std::string& where, const char* what) {
  if (!r->is_sequence()) throw FormatError(where + ": " + what + " is not a tuple");
  if (r->items.size() > max_dims) {
    throw FormatError(where + ": " + what + " has " + std::to_string(r->items.size()) + " dimensions; at most " +
                      std::to_string(max_dims) + " are supported");
  }
  std::vector<std::int64_t> v;
  for (const auto& it : r->items) {
    const std::int64_t x = pick_int(it, where, what);
    if (x < 0) throw FormatError(where + ": " + what + " has a negative entry " + std::to_string(x));
    v.push_back(x);
  }
  return v;
}

/// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]).
inline pickle::Ref rebuild_tensor(const pickle::Ref& args, const std::string& where) {
  const auto& a = args->items;
  if (a.size() < 4 || a.size() > 7) throw FormatError(where + ": _rebuild_tensor_v2 takes 6 arguments, got " + std::to_string(a.size()));
  if (a[0]->kind != pickle::Kind::storage) throw FormatError(where + ": _rebuild_tensor_v2's first argument is not a storage");
  const std::int64_t offset = pick_int(a[1], where, "storage offset");
  if (offset < 0) throw FormatError(where + ": negative storage offset");
  const auto size = pick_int_tuple(a[2], where, "size");
  const auto stride = pick_int_tuple(a[3], where, "stride");
  if (size.size() != stride.size()) {
    throw FormatError(where + ": size has " + std::to_string(size.size()) + " dimensions but stride has " +
                      std::to_string(stride.size()));
  }
  // Tensor computes element counts and strides in int64 over the extents with zeros counted as
  // 1, so that product must fit even when a zero extent makes the view empty.
  std::int64_t strided = 1;
  for (const std::int64_t s : size) {
    if (__builtin_mul_overflow(strided, std::max<std::int64_t>(s, 1), &strided)) {
      throw FormatError(where + ": tensor of size " + Shape(size).str() + " overflows 64-bit sizes");
    }
  }
  // Highest element index the view touches, with overflow checks, against the storage length.
  std::uint64_t numel = 1, last = static_cast<std::uint64_t>(offset);
  bool overflow = false;
  for (std::size_t i = 0; i < size.size(); ++i) {
    std::uint64_t span = 0;
    const auto s = static_cast<std::uint64_t>(size[i]);
    overflow |= __builtin_mul_overflow(numel, s, &numel);
    if (s > 0) {
      overflow |= __builtin_mul_overflow(s - 1, static_cast<std::uint64_t>(stride[i]), &span);
      overflow |= __builtin_add_overflow(last, span, &last);
    }
  }
  const std::uint64_t storage_numel = a[0]->storage_numel;
  if (overflow || (numel > 0 && last >= storage_numel) || last > static_cast<std::uint64_t>(INT64_MAX)) {
    throw FormatError(where + ": tensor view (offset " + std::to_string(offset) + ") reaches past its storage of " +
                      std::to_string(storage_numel) + " elements");
  }
  auto o = pickle::Object::make(pickle::Kind::tensor);
  o->tensor = Tensor::from_storage(a[0]->storage, a[0]->storage_dtype, Shape(size), Shape(stride), offset);
  return o;
}

/// Parses the archive in `bytes`, creating storages with `make_storage`.
inline StateDict parse_torch_zip(ByteSpan bytes, const std::string& source, const StorageMaker& make_storage) {
  const ZipArchive zip = ZipArchive::parse(bytes, source);
  const ZipEntry* pkl = nullptr;
  for (const auto& e : zip.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      pkl = &e;
      break;
    }
  }
  if (!pkl) throw FormatError("torch checkpoint '" + source + "': no <archive>/data.pkl entry");
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - 8);  // "<archive>/"
  if (const ZipEntry* bo = zip.find(prefix + "byteorder")) {
    const std::string_view order(reinterpret_cast<const char*>(bytes.data() + bo->data_offset), bo->size);
    if (order != "little") throw FormatError("torch checkpoint '" + source + "': byteorder '" + std::string(order) + "' is not supported");
  }
  const std::string where = "torch checkpoint '" + source + "'";

  struct Loaded {
    pickle::Ref obj;
  };
  std::map<std::string, Loaded> storages;
  pickle::Hooks hooks;
  hooks.allow_global = torch_bin_allowed_global;
  hooks.persistent_load = [&](const pickle::Ref& pid) -> pickle::Ref {
    const auto& t = pid->items;
    if (pid->kind != pickle::Kind::tuple || t.size() != 5 || t[0]->kind != pickle::Kind::string || t[0]->text != "storage") {
      throw FormatError(where + ": unsupported persistent id (expected ('storage', type, key, location, numel))");
    }
    if (t[1]->kind != pickle::Kind::global || t[2]->kind != pickle::Kind::string) {
      throw FormatError(where + ": malformed storage persistent id");
    }
    const std::string cls = t[1]->text.substr(t[1]->text.rfind('.') + 1);
    const auto dtype = torch_storage_dtype(cls);
    if (!dtype) throw FormatError(where + ": unsupported storage type " + t[1]->text);
    const std::int64_t numel = pick_int(t[4], where, "storage numel");
    const std::string& key = t[2]->text;
    if (auto it = storages.find(key); it != storages.end()) {
      const auto& s = *it->second.obj;
      if (s.storage_dtype != *dtype || s.storage_numel != static_cast<std::uint64_t>(numel)) {
        throw FormatError(where + ": storage '" + key + "' is referenced with two different types or sizes");
      }
      return it->second.obj;
    }
    const ZipEntry* e = zip.find(prefix + "data/" + key);
    if (!e) throw FormatError(where + ": storage '" + key + "' has no entry " + prefix + "data/" + key);
    std::uint64_t nbytes = 0;
    if (numel < 0 || __builtin_mul_overflow(static_cast<std::uint64_t>(numel), itemsize(*dtype), &nbytes) ||
        nbytes != e->size) {
      throw FormatError(where + ": storage '" + key + "' of " + std::to_string(numel) + " " +
                        std::string(dtype_name(*dtype)) + " elements does not match its " + std::to_string(e->size) +
                        "-byte entry");
    }
    auto o = pickle::Object::make(pickle::Kind::storage);
    o->storage = make_storage(e->data_offset, nbytes, *dtype);
    o->storage_dtype = *dtype;
    o->storage_numel = static_cast<std::uint64_t>(numel);
    storages.emplace(key, Loaded{o});
    return o;
  };
  hooks.reduce = [&](const std::string& fn, const pickle::Ref& args) -> pickle::Ref {
    if (fn == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args, where);
    if (fn == "torch._utils._rebuild_parameter") {
      if (args->items.empty() || args->items[0]->kind != pickle::Kind::tensor) {
        throw FormatError(where + ": _rebuild_parameter without a tensor");
      }
      return args->items[0];
    }
    throw FormatError(where + ": refusing to call " + fn);
  };
  pickle::Unpickler u(bytes.subspan(static_cast<std::size_t>(pkl->data_offset), static_cast<std::size_t>(pkl->size)),
                      source + ":" + pkl->name, hooks);
  const pickle::Ref root = u.load();
  if (root->kind != pickle::Kind::dict) throw FormatError(where + ": top-level object is not a dict of tensors");
  StateDict sd;
  for (const auto& [name, v] : root->entries) {
    if (v->kind != pickle::Kind::tensor) throw FormatError(where + ": value of '" + name + "' is not a tensor");
    sd.insert_or_assign(name, v->tensor);
  }
  return sd;
}

}  // namespace detail

namespace detail {
/// A pickle where the zip should start is torch.save's legacy format: refused by name, not
/// reported as a damaged zip.
inline void refuse_legacy_pickle(ByteSpan bytes, const std::string& source) {
  if (sniff_checkpoint_format(bytes.first(std::min<std::size_t>(bytes.size(), 16)), bytes.size()) ==
      CheckpointFormat::torch_legacy) {
    require_readable({CheckpointFormat::torch_legacy, source});
  }
}
}  // namespace detail

/// Parses a torch.save archive held in memory; tensors own copies of their bytes.
inline StateDict parse_torch_bin(ByteSpan bytes, const std::string& source) {
  detail::refuse_legacy_pickle(bytes, source);
  return detail::parse_torch_zip(bytes, source, [&](std::uint64_t off, std::uint64_t n, DType) {
    Storage s = Storage::allocate(Device::cpu(), static_cast<std::size_t>(n));
    if (n) std::memcpy(s.data(), bytes.data() + off, static_cast<std::size_t>(n));
    return s;
  });
}

/// Loads a torch.save checkpoint through a memory map: tensors are read-only views of the file
/// (a storage whose entry is not aligned for its dtype is copied instead). FormatError for the
/// legacy pickle format, IOError for anything but a regular file.
inline StateDict load_torch_bin(const std::string& path) {
  auto file = map_regular_file(path);
  detail::refuse_legacy_pickle(ByteSpan(file->data(), file->size()), path);
  return detail::parse_torch_zip(ByteSpan(file->data(), file->size()), path,
                                 [&](std::uint64_t off, std::uint64_t n, DType d) {
                                   if (off % itemsize(d) == 0) return file->region(off, n);
                                   Storage s = Storage::allocate(Device::cpu(), static_cast<std::size_t>(n));
                                   if (n) std::memcpy(s.data(), file->data() + off, static_cast<std::size_t>(n));
                                   return s;
                                 });
}

}  // namespace accel::io
