// accel estimate-memory MODEL [--dtypes float32,float16,bfloat16,int8,int4] [--with-head] [--json]
//
// Like `accelerate estimate-memory`: the size of the largest layer, the total size, and the peak
// of training with Adam per dtype. The training column is Accelerate's estimate_training_usage:
// float32 4x the float32 model (weights, gradients, two Adam moments), float16 / bfloat16 mixed
// precision 2x the float32 model (its largest term, the Adam moments); int8 / int4 "N/A".
//
// A config.json is built as transformers' AutoModel (GPT2Model, LlamaModel: no LM head), the
// class Accelerate sizes; --with-head builds the causal LM instead (GPT2LMHeadModel,
// LlamaForCausalLM: what a checkpoint holds and `accel plan` places). Sizes count buffers, as
// Accelerate's compute_module_sizes does. Differences from Accelerate: bfloat16 is halved like
// float16 (Accelerate prints bfloat16 at float32 size), and the float16 / bfloat16 rows do not
// halve what a cast leaves alone (bool and integer buffers such as GPT-2's attn.bias), by
// compute_module_sizes' dtype rule. A checkpoint's floating-point tensors are counted as float32
// whatever their stored dtype, so its rows read like a config's.
#pragma once

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/plan/module_sizes.hpp"
#include "cli_common.hpp"

namespace accel::cli {

inline int run_estimate_memory(int argc, char** argv) {
  const CliArgs args(argc, argv, 2, {"--with-head", "--json"});
  const auto unknown = args.unknown({"--dtypes", "--with-head", "--json"});
  if (args.positionals().size() != 1 || !unknown.empty()) {
    std::cerr << "usage: accel estimate-memory MODEL [--dtypes float32,float16,bfloat16,int8,int4] [--with-head] [--json]\n"
                 "  MODEL: a transformers config.json, a model spec JSON, a checkpoint (.safetensors, .bin or\n"
                 "         a sharded *.index.json), or a folder holding one of them\n"
                 "  a config.json is sized as its base model (GPT2Model, LlamaModel), as `accelerate\n"
                 "  estimate-memory` does; --with-head sizes the causal LM (with lm_head) instead\n"
                 "  --json: exact byte counts instead of the table\n";
    for (const auto& u : unknown) std::cerr << "unknown option " << u << "\n";
    return 2;
  }
  const std::string path = args.positionals()[0];
  const auto kind = args.flag("--with-head") ? nn::HFModelKind::causal_lm : nn::HFModelKind::base;
  // Sized from float32 weights, as Accelerate does; the int8 / int4 rows divide that.
  auto model = load_cli_model(path, DType::f32, kind);
  const auto dtypes = split_list(args.option("--dtypes").value_or("float32,float16,bfloat16,int8,int4"));
  const auto base = plan::calculate_maximum_sizes(*model);
  const double fp32 = base.total_size.bytes();
  struct Row {
    std::string dtype;
    double largest = 0, total = 0, training = -1;  // training < 0: not applicable
  };
  std::vector<Row> rows;
  for (const auto& d : dtypes) {
    Row r{d, base.largest_layer.max_size.bytes(), fp32};
    if (d == "float32") {
      r.training = fp32 * 4;
    } else if (d == "float16" || d == "bfloat16") {
      plan::SizeOptions o;
      o.dtype = dtype_from_string(d);
      const auto sizes = plan::compute_module_sizes(*model, o);
      r.total = sizes[""].bytes();
      double biggest = 0;
      for (const auto& n : base.largest_layer.layer_names) biggest = std::max(biggest, sizes[n].bytes());
      r.largest = biggest;
      r.training = fp32 * 2;
    } else if (d == "int8") {
      r.total /= 4, r.largest /= 4;
    } else if (d == "int4") {
      r.total /= 8, r.largest /= 8;
    } else {
      throw ValueError("estimate-memory: unknown dtype '" + d + "' (float32, float16, bfloat16, int8, int4)");
    }
    rows.push_back(r);
  }
  const auto& names = base.largest_layer.layer_names;
  if (args.flag("--json")) {
    nlohmann::ordered_json out;
    out["model"] = path;
    out["class"] = model->class_name();
    out["largest_layer_names"] = names;
    out["rows"] = nlohmann::ordered_json::array();
    for (const auto& r : rows) {
      nlohmann::ordered_json row;
      row["dtype"] = r.dtype;
      row["largest_layer"] = r.largest;
      row["total_size"] = r.total;
      row["training_adam"] = r.training < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.training);
      out["rows"].push_back(row);
    }
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows) {
    table.push_back({r.dtype, human_bytes(r.largest), human_bytes(r.total), r.training < 0 ? "N/A" : human_bytes(r.training)});
  }
  std::cout << "Memory usage for loading `" << path << "` (" << model->class_name() << ")\n";
  print_table(std::cout, {"dtype", "Largest Layer", "Total Size", "Training using Adam"}, table);
  std::cout << "Largest layer: ";
  std::cout << (names.empty() ? std::string("(none)") : (names[0].empty() ? std::string("(the whole model)") : names[0]));
  if (names.size() > 1) std::cout << " (and " << names.size() - 1 << " more of the same size)";
  std::cout << "\n";
  return 0;
}

}  // namespace accel::cli
