// A Hugging Face model folder written as one GGUF file in a chosen scheme: what llama.cpp's
// convert_hf_to_gguf.py and then llama-quantize make of it, in one pass.
//
//   GgufConvertResult r = convert_to_gguf("Llama-3.2-1B/", "model-Q4_K_M.gguf", {.scheme = "q4_k_m"});
//
// The file holds the architecture's metadata and tensor names and layouts (io/gguf_write.hpp:
// LLaMA's and Mistral's q / k rows permuted for llama.cpp's rope, GPT-2's Conv1D weights
// transposed, its tied head written as output.weight too, as llama.cpp requires), the folder's tokenizer (io/gguf_tokenizer.hpp: tokenizer.json and
// tokenizer_config.json), general.file_type (the scheme's llama_ftype) and
// general.quantization_version 2. Each tensor's type is llama-quantize's choice
// (quant/quantizers/gguf_scheme.hpp); quantized blocks come from ggml's reference quantizers
// (quant/formats/ggml_quantize.hpp), so an F32 file and llama-quantize make the same bytes as this
// does directly. Tensors are read, converted and written one at a time, so memory holds one
// tensor in float32 and its blocks (safetensors by direct reads that leave the page cache alone;
// a torch .bin shard is read whole).
//
// Errors: ValueError for a folder whose config.json names no architecture written here (listing
// those that are), for a quantized folder (quantization_config) and for a scheme not in the table
// or whose quantizer is missing; the file is written atomically, so a failure leaves none.
// Differences from llama.cpp's tools: no importance matrix; quantized schemes read the
// checkpoint's own values (llama.cpp quantizes the converter's f16 output, rounded once more);
// tensors the converter would add (LLaMA-3's rope_freqs) are not, so such rope scaling is refused.
// A folder without tokenizer.json gives a file without tokenizer keys: accel runs it on token ids,
// llama.cpp refuses it (its vocabulary sizes the embedding; its converter refuses such a folder).
// As in llama.cpp, Mistral is written as "llama" without its sliding window: a prompt longer than
// the window attends to all of it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/gguf_tokenizer.hpp"
#include "accel/io/gguf_write.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/io/weight_reader.hpp"
#include "accel/quant/formats/ggml_quantize.hpp"
#include "accel/quant/quantizers/gguf_scheme.hpp"

namespace accel::quant {

/// How convert_to_gguf writes the file.
struct GgufConvertOptions {
  /// One of gguf_scheme_table's names: f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k, ...
  /// (llama.cpp's converter defaults to f16).
  std::string scheme = "f16";
  /// Called after each tensor with the checkpoint bytes read so far and their total.
  std::function<void(std::size_t done, std::size_t total)> progress;
};

/// What convert_to_gguf wrote.
struct GgufConvertResult {
  std::string architecture;                     ///< general.architecture
  std::size_t tensors = 0;                      ///< tensors written
  std::map<std::string, std::size_t> types;     ///< tensors per GGUF type name ("Q4_K": 7)
  std::uint64_t input_bytes = 0;                ///< the checkpoint's bytes of the tensors written
  std::uint64_t output_bytes = 0;               ///< the file's size
  bool tokenizer = false;                       ///< tokenizer metadata written (the folder had tokenizer.json)
};

namespace detail {

/// One checkpoint tensor the file stores: where it comes from and where it goes.
struct GgufConvertItem {
  std::string hf_name;
  io::GgufTensorTarget target;
  std::vector<std::uint64_t> ne;      ///< GGUF order, after the layout change
  std::uint64_t source_bytes = 0;
  std::function<Tensor()> load;       ///< the tensor as the checkpoint holds it
};

/// A tensor as `type`'s bytes: plain types converted, block types quantized row by row.
inline std::string gguf_tensor_bytes(const Tensor& t, io::GgmlType type, const std::string& name) {
  const auto& info = io::ggml_type_info(type);
  if (info.plain) {
    const Tensor c = t.to(*info.plain).contiguous();
    return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  const Tensor x = t.to(DType::f32).contiguous();
  const auto ne0 = static_cast<std::size_t>(t.dim() ? t.size(t.dim() - 1) : 1);
  const std::size_t rows = ne0 ? static_cast<std::size_t>(t.numel()) / ne0 : 0;
  const std::size_t row_bytes = io::ggml_row_nbytes(type, ne0);
  std::string out(rows * row_bytes, '\0');
  const float* src = static_cast<const float*>(x.data_ptr());
  std::byte* dst = reinterpret_cast<std::byte*>(out.data());
  if (!can_quantize_to(type)) {
    throw ValueError("convert_to_gguf: tensor '" + name + "' needs " + std::string(info.name) +
                     ", which has no quantizer here");
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(rows); ++r) {
    quantize_rows(type, src + static_cast<std::size_t>(r) * ne0, dst + static_cast<std::size_t>(r) * row_bytes, ne0);
  }
  return out;
}

/// The checkpoint's tensors, file by file, names sorted within a file (the converter's order).
inline std::vector<GgufConvertItem> gguf_convert_items(const std::filesystem::path& folder, const nlohmann::json& config,
                                                       const io::GgufArchitecture& arch) {
  std::vector<GgufConvertItem> items;
  auto reader = std::make_shared<io::WeightFileReader>();
  const auto files = io::resolve_checkpoint_files(io::resolve_checkpoint_folder(folder).path.string());
  for (const auto& file : files) {
    std::vector<std::pair<std::string, std::pair<Shape, DType>>> listed;
    std::function<Tensor(const std::string&)> load;
    if (io::detect_checkpoint_format(file) == io::CheckpointFormat::safetensors) {
      // Direct reads, one tensor at a time: a mapped file's pages would stay resident until the
      // whole file is written.
      const io::SafetensorsFile f = io::SafetensorsFile::open(file);
      io::check_safetensors_format(f);
      auto index = std::make_shared<std::map<std::string, io::SafetensorsTensorInfo>>();
      for (const auto& k : f.keys()) {
        listed.push_back({k, {f.info(k).shape, f.info(k).dtype}});
        index->emplace(k, f.info(k));
      }
      load = [index, reader, file, start = f.header().data_start](const std::string& k) {
        const auto& info = index->at(k);
        const std::uint64_t offset = start + info.begin, n = info.nbytes();
        const std::size_t extent = io::WeightFileReader::aligned_extent(offset, n);
        std::unique_ptr<std::byte, void (*)(void*)> buf(
            static_cast<std::byte*>(std::aligned_alloc(io::WeightFileReader::alignment, extent)), std::free);
        if (!buf) throw std::bad_alloc();
        const std::byte* p = reader->read(file, offset, n, buf.get(), k);
        Tensor t = Tensor::empty(info.shape, info.dtype, Device::cpu());
        if (t.nbytes() != n) throw FormatError(file + ": tensor '" + k + "' holds " + std::to_string(n) + " bytes for its shape's " + std::to_string(t.nbytes()));
        std::memcpy(t.data_ptr(), p, n);
        return t;
      };
    } else {
      auto sd = std::make_shared<io::StateDict>(io::load_state_dict(file));
      for (const auto& [k, t] : *sd) listed.push_back({k, {t.shape(), t.dtype()}});
      load = [sd](const std::string& k) { return sd->at(k); };
    }
    std::sort(listed.begin(), listed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [name, sd] : listed) {
      const auto target = io::gguf_tensor_target(arch, config, name);
      if (!target) continue;
      Shape shape = sd.first;
      if (target->layout == io::GgufLayout::transposed) {
        if (shape.size() != 2) throw ShapeError(file + ": tensor '" + name + "' should be 2-D (GPT-2 Conv1D)");
        std::swap(shape[0], shape[1]);
      }
      GgufConvertItem it{name, *target, {}, storage_nbytes(sd.second, static_cast<std::size_t>(shape.numel())),
                         [load, name] { return load(name); }};
      for (std::size_t d = shape.size(); d-- > 0;) it.ne.push_back(static_cast<std::uint64_t>(shape[d]));
      const bool tied_output = io::gguf_writes_tied_output(arch, config, name);
      items.push_back(it);
      if (tied_output) {
        it.target = {"output.weight", io::GgufLayout::same, false};
        items.push_back(std::move(it));
      }
    }
  }
  return items;
}

inline std::string read_text_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw IOError("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace detail

/// Writes `folder` (a Hugging Face model folder) as the GGUF file `out` (see the header comment).
inline GgufConvertResult convert_to_gguf(const std::filesystem::path& folder, const std::filesystem::path& out,
                                         const GgufConvertOptions& options = {}) {
  const GgufScheme& scheme = gguf_scheme(options.scheme);
  if (!io::ggml_type_info(scheme.base).plain && !can_quantize_to(scheme.base)) {
    throw ValueError("convert_to_gguf: scheme '" + options.scheme + "' needs " +
                     std::string(io::ggml_type_name(scheme.base)) + " blocks, which have no quantizer here");
  }
  if (dispatch::is_gguf_model(folder)) {
    throw ValueError("convert_to_gguf: " + folder.string() + " is a GGUF file already; give a model folder");
  }
  const std::string where = (folder / "config.json").string();
  const nlohmann::json config = dispatch::read_model_config(folder);
  if (config.contains("quantization_config")) {
    throw ValueError("convert_to_gguf: " + where + " is a quantized model (quantization_config); give a float one");
  }
  const io::GgufArchitecture& arch = io::gguf_architecture_of(config, where);

  std::vector<std::pair<std::string, io::GgufValue>> extra;
  GgufConvertResult result;
  result.architecture = std::string(arch.name);
  if (std::filesystem::is_regular_file(folder / "tokenizer.json")) {
    nlohmann::json tokenizer_config;
    if (std::filesystem::is_regular_file(folder / "tokenizer_config.json")) {
      tokenizer_config = nlohmann::json::parse(detail::read_text_file(folder / "tokenizer_config.json"), nullptr, false);
      if (tokenizer_config.is_discarded()) {
        throw FormatError((folder / "tokenizer_config.json").string() + ": not valid JSON");
      }
    }
    extra = io::gguf_tokenizer_metadata(detail::read_text_file(folder / "tokenizer.json"), tokenizer_config,
                                        (folder / "tokenizer.json").string(),
                                        config.value("vocab_size", std::size_t{0}));
    result.tokenizer = true;
  }
  extra.emplace_back("general.file_type", io::gguf_u32(scheme.file_type));
  extra.emplace_back("general.quantization_version", io::gguf_u32(2));

  io::GgufWriter w;
  for (auto& [k, v] : io::gguf_model_metadata(config, extra)) w.add(std::move(k), std::move(v));

  auto items = detail::gguf_convert_items(folder, config, arch);
  const auto geti = [&](const char* a, const char* b) {
    return config.contains(a) ? config[a].get<int>() : config.contains(b) ? config[b].get<int>() : 0;
  };
  GgufModelShape shape{std::string(arch.name), geti("num_hidden_layers", "n_layer"), geti("num_attention_heads", "n_head"), 0,
                       std::any_of(items.begin(), items.end(), [](const auto& i) { return i.target.name == "output.weight"; })};
  shape.n_head_kv = config.contains("num_key_value_heads") ? config["num_key_value_heads"].get<int>() : shape.n_head;
  GgufTypeRules rules(scheme, shape);

  std::size_t total = 0;
  for (const auto& it : items) total += it.source_bytes;
  auto done = std::make_shared<std::size_t>(0);
  for (auto& it : items) {
    const io::GgmlType type = rules.type_of(it.target.name, it.ne);
    if (!io::ggml_type_info(type).plain && it.ne[0] % io::ggml_type_info(type).block_size != 0) {
      throw ShapeError("convert_to_gguf: tensor '" + it.hf_name + "' rows do not fill " +
                       std::string(io::ggml_type_name(type)) + " blocks");
    }
    ++result.types[std::string(io::ggml_type_name(type))];
    result.input_bytes += it.source_bytes;
    w.add_tensor_source(it.target.name, type, it.ne,
                        [&config, &options, it, type, done, total] {
                          const Tensor t = io::to_gguf_layout(it.target, config, it.load(), it.hf_name);
                          std::string bytes = detail::gguf_tensor_bytes(t, type, it.hf_name);
                          *done += it.source_bytes;
                          if (options.progress) options.progress(*done, total);
                          return bytes;
                        });
  }
  result.tensors = items.size();
  w.save(out.string());
  result.output_bytes = std::filesystem::file_size(out);
  return result;
}

}  // namespace accel::quant
