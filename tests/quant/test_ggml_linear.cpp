// Quantized products over ggml blocks: each integer kernel (every CPU tier) against the
// float dot product of the values the blocks stand for, on weights llama.cpp's own quantizer made
// (the conformance files); ggml_linear against a float linear layer within the activations'
// quantization error; the reference quantizers against ggml's definitions; and the GGUF backend:
// layers swapped on meta, loaded as bytes, computing within bounds of the float model,
// dequantize() giving the float model back exactly, the packed weights planned and offloaded.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"
#include "quant_test_support.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <memory>
#include <type_traits>
#include <vector>

#include "accel/core/mapped_file.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/gguf.hpp"
#include "accel/io/gguf_write.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/models/generate.hpp"
#include "accel/quant/formats/ggml_quantize.hpp"
#include "accel/quant/kernels/ggml_dot.hpp"
#include "accel/quant/kernels/ggml_dot_x16.hpp"
#include "accel/quant/kernels/ggml_repack.hpp"
#include "accel/quant/layers/ggml_linear.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/quant/quantizers/layer_swap.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::quant;

namespace {

const fs::path types_dir = fs::path(ACCEL_SHARED_DIR) / "conformance" / "gguf" / "valid" / "types";

std::vector<float> random_floats(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

/// The float values an activation row stands for after quantization.
std::vector<float> activation_values(GgmlType t, const ActivationRow& a, std::size_t n) {
  std::vector<float> v(n);
  if (activation_is_q8_k(t)) {
    for (std::size_t i = 0; i < n; ++i) v[i] = a.q8_k[i / 256].d * a.q8_k[i / 256].qs[i % 256];
  } else {
    for (std::size_t i = 0; i < n; ++i) v[i] = io::f16_scale(a.q8_0[i / 32].d) * a.q8_0[i / 32].qs[i % 32];
  }
  return v;
}

using accel_test::rel_err;
using accel_test::model_dir;

/// Every type with integer kernels.
constexpr GgmlType dot_types[] = {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_1,   GgmlType::q5_0,   GgmlType::q5_1,
                                  GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k,   GgmlType::q5_k,   GgmlType::q6_k,
                                  GgmlType::iq4_nl, GgmlType::iq4_xs, GgmlType::tq2_0, GgmlType::iq2_xxs, GgmlType::iq2_xs, GgmlType::iq2_s, GgmlType::iq3_xxs, GgmlType::iq3_s};

/// `blocks` blocks of `type` where the library has no quantizer for it: deterministic random bytes
/// (codes, packed sub-scales, Q5's fifth bits, Q3_K's high bits) with the f16 scales and mins set
/// small and finite; Q6_K's signed group scales small and positive.
void random_blocks(GgmlType type, std::byte* p, std::size_t blocks, unsigned seed) {
  std::mt19937 g(seed);
  const std::size_t size = io::ggml_type_info(type).type_size;
  for (std::size_t i = 0; i < blocks * size; ++i) p[i] = static_cast<std::byte>(g() & 0xFF);
  const auto settle = [&](auto t) {
    using B = io::ggml_block_t<decltype(t)::value>;
    for (std::size_t b = 0; b < blocks; ++b) {
      B blk;
      std::memcpy(&blk, p + b * size, size);
      const float d = 0.01f * static_cast<float>(1 + b % 3);
      if constexpr (requires { requires std::is_same_v<decltype(B::d), std::uint16_t>; }) blk.d = half(d).bits;
      if constexpr (requires { B::dmin; }) blk.dmin = half(0.5f * d).bits;
      if constexpr (requires { B::m; }) blk.m = half(-4.0f * d).bits;
      if constexpr (std::is_same_v<B, io::block_q6_k>) {
        for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<std::int8_t>(j % 8 + 1);
      }
      std::memcpy(p + b * size, &blk, size);
    }
  };
  // The lattice types have their own dispatcher (host only).
  if (!io::with_ggml_block(type, settle)) io::with_ggml_lattice_block(type, settle);
}

/// The test model as a GGUF file whose 2-D block weights are `type` (Q8_0 or Q4_0, ggml's
/// reference quantizers), and the same model with those weights dequantized, as F32.
void write_quantized_gguf(const std::string& name, GgmlType type, const std::string& quantized, const std::string& dequantized) {
  const auto config = nlohmann::json::parse(std::ifstream(model_dir(name) / "config.json"));
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const auto& [k, t] : io::load_state_dict(io::resolve_checkpoint_folder(model_dir(name)).path.string())) weights.emplace_back(k, t);
  const std::string f32_path = quantized + ".f32";
  io::save_gguf_model(f32_path, config, weights);
  const auto f32 = io::GgufFile::open(f32_path);
  io::GgufWriter q, d;
  for (const auto& [k, v] : f32.header().metadata) q.add(k, v), d.add(k, v);
  for (const auto& t : f32.tensors()) {
    const Tensor v = f32.tensor(t.name).contiguous();
    if (!(t.name.starts_with("blk.") && t.ne.size() == 2 && t.ne[0] % 32 == 0)) {
      q.add_tensor(t.name, v), d.add_tensor(t.name, v);
      continue;
    }
    const std::size_t n = static_cast<std::size_t>(v.numel());
    std::string bytes(io::ggml_row_nbytes(type, t.ne[0]) * t.ne[1], '\0');
    const auto* x = static_cast<const float*>(v.data_ptr());
    quantize_rows(type, x, reinterpret_cast<std::byte*>(bytes.data()), n);
    d.add_tensor(t.name, io::dequantize_ggml(type, io::as_bytes(bytes), v.shape()));
    q.add_tensor_bytes(t.name, type, t.ne, std::move(bytes));
  }
  q.save(quantized);
  d.save(dequantized);
}

Tensor prompt() { return Tensor::from_vector(std::vector<std::int64_t>{3, 1, 4, 1, 5, 9}, Shape{1, 6}); }

}  // namespace

TEST_CASE("quantized dot products equal the float dot of the values the blocks stand for", "[quant][ggml]") {
  for (const auto type : dot_types) {
    const std::string tname(io::ggml_type_name(type));
    INFO(tname);
    // lq.2: [4096, 2], two rows that llama-quantize made.
    const auto f = io::GgufFile::open((types_dir / (tname + ".gguf")).string());
    const auto& info = f.info("lq.2");
    REQUIRE(info.ne == std::vector<std::uint64_t>{4096, 2});
    const Tensor wf = io::dequantize(f, "lq.2");
    const std::size_t n = 4096, row_bytes = io::ggml_row_nbytes(type, n);
    const auto x = random_floats(n, 7);
    ActivationRow a;
    quantize_activation(type, x.data(), n, a);
    const auto xv = activation_values(type, a, n);
    for (std::size_t r = 0; r < 2; ++r) {
      double want = 0;
      const auto* w = static_cast<const float*>(wf.data_ptr()) + r * n;
      for (std::size_t i = 0; i < n; ++i) want += double(w[i]) * xv[i];
      const std::byte* wr = f.bytes(info).data() + r * row_bytes;
      // Every tier this CPU runs (the tier tests of CTest cap which).
      int tiers = 0;
      quant_ladder::for_each([&](auto arch) {
        using A = decltype(arch);
        if (!A::supported() || !A::available()) return;
        INFO(A::name());
        CHECK(vec_dot(arch, type, n, wr, a) == Approx(want).epsilon(1e-5).margin(1e-4));
        ++tiers;
      });
      CHECK(tiers >= 1);
    }
  }
}

TEST_CASE("ggml_linear matches a float linear layer within the activations' quantization error", "[quant][ggml]") {
  for (const auto type : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1,
                          GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k,
                          GgmlType::iq4_nl, GgmlType::iq4_xs, GgmlType::tq2_0, GgmlType::iq2_xxs, GgmlType::iq2_xs, GgmlType::iq2_s, GgmlType::iq3_xxs, GgmlType::iq3_s}) {
    const std::string tname(io::ggml_type_name(type));
    INFO(tname);
    const auto f = io::GgufFile::open((types_dir / (tname + ".gguf")).string());
    const auto& info = f.info("lq.2");
    const Tensor packed = Tensor::from_storage(f.mapped_file()->region(info.file_offset, info.nbytes), DType::u8,
                                               gguf_linear_weight_shape(type, 4096, 2));
    const Tensor w = io::dequantize(f, "lq.2");  // [2, 4096]
    const auto xs = random_floats(3 * 4096, 11);
    const Tensor x = Tensor::from_vector(xs, Shape{3, 4096});
    const Tensor bias = Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, Shape{2});
    const Tensor y = ggml_linear(x, packed, type, 4096, 2, bias);
    REQUIRE(y.shape() == Shape{3, 2});
    const Tensor ref = ops::linear(x, w, bias);
    // Q8 activations: each value off by at most half a step of max|x| / 127.
    CHECK(rel_err(y.to_vector<float>(), ref.to_vector<float>()) < 0.02);
    // bfloat16 in, bfloat16 out.
    CHECK(ggml_linear(x.to(DType::bf16), packed, type, 4096, 2).dtype() == DType::bf16);
  }
  const Tensor bad = Tensor::zeros(Shape{2, 100}, DType::u8);
  CHECK_THROWS_AS(ggml_linear(Tensor::zeros(Shape{1, 4096}), bad, GgmlType::q8_0, 4096, 2), ShapeError);
  CHECK_THROWS_AS(ggml_linear(Tensor::zeros(Shape{1, 64}), bad, GgmlType::q8_0, 4096, 2), ShapeError);
}

TEST_CASE("the reference quantizers follow ggml's definitions", "[quant][ggml]") {
  const auto x = random_floats(256, 3, 2.0f);
  std::vector<io::block_q8_0> q8(8);
  quantize_row_q8_0(x.data(), q8.data(), 256);
  std::vector<io::block_q4_0> q4(8);
  quantize_row_q4_0(x.data(), q4.data(), 256);
  for (std::size_t b = 0; b < 8; ++b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[32 * b + j]) > amax) amax = std::fabs(x[32 * b + j]), max = x[32 * b + j];
    }
    CHECK(io::f16_scale(q8[b].d) == float(half(amax / 127.0f)));
    CHECK(io::f16_scale(q4[b].d) == float(half(max / -8.0f)));
    for (int j = 0; j < 32; ++j) {
      const float v8 = io::f16_scale(q8[b].d) * q8[b].qs[j];
      CHECK(std::fabs(v8 - x[32 * b + j]) <= 0.51f * amax / 127.0f + 1e-3f * amax);
    }
  }
  // The values of the largest magnitude land on -8 (Q4_0) and +-127 (Q8_0).
  std::vector<float> one(32, 0.0f);
  one[5] = -3.0f;
  io::block_q4_0 b4;
  quantize_row_q4_0(one.data(), &b4, 32);
  CHECK((b4.qs[5] & 0x0F) == 0);  // -3 / (3/8) + 8 = 0
  io::block_q8_0 b8;
  quantize_row_q8_0(one.data(), &b8, 32);
  CHECK(b8.qs[5] == -127);
}

TEST_CASE("ggml dot products of every length agree across kernels, to the row's last byte", "[quant][ggml]") {
  // The AVX-512 Q4_0 and Q4_K kernels take four blocks a step and the rest in a shorter step, the
  // AVX2 32-element kernels two: lengths of 1-9 blocks and past 128 reach every part. Each row
  // ends its allocation, so a load past it would show under AddressSanitizer. Every vector tier
  // this CPU runs against the scalar.
  for (const auto type : dot_types) {
    for (const std::size_t blocks : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 9u, 131u}) {
      const std::size_t n = blocks * io::ggml_type_info(type).block_size;
      INFO(io::ggml_type_name(type) << " n = " << n);
      const auto w = random_floats(n, 5 + static_cast<unsigned>(n), 1.0f);
      const std::size_t row_bytes = io::ggml_row_nbytes(type, n);
      const auto packed = std::make_unique<std::byte[]>(row_bytes);
      if (can_quantize_to(type)) quantize_rows(type, w.data(), packed.get(), n);
      else random_blocks(type, packed.get(), blocks, 3 + static_cast<unsigned>(n));
      const auto x = random_floats(n, 9, 3.0f);
      ActivationRow a;
      quantize_activation(type, x.data(), n, a);
      // The kernels differ only in the order of their float sums: bound the difference by the
      // magnitude of the terms (random codes give block terms that cancel).
      std::vector<float> wv(n);
      io::dequantize_row(type, packed.get(), wv.data(), n);
      const auto xv = activation_values(type, a, n);
      double magnitude = 0;
      for (std::size_t i = 0; i < n; ++i) magnitude += std::fabs(double(wv[i]) * xv[i]);
      const float portable = vec_dot(simd::scalar{}, type, n, packed.get(), a);
      quant_ladder::for_each([&](auto arch) {
        using A = decltype(arch);
        if (!A::supported() || !A::available()) return;
        INFO(A::name());
        const float got = vec_dot(arch, type, n, packed.get(), a);
        INFO(got << " vs " << portable << ", terms of magnitude " << magnitude);
        CHECK(std::fabs(double(got) - portable) <= 1e-5 * magnitude + 1e-4);
      });
    }
  }
}

#if ACCEL_SIMD_X86
// The vector unpacking under its own ISA's attribute: the test body is compiled for the build's
// -march, which need not include AVX-512.
static ACCEL_TARGET_AVX512_VNNI void unpack_k4_heads(const std::uint8_t* heads, std::uint8_t* got) {
  _mm512_storeu_si512(got, quant::detail::k4_scales_mins(_mm512_loadu_si512(heads)));
}
#endif

TEST_CASE("Q4_K's scales and mins unpack the same in vector registers as io::k4_scales_mins", "[quant][ggml]") {
#if ACCEL_SIMD_X86
  if (!simd::avx512_vnni::available()) {
    WARN("no AVX-512 VNNI on this CPU: the vector unpacking did not run");
    return;
  }
  std::mt19937 g(3);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 20000; ++trial) {
    // Four blocks' heads (d, dmin, twelve packed bytes), one per 128-bit lane: every byte repeated
    // in a lane, then random.
    std::uint8_t heads[64], got[64];
    for (int i = 0; i < 64; ++i) heads[i] = static_cast<std::uint8_t>(trial < 64 ? 4 * trial + i / 16 : byte(g));
    unpack_k4_heads(heads, got);
    bool same = true;
    for (int lane = 0; lane < 4; ++lane) {
      std::uint8_t sc[8], mn[8];
      io::k4_scales_mins(heads + 16 * lane + 4, sc, mn);
      for (int i = 0; i < 8; ++i) same = same && got[16 * lane + i] == sc[i] && got[16 * lane + 8 + i] == mn[i];
    }
    INFO("trial " << trial);
    CHECK(same);
  }
#else
  WARN("not an x86 build: the vector unpacking is not compiled");
#endif
}

TEST_CASE("vec_dot_rows gives vec_dot's results bit for bit for every batch size", "[quant][ggml]") {
  const std::size_t n = 512;
  std::vector<ActivationRow> acts(7);
  std::vector<const ActivationRow*> xs;
  for (std::size_t t = 0; t < acts.size(); ++t) xs.push_back(&acts[t]);
  const auto w = random_floats(n, 11, 1.0f);
  for (const auto type : dot_types) {
    INFO(io::ggml_type_name(type));
    std::vector<std::byte> packed(io::ggml_row_nbytes(type, n));
    if (can_quantize_to(type)) {
      quantize_rows(type, w.data(), packed.data(), n);
    } else {
      for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<std::byte>((i * 37 + 11) & 0x3F);
    }
    for (std::size_t t = 0; t < acts.size(); ++t) {
      const auto x = random_floats(n, 20 + static_cast<unsigned>(t), 3.0f);
      quantize_activation(type, x.data(), n, acts[t]);
    }
    simd::dispatch<quant_ladder>([&](auto arch) {
      for (std::size_t count = 1; count <= acts.size(); ++count) {
        std::vector<float> got(count);
        vec_dot_rows(arch, type, n, packed.data(), xs.data(), count, got.data());
        for (std::size_t t = 0; t < count; ++t) CHECK(got[t] == vec_dot(arch, type, n, packed.data(), acts[t]));
      }
    });
  }
}

TEST_CASE("the AVX2 multi-row kernels of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS, TQ2_0 and the lattice types give "
          "vec_dot's bits",
          "[quant][ggml]") {
  // Each block decoded once for up to four activation rows (the one-row kernels are their R = 1),
  // in groups of four and the rest as vec_dot_rows groups them.
#if ACCEL_SIMD_X86
  if (!simd::avx2::available()) {
    WARN("AVX2 is not available at this tier: the multi-row kernels did not run");
    return;
  }
  std::vector<ActivationRow> acts(7);
  std::vector<const ActivationRow*> xs;
  for (auto& a : acts) xs.push_back(&a);
  for (const auto type : {GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q2_k, GgmlType::q3_k, GgmlType::q5_k,
                          GgmlType::iq4_nl, GgmlType::iq4_xs, GgmlType::tq2_0, GgmlType::iq2_xxs, GgmlType::iq2_xs, GgmlType::iq2_s, GgmlType::iq3_xxs, GgmlType::iq3_s}) {
    INFO(io::ggml_type_name(type));
    // 17 blocks of 32 (two-block steps and a last block) or two super-blocks.
    const std::size_t n = activation_is_q8_k(type) ? 512 : 544, blocks = n / io::ggml_type_info(type).block_size;
    std::vector<std::byte> packed(io::ggml_row_nbytes(type, n));
    random_blocks(type, packed.data(), blocks, 31);
    for (std::size_t t = 0; t < acts.size(); ++t) {
      const auto x = random_floats(n, 60 + static_cast<unsigned>(t), 3.0f);
      quantize_activation(type, x.data(), n, acts[t]);
    }
    for (std::size_t count = 1; count <= acts.size(); ++count) {
      std::vector<float> got(count);
      quant::detail::in_groups<4>([&](auto r, const ActivationRow* const* rows, float* o) {
        constexpr int R = decltype(r)::value;
        const std::byte* w = packed.data();
        switch (type) {
          case GgmlType::q4_1: quant::detail::dot32_rows_avx2<GgmlType::q4_1, R>(n, w, rows, o); break;
          case GgmlType::q5_0: quant::detail::dot32_rows_avx2<GgmlType::q5_0, R>(n, w, rows, o); break;
          case GgmlType::q5_1: quant::detail::dot32_rows_avx2<GgmlType::q5_1, R>(n, w, rows, o); break;
          case GgmlType::q2_k: quant::detail::dot_q2_k_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::q3_k: quant::detail::dot_q3_k_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::q5_k: quant::detail::dot_q5_k_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::iq4_nl: quant::detail::dot_iq4_nl_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::iq4_xs: quant::detail::dot_iq4_xs_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::iq2_xxs: quant::detail::dot_iq2_xxs_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::iq2_xs: quant::detail::dot_iq2_xs_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::iq2_s: quant::detail::dot_iq2_s_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::iq3_xxs: quant::detail::dot_iq3_xxs_rows_avx2<R>(n, w, rows, o); break;
          case GgmlType::iq3_s: quant::detail::dot_iq3_s_rows_avx2<R>(n, w, rows, o); break;
          default: quant::detail::dot_tq2_0_rows_avx2<R>(n, w, rows, o); break;
        }
      }, xs.data(), count, got.data());
      for (std::size_t t = 0; t < count; ++t) {
        INFO("count " << count << " row " << t);
        CHECK(got[t] == vec_dot(simd::avx2{}, type, n, packed.data(), acts[t]));
      }
    }
  }
#else
  WARN("not an x86 build: the AVX2 kernels are not compiled");
#endif
}

TEST_CASE("ggml_linear's one-row path gives vec_dot's results bit for bit", "[quant][ggml]") {
  // 21 weight rows through ggml_linear with one input row: Q8_0 / Q4_0 rows of 17 blocks take
  // four-block steps and a tail.
  const std::size_t m = 21;
  for (const auto type : dot_types) {
    INFO(io::ggml_type_name(type));
    const std::size_t n = activation_is_q8_k(type) ? 512 : 544;
    const std::size_t row_bytes = io::ggml_row_nbytes(type, n);
    Tensor packed = Tensor::empty(gguf_linear_weight_shape(type, static_cast<std::int64_t>(n), m), DType::u8);
    REQUIRE(packed.nbytes() == m * row_bytes);
    auto* bytes = static_cast<std::byte*>(packed.data_ptr());
    if (can_quantize_to(type)) {
      const auto w = random_floats(m * n, 13, 1.0f);
      quantize_rows(type, w.data(), bytes, m * n);
    } else {
      for (std::size_t i = 0; i < m * row_bytes; ++i) bytes[i] = static_cast<std::byte>((i * 37 + 11) & 0x3F);
    }
    const auto x = random_floats(n, 17, 3.0f);
    ActivationRow a;
    quantize_activation(type, x.data(), n, a);
    std::vector<float> best;  // the machine's own kernels, which ggml_linear uses
    simd::dispatch<quant_ladder>([&](auto arch) {
      std::vector<float> want(m);
      for (std::size_t r = 0; r < m; ++r) want[r] = vec_dot(arch, type, n, bytes + r * row_bytes, a);
      best = want;
    });
    const Tensor y = ggml_linear(Tensor::from_vector(x, Shape{1, static_cast<std::int64_t>(n)}), packed, type,
                                 static_cast<std::int64_t>(n), m);
    CHECK(y.to_vector<float>() == best);
  }
}

TEST_CASE("the 16-row kernels and ggml_linear's batched path give vec_dot's results", "[quant][ggml]") {
  // 37 weight rows: two groups of 16 and a tail of 5; up to 11 activation rows: a pass of 8 and
  // the rest. The integer sums are exact, so only the float accumulation order differs.
  const std::size_t n = 512, m = 37;
  std::vector<ActivationRow> acts(11);
  std::vector<const ActivationRow*> xs;
  std::vector<float> xf;
  for (std::size_t t = 0; t < acts.size(); ++t) xs.push_back(&acts[t]);
  for (const auto type : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_k, GgmlType::q6_k}) {
    INFO(io::ggml_type_name(type));
    const std::size_t row_bytes = io::ggml_row_nbytes(type, n);
    const auto w = random_floats(m * n, 5, 1.0f);
    std::vector<std::byte> packed(m * row_bytes);
    quantize_rows(type, w.data(), packed.data(), m * n);
    xf.clear();
    for (std::size_t t = 0; t < acts.size(); ++t) {
      const auto x = random_floats(n, 40 + static_cast<unsigned>(t), 3.0f);
      xf.insert(xf.end(), x.begin(), x.end());
      quantize_activation(type, x.data(), n, acts[t]);
    }
    simd::dispatch<quant_ladder>([&](auto arch) {
      std::vector<float> want(acts.size() * m);  // [activation][weight row]
      for (std::size_t t = 0; t < acts.size(); ++t) {
        for (std::size_t r = 0; r < m; ++r) want[t * m + r] = vec_dot(arch, type, n, packed.data() + r * row_bytes, acts[t]);
      }
      // 16 block terms of magnitude ~20 each (|x| <= 3, |w| <= 1): float rounding of order 1e-5
      // per term, summed in another order.
      const auto near = [](float a, float b) { return std::abs(a - b) <= 2e-4f + 1e-5f * std::abs(b); };
      if (has_dot_x16(arch, type)) {
        for (std::size_t count = 1; count <= acts.size(); ++count) {
          std::vector<float> got(count * 16);
          vec_dot_x16(arch, type, n, packed.data() + 16 * row_bytes, row_bytes, xs.data(), count, got.data());
          for (std::size_t t = 0; t < count; ++t) {
            for (std::size_t i = 0; i < 16; ++i) CHECK(near(got[t * 16 + i], want[t * m + 16 + i]));
          }
        }
      } else {
        CHECK_THROWS_AS(vec_dot_x16(arch, type, n, packed.data(), row_bytes, xs.data(), 1, xf.data()), DTypeError);
      }
      Tensor wt = Tensor::empty(gguf_linear_weight_shape(type, n, m), DType::u8, Device::cpu());
      std::memcpy(wt.data_ptr(), packed.data(), packed.size());
      for (const std::size_t count : {1ul, 2ul, 3ul, 9ul, 11ul}) {
        const Tensor x = Tensor::from_vector(std::vector<float>(xf.begin(), xf.begin() + count * n),
                                             Shape{static_cast<std::int64_t>(count), static_cast<std::int64_t>(n)});
        const auto y = ggml_linear(x, wt, type, n, m).to_vector<float>();
        for (std::size_t i = 0; i < count * m; ++i) {
          INFO("count " << count << " output " << i << ": " << y[i] << " vs " << want[i]);
          CHECK(near(y[i], want[i]));
        }
      }
    });
  }
}

TEST_CASE("repacked Q4_0 and Q8_0 give vec_dot's results at every tier, and GgmlLinear repacks only mapped weights",
          "[quant][ggml][repack]") {
  // 37 weight rows: two steps of 16 and a padded one; 1-4 activation rows read the layout as it
  // is, 5-11 expand each step's blocks first (a pass of eight and the rest).
  const std::size_t n = 512, m = 37;
  const GgmlType type = GENERATE(GgmlType::q4_0, GgmlType::q8_0);
  INFO(io::ggml_type_name(type));
  const std::size_t row_bytes = io::ggml_row_nbytes(type, n);
  const auto w = random_floats(m * n, 7, 1.0f);
  Tensor wt = Tensor::empty(gguf_linear_weight_shape(type, n, m), DType::u8, Device::cpu());
  quantize_rows(type, w.data(), static_cast<std::byte*>(wt.data_ptr()), m * n);
  const auto* wp = static_cast<const std::byte*>(wt.data_ptr());
  std::vector<ActivationRow> acts(11);
  std::vector<const ActivationRow*> xs;
  std::vector<float> xf;
  for (std::size_t t = 0; t < acts.size(); ++t) {
    const auto x = random_floats(n, 60 + static_cast<unsigned>(t), 3.0f);
    xf.insert(xf.end(), x.begin(), x.end());
    quantize_activation(type, x.data(), n, acts[t]);
    xs.push_back(&acts[t]);
  }
  const Tensor packed = repack_ggml(type, wt, n, m);
  REQUIRE(static_cast<std::size_t>(packed.nbytes()) == repacked_bytes(type, n, m));
  REQUIRE(repacked_bytes(type, n, m) == 48 * row_bytes);
  const auto near = [](float a, float b) { return std::abs(a - b) <= 2e-4f + 1e-5f * std::abs(b); };
  int tiers = 0;
  quant_ladder::for_each([&](auto arch) {
    using A = decltype(arch);
    if (!A::supported() || !A::available()) return;
    if (!has_repacked_kernels(arch, type)) return;
    ++tiers;
    for (std::size_t count = 1; count <= acts.size(); ++count) {
      std::vector<float> got(count * m, -1.0f);
      repacked_dot(arch, type, n, m, static_cast<const std::byte*>(packed.data_ptr()), xs.data(), count, got.data());
      std::size_t bad = 0;
      for (std::size_t t = 0; t < count; ++t) {
        for (std::size_t r = 0; r < m; ++r) {
          if (!near(got[t * m + r], vec_dot(simd::scalar{}, type, n, wp + r * row_bytes, acts[t]))) ++bad;
        }
      }
      // for_each is noexcept: a CHECK, not a REQUIRE.
      CHECK(bad == 0);
    }
  });
#if ACCEL_SIMD_X86
  if (simd::avx2::available()) CHECK(tiers >= 1);
#endif
  CHECK_THROWS_AS(repack_ggml(GgmlType::q4_k, wt, n, m), DTypeError);
  CHECK_THROWS_AS(repack_ggml(type, wt.narrow(0, 0, 36), n, m), ShapeError);

  // The layer: a weight in writable memory stays as it is; one viewed in a read-only mapped file is
  // repacked, gives the same outputs, and reads right after its pages were handed back.
  const Tensor x = Tensor::from_vector(std::vector<float>(xf.begin(), xf.begin() + 3 * n), Shape{3, static_cast<std::int64_t>(n)});
  GgmlLinear layer(static_cast<std::int64_t>(n), static_cast<std::int64_t>(m), type);
  layer.parameter_cell("weight")->data = wt;
  const auto want = layer.forward(x).to_vector<float>();
  const auto want1 = layer.forward(x.narrow(0, 0, 1)).to_vector<float>();
  CHECK_FALSE(layer.repack_for_cpu());
  CHECK_FALSE(layer.repacked_weight().defined());
  accel_test::TempDir dir;
  {
    std::ofstream f(dir.file("w.bin"), std::ios::binary);
    f.write("pad", 3);  // an unaligned view: only whole pages inside it are handed back
    f.write(static_cast<const char*>(wt.data_ptr()), static_cast<std::streamsize>(wt.nbytes()));
  }
  auto file = MappedFile::open(dir.file("w.bin"));
  layer.parameter_cell("weight")->data = Tensor::from_storage(file->region(3, wt.nbytes()), DType::u8, wt.shape());
  const bool repacks = cpu_has_repacked_kernels(type);
  CHECK(layer.repack_for_cpu() == repacks);
  CHECK(layer.repacked_weight().defined() == repacks);
  for (const auto& [in, expected] : {std::pair{x, want}, std::pair{x.narrow(0, 0, 1), want1}}) {
    const auto got = layer.forward(in).to_vector<float>();
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(near(got[i], expected[i]));
  }
  const auto dequantized = layer.dequantized_weight().to_vector<float>();  // the pages read again
  const auto expected_values = io::dequantize_ggml(type, io::ByteSpan(wp, wt.nbytes()), Shape{37, 512}).to_vector<float>();
  CHECK(dequantized == expected_values);
  // A replaced weight drops the copy.
  layer.parameter_cell("weight")->data = wt;
  const auto after = layer.forward(x).to_vector<float>();
  CHECK_FALSE(layer.repacked_weight().defined());
  CHECK(after == want);
}

TEST_CASE("the reference quantizers give llama-quantize's bytes", "[quant][ggml]") {
  // Documented bounds on dequantize(quantize(x)) per tensor: RMS of the error relative to the RMS
  // of x (the largest over the four fixture tensors, measured: Q8_0 0.5%, Q6_K 1.8%, Q5_K 3.5%,
  // Q5_1 3.6%, Q5_0 4.2%, Q4_K 6.9%, IQ4_NL 7.5%, Q4_1 7.6%, IQ4_XS 7.6%, Q4_0 8.3%).
  const std::vector<std::pair<GgmlType, double>> types = {
      {GgmlType::q8_0, 0.01},  {GgmlType::q6_k, 0.025}, {GgmlType::q5_k, 0.045},   {GgmlType::q5_1, 0.045},
      {GgmlType::q5_0, 0.05},  {GgmlType::q4_k, 0.085}, {GgmlType::iq4_nl, 0.09}, {GgmlType::q4_1, 0.09},
      {GgmlType::iq4_xs, 0.09}, {GgmlType::q4_0, 0.10}};
  const auto dir = std::filesystem::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "ggml_quantize";
  const auto input = io::GgufFile::open((dir / "input_f32.gguf").string());
  for (const auto& [type, bound] : types) {
    const std::string tname(io::ggml_type_name(type));
    REQUIRE(can_quantize_to(type));
    const auto ref = io::GgufFile::open((dir / ("llama_quantize_" + tname + ".gguf")).string());
    for (const auto& t : input.tensors()) {
      INFO(tname << " " << t.name);
      REQUIRE(ref.info(t.name).type == type);
      const Tensor x = input.tensor(t.name).contiguous();
      const auto n = static_cast<std::size_t>(x.numel());
      const auto* xp = static_cast<const float*>(x.data_ptr());
      const auto want = ref.bytes(t.name);
      std::vector<std::byte> got(want.size());
      quantize_rows(type, xp, got.data(), n);
      CHECK(std::equal(got.begin(), got.end(), want.begin(), want.end()));
      std::vector<float> back(n);
      io::dequantize_row(type, got.data(), back.data(), n);
      const double err = rel_err(back, std::vector<float>(xp, xp + n));
      CHECK(err < bound);
    }
    // Zeros stay zeros.
    const std::vector<float> zeros(512, 0.0f);
    std::vector<std::byte> blocks(io::ggml_row_nbytes(type, 512));
    std::vector<float> back(512, 1.0f);
    quantize_rows(type, zeros.data(), blocks.data(), 512);
    io::dequantize_row(type, blocks.data(), back.data(), 512);
    CHECK(std::all_of(back.begin(), back.end(), [](float v) { return v == 0.0f; }));
  }
  std::vector<std::byte> out(1024);
  const std::vector<float> x(256, 1.0f);
  CHECK_THROWS_AS(quantize_rows(GgmlType::q2_k, x.data(), out.data(), 256), ValueError);
  CHECK_THROWS_AS(quantize_rows(GgmlType::q4_k, x.data(), out.data(), 100), ValueError);
  CHECK_THROWS_AS(quantize_rows(GgmlType::iq4_xs, x.data(), out.data(), 32), ValueError);
  for (const auto type : {GgmlType::q2_k, GgmlType::q3_k, GgmlType::q8_1, GgmlType::q8_k, GgmlType::tq1_0, GgmlType::f16}) {
    CHECK_FALSE(can_quantize_to(type));
  }
}

TEST_CASE("GgufQuantizer keeps GGUF blocks: swapped layers, planned packed, within bounds of the float model",
          "[quant][gguf]") {
  for (const std::string name : {"tiny_llama", "tiny_gpt2"}) {
    for (const auto type : {GgmlType::q8_0, GgmlType::q4_0}) {
      INFO(name << " " << io::ggml_type_name(type));
      accel_test::TempDir dir;
      write_quantized_gguf(name, type, dir.file("q.gguf"), dir.file("deq.gguf"));
      auto ref = dispatch::load_pretrained_causal_lm(dir.file("deq.gguf"), {.show_progress = false});
      const Tensor ref_logits = ref.model->logits(prompt());

      GgufQuantizer q({.compute_dtype = DType::f32});
      auto p = dispatch::load_pretrained_causal_lm(dir.file("q.gguf"), {.show_progress = false, .quantizer = q});
      std::size_t swapped = 0, packed_bytes = 0;
      for (const auto& [n, m] : p.model->module().named_modules()) {
        if (auto* g = dynamic_cast<GgmlLinear*>(m)) {
          ++swapped;
          CHECK(g->quant_type() == type);
          CHECK(g->weight().dtype() == DType::u8);
          CHECK(g->weight().is_cpu());
          packed_bytes += g->weight().nbytes();
        }
      }
      CHECK(swapped >= 2);  // the weights whose rows are whole Q8_0 / Q4_0 blocks
      const Tensor logits = p.model->logits(prompt());
      // Documented bound: the Q8_0-quantized activations keep the logits within 5% (RMS).
      CHECK(rel_err(logits.to_vector<float>(), ref_logits.to_vector<float>()) < 0.05);

      // Half the packed bytes on disk: the offloaded blocks travel as bytes and compute the same.
      MaxMemory half;
      half.add(Placement::cpu(), ByteSize(static_cast<std::int64_t>(packed_bytes / 2)));
      auto placed = dispatch::load_pretrained_causal_lm(dir.file("q.gguf"), {.show_progress = false,
                                                                             .device_map = std::string("auto"),
                                                                             .max_memory = half,
                                                                             .quantizer = q,
                                                                             .offload_depth = 2});
      bool disk = false;
      for (const auto& [k, where] : *placed.device_map) disk |= where.is_disk();
      CHECK(disk);
      CHECK(placed.model->logits(prompt()).to_vector<float>() == logits.to_vector<float>());

      // dequantize(): float layers of exactly the dequantized values.
      q.dequantize(p.model->module());
      for (const auto& [n, m] : p.model->module().named_modules()) CHECK_FALSE(dynamic_cast<GgmlLinear*>(m));
      CHECK(p.model->logits(prompt()).to_vector<float>() == ref_logits.to_vector<float>());
    }
  }
}


TEST_CASE("GgufQuantizer quantizes a float checkpoint on load to Q8_0, Q4_0 and Q4_K", "[quant][gguf]") {
  // Documented bounds (logits, RMS relative to the float model, random weights; measured 1.2-1.7%,
  // 14% and 11-17%): Q8_0 2%, Q4_K 20%, Q4_0 25%.
  accel_test::TempDir dir;
  const std::vector<fs::path> models = {model_dir("tiny_llama"), model_dir("tiny_gpt2"), accel_test::write_random_llama(dir, "llama256")};
  for (const auto& path : models) {
    auto ref = dispatch::load_pretrained_causal_lm(path.string(), {.dtype = DType::f32, .show_progress = false});
    const Tensor ref_logits = ref.model->logits(prompt());
    for (const auto type : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_k}) {
      INFO(path.filename().string() << " " << io::ggml_type_name(type));
      GgufQuantizer q({.compute_dtype = DType::f32, .quant_type = type});
      CHECK_FALSE(q.pre_quantized());
      AnyQuantizer any(q);
      auto p = dispatch::load_pretrained_causal_lm(path.string(), {.dtype = DType::f32, .show_progress = false, .quantizer = any});
      std::size_t swapped = 0;
      const auto block = static_cast<std::int64_t>(io::ggml_type_info(type).block_size);
      for (const auto& [n, m] : p.model->module().named_modules()) {
        if (auto* g = dynamic_cast<GgmlLinear*>(m)) {
          ++swapped;
          CHECK(g->quant_type() == type);
          CHECK(g->weight().is_cpu());
          // The blocks are ggml's quantization of the float weight ([out, in]; a Conv1D's transposed).
          const bool conv1d = ref.model->module().get_submodule(n).class_name() == "Conv1D";
          const Tensor wf = ref.model->module().get_parameter(n + ".weight").to(DType::f32);
          const Tensor w = (conv1d ? wf.t() : wf).contiguous();
          std::vector<std::byte> bytes(static_cast<std::size_t>(g->weight().nbytes()));
          quantize_rows(type, static_cast<const float*>(w.data_ptr()), bytes.data(), static_cast<std::size_t>(w.numel()));
          CHECK(std::memcmp(bytes.data(), g->weight().data_ptr(), bytes.size()) == 0);
        } else if (!n.empty() && is_float_linear(*m)) {
          // Kept float: the output head, or rows that are not whole blocks.
          const std::int64_t in = m->get_parameter("weight").size(m->class_name() == "Conv1D" ? 0 : 1);
          CHECK((n == "lm_head" || in % block != 0));
        }
      }
      CHECK(any.target<GgufQuantizer>()->swapped() == swapped);
      if (block == 32 || path.filename() == "llama256") CHECK(swapped >= 2);
      if (swapped == 0) continue;  // Q4_K needs rows of 256: the tiny models have none
      const Tensor logits = p.model->logits(prompt());
      const double bound = type == GgmlType::q8_0 ? 0.02 : type == GgmlType::q4_k ? 0.20 : 0.25;
      CHECK(rel_err(logits.to_vector<float>(), ref_logits.to_vector<float>()) < bound);
      // dequantize(): float layers again (a GPT-2 Conv1D a Conv1D), computing what the blocks stand for.
      any.dequantize(p.model->module());
      for (const auto& [n, m] : p.model->module().named_modules()) CHECK_FALSE(dynamic_cast<GgmlLinear*>(m));
      if (path.filename() == "tiny_gpt2") {
        CHECK(p.model->module().get_submodule("transformer.h.0.attn.c_attn").class_name() == "Conv1D");
      }
      CHECK(rel_err(p.model->logits(prompt()).to_vector<float>(), ref_logits.to_vector<float>()) < bound);
    }
  }
  CHECK_THROWS_AS(GgufQuantizer({.quant_type = GgmlType::q2_k}), ValueError);
  CHECK_THROWS_WITH(GgufQuantizer({.quant_type = GgmlType::q3_k}), Catch::Contains("Q6_K") && Catch::Contains("IQ4_XS"));
  const GGUFQuantizationConfig c{.compute_dtype = DType::f16, .quant_type = GgmlType::q4_k};
  CHECK(c.to_json()["quant_type"] == "Q4_K");
  CHECK(GGUFQuantizationConfig::from_json(c.to_json()).quant_type == GgmlType::q4_k);
  CHECK_THROWS_AS(GGUFQuantizationConfig::from_json({{"quant_method", "gguf"}, {"quant_type", "Q3_K"}}), ValueError);
  CHECK_THROWS_AS(GGUFQuantizationConfig::from_json({{"quant_method", "gguf"}, {"quant_type", "Q9"}}), ValueError);
}

TEST_CASE("GGUFQuantizationConfig reads and writes Diffusers' JSON", "[quant][gguf]") {
  const GGUFQuantizationConfig c{.compute_dtype = DType::f16};
  CHECK(c.to_json() == nlohmann::json{{"quant_method", "gguf"}, {"compute_dtype", "float16"}});
  CHECK(GGUFQuantizationConfig::from_json(c.to_json()).compute_dtype == DType::f16);
  CHECK(GGUFQuantizationConfig::from_json({{"quant_method", "gguf"}}).compute_dtype == DType::bf16);
  CHECK_THROWS_AS(GGUFQuantizationConfig::from_json({{"quant_method", "bitsandbytes"}}), ValueError);
  CHECK_THROWS_AS(GGUFQuantizationConfig::from_json({{"quant_method", "gguf"}, {"compute_dtype", "int8"}}), ValueError);
}
