// Hostile inputs at the io layer: file names inside indexes that lead out of their folder, NUL
// bytes, absolute paths, and paths that are FIFOs, devices or directories instead of files. Each
// is refused quickly with an error naming the file and the entry; symbolic links keep working.
#include <catch2/catch.hpp>

#include "../file_bytes.hpp"
#include "../temp_dir.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/io/checkpoint_files.hpp"
#include "accel/io/confined_path.hpp"
#include "accel/io/inspect.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/offload.hpp"
#include "accel/core/regular_file.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/sharding.hpp"
#include "accel/io/torch_bin_write.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::io;

namespace {

using accel_test::TempDir;

using accel_test::write_raw;

/// The error `f` raises: its message, and whether it is one of the types listed.
struct Raised {
  std::string message = "<no exception>";
  bool format = false, io = false, value = false;
};

Raised raised_by(const std::function<void()>& f) {
  Raised r;
  try {
    f();
  } catch (const FormatError& e) {
    r.message = e.what();
    r.format = true;
  } catch (const IOError& e) {
    r.message = e.what();
    r.io = true;
  } catch (const ValueError& e) {
    r.message = e.what();
    r.value = true;
  } catch (const std::exception& e) {
    r.message = std::string("unexpected exception: ") + e.what();
  }
  return r;
}

/// Runs `f`, which must fail without waiting although `fifo` has no writer. A call that has not
/// returned after five seconds is either waiting on the FIFO (then a reader holds it open, and
/// opening it for writing succeeds and releases the reader) or only slow on a loaded machine (then
/// that open fails with ENXIO, and the call gets more time).
Raised raised_promptly(const fs::path& fifo, const std::function<void()>& f) {
  auto result = std::async(std::launch::async, [&] { return raised_by(f); });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0) {
      const Raised late = result.get();
      ::close(w);
      FAIL("waited on the FIFO " << fifo << " (then: " << late.message << ")");
    }
    if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      FAIL("no answer after 65 s, and not waiting on the FIFO " << fifo);
    }
  }
  return result.get();
}

StateDict small_state() {
  StateDict sd;
  sd.insert_or_assign("w", Tensor::from_vector<float>({1.0f, 2.0f, 3.0f}));
  return sd;
}

/// An offload folder `<root>/off` whose index.json is `index`, with a `x.dat` beside the folder
/// (outside it) that an escaping entry would read.
fs::path offload_folder_with(const TempDir& root, const std::string& index) {
  const fs::path off = root.path / "off";
  fs::create_directories(off);
  write_raw(off / "index.json", index);
  write_raw(root.path / "x.dat", std::string(12, '\x11'));
  return off;
}

}  // namespace

TEST_CASE("confined_entry keeps entries inside their folder", "[io][hostile]") {
  CHECK(confined_entry("model-00001-of-00002.safetensors", "i.json") == "model-00001-of-00002.safetensors");
  CHECK(confined_entry("sub/./w.dat", "i.json") == "sub/w.dat");
  CHECK(confined_entry("sub/../w.dat", "i.json") == "w.dat");
  CHECK(confined_path("/data/off", "w.dat", "i.json") == fs::path("/data/off/w.dat"));
  CHECK(confined_path("/data/off", "/abs/s.safetensors", "i.json", AbsolutePath::allowed) == fs::path("/abs/s.safetensors"));

  const auto refused = [](std::string_view entry, const std::string& needle, AbsolutePath a = AbsolutePath::refused) {
    INFO(printable_entry(entry));
    const Raised r = raised_by([&] { (void)confined_entry(entry, "offload index 'f/index.json', tensor 't'", a); });
    CHECK(r.format);
    CHECK(r.message.find("offload index 'f/index.json', tensor 't'") != std::string::npos);
    CHECK(r.message.find(needle) != std::string::npos);
  };
  refused("../x.dat", "'../x.dat' leads out of the folder");
  refused("a/../../x.dat", "leads out of the folder");
  refused("..", "leads out of the folder");
  refused("/etc/passwd", "'/etc/passwd' is absolute");
  refused(std::string_view("a\0b.dat", 7), "'a\\x00b.dat' holds a NUL byte");
  refused(std::string_view("/a\0b", 4), "holds a NUL byte", AbsolutePath::allowed);
  refused("", "is empty");
  refused(".", "names the folder itself");
  refused("a/..", "names the folder itself");
  refused("../x.safetensors", "leads out of the folder", AbsolutePath::allowed);
}

TEST_CASE("an offload index cannot name files outside its folder", "[io][hostile]") {
  TempDir root;
  const std::string entry = R"({"dtype": "float32", "shape": [3]})";
  SECTION("'../x', '/etc/passwd' and an embedded NUL as tensor names") {
    for (const auto& [name, shown] : std::vector<std::pair<std::string, std::string>>{
             {"../x", "'../x.dat' leads out of the folder"},
             {"/etc/passwd", "'/etc/passwd.dat' is absolute"},
             {"a\\u0000b", "'a\\x00b.dat' holds a NUL byte"}}) {
      INFO(name);
      const fs::path off = offload_folder_with(root, "{\"" + name + "\": " + entry + "}");
      for (const auto& f : std::vector<std::function<void()>>{
               [&] { (void)read_offload_index(off.string()); },
               [&] { (void)load_offloaded_weights(off.string()); },
               [&] { (void)inspect_checkpoint(off.string()); },
               [&] { (void)OffloadedWeightsLoader(std::nullopt, off.string()); }}) {
        const Raised r = raised_by(f);
        CHECK(r.format);
        CHECK(r.message.find((off / "index.json").string()) != std::string::npos);
        CHECK(r.message.find(shown) != std::string::npos);
      }
    }
  }
  SECTION("a safetensors_file leading out of the folder") {
    save_file(small_state(), (root.path / "outside.safetensors").string());
    const fs::path off = offload_folder_with(root, R"({"w": {"safetensors_file": "../outside.safetensors", "weight_name": "w"}})");
    const Raised r = raised_by([&] { (void)load_offloaded_weights(off.string()); });
    CHECK(r.format);
    CHECK(r.message.find("tensor 'w'") != std::string::npos);
    CHECK(r.message.find("'../outside.safetensors' leads out of the folder") != std::string::npos);
  }
  SECTION("an index handed in memory is held to the same rule") {
    OffloadIndex index = OffloadIndex::object();
    index["../x"] = nlohmann::ordered_json::parse(entry);
    CHECK_THROWS_AS(OffloadedWeightsLoader(std::nullopt, root.str(), index), FormatError);
    nn::Module model("M");
    CHECK_THROWS_AS(load_offloaded_weights(model, index, root.str()), FormatError);
  }
  SECTION("offload_weight does not write outside the folder either") {
    OffloadIndex index = OffloadIndex::object();
    const Raised r = raised_by([&] { offload_weight(small_state().at("w"), "../escaped", root.str() + "/off", &index); });
    CHECK(r.format);
    CHECK(r.message.find("../escaped.dat") != std::string::npos);
    CHECK_FALSE(fs::exists(root.path / "escaped.dat"));
    CHECK(index.empty());
  }
}

TEST_CASE("safetensors_file entries: relative to the offload folder, absolute as recorded", "[io][hostile]") {
  TempDir root;
  const fs::path off = root.path / "off";
  fs::create_directories(off / "shards");
  save_file(small_state(), (off / "shards" / "s.safetensors").string());
  save_file(small_state(), (root.path / "abs.safetensors").string());
  write_raw(off / "index.json", R"({"rel": {"safetensors_file": "shards/s.safetensors", "weight_name": "w"}, "abs": {"safetensors_file": ")" +
                                    (root.path / "abs.safetensors").string() + R"(", "weight_name": "w"}})");
  // The current directory is the test's, not the folder: a relative entry is found all the same.
  REQUIRE_FALSE(fs::exists("shards/s.safetensors"));
  const StateDict sd = load_offloaded_weights(off.string());
  CHECK(sd.at("rel").to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK(sd.at("abs").to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f});
  OffloadedWeightsLoader loader(std::nullopt, off.string());
  CHECK(loader.at("rel").to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK(inspect_checkpoint(off.string()).tensors.size() == 2);
}

TEST_CASE("a sharded index cannot name shards outside its folder", "[io][hostile]") {
  TempDir root;
  fs::create_directories(root.path / "ck");
  save_file(small_state(), (root.path / "x.safetensors").string());
  for (const auto& [shard, shown] : std::vector<std::pair<std::string, std::string>>{
           {"../x.safetensors", "'../x.safetensors' leads out of the folder"},
           {"sub/../../x.safetensors", "leads out of the folder"},
           {(root.path / "x.safetensors").string(), "is absolute"},
           {"x\\u0000.safetensors", "'x\\x00.safetensors' holds a NUL byte"}}) {
    INFO(shard);
    const fs::path index = root.path / "ck" / "model.safetensors.index.json";
    write_raw(index, R"({"metadata": {"total_size": 12}, "weight_map": {"w": ")" + shard + "\"}}");
    for (const auto& f : std::vector<std::function<void()>>{[&] { (void)read_sharded_index(index.string()); },
                                                            [&] { (void)resolve_checkpoint_files((root.path / "ck").string()); },
                                                            [&] { (void)inspect_checkpoint(index.string()); }}) {
      const Raised r = raised_by(f);
      CHECK(r.format);
      CHECK(r.message.find(index.string()) != std::string::npos);
      CHECK(r.message.find("tensor 'w'") != std::string::npos);
      CHECK(r.message.find(shown) != std::string::npos);
    }
  }
}

TEST_CASE("FIFOs are refused at once, never waited on", "[io][hostile]") {
  TempDir dir;
  const auto fifo = [&](const fs::path& p) {
    fs::create_directories(p.parent_path());
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    return p;
  };
  const fs::path st = fifo(dir.path / "model.safetensors");
  const auto refused_io = [&](const fs::path& named, const fs::path& waits_on, const std::function<void()>& f) {
    const Raised r = raised_promptly(waits_on, f);
    INFO(r.message);
    CHECK(r.io);
    CHECK(r.message.find(named.string()) != std::string::npos);
    CHECK(r.message.find("is a FIFO, not a regular file") != std::string::npos);
  };
  refused_io(st, st, [&] { (void)SafetensorsFile::open(st.string()); });
  refused_io(st, st, [&] { (void)load_torch_bin(st.string()); });
  refused_io(st, st, [&] { (void)read_small_file(st.string()); });
  refused_io(st, st, [&] { (void)detect_checkpoint_format(st); });
  refused_io(st, st, [&] { (void)inspect_checkpoint(st.string()); });
  refused_io(st, st, [&] { (void)load_state_dict(st.string()); });
  refused_io(st, st, [&] { (void)resolve_checkpoint_files(dir.str()); });  // the folder's model.safetensors
  refused_io(st, st, [&] { (void)RegularFile::open(st.string()); });

  const fs::path index = fifo(dir.path / "i" / "model.safetensors.index.json");
  refused_io(index, index, [&] { (void)read_sharded_index(index.string()); });
  const fs::path off_index = fifo(dir.path / "off" / "index.json");
  refused_io(off_index, off_index, [&] { (void)read_offload_index((dir.path / "off").string()); });

  // A .dat file or a shard that is a FIFO, named by an index.
  const fs::path dat = fifo(dir.path / "off2" / "w.dat");
  write_raw(dir.path / "off2" / "index.json", R"({"w": {"dtype": "float32", "shape": [3]}})");
  refused_io(dat, dat, [&] { (void)inspect_checkpoint((dir.path / "off2").string()); });
  refused_io(dat, dat, [&] { (void)load_offloaded_weight(dat.string(), {{"dtype", "float32"}, {"shape", {3}}}); });
  const fs::path shard = fifo(dir.path / "sh" / "s.safetensors");
  write_raw(dir.path / "sh" / "x.index.json", R"({"weight_map": {"w": "s.safetensors"}})");
  const Raised r = raised_promptly(shard, [&] { (void)read_sharded_index((dir.path / "sh" / "x.index.json").string()); });
  CHECK(r.format);
  CHECK(r.message.find("shard 's.safetensors' of tensor 'w' is not a regular file") != std::string::npos);
}

TEST_CASE("directories and devices are not files", "[io][hostile]") {
  TempDir dir;
  fs::create_directories(dir.path / "model.safetensors");
  const std::string named = (dir.path / "model.safetensors").string();
  const Raised open = raised_by([&] { (void)SafetensorsFile::open(named); });
  CHECK(open.io);
  CHECK(open.message.find("'" + named + "' is a directory, not a regular file") != std::string::npos);
  const Raised resolved = raised_by([&] { (void)resolve_checkpoint(dir.path); });
  CHECK(resolved.io);
  CHECK(resolved.message.find(named) != std::string::npos);
  CHECK_THROWS_AS(load_torch_bin(named), IOError);
  CHECK_THROWS_AS(read_small_file(named), IOError);

  fs::create_directories(dir.path / "sh" / "s.safetensors");
  write_raw(dir.path / "sh" / "x.index.json", R"({"weight_map": {"w": "s.safetensors"}})");
  CHECK_THROWS_WITH(read_sharded_index((dir.path / "sh" / "x.index.json").string()),
                    Catch::Contains("shard 's.safetensors' of tensor 'w' is not a regular file"));

  if (fs::exists("/dev/zero")) {
    CHECK_THROWS_WITH(RegularFile::open("/dev/zero"), Catch::Contains("'/dev/zero' is a character device"));
    CHECK_THROWS_AS(detect_checkpoint_format("/dev/zero"), IOError);
  }
}

TEST_CASE("symbolic links keep working, as in the Hugging Face cache", "[io][hostile]") {
  // blobs/<hash> hold the bytes; snapshots/<rev>/<name> are links into them.
  TempDir cache;
  const fs::path blobs = cache.path / "blobs", snap = cache.path / "snapshots" / "rev";
  fs::create_directories(blobs);
  fs::create_directories(snap);
  StateDict sd;
  sd.insert_or_assign("a", Tensor::from_vector<float>({1.0f, 2.0f}));
  sd.insert_or_assign("b", Tensor::from_vector<float>({3.0f, 4.0f, 5.0f}));
  TempDir staging;
  const ShardPlan plan = save_sharded(sd, staging.str(), std::int64_t{9});
  REQUIRE(plan.is_sharded());
  int n = 0;
  for (const auto& e : fs::directory_iterator(staging.path)) {
    const fs::path blob = blobs / ("hash" + std::to_string(n++));
    fs::copy_file(e.path(), blob);
    fs::create_symlink(fs::path("../../blobs") / blob.filename(), snap / e.path().filename());
  }
  CHECK(resolve_checkpoint(snap).format == CheckpointFormat::sharded_index);
  CHECK(resolve_checkpoint_files(snap.string()).size() == plan.filenames.size());
  const InspectResult r = inspect_checkpoint(snap.string());
  CHECK(r.tensors.size() == 2);

  // A .dat file linked from outside the offload folder is followed too: the link is the folder
  // owner's doing, not the index's.
  TempDir off;
  offload_state_dict(off.str(), sd);
  fs::rename(off.path / "a.dat", cache.path / "a.dat");
  fs::create_symlink(cache.path / "a.dat", off.path / "a.dat");
  CHECK(load_offloaded_weights(off.str()).at("a").to_vector<float>() == std::vector<float>{1.0f, 2.0f});
}
