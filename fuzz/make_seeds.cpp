// Writes the seed corpora of the fuzz targets with the library's own writers, so the seeds are
// exactly what accel (and so Accelerate / torch) produce:
//
//   make_seeds <out-dir>     -> <out-dir>/{fuzz_safetensors_header,fuzz_sharded_index,
//                                          fuzz_offload_index,fuzz_torch_bin,fuzz_torch_pickle,
//                                          fuzz_gguf,fuzz_bnb_state}/seed-*
//
// Seeds stay small (a few hundred bytes to a few KB): libFuzzer mutates small inputs faster,
// and every format feature is reachable with a handful of elements.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/ggml_types.hpp"
#include "accel/io/gguf.hpp"
#include "accel/io/gguf_write.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/torch_bin_write.hpp"
#include "accel/io/zip.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"

namespace fs = std::filesystem;
using accel::DType;
using accel::Shape;
using accel::Tensor;
using accel::io::StateDict;

namespace {

void put(const fs::path& file, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << bytes;
}

Tensor iota(const Shape& shape, DType dtype) {
  Tensor t = Tensor::zeros(shape, DType::f32);
  auto* p = t.data_ptr<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i % 7) - 3.0f;
  return t.to(dtype);
}

void safetensors_seeds(const fs::path& dir, const fs::path& tmp) {
  const std::vector<std::pair<std::string, std::pair<StateDict, std::map<std::string, std::string>>>> files = {
      {"empty", {StateDict{}, {}}},
      {"one_f32", {StateDict{{"weight", iota({2, 3}, DType::f32)}}, {{"format", "pt"}}}},
      {"mixed",
       {StateDict{{"a.bias", iota({4}, DType::f16)},
                  {"a.weight", iota({2, 2}, DType::bf16)},
                  {"mask", iota({3}, DType::boolean)},
                  {"scalar", iota({}, DType::f64)},
                  {"empty", iota({0, 5}, DType::i32)},
                  {"fp8", iota({2, 2, 1}, DType::f8_e4m3fn)},
                  {"fp8b", iota({1}, DType::f8_e5m2)},
                  {"ids", iota({2}, DType::i64)},
                  {"q", iota({3}, DType::i8)},
                  {"u", iota({3}, DType::u8)},
                  {"s", iota({3}, DType::i16)}},
        {{"format", "pt"}, {"note", "caf\xc3\xa9"}}}},
  };
  for (const auto& [name, content] : files) {
    const fs::path f = tmp / (name + ".safetensors");
    accel::io::save_file(content.first, f.string(), content.second);
    fs::copy_file(f, dir / ("seed-" + name), fs::copy_options::overwrite_existing);
  }
}

void sharded_index_seeds(const fs::path& dir) {
  using accel::io::sharded_index_json;
  put(dir / "seed-safetensors", sharded_index_json(96, {{"lm_head.weight", "model-00002-of-00002.safetensors"},
                                                        {"model.embed.weight", "model-00001-of-00002.safetensors"},
                                                        {"model.norm.weight", "model-00002-of-00002.safetensors"}}));
  put(dir / "seed-bin", sharded_index_json(20.125, {{"mask", "pytorch_model-00001-of-00001.bin"}}, true));
  put(dir / "seed-extra-metadata",
      "{\"metadata\": {\"total_size\": 8, \"format\": \"pt\", \"nested\": {\"a\": [1, 2.5, null]}},\n"
      " \"weight_map\": {\"w\": \"shards/part-1.safetensors\", \"b\": \"shards/part-1.safetensors\"}}\n");
  put(dir / "seed-no-metadata", "{\"weight_map\": {}}");
}

void offload_index_seeds(const fs::path& dir, const fs::path& tmp) {
  const fs::path folder = tmp / "offload";
  accel::io::offload_state_dict(folder.string(), StateDict{{"layer.weight", iota({2, 3}, DType::f32)},
                                                           {"layer.bias", iota({3}, DType::bf16)},
                                                           {"scale", iota({}, DType::f16)},
                                                           {"mask", iota({4}, DType::boolean)},
                                                           {"ids", iota({0}, DType::i64)}});
  fs::copy_file(folder / "index.json", dir / "seed-dat", fs::copy_options::overwrite_existing);
  accel::io::OffloadIndex st = accel::io::OffloadIndex::object();
  st["model.w"] = {{"safetensors_file", "/models/model.safetensors"}, {"weight_name", "w"}, {"dtype", "float16"}};
  st["model.b"] = {{"safetensors_file", "model.safetensors"}};
  st["x"] = {{"dtype", "torch.float8_e5m2"}, {"shape", {1, 2, 3, 4}}};
  put(dir / "seed-safetensors-entries", accel::io::offload_index_json(st));
}

void torch_bin_seeds(const fs::path& dir, const fs::path& tmp) {
  const Tensor base = iota({4, 3}, DType::f32);
  const std::vector<std::pair<std::string, StateDict>> files = {
      {"empty", StateDict{}},
      {"one", StateDict{{"weight", iota({2, 2}, DType::f32)}}},
      // Views of one storage: one data record, offsets and strides in the pickle.
      {"views",
       StateDict{{"w", base}, {"w_t", base.transpose(0, 1)}, {"row", base.select(0, 2)}, {"cols", base.narrow(1, 1, 2)}}},
      {"dtypes",
       StateDict{{"h", iota({3}, DType::f16)},
                 {"b", iota({2, 1}, DType::bf16)},
                 {"d", iota({}, DType::f64)},
                 {"l", iota({2}, DType::i64)},
                 {"i", iota({2}, DType::i32)},
                 {"s", iota({2}, DType::i16)},
                 {"c", iota({2}, DType::i8)},
                 {"u", iota({2}, DType::u8)},
                 {"m", iota({2}, DType::boolean)},
                 {"f8", iota({2}, DType::f8_e4m3fn)},
                 {"f8b", iota({2}, DType::f8_e5m2)},
                 {"z", iota({0, 3}, DType::f32)}}},
  };
  for (const auto& [name, sd] : files) {
    const fs::path f = tmp / (name + ".bin");
    accel::io::save_torch_bin(sd, f.string(), name == "views" ? "pytorch_model" : "archive");
    fs::copy_file(f, dir / ("seed-" + name), fs::copy_options::overwrite_existing);
  }
}

// data.pkl streams for fuzz_torch_pickle, whose harness supplies storages "0" ... "7" of 64 bytes
// each: every storage of these state dicts is 64 bytes, numbered in order of first use.
void torch_pickle_seeds(const fs::path& dir, const fs::path& tmp) {
  const Tensor base = iota({4, 4}, DType::f32);
  const std::vector<std::pair<std::string, StateDict>> files = {
      {"empty", StateDict{}},
      {"one", StateDict{{"weight", iota({16}, DType::f32)}}},
      {"views",
       StateDict{{"w", base}, {"w_t", base.transpose(0, 1)}, {"row", base.select(0, 2)}, {"cols", base.narrow(1, 1, 2)}}},
      {"dtypes-a",
       StateDict{{"h", iota({32}, DType::f16)},
                 {"b", iota({4, 8}, DType::bf16)},
                 {"d", iota({8}, DType::f64)},
                 {"l", iota({2, 4}, DType::i64)},
                 {"i", iota({16}, DType::i32)},
                 {"s", iota({2, 2, 8}, DType::i16)}}},
      {"dtypes-b",
       StateDict{{"c", iota({64}, DType::i8)},
                 {"u", iota({8, 8}, DType::u8)},
                 {"m", iota({64}, DType::boolean)},
                 {"f8", iota({64}, DType::f8_e4m3fn)},
                 {"f8b", iota({1, 64}, DType::f8_e5m2)}}},
  };
  for (const auto& [name, sd] : files) {
    const fs::path f = tmp / (name + ".pickle.bin");
    accel::io::save_torch_bin(sd, f.string());
    const std::string bytes = accel::read_small_file(f.string());
    const auto zip = accel::io::ZipArchive::parse(accel::io::as_bytes(bytes), f.string());
    for (const auto& e : zip.entries()) {
      if (e.name.starts_with("archive/data/") && (e.size != 64 || e.name.size() != 14)) {
        throw accel::ValueError("pickle seed '" + name + "': storage " + e.name + " is not one of the harness's");
      }
    }
    const accel::io::ZipEntry* pkl = zip.find("archive/data.pkl");
    put(dir / ("seed-" + name), bytes.substr(static_cast<std::size_t>(pkl->data_offset), static_cast<std::size_t>(pkl->size)));
  }
}

// Fixed bytes that stand in for a GGUF tensor's data: every bit pattern is a valid block, and
// the block scales are then arbitrary f16 values, infinities and NaNs included.
std::string gguf_bytes(accel::io::GgmlType t, const std::vector<std::uint64_t>& ne) {
  std::uint64_t numel = 1;
  for (const auto e : ne) numel *= e;
  const std::uint64_t ne0 = ne.empty() ? 1 : ne[0];
  std::string b(ne0 == 0 ? 0 : accel::io::ggml_row_nbytes(t, ne0) * (numel / ne0), '\0');
  std::uint64_t state = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(t);
  for (auto& c : b) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>(state >> 56);
  }
  return b;
}

void gguf_seeds(const fs::path& dir, const fs::path& tmp) {
  using accel::io::GgmlType;
  using accel::io::GgufValue;
  using accel::io::GgufWriter;
  using T = accel::io::GgufValueType;
  const auto write = [&](const std::string& name, const GgufWriter& w) {
    const fs::path f = tmp / (name + ".gguf");
    w.save(f.string());
    return accel::read_small_file(f.string());
  };
  const auto add = [](GgufWriter& w, const std::string& name, GgmlType t, std::vector<std::uint64_t> ne) {
    std::string bytes = gguf_bytes(t, ne);
    w.add_tensor_bytes(name, t, std::move(ne), std::move(bytes));
  };

  put(dir / "seed-empty", write("empty", GgufWriter()));

  // Every value type; arrays of scalars, of strings, of arrays, and an empty one.
  {
    GgufWriter w(16);
    w.add("general.architecture", accel::io::gguf_string("llama"));
    w.add("general.name", accel::io::gguf_string("caf\xc3\xa9"));
    w.add("u8", GgufValue{T::uint8, std::uint64_t{200}});
    w.add("i8", GgufValue{T::int8, std::int64_t{-128}});
    w.add("u16", GgufValue{T::uint16, std::uint64_t{0xFFFF}});
    w.add("i16", GgufValue{T::int16, std::int64_t{-32768}});
    w.add("llama.context_length", accel::io::gguf_u32(4096));
    w.add("i32", GgufValue{T::int32, std::int64_t{-2}});
    w.add("llama.rope.freq_base", accel::io::gguf_f32(10000.0f));
    w.add("b", accel::io::gguf_bool(true));
    w.add("u64", GgufValue{T::uint64, std::uint64_t{0xFFFFFFFFFFFFFFFFull}});
    w.add("i64", GgufValue{T::int64, std::int64_t{INT64_MIN}});
    w.add("f64", GgufValue{T::float64, 0.1});
    std::vector<GgufValue> types, tokens;
    for (std::uint64_t i = 0; i < 4; ++i) types.push_back({T::uint8, i * 60});
    for (const char* s : {"<s>", "</s>", "\xe2\x96\x81the", ""}) tokens.push_back(accel::io::gguf_string(s));
    const GgufValue pair = accel::io::gguf_array(T::int32, {{T::int32, std::int64_t{-1}}, {T::int32, std::int64_t{7}}});
    w.add("tokenizer.ggml.token_type", accel::io::gguf_array(T::uint8, types));
    w.add("tokenizer.ggml.tokens", accel::io::gguf_array(T::string, tokens));
    w.add("nested", accel::io::gguf_array(T::array, {pair, pair}));
    w.add("none", accel::io::gguf_array(T::float32, {}));
    add(w, "w", GgmlType::f32, {4});
    put(dir / "seed-metadata", write("metadata", w));
  }

  // Plain types, up to four dimensions and none at all; once more as version 2, whose layout is
  // version 3's (the writer writes only 3).
  {
    GgufWriter w;
    add(w, "f32", GgmlType::f32, {4, 2});
    add(w, "f16", GgmlType::f16, {8});
    add(w, "bf16", GgmlType::bf16, {2, 2, 2});
    add(w, "f64", GgmlType::f64, {3});
    add(w, "i8", GgmlType::i8, {5});
    add(w, "i16", GgmlType::i16, {2});
    add(w, "i32", GgmlType::i32, {3, 1, 1, 1});
    add(w, "i64", GgmlType::i64, {2});
    add(w, "scalar", GgmlType::f32, {});
    std::string bytes = write("plain", w);
    put(dir / "seed-plain", bytes);
    bytes[4] = '\2';
    put(dir / "seed-plain-v2", bytes);
  }

  // One or two blocks of each block type: the 32-element ones, the 256-element ones, the lattice
  // IQ types (the grids' indices, signs and scales decoded from fuzzed bytes).
  {
    GgufWriter w;
    add(w, "q4_0", GgmlType::q4_0, {32, 2});
    add(w, "q4_1", GgmlType::q4_1, {32});
    add(w, "q5_0", GgmlType::q5_0, {32});
    add(w, "q5_1", GgmlType::q5_1, {32});
    add(w, "q8_0", GgmlType::q8_0, {64});
    add(w, "q8_1", GgmlType::q8_1, {32});
    add(w, "iq4_nl", GgmlType::iq4_nl, {32});
    put(dir / "seed-quant-32", write("quant-32", w));
  }
  {
    GgufWriter w(64);
    for (const auto t : {GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k,
                         GgmlType::q8_k, GgmlType::iq4_xs, GgmlType::tq1_0, GgmlType::tq2_0}) {
      add(w, std::string(accel::io::ggml_type_name(t)), t, {256});
    }
    put(dir / "seed-quant-256", write("quant-256", w));
  }
  {
    GgufWriter w;
    for (const auto t : {GgmlType::iq2_xxs, GgmlType::iq2_xs, GgmlType::iq3_xxs, GgmlType::iq1_s, GgmlType::iq3_s,
                         GgmlType::iq2_s, GgmlType::iq1_m}) {
      add(w, std::string(accel::io::ggml_type_name(t)), t, {256});
    }
    put(dir / "seed-lattice", write("lattice", w));
  }

  // What ggml refuses and accel accepts: alignment 1 (elements at odd addresses), an empty name,
  // a 64-byte name, zero extents, and tensors over the same bytes. With alignment 1 the data
  // section starts right after the last tensor info, whose final 8 bytes are its offset: moving
  // that offset to 1 lays the last tensor over the first ones.
  {
    GgufWriter w(1);
    add(w, "i8", GgmlType::i8, {3});
    add(w, "odd", GgmlType::f32, {3});
    add(w, "", GgmlType::f16, {4});
    add(w, std::string(64, 'n'), GgmlType::q4_0, {32});
    add(w, "d", GgmlType::f64, {1, 2});
    add(w, "zero", GgmlType::q6_k, {0, 7});
    add(w, "rows0", GgmlType::bf16, {4, 0});
    add(w, "alias", GgmlType::i64, {1});
    std::string bytes = write("layout", w);
    const auto h = accel::io::parse_gguf(accel::io::as_bytes(bytes), "layout");
    const auto at = static_cast<std::size_t>(h.data_offset) - 8;
    std::string one;
    accel::io::store_le<std::uint64_t>(one, 1);
    bytes.replace(at, 8, one);
    put(dir / "seed-layout", bytes);
  }
}

// Pre-quantized bitsandbytes layers as transformers saves them: "<layer>.weight" (packed 4-bit
// bytes) beside quant_state_to_tensors' tensors, or int8_weight_to_tensors' CB / SCB /
// weight_format. Each file is read back with the readers, so every seed is a state they accept.
void bnb_seeds(const fs::path& dir, const fs::path& tmp) {
  using accel::io::NamedTensors;
  using accel::quant::BnbQuantType;
  const auto four_bit = [](NamedTensors& out, const std::string& layer, const Shape& shape, DType dtype,
                           BnbQuantType type, std::int64_t blocksize, bool double_quant) {
    const auto w = accel::quant::quantize_4bit(iota(shape, DType::f32), {blocksize, type, double_quant, dtype});
    out.emplace_back(layer + ".weight", w.packed);
    for (auto& t : accel::quant::quant_state_to_tensors(w.state, layer + ".weight")) out.push_back(std::move(t));
  };
  const auto int8 = [](NamedTensors& out, const std::string& layer, const Shape& shape, bool with_format) {
    for (auto& t : accel::quant::int8_weight_to_tensors(accel::quant::quantize_int8_weight(iota(shape, DType::f16)), layer)) {
      if (with_format || !t.first.ends_with(".weight_format")) out.push_back(std::move(t));
    }
  };
  std::vector<std::pair<std::string, NamedTensors>> files(7);
  files[0].first = "nf4";
  four_bit(files[0].second, "model.layers.0.mlp.down_proj", {4, 64}, DType::bf16, BnbQuantType::nf4, 64, false);
  // Double quantization, with more blocks than one nested block of 256 holds.
  files[1].first = "nf4-double";
  four_bit(files[1].second, "q_proj", {24, 384}, DType::f16, BnbQuantType::nf4, 32, true);
  // An odd element count: the last byte's low nibble is padding.
  files[2].first = "fp4-odd";
  four_bit(files[2].second, "lm_head", {3, 41}, DType::f32, BnbQuantType::fp4, 128, false);
  files[3].first = "fp4-double";
  four_bit(files[3].second, "fc1", {2, 64}, DType::bf16, BnbQuantType::fp4, 4096, true);
  files[4].first = "int8";
  int8(files[4].second, "model.layers.0.self_attn.o_proj", {4, 8}, true);
  files[5].first = "int8-no-format";
  int8(files[5].second, "fc2", {3, 5}, false);
  // Both kinds in one file, and a 4-bit state whose packed weight is not in it (a sharded
  // checkpoint's state read apart from the weight).
  files[6].first = "mixed";
  four_bit(files[6].second, "a", {8, 32}, DType::f16, BnbQuantType::nf4, 64, true);
  int8(files[6].second, "b", {2, 16}, true);
  four_bit(files[6].second, "c", {1, 64}, DType::f32, BnbQuantType::fp4, 32, false);
  std::erase_if(files[6].second, [](const auto& t) { return t.first == "c.weight"; });

  for (const auto& [name, tensors] : files) {
    const fs::path f = tmp / ("bnb-" + name + ".safetensors");
    accel::io::save_file(tensors, f.string());
    const auto file = accel::io::SafetensorsFile::open(f.string());
    std::map<std::string, Tensor> read;
    for (const auto& k : file.keys()) read.emplace(k, file.tensor(k));
    for (const auto& [k, t] : read) {
      if (const auto at = k.find(".quant_state."); at != std::string::npos) {
        (void)accel::quant::quant_state_from_tensors(k.substr(0, at), read);
      }
      if (k.ends_with(".SCB")) (void)accel::quant::int8_weight_from_tensors(k.substr(0, k.size() - 4), read);
    }
    fs::copy_file(f, dir / ("seed-" + name), fs::copy_options::overwrite_existing);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds <out-dir>\n";
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path tmp = fs::temp_directory_path() / ("accel-make-seeds-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  for (const char* t : {"fuzz_safetensors_header", "fuzz_sharded_index", "fuzz_offload_index", "fuzz_torch_bin",
                        "fuzz_torch_pickle", "fuzz_gguf", "fuzz_bnb_state"}) {
    fs::create_directories(out / t);
  }
  safetensors_seeds(out / "fuzz_safetensors_header", tmp);
  sharded_index_seeds(out / "fuzz_sharded_index");
  offload_index_seeds(out / "fuzz_offload_index", tmp);
  torch_bin_seeds(out / "fuzz_torch_bin", tmp);
  torch_pickle_seeds(out / "fuzz_torch_pickle", tmp);
  gguf_seeds(out / "fuzz_gguf", tmp);
  bnb_seeds(out / "fuzz_bnb_state", tmp);
  fs::remove_all(tmp);
  // A seed the parser rejects would start the fuzzer off the format: check them all. (The
  // regress-* inputs beside them are past crashes, rejected on purpose; the pickle seeds were
  // checked against their archives above, the bitsandbytes seeds against the state readers.)
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    if (!e.is_regular_file() || !e.path().filename().string().starts_with("seed-")) continue;
    const std::string target = e.path().parent_path().filename().string();
    const std::string bytes = accel::read_small_file(e.path().string());
    const std::string name = e.path().string();
    if (target == "fuzz_safetensors_header") (void)accel::io::parse_safetensors_header(accel::io::as_bytes(bytes), name);
    if (target == "fuzz_sharded_index") (void)accel::io::parse_sharded_index(bytes, name);
    if (target == "fuzz_offload_index") (void)accel::io::parse_offload_index(bytes, name);
    if (target == "fuzz_torch_bin") (void)accel::io::parse_torch_bin(accel::io::as_bytes(bytes), name);
    if (target == "fuzz_gguf") (void)accel::io::parse_gguf(accel::io::as_bytes(bytes), name);
    if (target == "fuzz_bnb_state") (void)accel::io::parse_safetensors_header(accel::io::as_bytes(bytes), name);
  }
  return 0;
}
