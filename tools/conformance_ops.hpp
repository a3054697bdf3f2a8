// The operations of the Accelerate conformance query format, answered through accel's public API.
//
//   nlohmann::ordered_json run_case(model, case_json)   {"id", "result"} or {"id", "error": {type, message}}
//
// Argument conventions (max_memory keys, dtype names, ...) are those of
// shared/conformance/README.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/byte_size.hpp"
#include "accel/core/errors.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/tied.hpp"
#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/shard_checkpoint.hpp"

namespace accel::tools {

using ojson = nlohmann::ordered_json;

/// Raised for `max_memory: null`: answering would mean probing this machine.
class HardwareProbeError : public Error {
 public:
  using Error::Error;
};

/// A size as JSON: an integer when whole, else the exact decimal.
inline ojson size_json(ByteSize b) {
  if (b.is_whole()) return b.floor_bytes();
  return b.bytes();
}

inline const char* error_type(const std::exception& e) {
  if (dynamic_cast<const HardwareProbeError*>(&e)) return "HardwareProbeError";
  if (dynamic_cast<const ValueError*>(&e)) return "ValueError";
  if (dynamic_cast<const KeyError*>(&e)) return "KeyError";
  if (dynamic_cast<const DTypeError*>(&e)) return "TypeError";
  if (dynamic_cast<const DeviceError*>(&e)) return "DeviceError";
  if (dynamic_cast<const ShapeError*>(&e)) return "ShapeError";
  if (dynamic_cast<const FormatError*>(&e)) return "FormatError";
  if (dynamic_cast<const nlohmann::json::exception*>(&e)) return "TypeError";
  return "Error";
}

inline ojson error_json(const std::exception& e) { return ojson{{"type", error_type(e)}, {"message", e.what()}}; }

inline std::int64_t size_arg(const ojson& v, const std::string& what) {
  if (v.is_number_integer()) return convert_file_size_to_int(v.get<std::int64_t>());
  if (v.is_string()) return convert_file_size_to_int(v.get<std::string>());
  throw ValueError(what + ": expected an integer or a size string, got " + v.dump());
}

inline plan::MaxMemory max_memory_arg(const ojson& args) {
  if (!args.contains("max_memory") || args["max_memory"].is_null()) {
    throw HardwareProbeError("max_memory is null: accelerate would probe this machine's memory");
  }
  const auto& j = args["max_memory"];
  if (!j.is_object()) throw ValueError("max_memory must be an object, got " + j.dump());
  plan::MaxMemory mm;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const Placement key = plan::parse_memory_key(it.key());
    ByteSize v;
    if (it.value().is_number_float()) {
      v = ByteSize::from_bits(static_cast<std::int64_t>(it.value().get<double>() * 8));
    } else {
      v = ByteSize(size_arg(it.value(), "max_memory[" + it.key() + "]"));
    }
    mm.insert(key, v);
  }
  return mm;
}

inline plan::SizeOptions size_options_arg(const ojson& args) {
  plan::SizeOptions o;
  if (args.contains("dtype") && !args["dtype"].is_null()) o.dtype = dtype_from_string(args["dtype"].get<std::string>());
  if (args.contains("special_dtypes") && !args["special_dtypes"].is_null()) {
    for (auto it = args["special_dtypes"].begin(); it != args["special_dtypes"].end(); ++it) {
      o.special_dtypes[it.key()] = dtype_from_string(it.value().get<std::string>());
    }
  }
  return o;
}

inline std::vector<std::string> no_split_arg(const ojson& args) {
  std::vector<std::string> out;
  if (!args.contains("no_split_module_classes")) return out;
  const auto& j = args["no_split_module_classes"];
  if (j.is_string()) {
    out.push_back(j.get<std::string>());
  } else if (j.is_array()) {
    for (const auto& c : j) out.push_back(c.get<std::string>());
  } else if (!j.is_null()) {
    throw ValueError("no_split_module_classes: expected a list of class names or a string");
  }
  return out;
}

inline bool bool_arg(const ojson& args, const char* key, bool fallback) {
  return args.contains(key) && !args[key].is_null() ? args[key].get<bool>() : fallback;
}

inline ojson memory_json(const plan::MaxMemory& mm) {
  ojson j = ojson::object();
  for (const auto& [k, v] : mm) j[k.str()] = size_json(v);
  return j;
}

inline ojson max_layer_json(const plan::MaxLayer& m) {
  return ojson{{"max_size", size_json(m.max_size)}, {"layer_names", m.layer_names}};
}

inline plan::InferOptions infer_options_arg(const ojson& args) {
  plan::InferOptions o;
  o.no_split_module_classes = no_split_arg(args);
  o.sizes = size_options_arg(args);
  o.clean_result = bool_arg(args, "clean_result", true);
  o.offload_buffers = bool_arg(args, "offload_buffers", false);
  o.fallback_allocation = bool_arg(args, "fallback_allocation", false);
  o.verbose = bool_arg(args, "verbose", false);
  return o;
}

inline std::vector<plan::ShardTensor> shard_tensors_arg(const ojson& list, std::vector<int>& ids) {
  std::vector<plan::ShardTensor> out;
  ids.assign(list.size() + 1, 0);  // stable addresses serve as storage identities
  std::map<std::string, const void*> storage_of;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    plan::ShardTensor s;
    s.name = t.at("name").get<std::string>();
    if (t.contains("same_storage_as")) {
      const auto other = t["same_storage_as"].get<std::string>();
      auto it = storage_of.find(other);
      if (it == storage_of.end()) throw KeyError("tensors[" + std::to_string(i) + "]: no earlier tensor '" + other + "'");
      for (const auto& prev : out) {
        if (prev.name == other) {
          s.dtype = prev.dtype;
          s.shape = prev.shape;
        }
      }
      s.storage = it->second;
    } else {
      s.dtype = t.contains("dtype") ? dtype_from_string(t["dtype"].get<std::string>()) : DType::f32;
      s.shape = Shape(t.at("shape").get<std::vector<std::int64_t>>());
      s.storage = &ids[i];
    }
    storage_of[s.name] = s.storage;
    out.push_back(std::move(s));
  }
  return out;
}

inline ojson shard_json(const plan::ShardPlan& p) {
  ojson shards = ojson::object();
  for (const auto& [file, keys] : p.shards) shards[file] = keys;
  ojson index = nullptr;
  if (p.index) {
    ojson wm = ojson::object();
    for (const auto& [k, f] : p.index->weight_map) wm[k] = f;
    index = ojson{{"metadata", {{"total_size", size_json(p.index->total_size)}}}, {"weight_map", wm}};
  }
  return ojson{{"shards", shards}, {"index", index}};
}

/// The result of one case (throws what the library throws).
inline ojson run_op(const nn::Module& model, const std::string& op, const ojson& args) {
  if (op == "compute_module_sizes") {
    ojson j = ojson::object();
    for (const auto& [n, s] : plan::compute_module_sizes(model, size_options_arg(args), bool_arg(args, "buffers_only", false))) {
      j[n] = size_json(s);
    }
    return j;
  }
  if (op == "compute_module_total_buffer_size") {
    return size_json(plan::compute_module_total_buffer_size(model, size_options_arg(args)));
  }
  if (op == "get_max_layer_size") {
    std::optional<std::vector<std::string>> modules;
    if (args.contains("modules") && !args["modules"].is_null()) modules = args["modules"].get<std::vector<std::string>>();
    return max_layer_json(plan::get_max_layer_size(model, modules, no_split_arg(args), size_options_arg(args)));
  }
  if (op == "infer_auto_device_map") {
    return plan::to_ordered_json(plan::infer_auto_device_map(model, max_memory_arg(args), infer_options_arg(args)));
  }
  if (op == "get_balanced_memory") {
    return memory_json(plan::get_balanced_memory(model, max_memory_arg(args), no_split_arg(args), size_options_arg(args),
                                                 bool_arg(args, "low_zero", false)));
  }
  if (op == "balanced_infer_auto_device_map") {
    const auto balanced = plan::get_balanced_memory(model, max_memory_arg(args), no_split_arg(args),
                                                    size_options_arg(args), bool_arg(args, "low_zero", false));
    return ojson{{"max_memory", memory_json(balanced)},
                 {"device_map", plan::to_ordered_json(plan::infer_auto_device_map(model, balanced, infer_options_arg(args)))}};
  }
  if (op == "get_max_memory") return memory_json(plan::get_max_memory(max_memory_arg(args)));
  if (op == "find_tied_parameters") return ojson(nn::find_tied_parameters(model));
  if (op == "calculate_maximum_sizes") {
    const auto r = plan::calculate_maximum_sizes(model);
    return ojson{{"total_size", size_json(r.total_size)}, {"largest_layer", max_layer_json(r.largest_layer)}};
  }
  if (op == "shard_checkpoint") {
    const std::int64_t limit = args.contains("max_shard_size") ? size_arg(args["max_shard_size"], "max_shard_size")
                                                                : convert_file_size_to_int("10GB");
    const std::string weights = args.contains("weights_name") ? args["weights_name"].get<std::string>() : "pytorch_model.bin";
    std::vector<int> ids;
    const auto tensors = args.contains("tensors") && !args["tensors"].is_null()
                             ? shard_tensors_arg(args["tensors"], ids)
                             : plan::shard_tensors_of(model);
    return shard_json(plan::shard_checkpoint(tensors, limit, weights));
  }
  if (op == "convert_file_size_to_int") {
    ojson out = ojson::array();
    for (const auto& in : args.at("inputs")) {
      ojson r{{"input", in}};
      try {
        if (in.is_boolean()) {
          r["value"] = in.get<bool>() ? 1 : 0;  // Python's bool is an int
        } else if (in.is_number_integer()) {
          r["value"] = convert_file_size_to_int(in.get<std::int64_t>());
        } else if (in.is_string()) {
          r["value"] = convert_file_size_to_int(in.get<std::string>());
        } else {
          // No C++ overload takes this JSON type; report the TypeError Python raises at the call.
          const char* py = in.is_number_float() ? "float" : in.is_null() ? "NoneType" : in.is_array() ? "list" : "dict";
          r["error"] = ojson{{"type", "AttributeError"}, {"message", std::string("'") + py + "' object has no attribute 'upper'"}};
        }
      } catch (const Error& e) {
        r["error"] = error_json(e);
      }
      out.push_back(r);
    }
    return out;
  }
  if (op == "dtype_byte_size") {
    ojson out = ojson::array();
    for (const auto& d : args.at("dtypes")) {
      ojson r{{"dtype", d}};
      try {
        r["value"] = size_json(dtype_byte_size(d.get<std::string>()));
      } catch (const Error& e) {
        r["error"] = error_json(e);
      }
      out.push_back(r);
    }
    return out;
  }
  if (op == "clean_device_map") {
    return plan::to_ordered_json(plan::clean_device_map(plan::device_map_from_json(args.at("device_map"))));
  }
  throw ValueError("unknown op '" + op + "'");
}

/// {"id", "result"} or {"id", "error"} for one case.
inline ojson run_case(const nn::Module* model, const ojson& c, const std::string& model_error) {
  ojson out{{"id", c.value("id", std::string{})}};
  try {
    const std::string op = c.at("op").get<std::string>();
    const ojson args = c.contains("args") && !c["args"].is_null() ? c["args"] : ojson::object();
    if (!model) throw FormatError(model_error);
    out["result"] = run_op(*model, op, args);
  } catch (const std::exception& e) {
    out["error"] = error_json(e);
  }
  return out;
}

}  // namespace accel::tools
