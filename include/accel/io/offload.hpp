// Accelerate's offload folders: one raw `<name>.dat` per tensor plus index.json.
//
//   OffloadIndex ix = OffloadIndex::object();
//   offload_weight(t, "layer.weight", folder, &ix);   save_offload_index(ix, folder);
//   offload_state_dict(folder, state_dict);          // offload_state_dict(folder, sd, progress)
//   Tensor w = load_offloaded_weight(folder + "/layer.weight.dat", ix["layer.weight"]);   // mmap view
//   load_offloaded_weights(model, ix, folder);            // sets each indexed weight of the model
//   OffloadedWeightsLoader loader(state_dict, folder);  loader.at("layer.weight");  loader.locate("layer.weight");
//   PrefixedView view(loader, "layer.");  view.at("weight");
//
// Byte-compatible with accelerate/utils/offload.py: a .dat file is the C-order array as
// np.memmap writes it; index entries are {"dtype": numpy name, "shape": [...]} (bfloat16 stored
// as int16 bytes, dtype "bfloat16"; a 0-d tensor is recorded with shape [] and stored as one
// element); index.json is json.dump(indent=2) merged into any existing index. fp8 tensors, which
// Accelerate cannot offload (numpy has no fp8 type), are written the same way under torch's dtype
// names ("float8_e4m3fn", "float8_e5m2"); Accelerate cannot read those entries. Entries may also
// point into a safetensors file: {"safetensors_file", "weight_name", "dtype"}.
//
// index.json is read in linear time under io/checkpoint_limits.hpp's bounds (a name of at most
// 4096 bytes, at most 10 million entries, nesting at most 8 deep); a name it repeats keeps its first
// place and its last entry, as json.load does.
//
// Every file an index names stays inside the offload folder (io/confined_path.hpp): a tensor name
// whose `<name>.dat` would lead out of it ("../x", "/etc/passwd") or holds a NUL byte is a
// FormatError naming the index and the tensor. `safetensors_file` may be absolute, as Accelerate
// and load_checkpoint_in_model record it; a relative one is taken from the offload folder, where
// transformers would open it from the current directory (which moves with the process, not with
// the folder). Symbolic links inside the folder are followed.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/checkpoint_limits.hpp"
#include "accel/io/confined_path.hpp"
#include "accel/io/file_names.hpp"
#include "accel/io/offload_index_map.hpp"
#include "accel/core/regular_file.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/set_tensor.hpp"

namespace accel::io {

/// numpy's name for `d` as Accelerate records it ("float32", "bfloat16" for the int16-stored
/// bf16). fp8 has no numpy type: its torch name is recorded (Accelerate cannot offload fp8).
inline std::string offload_dtype_name(DType d) { return std::string(dtype_name(d)); }

/// The DType an index "dtype" names (numpy or torch spelling); FormatError naming `tensor`.
inline DType offload_dtype_from_name(const std::string& name, const std::string& tensor) {
  static constexpr std::pair<std::string_view, DType> numpy_only[] = {{"float64", DType::f64}, {"float32", DType::f32},
                                                                      {"float16", DType::f16}, {"int64", DType::i64},
                                                                      {"int32", DType::i32},   {"int16", DType::i16},
                                                                      {"int8", DType::i8},     {"uint8", DType::u8},
                                                                      {"bool", DType::boolean}};
  for (const auto& [n, d] : numpy_only) {
    if (n == name) return d;
  }
  if (auto d = try_dtype_from_string(name)) return *d;
  throw FormatError("offload index entry '" + tensor + "': unknown dtype '" + name + "'");
}

namespace detail {
/// Checks the fields of one index entry (not the file it names); `where` names index and tensor.
inline void validate_offload_entry(const std::string& name, const nlohmann::ordered_json& e, const std::string& where) {
  if (!e.is_object()) throw FormatError(where + ": entry is not an object");
  if (auto f = e.find("safetensors_file"); f != e.end() && !f->is_null()) {
    if (!f->is_string()) throw FormatError(where + ": \"safetensors_file\" is not a string");
    if (auto w = e.find("weight_name"); w != e.end() && !w->is_string()) throw FormatError(where + ": \"weight_name\" is not a string");
    if (auto d = e.find("dtype"); d != e.end()) {
      if (!d->is_string()) throw FormatError(where + ": \"dtype\" is not a string");
      (void)offload_dtype_from_name(d->get<std::string>(), name);
    }
    return;
  }
  auto d = e.find("dtype");
  auto s = e.find("shape");
  if (d == e.end() || !d->is_string()) throw FormatError(where + ": missing string \"dtype\"");
  const DType dtype = offload_dtype_from_name(d->get<std::string>(), name);
  if (s == e.end() || !s->is_array()) throw FormatError(where + ": missing \"shape\" array");
  if (s->size() > max_dims) throw FormatError(where + ": more than " + std::to_string(max_dims) + " dimensions");
  Shape shape;
  for (const auto& x : *s) {
    // Parsed JSON holds unsigned numbers; an index built in memory may hold signed ones.
    const bool ok = x.is_number_unsigned() ? x.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)
                                           : x.is_number_integer() && x.get<std::int64_t>() >= 0;
    if (!ok) {
      throw FormatError(where + ": \"shape\" holds something other than non-negative integers");
    }
    shape.push_back(x.get<std::int64_t>());
  }
  (void)file_tensor_nbytes(shape, dtype, where);
}

inline std::string offload_entry_where(const std::string& source, const std::string& name) {
  return "offload index '" + source + "', tensor '" + printable_entry(name) + "'";
}
}  // namespace detail

/// True when an index entry points into a safetensors file instead of a .dat file.
inline bool is_safetensors_entry(const nlohmann::ordered_json& info) {
  const auto f = info.find("safetensors_file");
  return f != info.end() && !f->is_null();
}

/// The file that holds index entry `name`: `<folder>/<name>.dat`, or the entry's
/// "safetensors_file" (absolute as recorded, relative against `folder`, never the current
/// directory unless `folder` is empty). FormatError naming `source` and the tensor when the path
/// leaves the folder or holds a NUL byte (io/confined_path.hpp).
inline std::filesystem::path offload_entry_path(const std::filesystem::path& folder, const std::string& name,
                                                const nlohmann::ordered_json& info, const std::string& source) {
  const std::string where = detail::offload_entry_where(source, name);
  if (is_safetensors_entry(info)) {
    const auto& file = info.at("safetensors_file");
    if (!file.is_string()) throw FormatError(where + ": \"safetensors_file\" is not a string");
    return confined_path(folder, file.get_ref<const std::string&>(), where, AbsolutePath::allowed);
  }
  return confined_path(folder, name + std::string(offload_data_suffix), where);
}

/// Validates a parsed index: every value is a {"dtype", "shape"} entry or a safetensors entry, and
/// every file it names stays inside the offload folder (offload_entry_path).
inline void validate_offload_index(const OffloadIndex& index, const std::string& source) {
  if (!index.is_object()) throw FormatError("offload index '" + source + "' is not a JSON object");
  for (const auto& [name, e] : index.items()) {
    detail::validate_offload_entry(name, e, detail::offload_entry_where(source, name));
    (void)offload_entry_path({}, name, e, source);
  }
}

/// Parses and validates index.json text (pure: the fuzz entry point).
inline OffloadIndex parse_offload_index(std::string_view text, const std::string& source) {
  if (!is_valid_utf8(text)) throw FormatError("offload index '" + source + "' is not valid UTF-8");
  // As with Python's dict, a repeated name keeps its first place and takes its last entry.
  OffloadIndex j = parse_json_bounded<OffloadIndex>(text, "offload index '" + source + "'",
                                                    checkpoint_json_limits(checkpoint_limits::offload_index_depth),
                                                    JsonDuplicates::keep_last);
  validate_offload_index(j, source);
  return j;
}

/// Reads and validates `<folder>/index.json`.
inline OffloadIndex read_offload_index(const std::string& folder) {
  const std::string path = (std::filesystem::path(folder) / offload_index_name).string();
  return parse_offload_index(read_small_file(path), path);
}

namespace detail {
/// Writes `weight` to `<folder>/<name>.dat` and returns its index entry {"dtype", "shape"}.
inline nlohmann::ordered_json write_offload_dat(const Tensor& weight, const std::string& name, const std::string& folder) {
  if (!weight.defined() || weight.is_meta()) throw ValueError("offload_weight: tensor '" + name + "' has no data");
  const std::filesystem::path file =
      offload_entry_path(folder, name, nlohmann::ordered_json::object(),
                         (std::filesystem::path(folder) / offload_index_name).string());
  const Tensor host = (weight.is_cpu() && weight.is_contiguous()) ? weight : weight.to(Device::cpu()).contiguous();
  AtomicFile f(file.string());
  f.write(host.data_ptr(), host.nbytes());
  f.commit();
  nlohmann::ordered_json shape = nlohmann::ordered_json::array();
  for (auto e : host.shape()) shape.push_back(static_cast<std::uint64_t>(e));
  return {{"dtype", offload_dtype_name(weight.dtype())}, {"shape", std::move(shape)}};
}
}  // namespace detail

/// Writes `weight` to `<folder>/<name>.dat` (C order, raw little-endian bytes) and, when `index`
/// is given, records {"dtype", "shape"} in it. Returns `index`. A name whose file would leave the
/// folder is a FormatError, as it is when read back. Each call looks `name` up in `index` key by
/// key (ordered_json); to offload many weights, pass an OffloadIndexMap instead.
inline OffloadIndex* offload_weight(const Tensor& weight, const std::string& name, const std::string& folder,
                                    OffloadIndex* index = nullptr) {
  auto entry = detail::write_offload_dat(weight, name, folder);
  if (index) (*index)[name] = std::move(entry);
  return index;
}

/// offload_weight recording the entry in `index` in O(log n).
inline OffloadIndexMap& offload_weight(const Tensor& weight, const std::string& name, const std::string& folder,
                                       OffloadIndexMap& index) {
  index.set(name, detail::write_offload_dat(weight, name, folder));
  return index;
}

/// Accelerate's json.dump(index, indent=2): ASCII-escaped, no trailing newline.
inline std::string offload_index_json(const OffloadIndex& index) { return index.dump(2, ' ', true); }

/// Merges `index` into `<folder>/index.json` (existing names keep their place, new ones append);
/// does nothing for an empty index.
inline void save_offload_index(const OffloadIndex& index, const std::string& folder) {
  if (index.is_null() || index.empty()) return;
  const auto path = std::filesystem::path(folder) / offload_index_name;
  OffloadIndexMap merged;
  if (std::filesystem::is_regular_file(path)) merged = OffloadIndexMap(parse_offload_index(read_small_file(path.string()), path.string()));
  for (const auto& [k, v] : index.items()) merged.set(k, v);
  write_file_atomic(path.string(), offload_index_json(merged.index()));
}

/// Hears the bytes written so far and the total, once before the first tensor and after each.
using OffloadProgress = std::function<void(std::size_t done_bytes, std::size_t total_bytes)>;

/// Offloads every tensor of `state_dict` into `folder` (created if needed) and saves the index.
/// `progress`, when given, follows the bytes written (Accelerate's has none: a folder of tens of
/// GB takes minutes to write).
inline void offload_state_dict(const std::string& folder, const StateDict& state_dict, const OffloadProgress& progress = {}) {
  std::filesystem::create_directories(folder);
  std::size_t total = 0, done = 0;
  if (progress) {
    for (const auto& [name, t] : state_dict) total += t.nbytes();
    progress(0, total);
  }
  OffloadIndexMap index;
  for (const auto& [name, t] : state_dict) {
    offload_weight(t, name, folder, index);
    if (progress) progress(done += t.nbytes(), total);
  }
  save_offload_index(index.index(), folder);
}

/// Maps `weight_file` and views it as the tensor `info` describes (no copy). The file must be a
/// regular file holding at least the bytes the entry needs (np.memmap accepts a longer file too).
/// The path is the caller's: offload_entry_path gives the one an index entry names.
inline Tensor load_offloaded_weight(const std::string& weight_file, const nlohmann::ordered_json& info) {
  detail::validate_offload_entry(weight_file, info, "offloaded weight '" + printable_entry(weight_file) + "'");
  const DType dtype = offload_dtype_from_name(info.at("dtype").get<std::string>(), weight_file);
  Shape shape;
  for (const auto& x : info.at("shape")) shape.push_back(x.get<std::int64_t>());
  const std::uint64_t need = detail::file_tensor_nbytes(shape, dtype, "offloaded weight '" + weight_file + "'");
  auto file = map_regular_file(weight_file);
  if (file->size() < need) {
    throw FormatError("offloaded weight '" + weight_file + "' holds " + std::to_string(file->size()) + " bytes; " +
                      std::string(dtype_name(dtype)) + " shape " + shape.str() + " needs " + std::to_string(need));
  }
  return Tensor::from_storage(file->region(0, need), dtype, shape);
}

/// The tensor of index entry `name`: a mapped view of `<folder>/<name>.dat`, or the entry's
/// safetensors tensor converted to its "dtype" when one is recorded. Paths as offload_entry_path.
inline Tensor load_offload_entry(const std::string& name, const nlohmann::ordered_json& info, const std::string& folder) {
  const std::string source = (std::filesystem::path(folder) / offload_index_name).string();
  const std::filesystem::path file = offload_entry_path(folder, name, info, source);
  if (is_safetensors_entry(info)) {
    const auto f = SafetensorsFile::open(file.string());
    Tensor t = f.tensor(info.value("weight_name", name));
    if (info.contains("dtype")) t = t.to(offload_dtype_from_name(info["dtype"].get<std::string>(), name));
    return t;
  }
  return load_offloaded_weight(file.string(), info);
}

/// Every weight of an offload folder, by name, as zero-copy views.
inline StateDict load_offloaded_weights(const std::string& folder) {
  const OffloadIndex index = read_offload_index(folder);
  StateDict out;
  for (const auto& [name, info] : index.items()) out.insert_or_assign(name, load_offload_entry(name, info, folder));
  return out;
}

/// Accelerate's load_offloaded_weights(model, index, offload_folder): puts every weight of `index`
/// into `model` on the CPU through set_module_tensor_to_device (so each takes the model's dtype and
/// tied names follow). Weights stay mapped views of the folder's files where no cast is needed.
/// Unlike Accelerate, safetensors entries are honoured too. KeyError when the model lacks a name.
inline void load_offloaded_weights(nn::Module& model, const OffloadIndex& index, const std::string& offload_folder) {
  if (index.is_null() || index.empty()) return;
  validate_offload_index(index, (std::filesystem::path(offload_folder) / offload_index_name).string());
  for (const auto& [name, info] : index.items()) {
    nn::set_module_tensor_to_device(model, name, Device::cpu(), load_offload_entry(name, info, offload_folder));
  }
}

/// Where one offloaded weight's bytes lie: `nbytes` raw little-endian bytes of a C-order `dtype`
/// tensor of `shape`, at `offset` in `file`; `target` is the dtype the weight is read as.
struct WeightLocation {
  std::string name;
  std::string file;
  std::uint64_t offset = 0;
  std::uint64_t nbytes = 0;
  DType dtype = DType::f32;
  Shape shape;
  DType target = DType::f32;
};

/// A read-only map over weights held in memory and on disk: the in-memory state dict answers
/// first, then the offload index (a .dat file in `save_folder` or a safetensors entry). Tensors
/// are loaded on each lookup (mapped, so cheap); safetensors files stay open once used.
class OffloadedWeightsLoader {
 public:
  /// ValueError when all three sources are absent. The index defaults to save_folder/index.json.
  /// Relative safetensors entries are taken from save_folder (the current directory without one).
  OffloadedWeightsLoader(std::optional<StateDict> state_dict, std::optional<std::string> save_folder,
                         std::optional<OffloadIndex> index = std::nullopt, std::optional<Device> device = std::nullopt)
      : state_(state_dict.value_or(StateDict{})), folder_(std::move(save_folder)), device_(device) {
    if (!state_dict && !folder_ && !index) {
      throw ValueError("Need either a `state_dict`, a `save_folder` or an `index` containing offloaded weights.");
    }
    if (index) {
      source_ = "<index argument>";
      validate_offload_index(*index, source_);
      index_ = OffloadIndexMap(std::move(*index));
    } else if (folder_) {
      source_ = (std::filesystem::path(*folder_) / offload_index_name).string();
      index_ = OffloadIndexMap(read_offload_index(*folder_));
    }
    keys_ = state_.keys();
    for (const auto& [k, entry] : index_.index().items()) {
      if (!state_.contains(k)) keys_.push_back(k);
    }
  }

  /// State-dict names first, then index names not already present.
  const std::vector<std::string>& keys() const noexcept { return keys_; }
  std::size_t size() const noexcept { return keys_.size(); }
  bool contains(std::string_view key) const { return state_.contains(key) || index_.contains(key); }
  const OffloadIndex& index() const noexcept { return index_.index(); }

  /// Where the bytes of weight `key` lie on disk, for readers that fetch them themselves (the
  /// prefetching offload); nullopt when the weight is held in memory (the state dict). The
  /// location's dtype is the stored one; `dtype` is what `at` converts it to. KeyError when unknown.
  std::optional<WeightLocation> locate(std::string_view key) const {
    if (state_.contains(key)) return std::nullopt;
    const std::string k(key);
    const auto [info, file] = entry(k);
    if (is_safetensors_entry(info)) {
      const SafetensorsFile& f = safetensors(file.string());
      const std::string weight = info.value("weight_name", k);
      const auto& t = f.info(weight);
      const DType target = info.contains("dtype") ? offload_dtype_from_name(info["dtype"].get<std::string>(), k) : t.dtype;
      return WeightLocation{k, file.string(), f.header().data_start + t.begin, t.nbytes(), t.dtype, t.shape, target};
    }
    if (!folder_) throw ValueError("offloaded weight '" + k + "' is a .dat entry but the loader has no save_folder");
    detail::validate_offload_entry(k, info, detail::offload_entry_where(source_, k));
    const DType dtype = offload_dtype_from_name(info.at("dtype").get<std::string>(), k);
    Shape shape;
    for (const auto& x : info.at("shape")) shape.push_back(x.get<std::int64_t>());
    const std::uint64_t n = detail::file_tensor_nbytes(shape, dtype, detail::offload_entry_where(source_, k));
    return WeightLocation{k, file.string(), 0, n, dtype, shape, dtype};
  }
  /// The device `at` moves weights to (nullopt: where they are read).
  const std::optional<Device>& device() const noexcept { return device_; }

  /// The weight `key` (on `device` when one was given); KeyError when unknown.
  Tensor at(std::string_view key) const {
    if (state_.contains(key)) return state_.at(key);
    const std::string k(key);
    const auto [info, file] = entry(k);
    if (is_safetensors_entry(info)) {
      const SafetensorsFile& f = safetensors(file.string());
      Tensor t = f.tensor(info.value("weight_name", k));
      if (info.contains("dtype")) t = t.to(offload_dtype_from_name(info["dtype"].get<std::string>(), k));
      return device_ ? t.to(*device_) : t;
    }
    if (!folder_) throw ValueError("offloaded weight '" + k + "' is a .dat entry but the loader has no save_folder");
    Tensor t = load_offloaded_weight(file.string(), info);
    return device_ ? t.to(*device_) : t;
  }
  Tensor operator[](std::string_view key) const { return at(key); }

 private:
  // The index entry of `k` and the file it names; KeyError when unknown.
  std::pair<const nlohmann::ordered_json&, std::filesystem::path> entry(const std::string& k) const {
    const nlohmann::ordered_json* found = index_.find(k);
    if (!found) throw KeyError("offloaded weights have no entry named '" + k + "'");
    return {*found, offload_entry_path(folder_.value_or(""), k, *found, source_)};
  }
  const SafetensorsFile& safetensors(const std::string& path) const {
    std::lock_guard lock(*mutex_);
    auto it = files_->find(path);
    if (it == files_->end()) it = files_->emplace(path, SafetensorsFile::open(path)).first;
    return it->second;
  }

  StateDict state_;
  std::optional<std::string> folder_;
  std::string source_;  // names the index in errors
  OffloadIndexMap index_;
  std::optional<Device> device_;
  std::vector<std::string> keys_;
  std::shared_ptr<std::mutex> mutex_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::map<std::string, SafetensorsFile>> files_ = std::make_shared<std::map<std::string, SafetensorsFile>>();
};

/// The weights of one module: `at("weight")` reads `prefix + "weight"` from the underlying map
/// (Accelerate's PrefixedDataset). Unlike Accelerate, keys() returns the names without the prefix
/// and size() counts only them, so iterating and looking up agree.
template <class Map>
class PrefixedView {
 public:
  PrefixedView(const Map& base, std::string prefix) : base_(&base), prefix_(std::move(prefix)) {}

  Tensor at(std::string_view key) const { return base_->at(prefix_ + std::string(key)); }
  Tensor operator[](std::string_view key) const { return at(key); }
  bool contains(std::string_view key) const { return base_->contains(prefix_ + std::string(key)); }
  /// Names under the prefix, the prefix removed.
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& k : base_->keys()) {
      if (k.size() >= prefix_.size() && k.compare(0, prefix_.size(), prefix_) == 0) out.push_back(k.substr(prefix_.size()));
    }
    return out;
  }
  std::size_t size() const { return keys().size(); }
  const std::string& prefix() const noexcept { return prefix_; }

 private:
  const Map* base_;
  std::string prefix_;
};

}  // namespace accel::io
