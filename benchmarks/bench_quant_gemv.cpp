// Quantized GEMV (n = 1) and small GEMM (n = 16): quant::ggml_linear for Q8_0, Q4_0, Q4_K, Q6_K,
// Q5_K, Q3_K, Q2_K, Q5_0, Q4_1, Q5_1, IQ4_NL, IQ4_XS, TQ2_0, IQ3_S and IQ2_XS, bitsandbytes' NF4 (quant::gemv_4bit, block 64) and int8
// (quant::matmul_8bit, LLM.int8 with threshold 6), and bf16 / f16 through ops::linear, for m =
// 4096 outputs and k = 4096 and 14336, next to llama.cpp's own kernels measured in the same run
// (test-backend-ops -o MUL_MAT -b CPU perf, when --test-backend-ops gives its path; llama.cpp has
// no NF4 / int8 rows), with the weight bytes each call streams (packed codes and their scales).
//
//   bench_quant_gemv [--reps N] [--test-backend-ops PATH] [--types q4_K,nf4,...] [--rounds R] [--tier T]
//                    [--rows 1,16] [--cold] [--json]
//
// Rows beside the types: q4_0r and q8_0r (Q4_0 / Q8_0 repacked as a GGUF layer loaded from a mapped file runs it,
// quant/kernels/ggml_repack.hpp; compared with llama.cpp's row of the type), and f16x32 / bf16x32 (the same
// activations widened to f32 through backend::cpu::gemv_rows without x_exact, which reads them in
// f32: the f16 / bf16 rows go through ops::linear, which reads x narrowed to the weight's dtype). --rows: the activation rows per call (n). --cold: before each
// timed call, 256 MiB are read through the caches, so the weights come from DRAM as they do when
// decoding a model larger than the caches.
//
// --tier caps the library's kernels at one CPU tier (scalar, avx2, avx512, avx512_vnni,
// avx512_bf16; ACCEL_CPU_ARCH); the header and the JSON name the tier that ran ("cpu_tier").
// Prints per shape and type: our median microseconds per call, the weights' GB/s, llama.cpp's
// microseconds per run for the same MUL_MAT (type_a = the weight type, type_b = f32, m, n, k) and
// the ratio (above 1: faster than llama.cpp). With --rounds R both sides are measured R times,
// alternating, and each prints its median over the rounds. Threads: accel's CPU threads (OMP_NUM_THREADS) and
// the same count for test-backend-ops (it takes the machine's hardware concurrency).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/backend/cpu/gemv.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_types.hpp"
#include "accel/ops/matmul.hpp"
#include "accel/quant/formats/bnb_4bit.hpp"
#include "accel/quant/formats/bnb_int8.hpp"
#include "accel/quant/formats/ggml_quantize.hpp"
#include "accel/quant/kernels/ggml_repack.hpp"
#include "accel/quant/layers/bnb_products.hpp"
#include "accel/quant/layers/ggml_linear.hpp"
#include "common/cpu_tier.hpp"
#include "common/json_stdout.hpp"

using namespace accel;
using io::GgmlType;

namespace {

struct Args {
  int reps = 15;
  std::string test_backend_ops;
  bool json = false;
  std::string only;  // ",q4_K,nf4," when --types narrows the rows
  int rounds = 1;
  std::string tier;
  std::vector<int> rows{1, 16};
  bool cold = false;
};

/// Reads 256 MiB through the caches (more than any last-level cache here), evicting the weights.
void evict_caches() {
  static const std::vector<std::uint64_t> junk(std::size_t{32} << 20, 1);
  std::atomic<std::uint64_t> sum{0};
  accel::parallel_for(junk.size(), std::size_t{1} << 16, [&](std::size_t b, std::size_t e) {
    std::uint64_t s = 0;
    for (std::size_t i = b; i < e; ++i) s += junk[i];
    sum += s;
  });
  if (sum.load() == 0) std::fputc(' ', stderr);  // never true: keeps the reads
}

/// Weights of `type` for an m x k layer: reference-quantized random values where the library has
/// the quantizer, random blocks with small scales otherwise (the kernels' speed does not depend on
/// the values).
Tensor make_weights(GgmlType type, std::int64_t m, std::int64_t k, std::mt19937& g) {
  const Shape shape = quant::gguf_linear_weight_shape(type, k, m);
  Tensor w = Tensor::empty(shape, DType::u8, Device::cpu());
  auto* p = static_cast<std::uint8_t*>(w.data_ptr());
  const std::size_t n = static_cast<std::size_t>(m * k);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  if (type == GgmlType::q8_0 || type == GgmlType::q4_0) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(g);
    if (type == GgmlType::q8_0) quant::quantize_row_q8_0(x.data(), reinterpret_cast<io::block_q8_0*>(p), n);
    else quant::quantize_row_q4_0(x.data(), reinterpret_cast<io::block_q4_0*>(p), n);
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::size_t i = 0; i < w.nbytes(); ++i) p[i] = static_cast<std::uint8_t>(byte(g));
  const auto& info = io::ggml_type_info(type);
  const std::uint16_t small = half(0.001f).bits;
  // Every f16 scale, min and dmin small and finite (the packed sub-scales stay random).
  const auto settle = [&](auto t) {
    using B = io::ggml_block_t<decltype(t)::value>;
    for (std::size_t b = 0; b < w.nbytes() / info.type_size; ++b) {
      B blk;
      std::memcpy(&blk, p + b * info.type_size, sizeof(B));
      if constexpr (requires { requires std::is_same_v<decltype(B::d), std::uint16_t>; }) blk.d = small;
      if constexpr (requires { B::dmin; }) blk.dmin = small;
      if constexpr (requires { B::m; }) blk.m = small;
      std::memcpy(p + b * info.type_size, &blk, sizeof(B));
    }
  };
  if (!io::with_ggml_block(type, settle)) io::with_ggml_lattice_block(type, settle);
  return w;
}

template <class F>
double median_us(int reps, bool cold, F&& f) {
  f();  // warm: pages faulted, caches and threads up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    if (cold) evict_caches();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// llama.cpp's MUL_MAT timings: (type name lower-case, m, n, k) -> microseconds per run.
std::map<std::tuple<std::string, int, int, int>, double> run_test_backend_ops(const std::string& path) {
  std::map<std::tuple<std::string, int, int, int>, double> out;
  const std::string cmd = "'" + path + "' -o MUL_MAT -b CPU perf 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  const std::regex line(R"(MUL_MAT\(type_a=(\w+),type_b=f32,m=(\d+),n=(\d+),k=(\d+),bs=\[1,1\],nr=\[1,1\].*?\):\s+\d+ runs -\s+([\d.]+) us/run)");
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) {
    std::cmatch mt;
    if (std::regex_search(buf, mt, line)) {
      std::string type = mt[1].str();  // "q4_K": ggml's spelling; the rows look up lower case
      std::transform(type.begin(), type.end(), type.begin(), ::tolower);
      out[{type, std::stoi(mt[2].str()), std::stoi(mt[3].str()), std::stoi(mt[4].str())}] = std::stod(mt[5].str());
    }
  }
  ::pclose(p);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--reps") a.reps = std::stoi(value());
    else if (k == "--test-backend-ops") a.test_backend_ops = value();
    else if (k == "--json") a.json = true;
    else if (k == "--types") a.only = "," + value() + ",";
    else if (k == "--rounds") a.rounds = std::max(1, std::stoi(value()));
    else if (k == "--tier") a.tier = value();
    else if (k == "--cold") a.cold = true;
    else if (k == "--rows") {
      a.rows.clear();
      const std::string v = value();
      for (std::size_t at = 0; at <= v.size();) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        a.rows.push_back(std::max(1, std::stoi(v.substr(at, comma - at))));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: bench_quant_gemv [--reps N] [--test-backend-ops PATH] [--types q4_K,nf4,...] [--rounds R] [--tier T] "
                   "[--rows 1,16] [--cold] [--json]\n");
      return 2;
    }
  }
  const std::string tier = accel_bench::apply_cpu_tier(a.tier);
  accel_bench::JsonStdout json_mode(a.json);
  std::mt19937 g(1);
  struct Row {
    std::string type;
    int m, n, k;
    std::size_t weight_bytes;
    std::function<void()> call;
    std::vector<double> ours, theirs;  // one median per round
    double us = 0, gbps = 0, theirs_us = 0;
  };
  std::vector<Row> rows;
  const std::vector<std::pair<std::string, std::optional<GgmlType>>> types = {
      {"q8_0", GgmlType::q8_0}, {"q4_0", GgmlType::q4_0}, {"q4_K", GgmlType::q4_k}, {"q6_K", GgmlType::q6_k},
      {"q5_K", GgmlType::q5_k}, {"q3_K", GgmlType::q3_k}, {"q2_K", GgmlType::q2_k}, {"q5_0", GgmlType::q5_0},
      {"q4_1", GgmlType::q4_1}, {"q5_1", GgmlType::q5_1}, {"iq4_nl", GgmlType::iq4_nl}, {"iq4_xs", GgmlType::iq4_xs},
      {"tq2_0", GgmlType::tq2_0}, {"iq3_s", GgmlType::iq3_s}, {"iq2_xs", GgmlType::iq2_xs}, {"iq3_xxs", GgmlType::iq3_xxs}, {"iq2_xxs", GgmlType::iq2_xxs}, {"iq2_s", GgmlType::iq2_s}, {"q4_0r", GgmlType::q4_0}, {"q8_0r", GgmlType::q8_0},
      {"nf4", std::nullopt},    {"int8", std::nullopt},   {"bf16", std::nullopt}, {"f16", std::nullopt},
      {"bf16x32", std::nullopt}, {"f16x32", std::nullopt}};
  for (const int k : {4096, 14336}) {
    for (const auto& [name, type] : types) {
      if (!a.only.empty() && a.only.find("," + name + ",") == std::string::npos) continue;
      const bool repacked = name.ends_with("r");
      if (repacked && !quant::cpu_has_repacked_kernels(*type)) continue;  // no repacked kernels at this tier
      const int m = 4096;
      std::normal_distribution<float> wd(0.0f, 0.02f);
      auto random_weight = [&] {
        std::vector<float> v(std::size_t(m) * k);
        for (auto& e : v) e = wd(g);
        return Tensor::from_vector(v, Shape{m, k});
      };
      // bitsandbytes' layers as Linear4bit / Linear8bitLt run them on the CPU: NF4 (block 64)
      // through gemv_4bit for up to 16 rows, int8 through LLM.int8's matmul_8bit (threshold 6).
      // Every weight stays alive for all rounds.
      auto nf4 = std::make_shared<std::optional<quant::Bnb4bitWeight>>();
      auto int8 = std::make_shared<std::optional<quant::Int8Weight>>();
      Tensor w, w_repacked;
      std::size_t weight_bytes = 0;
      if (type) {
        w = make_weights(*type, m, k, g);
        weight_bytes = w.nbytes();
        if (repacked) w_repacked = quant::repack_ggml(*type, w, k, m);
      } else if (name == "nf4") {
        *nf4 = quant::quantize_4bit(random_weight(), {.quant_type = quant::BnbQuantType::nf4});
        weight_bytes = (*nf4)->packed.nbytes() + (*nf4)->state.absmax.nbytes();
      } else if (name == "int8") {
        *int8 = quant::quantize_int8_weight(random_weight());
        weight_bytes = (*int8)->CB.nbytes() + (*int8)->SCB.nbytes();
      } else {
        w = Tensor::from_vector(std::vector<float>(std::size_t(m) * k, 0.01f), Shape{m, k})
                .to(name.starts_with("bf16") ? DType::bf16 : DType::f16);
        weight_bytes = w.nbytes();
      }
      for (const int n : a.rows) {
        std::vector<float> xs(std::size_t(n) * k);
        std::normal_distribution<float> nd;
        for (auto& v : xs) v = nd(g);
        const Tensor x = Tensor::from_vector(xs, Shape{n, k});
        const Tensor xb = x.to(w.defined() && !type ? w.dtype() : DType::bf16);
        std::function<void()> call;
        if (name.ends_with("x32")) {
          call = [xf = xb.to(DType::f32), w, n, k, m] {
            std::vector<float> out(std::size_t(n) * m);
            backend::cpu::gemv_rows(xf.data_ptr<float>(), n, k, w.data_ptr(), w.dtype(), std::size_t(k) * w.element_size(), m,
                                    nullptr, out.data(), /*x_exact=*/false);
          };
        } else if (type) call = [x, w, w_repacked, t = *type, k, m] { (void)quant::ggml_linear(x, w, t, k, m, {}, w_repacked); };
        else if (*nf4) call = [x, nf4] { (void)quant::gemv_4bit(x, (*nf4)->packed, (*nf4)->state); };
        else if (*int8) call = [x, int8] { (void)quant::matmul_8bit(x, **int8); };
        else call = [xb, w] { (void)ops::linear(xb, w); };
        rows.push_back({name, m, n, k, weight_bytes, std::move(call), {}, {}});
      }
    }
  }
  // Rounds alternate: all of accel's rows, then llama.cpp's program over the same shapes. On a
  // shared machine the memory system's share moves within a minute; medians over interleaved
  // rounds keep both sides under the same conditions.
  const auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int round = 0; round < a.rounds; ++round) {
    for (auto& r : rows) r.ours.push_back(median_us(a.reps, a.cold, r.call));
    if (a.test_backend_ops.empty()) continue;
    const auto theirs = run_test_backend_ops(a.test_backend_ops);
    for (auto& r : rows) {
      std::string t = r.type.ends_with("0r") ? r.type.substr(0, r.type.size() - 1) : r.type;  // the same product, from llama.cpp's layout
      std::transform(t.begin(), t.end(), t.begin(), ::tolower);
      if (const auto it = theirs.find({t, r.m, r.n, r.k}); it != theirs.end()) r.theirs.push_back(it->second);
    }
  }
  for (auto& r : rows) {
    r.us = median(r.ours);
    r.gbps = double(r.weight_bytes) / (r.us * 1e3);
    r.theirs_us = median(r.theirs);
  }
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : rows) {
      j.push_back({{"type", r.type}, {"m", r.m}, {"n", r.n}, {"k", r.k}, {"us", r.us}, {"weights_gb_per_s", r.gbps},
                   {"llamacpp_us", r.theirs_us ? nlohmann::json(r.theirs_us) : nlohmann::json()}});
    }
    json_mode.print({{"threads", accel::num_threads()}, {"cpu_tier", tier}, {"cold", a.cold}, {"rows", j}});
    return 0;
  }
  std::printf("quantized linear, %d threads, CPU tier %s, median of %d calls%s, median of %d interleaved rounds (weights GB/s = packed bytes / time)\n",
              accel::num_threads(), tier.c_str(), a.reps, a.cold ? " from DRAM (caches evicted before each)" : "", a.rounds);
  std::printf("%-6s %5s %3s %6s %12s %10s %16s %8s\n", "type", "m", "n", "k", "accel us", "GB/s", "llama.cpp us", "ratio");
  for (const auto& r : rows) {
    std::printf("%-6s %5d %3d %6d %12.1f %10.2f", r.type.c_str(), r.m, r.n, r.k, r.us, r.gbps);
    if (r.theirs_us > 0) std::printf(" %16.1f %7.2fx\n", r.theirs_us, r.theirs_us / r.us);
    else std::printf(" %16s %8s\n", "-", "-");
  }
  if (a.test_backend_ops.empty()) std::printf("(give --test-backend-ops PATH for llama.cpp's rows in the same run)\n");
  return 0;
}
