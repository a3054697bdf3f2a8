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
//
//   parse_estimate_request(args) -> EstimateRequest -> compute_estimate -> EstimateResult -> render_estimate
#pragma once

#include <algorithm>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/plan/module_sizes.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"

namespace accel::cli {

/// What `accel estimate-memory` was asked.
struct EstimateRequest {
  std::string model;                ///< MODEL as given
  std::vector<std::string> dtypes;  ///< rows, in order: float32, float16, bfloat16, int8, int4
  bool with_head = false;           ///< size a config.json as the causal LM instead of the base model
  bool json = false;
};

/// One row of the estimate, in bytes.
struct EstimateRow {
  std::string dtype;
  double largest = 0, total = 0, training = -1;  ///< training < 0: not applicable
};

/// What compute_estimate found.
struct EstimateResult {
  std::string model;                             ///< MODEL as given
  std::string class_name;                        ///< the class MODEL was built as
  std::vector<std::string> largest_layer_names;  ///< every layer of the largest size
  std::vector<EstimateRow> rows;
};

/// The command line of `accel estimate-memory` as an EstimateRequest.
inline EstimateRequest parse_estimate_request(const ParsedArgs& args) {
  EstimateRequest r;
  r.model = args.positional(0);
  r.dtypes = args.list("--dtypes").value_or(std::vector<std::string>{"float32", "float16", "bfloat16", "int8", "int4"});
  r.with_head = args.flag("--with-head");
  r.json = args.flag("--json");
  return r;
}

/// Loads MODEL (floats as float32, as Accelerate sizes it) and sizes it per requested dtype.
/// ValueError on a dtype the table has no row for.
inline EstimateResult compute_estimate(const EstimateRequest& req) {
  const auto kind = req.with_head ? models::HFModelKind::causal_lm : models::HFModelKind::base;
  // Sized from float32 weights, as Accelerate does; the int8 / int4 rows divide that.
  auto model = load_cli_model(req.model, DType::f32, kind);
  const auto base = plan::calculate_maximum_sizes(*model);
  const double fp32 = base.total_size.bytes();
  EstimateResult out{req.model, model->class_name(), base.largest_layer.layer_names, {}};
  for (const auto& d : req.dtypes) {
    EstimateRow r{d, base.largest_layer.max_size.bytes(), fp32};
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
    out.rows.push_back(r);
  }
  return out;
}

/// Writes the estimate to `out`: exact bytes as JSON, or Accelerate's table and the largest layer.
inline void render_estimate(const EstimateResult& e, bool json, std::ostream& out) {
  const auto& names = e.largest_layer_names;
  if (json) {
    nlohmann::ordered_json j;
    j["model"] = e.model;
    j["class"] = e.class_name;
    j["largest_layer_names"] = names;
    j["rows"] = nlohmann::ordered_json::array();
    for (const auto& r : e.rows) {
      nlohmann::ordered_json row;
      row["dtype"] = r.dtype;
      row["largest_layer"] = json_bytes(r.largest);
      row["total_size"] = json_bytes(r.total);
      row["training_adam"] = r.training < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(json_bytes(r.training));
      j["rows"].push_back(row);
    }
    out << dump_json(j, 1) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> table;
  for (const auto& r : e.rows) {
    table.push_back({r.dtype, human_bytes(r.largest), human_bytes(r.total), r.training < 0 ? "N/A" : human_bytes(r.training)});
  }
  // Names come from files: escaped, so a NUL or an escape sequence in a tensor name never reaches the terminal.
  out << "Memory usage for loading `" << io::printable_entry(e.model) << "` (" << io::printable_entry(e.class_name)
      << ")\n";
  print_table(out, {"dtype", "Largest Layer", "Total Size", "Training using Adam"}, table);
  out << "Largest layer: ";
  out << (names.empty() ? std::string("(none)") : (names[0].empty() ? std::string("(the whole model)") : io::printable_entry(names[0])));
  if (names.size() > 1) out << " (and " << names.size() - 1 << " more of the same size)";
  out << "\n";
}

/// `accel estimate-memory`: parse, compute, render.
inline int run_estimate_memory(const ParsedArgs& args) {
  const EstimateRequest r = parse_estimate_request(args);
  render_estimate(compute_estimate(r), r.json, std::cout);
  return exit_ok;
}

/// The `accel estimate-memory` entry of the command table.
inline Command estimate_memory_command() {
  return {
      .name = "estimate-memory",
      .summary = "sizes of MODEL per dtype, like `accelerate estimate-memory`",
      .usage = "MODEL [--dtypes float32,float16,bfloat16,int8,int4] [--with-head] [--json]",
      .positionals = {{"MODEL",
                       "a transformers config.json, a model spec JSON, a checkpoint\n"
                       "(.safetensors, .bin, a sharded *.index.json) or a folder of one"}},
      .options =
          {
              {.name = "--dtypes",
               .placeholder = "DTYPE,...",
               .help = "the rows, from float32, float16, bfloat16, int8, int4\n(default: all five)",
               .repeatable = true},
              {.name = "--with-head", .help = "size a config.json as the causal LM (with lm_head)"},
              {.name = "--json", .help = "exact byte counts instead of the table"},
          },
      .details = "Prints the largest layer, the total size and the memory of training with Adam. A\n"
                 "config.json is sized as its base model (GPT2Model, LlamaModel), as Accelerate does.\n"
                 "Adam training is 4x the float32 size in float32, 2x in float16 / bfloat16.",
      .run = run_estimate_memory,
  };
}

}  // namespace accel::cli
