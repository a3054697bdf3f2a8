// infer_auto_device_map on random models, budgets and options, from fixed seeds: 3000 models of
// any shape and 1500 small flat ones with ties and budgets near the largest layer (the shape
// where fallback_allocation once looped), about a second in all (several under ASan).
//
// Models: trees 1 to 4 levels deep with 0 to 4 children a module, 0 to 3 parameters of float32 /
// float16 / bfloat16 from empty to 2^26 elements, buffers (float32, int64, bool; persistent or
// not), tie groups of 2 to 5 parameters of different modules at any depth, and now and then a
// parameter of 10^18 elements. Options: no-split classes, a dtype, a special dtype, offload_buffers,
// fallback_allocation, clean_result, reserves, the balanced path (low_zero or not), a prefetch
// policy; budgets for 0 to 3 GPUs, an optional cpu and an optional disk, from 0 bytes up to more
// than the model.
//
// What must hold, with the sizes computed here from the generated shapes and dtypes (not from
// the planner's size table, so a wrong size in the planner shows):
// - it ends: the planner tests build with ACCEL_CHECK_LOOP_BOUNDS, so a loop past its stated
//   bound throws std::logic_error, which fails the case like any exception but OverflowError;
// - an OverflowError only for a model holding the 10^18-element parameter, and naming it when
//   that parameter alone is past what a size counts; every other model gets a map;
// - every parameter under exactly one key (a tied parameter's later paths at most one), every key
//   naming something in the model, tied parameters on one device;
// - Accelerate's first guarantee: the bytes placed on each GPU and on the cpu are at most its
//   max_memory, less any reserve (under the balanced path, at most the balanced budget, itself at
//   most the given one). Disk is unbounded.
//
// Where Accelerate's semantics allow otherwise, and so the checks do:
// - "room on the main devices for the largest layer offloaded" is not checked: the walk reserves
//   the largest layer still queued, computed before the module being treated goes back to the
//   queue, so a largest layer moved on to the next device is not reserved for;
// - buffers of a module that has children: a split yields the module's direct parameters and its
//   children (Accelerate's named_parameters(recurse=False) + named_children()), so such a module's
//   own buffers are in no entry once it is split, and no budget counts them. They must be placed
//   at most once (buffers of leaf modules and of the root exactly once). clean_result can then
//   fold them under the module's key, on a device whose budget never counted them, so the checks
//   read the map as placed (clean_result off) and require the cleaned map to put every other
//   tensor where the placed map does.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/nn/spec.hpp"
#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/policy/policies.hpp"

using namespace accel;
using plan::MaxMemory;

namespace {

struct GenTensor {
  std::string path;  // dotted, from the root
  std::string local;
  std::vector<std::int64_t> shape;
  DType dtype = DType::f32;
  bool buffer = false;
  bool persistent = true;
  bool leaf_owner = false;  // owned by a module without children (or by the root)
  int tie_group = -1;
};

struct GenModule {
  std::string local;
  std::string cls;
  std::vector<int> tensors;  // indexes into Gen::tensors, parameters first
  std::vector<GenModule> children;
};

class Gen {
 public:
  explicit Gen(std::uint64_t seed) : rng_(seed) {}

  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return lo + static_cast<std::int64_t>(rng_() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  bool chance(int percent) { return uniform(0, 99) < percent; }
  double unit() { return static_cast<double>(rng_() >> 11) / 9007199254740992.0; }

  // Element counts from empty through tiny to hundreds of MB, so budgets meet every scale.
  std::vector<std::int64_t> shape() {
    switch (uniform(0, 9)) {
      case 0:
        return {0};
      case 1:
        return {uniform(0, 3), 0};
      case 2:
      case 3:
        return {uniform(1, 8)};
      case 4:
      case 5:
        return {uniform(1, 64), uniform(1, 64)};
      case 6:
      case 7:
        return {uniform(1, 512), uniform(1, 512)};
      case 8:
        return {uniform(1, 4096), uniform(1, 4096)};
      default:
        return {std::int64_t{1} << uniform(16, 26)};
    }
  }

  // Two to six leaf modules of a few small weights and one of a larger weight: with ties among
  // them and budgets near the largest layer, the walk keeps meeting a module that fits alone but
  // not with its partners, none of which can be split (where fallback_allocation once looped).
  GenModule flat() {
    GenModule root{"", "Seq", {}, {}};
    const auto kids = static_cast<int>(uniform(2, 6));
    const auto big = static_cast<int>(uniform(0, kids - 1));
    for (int i = 0; i < kids; ++i) {
      GenModule c{std::to_string(i), chance(50) ? "Linear" : "Norm", {}, {}};
      const auto params = static_cast<int>(uniform(1, 2));
      for (int k = 0; k < params; ++k) {
        const std::string local = "w" + std::to_string(k);
        const std::int64_t n = i == big && k == 0 ? uniform(32, 128) : uniform(1, 16);
        add(c, {c.local + "." + local, local, {n}, DType::f32, false, true, true, -1});
      }
      root.children.push_back(std::move(c));
    }
    return root;
  }

  GenModule module(const std::string& prefix, const std::string& local, int depth, int max_depth) {
    static const char* classes[] = {"Block", "Linear", "Norm", "Seq", "Attn"};
    GenModule m{local, classes[uniform(0, 4)], {}, {}};
    const bool root = prefix.empty() && local.empty();
    const int kids = depth >= max_depth ? 0 : static_cast<int>(uniform(root ? 1 : 0, 4));
    const auto path = [&](const std::string& n) {
      const std::string base = root ? "" : (prefix.empty() ? local : prefix + "." + local);
      return base.empty() ? n : base + "." + n;
    };
    const int params = static_cast<int>(uniform(0, 3));
    for (int i = 0; i < params; ++i) {
      static const DType floats[] = {DType::f32, DType::f16, DType::bf16};
      add(m, {path("w" + std::to_string(i)), "w" + std::to_string(i), shape(), floats[uniform(0, 2)], false, true,
              kids == 0 || root, -1});
    }
    if (chance(25)) {
      static const DType kinds[] = {DType::f32, DType::i64, DType::boolean};
      add(m, {path("buf"), "buf", shape(), kinds[uniform(0, 2)], true, chance(70), kids == 0 || root, -1});
    }
    const std::string child_prefix = root ? "" : (prefix.empty() ? local : prefix + "." + local);
    for (int i = 0; i < kids; ++i) m.children.push_back(module(child_prefix, std::to_string(i), depth + 1, max_depth));
    return m;
  }

  void add(GenModule& m, GenTensor t) {
    m.tensors.push_back(static_cast<int>(tensors.size()));
    tensors.push_back(std::move(t));
  }

  // Groups of 2 to 5 parameters of different modules, at any depth, given one shape and dtype.
  void tie(int groups) {
    std::vector<int> free;
    for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
      if (!tensors[i].buffer) free.push_back(i);
    }
    for (int g = 0; g < groups && free.size() >= 2; ++g) {
      const int want = static_cast<int>(uniform(2, 5));
      std::vector<int> members;
      std::vector<std::string> owners;
      for (int tries = 0; tries < 40 && static_cast<int>(members.size()) < want && !free.empty(); ++tries) {
        const auto k = static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(free.size()) - 1));
        const std::string owner = module_of(tensors[free[k]].path);
        if (std::find(owners.begin(), owners.end(), owner) != owners.end()) continue;
        owners.push_back(owner);
        members.push_back(free[k]);
        free.erase(free.begin() + static_cast<std::ptrdiff_t>(k));
      }
      if (members.size() < 2) continue;
      for (int i : members) {
        tensors[i].shape = tensors[members[0]].shape;
        tensors[i].dtype = tensors[members[0]].dtype;
        tensors[i].tie_group = static_cast<int>(ties.size());
      }
      ties.push_back(members);
    }
  }

  static std::string module_of(const std::string& path) {
    const auto dot = path.rfind('.');
    return dot == std::string::npos ? std::string() : path.substr(0, dot);
  }

  nlohmann::json to_json(const GenModule& m) const {
    nlohmann::json j{{"name", m.local}, {"class", m.cls}};
    nlohmann::json params = nlohmann::json::array(), buffers = nlohmann::json::array();
    for (int i : m.tensors) {
      const GenTensor& t = tensors[i];
      nlohmann::json jt{{"name", t.local}, {"shape", t.shape}, {"dtype", std::string(dtype_name(t.dtype))}};
      if (t.buffer) {
        jt["persistent"] = t.persistent;
        buffers.push_back(jt);
      } else {
        params.push_back(jt);
      }
    }
    if (!params.empty()) j["params"] = params;
    if (!buffers.empty()) j["buffers"] = buffers;
    if (!m.children.empty()) {
      j["children"] = nlohmann::json::array();
      for (const auto& c : m.children) j["children"].push_back(to_json(c));
    }
    return j;
  }

  nlohmann::json spec(const GenModule& root) const {
    nlohmann::json j{{"format", "accelerate-oracle-spec/v1"}, {"root", to_json(root)}};
    if (!ties.empty()) {
      j["tied"] = nlohmann::json::array();
      for (const auto& g : ties) {
        nlohmann::json names = nlohmann::json::array();
        for (int i : g) names.push_back(tensors[i].path);
        j["tied"].push_back(names);
      }
    }
    return j;
  }

  std::vector<GenTensor> tensors;  // in the traversal order that counts a shared tensor first
  std::vector<std::vector<int>> ties;

 private:
  std::mt19937_64 rng_;
};

void collect_classes(const GenModule& m, std::vector<std::string>& out) {
  if (std::find(out.begin(), out.end(), m.cls) == out.end()) out.push_back(m.cls);
  for (const auto& c : m.children) collect_classes(c, out);
}

bool covers(const std::string& key, const std::string& name) {
  return key.empty() || name == key || (name.size() > key.size() && name.starts_with(key) && name[key.size()] == '.');
}

// Bits of one element as the planner is asked to count it: a special dtype wins; a target dtype
// shrinks floating tensors only.
std::int64_t element_bits(const GenTensor& t, const plan::SizeOptions& o) {
  const auto bits = [](DType d) { return dtype_byte_size(d).bits(); };
  if (auto it = o.special_dtypes.find(t.path); it != o.special_dtypes.end()) return bits(it->second);
  if (!o.dtype || !is_floating_point(t.dtype)) return bits(t.dtype);
  return std::min(bits(*o.dtype), bits(t.dtype));
}

// Parameters counted under the first path of their group (the generator lists tensors in the
// order torch's traversal meets them); buffers are never shared.
bool counted(const Gen& g, int i) {
  const GenTensor& t = g.tensors[static_cast<std::size_t>(i)];
  if (t.tie_group < 0) return true;
  const auto& group = g.ties[static_cast<std::size_t>(t.tie_group)];
  return std::none_of(group.begin(), group.end(), [&](int j) { return j < i; });
}

struct Budget {
  Placement device;
  __int128 bits;  // what may be placed on it
};

struct CaseReport {
  int maps = 0, overflow_errors = 0, fallbacks = 0, balanced = 0, policy = 0, ties = 0, spread = 0;
  std::int64_t ms = 0;
};

// One random case: generate, plan, check. `huge` adds a parameter whose bytes no size holds.
enum class Family { any, flat_tied };

void run_case(std::uint64_t seed, Family family, CaseReport& report) {
  Gen g(seed);
  const bool flat = family == Family::flat_tied;
  const int max_depth = static_cast<int>(g.uniform(1, 4));
  GenModule root = flat ? g.flat() : g.module("", "", 0, max_depth);
  if (flat || g.chance(60)) g.tie(static_cast<int>(g.uniform(1, 3)));
  // Now and then a parameter of 10^18 float32 elements somewhere in the tree: its bytes fit no
  // size the planner keeps, so it must refuse the model with an OverflowError that names it.
  const bool huge = g.chance(3);
  std::string huge_name;
  if (huge) {
    GenModule* m = &root;
    std::string prefix;
    while (!m->children.empty() && g.chance(60)) {
      m = &m->children[static_cast<std::size_t>(g.uniform(0, static_cast<std::int64_t>(m->children.size()) - 1))];
      prefix = prefix.empty() ? m->local : prefix + "." + m->local;
    }
    huge_name = prefix.empty() ? "huge" : prefix + ".huge";
    g.add(*m, {huge_name, "huge", {1'000'000'000, 1'000'000'000}, DType::f32, false, true, m->children.empty(), -1});
  }
  const nlohmann::json spec = g.spec(root);
  // The seed regenerates the case; the spec itself would cost a dump per case.
  INFO("seed " << seed);
  auto model = nn::module_from_spec(spec, "random");

  plan::InferOptions o;
  std::vector<std::string> classes;
  collect_classes(root, classes);
  for (const auto& c : classes) {
    if (g.chance(30)) o.no_split_module_classes.push_back(c);
  }
  static const std::optional<DType> targets[] = {std::nullopt, std::nullopt, DType::f16, DType::bf16, DType::f32};
  o.sizes.dtype = targets[g.uniform(0, 4)];
  if (g.chance(20) && !g.tensors.empty()) {
    const auto& t = g.tensors[static_cast<std::size_t>(g.uniform(0, static_cast<std::int64_t>(g.tensors.size()) - 1))];
    o.sizes.special_dtypes[t.path] = g.chance(50) ? DType::i8 : DType::f64;
  }
  o.offload_buffers = g.chance(50);
  o.fallback_allocation = flat || g.chance(50);
  std::ostringstream log, warnings;
  o.verbose = g.chance(10);
  o.log = &log;
  o.warnings = &warnings;

  bool huge_overflows = false;
  for (const GenTensor& t : g.tensors) {
    if (t.path == huge_name) huge_overflows = element_bits(t, o.sizes) * __int128{1'000'000'000'000'000'000} > INT64_MAX;
  }

  // Budgets relative to the model's size, from nothing to more than all of it.
  __int128 total_bits = 0;
  for (int i = 0; i < static_cast<int>(g.tensors.size()); ++i) {
    if (counted(g, i)) {
      __int128 n = 1;
      for (auto e : g.tensors[static_cast<std::size_t>(i)].shape) n *= e;
      total_bits += n * element_bits(g.tensors[static_cast<std::size_t>(i)], o.sizes);
    }
  }
  const double total_bytes = static_cast<double>(total_bits) / 8.0;
  // ... and near the largest layer, which the main devices keep free: what fits beside it decides.
  double layer_bytes = 0;
  if (!huge) layer_bytes = get_max_layer_size(*model, std::nullopt, o.no_split_module_classes, o.sizes).max_size.bytes();
  const auto budget = [&]() -> std::int64_t {
    switch (g.uniform(flat ? 5 : 0, 6)) {
      case 5:
        return static_cast<std::int64_t>(layer_bytes * (1 + g.unit()));
      case 6:
        return static_cast<std::int64_t>(layer_bytes * (1 + 0.3 * g.unit()));
      case 0:
        return 0;
      case 1:
        return g.uniform(1, 64);
      case 2:
        return static_cast<std::int64_t>(std::min(total_bytes, 1e15) * g.unit() * 0.3);
      case 3:
        return static_cast<std::int64_t>(std::min(total_bytes, 1e15) * g.unit());
      default:
        return static_cast<std::int64_t>(std::min(total_bytes, 1e15) * (0.5 + g.unit()));
    }
  };
  MaxMemory mm;
  const int n_gpus = static_cast<int>(g.uniform(0, 3));
  for (int i = 0; i < n_gpus; ++i) mm.add(Placement::gpu(i), ByteSize(budget()));
  if (g.chance(80)) mm.add(Placement::cpu(), ByteSize(budget()));
  if (g.chance(30)) mm.add(Placement::disk(), ByteSize(budget()));
  if (g.chance(25)) {
    for (const auto& [k, v] : mm) {
      if (!k.is_disk() && g.chance(50)) o.reserve.add(k, ByteSize(g.uniform(0, 64)));
    }
  }
  const bool balanced = n_gpus > 0 && g.chance(25);
  const bool low_zero = balanced && g.chance(50);
  const bool policy = !balanced && g.chance(15);

  MaxMemory placed_under = mm;
  MaxMemory reserve = o.reserve;
  // The checks read the map as placed (clean_result off): cleaning may fold into a parent's key
  // the buffers that a split left out (see the header comment), which no budget counted. The
  // cleaned map, when asked for, must then agree with it tensor by tensor.
  const bool clean = g.chance(70);
  o.clean_result = false;
  DeviceMap dm, cleaned;
  try {
    if (balanced) {
      placed_under = get_balanced_memory(*model, mm, o.no_split_module_classes, o.sizes, low_zero);
      for (const auto& [k, v] : placed_under) {
        const ByteSize* given = mm.find(k);
        REQUIRE(given);
        CHECK((k.is_disk() || v <= *given));
      }
      ++report.balanced;
    }
    using Prefetch = policies<policy::prefetch<1>>;
    const auto place = [&] {
      return policy ? DeviceMap(infer_auto_device_map<Prefetch>(*model, placed_under, o))
                    : infer_auto_device_map(*model, placed_under, o);
    };
    dm = place();
    if (clean) {
      o.clean_result = true;
      cleaned = place();
    }
    if (policy) {
      for (const auto& [k, v] : offload_policy_reserve<Prefetch>(*model, mm, o)) reserve.add(k, v);
      ++report.policy;
    }
  } catch (const OverflowError& e) {
    // Only a model near the largest size may be refused; one with a parameter past it must be, by
    // a message that names that parameter. (Counted as int8 the huge parameter just fits.)
    INFO(e.what());
    CHECK(huge);
    if (huge_overflows) CHECK(std::string(e.what()).find(huge_name) != std::string::npos);
    ++report.overflow_errors;
    return;
  }
  // std::logic_error (a loop past its bound) and any other exception fail the test case.
  CHECK_FALSE(huge_overflows);
  ++report.maps;
  report.fallbacks += o.fallback_allocation ? 1 : 0;
  report.ties += g.ties.empty() ? 0 : 1;

  // Problems are gathered and reported once: a CHECK per tensor would cost more than the planning.
  std::vector<std::string> problems;
  const auto problem = [&](std::string what) { problems.push_back(std::move(what)); };

  // Every tensor: under how many keys, and where.
  const auto locate = [&](const DeviceMap& map, std::vector<std::optional<Placement>>& where) {
    where.assign(g.tensors.size(), std::nullopt);
    for (std::size_t i = 0; i < g.tensors.size(); ++i) {
      int hits = 0;
      for (const auto& [k, p] : map) {
        if (!covers(k, g.tensors[i].path)) continue;
        ++hits;
        where[i] = p;
      }
      if (hits > 1) problem(g.tensors[i].path + " is under " + std::to_string(hits) + " keys");
    }
    // Every key names something of the model.
    for (const auto& entry : map) {
      const std::string& k = entry.first;  // a named reference: clang 14 cannot capture a binding
      const auto under_k = [&](const GenTensor& t) { return covers(k, t.path); };
      if (k.empty() || std::any_of(g.tensors.begin(), g.tensors.end(), under_k)) continue;
      try {
        (void)model->get_submodule(k);
      } catch (const KeyError&) {
        problem("key '" + k + "' names nothing");
      }
    }
  };
  std::vector<std::optional<Placement>> where, where_cleaned;
  locate(dm, where);
  std::map<Placement, __int128> placed_bits;
  for (std::size_t i = 0; i < g.tensors.size(); ++i) {
    const GenTensor& t = g.tensors[i];
    const bool first_path = counted(g, static_cast<int>(i));
    if (first_path && (!t.buffer || t.leaf_owner) && !where[i]) problem(t.path + " is placed nowhere");
    if (where[i] && first_path) {
      __int128 n = 1;
      for (auto e : t.shape) n *= e;
      placed_bits[*where[i]] += n * element_bits(t, o.sizes);
    }
  }
  if (clean) {
    locate(cleaned, where_cleaned);
    for (std::size_t i = 0; i < g.tensors.size(); ++i) {
      const auto& a = where[i];
      const auto& b = where_cleaned[i];
      if (a ? a != b : (b && !(g.tensors[i].buffer && !g.tensors[i].leaf_owner))) {
        problem(g.tensors[i].path + " moves when the map is cleaned");
      }
    }
  }
  // Tied parameters share a device.
  for (const auto& group : g.ties) {
    std::optional<Placement> first;
    for (int i : group) {
      const auto& w = where[static_cast<std::size_t>(i)];
      if (!w) continue;
      if (!first) first = w;
      if (*first != *w) {
        problem("tied " + g.tensors[static_cast<std::size_t>(i)].path + " on " + w->str() + ", not " + first->str());
      }
    }
  }
  // No bounded device past its budget, nothing on a device without one.
  for (const auto& [k, v] : placed_under) {
    if (k.is_disk()) continue;
    const ByteSize* r = reserve.find(k);
    const __int128 limit = !r ? v.bits() : (*r < v ? v.bits() - r->bits() : 0);
    if (placed_bits[k] > limit) {
      problem(k.str() + ": " + std::to_string(static_cast<double>(placed_bits[k]) / 8) + " bytes placed, budget " +
              std::to_string(static_cast<double>(limit) / 8));
    }
  }
  for (const auto& [k, bits] : placed_bits) {
    if (bits > 0 && !k.is_disk() && !placed_under.find(k)) problem(k.str() + " has no budget but holds weights");
  }
  report.spread += placed_bits.size() > 1 ? 1 : 0;
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += p + "\n";
    FAIL_CHECK(all << "device map: " << plan::to_ordered_json(dm).dump());
  }
}

CaseReport run_cases(Family family, std::uint64_t seed, int cases) {
  CaseReport report;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < cases; ++c) run_case(seed + static_cast<std::uint64_t>(c), family, report);
  report.ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

TEST_CASE("infer_auto_device_map on random models: bounded, complete, tied together, within budgets",
          "[plan][infer][property]") {
  constexpr int cases = 3000;
  const CaseReport r = run_cases(Family::any, 0x5eed'0001, cases);
  INFO(r.maps << " maps (" << r.spread << " over several devices, " << r.ties << " with ties), " << r.overflow_errors
              << " overflow errors, " << r.ms << " ms");
  // The generator reaches every path it is meant to.
  CHECK(r.maps + r.overflow_errors == cases);
  CHECK(r.overflow_errors > 0);
  CHECK(r.spread > cases / 4);
  CHECK(r.fallbacks > cases / 4);
  CHECK(r.balanced > cases / 20);
  CHECK(r.policy > cases / 20);
  CHECK(r.ties > cases / 4);
}

TEST_CASE("fallback_allocation on small tied models with budgets near the largest layer", "[plan][infer][property]") {
  constexpr int cases = 1500;
  const CaseReport r = run_cases(Family::flat_tied, 0xf1a7'0001, cases);
  INFO(r.maps << " maps (" << r.spread << " over several devices), " << r.ms << " ms");
  CHECK(r.maps + r.overflow_errors == cases);
  CHECK(r.spread > cases / 4);
}
