// Accelerate's string enums, with its exact string values:
//
//   ComputeEnvironment DistributedType DynamoBackend LoggerType PrecisionType RNGType
//   SageMakerDistributedType DDPCommunicationHookType FP8BackendType
//   enum_from_string<E>(s)   exact value first, then case-insensitively; ValueError lists the valid values
//   to_string(e)             Accelerate's value ("MULTI_GPU", "bf16")
//
// One table per enum (enum_table<E>) drives parsing, printing and JSON.
#pragma once

#include <array>
#include <cctype>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "accel/core/errors.hpp"
#include "accel/policy/distributed.hpp"
#include "accel/policy/precision.hpp"

namespace accel::utils {

/// Where the program runs.
enum class ComputeEnvironment : std::uint8_t {
  local_machine,
  amazon_sagemaker,  ///< SageMaker: no C++ meaning; kept so config files parse.
};

/// The kind of distributed run: the policy layer's enum (policy/distributed.hpp), which the
/// distributed tags carry and the dist layer reports; utils adds its parsing and JSON.
using DistributedType = policy::DistributedType;

/// torch.compile backends: no C++ meaning (there is no graph compiler); kept for config files.
enum class DynamoBackend : std::uint8_t {
  no,
  eager,
  aot_eager,
  inductor,
  aot_ts_nvfuser,
  nvprims_nvfuser,
  cudagraphs,
  ofi,
  fx2trt,
  onnxrt,
  tensorrt,
  aot_torchxla_trace_once,
  torchxla_trace_once,
  tvm,
  hpu_backend,
  neuron,
};

/// Experiment trackers: Python integrations, no C++ meaning; kept for config files.
enum class LoggerType : std::uint8_t { all, aim, tensorboard, wandb, trackio, comet_ml, mlflow, clearml, dvclive, swanlab };

/// Mixed precision of a run: the policy layer's enum, which each precision tag carries;
/// precision_dtype() (utils/precision.hpp) maps it to a DType, with_precision to a tag.
using PrecisionType = policy::PrecisionType;

/// Random generators that synchronize_rng_state knows.
enum class RNGType : std::uint8_t {
  torch,      ///< the CPU generator (default_generator())
  cuda,       ///< the CUDA generators' state (ACCEL_WITH_CUDA)
  mlu,        ///< no C++ meaning here.
  sdaa,       ///< no C++ meaning here.
  musa,       ///< no C++ meaning here.
  npu,        ///< no C++ meaning here.
  xla,        ///< no C++ meaning here.
  xpu,        ///< no C++ meaning here.
  hpu,        ///< no C++ meaning here.
  neuron,     ///< no C++ meaning here.
  generator,  ///< a user generator passed explicitly
};

/// SageMaker's distribution modes: no C++ meaning; kept for config files.
enum class SageMakerDistributedType : std::uint8_t { no, data_parallel, model_parallel };

/// DDP gradient-communication hooks; the dist layer's all-reduce may compress to fp16 / bf16.
enum class DDPCommunicationHookType : std::uint8_t { no, fp16, bf16, power_sgd, batched_power_sgd };

/// FP8 training engines (Transformer Engine, MS-AMP, torchao): no C++ meaning; kept for configs.
enum class FP8BackendType : std::uint8_t { no, te, msamp, ao };

/// Name and values of an enum, in enumerator order.
template <class E>
struct enum_table;

#define ACCEL_ENUM_TABLE(E, ...)                                                   \
  template <>                                                                      \
  struct enum_table<E> {                                                           \
    static constexpr std::string_view name = #E;                                   \
    static constexpr std::string_view values[] = {__VA_ARGS__};                    \
  };
ACCEL_ENUM_TABLE(ComputeEnvironment, "LOCAL_MACHINE", "AMAZON_SAGEMAKER")
ACCEL_ENUM_TABLE(DynamoBackend, "NO", "EAGER", "AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER", "NVPRIMS_NVFUSER",
                 "CUDAGRAPHS", "OFI", "FX2TRT", "ONNXRT", "TENSORRT", "AOT_TORCHXLA_TRACE_ONCE",
                 "TORCHXLA_TRACE_ONCE", "TVM", "HPU_BACKEND", "NEURON")
ACCEL_ENUM_TABLE(LoggerType, "all", "aim", "tensorboard", "wandb", "trackio", "comet_ml", "mlflow", "clearml",
                 "dvclive", "swanlab")
ACCEL_ENUM_TABLE(RNGType, "torch", "cuda", "mlu", "sdaa", "musa", "npu", "xla", "xpu", "hpu", "neuron",
                 "generator")
ACCEL_ENUM_TABLE(SageMakerDistributedType, "NO", "DATA_PARALLEL", "MODEL_PARALLEL")
ACCEL_ENUM_TABLE(DDPCommunicationHookType, "no", "fp16", "bf16", "power_sgd", "batched_power_sgd")
ACCEL_ENUM_TABLE(FP8BackendType, "NO", "TE", "MSAMP", "AO")
#undef ACCEL_ENUM_TABLE

// DistributedType's and PrecisionType's values are the policy layer's tables, so the two
// spellings cannot drift apart.
template <>
struct enum_table<PrecisionType> {
  static constexpr std::string_view name = "PrecisionType";
  static constexpr const auto& values = policy::precision_type_names;
};
template <>
struct enum_table<DistributedType> {
  static constexpr std::string_view name = "DistributedType";
  static constexpr const auto& values = policy::distributed_type_names;
};

template <class E>
concept AccelerateEnum = requires { enum_table<E>::values; };

/// Accelerate's string value of `e`.
template <AccelerateEnum E>
constexpr std::string_view to_string(E e) {
  const auto i = static_cast<std::size_t>(e);
  const auto& v = enum_table<E>::values;
  return i < std::size(v) ? v[i] : std::string_view("?");
}

/// Every valid value of E, comma separated (for messages).
template <AccelerateEnum E>
std::string valid_values() {
  std::string s;
  for (auto v : enum_table<E>::values) s += (s.empty() ? "" : ", ") + std::string(v);
  return s;
}

/// Parses Accelerate's value (case-insensitively after an exact miss); ValueError lists the valid ones.
template <AccelerateEnum E>
E enum_from_string(std::string_view s) {
  const auto& v = enum_table<E>::values;
  for (std::size_t i = 0; i < std::size(v); ++i) {
    if (v[i] == s) return static_cast<E>(i);
  }
  auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  for (std::size_t i = 0; i < std::size(v); ++i) {
    if (v[i].size() != s.size()) continue;
    bool eq = true;
    for (std::size_t j = 0; eq && j < s.size(); ++j) eq = lower(v[i][j]) == lower(s[j]);
    if (eq) return static_cast<E>(i);
  }
  throw ValueError("'" + std::string(s) + "' is not a valid " + std::string(enum_table<E>::name) +
                   "; valid values: " + valid_values<E>());
}

template <AccelerateEnum E>
std::ostream& operator<<(std::ostream& os, E e) {
  return os << to_string(e);
}

}  // namespace accel::utils

namespace accel {
using utils::ComputeEnvironment, utils::DistributedType, utils::DynamoBackend, utils::enum_from_string,
    utils::LoggerType, utils::PrecisionType, utils::RNGType, utils::SageMakerDistributedType;
}  // namespace accel
