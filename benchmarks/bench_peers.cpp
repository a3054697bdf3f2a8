// The comparisons of the README's performance table, from one run on the current machine: each
// claim beside the reference it is measured against, and the ratio.
//
//   bench_peers [--quick | --full] [--json] [--plot FILE.svg] [--accel PATH] [--model DIR]
//               [--accelerate-src PATH] [--llama-bench PATH --gguf FILE [--gguf FILE ...]]
//               [--test-backend-ops PATH]
//
// The figures come from the programs beside this one and from the accel CLI (default
// ../tools/accel from here), each started with --json and run one at a time, so that no two
// share the cores: bench_plan (infer_auto_device_map vs Accelerate's, which runs when
// --accelerate-src or ACCELERATE_SRC names a checkout), bench_safetensors (checkpoint load vs
// memcpy), bench_decode (only with llama.cpp's llama-bench and GGUF files), bench_offload
// (disk-offloaded decode vs the cold read bandwidth and vs Accelerate's disk_offload), and
// `accel run` of the built-in default model (or --model DIR, prompted with --ids) in memory,
// with a CPU budget of half its weights and the rest on disk (sync and prefetch:2), and with a
// CPU budget of only what `accel run` reserves beside the weights, so every block is read from
// disk. Those budgets derive from the in-memory run; the repetitions go round the placements, so
// a slow minute of a shared machine falls on all of them. bench_quant_gemv gives the quantized
// GEMV rows (the decode-sized n = 1 product at k = 14336 for each type) beside llama.cpp's own
// kernels when --test-backend-ops names its test-backend-ops.
// --quick (the default) gives each program short settings, --full leaves them their own. A run
// that fails is reported with its reason and its rows say so; the table goes on. --plot writes an
// SVG of the placements' tokens/s, the fractions of each bound and the ratios to the peers;
// --json prints the table and every program's figures as one JSON object instead of the table.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double num(const json& j, const std::string& key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string mb(double bytes) { return fmt("%.0f MB", bytes / 1e6); }

struct Options {
  bool quick = true, json = false;
  std::string plot, accel, model, accelerate_src, llama_bench, test_backend_ops;
  std::vector<std::string> ggufs;
  fs::path bench_dir;
};

/// One program's --json output, or why there is none.
struct SubRun {
  json figures;
  std::string why;
  double seconds = 0;
};

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `args` under timeout(1), which stops the program's whole process group (Accelerate's
/// Python included) when it runs past `timeout_s`. Stdout must be one JSON object; stderr is kept
/// to say why when it is not.
SubRun run_json(const std::vector<std::string>& args, int timeout_s) {
  SubRun r;
  std::string cmd;
  for (const auto& a : args) cmd += (cmd.empty() ? "" : " ") + quoted(a);
  std::fprintf(stderr, "bench_peers: %s\n", cmd.c_str());
  char err_path[] = "/tmp/bench_peers_XXXXXX";
  const int err_fd = ::mkstemp(err_path);
  if (err_fd < 0) return {{}, fmt("cannot make a temporary file: %s", std::strerror(errno)), 0};
  ::close(err_fd);
  const auto t0 = clock_type::now();
  std::string text;
  int status = -1;
  if (std::FILE* pipe = ::popen(fmt("timeout -k 10 %d %s 2>%s", timeout_s, cmd.c_str(), err_path).c_str(), "r")) {
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) text.append(buf, n);
    status = ::pclose(pipe);
  }
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::ifstream err_file(err_path);
  std::string said((std::istreambuf_iterator<char>(err_file)), std::istreambuf_iterator<char>());
  ::unlink(err_path);
  // The last lines it wrote, on one line, without terminal escapes.
  while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
  std::string last;
  for (char c : said.substr(said.size() > 240 ? said.size() - 240 : 0)) {
    if (c == '\n') last += " / ";
    else if (static_cast<unsigned char>(c) >= 0x20) last += c;
  }
  const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto j = json::parse(text, nullptr, false);
  if (code == 124 || code == 137) {
    r.why = fmt("stopped after %d s", timeout_s);
  } else if (j.is_object()) {
    r.figures = std::move(j);
    if (code != 0) r.figures["exit_status"] = code;
  } else {
    r.why = (code < 0 ? std::string("cannot run it") : fmt("exit status %d, no JSON", code)) + ": " + (last.empty() ? "no output" : last);
  }
  std::fprintf(stderr, "bench_peers:   %.1f s%s%s\n", r.seconds, r.why.empty() ? "" : ", failed: ", r.why.c_str());
  return r;
}

/// The value of the first "key: value" line of a /proc file that starts with `key`.
std::string proc_field(const char* file, const char* key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(key)) return line.substr(std::min(line.find_first_not_of(" \t", line.find(':') + 1), line.size()));
  }
  return "";
}

/// "AMD EPYC, 2 cores, 24 GiB".
std::string machine() {
  const std::string model = proc_field("/proc/cpuinfo", "model name");
  return fmt("%s, %u cores, %.0f GiB", model.empty() ? "unknown CPU" : model.c_str(), std::thread::hardware_concurrency(),
             std::atof(proc_field("/proc/meminfo", "MemTotal").c_str()) / (1 << 20));
}

/// A row of the table. `kind`: "fraction" (of a bound, 1 = the bound) or "speedup" (x the peer);
/// `plot`: its label in the SVG (empty: not drawn).
struct Row {
  std::string claim, ours, reference, ratio;
  std::optional<double> value;
  std::string kind, plot;
};

/// One placement of the default model: its arguments to `accel run`, and what the runs gave.
struct Placement {
  std::string label;
  std::vector<std::string> args;
  std::vector<double> tokens_per_s, offload_gbps;
  json placed_bytes;
  std::string why, note;
};

std::vector<Row> planner_rows(const SubRun& r) {
  std::vector<Row> rows;
  for (const std::string what : {"infer_auto_device_map", "compute_module_sizes"}) {
    Row row{"planner: " + what + ", LLaMA-3-70B shape, 4 GPUs + cpu + disk", "", "", "", {}, "speedup", what + " vs Accelerate"};
    const std::string key = what + "_ms";
    if (!r.why.empty()) {
      row.ours = "failed: " + r.why;
    } else {
      const double ours = num(r.figures.value(key, json::object()), "cpu");
      row.ours = fmt("%.3f ms", ours);
      if (r.figures.contains("accelerate")) {
        const json& a = r.figures["accelerate"];
        const double theirs = num(a.value(key, json::object()), "cpu");
        row.reference = fmt("Accelerate %s: %.2f ms", a.value("version", "?").c_str(), theirs);
        if (ours > 0) row.value = theirs / ours;
        row.ratio = fmt("%.0fx faster (CPU time)", row.value.value_or(0));
        if (!a.value("device_map", "").starts_with("identical")) row.ratio += "; maps differ: " + a.value("device_map", "");
      } else {
        row.reference = "Accelerate: not run (" + r.figures.value("accelerate_not_run", "?") + ")";
      }
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<Row> load_rows(const SubRun& r) {
  struct Item {
    const char *claim, *plot, *ours, *ref, *ref_label;
  };
  std::vector<Row> rows;
  for (const Item& it : {Item{"checkpoint load, 2 GiB bf16 -> f32 into fresh memory", "load bf16->f32 / memcpy, fresh memory",
                              "load_to_f32_gbps_in", "load_memcpy_gbps", "memcpy into fresh memory"},
                         Item{"bf16 -> f32 from a mapped checkpoint, warm destination", "convert / memcpy, warm memory",
                              "convert_warm_gbps_in", "memcpy_warm_gbps", "memcpy, warm"}}) {
    Row row{it.claim, "failed: " + r.why, "", "", {}, "fraction", it.plot};
    if (r.why.empty()) {
      const double ours = num(r.figures, it.ours), ref = num(r.figures, it.ref);
      row.ours = fmt("%.2f GB/s read", ours);
      row.reference = fmt("%s %.2f GB/s", it.ref_label, ref);
      if (ref > 0) row.value = ours / ref;
      row.ratio = fmt("%.0f%% of memcpy", 100 * row.value.value_or(0));
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<Row> decode_rows(const std::optional<SubRun>& r) {
  if (!r) return {{"decode vs llama.cpp", "-", "not run (give --llama-bench and --gguf)", "", {}, "speedup", "decode vs llama.cpp"}};
  if (!r->why.empty()) return {{"decode vs llama.cpp", "failed: " + r->why, "", "", {}, "speedup", ""}};
  const json& f = r->figures;
  std::vector<Row> rows;
  for (const json& l : f.value("llama_cpp", json::array())) {
    const std::string name = fs::path(l.value("gguf", "?")).filename().string();
    for (const std::string what : {"prefill", "decode"}) {
      const std::string key = what + "_tokens_per_s";
      const double ours = num(f, key), theirs = num(l, key);
      Row row{fmt("%s, %.0fM LLaMA %s, %.0f tokens", what.c_str(), num(f, "params") / 1e6, f.value("dtype", "?").c_str(),
                  num(f, what == "prefill" ? "prompt" : "decode")),
              fmt("%.1f tokens/s", ours), "llama.cpp " + name + ": llama-bench gave no result", "", {}, "speedup",
              what + " vs llama.cpp " + name};
      if (theirs > 0) {
        row.reference = fmt("llama.cpp %s: %.1f tokens/s", name.c_str(), theirs);
        row.value = ours / theirs;
        row.ratio = fmt("%.2fx", *row.value);
      }
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<Row> gemv_rows(const SubRun& r) {
  if (!r.why.empty()) return {{"quantized GEMV vs llama.cpp", "failed: " + r.why, "", "", {}, "speedup", ""}};
  std::vector<Row> rows;
  for (const json& g : r.figures.value("rows", json::array())) {
    if (num(g, "n") != 1 || num(g, "k") != 14336) continue;  // the product decoding makes, DRAM-bound
    const std::string type = g.value("type", "?");
    Row row{fmt("GEMV %s, %.0f x %.0f, 1 row, %.0f threads", type.c_str(), num(g, "m"), num(g, "k"), num(r.figures, "threads")),
            fmt("%.0f us (%.1f GB/s of weights)", num(g, "us"), num(g, "weights_gb_per_s")),
            "llama.cpp: not run (give --test-backend-ops)", "", {}, "speedup", "GEMV " + type + " vs llama.cpp"};
    if (num(g, "llamacpp_us") > 0 && num(g, "us") > 0) {
      row.reference = fmt("llama.cpp MUL_MAT: %.0f us", num(g, "llamacpp_us"));
      row.value = num(g, "llamacpp_us") / num(g, "us");
      row.ratio = fmt("%.2fx", *row.value);
    }
    rows.push_back(row);
  }
  if (rows.empty()) rows.push_back({"quantized GEMV vs llama.cpp", "bench_quant_gemv gave no rows", "", "", {}, "", ""});
  return rows;
}

std::vector<Row> offload_rows(const SubRun& r) {
  if (!r.why.empty()) return {{"disk-offloaded decode", "failed: " + r.why, "", "", {}, "fraction", ""}};
  const json& f = r.figures;
  const double bound = num(f, "bound_gbps");
  const std::string budget = fmt("cpu %.0f%% + disk", 100 * num(f, "budget"));
  std::vector<Row> rows;
  double ours_disk = 0;
  for (const json& p : f.value("rows", json::array())) {
    const std::string label = p.value("label", "?"), policy = label.substr(label.find(", ") + 2);
    const bool whole = label.starts_with("disk_offload");
    const std::string where = whole ? "whole model on disk (disk_offload)" : budget + " (" + mb(num(f, "disk_bytes")) + " on disk)";
    Row row{"decode, " + where + ", " + policy, fmt("%.2f tokens/s = %.2f GB/s", num(p, "tokens_per_s"), num(p, "offload_gbps")),
            fmt("cold read %.2f GB/s", bound), "", num(p, "fraction_of_bound"), "fraction",
            "offload / cold read, " + (whole ? std::string("all on disk") : budget) + ", " + policy};
    row.ratio = fmt("%.0f%% of the bound", 100 * *row.value);
    if (!p.value("tokens_match", true)) row.ratio += " (TOKENS DIFFER)";
    if (label == "disk_offload, prefetch<2>") ours_disk = num(p, "tokens_per_s");
    rows.push_back(row);
  }
  Row acc{"decode, whole model on disk, prefetch<2> vs Accelerate's disk_offload", fmt("%.2f tokens/s", ours_disk), "", "", {},
          "speedup", "disk_offload vs Accelerate"};
  if (f.contains("accelerate")) {
    const json& a = f["accelerate"];
    const double theirs = num(a, "disk_offload_tokens_per_s");
    acc.reference = fmt("Accelerate %s (torch %s): %.2f tokens/s", a.value("version", "?").c_str(), a.value("torch", "?").c_str(), theirs);
    if (theirs > 0) acc.value = ours_disk / theirs;
    acc.ratio = fmt("%.2fx", acc.value.value_or(0));
  } else {
    acc.reference = "Accelerate: not run (" + f.value("accelerate_not_run", "?") + ")";
  }
  rows.push_back(acc);
  return rows;
}

/// The placements, their runs interleaved; the half budgets come from the first in-memory run,
/// the all-on-disk one from the first half-budget prefetch:2 run (its read-ahead names the block).
std::vector<Placement> run_placements(const Options& o, int reps, int timeout_s, std::string& model_label) {
  std::vector<std::string> base{o.accel, "run"};
  if (!o.model.empty()) base.insert(base.end(), {o.model, "--ids", "1,2,3,4,5,6,7,8"});
  base.insert(base.end(), {"--max-new-tokens", "32", "--json"});
  std::vector<Placement> ps{{"in memory", {"--device-map", "auto"}, {}, {}, {}, {}, {}},
                            {"cpu budget 50% + disk, sync", {}, {}, {}, {}, {}, {}},
                            {"cpu budget 50% + disk, prefetch:2", {}, {}, {}, {}, {}, {}},
                            {"all on disk, prefetch:2", {}, {}, {}, {}, {}, {}}};
  bool budgets = false;
  for (int rep = 0; rep < reps; ++rep) {
    for (auto& p : ps) {
      if (p.args.empty()) {
        p.why = "not run: the in-memory run gave no budget for it";
        continue;
      }
      std::vector<std::string> args = base;
      args.insert(args.end(), p.args.begin(), p.args.end());
      const SubRun r = run_json(args, timeout_s);
      if (!r.why.empty()) {
        if (p.tokens_per_s.empty()) p.why = r.why;
        continue;
      }
      const json& f = r.figures;
      p.tokens_per_s.push_back(num(f, "tokens_per_s"));
      if (f.contains("offload_gb_per_s") && f["offload_gb_per_s"].is_number()) p.offload_gbps.push_back(num(f, "offload_gb_per_s"));
      p.placed_bytes = f.value("placed_bytes", json::object());
      p.note = f.value("offload_note", "");
      p.why.clear();
      const auto cpu = [](double bytes) { return fmt("cpu=%.0f", std::floor(bytes)); };
      if (&p == &ps[2] && ps[3].args.empty()) {
        // "All on disk": what the CLI keeps free beside the weights when it streams (the half-budget
        // prefetch:2 run's reservations) plus a fifth of a block, so no block fits (a tensor
        // smaller than that fifth may stay).
        double reserved = 0, block = 0;
        for (const json& x : f.value("reservations", json::array())) {
          reserved += num(x, "bytes");
          const std::string what = x.value("what", "");  // "read-ahead (N x the largest layer, ...)"
          if (what.starts_with("read-ahead (")) block = num(x, "bytes") / std::max(1, std::atoi(what.c_str() + 12));
        }
        if (block > 0) ps[3].args = {"--max-memory", cpu(reserved + 1.2 * block), "--offload", "prefetch:2"};
      }
      if (&p != &ps.front() || budgets) continue;
      double weights = 0;
      for (const auto& [k, v] : p.placed_bytes.items()) weights += v.get<double>();
      if (weights <= 0) continue;
      ps[1].args = {"--max-memory", cpu(weights / 2), "--offload", "sync"};
      ps[2].args = {"--max-memory", cpu(weights / 2), "--offload", "prefetch:2"};
      budgets = true;
      const std::string kind = f.value("model_type", "?") + ", " + f.value("dtype", "?");
      model_label = f.contains("default_model")
                        ? fmt("default model (%.0fM %s)", num(f["default_model"], "parameters") / 1e6, kind.c_str())
                        : o.model + " (" + kind + ", " + mb(weights) + ")";
    }
  }
  for (auto& p : ps) {
    std::string where;
    for (const auto& [k, v] : p.placed_bytes.items()) where += (where.empty() ? "" : " + ") + k + " " + mb(v.get<double>());
    if (&p != &ps.front() && !where.empty()) p.label += " (" + where + ")";
  }
  return ps;
}

std::vector<Row> placement_rows(const std::vector<Placement>& ps, const std::string& model) {
  std::vector<Row> rows;
  const double mem = median(ps.front().tokens_per_s);
  for (const auto& p : ps) {
    Row row{model + ": " + p.label, p.why.starts_with("not run") ? p.why : "failed: " + p.why, "", "", {}, "", ""};
    if (!p.tokens_per_s.empty()) {
      const double t = median(p.tokens_per_s);
      row.ours = fmt("%.1f tokens/s", t);
      if (!p.offload_gbps.empty()) row.ours += fmt(", offload %.2f GB/s", median(p.offload_gbps));
      if (&p != &ps.front() && mem > 0) {
        row.reference = fmt("in memory %.1f tokens/s", mem);
        row.ratio = fmt("%.0f%%", 100 * t / mem);
      }
      if (!p.note.empty()) row.ratio += (row.ratio.empty() ? "" : "; ") + p.note;
    }
    rows.push_back(row);
  }
  return rows;
}

std::string xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

/// The SVG: three panels of labelled horizontal bars.
std::string svg(const std::vector<Placement>& ps, const std::vector<Row>& rows, const std::string& title, const std::string& sub) {
  constexpr int width = 1000, label_x = 420, bar_x = 440, bar_w = 330, step = 26;
  std::ostringstream body, guides;  // guides: the 100% and 1x lines, drawn under the bars
  int y = 62;
  const auto text = [&](int x, int at, const std::string& s, const char* extra = "") {
    body << "<text x=\"" << x << "\" y=\"" << at << "\" " << extra << ">" << xml(s) << "</text>\n";
  };
  const auto heading = [&](const std::string& s) {
    y += 28;
    text(20, y, s, "font-size=\"15\" font-weight=\"bold\"");
    y += 12;
  };
  // A bar over [a, b] of x (either order) with its value after it; without one, a grey note.
  const auto bar = [&](const std::string& label, std::optional<std::pair<double, double>> span, const std::string& value,
                       const char* colour) {
    text(label_x, y + 13, label, "text-anchor=\"end\"");
    if (span) {
      const double a = std::min(span->first, span->second), b = std::max(span->first, span->second);
      body << fmt("<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"18\" fill=\"%s\"/>\n", a, y, std::max(b - a, 1.0), colour);
      text(static_cast<int>(b) + 6, y + 13, value);
    } else {
      text(bar_x, y + 13, value.substr(0, 80), "fill=\"#777777\"");
    }
    y += step;
  };
  const auto guide = [&](double x, int from, const char* label) {
    guides << fmt("<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888888\" stroke-dasharray=\"4 3\"/>\n", x, from, x, y);
    text(static_cast<int>(x) - 10, y + 8, label, "font-size=\"11\" fill=\"#555555\"");
  };
  heading("tokens/s per placement, " + title + " (higher is better)");
  double top = 0;
  for (const auto& p : ps) top = std::max(top, median(p.tokens_per_s));
  if (top <= 0) top = 1;
  for (const auto& p : ps) {
    if (p.tokens_per_s.empty()) {
      bar(p.label, std::nullopt, p.why.empty() ? "not run" : p.why, "");
      continue;
    }
    const double t = median(p.tokens_per_s);
    std::string v = fmt("%.1f tokens/s", t);
    if (!p.offload_gbps.empty()) v += fmt(", offload %.2f GB/s", median(p.offload_gbps));
    bar(p.label, std::make_pair(double(bar_x), bar_x + bar_w * t / top), v, "#4c78a8");
  }
  heading("fraction of the bound (100% = the reference's rate on the same bytes)");
  double fmax = 1.2;
  for (const auto& r : rows) {
    if (r.kind == "fraction" && r.value) fmax = std::max(fmax, *r.value * 1.05);
  }
  const int fraction_y = y;
  for (const auto& r : rows) {
    if (r.kind != "fraction" || r.plot.empty()) continue;
    if (r.value) bar(r.plot, std::make_pair(double(bar_x), bar_x + bar_w * *r.value / fmax), fmt("%.0f%%", 100 * *r.value), "#f58518");
    else bar(r.plot, std::nullopt, r.ours, "");
  }
  guide(bar_x + bar_w / fmax, fraction_y - 4, "100%");
  heading("speed relative to the peer, same run (x, log scale; higher is better)");
  double lo = 0.5, hi = 10;
  bool any = false;
  for (const auto& r : rows) {
    if (r.kind == "speedup" && r.value && *r.value > 0) {
      lo = std::min(lo, *r.value / 1.5);
      hi = std::max(hi, *r.value * 1.5);
      any = true;
    }
  }
  const auto xs = [&](double v) { return bar_x + bar_w * std::log(v / lo) / std::log(hi / lo); };
  const int peer_y = y;
  for (const auto& r : rows) {
    if (r.kind != "speedup" || r.plot.empty()) continue;
    if (r.value && *r.value > 0) {
      bar(r.plot, std::make_pair(xs(1), xs(*r.value)), fmt(*r.value >= 10 ? "%.0fx" : "%.2fx", *r.value), "#54a24b");
    } else {
      bar(r.plot, std::nullopt, r.reference.empty() ? r.ours : r.reference, "");
    }
  }
  if (any) guide(xs(1), peer_y - 4, "1x");
  y += 30;
  text(20, y, "medians; every ratio is measured against its reference in the same run (benchmarks/bench_peers.cpp)",
       "font-size=\"11\" fill=\"#555555\"");
  const int height = y + 16;
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" +
         fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n", width,
             height, width, height) +
         fmt("<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height) +
         "<g font-family=\"sans-serif\" font-size=\"12\" fill=\"#222222\">\n" +
         "<text x=\"20\" y=\"30\" font-size=\"18\" font-weight=\"bold\">accel beside its references</text>\n" +
         "<text x=\"20\" y=\"52\" fill=\"#555555\">" + xml(sub) + "</text>\n" + guides.str() + body.str() + "</g>\n</svg>\n";
}

Options parse(int argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("ACCELERATE_SRC")) o.accelerate_src = env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  o.bench_dir = ec ? fs::absolute(argv[0]).parent_path() : self.parent_path();
  o.accel = (o.bench_dir / ".." / "tools" / "accel").lexically_normal().string();
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 < argc) return argv[++i];
      std::fprintf(stderr, "bench_peers: %s needs a value\n", k.c_str());
      std::exit(2);
    };
    if (k == "--quick") o.quick = true;
    else if (k == "--full") o.quick = false;
    else if (k == "--json") o.json = true;
    else if (k == "--plot") o.plot = value();
    else if (k == "--accel") o.accel = value();
    else if (k == "--model") o.model = fs::absolute(value()).string();
    else if (k == "--accelerate-src") o.accelerate_src = value();
    else if (k == "--llama-bench") o.llama_bench = value();
    else if (k == "--gguf") o.ggufs.push_back(value());
    else if (k == "--test-backend-ops") o.test_backend_ops = value();
    else {
      std::fprintf(stderr, "bench_peers: unknown option %s (see the top of benchmarks/bench_peers.cpp)\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const auto t0 = clock_type::now();
  const int timeout = o.quick ? 600 : 3600;
  const auto prog = [&](const char* name) { return (o.bench_dir / name).string(); };
  json runs = json::object();
  const auto measure = [&](const char* name, const std::vector<std::string>& args) {
    SubRun r = run_json(args, timeout);
    runs[name] = {{"seconds", r.seconds}, {"error", r.why.empty() ? json() : json(r.why)}, {"figures", r.figures}};
    return r;
  };

  std::vector<std::string> plan{prog("bench_plan"), "--json"};
  if (o.quick) plan.push_back("--rounds=5");
  if (!o.accelerate_src.empty()) plan.push_back("--accelerate_src=" + o.accelerate_src);
  const SubRun plan_run = measure("bench_plan", plan);
  const SubRun load_run = measure("bench_safetensors", {prog("bench_safetensors"), "--json"});
  std::optional<SubRun> decode_run;
  if (!o.llama_bench.empty() && !o.ggufs.empty()) {
    std::vector<std::string> args{prog("bench_decode"), "--json", "--llama-bench", o.llama_bench};
    for (const auto& g : o.ggufs) args.insert(args.end(), {"--gguf", g});
    if (o.quick) args.insert(args.end(), {"--reps", "3"});
    decode_run = measure("bench_decode", args);
  }
  std::vector<std::string> off{prog("bench_offload"), "--json"};
  if (o.quick) off.insert(off.end(), {"--reps", "3", "--decode", "4"});
  if (!o.accelerate_src.empty()) off.insert(off.end(), {"--accelerate-src", o.accelerate_src});
  const SubRun offload_run = measure("bench_offload", off);
  std::vector<std::string> gemv{prog("bench_quant_gemv"), "--json"};
  if (o.quick) gemv.insert(gemv.end(), {"--reps", "5"});
  if (!o.test_backend_ops.empty()) gemv.insert(gemv.end(), {"--test-backend-ops", o.test_backend_ops});
  const SubRun gemv_run = measure("bench_quant_gemv", gemv);
  std::string model_label = o.model.empty() ? "default model" : o.model;
  const auto placements = run_placements(o, o.quick ? 5 : 9, timeout, model_label);

  std::vector<Row> rows;
  for (auto part : {planner_rows(plan_run), load_rows(load_run), decode_rows(decode_run), offload_rows(offload_run),
                    gemv_rows(gemv_run),
                    placement_rows(placements, model_label)}) {
    rows.insert(rows.end(), part.begin(), part.end());
  }
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  const std::string where = machine();
  const std::string sub = fmt("%s; %s settings; bench_peers ran %.0f s", where.c_str(), o.quick ? "quick" : "full", seconds);
  if (!o.plot.empty()) {
    std::ofstream(o.plot) << svg(placements, rows, model_label, sub);
    std::fprintf(stderr, "bench_peers: wrote %s\n", o.plot.c_str());
  }
  if (o.json) {
    json j = {{"machine", where}, {"settings", o.quick ? "quick" : "full"}, {"seconds", seconds}, {"rows", json::array()},
              {"placements", json::array()}, {"runs", runs}};
    for (const auto& r : rows) {
      j["rows"].push_back({{"claim", r.claim}, {"ours", r.ours}, {"reference", r.reference}, {"ratio", r.ratio},
                           {"value", r.value ? json(*r.value) : json()}, {"kind", r.kind}});
    }
    for (const auto& p : placements) {
      j["placements"].push_back({{"label", p.label}, {"args", p.args}, {"tokens_per_s", p.tokens_per_s},
                                 {"offload_gb_per_s", p.offload_gbps}, {"placed_bytes", p.placed_bytes},
                                 {"error", p.why.empty() ? json() : json(p.why)}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  // A Markdown table, padded so that it reads in a terminal too.
  std::size_t w[4] = {5, 5, 9, 5};
  for (const auto& r : rows) {
    w[0] = std::max(w[0], r.claim.size()), w[1] = std::max(w[1], r.ours.size());
    w[2] = std::max(w[2], r.reference.size()), w[3] = std::max(w[3], r.ratio.size());
  }
  const auto line = [&](std::string a, std::string b, std::string c, std::string d) {
    for (std::string* cell : {&a, &b, &c, &d}) std::replace(cell->begin(), cell->end(), '|', '/');  // Markdown's separator
    std::printf("| %-*s | %-*s | %-*s | %-*s |\n", int(w[0]), a.c_str(), int(w[1]), b.c_str(), int(w[2]), c.c_str(), int(w[3]), d.c_str());
  };
  std::printf("\n%s\n\n", sub.c_str());
  line("claim", "accel", "reference", "ratio");
  line(std::string(w[0], '-'), std::string(w[1], '-'), std::string(w[2], '-'), std::string(w[3], '-'));
  for (const auto& r : rows) line(r.claim, r.ours, r.reference, r.ratio);
  return 0;
}
