// load_checkpoint_in_model(model, checkpoint, options): Accelerate's loader of a (sharded)
// checkpoint into a model, each weight sent to its device-map placement as it is read.
//
//   auto model = [] { auto s = nn::init_empty_weights(); return build_model(); }();   // meta
//   DeviceMap dm;  dm.set("embed", 0);  dm.set("layers", Placement::cpu());  dm.set("head", Placement::disk());
//   LoadResult r = load_checkpoint_in_model(*model, "ckpt/", {.device_map = dm, .offload_folder = "offload"});
//
// `checkpoint` is a safetensors or torch .bin file, a sharded index (.json), or a folder, searched
// by io::resolve_checkpoint_folder: model.safetensors, model.safetensors.index.json,
// pytorch_model.bin, pytorch_model.bin.index.json, then exactly one other *.index.json. Files are
// read as their bytes show (io/checkpoint_format.hpp), not as their names say. Each tensor is read once (safetensors: a view of the mapped file), converted
// once and placed once. Weights placed on "disk" go to `offload_folder` in Accelerate's format
// (merged into its index.json); a weight already stored in a safetensors shard is recorded there
// as {"safetensors_file", "weight_name", "dtype"} and no bytes are copied. Tied parameters stay
// tied. Missing and unexpected keys are returned; `strict` turns them into a KeyError.
//
// Differences from Accelerate, each where it drops or mis-types data or takes a worse file:
// - A folder holding both model.safetensors and pytorch_model.bin loads model.safetensors
//   (transformers' order); Accelerate takes pytorch_model.bin first. Both are one model saved
//   twice; the safetensors copy is mapped without a copy and runs no pickle. A named index beside
//   another *.index.json is taken too, where Accelerate raises.
// - `dtype` applies with or without a device map (Accelerate ignores it without one), and a model
//   on meta without a device map is loaded on the CPU (torch's load_state_dict leaves it on meta).
// - A disk weight is stored, and its meta tensor typed, in the dtype it would have in memory
//   (`dtype`, else the model's); Accelerate keeps the checkpoint's dtype for disk weights only.
// - A buffer placed on "disk" without `offload_buffers` is loaded on the CPU (Accelerate skips it
//   and leaves it unloaded).
// - keep_in_fp32_modules applies whatever `dtype` is asked for (Accelerate: float16 only) and
//   matches whole dotted components ("wo" keeps "layers.0.wo.weight", not "two.weight"). The
//   modules it names are marked (nn::Module::keeps_fp32), so that they compute in float32 inside a
//   model compiled for a lower precision, as transformers runs them.
// - Missing keys are reported with a device map too; a name tied to a loaded name is not missing.
// - `offload_8bit_bnb` concerns bitsandbytes int8 layers only, as in Accelerate; the other
//   quantized layers placed on "disk" (bitsandbytes 4-bit included, which Accelerate refuses
//   there) always go to the offload folder quantized.
// - `disable_mmap` (Accelerate has none; diffusers reads the whole file into memory instead): the
//   files are still mapped to be read, and what changes is where CPU weights live. Decoding reads
//   every weight per token, and each 4 KiB page of a mapping costs a TLB entry. Where the kernel
//   maps the file's page cache in 2 MiB folios (Linux 6.18 here mapped 82% of a 944 MB
//   checkpoint so) mapped weights decode nearly as fast; copies of 4 MiB and more get huge pages
//   from the allocator whatever the cache holds (where THP is not "never"). Measured on a
//   483M-parameter bf16 LLaMA, 2 cores: `accel run` 29.8-31.4 tokens/s mapped, 32.1-32.5 copied
//   (alternating runs, one process each), the 64-token prompt 0.11-0.16 s against 0.08 s;
//   bench_decode, both in one process after a warm-up, 31.9-32.2 and 32.1. The copy costs about
//   1 s per GB of load time here (the first touch of new memory; mapping a cached file costs
//   nothing).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/progress.hpp"
#include "accel/io/gguf_model.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/set_tensor.hpp"
#include "accel/nn/tied.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/dispatch/quantizer.hpp"

namespace accel::dispatch {

/// Keyword arguments of load_checkpoint_in_model, with Accelerate's names and defaults.
struct LoadCheckpointOptions {
  /// Module or tensor name -> placement; nullopt keeps each tensor where the model holds it.
  std::optional<DeviceMap> device_map{};
  /// Where "disk" weights go; required when the device map holds "disk".
  std::optional<std::string> offload_folder{};
  /// Floating tensors are converted to it; integer and bool tensors never are.
  std::optional<DType> dtype{};
  /// Park CPU weights in a temporary offload folder while the shards load, then load them back.
  bool offload_state_dict = false;
  /// Offload buffers placed on "disk" too (otherwise they are loaded on the CPU).
  bool offload_buffers = false;
  /// Modules whose floating weights stay float32 when `dtype` is given.
  std::vector<std::string> keep_in_fp32_modules{};
  /// Missing or unexpected keys throw KeyError (after the matching keys are loaded, as torch does).
  bool strict = false;
  /// A progress bar on stderr over several shards, only when stderr is a terminal.
  bool show_progress = true;
  /// Called after each tensor with the checkpoint bytes read so far and the files' total size
  /// (done reaches total as the last file ends): for a caller that draws its own progress.
  std::function<void(std::size_t done_bytes, std::size_t total_bytes)> progress{};
  /// Copy the CPU weights that would stay views of a mapped checkpoint file (no dtype change)
  /// into memory of their own, in huge pages where the kernel grants them (diffusers' name).
  /// Without it those views' pages are mapped when loading ends (populate_mapped_pages, as
  /// llama.cpp maps with MAP_POPULATE), not faulted in a few at a time by the first forward: on
  /// the 483M F16 GGUF model the first 64-token prompt spent about a tenth of its time so.
  bool disable_mmap = false;
  /// Where Accelerate's warnings go (none when null).
  std::ostream* warnings = nullptr;
  /// Consulted for every checkpoint tensor (dispatch/quantizer.hpp): a tensor it claims is stored by
  /// its create_quantized_param on the tensor's device instead of being set as is; a claimed name
  /// the model has no cell for (a state tensor such as "<m>.weight.absmax") goes to it on the
  /// device of the weight it belongs to, and is not unexpected. The model must already be its
  /// preprocess_model's output. A quantized layer placed on "disk" (its weight quantized on load,
  /// or stored quantized) is filled on the CPU, then the tensors the quantizer filled in its cells
  /// go to offload_folder, a bitsandbytes int8 weight with its SCB beside it as Accelerate writes
  /// them. Not in Accelerate's signature (transformers and Diffusers thread it through their own
  /// loading loop).
  std::optional<AnyQuantizer> quantizer{};
  /// A bitsandbytes int8 layer (Linear8bitLt) placed on "disk" whose checkpoint weight is float:
  /// true quantizes it on the CPU and offloads the codes with SCB beside them (Accelerate's
  /// quantize_and_offload_8bit; what load_and_quantize_model and load_pretrained_causal_lm ask);
  /// false, Accelerate's default, offloads the float weight as it is (in `dtype`, [out, in]) and
  /// the layer quantizes it on each call its hook brings it in: the same outputs, a folder twice
  /// the size and the quantization repeated per call. A weight stored int8 is offloaded as stored.
  bool offload_8bit_bnb = false;
};

/// What load_checkpoint_in_model did.
struct LoadResult {
  /// Model state-dict names that no checkpoint tensor filled, in the model's order.
  std::vector<std::string> missing_keys{};
  /// Checkpoint names the model does not have, in the order met.
  std::vector<std::string> unexpected_keys{};
  /// The entries this call added to `<offload_folder>/index.json`.
  io::OffloadIndex offload_index = io::OffloadIndex::object();
  /// The files read, in reading order.
  std::vector<std::string> checkpoint_files{};
};

/// True when `name` lies in one of `modules`: a module name matches whole dotted components of
/// the tensor name, anywhere in it ("lm_head" keeps "lm_head.weight" and "model.lm_head.bias").
inline bool in_keep_in_fp32_modules(std::string_view name, const std::vector<std::string>& modules) {
  for (const auto& m : modules) {
    if (m.empty()) continue;
    for (std::size_t at = name.find(m); at != std::string_view::npos; at = name.find(m, at + 1)) {
      const bool starts = at == 0 || name[at - 1] == '.';
      const std::size_t end = at + m.size();
      if (starts && (end == name.size() || name[end] == '.')) return true;
    }
  }
  return false;
}

/// `dtype` for each floating-point tensor of `named` (name, tensor pairs: a state_dict or
/// named_parameters) that lies in one of `modules`, as in_keep_in_fp32_modules matches: the
/// planner's special_dtypes for modules kept float32 or left unquantized.
template <class Named>
std::map<std::string, DType, std::less<>> dtypes_in_modules(const Named& named, const std::vector<std::string>& modules,
                                                            DType dtype) {
  std::map<std::string, DType, std::less<>> out;
  for (const auto& [name, t] : named) {
    if (t.is_floating_point() && in_keep_in_fp32_modules(name, modules)) out.emplace(name, dtype);
  }
  return out;
}

namespace detail {

/// A folder made by mkdtemp, removed with everything in it when the guard dies.
class TempFolder {
 public:
  explicit TempFolder(const std::string& stem) {
    std::string tmpl = (std::filesystem::temp_directory_path() / (stem + "XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) throw IOError("cannot create a temporary folder '" + tmpl + "'");
    path_ = tmpl;
  }
  ~TempFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

inline std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out;
}

/// One load_checkpoint_in_model call: the model's names, what has been filled, and the indexes.
class CheckpointLoader {
 public:
  CheckpointLoader(nn::Module& model, const LoadCheckpointOptions& o) : model_(model), o_(o) {
    for (auto& [name, cell] : model.state_dict_cells()) {
      cells_.emplace(name, cell);
      order_.push_back(name);
    }
    for (const auto& [name, t] : model.named_buffers()) buffers_.insert(name);
    if (o.offload_state_dict) state_dict_folder_.emplace("accel_offload_state_dict_");
  }

  /// Reads one checkpoint file (safetensors or torch .bin, by its bytes) and places each tensor;
  /// `placed` hears each tensor's bytes.
  void load_file(const std::string& file, const std::function<void(std::size_t)>& placed = {}) {
    const CheckpointFormat format = io::detect_checkpoint_format(file);
    if (format == CheckpointFormat::safetensors) {
      const auto f = io::SafetensorsFile::open(file);
      io::check_safetensors_format(f);
      const std::string abs = std::filesystem::absolute(file).lexically_normal().string();
      for (const auto& name : f.keys()) {
        const Tensor t = f.tensor(name);
        place(name, t, file, &abs);
        if (placed) placed(t.nbytes());
      }
    } else if (format == CheckpointFormat::torch_bin) {
      for (const auto& [name, t] : io::load_torch_bin(file)) {
        place(name, t, file, nullptr);
        if (placed) placed(t.nbytes());
      }
    } else if (format == CheckpointFormat::gguf) {
      // Under HF names and in HF layout (io/gguf_model.hpp). A block-typed tensor whose model cell
      // holds packed bytes (a quantizer swapped its layer) arrives packed; otherwise dequantized.
      const auto ck = io::GgufCheckpoint::open(file);
      for (const auto& name : ck.keys()) {
        const auto it = cells_.find(name);
        const bool packed = !io::ggml_type_info(ck.info(name).type).plain && it != cells_.end() &&
                            it->second->data.defined() && it->second->data.dtype() == DType::u8;
        place(name, packed ? ck.packed(name) : ck.tensor(name), file, nullptr);
        if (placed) placed(static_cast<std::size_t>(ck.info(name).nbytes));
      }
    } else {
      io::require_readable({format, file});
      throw FormatError("'" + file + "' is " + std::string(io::checkpoint_format_info(format).description) +
                        ", not a checkpoint file load_checkpoint_in_model reads (safetensors, a torch .bin or GGUF)");
    }
  }

  /// A tensor the quantizer claims: its shape is the quantizer's to check, and it stores it.
  void place_quantized(const std::string& name, nn::Parameter* cell, const Tensor& old, const Tensor& value,
                       const std::string& file) {
    if (old.defined() && !o_.quantizer->check_quantized_param_shape(name, old, value)) {
      throw ShapeError("loading '" + file + "': quantized tensor '" + name + "' has shape " + value.shape().str() +
                       ", which " + o_.quantizer->name() + " cannot store in the model's " + old.shape().str());
    }
    const Placement where = placement_of(name, old, file);
    loaded_.insert(cell);
    if (materialised_.count(cell) || held_elsewhere(where)) return;
    if (where.is_disk()) {
      o_.quantizer->create_quantized_param(model_, value, name, Device::cpu());
      offload_filled(owner_of(name));
      return;
    }
    o_.quantizer->create_quantized_param(model_, value, name, where.device());
    if (!where.device().is_meta()) materialised_.insert(cell);
  }

  /// A quantized layer placed on disk, once the quantizer has filled it on the CPU (a weight
  /// quantized on load at once; a stored one when its state has arrived): its parameters (codes,
  /// packed bytes, scales) go to the offload folder and are parked on meta, as a float disk
  /// weight's are, and the layer's hooks read them back per call. Its buffers (bitsandbytes' SCB,
  /// a float per output row) are written beside them, as Accelerate offloads SCB with an int8
  /// weight, and stay in memory too, offload_buffers or not: the quantizer that filled them
  /// answers for them (update_missing_keys). State kept outside the module's cells (a 4-bit quant
  /// state) stays in memory. Called again as later state tensors arrive: what is on meta or
  /// written is skipped.
  void offload_filled(const std::string& owner) {
    const nn::Module& m = model_.get_submodule(owner);
    auto full = [&](const std::string& leaf) { return owner.empty() ? leaf : owner + "." + leaf; };
    for (auto& [leaf, p] : m.named_parameter_cells("", /*recurse=*/false)) {
      if (!p->data.defined() || p->data.is_meta()) continue;
      io::offload_weight(p->data, full(leaf), *o_.offload_folder, offload_index_);
      p->data = Tensor::empty(p->data.shape(), p->data.dtype(), Device::meta());
    }
    for (auto& [leaf, p] : m.named_buffer_cells("", /*recurse=*/false)) {
      if (!p->data.defined() || p->data.is_meta() || offload_index_.contains(full(leaf))) continue;
      io::offload_weight(p->data, full(leaf), *o_.offload_folder, offload_index_);
    }
  }

  /// Saves the offload index, loads back the parked CPU weights and lists the missing keys.
  LoadResult finish(std::vector<std::string> files) {
    result_.offload_index = std::move(offload_index_).release();
    if (o_.offload_folder) io::save_offload_index(result_.offload_index, *o_.offload_folder);
    if (state_dict_folder_) io::load_offloaded_weights(model_, state_dict_index_.index(), state_dict_folder_->path());
    for (const auto& name : order_) {
      nn::Parameter& cell = *cells_.at(name);
      const bool view = cell.data.defined() && cell.data.is_cpu() && cell.data.storage().kind() == MemoryKind::mapped;
      if (!view || !loaded_.count(&cell)) continue;
      if (o_.disable_mmap) {
        cell.data = cell.data.clone();  // a tied cell is copied once
      } else {
        populate_mapped_pages(cell.data.data_ptr(), cell.data.nbytes());
      }
    }
    for (const auto& name : order_) {
      if (!loaded_.count(cells_.at(name).get())) result_.missing_keys.push_back(name);
    }
    if (o_.quantizer) {
      result_.missing_keys = o_.quantizer->update_missing_keys(model_, std::move(result_.missing_keys), "");
      result_.unexpected_keys = o_.quantizer->update_unexpected_keys(model_, std::move(result_.unexpected_keys), "");
    }
    result_.checkpoint_files = std::move(files);
    return std::move(result_);
  }

 private:
  void place(const std::string& name, const Tensor& value, const std::string& file, const std::string* safetensors_path) {
    auto it = cells_.find(name);
    if (it == cells_.end()) {
      // A backend's state tensor (bitsandbytes' "<m>.weight.absmax", ...): the model has no cell
      // for it; the backend stores it beside its layer's weight, on that weight's device.
      if (o_.quantizer && o_.quantizer->check_if_quantized_param(model_, value, name)) {
        // On the device of the weight it belongs to (the CPU when none is found).
        const std::optional<std::string> weight = owner_cell(name);
        const Placement where = weight ? placement_of(*weight, cells_.at(*weight)->data, file) : Placement::cpu();
        if (held_elsewhere(where)) return;
        o_.quantizer->create_quantized_param(model_, value, name, where.is_disk() ? Device::cpu() : where.device());
        if (where.is_disk()) offload_filled(owner_of(*weight));
        return;
      }
      if (unexpected_seen_.insert(name).second) result_.unexpected_keys.push_back(name);
      return;
    }
    nn::Parameter* cell = it->second.get();
    const Tensor old = cell->data;
    if (o_.quantizer && o_.quantizer->check_if_quantized_param(model_, value, name)) {
      if (!offload_unquantized(name, cell, value, file, safetensors_path)) place_quantized(name, cell, old, value, file);
      return;
    }
    if (old.defined() && old.shape() != value.shape()) {
      const std::string owner = owner_of(name);
      throw ShapeError("loading '" + file + "': tensor '" + name + "' has shape " + value.shape().str() +
                       " in the checkpoint but shape " + old.shape().str() + " in the model (module '" + owner + "', " +
                       model_.get_submodule(owner).class_name() + ")");
    }
    const Placement where = placement_of(name, old, file);
    std::optional<DType> new_dtype;
    if (o_.dtype && value.is_floating_point()) {
      new_dtype = in_keep_in_fp32_modules(name, o_.keep_in_fp32_modules) ? DType::f32 : *o_.dtype;
    }
    // The dtype the weight ends up in, wherever it lives: set_module_tensor_to_device's rule.
    const DType target = new_dtype.value_or(old.defined() ? old.dtype() : value.dtype());
    loaded_.insert(cell);

    const bool to_disk = where.is_disk() && (o_.offload_buffers || !buffers_.count(name));
    if (to_disk) {
      park_on_meta(cell, value, target);
      if (safetensors_path) {
        offload_index_.set(name, {{"safetensors_file", *safetensors_path}, {"weight_name", name},
                                  {"dtype", std::string(dtype_name(target))}});
      } else {
        io::offload_weight(value.to(Device::cpu(), target), name, *o_.offload_folder, offload_index_);
      }
      return;
    }
    const Device device = where.is_disk() ? Device::cpu() : where.device();
    if (materialised_.count(cell)) return;  // a tied name already filled this cell
    if (device.is_cpu() && state_dict_folder_) {
      park_on_meta(cell, value, target);
      io::offload_weight(value.to(Device::cpu(), target), name, state_dict_folder_->path(), state_dict_index_);
      return;
    }
    nn::set_module_tensor_to_device(model_, name, device, value, new_dtype);
    if (!device.is_meta()) materialised_.insert(cell);
  }

  /// Without offload_8bit_bnb, a claimed weight of a layer placed on disk that the quantizer
  /// gives back as a float tensor (bitsandbytes int8: [out, in], whatever the checkpoint's layout)
  /// goes to the offload folder as a float disk weight does, its cell parked on meta in that
  /// dtype, and the layer's buffers (made ready by the quantizer) with it under offload_buffers.
  /// True when `name` was such a weight.
  bool offload_unquantized(const std::string& name, nn::Parameter* cell, const Tensor& value, const std::string& file,
                           const std::string* safetensors_path) {
    if (o_.offload_8bit_bnb || materialised_.count(cell) || !placement_of(name, cell->data, file).is_disk()) return false;
    const std::optional<Tensor> f = o_.quantizer->offload_unquantized(model_, value, name);
    if (!f) return false;
    DType target = f->dtype();
    if (o_.dtype) target = in_keep_in_fp32_modules(name, o_.keep_in_fp32_modules) ? DType::f32 : *o_.dtype;
    loaded_.insert(cell);
    cell->data = Tensor::empty(f->shape(), target, Device::meta());
    if (safetensors_path && f->data_ptr() == value.data_ptr() && f->shape() == value.shape() && f->is_contiguous()) {
      offload_index_.set(name, {{"safetensors_file", *safetensors_path}, {"weight_name", name},
                                {"dtype", std::string(dtype_name(target))}});
    } else {
      io::offload_weight(f->to(Device::cpu(), target).contiguous(), name, *o_.offload_folder, offload_index_);
    }
    if (!o_.offload_buffers) return true;
    const std::string owner = owner_of(name);
    for (auto& [leaf, p] : model_.get_submodule(owner).named_buffer_cells("", /*recurse=*/false)) {
      const std::string full = owner.empty() ? leaf : owner + "." + leaf;
      if (p->data.defined() && !p->data.is_meta() && !offload_index_.contains(full))
        io::offload_weight(p->data, full, *o_.offload_folder, offload_index_);
    }
    return true;
  }

  /// The weight a state tensor belongs to: the nearest enclosing name that is a cell ("<m>.weight"
  /// of "<m>.weight.absmax"), or the "weight" of the nearest enclosing module ("<m>.SCB").
  std::optional<std::string> owner_cell(const std::string& name) const {
    for (std::string p = name; p.rfind('.') != std::string::npos;) {
      p.resize(p.rfind('.'));
      for (const std::string& c : {p, p + ".weight"}) {
        if (cells_.count(c)) return c;
      }
    }
    return std::nullopt;
  }
  /// The module holding the cell `name`.
  static std::string owner_of(const std::string& name) {
    const auto dot = name.rfind('.');
    return dot == std::string::npos ? "" : name.substr(0, dot);
  }

  Placement placement_of(const std::string& name, const Tensor& old, const std::string& file) const {
    if (!o_.device_map) return Placement(old.defined() && !old.is_meta() ? old.device() : Device::cpu());
    if (auto p = o_.device_map->lookup(name)) return *p;
    throw ValueError(name + " doesn't have any device set. (loading '" + file + "' into " + model_.class_name() + ")");
  }

  /// A placement on meta: another process of a split model holds the weight (dist/split_model.hpp),
  /// so a quantizer neither quantizes nor stores it here; the swapped layer's meta cells stay.
  static bool held_elsewhere(const Placement& where) { return where.kind() == Placement::Kind::meta; }

  // A real tensor loaded into a tied cell wins over a meta placeholder of another of its names.
  void park_on_meta(nn::Parameter* cell, const Tensor& value, DType target) {
    if (!materialised_.count(cell)) cell->data = Tensor::empty(value.shape(), target, Device::meta());
  }

  nn::Module& model_;
  const LoadCheckpointOptions& o_;
  std::unordered_map<std::string, nn::ParameterPtr> cells_;
  std::vector<std::string> order_;
  std::unordered_set<std::string> buffers_;
  std::unordered_set<const nn::Parameter*> loaded_, materialised_;
  std::unordered_set<std::string> unexpected_seen_;
  std::optional<TempFolder> state_dict_folder_;
  io::OffloadIndexMap offload_index_, state_dict_index_;
  LoadResult result_;
};

/// Accelerate's check_tied_parameters_on_same_device, as a warning on `out`.
inline void warn_tied_on_different_devices(const std::vector<std::vector<std::string>>& tied, const DeviceMap& dm,
                                           std::ostream* out) {
  if (!out) return;
  for (const auto& group : tied) {
    std::string listing;
    std::set<std::string> devices;
    for (const auto& name : group) {
      const auto p = dm.lookup(name);
      const std::string d = p ? p->str() : "None";
      devices.insert(d);
      listing += (listing.empty() ? "'" : ", '") + name + "': " + d;
    }
    if (devices.size() > 1) {
      *out << "Tied parameters are on different devices: {" << listing
           << "}. Please modify your custom device map or set `device_map='auto'`.\n";
    }
  }
}

}  // namespace detail

/// Loads `checkpoint` into `model` following `options` (see the header comment). ValueError for a
/// bad checkpoint path, a disk placement without offload_folder, a tensor the device map does not
/// place or a non-floating `dtype`; ShapeError naming file, tensor and both shapes; KeyError when
/// `strict` and keys do not match; FormatError / IOError from the readers, naming the file.
inline LoadResult load_checkpoint_in_model(nn::Module& model, const std::string& checkpoint,
                                           const LoadCheckpointOptions& options = {}) {
  if (options.dtype && !is_floating_point(*options.dtype)) {
    throw ValueError("load_checkpoint_in_model: dtype must be a floating-point type, got " +
                     std::string(dtype_name(*options.dtype)));
  }
  // A kept module computes in float32 too, not only holds it (nn::Module::keeps_fp32).
  if (!options.keep_in_fp32_modules.empty()) {
    for (const auto& [name, m] : model.named_modules()) {
      if (!name.empty() && in_keep_in_fp32_modules(name, options.keep_in_fp32_modules)) m->set_keeps_fp32(true);
    }
  }
  const auto tied = nn::find_tied_parameters(model);
  bool has_disk = false;
  if (options.device_map) {
    detail::warn_tied_on_different_devices(tied, *options.device_map, options.warnings);
    for (const auto& [k, p] : *options.device_map) has_disk |= p.is_disk();
  }
  if (has_disk && !options.offload_folder) {
    throw ValueError("At least one of the model submodule will be offloaded to disk, please pass along an `offload_folder`.");
  }
  if (has_disk) std::filesystem::create_directories(*options.offload_folder);

  const std::vector<std::string> files = io::resolve_checkpoint_files(checkpoint);
  detail::CheckpointLoader loader(model, options);
  {
    io::ProgressBar bar("Loading checkpoint shards", files.size(), options.show_progress && files.size() > 1);
    std::size_t total = 0, finished = 0;
    if (options.progress) {
      for (const auto& f : files) total += static_cast<std::size_t>(std::filesystem::file_size(f));
      options.progress(0, total);
    }
    for (const auto& f : files) {
      const std::size_t size = options.progress ? static_cast<std::size_t>(std::filesystem::file_size(f)) : 0;
      std::size_t in_file = 0;
      loader.load_file(f, options.progress ? [&](std::size_t bytes) {
        in_file = std::min(in_file + bytes, size);
        options.progress(finished + in_file, total);
      } : std::function<void(std::size_t)>{});
      finished += size;
      if (options.progress) options.progress(finished, total);
      bar.update();
    }
  }
  LoadResult result = loader.finish(files);
  nn::retie_parameters(model, tied);

  if (options.strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    std::string msg = "Error(s) in loading checkpoint '" + checkpoint + "' into " + model.class_name() + ":";
    if (!result.missing_keys.empty()) msg += " Missing key(s): " + detail::quoted_list(result.missing_keys) + ".";
    if (!result.unexpected_keys.empty()) msg += " Unexpected key(s): " + detail::quoted_list(result.unexpected_keys) + ".";
    throw KeyError(msg);
  }
  if (options.warnings && !result.unexpected_keys.empty()) {
    *options.warnings << "Some weights of the model checkpoint at " << checkpoint << " were not used when initializing "
                      << model.class_name() << ": {" << detail::quoted_list(result.unexpected_keys)
                      << "}. This may or may not be an issue - make sure that the checkpoint does not have unnecessary "
                         "parameters, or that the model definition correctly corresponds to the checkpoint.\n";
  }
  return result;
}

}  // namespace accel::dispatch

namespace accel {
using dispatch::dtypes_in_modules, dispatch::in_keep_in_fp32_modules, dispatch::load_checkpoint_in_model,
    dispatch::LoadCheckpointOptions, dispatch::LoadResult;
}  // namespace accel
