// accel run MODEL_DIR (--prompt TEXT | --ids 1,2,3) [--max-new-tokens N] [--temperature T]
//           [--top-k K] [--top-p P] [--seed S] [--dtype float32|float16|bfloat16] [--disable-mmap]
//           [--json]
//
// Loads a Hugging Face model folder (config.json + model.safetensors, a sharded index or
// pytorch_model.bin, + tokenizer.json for --prompt) and generates: greedy unless a sampling
// option is given (--temperature, --top-k or --top-p turn sampling on, as do_sample does). The
// text output shows the generated text (or ids), the load time, the time to first token and the
// decode speed; --json prints {"prompt_ids", "generated_ids" (new tokens only), "text" (with a
// tokenizer), "load_s", "ttft_s", "tokens_per_s", ...}.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/models/generate.hpp"
#include "accel/tokenize/tokenizer.hpp"
#include "cli_command.hpp"
#include "cli_common.hpp"
#include "cli_values.hpp"

namespace accel::cli {

/// What `accel run` was asked.
struct RunRequest {
  std::filesystem::path model_dir;
  std::optional<std::string> prompt;
  std::vector<std::int64_t> ids;
  std::optional<DType> dtype;
  models::GenerationConfig generation;
  bool disable_mmap = false;
  bool json = false;
};

/// What `accel run` produced.
struct RunResult {
  std::vector<std::int64_t> prompt_ids, generated_ids;
  std::optional<std::string> text;  ///< with a tokenizer
  std::string model_type;
  DType dtype = DType::f32;
  double load_s = 0, ttft_s = 0, tokens_per_s = 0;
};

/// Arguments -> RunRequest (values checked, each error naming its option).
inline RunRequest parse_run_request(const ParsedArgs& args) {
  RunRequest r;
  r.model_dir = args.positional(0);
  if (args.value("--prompt") && args.value("--ids")) throw UsageError("give --prompt or --ids, not both");
  if (!args.value("--prompt") && !args.value("--ids")) throw UsageError("give the prompt: --prompt TEXT or --ids 1,2,3");
  r.prompt = args.value("--prompt");
  if (const auto ids = args.list("--ids")) {
    for (const auto& s : *ids) r.ids.push_back(parse_integer("--ids", s, 0, std::numeric_limits<std::int32_t>::max()));
    if (r.ids.empty()) throw ValueError("--ids: no token id given");
  }
  auto& g = r.generation;
  if (const auto v = args.value("--max-new-tokens")) g.max_new_tokens = parse_integer("--max-new-tokens", *v, 0, 1 << 20);
  if (const auto v = args.value("--temperature")) {
    g.temperature = parse_real("--temperature", *v, 0.0, 1e6);
    g.do_sample = g.temperature > 0.0;  // temperature 0 means greedy, as in most CLIs
    if (!g.do_sample) g.temperature = 1.0;
  }
  if (const auto v = args.value("--top-k")) {
    g.top_k = parse_integer("--top-k", *v, 0, std::numeric_limits<std::int32_t>::max());
    g.do_sample = g.do_sample || !args.value("--temperature");
  }
  if (const auto v = args.value("--top-p")) {
    g.top_p = parse_real("--top-p", *v, 0.0, 1.0);
    if (g.top_p <= 0.0) throw ValueError("--top-p: " + *v + " is out of range (above 0, at most 1)");
    g.do_sample = g.do_sample || !args.value("--temperature");
  }
  if (const auto v = args.value("--seed")) {
    g.seed = static_cast<std::uint64_t>(parse_integer("--seed", *v, 0, std::numeric_limits<std::int64_t>::max()));
  }
  if (const auto v = args.value("--dtype")) {
    const auto d = try_dtype_from_string(*v);
    if (!d || (*d != DType::f32 && *d != DType::f16 && *d != DType::bf16)) {
      throw ValueError("--dtype: '" + *v + "' is not one of float32, float16, bfloat16");
    }
    r.dtype = d;
  }
  r.disable_mmap = args.flag("--disable-mmap");
  r.json = args.flag("--json");
  return r;
}

/// Loads the model (and tokenizer), encodes the prompt and generates.
inline RunResult compute_run(const RunRequest& req) {
  RunResult out;
  std::optional<tokenize::Tokenizer> tok;
  const auto tok_path = req.model_dir / "tokenizer.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(tok_path, ec)) tok = tokenize::Tokenizer::from_file(tok_path.string());
  if (req.prompt && !tok) {
    throw IOError((req.model_dir / "tokenizer.json").string() + ": not found (--prompt needs the model's tokenizer; "
                  "give --ids instead)");
  }
  auto p = dispatch::load_pretrained_causal_lm(req.model_dir, {.dtype = req.dtype, .show_progress = !req.json, .disable_mmap = req.disable_mmap});
  out.model_type = p.model->info().model_type;
  out.dtype = p.dtype;
  out.load_s = p.load_seconds;
  if (req.prompt) {
    for (auto id : tok->encode(*req.prompt)) out.prompt_ids.push_back(id);
    if (out.prompt_ids.empty()) throw ValueError("--prompt: the text encodes to no token");
  } else {
    out.prompt_ids = req.ids;
  }
  const std::int64_t vocab = p.model->info().vocab_size;
  for (auto id : out.prompt_ids) {
    if (id >= vocab) {
      throw ValueError("prompt token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                       std::to_string(vocab));
    }
  }
  models::GenerationConfig g = req.generation;
  if (tok && g.eos_token_ids.empty() && p.model->info().eos_token_ids.empty() && tok->eos_id()) {
    g.eos_token_ids = {static_cast<std::int64_t>(*tok->eos_id())};
  }
  const Tensor ids = Tensor::from_vector(out.prompt_ids, Shape{1, static_cast<std::int64_t>(out.prompt_ids.size())});
  const auto gen = models::generate(*p.model, ids, g);
  out.generated_ids = gen.new_tokens.front();
  out.ttft_s = gen.prefill_seconds;
  out.tokens_per_s = gen.tokens_per_second();
  if (tok) {
    std::vector<tokenize::TokenId> t(out.generated_ids.begin(), out.generated_ids.end());
    out.text = tok->decode(t, /*skip_special_tokens=*/true);
  }
  return out;
}

/// RunResult -> stdout.
inline void render_run(const RunRequest& req, const RunResult& r) {
  if (req.json) {
    nlohmann::ordered_json j;
    j["model_type"] = r.model_type;
    j["dtype"] = std::string(dtype_name(r.dtype));
    j["prompt_ids"] = r.prompt_ids;
    j["generated_ids"] = r.generated_ids;
    if (r.text) j["text"] = *r.text;
    j["load_s"] = r.load_s;
    j["ttft_s"] = r.ttft_s;
    j["tokens_per_s"] = r.tokens_per_s;
    std::cout << dump_json(j, 2) << "\n";
    return;
  }
  if (r.text) {
    std::cout << (req.prompt ? *req.prompt : std::string()) << *r.text << "\n";
  } else {
    std::cout << "generated ids:";
    for (auto id : r.generated_ids) std::cout << ' ' << id;
    std::cout << "\n";
  }
  std::cout << std::fixed << std::setprecision(3) << "\n" << r.model_type << " (" << dtype_name(r.dtype) << "): load "
            << r.load_s << " s, " << r.prompt_ids.size() << " prompt tokens, time to first token " << r.ttft_s
            << " s, " << r.generated_ids.size() << " new tokens, " << std::setprecision(1) << r.tokens_per_s
            << " tokens/s\n";
}

/// `accel run`.
inline int run_run(const ParsedArgs& args) {
  const RunRequest req = parse_run_request(args);
  render_run(req, compute_run(req));
  return exit_ok;
}

/// The `accel run` entry of the command table.
inline Command run_command() {
  return {
      .name = "run",
      .summary = "generate with a Hugging Face model folder (GPT-2, LLaMA, Mistral, Qwen2)",
      .usage = "MODEL_DIR (--prompt TEXT | --ids 1,2,3) [--max-new-tokens N] [--temperature T] [--top-k K]\n"
               "       [--top-p P] [--seed S] [--dtype float32|float16|bfloat16] [--json]",
      .positionals = {{"MODEL_DIR",
                       "config.json + model.safetensors, a sharded index or pytorch_model.bin\n"
                       "(+ tokenizer.json for --prompt)"}},
      .options = {{.name = "--prompt", .placeholder = "TEXT", .help = "the prompt text (needs tokenizer.json)"},
                  {.name = "--ids", .placeholder = "1,2,3", .help = "the prompt as token ids"},
                  {.name = "--max-new-tokens", .placeholder = "N", .help = "tokens to generate (default 32)"},
                  {.name = "--temperature", .placeholder = "T",
                   .help = "sample with this temperature (0: greedy; default: greedy)"},
                  {.name = "--top-k", .placeholder = "K", .help = "sample from the K most likely tokens (0: all)"},
                  {.name = "--top-p", .placeholder = "P", .help = "sample from the smallest set holding mass P"},
                  {.name = "--seed", .placeholder = "S", .help = "seed of the sampler (reproducible output)"},
                  {.name = "--dtype", .placeholder = "DTYPE",
                   .help = "float32, float16 or bfloat16 (default: config.json's torch_dtype)"},
                  {.name = "--disable-mmap",
                   .help = "copy the weights into memory instead of viewing the mapped checkpoint:\n"
                           "huge pages whatever the page cache holds (decoding 0-9% faster as\n"
                           "measured), about 1 s more load time per GB"},
                  {.name = "--json", .help = "one JSON object: prompt_ids, generated_ids, text, load_s, ttft_s, tokens_per_s"}},
      .details = "Greedy decoding unless --temperature, --top-k or --top-p asks for sampling; generation stops\n"
                 "at the model's eos token. Timings: load_s builds and loads the model, ttft_s is the prompt's\n"
                 "forward and first token, tokens_per_s the decode speed after it.",
      .run = run_run,
  };
}

}  // namespace accel::cli
