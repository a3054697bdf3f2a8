// accel estimate-memory MODEL [--dtypes float32,float16,bfloat16,int8,int4]
//
// Like `accelerate estimate-memory`: the size of the largest layer, the total size, and the peak
// of training with Adam (float32: 4x the model; float16/bfloat16 mixed precision: 2x) per dtype.
// Unlike Accelerate, bfloat16 is halved like float16, and float sizes never upcast tensors that
// are already smaller (compute_module_sizes' dtype rule). A checkpoint's floating-point tensors
// are counted as float32 whatever their stored dtype, so its rows read like a config's.
#pragma once

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "accel/plan/module_sizes.hpp"
#include "cli_common.hpp"

namespace accel::cli {

inline int run_estimate_memory(int argc, char** argv) {
  const CliArgs args(argc, argv, 2);
  if (args.positionals().size() != 1 || !args.unknown({"--dtypes"}).empty()) {
    std::cerr << "usage: accel estimate-memory MODEL [--dtypes float32,float16,bfloat16,int8,int4]\n"
                 "  MODEL: a transformers config.json, a model spec JSON, a checkpoint (.safetensors, .bin or\n"
                 "         a sharded *.index.json), or a folder holding one of them\n";
    return 2;
  }
  const std::string path = args.positionals()[0];
  // Sized from float32 weights, as Accelerate does; the int8 / int4 rows divide that.
  auto model = load_cli_model(path, DType::f32);
  const auto dtypes = split_list(args.option("--dtypes").value_or("float32,float16,bfloat16,int8,int4"));
  const auto base = plan::calculate_maximum_sizes(*model);
  const plan::ModelIndex index(*model);
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : dtypes) {
    double total = base.total_size.bytes(), largest = base.largest_layer.max_size.bytes();
    std::string training = "N/A";
    const double fp32 = total;
    if (d == "float16" || d == "bfloat16" || d == "float32" || d == "float64") {
      plan::SizeOptions o;
      o.dtype = dtype_from_string(d);
      const auto sizes = plan::compute_module_sizes(*model, o);
      total = sizes[""].bytes();
      double biggest = 0;
      for (const auto& n : base.largest_layer.layer_names) biggest = std::max(biggest, sizes[n].bytes());
      largest = biggest;
      if (d == "float32") training = human_bytes(fp32 * 4);
      if (d == "float16" || d == "bfloat16") training = human_bytes(fp32 * 2);
    } else if (d == "int8") {
      total /= 4, largest /= 4;
    } else if (d == "int4") {
      total /= 8, largest /= 8;
    } else {
      throw ValueError("estimate-memory: unknown dtype '" + d + "' (float32, float16, bfloat16, int8, int4)");
    }
    rows.push_back({d, human_bytes(largest), human_bytes(total), training});
  }
  std::cout << "Memory usage for loading `" << path << "`\n";
  print_table(std::cout, {"dtype", "Largest Layer", "Total Size", "Training using Adam"}, rows);
  std::cout << "Largest layer: ";
  const auto& names = base.largest_layer.layer_names;
  std::cout << (names.empty() ? std::string("(none)") : (names[0].empty() ? std::string("(the whole model)") : names[0]));
  if (names.size() > 1) std::cout << " (and " << names.size() - 1 << " more of the same size)";
  std::cout << "\n";
  return 0;
}

}  // namespace accel::cli
