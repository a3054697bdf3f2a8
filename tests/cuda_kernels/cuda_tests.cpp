// Tests of the CUDA backend: runtime, allocator, copies, streams, conversion kernels and every
// CUDA op against the CPU ops (accel::ops with cpu tensors). GPU cases skip with a WARN where no
// GPU is visible; the conversion, indexing and registration cases run everywhere. The kernels are
// compiled by nvcc in test_cuda.cu (see cuda_side.hpp for why these cases are g++ code).
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "accel/backend/cuda/runtime.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dispatch/big_modeling.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/models/generate.hpp"
#include "accel/nn/init.hpp"
#include "accel/ops/ops.hpp"
#include "accel/quant/quantizers/bnb.hpp"
#include "accel/quant/quantizers/gguf.hpp"
#include "accel/quant/quantizers/quanto.hpp"
#include "accel/quant/quantizers/torchao.hpp"
#include "cuda_side.hpp"

using accel::Device;
using accel::DType;
using accel::Shape;
using accel::Tensor;
namespace cuda = accel::cuda;
namespace api = accel::ops;  // dispatches on the tensors' device: CPU reference or CUDA kernels
namespace side = accel_test::cuda_side;

namespace {

#define ACCEL_REQUIRE_GPU()                                \
  do {                                                     \
    if (accel::cuda_device_count() == 0) {                 \
      WARN("SKIPPED: no CUDA GPU on this machine");        \
      return;                                              \
    }                                                      \
  } while (0)

const Device gpu = Device::cuda(0);

constexpr DType all_dtypes[] = {DType::f64, DType::f32,  DType::f16, DType::bf16, DType::f8_e4m3fn, DType::f8_e5m2,
                                DType::i64, DType::i32,  DType::i16, DType::i8,   DType::u8,        DType::boolean};
constexpr DType float_dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8_e4m3fn, DType::f8_e5m2};

/// A cpu tensor of `shape` whose bytes are random (bools restricted to 0 / 1).
Tensor random_bytes(const Shape& shape, DType dtype, unsigned seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng() & 0xffu);
  if (dtype == DType::boolean) {
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1u;
  }
  return t;
}

/// A cpu tensor of uniform values in [lo, hi], stored as `dtype`.
Tensor uniform(const Shape& shape, DType dtype, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape).to(dtype);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()).contiguous(), hb = b.to(Device::cpu()).contiguous();
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

/// Largest |a - b| over all elements (as f64); NaN in exactly one of them counts as infinite.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0.0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (std::isnan(va[i]) != std::isnan(vb[i])) return INFINITY;
      continue;
    }
    m = std::max(m, std::abs(va[i] - vb[i]));
  }
  return m;
}

double tolerance(DType d) { return d == DType::f32 ? 2e-4 : d == DType::f16 ? 1e-2 : 6e-2; }

/// Compares a CUDA op's result with the CPU op's: same shape and dtype, values within `tol`.
void require_close(const Tensor& gpu_result, const Tensor& cpu_result, double tol) {
  REQUIRE(gpu_result.is_cuda());
  REQUIRE(gpu_result.dtype() == cpu_result.dtype());
  REQUIRE(gpu_result.shape() == cpu_result.shape());
  CHECK(max_abs_diff(gpu_result, cpu_result) <= tol);
}

/// Bitwise comparison of the device and host conversions of `src` (cpu) into `to`.
void require_conversion_matches(const Tensor& src, DType to) {
  const Tensor on_gpu = src.to(gpu).to(to).to(Device::cpu());
  Tensor expected = Tensor::empty(src.shape(), to);
  accel::convert_elements(src.dtype(), src.data_ptr(), to, expected.data_ptr(), static_cast<std::size_t>(src.numel()));
  const auto n = static_cast<std::size_t>(src.numel());
  const std::size_t isz = accel::itemsize(to);
  const auto* a = static_cast<const unsigned char*>(on_gpu.data_ptr());
  const auto* b = static_cast<const unsigned char*>(expected.data_ptr());
  std::size_t mismatches = 0, nan_payload_only = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i * isz, b + i * isz, isz) == 0) continue;
    const double x = on_gpu.flatten().at<double>({static_cast<std::int64_t>(i)});
    const double y = expected.flatten().at<double>({static_cast<std::int64_t>(i)});
    if (std::isnan(x) && std::isnan(y)) {
      ++nan_payload_only;
    } else {
      ++mismatches;
    }
  }
  INFO("conversion " << src.dtype() << " -> " << to << " over " << n << " values");
  if (nan_payload_only) WARN(nan_payload_only << " NaNs differ only in payload bits");
  CHECK(mismatches == 0);
}

}  // namespace

// ---- everywhere -----------------------------------------------------------------------------

TEST_CASE("cuda: backend, kernels and ops register at start-up", "[cuda]") {
  REQUIRE(accel::cuda_backend().has_runtime());
  CHECK(side::kernels_and_ops_registered());
  CHECK(cuda::device_count() == accel::cuda_device_count());
  if (cuda::device_count() == 0) {
    CHECK_FALSE(accel::cuda_is_available());
    CHECK_THROWS_AS(Tensor::empty(Shape{4}, DType::f32, gpu), accel::DeviceError);
    CHECK_THROWS_AS(cuda::device_properties(0), accel::DeviceError);
    CHECK_THROWS_AS(cuda::mem_get_info(0), accel::DeviceError);
    CHECK_THROWS_AS(cuda::Stream(0), accel::DeviceError);
    // Pinned storage falls back to ordinary host memory.
    CHECK(accel::Storage::allocate_pinned(64).nbytes() == 64);
  }
}

TEST_CASE("cuda: the conversion kernels round as the host's bulk conversion on every pattern", "[cuda]") {
  const std::string report = side::conversion_disagreements();
  INFO(report);
  CHECK(report.empty());
}

TEST_CASE("cuda: kernel indexing helpers address the right elements", "[cuda]") {
  const std::string report = side::indexing_disagreements();
  INFO(report);
  CHECK(report.empty());
}

// ---- with a GPU -----------------------------------------------------------------------------

TEST_CASE("cuda: device queries", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  const auto props = cuda::device_properties(0);
  CHECK_FALSE(props.name.empty());
  CHECK(props.total_memory > 0);
  CHECK(props.multiprocessor_count > 0);
  CHECK(props.major >= 7);
  const auto mem = cuda::mem_get_info(0);
  CHECK(mem.total_bytes > 0);
  CHECK(mem.free_bytes <= mem.total_bytes);
  CHECK_THROWS_AS(cuda::device_properties(cuda::device_count()), accel::DeviceError);
  cuda::synchronize(0);
}

TEST_CASE("cuda: allocator counters are exact and budgets throw OutOfMemoryError", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  const auto before = accel::memory_stats(gpu);
  accel::reset_peak_memory_stats(gpu);
  {
    Tensor a = Tensor::empty(Shape{1000}, DType::f32, gpu);
    Tensor b = Tensor::empty(Shape{3, 7}, DType::f16, gpu);
    const auto during = accel::memory_stats(gpu);
    CHECK(during.allocated_bytes == before.allocated_bytes + 4000 + 42);
    CHECK(during.peak_allocated_bytes == before.allocated_bytes + 4042);
    CHECK(during.num_allocs == before.num_allocs + 2);
  }
  const auto after = accel::memory_stats(gpu);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.peak_allocated_bytes == before.allocated_bytes + 4042);
  CHECK(after.num_frees == before.num_frees + 2);
  {
    accel::ScopedMemoryLimit limit(gpu, before.allocated_bytes + 4096);
    Tensor ok = Tensor::empty(Shape{1024}, DType::f32, gpu);
    try {
      (void)Tensor::empty(Shape{1}, DType::f32, gpu);
      FAIL("expected OutOfMemoryError");
    } catch (const accel::OutOfMemoryError& e) {
      CHECK(e.device() == "cuda:0");
      CHECK(e.requested_bytes() == 4);
    }
  }
  // More than any GPU has: cudaMalloc itself fails, and the counter is given back.
  CHECK_THROWS_AS(Tensor::empty(Shape{std::int64_t{1} << 50}, DType::u8, gpu), accel::OutOfMemoryError);
  CHECK(accel::memory_stats(gpu).allocated_bytes == before.allocated_bytes);
}

TEST_CASE("cuda: H2D, D2H and D2D copies are bit-exact for every dtype", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  unsigned seed = 1;
  for (DType d : all_dtypes) {
    INFO("dtype " << d);
    const Tensor host = random_bytes(Shape{3, 1001}, d, seed++);
    const Tensor dev = host.to(gpu);
    REQUIRE(dev.is_cuda());
    CHECK(same_bytes(dev, host));
    const Tensor dev2 = dev.clone();  // D2D
    CHECK(dev2.data_ptr() != dev.data_ptr());
    CHECK(same_bytes(dev2, host));
    // A strided device view copies through the strided-copy kernel and through the core.
    CHECK(same_bytes(side::contiguous_on_device(dev.t()), host.t().contiguous()));
    CHECK(same_bytes(dev.t().contiguous(), host.t().contiguous()));
    if (cuda::device_count() > 1) CHECK(same_bytes(dev.to(Device::cuda(1)), host));
  }
}

TEST_CASE("cuda: large uploads from pageable memory go through the staging blocks bit-exactly", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  // Below, at and above the staging threshold; an odd size ends in a partial block.
  const std::size_t sizes[] = {cuda::staged_upload_min_bytes - 1, cuda::staged_upload_min_bytes,
                               2 * cuda::staged_upload_block_bytes + 4093};
  unsigned seed = 11;
  for (std::size_t n : sizes) {
    INFO("bytes " << n);
    const Tensor host = random_bytes(Shape{static_cast<std::int64_t>(n)}, DType::u8, seed++);
    CHECK(cuda::is_pageable_host(host.data_ptr()));
    CHECK(same_bytes(host.to(gpu), host));
    // non_blocking: the source is already in the staging blocks when to() returns.
    const Tensor dev = host.to(gpu, std::nullopt, /*non_blocking=*/true);
    cuda::synchronize(0);
    CHECK(same_bytes(dev, host));
  }
  // Uploads from several threads share the device's blocks without mixing their bytes.
  std::vector<Tensor> hosts, devs(4);
  for (unsigned i = 0; i < 4; ++i) hosts.push_back(random_bytes(Shape{int64_t{40} << 20}, DType::u8, 100 + i));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < 4; ++i) threads.emplace_back([&, i] { devs[i] = hosts[i].to(gpu); });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < 4; ++i) CHECK(same_bytes(devs[i], hosts[i]));
  // Pinned memory is not staged: the DMA engine reads it directly.
  void* pinned = nullptr;
  REQUIRE(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault) == cudaSuccess);
  CHECK_FALSE(cuda::is_pageable_host(pinned));
  cudaFreeHost(pinned);
}

TEST_CASE("cuda: fill_ on device, every dtype", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  for (DType d : all_dtypes) {
    INFO("dtype " << d);
    for (double v : {0.0, 1.0, -2.5}) {
      Tensor t = Tensor::full(Shape{517}, v, d, gpu);
      CHECK(same_bytes(t, Tensor::full(Shape{517}, v, d)));
    }
  }
}

TEST_CASE("cuda: non-blocking copies on streams, ordered with events", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  const Tensor src = uniform(Shape{1 << 20}, DType::f32, 3);
  Tensor pinned = Tensor::from_storage(accel::Storage::allocate_pinned(src.nbytes()), DType::f32, src.shape());
  pinned.copy_(src);
  Tensor back = Tensor::from_storage(accel::Storage::allocate_pinned(src.nbytes()), DType::f32, src.shape());
  cuda::Stream stream(0, /*non_blocking=*/true);
  cuda::Event start(true), stop(true);
  {
    cuda::StreamGuard guard(stream);
    CHECK(cuda::current_stream(0) == stream.handle());
    start.record(0);
    Tensor dev = pinned.to(gpu, std::nullopt, /*non_blocking=*/true);
    Tensor doubled = api::add(dev, dev);
    back.copy_(doubled, /*non_blocking=*/true);
    stop.record(stream);
    stop.synchronize();
    CHECK(stop.query());
    CHECK(stream.query());
    CHECK(start.elapsed_ms(stop) >= 0.0f);
  }
  CHECK(cuda::current_stream(0) == nullptr);
  const float* b = back.data_ptr<float>();
  const float* s = src.data_ptr<float>();
  bool all = true;
  for (std::int64_t i = 0; i < src.numel(); ++i) all = all && b[i] == s[i] + s[i];
  CHECK(all);
  const auto range = cuda::Stream::priority_range(0);
  cuda::Stream high(0, true, range.second);
  high.synchronize();
}

TEST_CASE("cuda: freed device memory is cached, reused in stream order, and given back on request", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  cuda::empty_cache(0);
  CHECK(cuda::runtime().cached_bytes(0) == 0);
  const std::size_t live = accel::memory_stats(gpu).allocated_bytes;
  const void* first = nullptr;
  {
    Tensor a = Tensor::full(Shape{3 << 20}, 1.0, DType::f32, gpu);  // 12 MiB
    first = a.data_ptr();
  }
  CHECK(cuda::runtime().cached_bytes(0) == 12u << 20);
  {
    // The same size again: the cached block, written only after the fill above is done.
    Tensor b = Tensor::full(Shape{3 << 20}, 2.0, DType::f32, gpu);
    CHECK(b.data_ptr() == first);
    CHECK(cuda::runtime().cached_bytes(0) == 0);
    CHECK(b.to(Device::cpu()).to_vector<float>()[12345] == 2.0f);
    // A much smaller request does not take a large block (no more than half wasted).
    Tensor small = Tensor::empty(Shape{1000}, DType::f32, gpu);
    CHECK(small.data_ptr() != first);
  }
  // Freed on one stream, reused on another: the second stream waits for the first's work.
  {
    cuda::Stream s1(0), s2(0);
    void* p = nullptr;
    {
      cuda::StreamGuard g(s1);
      Tensor a = Tensor::full(Shape{1 << 20}, 3.0, DType::f32, gpu);
      p = a.data_ptr();
    }
    cuda::StreamGuard g(s2);
    Tensor b = Tensor::full(Shape{1 << 20}, 4.0, DType::f32, gpu);
    CHECK(b.data_ptr() == p);
    CHECK(b.to(Device::cpu()).to_vector<float>().back() == 4.0f);
  }
  CHECK(cuda::runtime().cached_bytes(0) > 0);
  cuda::empty_cache(0);
  CHECK(cuda::runtime().cached_bytes(0) == 0);
  // Counters count live storages only: the cached blocks never showed in them.
  CHECK(accel::memory_stats(gpu).allocated_bytes == live);
}

TEST_CASE("cuda: pinned allocation is page-locked and counted", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  const auto before = accel::pinned_memory_stats();
  {
    accel::Storage s = accel::Storage::allocate_pinned(1 << 16);
    CHECK(s.kind() == accel::MemoryKind::pinned);
    cudaPointerAttributes attr{};
    REQUIRE(cudaPointerGetAttributes(&attr, s.data()) == cudaSuccess);
    CHECK(attr.type == cudaMemoryTypeHost);
    CHECK(accel::pinned_memory_stats().allocated_bytes == before.allocated_bytes + (1 << 16));
  }
  CHECK(accel::pinned_memory_stats().allocated_bytes == before.allocated_bytes);
}

TEST_CASE("cuda: conversions on device are bit-exact with the host's", "[cuda]") {
  ACCEL_REQUIRE_GPU();
  Tensor all16 = Tensor::empty(Shape{65536}, DType::i32);
  for (std::int32_t i = 0; i < 65536; ++i) all16.data_ptr<std::int32_t>()[i] = i;
  std::vector<std::uint16_t> p16(65536);
  for (std::size_t i = 0; i < p16.size(); ++i) p16[i] = static_cast<std::uint16_t>(i);
  std::vector<std::uint8_t> p8(256);
  for (std::size_t i = 0; i < p8.size(); ++i) p8[i] = static_cast<std::uint8_t>(i);
  const Tensor f16 = Tensor::from_vector(std::vector<std::int16_t>(p16.begin(), p16.end())).view_as(DType::f16);
  const Tensor bf16 = Tensor::from_vector(std::vector<std::int16_t>(p16.begin(), p16.end())).view_as(DType::bf16);
  const Tensor e4 = Tensor::from_vector(p8).view_as(DType::f8_e4m3fn);
  const Tensor e5 = Tensor::from_vector(p8).view_as(DType::f8_e5m2);
  const Tensor f32 = random_bytes(Shape{1 << 18}, DType::f32, 5);
  const Tensor f32_moderate = uniform(Shape{1 << 16}, DType::f32, 6, -70000.0f, 70000.0f);
  const Tensor f64 = uniform(Shape{1 << 16}, DType::f32, 8, -500.0f, 500.0f).to(DType::f64);
  const Tensor f64_bits = random_bytes(Shape{1 << 16}, DType::f64, 9);
  for (const Tensor* src : {&f16, &bf16, &e4, &e5, &f32, &f32_moderate, &f64, &f64_bits}) {
    for (DType to : float_dtypes) {
      if (to != src->dtype()) require_conversion_matches(*src, to);
    }
  }
  // Integer dtypes have no kernel and go through the host: still exact.
  CHECK(same_bytes(all16.to(gpu).to(DType::f32), all16.to(DType::f32)));
}

// ---- ops against the CPU ops ------------------------------------------------------------------

TEST_CASE("cuda ops: matmul and linear through cuBLAS", "[cuda][ops]") {
  ACCEL_REQUIRE_GPU();
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    INFO("dtype " << d);
    const double tol = tolerance(d) * 8;  // sums of 64 products
    const Tensor a = uniform(Shape{2, 3, 17, 64}, d, 1), b = uniform(Shape{2, 3, 64, 9}, d, 2);
    require_close(api::matmul(a.to(gpu), b.to(gpu)), api::matmul(a, b), tol);
    const Tensor b1 = uniform(Shape{1, 64, 9}, d, 3);  // broadcast batch
    require_close(api::matmul(a.to(gpu), b1.to(gpu)), api::matmul(a, b1), tol);
    const Tensor b2 = uniform(Shape{64, 9}, d, 4);  // shared 2-d
    require_close(api::matmul(a.to(gpu), b2.to(gpu)), api::matmul(a, b2), tol);
    const Tensor bt = uniform(Shape{3, 9, 64}, d, 5);  // used as a transposed (strided) operand
    require_close(api::matmul(a.to(gpu), bt.to(gpu).transpose(-1, -2)), api::matmul(a, bt.transpose(-1, -2)), tol);
    // Direct calls reach the same kernels without the front end.
    require_close(side::direct_matmul(a.to(gpu), b.to(gpu)), api::matmul(a, b), tol);
    const Tensor x = uniform(Shape{2, 5, 64}, d, 6), w = uniform(Shape{33, 64}, d, 7), bias = uniform(Shape{33}, d, 8);
    require_close(api::linear(x.to(gpu), w.to(gpu), bias.to(gpu)), api::linear(x, w, bias), tol);
    require_close(api::linear(x.to(gpu), w.to(gpu), Tensor{}), api::linear(x, w, Tensor{}), tol);
    // A weight stored as [in, out] and viewed transposed is read in place.
    const Tensor wt_store = uniform(Shape{64, 33}, d, 9);
    require_close(api::linear(x.to(gpu), wt_store.to(gpu).t(), bias.to(gpu)),
                  api::linear(x, wt_store.t(), bias), tol);
  }
  const Tensor a = uniform(Shape{4, 0}, DType::f32, 1), b = uniform(Shape{0, 3}, DType::f32, 2);
  CHECK(max_abs_diff(api::matmul(a.to(gpu), b.to(gpu)), Tensor::zeros(Shape{4, 3})) == 0.0);
  CHECK_THROWS_AS(api::matmul(uniform(Shape{2, 3}, DType::f32, 1).to(gpu), uniform(Shape{4, 2}, DType::f32, 1).to(gpu)),
                  accel::ShapeError);
  CHECK_THROWS_AS(api::matmul(uniform(Shape{2, 3}, DType::f32, 1).to(gpu), uniform(Shape{3, 2}, DType::f16, 1).to(gpu)),
                  accel::DTypeError);
}

TEST_CASE("cuda ops: add and mul broadcast and promote", "[cuda][ops]") {
  ACCEL_REQUIRE_GPU();
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    INFO("dtype " << d);
    const Tensor a = uniform(Shape{4, 1, 33}, d, 1), b = uniform(Shape{5, 33}, d, 2), s = uniform(Shape{1}, d, 3);
    require_close(api::add(a.to(gpu), b.to(gpu)), api::add(a, b), tolerance(d));
    require_close(api::mul(a.to(gpu), b.to(gpu)), api::mul(a, b), tolerance(d));
    require_close(api::mul(a.to(gpu), s.to(gpu)), api::mul(a, s), tolerance(d));
    const Tensor at = uniform(Shape{33, 5}, d, 4);  // used transposed: a strided operand
    require_close(api::add(at.to(gpu).t(), b.to(gpu)), api::add(at.t(), b), tolerance(d));
  }
  const Tensor h = uniform(Shape{7}, DType::f16, 1), f = uniform(Shape{7}, DType::bf16, 2);
  require_close(api::add(h.to(gpu), f.to(gpu)), api::add(h, f), 1e-6);
  CHECK_THROWS_AS(api::add(uniform(Shape{3}, DType::f32, 1).to(gpu), uniform(Shape{4}, DType::f32, 1).to(gpu)),
                  accel::ShapeError);
}

TEST_CASE("cuda ops: activations and normalizations", "[cuda][ops]") {
  ACCEL_REQUIRE_GPU();
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    INFO("dtype " << d);
    const double tol = tolerance(d);
    const Tensor x = uniform(Shape{3, 5, 300}, d, 1, -4.0f, 4.0f);
    const Tensor xg = x.to(gpu);
    require_close(api::gelu(xg, api::GeluApproximate::none), api::gelu(x, api::GeluApproximate::none), tol);
    require_close(api::gelu(xg, api::GeluApproximate::tanh), api::gelu(x, api::GeluApproximate::tanh), tol);
    require_close(api::silu(xg), api::silu(x), tol);
    require_close(api::silu(xg.transpose(0, 2)), api::silu(x.transpose(0, 2)), tol);
    for (std::int64_t dim : {-1, 0, 1}) {
      require_close(api::softmax(xg, dim), api::softmax(x, dim), tol / 4);
    }
    const Tensor w = uniform(Shape{300}, d, 2), b = uniform(Shape{300}, d, 3);
    require_close(api::layer_norm(xg, w.to(gpu), b.to(gpu), 1e-5), api::layer_norm(x, w, b, 1e-5), tol * 4);
    require_close(api::layer_norm(xg, Tensor{}, Tensor{}, 1e-5), api::layer_norm(x, Tensor{}, Tensor{}, 1e-5),
                  tol * 4);
    require_close(api::rms_norm(xg, w.to(gpu), 1e-6), api::rms_norm(x, w, 1e-6), tol * 4);
    require_close(api::rms_norm(xg, Tensor{}, 1e-6), api::rms_norm(x, Tensor{}, 1e-6), tol * 4);
  }
}

TEST_CASE("cuda ops: embedding, rotary embedding, argmax and cat", "[cuda][ops]") {
  ACCEL_REQUIRE_GPU();
  const Tensor weight = uniform(Shape{50, 24}, DType::bf16, 1);
  for (DType id_dtype : {DType::i64, DType::i32}) {
    const Tensor ids = Tensor::from_vector<std::int64_t>({3, 0, 49, 7, 7, 12}, Shape{2, 3}).to(id_dtype);
    const Tensor got = api::embedding(ids.to(gpu), weight.to(gpu));
    CHECK(same_bytes(got, api::embedding(ids, weight)));
  }
  const Tensor bad = Tensor::from_vector<std::int64_t>({1, 50});
  CHECK_THROWS_AS(api::embedding(bad.to(gpu), weight.to(gpu)), accel::ValueError);

  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    INFO("dtype " << d);
    const Tensor x = uniform(Shape{2, 3, 5, 16}, d, 2, -2.0f, 2.0f);
    const Tensor pos1 = Tensor::from_vector<std::int64_t>({0, 1, 2, 100, 4000});
    const Tensor pos2 = Tensor::from_vector<std::int32_t>({5, 6, 7, 8, 9, 0, 1, 2, 3, 4}, Shape{2, 5});
    for (auto layout : {api::RopeLayout::half_split, api::RopeLayout::interleaved}) {
      for (std::int64_t rd : {std::int64_t{-1}, std::int64_t{8}}) {
        require_close(api::rotary_embedding(x.to(gpu), pos1.to(gpu), 10000.0, layout, rd),
                      api::rotary_embedding(x, pos1, 10000.0, layout, rd), tolerance(d) * 2);
        require_close(api::rotary_embedding(x.to(gpu), pos2.to(gpu), 500000.0, layout, rd),
                      api::rotary_embedding(x, pos2, 500000.0, layout, rd), tolerance(d) * 2);
      }
    }
    // Explicit frequencies and YaRN's cos / sin scaling (the rope_scaling variants), partial rotary.
    const std::vector<double> inv_freq{1.0, 0.31, 0.05, 0.0007};
    require_close(api::rotary_embedding(x.to(gpu), pos1.to(gpu), inv_freq, 1.1386),
                  api::rotary_embedding(x, pos1, inv_freq, 1.1386), tolerance(d) * 2);
  }

  for (DType d : all_dtypes) {
    INFO("dtype " << d);
    const Tensor x = random_bytes(Shape{6, 7, 300}, d, 9);
    for (std::int64_t dim : {-1, 0, 1}) {
      CHECK(same_bytes(api::argmax(x.to(gpu), dim), api::argmax(x, dim)));
    }
  }
  const Tensor ties = Tensor::from_vector<float>({1.0f, 3.0f, 3.0f, NAN, 2.0f, NAN});
  CHECK(api::argmax(ties.to(gpu), 0).item<std::int64_t>() == 3);

  for (DType d : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
    INFO("dtype " << d);
    const Tensor a = random_bytes(Shape{2, 3, 4}, d, 1), b = random_bytes(Shape{2, 5, 4}, d, 2);
    const Tensor e = Tensor::empty(Shape{0}, d);
    CHECK(same_bytes(api::cat({a.to(gpu), b.to(gpu)}, 1), api::cat({a, b}, 1)));
    CHECK(same_bytes(api::cat({a.to(gpu), e.to(gpu), a.to(gpu)}, -1), api::cat({a, e, a}, -1)));
    CHECK(same_bytes(api::cat({b.to(gpu).transpose(0, 2), b.to(gpu).transpose(0, 2)}, 0),
                     api::cat({b.transpose(0, 2), b.transpose(0, 2)}, 0)));
  }
}

TEST_CASE("cuda ops: scaled_dot_product_attention", "[cuda][ops]") {
  ACCEL_REQUIRE_GPU();
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    INFO("dtype " << d);
    // Grouped heads (4 query heads over 2 kv heads), S spanning several key tiles.
    for (std::int64_t T : {std::int64_t{1}, std::int64_t{7}, std::int64_t{300}}) {
      const std::int64_t S = 300;
      const Tensor q = uniform(Shape{2, 4, T, 32}, d, 1), k = uniform(Shape{2, 2, S, 32}, d, 2);
      const Tensor v = uniform(Shape{2, 2, S, 24}, d, 3);
      for (bool causal : {true, false}) {
        INFO("T " << T << " causal " << causal);
        require_close(api::scaled_dot_product_attention(q.to(gpu), k.to(gpu), v.to(gpu), causal, std::nullopt),
                      api::scaled_dot_product_attention(q, k, v, causal, std::nullopt), tolerance(d));
      }
    }
    // More queries than keys: early queries see nothing and get zero rows.
    const Tensor q = uniform(Shape{1, 2, 6, 8}, d, 4), k = uniform(Shape{1, 1, 3, 8}, d, 5);
    const Tensor v = uniform(Shape{1, 1, 3, 8}, d, 6);
    require_close(api::scaled_dot_product_attention(q.to(gpu), k.to(gpu), v.to(gpu), true, 0.5),
                  api::scaled_dot_product_attention(q, k, v, true, 0.5), tolerance(d));
    // Mistral's sliding window, across key tiles, for prefill and decode-sized queries.
    for (std::int64_t T : {std::int64_t{1}, std::int64_t{40}}) {
      const Tensor qw = uniform(Shape{1, 4, T, 16}, d, 7), kw = uniform(Shape{1, 2, 260, 16}, d, 8);
      const Tensor vw = uniform(Shape{1, 2, 260, 16}, d, 9);
      for (std::int64_t window : {std::int64_t{4}, std::int64_t{150}}) {
        INFO("T " << T << " window " << window);
        require_close(api::scaled_dot_product_attention(qw.to(gpu), kw.to(gpu), vw.to(gpu), true, std::nullopt, window),
                      api::scaled_dot_product_attention(qw, kw, vw, true, std::nullopt, window), tolerance(d));
      }
    }
  }
  CHECK_THROWS_AS(api::scaled_dot_product_attention(uniform(Shape{1, 3, 2, 8}, DType::f32, 1).to(gpu),
                                                     uniform(Shape{1, 2, 2, 8}, DType::f32, 1).to(gpu),
                                                     uniform(Shape{1, 2, 2, 8}, DType::f32, 1).to(gpu), true, std::nullopt),
                  accel::ShapeError);
}

namespace {
/// The reference model folders (tests/data/models); ACCEL_TEST_MODELS_DIR overrides the path the
/// build recorded, for runs on another machine.
std::string models_dir() {
  if (const char* env = std::getenv("ACCEL_TEST_MODELS_DIR")) return env;
  return std::string(ACCEL_SOURCE_DIR) + "/tests/data/models";
}
}  // namespace

TEST_CASE("cuda models: GPT-2 and LLaMA-family forwards and cached decoding on a GPU match the CPU", "[cuda][models]") {
  ACCEL_REQUIRE_GPU();
  for (const char* name : {"tiny_gpt2", "tiny_llama", "tiny_llama_rope_yarn", "tiny_mistral", "tiny_qwen2"}) {
    for (DType d : {DType::f32, DType::bf16}) {
      INFO(name << " " << d);
      auto cpu = accel::dispatch::load_pretrained_causal_lm(models_dir() + "/" + name, {.dtype = d, .show_progress = false});
      auto dev = accel::dispatch::load_pretrained_causal_lm(models_dir() + "/" + name, {.dtype = d, .show_progress = false});
      dev.model->module().to(gpu);
      const std::vector<std::int64_t> prompt{5, 17, 3, 40, 22, 9, 11, 30, 2, 7, 13, 8};
      const Tensor ids = Tensor::from_vector(prompt, Shape{1, 12});
      const Tensor on_gpu = dev.model->logits(ids.to(gpu), nullptr, 0);
      CHECK(on_gpu.device() == gpu);
      // bf16 logits: oneDNN and cuBLAS accumulate in different orders; 0.22 seen on an H100 (Qwen2).
      require_close(on_gpu, cpu.model->logits(ids, nullptr, 0), d == DType::f32 ? 1e-4 : 0.3);
      const accel::models::GenerationConfig greedy{.max_new_tokens = 10, .ignore_eos = true};
      const auto a = accel::models::generate(*dev.model, ids.to(gpu), greedy).new_tokens[0];
      if (d == DType::f32) CHECK(a == accel::models::generate(*cpu.model, ids, greedy).new_tokens[0]);
      // The cache lives on the layers' device.
      CHECK(dev.model->make_cache(1, 16).layer(0).key().device() == gpu);
    }
  }
}

namespace {
/// One key per block of a LLaMA model: embed and even layers on `even`, odd layers and the head on `odd`.
accel::DeviceMap llama_block_map(accel::nn::Module& root, accel::Placement even, accel::Placement odd) {
  accel::DeviceMap dm;
  for (const auto& [child, m] : root.get_submodule("model").named_children()) {
    if (child == "layers") {
      for (std::size_t i = 0; i < m->children().size(); ++i) dm.set("model.layers." + std::to_string(i), i % 2 ? odd : even);
    } else {
      dm.set("model." + child, even);
    }
  }
  dm.set("lm_head", odd);
  return dm;
}
}  // namespace

TEST_CASE("cuda dispatch: blocks on the GPU, the CPU and disk give the logits of the model on the GPU", "[cuda][dispatch]") {
  ACCEL_REQUIRE_GPU();
  const std::string dir = models_dir() + "/tiny_llama";
  const std::vector<std::int64_t> prompt{5, 17, 3, 40, 22, 9, 11, 30};
  const Tensor ids = Tensor::from_vector(prompt, Shape{1, 8});
  auto whole = accel::dispatch::load_pretrained_causal_lm(dir, {.show_progress = false});
  whole.model->module().to(gpu);
  const std::vector<float> expect = whole.model->logits(ids.to(gpu), nullptr, 0).to(Device::cpu()).to_vector<float>();
  const accel::models::GenerationConfig greedy{.max_new_tokens = 6, .ignore_eos = true};
  const auto tokens = accel::models::generate(*whole.model, ids.to(gpu), greedy).new_tokens[0];

  const auto offload_dir = std::filesystem::temp_directory_path() / ("accel_cuda_dispatch_" + std::to_string(::getpid()));
  // Each placement of the odd blocks under each policy: sync copies in the compute stream's
  // order, prefetch<N> through the device stage (copy stream, events, a ring of N + 1 blocks).
  auto run = [&]<class Offload>(accel::Placement other, Offload) {
    INFO(other.str() << " prefetch depth " << Offload::prefetch_depth);
    std::filesystem::remove_all(offload_dir);
    const auto config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    std::shared_ptr<accel::models::CausalLM> lm;
    {
      auto guard = accel::nn::init_empty_weights(false);
      lm = accel::models::causal_lm_from_hf_config(config, DType::f32);
    }
    auto& root = lm->module();
    const accel::DeviceMap dm = llama_block_map(root, accel::Placement::gpu(0), other);
    accel::load_checkpoint_in_model(root, accel::io::resolve_checkpoint_folder(dir).path.string(),
                                    {.device_map = dm, .offload_folder = offload_dir.string(), .show_progress = false});
    accel::dispatch_model<Offload>(root, dm, {.offload_dir = offload_dir.string()});
    for (const Device& d : lm->layer_devices()) CHECK(d == gpu);
    // The largest offloaded block: the ring holds N + 1 of them at most.
    std::size_t block = 0;
    for (const auto& [name, m] : root.named_modules()) {
      if (name.rfind("model.layers.", 0) == 0 && name.find('.', 13) == std::string::npos &&
          std::stoul(name.substr(13)) % 2 == 1) {
        std::size_t bytes = 0;
        for (const auto& [n, t] : m->state_dict()) bytes += t.numel() * accel::itemsize(t.dtype());
        block = std::max(block, bytes);
      }
    }
    accel::cuda::synchronize(0);
    const std::size_t resident = accel::memory_stats(gpu).allocated_bytes;
    accel::reset_peak_memory_stats(gpu);
    const Tensor out = lm->logits(ids, nullptr, 0);  // inputs on the CPU: the root's hook moves them
    CHECK(out.device() == Device::cpu());            // and brings the outputs back
    CHECK(out.to_vector<float>() == expect);
    CHECK(accel::models::generate(*lm, ids, greedy).new_tokens[0] == tokens);
    const std::size_t extra = accel::memory_stats(gpu).peak_allocated_bytes - resident;
    // Offloaded weights in flight, plus activations and the cache of an 8-token prompt (small next
    // to a block here); lm_head is offloaded too and may be the largest unit.
    const std::size_t head = root.get_submodule("lm_head").state_dict().begin()->second.numel() * 4;
    const std::size_t ring = (Offload::prefetch_depth + 1) * (std::max(block, head) + (std::size_t{1} << 16));
    CHECK(extra <= ring + (std::size_t{4} << 20));
  };
  for (const accel::Placement other : {accel::Placement::cpu(), accel::Placement::disk()}) {
    run(other, accel::policy::sync_offload{});
    run(other, accel::policy::prefetch<1>{});
    run(other, accel::policy::prefetch<2>{});
  }
  std::filesystem::remove_all(offload_dir);

  // cpu_offload to the GPU, and the three-model pipeline of cpu_offload_with_hook.
  auto a = accel::dispatch::load_pretrained_causal_lm(dir, {.show_progress = false});
  accel::cpu_offload(a.model->module(), {.execution_device = gpu});
  CHECK(a.model->logits(ids, nullptr, 0).to_vector<float>() == expect);
  std::vector<accel::dispatch::PretrainedModel> chain;
  std::shared_ptr<accel::hooks::UserCpuOffloadHook> prev;
  std::vector<std::shared_ptr<accel::hooks::UserCpuOffloadHook>> handles;
  for (int i = 0; i < 3; ++i) {
    chain.push_back(accel::dispatch::load_pretrained_causal_lm(dir, {.show_progress = false}));
    auto [m, h] = accel::cpu_offload_with_hook(chain.back().model->module(), gpu, prev);
    handles.push_back(h);
    prev = h;
  }
  for (std::size_t i = 0; i < chain.size(); ++i) {
    CHECK(chain[i].model->logits(ids.to(gpu), nullptr, 0).to(Device::cpu()).to_vector<float>() == expect);
    // The model just called is on the GPU; the one before it went back to the CPU.
    CHECK(chain[i].model->module().get_parameter("lm_head.weight").device() == gpu);
    if (i > 0) CHECK(chain[i - 1].model->module().get_parameter("lm_head.weight").device() == Device::cpu());
  }
  handles.back()->offload();
  CHECK(chain.back().model->module().get_parameter("lm_head.weight").device() == Device::cpu());
}

TEST_CASE("cuda device stage: pinned and pageable sources reach a compute stream of the caller's, N blocks ahead", "[cuda][stage]") {
  ACCEL_REQUIRE_GPU();
  accel::cuda::Stream compute(0);
  accel::cuda::StreamGuard on(compute);  // the ops (and the stage's waits) use this stream
  {
    accel::hooks::WeightStream host(2);
    accel::hooks::DeviceStage& stage = host.device_stage(gpu);
    std::vector<Tensor> sources;
    std::vector<std::size_t> ids;
    for (int u = 0; u < 6; ++u) {
      // 6 MB a piece: pageable ones take the staged path, pinned ones the direct one.
      const std::int64_t n = (std::int64_t{3} << 20) / 2 + u;
      Tensor t = Tensor::full({n}, 1.0 + u, DType::f32);
      if (u % 2) {
        Tensor p = Tensor::from_storage(accel::Storage::allocate_pinned(static_cast<std::size_t>(n) * 4), DType::f32, {n});
        p.copy_(t);
        t = p;
      }
      sources.push_back(t);
      ids.push_back(stage.add_unit("u" + std::to_string(u), std::nullopt, {{DType::f32, Shape{n}, std::nullopt, t}}));
    }
    const std::size_t before = accel::memory_stats(gpu).allocated_bytes;
    accel::reset_peak_memory_stats(gpu);
    for (int round = 0; round < 3; ++round) {
      for (std::size_t u : ids) {
        std::vector<Tensor> w = stage.acquire(u);
        // A conversion kernel on the compute stream, after the stage's wait, then back to the host.
        const std::vector<float> got = w[0].to(DType::f64).to(Device::cpu()).to(DType::f32).to_vector<float>();
        CHECK(got.size() == static_cast<std::size_t>(w[0].numel()));
        CHECK(std::all_of(got.begin(), got.end(), [&](float v) { return v == static_cast<float>(1.0 + u); }));
        w.clear();
        stage.release(u);
      }
    }
    CHECK(stage.buffers() <= 3);
    CHECK(accel::memory_stats(gpu).peak_allocated_bytes - before <=
          3 * (stage.slot_bytes() + accel::hooks::DeviceStage::alignment) + (std::size_t{64} << 20));
  }
  compute.synchronize();
}

// ---- packed weights (quant/kernels/cuda/kernels.cuh) ------------------------------------------------

namespace {

namespace q = accel::quant;
using accel::io::GgmlType;

/// Random blocks of type T whose scales are small finite values (random scale bits would make
/// NaN / Inf weights, which say nothing about the decoding).
template <GgmlType T>
Tensor random_blocks(std::int64_t rows, std::int64_t in, unsigned seed) {
  using B = accel::io::ggml_block_t<T>;
  Tensor t = random_bytes(q::gguf_linear_weight_shape(T, in, rows), DType::u8, seed);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  std::mt19937 rng(seed + 1);
  for (std::size_t off = 0; off + sizeof(B) <= t.nbytes(); off += sizeof(B)) {
    B b;
    std::memcpy(&b, p + off, sizeof(B));
    // f16 bits of 2^-9 .. 2^-7 (exponent 6..8): products stay finite and of moderate size.
    const auto small = [&] { return static_cast<std::uint16_t>(((6 + rng() % 3) << 10) | (rng() & 0x3FF)); };
    if constexpr (std::is_same_v<decltype(b.d), float>) {
      b.d = 1e-3f * static_cast<float>(1 + rng() % 16);
    } else {
      b.d = small();
    }
    if constexpr (requires { b.dmin; }) b.dmin = small();
    if constexpr (requires { b.m; }) b.m = small();
    std::memcpy(p + off, &b, sizeof(B));
  }
  return t;
}

/// Calls f(integral_constant<GgmlType, T>) for every block type with a CUDA kernel.
template <class F>
void for_each_device_ggml_type(F&& f) {
  using std::integral_constant;
  f(integral_constant<GgmlType, GgmlType::q4_0>{});
  f(integral_constant<GgmlType, GgmlType::q4_1>{});
  f(integral_constant<GgmlType, GgmlType::q5_0>{});
  f(integral_constant<GgmlType, GgmlType::q5_1>{});
  f(integral_constant<GgmlType, GgmlType::q8_0>{});
  f(integral_constant<GgmlType, GgmlType::q2_k>{});
  f(integral_constant<GgmlType, GgmlType::q3_k>{});
  f(integral_constant<GgmlType, GgmlType::q4_k>{});
  f(integral_constant<GgmlType, GgmlType::q5_k>{});
  f(integral_constant<GgmlType, GgmlType::q6_k>{});
  f(integral_constant<GgmlType, GgmlType::q8_k>{});
  f(integral_constant<GgmlType, GgmlType::iq4_nl>{});
  f(integral_constant<GgmlType, GgmlType::iq4_xs>{});
  f(integral_constant<GgmlType, GgmlType::tq1_0>{});
  f(integral_constant<GgmlType, GgmlType::tq2_0>{});
}

/// x W^T + b in float32 on the CPU, W given as float32 [out, in]: the GPU products' reference.
Tensor float_reference(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return api::linear(x.to(DType::f32), w.to(DType::f32), bias.defined() ? bias.to(DType::f32) : Tensor());
}

/// Largest |a - b| relative to the largest |b|.
double rel_max_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to(Device::cpu(), DType::f32).to_vector<float>(), vb = b.to(Device::cpu(), DType::f32).to_vector<float>();
  REQUIRE(va.size() == vb.size());
  double m = 0.0, s = 0.0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    m = std::max(m, static_cast<double>(std::abs(va[i] - vb[i])));
    s = std::max(s, static_cast<double>(std::abs(vb[i])));
  }
  return s > 0 ? m / s : m;
}

}  // namespace

TEST_CASE("cuda quant: every ggml block type decodes on the GPU to the CPU's bits", "[cuda][quant]") {
  ACCEL_REQUIRE_GPU();
  const auto& slots = accel::cuda_backend().quant;
  for_each_device_ggml_type([&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    const std::int64_t qk = static_cast<std::int64_t>(accel::io::ggml_type_info(T).block_size);
    const std::int64_t rows = 5, in = 3 * qk;
    INFO(accel::io::ggml_type_name(T));
    const Tensor packed = random_blocks<T>(rows, in, 11);
    const Tensor want = accel::io::dequantize_ggml(
        T, accel::io::ByteSpan(static_cast<const std::byte*>(packed.data_ptr()), packed.nbytes()), Shape{rows, in});
    const Tensor on_gpu = packed.to(gpu);
    for (DType d : {DType::f32, DType::bf16}) {
      Tensor got = Tensor::empty(Shape{rows, in}, d, gpu);
      REQUIRE(slots.ggml_dequantize(on_gpu, static_cast<std::uint32_t>(T), got));
      CHECK(same_bytes(got, want.to(d)));
    }
  });
  // The lattice IQ types have no GPU kernel (their grids are host tables): the slot says so.
  Tensor out = Tensor::empty(Shape{1, 256}, DType::f32, gpu);
  CHECK_FALSE(slots.ggml_dequantize(Tensor::zeros(Shape{1, 66}, DType::u8).to(gpu),
                                    static_cast<std::uint32_t>(GgmlType::iq2_xxs), out));
}

TEST_CASE("cuda quant: GGUF linear on a GPU, fused for few rows and through cuBLAS for many", "[cuda][quant]") {
  ACCEL_REQUIRE_GPU();
  for_each_device_ggml_type([&](auto type) {
    constexpr GgmlType T = decltype(type)::value;
    const std::int64_t qk = static_cast<std::int64_t>(accel::io::ggml_type_info(T).block_size);
    const std::int64_t in = 2 * qk, out = 37;
    const Tensor packed = random_blocks<T>(out, in, 21);
    const Tensor w = accel::io::dequantize_ggml(
        T, accel::io::ByteSpan(static_cast<const std::byte*>(packed.data_ptr()), packed.nbytes()), Shape{out, in});
    const Tensor bias = uniform(Shape{out}, DType::f32, 5);
    const Tensor packed_gpu = packed.to(gpu);
    for (std::int64_t rows : {1, 3, 8, 9, 20}) {
      for (DType d : {DType::f32, DType::bf16}) {
        INFO(accel::io::ggml_type_name(T) << " rows " << rows << " " << d);
        const Tensor x = uniform(Shape{rows, in}, d, static_cast<unsigned>(rows));
        const Tensor y = q::ggml_linear(x.to(gpu), packed_gpu, T, in, out, bias.to(gpu));
        REQUIRE(y.device() == gpu);
        REQUIRE(y.dtype() == d);
        REQUIRE(y.shape() == Shape{rows, out});
        // Fused rows sum in float32; many bf16 rows multiply a bf16-rounded weight.
        CHECK(rel_max_diff(y, float_reference(x, w, bias)) <= (d == DType::f32 ? 1e-5 : 2e-2));
      }
    }
  });
  // A 3-d input keeps its leading dims; a weight on the CPU with an input on the GPU is refused.
  const Tensor packed = random_blocks<GgmlType::q8_0>(16, 64, 3);
  const Tensor x = uniform(Shape{2, 3, 64}, DType::f32, 9);
  CHECK(q::ggml_linear(x.to(gpu), packed.to(gpu), GgmlType::q8_0, 64, 16).shape() == Shape{2, 3, 16});
  CHECK_THROWS_AS(q::ggml_linear(x.to(gpu), packed, GgmlType::q8_0, 64, 16), accel::DeviceError);
}

TEST_CASE("cuda quant: bitsandbytes 4-bit and int8 layers on a GPU", "[cuda][quant]") {
  ACCEL_REQUIRE_GPU();
  for (const bool nested : {false, true}) {
    for (const auto type : {q::BnbQuantType::nf4, q::BnbQuantType::fp4}) {
      for (const std::int64_t in : {128, 72}) {  // 72: not whole 32-wide steps, so no fused kernel
        INFO("4-bit " << q::bnb_quant_type_name(type) << (nested ? " nested" : "") << " in " << in);
        const std::int64_t out = 24;
        q::Linear4bit layer(in, out, true, {.quant_type = type, .compress_statistics = nested});
        layer.quantize(uniform(Shape{out, in}, DType::f32, 31));
        layer.parameter_cell("bias")->data = uniform(Shape{out}, DType::f32, 32);
        const Tensor w = layer.dequantized_weight();
        const Tensor bias = layer.bias().clone();
        layer.to(gpu);
        // The decoding kernel gives dequantize_4bit's bits.
        const auto& st = *layer.quant_state();
        Tensor dec = Tensor::empty(Shape{out, in}, DType::f32, gpu);
        const Tensor absmax = Tensor::from_vector(st.absmax_f32(), Shape{st.blocks()}).to(gpu);
        accel::cuda_backend().quant.bnb4_dequantize(layer.weight(), absmax, q::bnb_4bit_info(type).decode.data(),
                                                    st.blocksize, dec);
        CHECK(same_bytes(dec, w));
        for (std::int64_t rows : {1, 5, 17}) {
          const Tensor x = uniform(Shape{rows, in}, DType::f32, static_cast<unsigned>(rows));
          const Tensor y = layer.forward(x.to(gpu));
          REQUIRE(y.device() == gpu);
          CHECK(rel_max_diff(y, float_reference(x, w, bias)) <= 1e-5);
        }
      }
    }
  }
  for (const std::int64_t in : {96, 40}) {  // 40: not whole 16-byte steps
    INFO("int8 in " << in);
    const std::int64_t out = 19;
    q::Linear8bitLt layer(in, out, true);
    layer.quantize(uniform(Shape{out, in}, DType::f32, 41));
    layer.parameter_cell("bias")->data = uniform(Shape{out}, DType::f32, 42);
    const Tensor w = layer.dequantized_weight();
    const Tensor bias = layer.bias().clone();
    layer.to(gpu);
    Tensor dec = Tensor::empty(Shape{out, in}, DType::f32, gpu);
    accel::cuda_backend().quant.int8_dequantize(layer.weight(), layer.SCB(), q::int8_dequant_const, dec);
    CHECK(same_bytes(dec, w));
    for (std::int64_t rows : {1, 4, 12}) {
      for (DType d : {DType::f32, DType::bf16}) {
        const Tensor x = uniform(Shape{rows, in}, d, static_cast<unsigned>(rows));
        const Tensor y = layer.forward(x.to(gpu));
        REQUIRE(y.dtype() == d);
        CHECK(rel_max_diff(y, float_reference(x, w, bias)) <= (d == DType::f32 ? 1e-5 : 2e-2));
      }
    }
  }
}

TEST_CASE("cuda quant: Quanto and TorchAO layers on a GPU", "[cuda][quant]") {
  ACCEL_REQUIRE_GPU();
  using S = q::AffineScheme;
  for (const S s : {S::quanto_int8, S::quanto_int4, S::quanto_int2, S::quanto_float8, S::torchao_int8_weight_only,
                    S::torchao_int4_weight_only, S::torchao_int8_dynamic_activation_int8_weight,
                    S::torchao_float8_weight_only}) {
    for (const std::int64_t in : {96, 100}) {  // 100: a short last group, no 16-byte int8 steps
      INFO(q::affine_scheme_info(s).name << " in " << in);
      const std::int64_t out = 21;
      q::AffineLinear layer(in, out, s, 32, true);
      layer.set_quantized_weight(q::quantize_affine(s, uniform(Shape{out, in}, DType::f32, 51), 32), Device::cpu());
      layer.parameter_cell("bias")->data = uniform(Shape{out}, DType::f32, 52);
      const Tensor w = layer.dequantized_weight();
      const Tensor bias = layer.bias().clone();
      layer.to(gpu);
      for (std::int64_t rows : {1, 6, 11}) {
        for (DType d : {DType::f32, DType::bf16}) {
          const Tensor x = uniform(Shape{rows, in}, d, static_cast<unsigned>(rows));
          const Tensor y = layer.forward(x.to(gpu));
          REQUIRE(y.device() == gpu);
          REQUIRE(y.dtype() == d);
          CHECK(rel_max_diff(y, float_reference(x, w, bias)) <= (d == DType::f32 ? 1e-5 : 2e-2));
        }
      }
    }
  }
}

TEST_CASE("cuda quant: models quantized on load onto a GPU compute what their dequantized weights do", "[cuda][quant]") {
  ACCEL_REQUIRE_GPU();
  using Make = std::function<accel::dispatch::AnyQuantizer()>;
  const std::pair<const char*, Make> cases[] = {
      {"Q8_0", [] { return q::GgufQuantizer({.compute_dtype = DType::f32, .quant_type = GgmlType::q8_0}); }},
      {"Q4_0", [] { return q::GgufQuantizer({.compute_dtype = DType::f32, .quant_type = GgmlType::q4_0}); }},
      {"NF4", [] { return q::BnbQuantizer({.load_in_4bit = true, .bnb_4bit_quant_type = q::BnbQuantType::nf4}); }},
      {"int8", [] { return q::BnbQuantizer({.load_in_8bit = true}); }},
      {"TorchAO int4", [] { return q::TorchAoQuantizer({.quant_type = "int4wo", .quant_type_kwargs = nlohmann::json{{"group_size", 32}}}); }},
      {"Quanto float8", [] { return q::QuantoQuantizer({.weights_dtype = "float8"}); }},
  };
  for (const char* model : {"tiny_llama", "tiny_gpt2"}) {
    for (const auto& [name, make] : cases) {
      INFO(model << " " << name);
      accel::DeviceMap on_gpu;
      on_gpu.set("", accel::Placement::gpu(0));
      auto dev = accel::dispatch::load_pretrained_causal_lm(
          models_dir() + "/" + model,
          {.dtype = DType::f32, .show_progress = false, .device_map = on_gpu, .quantizer = make()});
      const std::vector<std::int64_t> prompt{5, 17, 3, 40, 22, 9, 11, 30};
      const Tensor ids = Tensor::from_vector(prompt, Shape{1, 8});
      const Tensor got = dev.model->logits(ids.to(gpu), nullptr, 0);
      REQUIRE(got.device() == gpu);
      // The same quantized weights, dequantized into float layers on the CPU.
      accel::dispatch::AnyQuantizer back = make();
      auto cpu = accel::dispatch::load_pretrained_causal_lm(models_dir() + "/" + model,
                                                            {.dtype = DType::f32, .show_progress = false, .quantizer = back});
      back.dequantize(cpu.model->module());
      CHECK(rel_max_diff(got, cpu.model->logits(ids, nullptr, 0)) <= 1e-4);
      // Decoding (one row per step) takes the fused kernels.
      const accel::models::GenerationConfig greedy{.max_new_tokens = 6, .ignore_eos = true};
      CHECK(accel::models::generate(*dev.model, ids.to(gpu), greedy).new_tokens[0] ==
            accel::models::generate(*cpu.model, ids, greedy).new_tokens[0]);
    }
  }
}
