// Accelerate's kwargs handlers and plugins (utils/dataclasses.py) with its fields and defaults.
//
//   AutocastKwargs                 -> AutocastScope (utils/autocast.hpp)
//   GradScalerKwargs               -> DynamicLossScaler (utils/loss_scaler.hpp)
//   GradientAccumulationPlugin     -> GradientAccumulator (utils/gradient_accumulation.hpp)
//   DistributedDataParallelKwargs, InitProcessGroupKwargs   read by the dist layer
//   FP8RecipeKwargs, TorchDynamoPlugin                      kept for config compatibility
//   ProjectConfiguration           project / logging directories, checkpoint naming
//
// Accelerate entries with no C++ counterpart, deliberately absent:
//   DeepSpeedPlugin: DeepSpeed is a Python training engine; no C++ meaning.
//   MegatronLMPlugin: Megatron-LM is a Python engine; no C++ meaning.
//   FullyShardedDataParallelPlugin: torch FSDP; no C++ meaning (the dist layer shards by DeviceMap).
//   SageMaker settings: a hosted Python launcher; no C++ meaning (enums kept for config files).
//   XLA / TPU: no C++ backend here; no C++ meaning.
//   IPEX (Intel Extension for PyTorch): a torch plugin; no C++ meaning (oneDNN is used directly).
//   MPS (Apple GPUs): no backend here; no C++ meaning.
//   NPU / MLU / XPU / HPU / MUSA / SDAA / Neuron: no backend here; no C++ meaning.
//
// validate() throws ValueError naming the field, the value and what is allowed; the structs are
// aggregates, so `GradScalerKwargs{.init_scale = 1024}` reads like Accelerate's keyword arguments.
//
// Each struct names its fields once (fields(), Accelerate's names and order), and
// utils/dataclass_fields.hpp turns that table into Accelerate's spellings:
//   to_json(s)                      {"init_scale": 65536.0, ...}; enums as their string values
//   to_kwargs(s)                    Accelerate's KwargsHandler subclasses (all but ProjectConfiguration):
//                                   only the fields that differ from S{}
//   dataclass_from_json<S>(j), parse_dataclass<S>(text)
//                                   unknown key -> UnknownFieldError, wrong type -> FieldTypeError,
//                                   then post_init() and validate()
//   repr(s), os << s                GradScalerKwargs(init_scale=65536.0, growth_factor=2.0, ...)
// A timedelta (InitProcessGroupKwargs::timeout) is whole seconds in JSON; a Python dict is a JSON object.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/utils/dataclass_fields.hpp"
#include "accel/utils/enums.hpp"

namespace accel::utils {

/// How autocast behaves: `enabled` turns the compute-dtype scope on; `cache_enabled` is torch's
/// weight-cast cache, with no C++ meaning (casts are not cached), kept for config files.
struct AutocastKwargs {
  bool enabled = true;
  std::optional<bool> cache_enabled = std::nullopt;

  static constexpr auto fields() {
    using S = AutocastKwargs;
    return kwargs_handler_table("AutocastKwargs", field("enabled", &S::enabled),
                                field("cache_enabled", &S::cache_enabled));
  }
  friend bool operator==(const AutocastKwargs&, const AutocastKwargs&) = default;
};

/// DistributedDataParallel options. dim / bucket_cap_mb / comm_hook matter to the dist layer's
/// gradient all-reduce; the rest describe torch's DDP wrapper and are kept for config files.
struct DistributedDataParallelKwargs {
  int dim = 0;
  bool broadcast_buffers = true;
  int bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool check_reduction = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  DDPCommunicationHookType comm_hook = DDPCommunicationHookType::no;
  /// Only no / fp16 / bf16 are valid wrappers.
  DDPCommunicationHookType comm_wrapper = DDPCommunicationHookType::no;
  /// The hook's state arguments, a Python dict (`{"matrix_approximation_rank": 2}`): a JSON object.
  nlohmann::json comm_state_option = nlohmann::json::object();

  /// Accelerate's to_dict leaves the comm_* fields out of the kwargs: they configure the hook, not DDP.
  static constexpr auto fields() {
    using S = DistributedDataParallelKwargs;
    constexpr field_flags hook{.in_kwargs = false};
    return kwargs_handler_table(
        "DistributedDataParallelKwargs", field("dim", &S::dim), field("broadcast_buffers", &S::broadcast_buffers),
        field("bucket_cap_mb", &S::bucket_cap_mb), field("find_unused_parameters", &S::find_unused_parameters),
        field("check_reduction", &S::check_reduction), field("gradient_as_bucket_view", &S::gradient_as_bucket_view),
        field("static_graph", &S::static_graph), field("comm_hook", &S::comm_hook, hook),
        field("comm_wrapper", &S::comm_wrapper, hook), field("comm_state_option", &S::comm_state_option, hook));
  }
  friend bool operator==(const DistributedDataParallelKwargs&, const DistributedDataParallelKwargs&) = default;

  void validate() const {
    if (bucket_cap_mb <= 0) {
      throw ValueError("DistributedDataParallelKwargs: bucket_cap_mb must be > 0, got " + std::to_string(bucket_cap_mb));
    }
    if (comm_wrapper != DDPCommunicationHookType::no && comm_wrapper != DDPCommunicationHookType::fp16 &&
        comm_wrapper != DDPCommunicationHookType::bf16) {
      throw ValueError("DistributedDataParallelKwargs: comm_wrapper must be one of no, fp16, bf16, got " +
                       std::string(to_string(comm_wrapper)));
    }
  }
};

/// FP8 recipe (Transformer Engine / MS-AMP): no C++ meaning beyond fp8 storage, kept with
/// Accelerate's defaults (those it reads from ACCELERATE_FP8_* when unset) for config files.
struct FP8RecipeKwargs {
  std::string backend = "TE";  ///< "TE" or "MSAMP"
  bool use_autocast_during_eval = false;
  int margin = 0;
  int interval = 1;
  std::string fp8_format = "HYBRID";  ///< "HYBRID", "E4M3" or "E5M2"
  int amax_history_len = 1024;
  std::string amax_compute_algo = "most_recent";  ///< "max" or "most_recent"
  std::array<bool, 3> override_linear_precision = {false, false, false};
  std::string opt_level = "O2";  ///< MS-AMP: "O1" or "O2"

  static constexpr auto fields() {
    using S = FP8RecipeKwargs;
    return kwargs_handler_table(
        "FP8RecipeKwargs", field("backend", &S::backend),
        field("use_autocast_during_eval", &S::use_autocast_during_eval), field("opt_level", &S::opt_level),
        field("margin", &S::margin), field("interval", &S::interval), field("fp8_format", &S::fp8_format),
        field("amax_history_len", &S::amax_history_len), field("amax_compute_algo", &S::amax_compute_algo),
        field("override_linear_precision", &S::override_linear_precision));
  }
  friend bool operator==(const FP8RecipeKwargs&, const FP8RecipeKwargs&) = default;

  void validate() const {
    auto one_of = [](const std::string& field, const std::string& v, std::initializer_list<const char*> ok) {
      std::string list;
      for (const char* o : ok) {
        if (v == o) return;
        list += (list.empty() ? "" : " or ") + std::string(o);
      }
      throw ValueError("FP8RecipeKwargs: `" + field + "` must be one of " + list + ", got '" + v + "'");
    };
    one_of("backend", backend, {"TE", "MSAMP"});
    one_of("fp8_format", fp8_format, {"HYBRID", "E4M3", "E5M2"});
    one_of("amax_compute_algo", amax_compute_algo, {"max", "most_recent"});
    one_of("opt_level", opt_level, {"O1", "O2"});
    if (interval < 1) throw ValueError("FP8RecipeKwargs: interval must be >= 1, got " + std::to_string(interval));
    if (amax_history_len < 1) {
      throw ValueError("FP8RecipeKwargs: amax_history_len must be >= 1, got " + std::to_string(amax_history_len));
    }
  }
};

/// Dynamic loss scaling, as torch's GradScaler (drives DynamicLossScaler).
struct GradScalerKwargs {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
  bool enabled = true;

  static constexpr auto fields() {
    using S = GradScalerKwargs;
    return kwargs_handler_table("GradScalerKwargs", field("init_scale", &S::init_scale),
                                field("growth_factor", &S::growth_factor), field("backoff_factor", &S::backoff_factor),
                                field("growth_interval", &S::growth_interval), field("enabled", &S::enabled));
  }
  friend bool operator==(const GradScalerKwargs&, const GradScalerKwargs&) = default;

  void validate() const {
    if (!(init_scale > 0)) throw ValueError("GradScalerKwargs: init_scale must be > 0, got " + std::to_string(init_scale));
    if (!(growth_factor > 1.0)) {
      throw ValueError("GradScalerKwargs: growth_factor must be > 1, got " + std::to_string(growth_factor));
    }
    if (!(backoff_factor > 0.0 && backoff_factor < 1.0)) {
      throw ValueError("GradScalerKwargs: backoff_factor must be in (0, 1), got " + std::to_string(backoff_factor));
    }
    if (growth_interval < 1) {
      throw ValueError("GradScalerKwargs: growth_interval must be >= 1, got " + std::to_string(growth_interval));
    }
  }
};

/// Process-group initialisation. An unset timeout resolves to 600 s for "nccl", 1800 s otherwise.
struct InitProcessGroupKwargs {
  std::optional<std::string> backend = "nccl";  ///< "nccl" or "mpi" here ("gloo" has no C++ meaning)
  std::optional<std::string> init_method = std::nullopt;
  std::optional<std::chrono::seconds> timeout = std::nullopt;

  static constexpr auto fields() {
    using S = InitProcessGroupKwargs;
    return kwargs_handler_table("InitProcessGroupKwargs", field("backend", &S::backend),
                                field("init_method", &S::init_method), field("timeout", &S::timeout));
  }
  friend bool operator==(const InitProcessGroupKwargs&, const InitProcessGroupKwargs&) = default;

  /// The timeout in effect.
  std::chrono::seconds resolved_timeout() const {
    if (timeout) return *timeout;
    return std::chrono::seconds(backend && *backend == "nccl" ? 600 : 1800);
  }
  void validate() const {
    if (timeout && timeout->count() <= 0) {
      throw ValueError("InitProcessGroupKwargs: timeout must be positive, got " + std::to_string(timeout->count()) + " s");
    }
  }
};

/// Gradient accumulation (drives GradientAccumulator). num_steps is required (>= 1).
struct GradientAccumulationPlugin {
  std::optional<int> num_steps = std::nullopt;
  bool adjust_scheduler = true;
  bool sync_with_dataloader = true;
  bool sync_each_batch = false;

  static constexpr auto fields() {
    using S = GradientAccumulationPlugin;
    return kwargs_handler_table("GradientAccumulationPlugin", field("num_steps", &S::num_steps),
                                field("adjust_scheduler", &S::adjust_scheduler),
                                field("sync_with_dataloader", &S::sync_with_dataloader),
                                field("sync_each_batch", &S::sync_each_batch));
  }
  friend bool operator==(const GradientAccumulationPlugin&, const GradientAccumulationPlugin&) = default;

  void validate() const {
    if (!num_steps) throw ValueError("GradientAccumulationPlugin: num_steps is required");
    if (*num_steps < 1) {
      throw ValueError("GradientAccumulationPlugin: num_steps must be >= 1, got " + std::to_string(*num_steps));
    }
  }
};

/// torch.compile settings: no C++ meaning (nothing is graph-compiled); kept for config files.
/// from_env() reads ACCELERATE_DYNAMO_BACKEND / _MODE / _USE_FULLGRAPH as Accelerate does.
struct TorchDynamoPlugin {
  DynamoBackend backend = DynamoBackend::no;
  std::string mode = "default";
  bool fullgraph = false;
  std::optional<bool> dynamic = std::nullopt;
  /// torch.compile's options dict (`{"triton.cudagraphs": true}`), None when unset.
  std::optional<nlohmann::json> options = std::nullopt;
  bool disable = false;
  bool use_regional_compilation = false;

  /// Accelerate's to_dict spells the backend lower-case, the way torch.compile takes it.
  static constexpr auto fields() {
    using S = TorchDynamoPlugin;
    return kwargs_handler_table("TorchDynamoPlugin", field("backend", &S::backend, {.lower_case = true}),
                                field("mode", &S::mode), field("fullgraph", &S::fullgraph),
                                field("dynamic", &S::dynamic), field("options", &S::options),
                                field("disable", &S::disable),
                                field("use_regional_compilation", &S::use_regional_compilation));
  }
  friend bool operator==(const TorchDynamoPlugin&, const TorchDynamoPlugin&) = default;

  void validate() const {
    if (mode != "default" && mode != "reduce-overhead" && mode != "max-autotune") {
      throw ValueError("TorchDynamoPlugin: mode must be one of default, reduce-overhead, max-autotune, got '" + mode + "'");
    }
  }
  static TorchDynamoPlugin from_env() {
    TorchDynamoPlugin p;
    auto env = [](const char* k) -> std::optional<std::string> {
      const char* v = std::getenv(k);
      return v ? std::optional<std::string>(v) : std::nullopt;
    };
    if (auto b = env("ACCELERATE_DYNAMO_BACKEND")) p.backend = enum_from_string<DynamoBackend>(*b);
    if (auto m = env("ACCELERATE_DYNAMO_MODE")) p.mode = *m;
    auto flag = [](const std::string& s) { return s == "1" || s == "true" || s == "True" || s == "yes"; };
    if (auto f = env("ACCELERATE_DYNAMO_USE_FULLGRAPH")) p.fullgraph = flag(*f);
    if (auto d = env("ACCELERATE_DYNAMO_USE_DYNAMIC")) p.dynamic = flag(*d);
    if (auto r = env("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION")) p.use_regional_compilation = flag(*r);
    p.validate();
    return p;
  }
};

/// Where a project keeps its data and logs, and how saved states are named.
struct ProjectConfiguration {
  std::optional<std::string> project_dir = std::nullopt;
  /// Defaults to project_dir (set_directories fills it).
  std::optional<std::string> logging_dir = std::nullopt;
  bool automatic_checkpoint_naming = false;
  std::optional<int> total_limit = std::nullopt;
  int iteration = 0;
  bool save_on_each_node = false;

  static constexpr auto fields() {
    using S = ProjectConfiguration;
    return dataclass_table("ProjectConfiguration", field("project_dir", &S::project_dir),
                           field("logging_dir", &S::logging_dir),
                           field("automatic_checkpoint_naming", &S::automatic_checkpoint_naming),
                           field("total_limit", &S::total_limit), field("iteration", &S::iteration),
                           field("save_on_each_node", &S::save_on_each_node));
  }
  friend bool operator==(const ProjectConfiguration&, const ProjectConfiguration&) = default;

  /// Sets project_dir, and logging_dir to it when logging_dir is unset.
  void set_directories(std::optional<std::string> dir = std::nullopt) {
    project_dir = std::move(dir);
    if (!logging_dir) logging_dir = project_dir;
  }
  /// Accelerate's __post_init__, run when the object is read from JSON: logging_dir follows project_dir.
  void post_init() { set_directories(project_dir); }
  void validate() const {
    if (total_limit && *total_limit < 1) {
      throw ValueError("ProjectConfiguration: total_limit must be >= 1, got " + std::to_string(*total_limit));
    }
    if (iteration < 0) throw ValueError("ProjectConfiguration: iteration must be >= 0, got " + std::to_string(iteration));
    if (automatic_checkpoint_naming && !project_dir) {
      throw ValueError("ProjectConfiguration: automatic_checkpoint_naming needs a project_dir");
    }
  }
};

}  // namespace accel::utils

namespace accel {
using utils::AutocastKwargs, utils::DistributedDataParallelKwargs, utils::FP8RecipeKwargs,
    utils::GradientAccumulationPlugin, utils::GradScalerKwargs, utils::InitProcessGroupKwargs,
    utils::ProjectConfiguration, utils::TorchDynamoPlugin;
}  // namespace accel
