// The bitsandbytes backend: Linear4bit / Linear8bitLt swapped in on the meta model, weights
// quantized as they stream in (NF4, FP4, with and without double quantization, LLM.int8()),
// logits within measured bounds of the float model, a 4-bit model planned from 4-bit sizes, the
// CPU peak of quantize-on-load near the quantized size, save_bnb_model folders loading back to the
// same logits, malformed bitsandbytes folders as FormatErrors naming file and tensor, dequantize()
// back to float layers, and Accelerate's load_and_quantize_model.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"
#include "quant_test_support.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/memory_stats.hpp"
#include "accel/dispatch/dispatch_model.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/quant/formats/bnb_checkpoint.hpp"
#include "accel/quant/layers/bnb_linear.hpp"
#include "accel/quant/quantizers/bnb.hpp"

// A namespace of its own: the layer's tests compile as one translation unit.
namespace quant_bnb_quantizer_test {

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::quant;

namespace {

using accel_test::model_dir;

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); }

using accel_test::rel_err;

Tensor prompt() { return Tensor::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, Shape{1, 8}); }

std::vector<float> logits_of(dispatch::PretrainedModel& p) {
  return p.model->logits(prompt()).to(DType::f32).to_vector<float>();
}

struct Scheme {
  const char* name;
  BitsAndBytesConfig config;
};

std::vector<Scheme> schemes() {
  return {
      {"nf4", {.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4}},
      {"nf4+dq", {.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4, .bnb_4bit_use_double_quant = true}},
      {"fp4", {.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::fp4}},
      {"fp4+dq", {.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::fp4, .bnb_4bit_use_double_quant = true}},
      {"int8", {.load_in_8bit = true}},
  };
}

/// Bounds on the RMS relative error against the float model, about 1.25x what was measured (the
/// tests print their measurements): of every quantized weight, and of the logits of the random
/// tiny test models, where two blocks amplify the weights' error.
double weight_bound(const std::string& scheme) {
  return scheme.starts_with("nf4") ? 0.11 : scheme.starts_with("fp4") ? 0.16 : 0.01;
}
double logits_bound(const std::string& model, const std::string& scheme) {
  const bool llama = model == "tiny_llama";
  if (scheme.starts_with("nf4")) return llama ? 0.41 : 0.19;
  if (scheme.starts_with("fp4")) return llama ? 0.60 : 0.26;
  return llama ? 0.044 : 0.02;
}

dispatch::PretrainedModel load(const fs::path& dir, std::optional<BnbQuantizer> q = std::nullopt) {
  dispatch::LoadPretrainedOptions o{.dtype = DType::f32, .show_progress = false};
  if (q) o.quantizer = *q;
  return dispatch::load_pretrained_causal_lm(dir, o);
}

std::size_t count_layers(nn::Module& m, const std::string& cls) {
  std::size_t n = 0;
  for (const auto& [name, mod] : m.named_modules()) n += mod->class_name() == cls ? 1 : 0;
  return n;
}

/// A copy of the folder `src` whose model.safetensors went through `edit`.
void edited_copy(const fs::path& src, const fs::path& dst,
                 const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  fs::create_directories(dst);
  fs::copy_file(src / "config.json", dst / "config.json", fs::copy_options::overwrite_existing);
  std::map<std::string, Tensor> t;
  for (const auto& [k, v] : io::load_state_dict((src / "model.safetensors").string())) t.emplace(k, v.clone());
  edit(t);
  io::save_file(t, (dst / "model.safetensors").string(), {{"format", "pt"}});
}

Tensor json_bytes(const std::string& s) { return Tensor::from_vector(std::vector<std::uint8_t>(s.begin(), s.end())); }

}  // namespace

TEST_CASE("BnbQuantizer quantizes on load: layers swapped, logits within bounds of the float model", "[bnb]") {
  for (const std::string model : {"tiny_llama", "tiny_gpt2"}) {
    auto ref = load(model_dir(model));
    const auto want = logits_of(ref);
    const std::size_t linears =
        model == "tiny_llama" ? 14 : 8;  // 2 blocks x (q, k, v, o, gate, up, down) / (c_attn, c_proj, c_fc, c_proj)
    for (const auto& s : schemes()) {
      INFO(model << " " << s.name);
      BnbQuantizer q(s.config);
      auto p = load(model_dir(model), q);
      nn::Module& root = p.model->module();
      const std::string cls = s.config.load_in_4bit ? "Linear4bit" : "Linear8bitLt";
      CHECK(count_layers(root, cls) == linears);
      CHECK(count_layers(root, "Conv1D") == 0);
      CHECK(root.get_submodule("lm_head").class_name() == "Linear");  // get_keys_to_not_convert
      CHECK_FALSE(p.load.missing_keys.size());
      CHECK_FALSE(q.pre_quantized());
      std::vector<float> deq, orig;
      for (const auto& [n, m] : root.named_modules()) {
        auto* l4 = dynamic_cast<Linear4bit*>(m);
        auto* l8 = dynamic_cast<Linear8bitLt*>(m);
        if (l4 || l8) {
          const Tensor f = ref.model->module().get_parameter(n + ".weight");
          const auto a = (l4 ? l4->dequantized_weight() : l8->dequantized_weight()).to(DType::f32).to_vector<float>();
          const auto b = (model == "tiny_gpt2" ? f.t().contiguous() : f).to_vector<float>();
          deq.insert(deq.end(), a.begin(), a.end());
          orig.insert(orig.end(), b.begin(), b.end());
        }
        if (auto* l = dynamic_cast<Linear4bit*>(m)) {
          REQUIRE(l->quant_state());
          CHECK(l->weight().dtype() == DType::u8);
          CHECK(l->weight().shape() == linear_4bit_weight_shape(l->in_features(), l->out_features()));
          CHECK(l->quant_state()->nested() == s.config.bnb_4bit_use_double_quant);
          CHECK(l->quant_state()->quant_type == s.config.bnb_4bit_quant_type);
        }
        if (auto* l = dynamic_cast<Linear8bitLt*>(m)) {
          CHECK(l->weight().dtype() == DType::i8);
          CHECK_FALSE(l->SCB().is_meta());
        }
      }
      const double werr = rel_err(deq, orig);
      const double err = rel_err(logits_of(p), want);
      std::printf("[bnb] %s %-7s RMS relative error: weights %.5f, logits %.5f\n", model.c_str(), s.name, werr, err);
      CHECK(werr < weight_bound(s.name));
      CHECK(err < logits_bound(model, s.name));

      if (std::string(s.name) == "int8") {
        models::GenerationConfig g{.max_new_tokens = 12, .ignore_eos = true};
        const auto a = models::generate(*ref.model, prompt(), g).new_tokens[0];
        const auto b = models::generate(*p.model, prompt(), g).new_tokens[0];
        std::size_t same = 0;
        while (same < a.size() && a[same] == b[same]) ++same;
        std::printf("[bnb] %s int8 greedy tokens: %zu of %zu identical to the float model\n", model.c_str(), same,
                    a.size());
        CHECK(a == b);
      }
    }
  }
}

TEST_CASE("Linear4bit: the GEMV path (up to 16 rows) and dequantize-then-matmul agree", "[bnb]") {
  std::mt19937 g(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> wv(96 * 80), xv(20 * 80);
  for (auto& v : wv) v = d(g);
  for (auto& v : xv) v = d(g);
  Linear4bit l(80, 96, false, {.quant_type = BnbQuantType::nf4, .compress_statistics = true});
  l.quantize(Tensor::from_vector(wv, Shape{96, 80}));
  const Tensor x = Tensor::from_vector(xv, Shape{20, 80});
  const auto big = l.forward(x).to_vector<float>();                     // 20 rows: dequantize + matmul
  const auto small = l.forward(x.narrow(0, 0, 16)).to_vector<float>();  // 16 rows: GEMV
  const auto ref = ops::linear(x, l.dequantized_weight()).to_vector<float>();
  CHECK(rel_err(std::vector<float>(big.begin(), big.begin() + 16 * 96), small) < 1e-5);
  CHECK(rel_err(big, ref) < 1e-5);
  // Compute dtype bfloat16: x is rounded to it, and y comes back in x's dtype.
  Linear4bit h(80, 96, false, {.compute_dtype = DType::bf16, .quant_type = BnbQuantType::nf4});
  h.quantize(Tensor::from_vector(wv, Shape{96, 80}));
  const Tensor y = h.forward(x.narrow(0, 0, 2));
  CHECK(y.dtype() == DType::f32);
  CHECK(rel_err(y.to_vector<float>(), ops::linear(x.narrow(0, 0, 2), h.dequantized_weight()).to_vector<float>()) <
        0.02);
  CHECK_THROWS_AS(l.forward(Tensor::zeros({2, 81})), ShapeError);
}

TEST_CASE("a 4-bit model is planned from its packed sizes", "[bnb]") {
  const auto config = read_json(model_dir("tiny_llama") / "config.json");
  auto build = [&] {
    auto guard = nn::init_empty_weights(false);
    return models::causal_lm_from_hf_config(config, DType::f32);
  };
  auto plain = build();
  auto quant = build();
  BnbQuantizer q({.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4});
  q.preprocess_model(quant->module(), {});
  const auto fs_ = plan::compute_module_sizes(plain->module());
  const auto qs = plan::compute_module_sizes(quant->module());
  // q_proj: 48 x 48 float32 against (48 * 48 + 1) / 2 bytes.
  CHECK(fs_["model.layers.0.self_attn.q_proj"].bytes() == 48 * 48 * 4);
  CHECK(qs["model.layers.0.self_attn.q_proj"].bytes() == 48 * 48 / 2);
  CHECK(qs["model.layers.0.mlp"].bytes() == 3 * 48 * 96 / 2);
  std::printf("[bnb] tiny_llama planned sizes: float %.0f bytes, nf4 %.0f bytes\n", fs_[""].bytes(), qs[""].bytes());

  // A budget that holds the 4-bit model but not the float one: the float plan goes to disk.
  plan::MaxMemory mm;
  mm.add(Placement::cpu(), ByteSize(static_cast<std::int64_t>(qs[""].bytes() * 1.2)));
  plan::InferOptions io;
  io.no_split_module_classes = plain->module().no_split_modules();
  const auto dm_float = plan::infer_auto_device_map(plain->module(), mm, io);
  const auto dm_quant = plan::infer_auto_device_map(quant->module(), mm, io);
  auto disk = [](const plan::DeviceMap& dm) {
    bool d = false;
    for (const auto& [k, p] : dm) d |= p.is_disk();
    return d;
  };
  CHECK(disk(dm_float));
  CHECK_FALSE(disk(dm_quant));

  // Through the loader: adjust_max_memory keeps 10% back, and the plan puts nothing on disk
  // (sync_offload: no read-ahead ring to keep beside the weights).
  plan::MaxMemory loose;
  loose.add(Placement::cpu(), ByteSize(static_cast<std::int64_t>(qs[""].bytes() * 1.5)));
  auto p = dispatch::load_pretrained_causal_lm(model_dir("tiny_llama"), {.dtype = DType::f32,
                                                                         .show_progress = false,
                                                                         .device_map = std::string("auto"),
                                                                         .max_memory = loose,
                                                                         .quantizer = q,
                                                                         .offload_depth = 0});
  REQUIRE(p.device_map);
  CHECK_FALSE(disk(*p.device_map));
  auto unplaced = load(model_dir("tiny_llama"), q);
  CHECK(logits_of(p) == logits_of(unplaced));
  CHECK(q.adjust_max_memory(loose).find(Placement::cpu())->bytes() ==
        std::floor(loose.find(Placement::cpu())->bytes() * 0.9));
}

TEST_CASE("quantize-on-load holds the quantized bytes plus one tensor on the CPU", "[bnb]") {
  // A LLaMA-shaped checkpoint whose float32 weights are several times the budget.
  accel_test::TempDir dir;
  const std::int64_t H = 256, I = 704, V = 256, L = 6;
  nlohmann::json config = read_json(model_dir("tiny_llama") / "config.json");
  config["hidden_size"] = H;
  config["intermediate_size"] = I;
  config["vocab_size"] = V;
  config["num_hidden_layers"] = L;
  config["num_attention_heads"] = 4;
  config["num_key_value_heads"] = 4;
  config["head_dim"] = H / 4;
  std::ofstream(dir.file("config.json")) << config.dump(2);
  std::mt19937 g(3);
  std::normal_distribution<float> d(0.0f, 0.05f);
  auto rnd = [&](Shape s) {
    std::vector<float> v(static_cast<std::size_t>(s.numel()));
    for (auto& x : v) x = d(g);
    return Tensor::from_vector(v, s);
  };
  io::NamedTensors w;
  std::size_t float_linear_bytes = 0, largest = 0;
  w.emplace_back("model.embed_tokens.weight", rnd({V, H}));
  for (std::int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
      w.emplace_back(p + n + ".weight", rnd({H, H}));
    w.emplace_back(p + "mlp.gate_proj.weight", rnd({I, H}));
    w.emplace_back(p + "mlp.up_proj.weight", rnd({I, H}));
    w.emplace_back(p + "mlp.down_proj.weight", rnd({H, I}));
    w.emplace_back(p + "input_layernorm.weight", Tensor::ones({H}));
    w.emplace_back(p + "post_attention_layernorm.weight", Tensor::ones({H}));
  }
  w.emplace_back("model.norm.weight", Tensor::ones({H}));
  w.emplace_back("lm_head.weight", rnd({V, H}));
  for (const auto& [n, t] : w) {
    if (n.starts_with("model.layers.") && t.dim() == 2) {
      float_linear_bytes += t.nbytes();
      largest = std::max(largest, t.nbytes());
    }
  }
  io::save_file(w, dir.file("model.safetensors"), {{"format", "pt"}});
  w.clear();

  for (const auto& s : {schemes()[1], schemes()[4]}) {
    INFO(s.name);
    const std::size_t before = memory_stats(Device::cpu()).allocated_bytes;
    // Quantized bytes: packed codes (1/2 or 1 byte per weight) and their statistics.
    const double per_weight = s.config.load_in_4bit ? 0.5 + 1.0 / 64 + 1.0 / 16 : 1.0;
    // One float tensor in flight: int8 also rounds it to float16 first (Int8Params), a second copy.
    const std::size_t transient = s.config.load_in_4bit ? largest : 2 * largest;
    const auto budget =
        static_cast<std::size_t>(float_linear_bytes / 4 * per_weight) + transient + (std::size_t{256} << 10);
    reset_peak_memory_stats(Device::cpu());
    std::optional<dispatch::PretrainedModel> p;
    {
      ScopedMemoryLimit cap(Device::cpu(), before + budget);
      p = load(dir.path, BnbQuantizer(s.config));
    }
    const std::size_t peak = memory_stats(Device::cpu()).peak_allocated_bytes - before;
    const std::size_t held = memory_stats(Device::cpu()).allocated_bytes - before;
    std::printf(
        "[bnb] quantize-on-load %s: float linear weights %zu bytes, largest %zu, held after %zu, peak %zu "
        "(peak - held = %zu), budget %zu\n",
        s.name, float_linear_bytes, largest, held, peak, peak - held, budget);
    CHECK(float_linear_bytes >= 4 * budget / (s.config.load_in_4bit ? 1 : 2));
    CHECK(peak <= held + transient + (std::size_t{64} << 10));
    CHECK(p->model->logits(prompt()).size(-1) == V);
  }
}

TEST_CASE("save_bnb_model writes transformers' layout, and the folder loads back to the same logits", "[bnb]") {
  for (const std::string model : {"tiny_llama", "tiny_gpt2"}) {
    for (const auto& s : schemes()) {
      if (std::string(s.name) == "fp4") continue;  // nf4, nf4+dq, fp4+dq and int8 cover every tensor kind
      INFO(model << " " << s.name);
      accel_test::TempDir dir;
      auto p = load(model_dir(model), BnbQuantizer(s.config));
      const auto want = logits_of(p);
      save_bnb_model(p.model->module(), p.config, dir.path);

      const auto saved = io::SafetensorsFile::open(dir.file("model.safetensors"));
      const std::string layer =
          model == "tiny_llama" ? "model.layers.0.self_attn.q_proj" : "transformer.h.0.attn.c_attn";
      if (s.config.load_in_4bit) {
        CHECK(saved.contains(layer + ".weight.absmax"));
        CHECK(saved.contains(layer + ".weight.quant_map"));
        CHECK(saved.contains(layer + ".weight.nested_absmax") == s.config.bnb_4bit_use_double_quant);
        CHECK(saved.contains(layer + ".weight.quant_state.bitsandbytes__" +
                             std::string(bnb_quant_type_name(s.config.bnb_4bit_quant_type))));
        CHECK(saved.info(layer + ".weight").dtype == DType::u8);
      } else {
        CHECK(saved.info(layer + ".weight").dtype == DType::i8);
        CHECK(saved.contains(layer + ".SCB"));
        CHECK(saved.contains(layer + ".weight_format"));
      }
      // The file alone says what each weight is and gives it back (quant/formats/bnb_checkpoint.hpp).
      const auto tensors = bnb_checkpoint_tensors(dir.file("model.safetensors"));
      const auto infos = bnb_weights(tensors);
      CHECK(infos.size() == (model == "tiny_llama" ? 14u : 8u));
      for (const auto& info : infos) {
        CHECK(info.scheme == (s.config.load_in_8bit ? "int8" : std::string(bnb_quant_type_name(s.config.bnb_4bit_quant_type))));
        CHECK(info.double_quant == (s.config.load_in_4bit && s.config.bnb_4bit_use_double_quant));
      }
      CHECK_FALSE(bnb_dequantize(tensors, "model.norm.weight").has_value());
      {
        // The tensor that says how to read a weight, lost: an error naming it, not codes read as
        // floats.
        auto lost = tensors;
        const std::string missing =
            s.config.load_in_4bit ? layer + ".weight.quant_state.bitsandbytes__" +
                                        std::string(bnb_quant_type_name(s.config.bnb_4bit_quant_type))
                                  : layer + ".SCB";
        REQUIRE(lost.erase(missing) == 1);
        const std::string named = s.config.load_in_4bit ? layer + ".weight.quant_state.bitsandbytes__" : missing;
        CHECK_THROWS_WITH(bnb_weights(lost), Catch::Contains(named) && Catch::Contains("missing"));
        CHECK_THROWS_AS(bnb_dequantize(lost, layer + ".weight"), FormatError);
        CHECK_THROWS_WITH(bnb_dequantize(lost, layer + ".weight"), Catch::Contains(named));
      }
      if (model == "tiny_llama") {
        const auto w = bnb_dequantize(tensors, layer + ".weight");
        REQUIRE(w.has_value());
        CHECK(w->shape() == Shape{48, 48});
        auto copy = load(model_dir(model), BnbQuantizer(s.config));
        BnbQuantizer(s.config).dequantize(copy.model->module());
        CHECK(w->to_vector<float>() == copy.model->module().get_parameter(layer + ".weight").to(DType::f32).to_vector<float>());
      }
      const auto cfg = read_json(dir.path / "config.json");
      CHECK(cfg.at("quantization_config").at("quant_method") == "bitsandbytes");
      CHECK(cfg.at("quantization_config").at("load_in_4bit") == s.config.load_in_4bit);

      auto q = BnbQuantizer::from_model_config(cfg);
      dispatch::AnyQuantizer any(q);
      auto back = dispatch::load_pretrained_causal_lm(dir.path,
                                                      {.dtype = DType::f32, .show_progress = false, .quantizer = any});
      CHECK(any.target<BnbQuantizer>()->pre_quantized());
      CHECK(any.target<BnbQuantizer>()->swapped() == (model == "tiny_llama" ? 14u : 8u));
      CHECK(logits_of(back) == want);
      // Every state tensor was claimed (offered to the quantizer by the loader): nothing the
      // loader met is left unexpected.
      for (const auto& k : back.load.unexpected_keys) CHECK(k.find(".weight.") == std::string::npos);
      for (const auto& k : back.load.unexpected_keys) CHECK(!k.ends_with(".SCB"));
    }
  }
}

TEST_CASE("bnb_4bit_quant_storage: packed bytes saved as its elements, read back as the same bytes", "[bnb]") {
  accel_test::TempDir dir;
  BitsAndBytesConfig plain{.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4};
  auto p = load(model_dir("tiny_llama"), BnbQuantizer(plain));
  const auto want = logits_of(p);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";  // [48, 48]: 1152 packed bytes
  for (const DType storage : {DType::bf16, DType::f32, DType::i8, DType::f64}) {
    INFO(dtype_name(storage));
    BitsAndBytesConfig c = plain;
    c.bnb_4bit_quant_storage = storage;
    auto r = load(model_dir("tiny_llama"), BnbQuantizer(c));
    CHECK(bnb_config_of(r.model->module()).bnb_4bit_quant_storage == storage);
    const fs::path out = dir.path / dtype_name(storage);
    save_bnb_model(r.model->module(), r.config, out);  // the config the model's layers carry
    const auto saved = io::SafetensorsFile::open((out / "model.safetensors").string());
    CHECK(saved.info(q).dtype == storage);
    CHECK(saved.info(q).shape == Shape{1152 / static_cast<std::int64_t>(itemsize(storage)), 1});
    // Float tensors keep their dtype.
    CHECK(saved.info("model.norm.weight").dtype == r.model->module().get_parameter("model.norm.weight").dtype());
    const auto cfg = read_json(out / "config.json");
    CHECK(cfg.at("quantization_config").at("bnb_4bit_quant_storage") == dtype_name(storage));
    auto back = load(out, BnbQuantizer::from_model_config(cfg));
    CHECK(logits_of(back) == want);
  }
  // A 3 x 3 layer packs 9 codes into 5 bytes: no whole number of bfloat16 values, refused by name.
  Linear4bit odd(3, 3, false);
  odd.quantize(Tensor::ones({3, 3}));
  CHECK(quant::detail::packed_as_storage("w", odd.weight(), DType::i8).numel() == 5);
  CHECK_THROWS_WITH(quant::detail::packed_as_storage("m.weight", odd.weight(), DType::bf16),
                    Catch::Contains("m.weight") && Catch::Contains("5 packed bytes") && Catch::Contains("bfloat16"));
}

TEST_CASE("malformed bitsandbytes folders are FormatErrors naming the file and the tensor", "[bnb]") {
  accel_test::TempDir dir;
  const fs::path good = dir.path / "good";
  for (const auto& s : {schemes()[1], schemes()[4]}) {
    auto p = load(model_dir("tiny_llama"), BnbQuantizer(s.config));
    save_bnb_model(p.model->module(), p.config, s.config.load_in_4bit ? good : dir.path / "good8");
  }
  const std::string q = "model.layers.0.self_attn.q_proj.weight";  // [48, 48]: 36 blocks of 64
  auto expect = [&](const fs::path& folder, const std::string& tensor, const std::string& what) {
    INFO(tensor << ": " << what);
    auto cfg = read_json(folder / "config.json");
    try {
      (void)load(folder, BnbQuantizer::from_model_config(cfg));
      FAIL("no FormatError");
    } catch (const FormatError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find((folder / "model.safetensors").string()) != std::string::npos);
      CHECK(msg.find(tensor) != std::string::npos);
      CHECK(msg.find(what) != std::string::npos);
    }
  };
  SECTION("wrong absmax count") {
    edited_copy(good, dir.path / "a",
                [&](auto& t) { t[q + ".absmax"] = t[q + ".absmax"].narrow(0, 0, 35).contiguous(); });
    expect(dir.path / "a", q + ".absmax", "36");
  }
  SECTION("quant_state disagreeing with the layer's shape") {
    edited_copy(good, dir.path / "b", [&](auto& t) {
      const auto st = quant_state_from_tensors(q, {t.begin(), t.end()});
      BnbQuantState wrong = st;
      wrong.shape = Shape{24, 96};  // the same 2304 values, not the layer's [48, 48]
      t[q + ".quant_state.bitsandbytes__nf4"] = json_bytes(quant_state_json(wrong));
    });
    expect(dir.path / "b", q + ".quant_state.bitsandbytes__nf4", "[24, 96]");
  }
  SECTION("missing side tensor") {
    edited_copy(good, dir.path / "c", [&](auto& t) { t.erase(q + ".quant_map"); });
    expect(dir.path / "c", q + ".quant_map", "missing");
  }
  SECTION("missing nested absmax of a double-quantized weight") {
    edited_copy(good, dir.path / "d", [&](auto& t) { t.erase(q + ".nested_absmax"); });
    expect(dir.path / "d", q + ".nested_absmax", "missing");
  }
  SECTION("missing quant_state") {
    edited_copy(good, dir.path / "e", [&](auto& t) { t.erase(q + ".quant_state.bitsandbytes__nf4"); });
    expect(dir.path / "e", q + ".quant_state", "missing");
  }
  SECTION("a float weight where the checkpoint stores state") {
    edited_copy(good, dir.path / "f", [&](auto& t) { t[q] = Tensor::zeros({48, 48}); });
    expect(dir.path / "f", q, "float32");
  }
  SECTION("packed bytes stored as bfloat16 (bnb_4bit_quant_storage) load as they are") {
    edited_copy(good, dir.path / "s", [&](auto& t) {
      const Tensor u = t[q];
      std::vector<std::int16_t> v(static_cast<std::size_t>(u.numel() / 2));
      std::memcpy(v.data(), u.data_ptr(), u.nbytes());
      t[q] = Tensor::from_vector(v, Shape{u.numel() / 2, 1}).view_as(DType::bf16);
    });
    auto a = load(good, BnbQuantizer::from_model_config(read_json(good / "config.json")));
    auto b = load(dir.path / "s", BnbQuantizer::from_model_config(read_json(good / "config.json")));
    CHECK(logits_of(a) == logits_of(b));
  }
  SECTION("int8: missing SCB, wrong weight_format") {
    const std::string l = "model.layers.0.mlp.down_proj";
    edited_copy(dir.path / "good8", dir.path / "g", [&](auto& t) { t.erase(l + ".SCB"); });
    expect(dir.path / "g", l + ".SCB", "missing");
    edited_copy(dir.path / "good8", dir.path / "h",
                [&](auto& t) { t[l + ".weight_format"] = Tensor::ones(Shape{}, DType::u8); });
    expect(dir.path / "h", l + ".weight_format", "format");
  }
}

TEST_CASE("dequantize() restores float layers holding the dequantized weights", "[bnb]") {
  for (const std::string model : {"tiny_llama", "tiny_gpt2"}) {
    INFO(model);
    BnbQuantizer q({.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4, .bnb_4bit_use_double_quant = true});
    auto p = load(model_dir(model), q);
    nn::Module& root = p.model->module();
    std::map<std::string, Tensor> want;
    for (const auto& [n, m] : root.named_modules()) {
      if (auto* l = dynamic_cast<Linear4bit*>(m)) want.emplace(n, dequantize_4bit(l->weight(), *l->quant_state()));
    }
    const auto quantized = logits_of(p);
    q.dequantize(root);
    CHECK(count_layers(root, "Linear4bit") == 0);
    for (const auto& [n, w] : want) {
      const nn::Module& m = root.get_submodule(n);
      const Tensor got = m.class_name() == "Conv1D" ? m.get_parameter("weight").t() : m.get_parameter("weight");
      CHECK((m.class_name() == "Linear" || m.class_name() == "Conv1D"));
      CHECK(got.contiguous().to_vector<float>() == w.to_vector<float>());
    }
    // The float product of the same values: equal up to summation order, and on the tiers that
    // take the 16-bit integer form of the 4-bit product, up to its rounding (1e-4 of each product's
    // scale, quant/kernels/bnb_4bit_gemv/int16_codes.hpp) carried through the layers.
    CHECK(rel_err(logits_of(p), quantized) < 1e-3);
  }
  BnbQuantizer q8({.load_in_8bit = true});
  auto p = load(model_dir("tiny_llama"), q8);
  const Int8Weight w =
      dynamic_cast<Linear8bitLt&>(p.model->module().get_submodule("model.layers.1.mlp.up_proj")).int8_weight();
  q8.dequantize(p.model->module());
  CHECK(p.model->module().get_parameter("model.layers.1.mlp.up_proj.weight").to_vector<float>() ==
        int8_vectorwise_dequant(w).to_vector<float>());
}

TEST_CASE("load_and_quantize_model: Accelerate's function on a meta model", "[bnb]") {
  const auto config = read_json(model_dir("tiny_llama") / "config.json");
  auto build = [&] {
    auto guard = nn::init_empty_weights(false);
    return models::causal_lm_from_hf_config(config, DType::f32);
  };
  auto ref = load(model_dir("tiny_llama"));
  const auto want = logits_of(ref);
  const std::string weights = io::resolve_checkpoint_folder(model_dir("tiny_llama")).path.string();

  auto lm = build();
  const auto r = load_and_quantize_model(
      lm->module(),
      {.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4, .bnb_4bit_compute_dtype = DType::f32}, weights,
      {.show_progress = false});
  CHECK(r.swapped == 14);
  CHECK(r.load.missing_keys.empty());
  CHECK(r.load.unexpected_keys.empty());
  CHECK(r.device_map.lookup("model.embed_tokens.weight")->is_cpu());
  CHECK(r.quantization_config.llm_int8_skip_modules == std::vector<std::string>{"lm_head"});
  CHECK(rel_err(lm->logits(prompt()).to_vector<float>(), want) < logits_bound("tiny_llama", "nf4"));

  // keep_in_fp32_modules: the layer stays float32 while the rest is bfloat16.
  auto kept = build();
  const auto r2 = load_and_quantize_model(
      kept->module(),
      {.load_in_8bit = true, .torch_dtype = DType::bf16, .keep_in_fp32_modules = std::vector<std::string>{"o_proj"}},
      weights, {.device_map = std::string("auto"), .show_progress = false});
  CHECK(r2.swapped == 12);
  CHECK(kept->module().get_submodule("model.layers.0.self_attn.o_proj").class_name() == "Linear");
  CHECK(kept->module().get_parameter("model.layers.0.self_attn.o_proj.weight").dtype() == DType::f32);
  CHECK(kept->module().get_parameter("model.norm.weight").dtype() == DType::bf16);
  CHECK(kept->module().get_parameter("lm_head.weight").dtype() == DType::bf16);

  // A model already loaded is quantized in place.
  auto loaded = load(model_dir("tiny_llama"));
  const auto r3 = load_and_quantize_model(
      loaded.model->module(),
      {.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4, .bnb_4bit_compute_dtype = DType::f32},
      std::nullopt);
  CHECK(r3.swapped == 14);
  CHECK(logits_of(loaded) == lm->logits(prompt()).to_vector<float>());

  // A bitsandbytes folder: taken as stored, its state tensors neither missing nor unexpected.
  accel_test::TempDir dir;
  save_bnb_model(lm->module(), config, dir.path);
  auto again = build();
  const auto r4 = load_and_quantize_model(again->module(), {.load_in_4bit = true, .bnb_4bit_compute_dtype = DType::f32},
                                          dir.file("model.safetensors"), {.show_progress = false});
  CHECK(r4.swapped == 14);
  CHECK(r4.load.missing_keys.empty());
  CHECK(r4.load.unexpected_keys.empty());
  CHECK(again->logits(prompt()).to_vector<float>() == lm->logits(prompt()).to_vector<float>());

  auto meta = build();
  CHECK_THROWS_AS(load_and_quantize_model(meta->module(), {.load_in_8bit = true}, std::nullopt), ValueError);
  CHECK_THROWS_AS(
      load_and_quantize_model(meta->module(), {.load_in_8bit = true}, weights, {.device_map = std::string("fast")}),
      ValueError);
}

TEST_CASE("load_and_quantize_model: quantized layers on disk, int8 with its SCB beside it", "[bnb]") {
  // Accelerate offloads an 8-bit weight with its SCB; a 4-bit layer goes to disk too (its quant
  // state in memory). The hooks read the codes back per call: the logits of the model in memory.
  const auto config = read_json(model_dir("tiny_llama") / "config.json");
  auto build = [&] {
    auto guard = nn::init_empty_weights(false);
    return models::causal_lm_from_hf_config(config, DType::f32);
  };
  const std::string weights = io::resolve_checkpoint_folder(model_dir("tiny_llama")).path.string();
  plan::DeviceMap half;
  for (const char* m : {"model.embed_tokens", "model.rotary_emb", "model.layers.0", "model.norm", "lm_head"})
    half.set(m, Placement::cpu());
  half.set("model.layers.1", Placement::disk());
  const std::string up = "model.layers.1.mlp.up_proj";
  for (const bool eight : {true, false}) {
    INFO((eight ? "int8" : "nf4"));
    const BnbQuantizationConfig c = eight ? BnbQuantizationConfig{.load_in_8bit = true}
                                          : BnbQuantizationConfig{.load_in_4bit = true,
                                                                  .bnb_4bit_quant_type = BnbQuantType::nf4,
                                                                  .bnb_4bit_compute_dtype = DType::f32};
    auto mem = build();
    const auto r_mem = load_and_quantize_model(mem->module(), c, weights, {.show_progress = false});
    const auto want = mem->logits(prompt()).to_vector<float>();
    accel_test::TempDir dir;
    const std::string off = (dir.path / "offload").string();
    auto lm = build();
    const auto r = load_and_quantize_model(lm->module(), c, weights,
                                           {.device_map = half, .offload_folder = off, .show_progress = false});
    CHECK(r.swapped == r_mem.swapped);
    CHECK(r.load.missing_keys.empty());
    CHECK(lm->module().get_submodule(up).class_name() == (eight ? "Linear8bitLt" : "Linear4bit"));
    CHECK(lm->module().get_parameter(up + ".weight").is_meta());
    const io::OffloadIndex index = io::read_offload_index(off);
    REQUIRE(index.contains(up + ".weight"));
    CHECK(index.at(up + ".weight").at("dtype") == (eight ? "int8" : "uint8"));
    if (eight) {
      REQUIRE(index.contains(up + ".SCB"));
      CHECK(index.at(up + ".SCB").at("dtype") == "float32");
      CHECK(io::load_offload_entry(up + ".SCB", index.at(up + ".SCB"), off).to_vector<float>() ==
            mem->module().get_buffer(up + ".SCB").to_vector<float>());
      CHECK(io::load_offload_entry(up + ".weight", index.at(up + ".weight"), off).to_vector<std::int8_t>() ==
            mem->module().get_parameter(up + ".weight").to_vector<std::int8_t>());
    }
    CHECK_FALSE(index.contains("model.layers.0.mlp.up_proj.weight"));
    CHECK(lm->logits(prompt()).to_vector<float>() == want);

    // The same layers saved quantized, then loaded with the same map: taken as stored, to disk.
    accel_test::TempDir saved;
    save_bnb_model(mem->module(), config, saved.path);
    const std::string off2 = (saved.path / "offload").string();
    auto again = build();
    const auto r2 = load_and_quantize_model(again->module(), c, saved.file("model.safetensors"),
                                            {.device_map = half, .offload_folder = off2, .show_progress = false});
    CHECK(r2.load.missing_keys.empty());
    CHECK(r2.load.unexpected_keys.empty());
    CHECK(again->module().get_parameter(up + ".weight").is_meta());
    CHECK(io::read_offload_index(off2).contains(up + ".weight"));
    CHECK(again->logits(prompt()).to_vector<float>() == want);

    // A strategy under three quarters of the quantized model's bytes (a quarter is the largest
    // layer kept back) sends quantized layers to disk.
    std::int64_t bytes = 0;
    for (const auto& [n, t] : mem->module().named_parameters()) bytes += static_cast<std::int64_t>(t.nbytes());
    plan::MaxMemory small;
    small.add(Placement::cpu(), ByteSize(bytes * 3 / 4));
    auto planned = build();
    const auto r3 = load_and_quantize_model(planned->module(), c, weights,
                                            {.device_map = std::string("sequential"), .max_memory = small,
                                             .offload_folder = (dir.path / "offload3").string(), .show_progress = false});
    bool disk = false;
    for (const auto& [k, p] : r3.device_map) disk |= p.is_disk() && k.starts_with("model.layers.");
    CHECK(disk);
    CHECK(planned->logits(prompt()).to_vector<float>() == want);
  }
}

TEST_CASE("state tensors handed to create_quantized_param after their weight complete the layer", "[bnb]") {
  // What a loader that passes every checkpoint name to the quantizer does: the packed weight waits
  // for its quant_state (which sorts after it), then the layer is built.
  accel_test::TempDir dir;
  BnbQuantizer q0({.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::fp4, .bnb_4bit_use_double_quant = true});
  auto p = load(model_dir("tiny_llama"), q0);
  save_bnb_model(p.model->module(), p.config, dir.path);
  const auto config = read_json(dir.path / "config.json");
  std::shared_ptr<models::CausalLM> lm;
  {
    auto guard = nn::init_empty_weights(false);
    lm = models::causal_lm_from_hf_config(config, DType::f32);
  }
  nn::Module& root = lm->module();
  auto q = BnbQuantizer::from_model_config(config);
  const std::vector<std::string> files{dir.file("model.safetensors")};
  q.preprocess_model(root, files);
  CHECK(q.pre_quantized());
  q.postprocess_model(root);  // drops what preprocess read: every state tensor must now come through the hook
  const auto f = io::SafetensorsFile::open(files[0]);
  for (const auto& name : f.keys()) {  // sorted, as transformers writes them
    if (q.check_if_quantized_param(root, f.tensor(name), name)) q.create_quantized_param(root, f.tensor(name), name, Device::cpu());
  }
  // Every Linear4bit of `built` holds the weight the saved model had.
  const auto layers_match = [&](nn::Module& built) {
    std::size_t count = 0;
    for (const auto& [n, m] : built.named_modules()) {
      if (auto* l = dynamic_cast<Linear4bit*>(m)) {
        REQUIRE(l->quant_state());
        const auto& want = dynamic_cast<Linear4bit&>(p.model->module().get_submodule(n));
        CHECK(l->dequantized_weight().to_vector<float>() == want.dequantized_weight().to_vector<float>());
        ++count;
      }
    }
    CHECK(count == 14);
  };
  layers_match(root);

  // load_checkpoint_in_model offers the state tensors the model has no cells for the same way:
  // the quantizer below has dropped what its preprocess_model read, so every layer's state comes
  // from the loader.
  std::shared_ptr<models::CausalLM> lm2;
  {
    auto guard = nn::init_empty_weights(false);
    lm2 = models::causal_lm_from_hf_config(config, DType::f32);
  }
  auto q2 = BnbQuantizer::from_model_config(config);
  q2.preprocess_model(lm2->module(), files);
  q2.postprocess_model(lm2->module());
  const auto r = dispatch::load_checkpoint_in_model(lm2->module(), files[0],
                                                    {.show_progress = false, .quantizer = dispatch::AnyQuantizer(std::move(q2))});
  CHECK(r.unexpected_keys.empty());
  CHECK(r.missing_keys.empty());
  layers_match(lm2->module());
  // A GPU placement quantizes on the CPU and moves the bytes there: tests/cuda_kernels runs it.
}

TEST_CASE("llm_int8_has_fp16_weight keeps the float weights and gives LLM.int8()'s outputs", "[bnb]") {
  for (const std::string model : {"tiny_llama", "tiny_gpt2"}) {
    INFO(model);
    auto ref = load(model_dir(model));
    auto int8 = load(model_dir(model), BnbQuantizer({.load_in_8bit = true}));
    BnbQuantizer q({.load_in_8bit = true, .llm_int8_has_fp16_weight = true});
    auto p = load(model_dir(model), q);
    nn::Module& root = p.model->module();
    CHECK(count_layers(root, "Linear8bitLt") == (model == "tiny_llama" ? 14u : 8u));
    CHECK(p.load.missing_keys.empty());
    CHECK(p.load.unexpected_keys.empty());
    for (const auto& [n, m] : root.named_modules()) {
      auto* l = dynamic_cast<Linear8bitLt*>(m);
      if (!l) continue;
      INFO(n);
      CHECK(l->options().has_fp16_weights);
      CHECK(l->holds_float_weight());
      CHECK(l->weight().dtype() == DType::f32);
      CHECK_FALSE(root.find_buffer(n + ".SCB"));  // bnb neither holds nor saves one then
      CHECK_FALSE(root.find_buffer(n + ".weight_format"));
      const Tensor f = ref.model->module().get_parameter(n + ".weight");
      CHECK(l->weight().to_vector<float>() == (model == "tiny_gpt2" ? f.t().contiguous() : f).to_vector<float>());
      CHECK(l->dequantized_weight().to_vector<float>() == l->weight().to_vector<float>());
      // Quantized per call as Int8Params quantizes on load: the codes of the int8 model.
      const auto& q8 = dynamic_cast<const Linear8bitLt&>(int8.model->module().get_submodule(n));
      const Int8Weight w = l->int8_weight();
      CHECK(w.CB.to_vector<std::int8_t>() == q8.weight().to_vector<std::int8_t>());
      CHECK(w.SCB.to_vector<float>() == q8.SCB().to_vector<float>());
      CHECK_THROWS_AS(l->set_quantized(q8.int8_weight()), ValueError);
    }
    const auto want = logits_of(int8);
    CHECK(logits_of(p) == want);

    // Saved as bnb saves such a model: float weights, no SCB, the flag in the config; read back so.
    accel_test::TempDir dir;
    save_bnb_model(root, p.config, dir.path);
    const auto cfg = read_json(dir.path / "config.json");
    CHECK(cfg.at("quantization_config").at("llm_int8_has_fp16_weight") == true);
    CHECK(cfg.at("quantization_config").at("load_in_8bit") == true);
    const auto saved = io::SafetensorsFile::open(dir.file("model.safetensors"));
    const std::string layer = model == "tiny_llama" ? "model.layers.0.self_attn.q_proj" : "transformer.h.0.attn.c_attn";
    CHECK(saved.info(layer + ".weight").dtype == DType::f32);
    for (const auto& k : saved.keys()) CHECK_FALSE((k.ends_with(".SCB") || k.ends_with(".weight_format")));
    auto back = load(dir.path, BnbQuantizer::from_model_config(cfg));
    CHECK(count_layers(back.model->module(), "Linear8bitLt") == count_layers(root, "Linear8bitLt"));
    CHECK(dynamic_cast<Linear8bitLt&>(back.model->module().get_submodule(layer)).options().has_fp16_weights);
    CHECK(back.load.missing_keys.empty());
    CHECK(logits_of(back) == want);
  }
}

TEST_CASE("offload_8bit_bnb: int8 layers on disk offloaded as codes and SCB, or as their float weights", "[bnb]") {
  // Accelerate's load_checkpoint_in_model: with offload_8bit_bnb the weight is quantized and its
  // codes go to disk with SCB beside them; without (its default) the float weight goes as it is
  // and the layer quantizes it per call. Both give the logits of the model in memory.
  for (const std::string model : {"tiny_llama", "tiny_gpt2"}) {
    const auto config = read_json(model_dir(model) / "config.json");
    const std::string weights = io::resolve_checkpoint_folder(model_dir(model)).path.string();
    const std::vector<std::string> files = io::resolve_checkpoint_files(weights);
    const std::string block = model == "tiny_llama" ? "model.layers.1" : "transformer.h.1";
    const std::string layer = model == "tiny_llama" ? block + ".mlp.up_proj" : block + ".mlp.c_fc";
    auto quantized = [&](const std::optional<plan::DeviceMap>& dm, const std::optional<std::string>& off, bool codes,
                         bool buffers = false) {
      std::shared_ptr<models::CausalLM> lm;
      {
        auto guard = nn::init_empty_weights(false);
        lm = models::causal_lm_from_hf_config(config, DType::f32);
      }
      BnbQuantizer q({.load_in_8bit = true});
      q.preprocess_model(lm->module(), files);
      const auto r = dispatch::load_checkpoint_in_model(
          lm->module(), weights,
          {.device_map = dm, .offload_folder = off, .offload_buffers = buffers, .show_progress = false,
           .quantizer = dispatch::AnyQuantizer(q), .offload_8bit_bnb = codes});
      CHECK(r.missing_keys.empty());
      CHECK(r.unexpected_keys.empty());
      if (dm) dispatch::dispatch_model(lm->module(), *dm, {.offload_dir = off, .offload_buffers = buffers});
      return lm;
    };
    auto mem = quantized(std::nullopt, std::nullopt, true);
    const auto want = mem->logits(prompt()).to_vector<float>();
    plan::DeviceMap dm;
    for (const auto& named : {mem->module().named_parameters(), mem->module().named_buffers()}) {
      for (const auto& [name, t] : named) {
        if (!name.starts_with(block + ".")) dm.set(name, Placement::cpu());
      }
    }
    dm.set(block, Placement::disk());
    for (const bool codes : {true, false}) {
      INFO(model << (codes ? " offload_8bit_bnb" : " without offload_8bit_bnb"));
      accel_test::TempDir dir;
      const std::string off = (dir.path / "offload").string();
      auto lm = quantized(dm, off, codes);
      const io::OffloadIndex index = io::read_offload_index(off);
      REQUIRE(index.contains(layer + ".weight"));
      CHECK(index.at(layer + ".weight").at("dtype") == (codes ? "int8" : "float32"));
      CHECK(index.contains(layer + ".SCB") == codes);
      const Tensor on_disk = io::load_offload_entry(layer + ".weight", index.at(layer + ".weight"), off);
      const auto& in_memory = dynamic_cast<const Linear8bitLt&>(mem->module().get_submodule(layer));
      if (codes) {
        CHECK(on_disk.to_vector<std::int8_t>() == in_memory.weight().to_vector<std::int8_t>());
      } else {
        // [out, in] whatever the checkpoint's layout (GPT-2's Conv1D stores [in, out]).
        CHECK(on_disk.shape() == in_memory.weight().shape());
        CHECK(quantize_int8_weight(on_disk).CB.to_vector<std::int8_t>() == in_memory.weight().to_vector<std::int8_t>());
      }
      CHECK(lm->logits(prompt()).to_vector<float>() == want);
      if (!codes) {
        // The layer's buffers go beside its float weight when buffers are offloaded too.
        accel_test::TempDir dir2;
        const std::string off2 = (dir2.path / "offload").string();
        auto lb = quantized(dm, off2, false, true);
        CHECK(io::read_offload_index(off2).contains(layer + ".SCB"));
        CHECK(lb->logits(prompt()).to_vector<float>() == want);
      }
    }
  }
}

}  // namespace quant_bnb_quantizer_test
