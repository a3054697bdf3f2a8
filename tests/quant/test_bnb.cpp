// bitsandbytes' numerics: the NF4 / FP4 code books and decision trees, packing order, block-wise
// absmax and double quantization, the QuantState's tensors and JSON, the fused 4-bit GEMV,
// LLM.int8()'s weights and outlier-decomposed matmul (portable and VNNI), and the two configs.
//
// Byte-exact expectations follow bitsandbytes 0.50.2.dev0's code (functional.py, csrc/kernels.cu,
// backends/default/ops.py); each hand-computed case names the function it follows. No Python
// bitsandbytes runs here: the expectations are derived by hand or by an independent computation in
// this file (nearest code by argmin), never by the functions under test.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "accel/quant/config/bnb_config.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"
#include "accel/quant/layers/bnb_products.hpp"

// A namespace of its own: the layer's tests compile as one translation unit.
namespace quant_bnb_test {

using namespace accel;
using namespace accel::quant;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// What the 16-bit integer form of the 4-bit product may add to a float product of row `xr` with
// weight row `o` (quant/kernels/bnb_4bit_gemv/int16_codes.hpp): less than 1e-4 of the block's absmax times
// the largest activation magnitude of each 64-element run, per element.
double int16_form_bound(const float* xr, std::size_t in, const float* absmax, std::size_t o, std::size_t bs) {
  double bound = 0.0;
  for (std::size_t k = 0; k < in; k += 64) {
    float peak = 0.0f;
    for (std::size_t i = k; i < std::min(in, k + 64); ++i) peak = std::max(peak, std::fabs(xr[i]));
    for (std::size_t i = k; i < std::min(in, k + 64); ++i) bound += 1e-4 * peak * std::fabs(absmax[(o * in + i) / bs]);
  }
  return bound;
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const std::uint8_t*>(c.data_ptr());
  return {p, p + c.nbytes()};
}

std::vector<float> floats_of(const Tensor& t) {
  const Tensor c = t.to(DType::f32).contiguous();
  const float* p = c.data_ptr<float>();
  return {p, p + c.numel()};
}

/// The distance from s to the nearest entry of `code` (an argmin, independent of the trees).
float nearest_distance(const float* code, std::size_t n, float s) {
  float best = std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) best = std::min(best, std::fabs(code[i] - s));
  return best;
}

std::uint8_t nibble(const std::vector<std::uint8_t>& packed, std::size_t i) {
  return i % 2 == 0 ? packed[i / 2] >> 4 : packed[i / 2] & 0x0F;
}

std::map<std::string, Tensor> as_map(const std::vector<std::pair<std::string, Tensor>>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

// ---- code books --------------------------------------------------------------------------------

TEST_CASE("the 4-bit code books are bitsandbytes' get_4bit_type tables", "[quant][bnb]") {
  const auto& nf4 = bnb_4bit_info(BnbQuantType::nf4).code;
  // get_4bit_type("nf4"): create_normal_map(0.9677083) as float32, sorted, max 1.
  CHECK(nf4[0] == -1.0f);
  CHECK(nf4[7] == 0.0f);
  CHECK(nf4[15] == 1.0f);
  CHECK(nf4[1] == -0.6961928009986877f);
  CHECK(nf4[8] == 0.07958029955625534f);
  for (int i = 1; i < 16; ++i) CHECK(nf4[i - 1] < nf4[i]);
  // get_4bit_type("fp4"): [0, 0.0625, 8, 12, 4, 6, 2, 3] and negatives, divided by 12.
  const auto& fp4 = bnb_4bit_info(BnbQuantType::fp4).code;
  const float raw[8] = {0, 0.0625f, 8, 12, 4, 6, 2, 3};
  for (int i = 0; i < 8; ++i) {
    CHECK(fp4[i] == raw[i] / 12.0f);
    CHECK(fp4[i + 8] == -raw[i] / 12.0f);
  }
  CHECK(!std::signbit(fp4[8]));                                      // the quant_map's +0 (Python's -0 int)
  CHECK(std::signbit(bnb_4bit_info(BnbQuantType::fp4).decode[8]));  // the kernels' signed zero
  CHECK(try_bnb_quant_type("nf4") == BnbQuantType::nf4);
  CHECK(!try_bnb_quant_type("int4"));
}

TEST_CASE("the decision trees pick a nearest code and send ties down", "[quant][bnb]") {
  for (const auto t : {BnbQuantType::nf4, BnbQuantType::fp4}) {
    const auto& code = bnb_4bit_info(t).code;
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int i = 0; i < 20000; ++i) {
      const float s = u(g);
      const float got = std::fabs(code[quantize_4bit_value(t, s)] - s);
      REQUIRE(got <= nearest_distance(code.data(), 16, s) + 1e-6f);
    }
  }
  // dQuantizeNF4: a value on a threshold is not above it, so it takes the lower code.
  CHECK(quantize_nf4_value(0.5016634166240692f) == 0b1100);
  CHECK(quantize_nf4_value(std::nextafter(0.5016634166240692f, 1.0f)) == 0b1101);
  CHECK(quantize_nf4_value(0.0f) == 0b0111);
  CHECK(quantize_nf4_value(std::nanf("")) == 0b0000);  // an all-zero block scales to NaN
  // dQuantizeFP4: sign from x < 0, magnitude by the tree.
  CHECK(quantize_fp4_value(1.0f) == 0b0011);
  CHECK(quantize_fp4_value(-0.25f) == 0b1111);
  CHECK(quantize_fp4_value(0.29166667f) == 0b0111);
  CHECK(quantize_fp4_value(std::nanf("")) == 0b0000);
}

TEST_CASE("create_dynamic_map is bitsandbytes' signed 8-bit dynamic map", "[quant][bnb]") {
  const auto& m = dynamic_map();
  REQUIRE(m.size() == 256);
  for (std::size_t i = 1; i < 256; ++i) CHECK(m[i - 1] <= m[i]);
  CHECK(m[127] == 0.0f);
  CHECK(m[126] < 0.0f);
  CHECK(m[255] == 1.0f);
  for (std::size_t i = 0; i < 127; ++i) CHECK(m[i] == -m[254 - i]);
  // Entries as bitsandbytes' create_dynamic_map() prints them (torch.linspace with its FMA); the
  // second and third differ in the last bit when the linspace is computed without the FMA.
  CHECK(m[0] == -0.992968738079071f);
  CHECK(m[18] == -0.7398437261581421f);
  CHECK(m[116] == -0.000493750034365803f);
  CHECK(m[126] == -5.500000384017767e-07f);
}

// ---- quantize_4bit -----------------------------------------------------------------------------

TEST_CASE("quantize_4bit packs the first element in the high nibble (hand-computed)", "[quant][bnb]") {
  // kQuantizeBlockwise (NF4): absmax 2, scaled values 1, -1, 0.5, 0, 0.1 -> codes 15, 0, 12, 7, 8;
  // qvals[j] = code(vals[2j]) << 4 | code(vals[2j + 1]); the odd tail pads with code(0) = 7.
  {
    const auto w = quantize_4bit(Tensor::from_vector<float>({2.0f, -2.0f, 1.0f, 0.0f, 0.2f}),
                                 {.blocksize = 64, .quant_type = BnbQuantType::nf4});
    CHECK(w.packed.shape() == Shape{3, 1});
    CHECK(bytes_of(w.packed) == std::vector<std::uint8_t>{0xF0, 0xC7, 0x87});
    CHECK(floats_of(w.state.absmax) == std::vector<float>{2.0f});
    CHECK(w.state.shape == Shape{5});
    CHECK(w.state.dtype == DType::f32);
    CHECK(!w.state.nested());
  }
  // FP4: absmax 12, scaled 1, 0.5, -0.25, 0 -> 0b0011, 0b0101, 0b1111, 0b0000.
  {
    const auto w = quantize_4bit(Tensor::from_vector<float>({12.0f, 6.0f, -3.0f, 0.0f}), {.quant_type = BnbQuantType::fp4});
    CHECK(bytes_of(w.packed) == std::vector<std::uint8_t>{0x35, 0xF0});
    const auto back = floats_of(dequantize_4bit(w.packed, w.state));
    CHECK(back == std::vector<float>{12.0f, 6.0f, -3.0f, 0.0f});
  }
  // Blocks run over the flattened tensor: a [3, 24] weight in blocks of 32 has 3 absmax values,
  // the second block spanning rows 1 and 2.
  {
    std::vector<float> v(72, 0.5f);
    v[10] = 4.0f, v[40] = -8.0f, v[70] = 1.0f;
    const auto w = quantize_4bit(Tensor::from_vector(v, Shape{3, 24}), {.blocksize = 32, .quant_type = BnbQuantType::nf4});
    CHECK(floats_of(w.state.absmax) == std::vector<float>{4.0f, 8.0f, 1.0f});
    CHECK(w.packed.shape() == Shape{36, 1});
  }
  // An all-zero block: 0 * (1 / 0) is NaN, which both trees send to code 0; it decodes to zero.
  {
    const auto nf = quantize_4bit(Tensor::zeros({64}), {.quant_type = BnbQuantType::nf4});
    CHECK(bytes_of(nf.packed) == std::vector<std::uint8_t>(32, 0x00));
    for (float f : floats_of(dequantize_4bit(nf.packed, nf.state))) CHECK(f == 0.0f);
  }
  CHECK_THROWS_AS(quantize_4bit(Tensor::ones({64}), {.blocksize = 48}), ValueError);
  CHECK_THROWS_AS(quantize_4bit(Tensor::ones({64}, DType::i32)), DTypeError);
}

TEST_CASE("quantize_4bit rounds the weight to its dtype first", "[quant][bnb]") {
  // Params4bit quantizes the parameter in the dtype it was loaded in: 1 + 2^-8 is a bfloat16 tie
  // that rounds to 1.0, so the bf16 absmax is 1 and the f32 one 1.00390625.
  const Tensor a = Tensor::from_vector<float>({1.00390625f, 0.5f});
  const auto b = quantize_4bit(a, {.quant_type = BnbQuantType::nf4, .dtype = DType::bf16});
  const auto f = quantize_4bit(a, {.quant_type = BnbQuantType::nf4});
  CHECK(floats_of(b.state.absmax) == std::vector<float>{1.0f});
  CHECK(floats_of(f.state.absmax) == std::vector<float>{1.00390625f});
  CHECK(b.state.dtype == DType::bf16);
  const Tensor back = dequantize_4bit(b.packed, b.state);
  CHECK(back.dtype() == DType::bf16);
  // An f16 input keeps f16 as its state dtype.
  CHECK(quantize_4bit(a.to(DType::f16)).state.dtype == DType::f16);
}

TEST_CASE("4-bit round trips stay within half a code-book gap of each value", "[quant][bnb]") {
  for (const auto t : {BnbQuantType::nf4, BnbQuantType::fp4}) {
    for (const std::int64_t bs : {32, 64, 256, 4096}) {
      const auto v = random_floats(5000, static_cast<unsigned>(bs), 0.05f);
      const auto w = quantize_4bit(Tensor::from_vector(v, Shape{50, 100}), {.blocksize = bs, .quant_type = t});
      const auto back = floats_of(dequantize_4bit(w.packed, w.state));
      const auto absmax = floats_of(w.state.absmax);
      const auto packed = bytes_of(w.packed);
      const auto& code = bnb_4bit_info(t).code;
      for (std::size_t i = 0; i < v.size(); ++i) {
        const float am = absmax[i / static_cast<std::size_t>(bs)];
        // The chosen code is a nearest one to v / absmax (the tree's thresholds are the float
        // midpoints), and the decoded value is that code times absmax.
        REQUIRE(std::fabs(code[nibble(packed, i)] - v[i] / am) <= nearest_distance(code.data(), 16, v[i] / am) + 1e-6f);
        REQUIRE(back[i] == bnb_4bit_info(t).decode[nibble(packed, i)] * am);
      }
    }
  }
}

TEST_CASE("double quantization of the absmax (hand-computed and bounded)", "[quant][bnb]") {
  // quantize_4bit(compress_statistics=True): offset = mean(absmax); quantize_blockwise(absmax -
  // offset, blocksize=256) with the dynamic map. Two blocks with absmax 1 and 3: offset 2, centred
  // -1 and 1, nested absmax 1, codes 0 (-0.99297) and 255 (1.0): decoded 1.00703 and 3.
  {
    std::vector<float> v(128, 0.0f);
    v[0] = 1.0f, v[64] = 3.0f;
    const auto w = quantize_4bit(Tensor::from_vector(v), {.quant_type = BnbQuantType::nf4, .compress_statistics = true});
    REQUIRE(w.state.nested());
    CHECK(*w.state.offset == 2.0f);
    CHECK(w.state.absmax.dtype() == DType::u8);
    CHECK(bytes_of(w.state.absmax) == std::vector<std::uint8_t>{0, 255});
    CHECK(floats_of(w.state.state2->absmax) == std::vector<float>{1.0f});
    CHECK(w.state.absmax_f32() == std::vector<float>{dynamic_map()[0] * 1.0f + 2.0f, 3.0f});
    CHECK(w.state.state2->blocksize == 256);
    CHECK(floats_of(w.state.state2->code) == dynamic_map());
  }
  // dQuantize: every nested code is a nearest entry of the dynamic map, so each decoded absmax is
  // within half the map's widest gap (times the nested absmax) of the true one.
  const auto v = random_floats(64 * 700, 3, 0.02f);
  const auto plain = quantize_4bit(Tensor::from_vector(v), {.quant_type = BnbQuantType::nf4});
  const auto dq = quantize_4bit(Tensor::from_vector(v), {.quant_type = BnbQuantType::nf4, .compress_statistics = true});
  CHECK(bytes_of(plain.packed) == bytes_of(dq.packed));
  const auto exact = floats_of(plain.state.absmax);
  const auto decoded = dq.state.absmax_f32();
  const auto codes = bytes_of(dq.state.absmax);
  const auto nested = floats_of(dq.state.state2->absmax);
  REQUIRE(nested.size() == 3);  // 700 blocks in nested blocks of 256
  const auto& map = dynamic_map();
  float widest = 0;
  for (std::size_t i = 1; i < 256; ++i) widest = std::max(widest, map[i] - map[i - 1]);
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const float na = nested[i / 256];
    const float s = (exact[i] - *dq.state.offset) / na;
    REQUIRE(std::fabs(map[codes[i]] - s) <= nearest_distance(map.data(), 256, s) + 1e-6f);
    REQUIRE(std::fabs(decoded[i] - exact[i]) <= na * (widest / 2) * 1.001f + 1e-7f);
  }
}

TEST_CASE("quantize_blockwise and dequantize_blockwise over the dynamic map", "[quant][bnb]") {
  const auto v = random_floats(600, 11);
  std::vector<std::uint8_t> q(600);
  std::vector<float> absmax(3), back(600);
  quantize_blockwise(v.data(), 600, dynamic_map().data(), 256, q.data(), absmax.data());
  dequantize_blockwise(q.data(), 600, absmax.data(), dynamic_map().data(), 256, back.data());
  for (std::size_t i = 0; i < 600; ++i) {
    CHECK(back[i] == dynamic_map()[q[i]] * absmax[i / 256]);
    const float s = v[i] / absmax[i / 256];
    CHECK(std::fabs(dynamic_map()[q[i]] - s) <= nearest_distance(dynamic_map().data(), 256, s) + 1e-6f);
  }
}

// ---- QuantState serialization ------------------------------------------------------------------

TEST_CASE("python_float_repr writes what Python's repr writes", "[quant][bnb]") {
  CHECK(python_float_repr(0.0) == "0.0");
  CHECK(python_float_repr(-2.5) == "-2.5");
  CHECK(python_float_repr(static_cast<double>(0.1f)) == "0.10000000149011612");
  CHECK(python_float_repr(1e-05) == "1e-05");
  CHECK(python_float_repr(1.5e-07) == "1.5e-07");
  CHECK(python_float_repr(0.0001) == "0.0001");
  CHECK(python_float_repr(123.0) == "123.0");
  CHECK(python_float_repr(1234567890123456.0) == "1234567890123456.0");
  CHECK(python_float_repr(1e16) == "1e+16");
  CHECK(python_float_repr(2.5e+300) == "2.5e+300");
}

TEST_CASE("the quant_state tensors are what Linear4bit._save_to_state_dict writes", "[quant][bnb]") {
  const auto v = random_floats(4 * 64, 5, 0.1f);
  const auto w = quantize_4bit(Tensor::from_vector(v, Shape{4, 64}),
                               {.quant_type = BnbQuantType::nf4, .compress_statistics = true, .dtype = DType::bf16});
  const auto tensors = quant_state_to_tensors(w.state, "model.proj.weight");
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors) names.push_back(n);
  CHECK(names == std::vector<std::string>{"model.proj.weight.absmax", "model.proj.weight.quant_map",
                                          "model.proj.weight.nested_absmax", "model.proj.weight.nested_quant_map",
                                          "model.proj.weight.quant_state.bitsandbytes__nf4"});
  // QuantState.as_dict(packed=True): json.dumps of the non-tensor items, in as_dict's order.
  const auto js = bytes_of(tensors.back().second);
  CHECK(std::string(js.begin(), js.end()) ==
        "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [4, 64], "
        "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": " +
            python_float_repr(*w.state.offset) + "}");
  CHECK(tensors[1].second.dtype() == DType::f32);
  CHECK(tensors[1].second.numel() == 16);
  CHECK(tensors[3].second.numel() == 256);

  auto map = as_map(tensors);
  map["model.proj.weight"] = w.packed;
  const auto back = quant_state_from_tensors("model.proj.weight", map);
  CHECK(back.quant_type == BnbQuantType::nf4);
  CHECK(back.shape == Shape{4, 64});
  CHECK(back.dtype == DType::bf16);
  CHECK(back.blocksize == 64);
  CHECK(*back.offset == *w.state.offset);
  CHECK(back.absmax_f32() == w.state.absmax_f32());
  CHECK(bytes_of(dequantize_4bit(w.packed, back)) == bytes_of(dequantize_4bit(w.packed, w.state)));

  // Without double quantization: no nested keys, and the JSON stops after shape.
  const auto p = quantize_4bit(Tensor::from_vector(v), {.blocksize = 128});
  CHECK(quant_state_json(p.state) == "{\"quant_type\": \"fp4\", \"blocksize\": 128, \"dtype\": \"float32\", \"shape\": [256]}");
  const auto pt = as_map(quant_state_to_tensors(p.state));
  CHECK(pt.size() == 3);
  CHECK(pt.count("weight.quant_state.bitsandbytes__fp4") == 1);
  CHECK(!quant_state_from_tensors("weight", pt).nested());
  // A packed weight stored in another quant_storage is the same bytes.
  auto pt2 = pt;
  pt2["weight"] = Tensor::from_storage(p.packed.storage(), DType::bf16, Shape{64, 1});
  CHECK_NOTHROW(quant_state_from_tensors("weight", pt2));
}

TEST_CASE("a malformed quant_state is a FormatError naming the tensor", "[quant][bnb]") {
  const auto w = quantize_4bit(Tensor::from_vector(random_floats(256, 9), Shape{2, 128}),
                               {.quant_type = BnbQuantType::nf4, .compress_statistics = true});
  auto good = as_map(quant_state_to_tensors(w.state, "l.weight"));
  good["l.weight"] = w.packed;
  auto json_tensor = [](const std::string& s) { return Tensor::from_vector(std::vector<std::uint8_t>(s.begin(), s.end())); };
  auto expect = [](const std::map<std::string, Tensor>& m, const std::string& name) {
    try {
      (void)quant_state_from_tensors("l.weight", m);
      FAIL("no FormatError for " << name);
    } catch (const FormatError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(name) != std::string::npos);
    }
  };
  {
    auto m = good;
    m["l.weight.absmax"] = Tensor::zeros({3}, DType::u8);  // 256 / 64 = 4 blocks
    expect(m, "l.weight.absmax");
  }
  {
    auto m = good;
    m.erase("l.weight.quant_state.bitsandbytes__nf4");
    m["l.weight.quant_state.bitsandbytes__int4"] = json_tensor(quant_state_json(w.state));
    expect(m, "l.weight.quant_state.bitsandbytes__int4");
  }
  {
    auto m = good;
    std::string j = quant_state_json(w.state);
    j.replace(j.find("\"nf4\""), 5, "\"int4\"");
    m["l.weight.quant_state.bitsandbytes__nf4"] = json_tensor(j);
    expect(m, "l.weight.quant_state.bitsandbytes__nf4");
  }
  {
    auto m = good;  // the JSON's shape disagrees with the packed weight (and the absmax count)
    std::string j = quant_state_json(w.state);
    j.replace(j.find("[2, 128]"), 8, "[2, 64]");
    m["l.weight.quant_state.bitsandbytes__nf4"] = json_tensor(j);
    m["l.weight.absmax"] = Tensor::zeros({2}, DType::u8);
    expect(m, "l.weight");
  }
  {
    auto m = good;
    m["l.weight.quant_state.bitsandbytes__fp4"] = m["l.weight.quant_state.bitsandbytes__nf4"];
    expect(m, "l.weight");
  }
  {
    auto m = good;
    m.erase("l.weight.nested_absmax");
    expect(m, "l.weight.nested_absmax");
  }
  {
    auto m = good;
    m["l.weight.quant_state.bitsandbytes__nf4"] = json_tensor("{not json");
    expect(m, "l.weight.quant_state.bitsandbytes__nf4");
  }
  {
    auto m = good;
    m["l.weight.quant_map"] = Tensor::zeros({15});
    expect(m, "l.weight.quant_map");
  }
  CHECK_NOTHROW(quant_state_from_tensors("l.weight", good));
}

// ---- fused GEMV ----------------------------------------------------------------------------------

TEST_CASE("gemv_4bit equals dequantize_4bit then a float matmul", "[quant][bnb]") {
  struct Case {
    std::int64_t out, in, bs;
    BnbQuantType t;
    bool nested;
  };
  for (const Case c : {Case{40, 128, 64, BnbQuantType::nf4, false}, Case{33, 256, 32, BnbQuantType::fp4, true},
                       Case{7, 50, 32, BnbQuantType::nf4, true}, Case{5, 96, 4096, BnbQuantType::fp4, false},
                       Case{6, 48, 32, BnbQuantType::nf4, false}, Case{9, 37, 32, BnbQuantType::nf4, false}}) {
    const auto wv = random_floats(static_cast<std::size_t>(c.out * c.in), 21, 0.05f);
    const auto q = quantize_4bit(Tensor::from_vector(wv, Shape{c.out, c.in}),
                                 {.blocksize = c.bs, .quant_type = c.t, .compress_statistics = c.nested});
    const auto wd = floats_of(dequantize_4bit(q.packed, q.state));
    const auto am = q.state.absmax_f32();
    for (const std::int64_t rows : {1, 3, 16, 13}) {
      const auto xv = random_floats(static_cast<std::size_t>(rows * c.in), 22);
      const Tensor bias = Tensor::from_vector(random_floats(static_cast<std::size_t>(c.out), 23));
      const auto y = floats_of(gemv_4bit(Tensor::from_vector(xv, Shape{rows, c.in}), q.packed, q.state, bias));
      const auto bv = floats_of(bias);
      for (std::int64_t t = 0; t < rows; ++t) {
        for (std::int64_t o = 0; o < c.out; ++o) {
          double ref = bv[o], mag = std::fabs(bv[o]);
          for (std::int64_t k = 0; k < c.in; ++k) {
            ref += double(wd[o * c.in + k]) * xv[t * c.in + k];
            mag += std::fabs(double(wd[o * c.in + k]) * xv[t * c.in + k]);
          }
          // Same weights, float32 sums in another order: a few ulps of the magnitude summed; and
          // where the tier takes the 16-bit integer form, its stated bound.
          const double int16 = int16_form_bound(&xv[static_cast<std::size_t>(t * c.in)], static_cast<std::size_t>(c.in),
                                                am.data(), static_cast<std::size_t>(o), static_cast<std::size_t>(c.bs));
          REQUIRE(std::fabs(y[t * c.out + o] - ref) <= 1e-6 * mag * std::sqrt(double(c.in)) + 1e-7 + int16);
        }
      }
    }
  }
  // Every vector tier this CPU runs agrees with the portable kernel: 1-9 rows (groups of four on
  // AVX2, eight on AVX-512, and one row alone), all output rows and rows 5..63 only, blocks of 64
  // (AVX2's 16-bit integer form, within its bound) and 32, and a width of 48 (blocks straddle rows;
  // AVX-512 takes its element-order kernel).
  // Row 0 starts with a run of zeros and row 1 holds one value 1000x the others (its run's
  // integer codes are then zero but for it); FP4 too.
  for (const auto& [in, bs, type] : std::vector<std::tuple<std::int64_t, std::int64_t, BnbQuantType>>{
           {512, 64, BnbQuantType::nf4}, {512, 32, BnbQuantType::nf4}, {48, 64, BnbQuantType::nf4},
           {256, 128, BnbQuantType::fp4}}) {
    const auto wv = random_floats(static_cast<std::size_t>(64 * in), 31, 0.05f);
    const auto q = quantize_4bit(Tensor::from_vector(wv, Shape{64, in}), {.blocksize = bs, .quant_type = type});
    auto xv = random_floats(static_cast<std::size_t>(9 * in), 32);
    std::fill(xv.begin(), xv.begin() + std::min<std::int64_t>(64, in), 0.0f);
    xv[static_cast<std::size_t>(in + 7)] = 1000.0f;
    const auto bytes = bytes_of(q.packed);
    const auto am = q.state.absmax_f32();
    const float* lut = bnb_4bit_info(type).decode.data();
    const auto n = static_cast<std::size_t>(in), b = static_cast<std::size_t>(bs);
    for (const std::size_t rows : {1u, 2u, 5u, 9u}) {
      for (const std::size_t r0 : {0u, 5u}) {
        std::vector<float> ys(9 * 64, 0.0f);
        gemv_4bit_rows(simd::scalar{}, xv.data(), rows, bytes.data(), am.data(), lut, b, n, 64, r0, 64, ys.data());
        bnb_4bit_ladder::for_each([&](auto arch) {
          using A = decltype(arch);
          if (!A::supported() || !A::available()) return;
          INFO(A::name() << " in " << in << " block " << bs << " rows " << rows << " from " << r0);
          std::vector<float> yv(9 * 64, 0.0f);
          gemv_4bit_rows(arch, xv.data(), rows, bytes.data(), am.data(), lut, b, n, 64, r0, 64, yv.data());
          for (std::size_t i = 0; i < ys.size(); ++i) {
            const double int16 = i / 64 < rows ? int16_form_bound(&xv[i / 64 * n], n, am.data(), i % 64, b) : 0.0;
            REQUIRE(std::fabs(yv[i] - ys[i]) <= 1e-4 * std::fabs(ys[i]) + 1e-5 + int16);
          }
        });
      }
    }
  }
  const auto q = quantize_4bit(Tensor::ones({4, 64}));
  CHECK_THROWS_AS(gemv_4bit(Tensor::ones({2, 32}), q.packed, q.state), ShapeError);
  CHECK(gemv_4bit(Tensor::ones({1, 64}, DType::bf16), q.packed, q.state).dtype() == DType::bf16);
}

// ---- LLM.int8() --------------------------------------------------------------------------------

TEST_CASE("int8 weights are Int8Params' CB and SCB (hand-computed)", "[quant][bnb]") {
  // Int8Params._quantize -> int8_vectorwise_quant(W.half()): row 0 has absmax 1, 127 * -0.5 is
  // the tie -63.5 -> -64 (half to even), 0.3 is 0.300048828125 in float16 -> 38.106 -> 38.
  // Row 1: 1.0001 is 1.0 in float16, so SCB is 1 and 0.5 * 127 = 63.5 -> 64.
  const Tensor w = Tensor::from_vector<float>({1.0f, -0.5f, 0.25f, 0.3f, 1.0001f, 0.5f, -0.125f, 0.0f}, Shape{2, 4});
  const auto q = quantize_int8_weight(w);
  CHECK(q.CB.dtype() == DType::i8);
  CHECK(q.SCB.dtype() == DType::f32);
  const auto* cb = q.CB.data_ptr<std::int8_t>();
  CHECK(std::vector<int>(cb, cb + 8) == std::vector<int>{127, -64, 32, 38, 127, 64, -16, 0});
  CHECK(floats_of(q.SCB) == std::vector<float>{1.0f, 1.0f});
  // A bfloat16 weight goes through float16 the same way.
  const auto qb = quantize_int8_weight(w.to(DType::bf16));
  CHECK(qb.SCB.dtype() == DType::f32);
  // A zero row: stat 0, codes 0 (the CUDA kernel's NaN-to-int).
  const auto z = quantize_int8_weight(Tensor::zeros({1, 8}));
  CHECK(floats_of(z.SCB) == std::vector<float>{0.0f});
  for (int i = 0; i < 8; ++i) CHECK(z.CB.data_ptr<std::int8_t>()[i] == 0);
  // int8_vectorwise_dequant: CB * SCB * (1 / 127).
  CHECK(floats_of(int8_vectorwise_dequant(q))[1] == -64.0f * 1.0f * 7.874015718698502e-3f);
}

TEST_CASE("int8_vectorwise_quant holds outliers back (hand-computed)", "[quant][bnb]") {
  // backends/default/ops.py int8_vectorwise_quant, threshold 6: column 1 holds an outlier (8), so
  // row 0's stat is 2 over the rest, and column 1 is zeroed in every row, row 1's 1 included.
  const float a[6] = {1.0f, 8.0f, -2.0f, 0.5f, 1.0f, 0.25f};
  const auto r = int8_vectorwise_quant(a, 2, 3, 6.0f);
  CHECK(r.outlier_cols == std::vector<std::int64_t>{1});
  CHECK(r.stats == std::vector<float>{2.0f, 1.0f});
  CHECK(std::vector<int>(r.codes.begin(), r.codes.end()) == std::vector<int>{64, 0, -127, 64, 0, 32});
  const auto plain = int8_vectorwise_quant(a, 2, 3, 0.0f);
  CHECK(plain.outlier_cols.empty());
  CHECK(plain.stats == std::vector<float>{8.0f, 1.0f});
  CHECK_THROWS_AS(int8_vectorwise_quant(a, 2, 3, -1.0f), ValueError);
}

TEST_CASE("the int8 product: every tier and the portable one agree exactly", "[quant][bnb]") {
  std::mt19937 g(3);
  std::uniform_int_distribution<int> d(-127, 127);
  // One row, a group of six, and a group of eight then five; k = 200 ends in a partial step; the
  // columns 3..36 give eight groups of four weight rows and a tail of two.
  for (const std::size_t rows : {1, 6, 13}) {
    const std::size_t k = 200, out = 37, r0 = 3;
    std::vector<std::int8_t> a(rows * k), b(out * k);
    for (auto& x : a) x = static_cast<std::int8_t>(d(g));
    for (auto& x : b) x = static_cast<std::int8_t>(d(g));
    b[5] = -128;  // a stored weight may hold it
    a[7] = -128;  // so may an activation code of an affine scheme
    a[4] = a[5] = -128;  // and both at once: -128 x -128 twice in a pair passes int16
    b[4] = -128;
    std::vector<std::int32_t> c0(rows * out, -1), c1(rows * out, -1);
    int8_linear_matmul(simd::scalar{}, a.data(), rows, b.data(), k, out, r0, out, c0.data());
    for (std::size_t t = 0; t < rows; ++t) {
      std::int32_t s = 0;
      for (std::size_t j = 0; j < k; ++j) s += a[t * k + j] * b[r0 * k + j];
      CHECK(c0[t * out + r0] == s);
    }
    int8_ladder::for_each([&](auto arch) {
      using A = decltype(arch);
      if (!A::supported() || !A::available()) return;
      INFO(A::name() << " rows " << rows);
      std::fill(c1.begin(), c1.end(), -1);
      int8_linear_matmul(arch, a.data(), rows, b.data(), k, out, r0, out, c1.data());
      CHECK(c0 == c1);  // columns below r0 untouched by both
    });
  }
}

TEST_CASE("matmul_8bit matches a float reference within the quantization bounds", "[quant][bnb]") {
  const std::int64_t out = 48, in = 160;
  const auto wv = random_floats(static_cast<std::size_t>(out * in), 41, 0.05f);
  const auto w = quantize_int8_weight(Tensor::from_vector(wv, Shape{out, in}));
  const auto wd = floats_of(int8_vectorwise_dequant(w));
  for (const bool outliers : {false, true}) {
    for (const std::int64_t rows : {1, 5}) {
      auto xv = random_floats(static_cast<std::size_t>(rows * in), 42);
      if (outliers) {
        xv[3] = 20.0f;                          // column 3 of row 0
        xv[static_cast<std::size_t>(in) - 1] = -9.5f;  // the last column of row 0
      }
      const auto y = floats_of(matmul_8bit(Tensor::from_vector(xv, Shape{rows, in}), w, {.threshold = 6.0f}));
      for (std::int64_t t = 0; t < rows; ++t) {
        // The activation codes' error: stat / 254 per non-outlier element (half a step), plus the
        // float16 rounding of x (2^-11 relative); outlier columns are computed from x itself.
        float stat = 0;
        for (std::int64_t k = 0; k < in; ++k) {
          const float v = std::fabs(xv[t * in + k]);
          if (v < 6.0f) stat = std::max(stat, v);
        }
        for (std::int64_t o = 0; o < out; ++o) {
          double ref = 0, bound = 1e-5;
          for (std::int64_t k = 0; k < in; ++k) {
            const double xk = xv[t * in + k], wk = wd[o * in + k];
            ref += wk * xk;
            bound += std::fabs(wk) * (stat / 254.0 + std::fabs(xk) * std::ldexp(1.0, -11)) + 1e-6 * std::fabs(wk * xk);
          }
          REQUIRE(std::fabs(y[t * out + o] - ref) <= bound);
        }
      }
    }
  }
  // Without the decomposition an outlier inflates its row's stat and the error grows with it; with
  // it, the row is as exact as the others.
  std::vector<float> xv(static_cast<std::size_t>(in), 0.1f);
  xv[7] = 60.0f;
  double ref = 0;
  for (std::int64_t k = 0; k < in; ++k) ref += double(wd[k]) * xv[k];
  const float with = floats_of(matmul_8bit(Tensor::from_vector(xv, Shape{1, in}), w, {.threshold = 6.0f}))[0];
  const float without = floats_of(matmul_8bit(Tensor::from_vector(xv, Shape{1, in}), w, {.threshold = 0.0f}))[0];
  CHECK(std::fabs(with - ref) < std::fabs(without - ref));
  CHECK(std::fabs(with - ref) <= 1e-3);
  // The bias rides in the dequantizing FMA; the dtype follows x.
  const Tensor bias = Tensor::full({out}, 2.0);
  const auto yb = matmul_8bit(Tensor::from_vector(xv, Shape{1, in}).to(DType::bf16), w, {}, bias);
  CHECK(yb.dtype() == DType::bf16);
  CHECK(floats_of(yb)[0] == Approx(with + 2.0f).epsilon(1e-2));
}

TEST_CASE("int8 weights as Linear8bitLt saves them", "[quant][bnb]") {
  const auto w = quantize_int8_weight(Tensor::from_vector(random_floats(32, 51), Shape{4, 8}));
  auto m = as_map(int8_weight_to_tensors(w, "mlp.fc"));
  CHECK(m.size() == 3);
  CHECK(m.at("mlp.fc.weight_format").dtype() == DType::u8);
  CHECK(m.at("mlp.fc.weight_format").dim() == 0);
  const auto back = int8_weight_from_tensors("mlp.fc", m);
  CHECK(bytes_of(back.CB) == bytes_of(w.CB));
  CHECK(floats_of(back.SCB) == floats_of(w.SCB));
  auto bad = m;
  bad["mlp.fc.weight_format"] = Tensor::full(Shape{}, 1.0, DType::u8);
  CHECK_THROWS_WITH(int8_weight_from_tensors("mlp.fc", bad), Catch::Contains("mlp.fc.weight_format"));
  bad = m;
  bad["mlp.fc.SCB"] = Tensor::zeros({3});
  CHECK_THROWS_WITH(int8_weight_from_tensors("mlp.fc", bad), Catch::Contains("mlp.fc.SCB"));
  bad = m;
  bad.erase("mlp.fc.weight");
  CHECK_THROWS_AS(int8_weight_from_tensors("mlp.fc", bad), FormatError);
}

// ---- configs -----------------------------------------------------------------------------------

TEST_CASE("BitsAndBytesConfig reads and writes transformers' quantization_config", "[quant][bnb]") {
  // A config.json as transformers writes it for an NF4 model (to_dict, keys sorted).
  const auto hub = nlohmann::json::parse(R"({
    "_load_in_4bit": true, "_load_in_8bit": false, "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true,
    "llm_int8_enable_fp32_cpu_offload": false, "llm_int8_has_fp16_weight": false, "llm_int8_skip_modules": null,
    "llm_int8_threshold": 6.0, "load_in_4bit": true, "load_in_8bit": false, "quant_method": "bitsandbytes"})");
  const auto c = BitsAndBytesConfig::from_json(hub);
  CHECK(c.load_in_4bit);
  CHECK(c.bnb_4bit_quant_type == BnbQuantType::nf4);
  CHECK(c.bnb_4bit_compute_dtype == DType::bf16);
  CHECK(c.bnb_4bit_use_double_quant);
  CHECK(c.quantization_method() == "nf4");
  CHECK(c.to_json() == hub);
  CHECK(c.to_json().dump() == hub.dump());  // same keys in the same (sorted) order
  CHECK(c.to_diff_json() == nlohmann::json::parse(R"({"_load_in_4bit": true, "load_in_4bit": true,
    "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true})"));

  const BitsAndBytesConfig d;
  CHECK(d.llm_int8_threshold == 6.0);
  CHECK(d.bnb_4bit_quant_type == BnbQuantType::fp4);
  CHECK(d.bnb_4bit_compute_dtype == DType::f32);
  CHECK(d.bnb_4bit_quant_storage == DType::u8);
  CHECK(d.quantization_method().empty());
  CHECK(BitsAndBytesConfig::from_json(nlohmann::json::parse(R"({"load_in_8bit": true, "llm_int8_skip_modules": ["lm_head"]})"))
            .llm_int8_skip_modules == std::vector<std::string>{"lm_head"});
  // Only the private keys: still 4-bit.
  CHECK(BitsAndBytesConfig::from_json(nlohmann::json::parse(R"({"_load_in_4bit": true})")).load_in_4bit);

  auto refuses = [](const char* text, const char* mentions) {
    CHECK_THROWS_WITH(BitsAndBytesConfig::from_json(nlohmann::json::parse(text)), Catch::Contains(mentions));
  };
  refuses(R"({"load_in_4bit": true, "load_in_8bit": true})", "load_in_8bit (LLM.int8) or load_in_4bit");
  refuses(R"({"load_in_4bit": true, "bnb_4bit_quant_type": "int4"})", "'fp4', 'nf4'");
  refuses(R"({"load_in_8bit": true, "llm_int8_threshold": -1.0})", "llm_int8_threshold");
  refuses(R"({"load_in_8bit": true, "llm_int8_threshold": "6"})", "llm_int8_threshold");
  refuses(R"({"load_in_4bit": true, "bnb_4bit_compute_dtype": "int8"})", "'float32', 'float16', 'bfloat16'");
  refuses(R"({"load_in_4bit": true, "bnb_4bit_quant_storage": "float128"})", "'uint8'");
  refuses(R"({"load_in_4bit": "yes"})", "boolean");
  refuses(R"({"load_in_4bit": true, "_load_in_4bit": false})", "disagree");
  refuses(R"({"quant_method": "gptq"})", "bitsandbytes");
  CHECK_THROWS_AS((BitsAndBytesConfig{.load_in_8bit = true, .load_in_4bit = true}.validate()), ValueError);
}

TEST_CASE("BnbQuantizationConfig is Accelerate's dataclass", "[quant][bnb]") {
  const BnbQuantizationConfig c{.load_in_4bit = true, .bnb_4bit_quant_type = BnbQuantType::nf4, .skip_modules = std::vector<std::string>{"lm_head"}};
  c.validate();
  CHECK(c.bnb_4bit_compute_dtype == DType::f16);
  CHECK(c.torch_dtype_or_default() == DType::f16);  // 4-bit: the compute dtype
  CHECK(c.target_bits() == 4);
  CHECK(BnbQuantizationConfig{.load_in_8bit = true}.torch_dtype_or_default() == DType::f16);
  CHECK(BnbQuantizationConfig{.load_in_4bit = true, .bnb_4bit_compute_dtype = DType::bf16}.torch_dtype_or_default() ==
        DType::bf16);
  const auto j = c.to_json();
  CHECK(j == nlohmann::json::parse(R"({"load_in_8bit": false, "llm_int8_threshold": 6.0, "load_in_4bit": true,
    "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": false, "bnb_4bit_compute_dtype": "fp16",
    "torch_dtype": "fp16", "skip_modules": ["lm_head"], "keep_in_fp32_modules": null})"));
  const auto back = BnbQuantizationConfig::from_json(j);
  CHECK(back.to_json() == j);
  CHECK(BnbQuantizationConfig::from_json(nlohmann::json::parse(R"({"load_in_4bit": true, "bnb_4bit_compute_dtype": "bfloat16"})"))
            .bnb_4bit_compute_dtype == DType::bf16);
  const auto b = c.to_bits_and_bytes_config();
  CHECK(b.load_in_4bit);
  CHECK(b.llm_int8_skip_modules == std::vector<std::string>{"lm_head"});

  auto refuses = [](const char* text, const char* mentions) {
    CHECK_THROWS_WITH(BnbQuantizationConfig::from_json(nlohmann::json::parse(text)), Catch::Contains(mentions));
  };
  refuses(R"({})", "can't both be false");
  refuses(R"({"load_in_4bit": true, "load_in_8bit": true})", "can't both be true");
  refuses(R"({"load_in_4bit": true, "bnb_4bit_quant_type": "np4"})", "'fp4', 'nf4'");
  refuses(R"({"load_in_4bit": true, "bnb_4bit_compute_dtype": "fp64"})", "'fp32', 'fp16', 'bf16'");
  refuses(R"({"load_in_8bit": true, "llm_int8_threshold": -2})", "llm_int8_threshold");
  refuses(R"({"load_in_8bit": true, "target_dtype": "int8"})", "keep_in_fp32_modules");
}

}  // namespace quant_bnb_test
