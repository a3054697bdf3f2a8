// Decoding a model that does not fit its memory budget: the LLaMA of ../shared/anchors (483M
// parameters, bf16 by default, Hugging Face folder) with a CPU budget of a third of its weights
// and the rest on disk, CPU execution, next to the disk's cold read bandwidth and the same model
// in memory, all measured in one run.
//
//   bench_offload [--folder DIR] [--dtype bfloat16|float32] [--budget 0.333] [--prompt 16] [--decode 8]
//                 [--reps 3] [--accelerate-src PATH] [--layers 8 --embd 2048 --ff 5632 --heads 32
//                 --kv-heads 4 --vocab 32000] [--json]
//
// Rows (medians of --reps repetitions, each a prefill then --decode one-token steps):
//   in memory            the whole model loaded into memory of its own
//   budget, sync         load_checkpoint_and_dispatch<sync_offload>: Accelerate's way, each module's
//                        weights read when it is called (direct reads into one reused buffer)
//   budget, prefetch<2>  the same placement under prefetch<2>: two blocks read ahead (direct reads
//                        into a ring of three block buffers) while one computes
//   disk_offload, ...    the whole model on disk through disk_offload (an offload folder of .dat
//                        files), under both policies, and under Accelerate's own disk_offload when
//                        --accelerate-src (or $ACCELERATE_SRC) names an Accelerate checkout (run
//                        by benchmarks/accelerate/bench_disk_offload.py with Debian's python3-torch)
// Every decode step reads cold: the page cache of every file it reads is dropped
// (POSIX_FADV_DONTNEED, after an fsync) before each step, outside the timed region, so a step
// finds on disk what a model larger than memory would. The bound is the cold sequential read
// bandwidth of the very bytes a token reads, measured in every repetition: the same ranges of the
// same files read in file order, as many times as a decode reads them, each time after the same
// drop, with direct reads of 64 MiB and of 4 MiB pieces, with buffered reads of 64 MiB, and
// through a mapping with madvise(WILLNEED) 64 MiB ahead (the alternative to reading into a ring:
// if it were the fastest, the prefetcher should map); the fastest median is the bound. Offload GB/s is the bytes a token reads from disk x tokens/s.
// --json sends the text to stderr and prints the medians as one JSON object on stdout (for
// bench_peers).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/json_stdout.hpp"
#include "accel/core/parallel.hpp"
#include "accel/dispatch/big_modeling.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/io/checkpoint_files.hpp"
#include "accel/io/weight_reader.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/nn/init.hpp"
#include "common/llama_bench_model.hpp"

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

volatile unsigned g_sink = 0;  // keeps the touched pages' reads alive

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Args {
  accel::DType dtype = accel::DType::bf16;
  accel_bench::LlamaShape shape;
  std::string folder;
  double budget = 1.0 / 3.0;
  std::int64_t prompt = 16, decode = 8;
  int reps = 3;
  std::string accelerate_src;
  bool json = false;
};

using accel_bench::JsonStdout;

Args parse(int argc, char** argv) {
  Args a;
  if (const char* env = std::getenv("ACCELERATE_SRC")) a.accelerate_src = env;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--json") {
      a.json = true;
      continue;
    }
    if (i + 1 >= argc) break;
    const std::string v = argv[++i];
    if (k == "--dtype") a.dtype = accel::dtype_from_string(v);
    else if (k == "--folder") a.folder = v;
    else if (k == "--budget") a.budget = std::stod(v);
    else if (k == "--prompt") a.prompt = std::stoll(v);
    else if (k == "--decode") a.decode = std::stoll(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--accelerate-src") a.accelerate_src = v;
    else if (k == "--layers") a.shape.layers = std::stoll(v);
    else if (k == "--embd") a.shape.embd = std::stoll(v);
    else if (k == "--ff") a.shape.ff = std::stoll(v);
    else if (k == "--heads") a.shape.heads = std::stoll(v);
    else if (k == "--kv-heads") a.shape.kv_heads = std::stoll(v);
    else if (k == "--vocab") a.shape.vocab = std::stoll(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.folder.empty()) {
    a.folder = (fs::temp_directory_path() / ("accel_bench_offload_" + std::string(accel::dtype_name(a.dtype)) + "_" +
                                             std::to_string(a.shape.layers) + "x" + std::to_string(a.shape.embd)))
                   .string();
  }
  return a;
}

/// Drops the page cache of `path` (written back first, so nothing dirty is kept).
void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  (void)::fdatasync(fd);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}
void drop_caches(const std::vector<std::string>& files) {
  for (const auto& f : files) drop_cache(f);
}

/// One byte range of a file a decoded token reads.
struct Extent {
  std::string file;
  std::uint64_t offset, nbytes;
};

enum class ReadMethod { direct, buffered, mapped };

/// GB/s of cold sequential reads of `extents` (sorted, neighbours merged), `passes` times, each
/// after dropping the cache: direct reads in pieces of `piece` bytes (the prefetcher's reader),
/// buffered preads of `piece` bytes, or a mapping of the file with madvise(WILLNEED) over `piece`
/// bytes ahead of the page being touched (the alternative to reading into a ring). The median pass.
double cold_read_rate(std::vector<Extent> extents, ReadMethod method, std::uint64_t piece, int passes) {
  const bool direct = method == ReadMethod::direct;
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });
  std::vector<Extent> merged;
  for (const auto& e : extents) {
    if (!merged.empty() && merged.back().file == e.file && merged.back().offset + merged.back().nbytes >= e.offset) {
      merged.back().nbytes = std::max(merged.back().nbytes, e.offset + e.nbytes - merged.back().offset);
    } else {
      merged.push_back(e);
    }
  }
  std::uint64_t total = 0;
  std::vector<std::string> files;
  for (const auto& e : merged) {
    total += e.nbytes;
    if (std::find(files.begin(), files.end(), e.file) == files.end()) files.push_back(e.file);
  }
  const std::uint64_t align = accel::io::WeightFileReader::alignment;
  accel::Storage buf = accel::Storage::allocate(accel::Device::cpu(), piece + 3 * align);
  auto* dst = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(buf.data()) + align - 1) / align * align);
  std::vector<double> rates;
  accel::io::WeightFileReader reader;
  for (int p = 0; p < passes; ++p) {
    drop_caches(files);
    const auto t0 = clock_type::now();
    for (const auto& e : merged) {
      const int fd = direct ? -1 : ::open(e.file.c_str(), O_RDONLY);
      if (method == ReadMethod::mapped) {
        const std::uint64_t begin = e.offset / align * align, len = e.offset + e.nbytes - begin;
        void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(begin));
        if (m != MAP_FAILED) {
          const auto* p = static_cast<const volatile unsigned char*>(m);
          unsigned sum = 0;
          for (std::uint64_t at = 0; at < len; at += align) {
            if (at % piece == 0) (void)::madvise(const_cast<unsigned char*>(p) + at, std::min(piece, len - at), MADV_WILLNEED);
            sum += p[at];
          }
          g_sink = g_sink + sum;
          ::munmap(m, len);
        }
        ::close(fd);
        continue;
      }
      for (std::uint64_t done = 0; done < e.nbytes;) {
        const std::uint64_t n = std::min(piece, e.nbytes - done);
        if (direct) {
          reader.read(e.file, e.offset + done, n, dst, "cold read");
        } else if (::pread(fd, dst, n, static_cast<off_t>(e.offset + done)) <= 0) {
          break;
        }
        done += n;
      }
      if (fd >= 0) ::close(fd);
    }
    rates.push_back(static_cast<double>(total) / seconds_since(t0) / 1e9);
  }
  drop_caches(files);
  return median(rates);
}

std::int64_t argmax_last(const accel::Tensor& logits) {
  const auto v = logits.to(accel::DType::f32).contiguous().to_vector<float>();
  const std::size_t vocab = static_cast<std::size_t>(logits.size(-1));
  const auto last = v.end() - static_cast<std::ptrdiff_t>(vocab);
  return std::max_element(last, v.end()) - last;
}

/// Decode tokens/s of one repetition: a prefill, then `decode` steps, each after dropping the page
/// cache of `cold_files` (untimed). Returns tokens/s and the generated ids.
std::pair<double, std::vector<std::int64_t>> decode_rate(accel::models::CausalLM& lm, const Args& a,
                                                         const std::vector<std::string>& cold_files) {
  std::vector<std::int64_t> prompt(static_cast<std::size_t>(a.prompt));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int64_t>((i * 7919) % static_cast<std::size_t>(a.shape.vocab));
  accel::models::KVCache cache = lm.make_cache(1, a.prompt + a.decode + 1);
  drop_caches(cold_files);
  std::vector<std::int64_t> out{argmax_last(lm.logits(accel::Tensor::from_vector(prompt, accel::Shape{1, a.prompt}), &cache, 1))};
  double seconds = 0;
  for (std::int64_t s = 0; s < a.decode; ++s) {
    drop_caches(cold_files);
    const auto t0 = clock_type::now();
    const accel::Tensor logits = lm.logits(accel::Tensor::from_vector(std::vector<std::int64_t>{out.back()}, accel::Shape{1, 1}), &cache, 1);
    out.push_back(argmax_last(logits));
    seconds += seconds_since(t0);
  }
  return {static_cast<double>(a.decode) / seconds, out};
}

std::shared_ptr<accel::models::CausalLM> meta_model(const Args& a) {
  const auto config = nlohmann::json::parse(std::ifstream(a.folder + "/config.json"));
  auto guard = accel::nn::init_empty_weights(false);
  return accel::models::causal_lm_from_hf_config(config, a.dtype);
}

struct Row {
  std::string label;
  std::vector<double> rates{};
  double disk_bytes = 0;  ///< bytes a token reads from disk
  std::vector<std::int64_t> tokens{};
};

/// Runs `python3 bench_disk_offload.py --model DIR ...` and returns its JSON line.
std::optional<nlohmann::json> run_accelerate(const Args& a) {
  const std::string script = std::string(ACCEL_BENCHMARKS_DIR) + "/accelerate/bench_disk_offload.py";
  const std::string cmd = "ACCELERATE_SRC='" + a.accelerate_src + "' /usr/bin/python3 '" + script + "' --model '" + a.folder +
                          "' --dtype " + std::string(accel::dtype_name(a.dtype) == std::string("bfloat16") ? "bfloat16" : "float32") +
                          " --threads " + std::to_string(accel::num_threads()) + " --prompt-tokens " + std::to_string(a.prompt) +
                          " --new-tokens " + std::to_string(a.decode) + " --repeats " + std::to_string(a.reps) +
                          " --warmup 0 --drop-cache --stand-in-missing-deps 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::string out, last;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  ::pclose(pipe);
  for (std::size_t at = 0; at < out.size();) {
    const std::size_t end = out.find('\n', at);
    const std::string line = out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!line.empty() && line.front() == '{') last = line;
    at = end == std::string::npos ? out.size() : end + 1;
  }
  if (last.empty()) return std::nullopt;
  try {
    return nlohmann::json::parse(last);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  JsonStdout json(a.json);
  if (!fs::is_regular_file(a.folder + "/config.json")) {
    std::printf("writing the model to %s ...\n", a.folder.c_str());
    auto lm = accel_bench::random_llama(a.shape, a.dtype);
    accel_bench::write_llama_folder(*lm, a.shape, a.dtype, a.folder);
  }
  const std::string shard = accel::io::resolve_checkpoint_folder(a.folder).path.string();

  // The plan: "auto" under a CPU budget of a fraction of the weights.
  auto probe = meta_model(a);
  std::uint64_t total = 0;
  for (const auto& [n, t] : probe->module().named_parameters()) total += t.nbytes();
  accel::MaxMemory mm;
  mm.add(accel::Placement::cpu(), accel::ByteSize(static_cast<std::int64_t>(static_cast<double>(total) * a.budget)));
  const accel::dispatch::LoadAndDispatchOptions plan_opts{.no_split_module_classes = probe->module().no_split_modules()};
  const accel::DeviceMap dm = accel::dispatch::resolve_device_map(probe->module(), "auto", mm, plan_opts);
  std::uint64_t on_cpu = 0, on_disk = 0;
  std::vector<Extent> disk_extents;
  {
    // Closed again at once: a page mapped anywhere in the process is one the cache cannot drop.
    const auto file = accel::io::SafetensorsFile::open(shard);
    for (const auto& [n, t] : probe->module().named_parameters()) {
      const bool disk = dm.lookup(n)->is_disk();
      (disk ? on_disk : on_cpu) += t.nbytes();
      if (disk) {
        const auto& info = file.info(n);
        disk_extents.push_back({shard, file.header().data_start + info.begin, info.nbytes()});
      }
    }
  }
  std::printf("model: %s, %.1f M parameters, %.0f MB of %s weights; CPU budget %.0f%% = %.0f MB\n", a.folder.c_str(),
              static_cast<double>(total) / static_cast<double>(accel::itemsize(a.dtype)) / 1e6, static_cast<double>(total) / 1e6,
              std::string(accel::dtype_name(a.dtype)).c_str(), 100 * a.budget,
              static_cast<double>(total) * a.budget / 1e6);
  std::printf("plan (auto): cpu %.0f MB, disk %.0f MB:", static_cast<double>(on_cpu) / 1e6, static_cast<double>(on_disk) / 1e6);
  for (const auto& [k, p] : dm) std::printf(" %s=%s", k.c_str(), p.str().c_str());
  std::printf("\n%d threads, %lld-token prompt, %lld decode steps, medians of %d repetitions; every step reads cold\n",
              accel::num_threads(), static_cast<long long>(a.prompt), static_cast<long long>(a.decode), a.reps);

  // Every configuration loaded once, then the repetitions interleave them.
  Row memory{"in memory (disable_mmap)"};
  auto in_memory = accel::dispatch::load_pretrained_causal_lm(a.folder, {.dtype = a.dtype, .show_progress = false, .disable_mmap = true});

  const auto scratch = fs::temp_directory_path() / ("accel_bench_offload_scratch_" + std::to_string(::getpid()));
  struct Placed {
    Row row;
    std::shared_ptr<accel::models::CausalLM> lm;
    std::vector<std::string> cold;
    std::shared_ptr<accel::hooks::WeightStream> stream;
  };
  std::vector<Placed> placed;
  auto budgeted = [&]<class Policy>(Policy, const char* label) {
    Placed p{{label}, meta_model(a), {shard}, nullptr};
    const std::string folder = (scratch / ("budget_" + std::to_string(placed.size()))).string();
    accel::dispatch::load_checkpoint_and_dispatch<Policy>(
        p.lm->module(), shard,
        {.device_map = dm, .offload_folder = folder, .dtype = a.dtype, .offload_state_dict = false, .show_progress = false,
         .disable_mmap = true});
    p.row.disk_bytes = static_cast<double>(on_disk);
    placed.push_back(std::move(p));
  };
  budgeted(accel::policy::sync_offload{}, "budget, sync_offload");
  budgeted(accel::policy::prefetch<2>{}, "budget, prefetch<2>");
  auto whole_disk = [&]<class Policy>(Policy, const char* label) {
    auto m = accel::dispatch::load_pretrained_causal_lm(a.folder, {.dtype = a.dtype, .show_progress = false, .disable_mmap = true});
    const std::string folder = (scratch / "disk_offload").string();
    accel::disk_offload<Policy>(m.model->module(), folder, {.execution_device = accel::Device::cpu()});
    Placed p{{label}, m.model, {}, nullptr};
    for (const auto& e : fs::directory_iterator(folder)) p.cold.push_back(e.path().string());
    p.row.disk_bytes = static_cast<double>(total);
    placed.push_back(std::move(p));
  };
  whole_disk(accel::policy::sync_offload{}, "disk_offload, sync_offload");
  whole_disk(accel::policy::prefetch<2>{}, "disk_offload, prefetch<2>");

  // The bound: the bytes a token reads, read as many times as the decode reads them, in each
  // repetition; three ways, the fastest kept.
  struct Method {
    const char* label;
    ReadMethod how;
    std::uint64_t piece;
    std::vector<double> rates;
  };
  std::vector<Method> methods{{"direct 64 MiB", ReadMethod::direct, std::uint64_t{64} << 20, {}},
                              {"direct 4 MiB", ReadMethod::direct, std::uint64_t{4} << 20, {}},
                              {"buffered 64 MiB", ReadMethod::buffered, std::uint64_t{64} << 20, {}},
                              {"mapped + WILLNEED 64 MiB", ReadMethod::mapped, std::uint64_t{64} << 20, {}}};
  for (int r = 0; r < a.reps; ++r) {
    for (auto& m : methods) m.rates.push_back(cold_read_rate(disk_extents, m.how, m.piece, static_cast<int>(a.decode)));
    auto [rate, tokens] = decode_rate(*in_memory.model, a, {});
    memory.rates.push_back(rate);
    memory.tokens = tokens;
    for (auto& p : placed) {
      auto [pr, pt] = decode_rate(*p.lm, a, p.cold);
      p.row.rates.push_back(pr);
      p.row.tokens = pt;
    }
  }
  double bound = 0;
  nlohmann::json out = {{"threads", accel::num_threads()}, {"dtype", std::string(accel::dtype_name(a.dtype))},
                        {"prompt", a.prompt}, {"decode", a.decode}, {"reps", a.reps}, {"budget", a.budget},
                        {"weight_bytes", total}, {"cpu_bytes", on_cpu}, {"disk_bytes", on_disk},
                        {"cold_read_gbps", nlohmann::json::object()}, {"rows", nlohmann::json::array()}};
  std::printf("\ncold sequential reads of the %.0f MB a token reads from disk (%lld passes per repetition, each after a "
              "drop):",
              static_cast<double>(on_disk) / 1e6, static_cast<long long>(a.decode));
  for (const auto& m : methods) {
    std::printf(" %s %.2f GB/s;", m.label, median(m.rates));
    bound = std::max(bound, median(m.rates));
    out["cold_read_gbps"][m.label] = median(m.rates);
  }
  out["bound_gbps"] = bound;
  out["in_memory_tokens_per_s"] = median(memory.rates);
  std::printf(" bound %.2f GB/s = %.2f tokens/s\n", bound, bound * 1e9 / static_cast<double>(on_disk));
  std::printf("%-30s %8.2f tokens/s\n", memory.label.c_str(), median(memory.rates));
  double sync_budget = 0;
  for (const auto& p : placed) {
    const double t = median(p.row.rates);
    const double gbs = t * p.row.disk_bytes / 1e9;
    if (p.row.label.find("sync_offload") != std::string::npos) sync_budget = t;
    std::printf("%-30s %8.2f tokens/s, offload %.2f GB/s = %3.0f%% of the bound", p.row.label.c_str(), t, gbs, 100 * gbs / bound);
    if (p.row.label.find("prefetch") != std::string::npos && sync_budget > 0) std::printf(", %.2fx sync", t / sync_budget);
    std::printf("%s\n", p.row.tokens == memory.tokens ? "" : "  (TOKENS DIFFER from the model in memory)");
    out["rows"].push_back({{"label", p.row.label}, {"tokens_per_s", t}, {"offload_gbps", gbs},
                           {"fraction_of_bound", bound > 0 ? gbs / bound : 0.0}, {"tokens_match", p.row.tokens == memory.tokens}});
  }
  if (!a.accelerate_src.empty()) {
    if (const auto j = run_accelerate(a)) {
      const double acc = j->value("disk_offload_tokens_per_s", 0.0);
      const double ours = median(placed.back().row.rates);
      std::printf("%-30s %8.2f tokens/s (Accelerate %s, torch %s, %s); disk_offload prefetch<2> is %.2fx\n",
                  "Accelerate disk_offload", acc, j->value("accelerate_version", std::string("?")).c_str(),
                  j->value("torch_version", std::string("?")).c_str(), j->value("dtype", std::string("?")).c_str(), ours / acc);
      std::printf("%-30s %8.2f tokens/s in memory under torch\n", "Accelerate (torch)", j->value("in_memory_tokens_per_s", 0.0));
      out["accelerate"] = {{"version", j->value("accelerate_version", std::string("?"))},
                           {"torch", j->value("torch_version", std::string("?"))},
                           {"disk_offload_tokens_per_s", acc},
                           {"in_memory_tokens_per_s", j->value("in_memory_tokens_per_s", 0.0)}};
    } else {
      std::printf("Accelerate disk_offload: the script gave no result (see benchmarks/accelerate/bench_disk_offload.py)\n");
      out["accelerate_not_run"] = "the script gave no result (benchmarks/accelerate/bench_disk_offload.py)";
    }
  } else {
    std::printf("Accelerate disk_offload: not measured here (give --accelerate-src PATH or set ACCELERATE_SRC)\n");
    out["accelerate_not_run"] = "give --accelerate-src PATH or set ACCELERATE_SRC";
  }
  placed.clear();
  std::error_code ec;
  fs::remove_all(scratch, ec);
  json.print(out);
  return 0;
}
