// Quanto's serialized form: the group Quanto picks, PackedTensor's packing along the first
// dimension and the shift written out by hand, Quanto's arithmetic in the layer's dtype, and a
// model quantized on load saved as Diffusers saves it and loaded back as stored (in memory and with
// layers on disk) computing the same logits; bad files are FormatErrors naming file and tensor.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"
#include "quant_test_support.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/quant/formats/quanto_format.hpp"
#include "accel/quant/quantizers/quanto.hpp"

// A namespace of its own: the layer's tests compile as one translation unit.
namespace quant_quanto_test {

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::quant;

namespace {

using accel_test::model_dir;

Tensor prompt() { return Tensor::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, Shape{1, 8}); }

/// A weight of `out` x `in` whose code at (o, c) is known: codes(o, c) = (7 o + 3 c) mod 2^bits.
AffineWeight known_codes(AffineScheme s, std::int64_t out, std::int64_t in) {
  const int bits = affine_scheme_info(s).bits, k = 8 / bits;
  AffineWeight w;
  w.in = in;
  w.out = out;
  w.group = quanto_group_size(s, in);
  const std::int64_t groups = in / w.group;
  w.codes = Tensor::zeros(affine_code_shape(s, in, out), DType::u8);
  auto* q = static_cast<std::uint8_t*>(w.codes.data_ptr());
  for (std::int64_t o = 0; o < out; ++o) {
    for (std::int64_t c = 0; c < in; ++c) {
      const int code = static_cast<int>((7 * o + 3 * c) % (1 << bits));
      q[o * w.codes.size(1) + c / k] |= static_cast<std::uint8_t>(code << (bits * (c % k)));
    }
  }
  std::vector<float> sc, mn;
  for (std::int64_t i = 0; i < out * groups; ++i) {
    sc.push_back(0.25f + 0.125f * static_cast<float>(i));
    mn.push_back(-1.5f + 0.5f * static_cast<float>(i));
  }
  w.scale = Tensor::from_vector(sc, Shape{out, groups});
  w.min = Tensor::from_vector(mn, Shape{out, groups});
  return w;
}

int code_at(std::int64_t o, std::int64_t c, int bits) { return static_cast<int>((7 * o + 3 * c) % (1 << bits)); }

std::map<std::string, Tensor, std::less<>> by_suffix(const std::string& layer,
                                                    const std::vector<std::pair<std::string, Tensor>>& ts) {
  std::map<std::string, Tensor, std::less<>> m;
  for (const auto& [n, t] : ts) m.emplace(n.substr(layer.size()), t);
  return m;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

}  // namespace

TEST_CASE("Quanto's group: 128, else 96 / 64 / 32 dividing the inputs, else one per row", "[quant][quanto]") {
  for (const auto s : {AffineScheme::quanto_int4, AffineScheme::quanto_int2}) {
    CHECK(quanto_group_size(s, 48) == 48);
    CHECK(quanto_group_size(s, 128) == 128);
    CHECK(quanto_group_size(s, 256) == 128);
    CHECK(quanto_group_size(s, 11008) == 128);
    CHECK(quanto_group_size(s, 288) == 96);
    CHECK(quanto_group_size(s, 320) == 64);
    CHECK(quanto_group_size(s, 160) == 32);
    CHECK(quanto_group_size(s, 129) == 129);
  }
  CHECK(quanto_group_size(AffineScheme::quanto_int8, 4096) == 4096);
  CHECK(quanto_group_size(AffineScheme::quanto_float8, 4096) == 4096);
  CHECK_THROWS_AS(quanto_tensors("x", AffineScheme::torchao_int4_weight_only, AffineWeight{}, DType::f32), ValueError);
}

TEST_CASE("Quanto packs group rows along the first dimension, shift = -min", "[quant][quanto]") {
  SECTION("int4, 3 rows of 48 inputs: one group per row, rows 0 and 2 share a byte row") {
    const auto s = AffineScheme::quanto_int4;
    const AffineWeight w = known_codes(s, 3, 48);
    const auto ts = quanto_tensors("l", s, w, DType::f32);
    const auto m = by_suffix("l", ts);
    const Tensor& p = m.at(".weight._data._data");
    REQUIRE(p.shape() == Shape{2, 48});
    REQUIRE(p.dtype() == DType::u8);
    const auto* b = static_cast<const std::uint8_t*>(p.data_ptr());
    for (int c = 0; c < 48; ++c) {
      CHECK(b[c] == (code_at(0, c, 4) | code_at(2, c, 4) << 4));
      CHECK(b[48 + c] == code_at(1, c, 4));
    }
    CHECK(m.at(".weight._scale").shape() == Shape{3, 1});
    CHECK(m.at(".weight._scale").to_vector<float>() == std::vector<float>{0.25f, 0.375f, 0.5f});
    CHECK(m.at(".weight._shift").to_vector<float>() == std::vector<float>{1.5f, 1.0f, 0.5f});
    CHECK(m.at(".input_scale").shape() == Shape{});
    CHECK(m.at(".output_scale").to_vector<float>() == std::vector<float>{1.0f});
  }
  SECTION("int2, 5 rows: byte row 0 holds rows 0, 2, 4; byte row 1 rows 1, 3") {
    const auto s = AffineScheme::quanto_int2;
    const auto m = by_suffix("l", quanto_tensors("l", s, known_codes(s, 5, 48), DType::f32));
    const Tensor& p = m.at(".weight._data._data");
    REQUIRE(p.shape() == Shape{2, 48});
    const auto* b = static_cast<const std::uint8_t*>(p.data_ptr());
    for (int c = 0; c < 48; ++c) {
      CHECK(b[c] == (code_at(0, c, 2) | code_at(2, c, 2) << 2 | code_at(4, c, 2) << 4));
      CHECK(b[48 + c] == (code_at(1, c, 2) | code_at(3, c, 2) << 2));
    }
  }
  SECTION("int4, 2 rows of 256 inputs: groups of 128, group rows o * 2 + j") {
    const auto s = AffineScheme::quanto_int4;
    const auto m = by_suffix("l", quanto_tensors("l", s, known_codes(s, 2, 256), DType::bf16));
    const Tensor& p = m.at(".weight._data._data");
    REQUIRE(p.shape() == Shape{2, 128});
    const auto* b = static_cast<const std::uint8_t*>(p.data_ptr());
    for (int c = 0; c < 128; ++c) {
      // Group rows 0 (row 0, columns 0-127) and 2 (row 1, columns 0-127) share byte row 0.
      CHECK(b[c] == (code_at(0, c, 4) | code_at(1, c, 4) << 4));
      CHECK(b[128 + c] == (code_at(0, 128 + c, 4) | code_at(1, 128 + c, 4) << 4));
    }
    CHECK(m.at(".weight._scale").dtype() == DType::bf16);
    CHECK(m.at(".weight._scale").shape() == Shape{4, 1});
  }
  SECTION("every scheme reads back what it wrote") {
    for (const auto s : {AffineScheme::quanto_int8, AffineScheme::quanto_int4, AffineScheme::quanto_int2,
                         AffineScheme::quanto_float8}) {
      INFO(affine_scheme_info(s).name);
      for (const std::int64_t in : {48, 256, 288, 129}) {
        std::mt19937 g(static_cast<unsigned>(in));
        std::normal_distribution<float> d;
        std::vector<float> v(static_cast<std::size_t>(7 * in));
        for (auto& x : v) x = d(g);
        const AffineWeight w = quantize_affine(s, Tensor::from_vector(v, Shape{7, in}), quanto_group_size(s, in));
        const AffineWeight back = quanto_weight("l", s, in, 7, by_suffix("l", quanto_tensors("l", s, w, DType::f32)));
        CHECK(back.codes.view_as(DType::u8).to_vector<std::uint8_t>() == w.codes.view_as(DType::u8).to_vector<std::uint8_t>());
        CHECK(back.scale.to_vector<float>() == w.scale.to_vector<float>());
        if (w.min.defined()) CHECK(back.min.to_vector<float>() == w.min.to_vector<float>());
        CHECK(back.group == w.group);
      }
    }
  }
}

TEST_CASE("Quanto's arithmetic in bfloat16: each step rounded as torch rounds it", "[quant][quanto]") {
  // int4 (MaxOptimizer): scale = (max - min) / 15, code = round((w + shift) / scale), shift = -min,
  // each operation on bfloat16 tensors rounding its result to bfloat16; int8 (AbsmaxOptimizer):
  // scale = amax / 127, code = round(w / scale).
  auto bf = [](float v) { return static_cast<float>(bfloat16(v)); };
  std::mt19937 gen(11);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(4 * 128);
  for (auto& x : v) x = bf(d(gen));
  const Tensor w = Tensor::from_vector(v, Shape{4, 128});
  const AffineWeight q4 = quantize_affine(AffineScheme::quanto_int4, w, 128, DType::bf16);
  const AffineWeight q8 = quantize_affine(AffineScheme::quanto_int8, w, 0, DType::bf16);
  int differs_from_f32 = 0;
  for (int r = 0; r < 4; ++r) {
    float lo = v[r * 128], hi = lo, amax = 0;
    for (int c = 0; c < 128; ++c) {
      lo = std::min(lo, v[r * 128 + c]);
      hi = std::max(hi, v[r * 128 + c]);
      amax = std::max(amax, std::fabs(v[r * 128 + c]));
    }
    const float s4 = bf(bf(hi - lo) / 15.0f), s8 = bf(amax / 127.0f);
    CHECK(q4.scale.to_vector<float>()[r] == s4);
    CHECK(q4.min.to_vector<float>()[r] == lo);
    CHECK(q8.scale.to_vector<float>()[r] == s8);
    differs_from_f32 += s4 != (hi - lo) / 15.0f;
    const auto* c4 = static_cast<const std::uint8_t*>(q4.codes.data_ptr()) + r * 64;
    const auto* c8 = static_cast<const std::int8_t*>(q8.codes.data_ptr()) + r * 128;
    for (int c = 0; c < 128; ++c) {
      const float x = v[r * 128 + c];
      const int want4 = static_cast<int>(std::clamp(std::nearbyint(bf(bf(x + (-lo)) / s4)), 0.0f, 15.0f));
      CHECK(((c4[c / 2] >> (4 * (c % 2))) & 15) == want4);
      CHECK(c8[c] == static_cast<int>(std::clamp(std::nearbyint(bf(x / s8)), -128.0f, 127.0f)));
    }
  }
  CHECK(differs_from_f32 > 0);  // the rows do tell the two arithmetics apart
}

TEST_CASE("a Quanto model saved as Diffusers saves it loads back as stored", "[quant][quanto]") {
  const fs::path src = model_dir("tiny_llama");
  const auto config = read_json(src / "config.json");
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const std::string wd : {"int8", "int4", "int2", "float8"}) {
      INFO(wd << " " << dtype_name(dtype));
      QuantoQuantizer q({.weights_dtype = wd});
      auto p = dispatch::load_pretrained_causal_lm(src.string(), {.dtype = dtype, .show_progress = false, .quantizer = q});
      const auto want = p.model->logits(prompt()).to_vector<float>();
      accel_test::TempDir dir;
      save_quanto_model(p.model->module(), config, dir.path, dtype);

      const auto saved = read_json(dir.path / "config.json");
      CHECK(saved.at("quantization_config").at("quant_method") == "quanto");
      CHECK(saved.at("quantization_config").at("weights_dtype") == wd);
      CHECK(saved.at("quantization_config").at("modules_to_not_convert") == nlohmann::json::array({"lm_head"}));
      const io::StateDict sd = io::load_state_dict(dir.file("model.safetensors"));
      const std::string down = "model.layers.0.mlp.down_proj";  // 96 inputs: one group per row
      CHECK_FALSE(sd.contains(down + ".weight"));
      CHECK(sd.at(down + ".weight._scale").shape() == Shape{48, 1});
      CHECK(sd.at(down + ".weight._scale").dtype() == dtype);
      CHECK(sd.at(down + ".input_scale").shape() == Shape{});
      if (wd == "int8" || wd == "float8") {
        CHECK(sd.at(down + ".weight._data").dtype() == (wd == "int8" ? DType::i8 : DType::f8_e4m3fn));
        CHECK(sd.at(down + ".weight._data").shape() == Shape{48, 96});
      } else {
        CHECK(sd.at(down + ".weight._data._data").shape() == Shape{wd == "int4" ? 24 : 12, 96});
        CHECK(sd.at(down + ".weight._shift").shape() == Shape{48, 1});
      }
      CHECK(sd.at("lm_head.weight").dtype() == dtype);

      auto q2 = QuantoQuantizer::from_model_config(saved);
      auto back = dispatch::load_pretrained_causal_lm(dir.path.string(), {.dtype = dtype, .show_progress = false, .quantizer = q2});
      CHECK(back.load.missing_keys.empty());
      CHECK(back.load.unexpected_keys.empty());
      CHECK(back.model->module().get_submodule(down).class_name() == "AffineQuantizedLinear");
      CHECK(back.model->logits(prompt()).to_vector<float>() == want);

      // The same folder with its second layer on disk: the codes and scales go to the offload folder.
      if (dtype == DType::f32) {
        plan::DeviceMap half;
        for (const char* m : {"model.embed_tokens", "model.rotary_emb", "model.layers.0", "model.norm", "lm_head"}) {
          half.set(m, Placement::cpu());
        }
        half.set("model.layers.1", Placement::disk());
        auto disk = dispatch::load_pretrained_causal_lm(
            dir.path.string(), {.dtype = dtype, .show_progress = false, .device_map = half,
                                .offload_folder = (dir.path / "offload").string(),
                                .quantizer = QuantoQuantizer::from_model_config(saved)});
        CHECK(disk.load.missing_keys.empty());
        CHECK(disk.model->module().get_parameter("model.layers.1.mlp.up_proj.weight").is_meta());
        CHECK(disk.model->logits(prompt()).to_vector<float>() == want);
      }
    }
  }
}

TEST_CASE("bad Quanto tensors are FormatErrors naming the file and the tensor", "[quant][quanto]") {
  const fs::path src = model_dir("tiny_llama");
  const auto config = read_json(src / "config.json");
  QuantoQuantizer q({.weights_dtype = "int4"});
  auto p = dispatch::load_pretrained_causal_lm(src.string(), {.dtype = DType::f32, .show_progress = false, .quantizer = q});
  accel_test::TempDir dir;
  save_quanto_model(p.model->module(), config, dir.path / "good", DType::f32);
  const std::string l = "model.layers.1.self_attn.o_proj";
  auto edited = [&](const std::string& name, auto edit) {
    io::StateDict sd = io::load_state_dict((dir.path / "good" / "model.safetensors").string());
    std::map<std::string, Tensor> m;
    for (const auto& [n, t] : sd) m.emplace(n, t.clone());
    edit(m);
    fs::create_directories(dir.path / name);
    io::save_file(m, (dir.path / name / "model.safetensors").string(), {{"format", "pt"}});
    fs::copy_file(dir.path / "good" / "config.json", dir.path / name / "config.json");
    return dir.path / name;
  };
  auto expect = [&](const fs::path& folder, const std::string& tensor, const std::string& what) {
    const auto c = read_json(folder / "config.json");
    try {
      (void)dispatch::load_pretrained_causal_lm(folder.string(), {.dtype = DType::f32, .show_progress = false,
                                                                  .quantizer = QuantoQuantizer::from_model_config(c)});
      FAIL("no error for " << tensor);
    } catch (const FormatError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find(tensor) != std::string::npos);
      CHECK(msg.find("model.safetensors") != std::string::npos);
      CHECK(msg.find(what) != std::string::npos);
    }
  };
  expect(edited("scale", [&](auto& m) { m[l + ".weight._scale"] = Tensor::ones(Shape{47, 1}, DType::f32); }),
         l + ".weight._scale", "expected");
  expect(edited("shift", [&](auto& m) { m.erase(l + ".weight._shift"); }), l + ".weight._shift", "missing");
  expect(edited("data", [&](auto& m) { m[l + ".weight._data._data"] = Tensor::zeros(Shape{24, 48}, DType::i8); }),
         l + ".weight._data._data", "uint8");
}

}  // namespace quant_quanto_test
