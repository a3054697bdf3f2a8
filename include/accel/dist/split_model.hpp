// A model split across processes: each process holds the blocks a SplitDeviceMap gives it, and the
// hidden states travel between processes, point to point, where the map changes process.
//
//   std::vector<MaxMemory> b = gather_max_memory(state, mine)        every process's budget, in rank order
//   auto stages = attach_pipeline_hooks(state, model, split_map)      on a loaded model (see below)
//   SplitModel m = load_pretrained_split(state, folder, {.dtype = ...}, {.plan = {.strategy = "balanced"}, .max_memory = mine});
//   models::generate(*m.model.model, ids, g);                         every process calls it, with the same ids
//
// How a forward runs. Every process runs the whole forward of the model. The blocks it holds compute;
// the others hold meta tensors, so their forward computes shapes only and costs nothing. Each entry
// of the split map gets a stage hook in front of its hooks: when the entry belongs to another process
// than the one that computed the previous entry, that process sends the entry's argument tensors
// (hidden states, positions, masks) and the entry's process receives them in place of its meta
// ones; an entry called with no tensor argument (the rotary embedding) moves nothing. The root gets a hook that, after the forward, broadcasts the outputs (the logits) from the
// process that computed the last entry, so every process holds the same logits and generation
// takes the same tokens everywhere. Tensors travel over MPI in dist/serialize.hpp's form, staged
// through host memory (CUDA tensors included). Since the stages compute in turn, attaching the
// hooks gives the calling thread's kernels every CPU of the process's affinity mask again (unless
// OMP_NUM_THREADS or MKL_NUM_THREADS is set), where PartialState shared the node's cores out.
//
// What it needs of the model: a forward whose data moves from entry to entry through module
// arguments (embeddings, then blocks, then norm and head: every causal LM here; positions are
// computed on every process). A value computed by
// one process and used by a later entry of another without passing through that entry's arguments
// reaches it as meta; the receiving process then raises a DistributedError naming the entry (and the
// root's broadcast does the same on every process for a meta output), instead of computing garbage.
//
// Differences from Accelerate: its pipeline inference (prepare_pippy) traces a torch graph and runs
// micro-batches through stages; this runs one sequence at a time through hooks on the module tree,
// which keeps the KV cache, generation and offloading of one process as they are.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/parallel.hpp"
#include "accel/core/tensor.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/dist/collectives.hpp"
#include "accel/dist/mpi.hpp"
#include "accel/dist/partial_state.hpp"
#include "accel/dist/serialize.hpp"
#include "accel/dist/split_device_map.hpp"
#include "accel/hooks/model_hook.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/module.hpp"
#include "accel/plan/max_memory.hpp"

namespace accel::dist {

/// What crossed between processes in the forwards since attach_pipeline_hooks.
struct PipelineStats {
  std::size_t transfers = 0;       ///< stage boundaries crossed (argument packs sent or received here)
  std::size_t bytes_sent = 0;      ///< serialized tensor bytes this process sent point to point
  std::size_t bytes_received = 0;  ///< ... and received
  std::size_t broadcasts = 0;      ///< root outputs broadcast (one per forward)
};

namespace detail {

/// The state the hooks of one model share: who holds the activations now.
struct PipelineRun {
  int rank = 0, world = 1;
  /// The process that computed the last entry; -1 before the first entry of a forward (the
  /// inputs are on every process).
  int holder = -1;
  PipelineStats stats;
#if defined(ACCEL_WITH_MPI)
  MpiGroup* group = nullptr;
#endif
  static constexpr int tag = 0x5ac1;
};

#if defined(ACCEL_WITH_MPI)
/// While alive, the group's waits yield at once: a stage waits for another process's compute,
/// and spinning would take a core from it.
class Patient {
 public:
  explicit Patient(MpiGroup& g) : g_(g), before_(g.spin_budget()) { g_.set_spin_budget({}); }
  ~Patient() { g_.set_spin_budget(before_); }
  Patient(const Patient&) = delete;
  Patient& operator=(const Patient&) = delete;

 private:
  MpiGroup& g_;
  std::chrono::steady_clock::duration before_;
};

inline void send_tensor(PipelineRun& run, const Tensor& t, int dest, const char* op) {
  const std::vector<std::byte> bytes = serialize(t.is_cpu() || t.is_meta() ? t : t.to(Device::cpu()));
  const std::uint64_t n = bytes.size();
  run.group->send(&n, sizeof n, dest, PipelineRun::tag, op);
  run.group->send(bytes.data(), bytes.size(), dest, PipelineRun::tag, op);
  run.stats.bytes_sent += bytes.size();
}

/// Receives the sender's tensor for argument `local`: it replaces a meta `local`; a real `local`
/// is kept (every process computes what does not depend on the blocks, such as positions).
inline Tensor recv_tensor(PipelineRun& run, const Tensor& local, int source, const std::string& where, const char* op) {
  std::uint64_t n = 0;
  run.group->recv(&n, sizeof n, source, PipelineRun::tag, op);
  if (n > (std::uint64_t{1} << 40)) {
    throw DistributedError(where + ": process " + std::to_string(source) + " announced " + std::to_string(n) + " bytes");
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(n));
  run.group->recv(bytes.data(), bytes.size(), source, PipelineRun::tag, op);
  run.stats.bytes_received += bytes.size();
  Tensor t = deserialize<Tensor>(bytes);
  if (t.shape() != local.shape() || t.dtype() != local.dtype()) {
    throw DistributedError(where + ": process " + std::to_string(source) + " sent a " + std::string(dtype_name(t.dtype())) +
                           " " + t.shape().str() + " tensor where this process expects " +
                           std::string(dtype_name(local.dtype())) + " " + local.shape().str());
  }
  if (!local.is_meta()) return local;
  if (t.is_meta()) {
    throw DistributedError(where + ": an argument of shape " + local.shape().str() + " holds data on neither process " +
                           std::to_string(source) + " nor this one; the model's data reaches this block other than "
                           "through the arguments of the split map's entries, so it cannot be split there");
  }
  return t;
}
#endif

/// In front of an entry's hooks: moves the entry's arguments to its process.
class StageHook : public hooks::ModelHook {
 public:
  StageHook(std::shared_ptr<PipelineRun> run, int owner, std::string name)
      : run_(std::move(run)), owner_(owner), name_(std::move(name)) {}

  /// Another process's block computes on meta here, whatever real buffers it holds (GPT-2's
  /// masks): its KV-cache slot and positions follow.
  std::optional<Device> execution_device() const override {
    return owner_ == run_->rank ? std::nullopt : std::optional<Device>(Device::meta());
  }

  void pre_forward(nn::Module&, const nn::TensorRefs& args) override {
    // A call whose arguments hold no tensor (the rotary embedding's frequencies, computed on every
    // process alike) has nothing to move and takes no turn.
    if (args.size() == 0) return;
    PipelineRun& r = *run_;
    const int from = r.holder;
    r.holder = owner_;
    if (from < 0 || from == owner_ || (r.rank != from && r.rank != owner_)) return;
#if defined(ACCEL_WITH_MPI)
    ++r.stats.transfers;
    const Patient patient(*r.group);
    const std::string where = "split model, entry '" + name_ + "'";
    if (r.rank == from) {
      args.for_each([&](Tensor& t) {
        if (t.defined()) send_tensor(r, t, owner_, "pipeline send");
      });
    } else {
      args.for_each([&](Tensor& t) {
        if (t.defined()) t = recv_tensor(r, t, from, where, "pipeline recv");
      });
    }
#endif
  }

 private:
  std::shared_ptr<PipelineRun> run_;
  int owner_;
  std::string name_;
};

/// In front of the root's hooks: starts each forward, and gives every process its outputs.
class RootHook : public hooks::ModelHook {
 public:
  explicit RootHook(std::shared_ptr<PipelineRun> run) : run_(std::move(run)) {}

  void pre_forward(nn::Module&, const nn::TensorRefs&) override { run_->holder = -1; }

  void post_forward(nn::Module& m, const nn::TensorRefs& out) override {
    PipelineRun& r = *run_;
    const int from = std::max(r.holder, 0);
    r.holder = -1;
#if defined(ACCEL_WITH_MPI)
    ++r.stats.broadcasts;
    const Patient patient(*r.group);
    out.for_each([&](Tensor& t) {
      if (!t.defined()) return;
      std::vector<std::byte> bytes;
      if (r.rank == from) bytes = serialize(t.is_cpu() || t.is_meta() ? t : t.to(Device::cpu()));
      r.group->broadcast_bytes(bytes, from, "pipeline output broadcast");
      Tensor got = deserialize<Tensor>(bytes);
      if (got.is_meta()) {
        throw DistributedError("split model: the output of " + m.class_name() + " is on meta on process " +
                               std::to_string(from) + ", which computed its last entry; the model's data does not "
                               "travel through the arguments of the split map's entries");
      }
      if (r.rank != from) t = std::move(got);
    });
#else
    (void)m;
    (void)out;
    (void)from;
#endif
  }

 private:
  std::shared_ptr<PipelineRun> run_;
};

}  // namespace detail

/// Every process's budget, in rank order, on every process (each process knows its own memory).
template <class D>
std::vector<plan::MaxMemory> gather_max_memory(const PartialState<D>& state, const plan::MaxMemory& mine) {
  using Wire = std::vector<std::pair<std::string, std::int64_t>>;  // (placement, bits)
  Wire w;
  for (const auto& [k, v] : mine) w.emplace_back(k.str(), v.bits());
  std::vector<plan::MaxMemory> out;
  for (const Wire& each : gather_object(state, std::vector<Wire>{w})) {
    plan::MaxMemory mm;
    for (const auto& [k, bits] : each) mm.insert(plan::parse_memory_key(k), ByteSize::from_bits(bits));
    out.push_back(std::move(mm));
  }
  return out;
}

/// A handle on the hooks attach_pipeline_hooks put on a model.
class PipelineStages {
 public:
  explicit PipelineStages(std::shared_ptr<detail::PipelineRun> run) : run_(std::move(run)) {}
  const PipelineStats& stats() const noexcept { return run_->stats; }
  void reset_stats() noexcept { run_->stats = {}; }

 private:
  std::shared_ptr<detail::PipelineRun> run_;
};

/// Puts the stage hooks on `model` for `split_map` (see the header comment): call it after the
/// process's part is loaded and dispatched (its own entries on their placements, the others on
/// meta: load_pretrained_split does both). Every process must call it with the same map. A world
/// of one process gets no hook. ValueError when the map does not cover the model, names a process
/// that does not exist, or two entries of different processes fall in one module.
template <class D>
PipelineStages attach_pipeline_hooks(const PartialState<D>& state, nn::Module& model, const SplitDeviceMap& split_map) {
  check_split_device_map(model, split_map, state.num_processes());
  auto run = std::make_shared<detail::PipelineRun>();
  run->rank = state.process_index();
  run->world = state.num_processes();
  if (run->world == 1) return PipelineStages(run);
#if defined(ACCEL_WITH_MPI)
  run->group = &detail::mpi(state);
#endif
  // The stages compute one after another and their waits yield, so each process takes every CPU
  // it may run on, undoing the share PartialState gave it for processes that compute together
  // (8 x 1024 LLaMA split over two processes of a 2-core machine: 39.8 tokens/s with two threads
  // each, 35.2 with one).
  if (!detail::cpu_threads_set_by_user()) set_num_threads(affinity_cpus());
  // An entry naming a tensor is handled by the module that holds it.
  std::vector<std::pair<nn::Module*, std::pair<int, std::string>>> stages;
  for (const auto& [name, p] : split_map) {
    std::string owner = name;
    while (!owner.empty() && !model.find_submodule(owner)) {
      const auto dot = owner.rfind('.');
      owner = dot == std::string::npos ? std::string() : owner.substr(0, dot);
    }
    nn::Module* m = owner.empty() ? &model : model.find_submodule(owner);
    const auto same = std::find_if(stages.begin(), stages.end(), [&](const auto& s) { return s.first == m; });
    if (same != stages.end()) {
      if (same->second.first != p.rank) {
        throw ValueError("split device map: '" + name + "' and '" + same->second.second +
                         "' are on different processes but computed by one module ('" + owner +
                         "'); split at module boundaries");
      }
      continue;
    }
    stages.push_back({m, {p.rank, name}});
  }
  // In front of each entry's hooks: a stage hook sees the arguments before they are aligned.
  for (auto& [m, s] : stages) hooks::prepend_hook_to_module(*m, std::make_shared<detail::StageHook>(run, s.first, s.second));
  hooks::prepend_hook_to_module(model, std::make_shared<detail::RootHook>(run));
  return PipelineStages(run);
}

/// Options of load_pretrained_split beside load_pretrained_causal_lm's.
struct SplitLoadOptions {
  /// How the model is planned across processes (strategy, no-split classes; the planner's sizes
  /// default to the load dtype and the model's own no-split classes).
  SplitPlanOptions plan{};
  /// This process's budget; nullopt: LoadPretrainedOptions::max_memory, else get_max_memory().
  /// LoadPretrainedOptions::reserve is taken off it before the budgets are gathered.
  std::optional<plan::MaxMemory> max_memory{};
  /// A plan to use as it is instead of planning (every process must pass the same).
  std::optional<SplitDeviceMap> split_map{};
};

/// A model loaded across processes.
struct SplitModel {
  dispatch::PretrainedModel model;
  /// The plan every process used (process 0's).
  SplitDeviceMap split_map;
  PipelineStages stages{nullptr};
};

/// load_pretrained_causal_lm across the processes of `state`: every process gathers the budgets,
/// process 0's plan is shared, each process loads and dispatches its own blocks (the checkpoint
/// folder is read where each process runs: shared or replicated) and the stage hooks go on. Every
/// process must call it. `o.device_map` must be unset (the split map places the model).
///
/// With `o.quantizer` the plan sizes the weights as they will be held (the quantizer's layers swapped
/// on the meta model first, dispatch::planned_sizes), each process quantizes or reads the quantized
/// state of its own blocks only, and another process's quantized layers compute shapes on meta.
template <class D>
SplitModel load_pretrained_split(const PartialState<D>& state, const std::filesystem::path& folder,
                                 dispatch::LoadPretrainedOptions o, SplitLoadOptions so = {}) {
  if (o.device_map) throw ValueError("load_pretrained_split: the split map places the model; leave device_map unset");
  const bool gguf = dispatch::is_gguf_model(folder);
  const nlohmann::json config = dispatch::read_model_config(folder);
  const DType dtype = dispatch::load_dtype(config, (gguf ? folder : folder / "config.json").string(), o);
  o.dtype = dtype;
  SplitModel out;
  if (so.split_map) {
    out.split_map = *so.split_map;
  } else {
    std::shared_ptr<models::CausalLM> meta;
    {
      auto guard = nn::init_empty_weights(/*include_buffers=*/false);
      meta = models::causal_lm_from_hf_config(config, dtype);
    }
    if (o.quantizer) o.quantizer->preprocess_model(meta->module(), io::resolve_checkpoint_files(dispatch::checkpoint_of(folder)));
    plan::MaxMemory mine = so.max_memory ? *so.max_memory : o.max_memory ? *o.max_memory : plan::get_max_memory();
    mine = plan::get_max_memory(mine);
    if (o.quantizer) mine = o.quantizer->adjust_max_memory(std::move(mine));
    for (const auto& [k, r] : o.reserve) mine.reserve(k, r);
    const std::vector<plan::MaxMemory> budgets = gather_max_memory(state, mine);
    SplitPlanOptions po = so.plan;
    if (po.infer.no_split_module_classes.empty()) po.infer.no_split_module_classes = meta->module().no_split_modules();
    if (!po.infer.sizes.dtype) po.infer.sizes = dispatch::planned_sizes(meta->module(), dtype, o);
    // Every process plans from the same budgets; process 0's plan is the one used, so no
    // difference in floating-point sums between hosts can split the processes' views.
    std::string plan_json;
    if (state.process_index() == 0) plan_json = to_json(infer_split_device_map(meta->module(), budgets, po)).dump();
    broadcast_object_list(state, plan_json, 0);
    out.split_map = split_device_map_from_json(nlohmann::ordered_json::parse(plan_json));
  }
  o.device_map = out.split_map.local(state.process_index());
  o.max_memory.reset();
  out.model = dispatch::load_pretrained_causal_lm(folder, o);
  out.stages = attach_pipeline_hooks(state, out.model.model->module(), out.split_map);
  return out;
}

}  // namespace accel::dist
