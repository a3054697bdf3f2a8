// accel quick start: the tensor layer on a small built-in model shape.
//
// Builds the weights of a tiny GPT-2-like block on the meta device (no bytes), materialises
// them on the CPU in bf16, converts to f32, and prints what each step cost according to the
// allocator's counters, plus the policy bundle a compile-time-configured engine would use.
#include <accel/accel.hpp>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

struct WeightSpec {
  std::string name;
  accel::Shape shape;
};

std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

int main() {
  using namespace accel;
  const std::int64_t hidden = 768, inner = 3072, vocab = 50257;
  const std::vector<WeightSpec> specs = {
      {"wte.weight", {vocab, hidden}},          {"h.0.attn.c_attn.weight", {hidden, 3 * hidden}},
      {"h.0.attn.c_proj.weight", {hidden, hidden}}, {"h.0.mlp.c_fc.weight", {hidden, inner}},
      {"h.0.mlp.c_proj.weight", {inner, hidden}},  {"ln_f.weight", {hidden}},
  };
  const Device cpu = Device::cpu();
  const std::size_t base = memory_stats(cpu).allocated_bytes;

  std::printf("1. skeleton on meta\n");
  std::vector<std::pair<std::string, Tensor>> weights;
  std::size_t total = 0;
  for (const auto& s : specs) {
    weights.emplace_back(s.name, Tensor::empty(s.shape, DType::bf16, Device::meta()));
    total += weights.back().second.nbytes();
    std::printf("   %-24s %-14s %s\n", s.name.c_str(), s.shape.str().c_str(), weights.back().second.str().c_str());
  }
  std::printf("   planned %s of bf16 weights; allocated so far: %zu bytes\n", mib(total).c_str(),
              memory_stats(cpu).allocated_bytes - base);

  std::printf("2. materialise on cpu (bf16) and fill\n");
  for (auto& [name, t] : weights) {
    t = Tensor::empty(t.shape(), t.dtype(), cpu);
    t.fill_(0.02);
  }
  std::printf("   allocated: %s (peak %s)\n", mib(memory_stats(cpu).allocated_bytes - base).c_str(),
              mib(memory_stats(cpu).peak_allocated_bytes - base).c_str());

  std::printf("3. convert to f32 (vectorized, exact rounding)\n");
  Tensor wte32 = weights.front().second.to(DType::f32);
  std::printf("   wte[0, :4] = %s (0.02 in bf16 is %.8f)\n", wte32.select(0, 0).narrow(0, 0, 4).str().c_str(),
              static_cast<double>(static_cast<float>(bfloat16(0.02f))));
  std::printf("   allocated: %s\n", mib(memory_stats(cpu).allocated_bytes - base).c_str());

  std::printf("4. views share storage: c_attn split into q, k, v without copying\n");
  const Tensor& c_attn = weights[1].second;
  for (int i = 0; i < 3; ++i) {
    Tensor part = c_attn.narrow(1, i * hidden, hidden);
    std::printf("   %c: shape %s strides %s shares storage: %s\n", "qkv"[i], part.shape().str().c_str(),
                part.strides().str().c_str(), part.shares_storage(c_attn) ? "yes" : "no");
  }

  using Engine = policies<policy::bf16, policy::prefetch<2>>;
  std::printf("5. compile-time policy bundle: precision=%s (weights %s), offload prefetch depth=%zu, "
              "distributed=%s\n",
              std::string(Engine::precision::mixed_precision).c_str(),
              std::string(dtype_name(Engine::precision::storage_dtype)).c_str(),
              Engine::offload::prefetch_depth, std::string(Engine::distributed::distributed_type).c_str());
  std::printf("   CUDA devices visible: %d\n", cuda_device_count());
  return 0;
}
