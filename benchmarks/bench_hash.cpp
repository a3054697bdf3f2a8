// SHA-256 of a 1 GiB file: accel's inspect path next to coreutils' sha256sum, in one run.
//
//   bench_hash [--mib N] [--reps R]
//
// Writes N MiB (default 1024) of pseudo-random bytes into a temporary folder, reads it once so
// the page cache is warm, then alternates R times (default 5): the file mapped and hashed as
// `accel inspect` hashes a tensor (io/tensor_sha256.hpp over io/sha256.hpp), and `sha256sum` on
// the same file through popen (its process start included: a few ms against ~1 s). Prints the
// median GB/s of each and their ratio, checks that both digests agree, and deletes the file.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "accel/core/mapped_file.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/tensor_sha256.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// A folder under the system temp directory, removed with its contents at scope exit.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string templ = (fs::temp_directory_path() / "accel_bench_hash_XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path = templ;
  }
  ~ScratchDir() {
    std::error_code ignore;
    fs::remove_all(path, ignore);
  }
};

void write_random_file(const std::string& path, std::size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  std::vector<std::uint64_t> chunk(std::size_t{4} << 17);  // 4 MiB
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::size_t done = 0; done < bytes;) {
    for (auto& w : chunk) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      w = x;
    }
    const std::size_t n = std::min(bytes - done, chunk.size() * sizeof(std::uint64_t));
    out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(n));
    done += n;
  }
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
}

std::string ours(const std::string& path) {
  const auto file = MappedFile::open(path);
  const Tensor t = Tensor::from_storage(file->region(0, file->size()), DType::u8, {static_cast<std::int64_t>(file->size())});
  return io::tensor_sha256(t, io::plan_tensor_sha256(t));
}

std::string sha256sum(const std::string& path) {
  FILE* pipe = ::popen(("sha256sum '" + path + "'").c_str(), "r");
  if (!pipe) throw std::runtime_error("popen(sha256sum) failed");
  char buf[256] = {};
  const bool got = std::fgets(buf, sizeof buf, pipe) != nullptr;
  if (::pclose(pipe) != 0 || !got) throw std::runtime_error("sha256sum failed");
  return std::string(buf).substr(0, 64);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 1024;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mib") mib = std::stoul(argv[i + 1]);
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
  }
  const ScratchDir dir;
  const std::string path = (dir.path / "blob.bin").string();
  const std::size_t bytes = mib << 20;
  write_random_file(path, bytes);

  const std::string expected = sha256sum(path);  // also warms the page cache
  std::vector<double> t_ours, t_ref;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    const std::string a = ours(path);
    t_ours.push_back(seconds_since(t0));
    t0 = Clock::now();
    const std::string b = sha256sum(path);
    t_ref.push_back(seconds_since(t0));
    if (a != expected || b != expected) {
      std::fprintf(stderr, "digests disagree: accel %s, sha256sum %s (first %s)\n", a.c_str(), b.c_str(), expected.c_str());
      return 1;
    }
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  const double ours_gbs = gb / median(t_ours), ref_gbs = gb / median(t_ref);
  std::printf("SHA-256 of %zu MiB (page cache warm), medians of %d repetitions\n", mib, reps);
  std::printf("  accel io::sha256 (libcrypto, mapped)  %7.3f s  %6.2f GB/s\n", median(t_ours), ours_gbs);
  std::printf("  sha256sum (coreutils, via popen)      %7.3f s  %6.2f GB/s\n", median(t_ref), ref_gbs);
  std::printf("  accel / sha256sum                     %6.2fx\n", ours_gbs / ref_gbs);
  std::printf("  digest %s (both agree)\n", expected.c_str());
  return 0;
}
