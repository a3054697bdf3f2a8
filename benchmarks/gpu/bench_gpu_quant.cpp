// Quantized products on a GPU (quant/kernels/cuda/kernels.cuh) next to cuBLAS on the bf16 weight and the
// GPU's own copy bandwidth, in one run.
//
//   bench_gpu_quant [--m 4096] [--k 4096,14336] [--n 1,16] [--iters 100] [--reps 5]
//
// Rows, for y = x W^T with W [m, k] and x [n, k] bf16 (medians of --reps runs of --iters calls,
// each call timed back to back on one stream, launches included):
//   bf16 cuBLAS      ops::linear on the bf16 weight: what the packed formats must beat
//   Q8_0 ... Q6_K    quant::ggml_linear on ggml blocks (random bytes: timing does not depend on values)
//   NF4, int8        bitsandbytes' Linear4bit / Linear8bitLt forwards
//   int4 g128, fp8   TorchAO int4_weight_only (groups of 128) and Quanto float8 (AffineLinear)
// Weight GB/s is the bytes each call reads of its weight over its time; "of copy" relates that to
// a device-to-device cudaMemcpy of 1 GiB (read + write counted), the bandwidth a GEMV can reach.
// n = 1 takes the fused kernels; n = 16 decodes the weight to bf16 and runs cuBLAS.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "accel/backend/cuda/runtime.hpp"
#include "accel/core/device_backend.hpp"
#include "accel/ops/ops.hpp"
#include "accel/quant/layers/affine_linear.hpp"
#include "accel/quant/layers/bnb_linear.hpp"
#include "accel/quant/layers/ggml_linear.hpp"

namespace {

using accel::Device;
using accel::DType;
using accel::Shape;
using accel::Tensor;
using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<std::int64_t> parse_list(const std::string& s) {
  std::vector<std::int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

Tensor random_bytes(const Shape& shape, DType dtype, unsigned seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* p = static_cast<std::uint32_t*>(t.data_ptr());
  for (std::size_t i = 0; i < t.nbytes() / 4; ++i) p[i] = rng();
  return t;
}

Tensor uniform(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape);
}

/// Seconds per call of f: the median over `reps` runs of `iters` calls, after a warm-up.
double time_per_call(const std::function<Tensor()>& f, int iters, int reps) {
  for (int i = 0; i < 3; ++i) f();
  accel::cuda::synchronize(0);
  std::vector<double> runs;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < iters; ++i) f();
    accel::cuda::synchronize(0);
    runs.push_back(std::chrono::duration<double>(clock_type::now() - t0).count() / iters);
  }
  return median(runs);
}

double copy_bandwidth(int reps) {
  const std::size_t bytes = std::size_t{1} << 30;
  Tensor a = Tensor::zeros(Shape{static_cast<std::int64_t>(bytes)}, DType::u8, Device::cuda(0));
  Tensor b = Tensor::empty(Shape{static_cast<std::int64_t>(bytes)}, DType::u8, Device::cuda(0));
  std::vector<double> runs;
  for (int r = 0; r < reps + 1; ++r) {
    accel::cuda::synchronize(0);
    const auto t0 = clock_type::now();
    cudaMemcpy(b.data_ptr(), a.data_ptr(), bytes, cudaMemcpyDeviceToDevice);
    accel::cuda::synchronize(0);
    if (r) runs.push_back(2.0 * static_cast<double>(bytes) / std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return median(runs);
}

}  // namespace

int main(int argc, char** argv) try {
  std::int64_t m = 4096;
  std::vector<std::int64_t> ks{4096, 14336}, ns{1, 16};
  int iters = 100, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--m") m = std::stoll(v);
    else if (a == "--k") ks = parse_list(v);
    else if (a == "--n") ns = parse_list(v);
    else if (a == "--iters") iters = std::stoi(v);
    else if (a == "--reps") reps = std::stoi(v);
    else throw std::invalid_argument("unknown option " + a);
  }
  if (accel::cuda_device_count() == 0) {
    std::printf("bench_gpu_quant: no CUDA GPU visible; nothing to measure\n");
    return 0;
  }
  const Device gpu = Device::cuda(0);
  const auto props = accel::cuda::device_properties(0);
  const double copy = copy_bandwidth(reps);
  std::printf("GPU: %s; device-to-device copy %.0f GB/s (read + write)\n", props.name.c_str(), copy / 1e9);
  std::printf("%-6s %-6s %-3s %-12s %10s %10s %10s %8s %9s\n", "m", "k", "n", "weight", "MB", "us/call", "GB/s", "of copy",
              "vs bf16");
  using accel::io::GgmlType;
  for (const std::int64_t k : ks) {
    const Tensor wf = uniform(Shape{m, k}, 7);
    const Tensor w_bf16 = wf.to(gpu, DType::bf16);
    accel::quant::Linear4bit nf4(k, m, false, {.compute_dtype = DType::bf16, .quant_type = accel::quant::BnbQuantType::nf4});
    nf4.quantize(wf);
    nf4.to(gpu);
    accel::quant::Linear8bitLt int8(k, m, false);
    int8.quantize(wf);
    int8.to(gpu);
    using accel::quant::AffineScheme;
    accel::quant::AffineLinear int4(k, m, AffineScheme::torchao_int4_weight_only, 128);
    int4.set_quantized_weight(accel::quant::quantize_affine(AffineScheme::torchao_int4_weight_only, wf, 128), gpu);
    accel::quant::AffineLinear fp8(k, m, AffineScheme::quanto_float8);
    fp8.set_quantized_weight(accel::quant::quantize_affine(AffineScheme::quanto_float8, wf), gpu);
    struct Row {
      std::string name;
      double bytes;
      std::function<Tensor(const Tensor&)> run;
    };
    std::vector<Row> rows;
    rows.push_back({"bf16 cuBLAS", static_cast<double>(w_bf16.nbytes()),
                    [&](const Tensor& x) { return accel::ops::linear(x, w_bf16); }});
    std::vector<Tensor> keep;
    for (const GgmlType t : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_k, GgmlType::q6_k}) {
      keep.push_back(random_bytes(accel::quant::gguf_linear_weight_shape(t, k, m), DType::u8, 3).to(gpu));
      const Tensor& p = keep.back();
      rows.push_back({std::string(accel::io::ggml_type_name(t)), static_cast<double>(p.nbytes()),
                      [&, t, p](const Tensor& x) { return accel::quant::ggml_linear(x, p, t, k, m); }});
    }
    rows.push_back({"NF4", static_cast<double>(nf4.weight().nbytes()), [&](const Tensor& x) { return nf4.forward(x); }});
    rows.push_back({"int8", static_cast<double>(int8.weight().nbytes()), [&](const Tensor& x) { return int8.forward(x); }});
    rows.push_back({"int4 g128", static_cast<double>(int4.quantized_weight().codes.nbytes()),
                    [&](const Tensor& x) { return int4.forward(x); }});
    rows.push_back({"fp8", static_cast<double>(fp8.quantized_weight().codes.nbytes()),
                    [&](const Tensor& x) { return fp8.forward(x); }});
    for (const std::int64_t n : ns) {
      const Tensor x = uniform(Shape{n, k}, 11).to(gpu, DType::bf16);
      double base = 0;
      for (const Row& r : rows) {
        const double s = time_per_call([&] { return r.run(x); }, iters, reps);
        if (base == 0) base = s;
        std::printf("%-6lld %-6lld %-3lld %-12s %10.1f %10.1f %10.0f %7.0f%% %8.2fx\n", static_cast<long long>(m),
                    static_cast<long long>(k), static_cast<long long>(n), r.name.c_str(), r.bytes / 1e6, s * 1e6,
                    r.bytes / s / 1e9, 100.0 * r.bytes / s / copy, base / s);
      }
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_quant: %s\n", e.what());
  return 1;
}
