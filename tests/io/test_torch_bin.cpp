// load_torch_bin against files written by the real torch.save (tests/data/torch_bin, made by
// tests/io/make_torch_bin_fixtures.py), and save_torch_bin -> load_torch_bin round trips.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/memory_stats.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/io/torch_bin_write.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::io;
using nlohmann::json;

namespace {

const fs::path fixtures = fs::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "torch_bin";

const json& expected() {
  static const json j = [] {
    std::ifstream in(fixtures / "expected.json");
    REQUIRE(in);
    return json::parse(in);
  }();
  return j;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

using accel_test::TempDir;

std::string hex_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  static const char* digits = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  for (std::size_t i = 0; i < c.nbytes(); ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

void flatten(const json& v, std::vector<json>& out) {
  if (v.is_array()) {
    for (const auto& x : v) flatten(x, out);
  } else {
    out.push_back(v);
  }
}

// JSON number or "nan" / "inf" / "-inf" (the fixture script's spelling of non-finite floats).
double json_double(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "nan") return std::nan("");
    return s == "inf" ? INFINITY : -INFINITY;
  }
  return v.get<double>();
}

bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Every property expected.json records for one tensor.
void check_tensor(const Tensor& t, const json& e) {
  const std::string name = e["name"];
  INFO("tensor " << name);
  CHECK(std::string(dtype_name(t.dtype())) == e["dtype"].get<std::string>());
  CHECK(t.shape().vec() == e["shape"].get<std::vector<std::int64_t>>());
  CHECK(t.strides().vec() == e["stride"].get<std::vector<std::int64_t>>());
  CHECK(t.storage_offset() == e["storage_offset"].get<std::int64_t>());
  CHECK(t.storage().nbytes() == e["storage_numel"].get<std::size_t>() * t.element_size());
  CHECK(hex_of(t) == e["hex"].get<std::string>());

  std::vector<json> values;
  flatten(e["values"], values);
  REQUIRE(values.size() == static_cast<std::size_t>(t.numel()));
  if (t.dtype() == DType::i64) {
    const auto got = t.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(got[i] == values[i].get<std::int64_t>());
  } else {
    const auto got = t.to_vector<double>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      INFO("element " << i << ": " << got[i] << " vs " << values[i].dump());
      CHECK(same_double(got[i], json_double(values[i])));
    }
  }
}

void check_fixture(const StateDict& sd, const json& spec) {
  const auto& tensors = spec["tensors"];
  REQUIRE(sd.size() == tensors.size());
  std::size_t i = 0;
  for (const auto& [name, t] : sd) {
    CHECK(name == tensors[i]["name"].get<std::string>());  // torch's insertion order
    check_tensor(t, tensors[i]);
    ++i;
  }
}

// The tensors a fixture must hold ("same_tensors_as" points at another fixture's list).
const json& spec_of(const std::string& file) {
  const json& spec = expected()["fixtures"][file];
  return spec.contains("same_tensors_as") ? expected()["fixtures"][spec["same_tensors_as"].get<std::string>()] : spec;
}

std::vector<std::string> good_fixtures() {
  std::vector<std::string> out;
  for (const auto& [file, spec] : expected()["fixtures"].items()) {
    if (!spec.contains("error_contains")) out.push_back(file);
  }
  return out;
}

// Runs `load`: success is fine, a FormatError is fine, anything else fails the test.
template <typename F>
void parses_or_format_error(F&& load, const std::string& what) {
  try {
    load();
  } catch (const FormatError&) {
  } catch (const std::exception& e) {
    FAIL(what << ": " << typeid(e).name() << ": " << e.what());
  }
}

}  // namespace

TEST_CASE("load_torch_bin reads real torch.save files bit-exactly", "[io][torch_bin]") {
  REQUIRE(good_fixtures().size() >= 4);
  for (const auto& file : good_fixtures()) {
    INFO("fixture " << file);
    const auto& spec = spec_of(file);
    check_fixture(load_torch_bin((fixtures / file).string()), spec);
    const std::string bytes = read_file(fixtures / file);
    check_fixture(parse_torch_bin(as_bytes(bytes), file), spec);
  }
}

TEST_CASE("load_torch_bin views the mapped file instead of allocating", "[io][torch_bin]") {
  const auto before = memory_stats(Device::cpu()).allocated_bytes;
  const StateDict sd = load_torch_bin((fixtures / "state_dict.bin").string());
  CHECK(memory_stats(Device::cpu()).allocated_bytes == before);
  for (const auto& [name, t] : sd) {
    INFO(name);
    if (t.storage().nbytes() > 0) CHECK(t.storage().kind() == MemoryKind::mapped);
    CHECK_FALSE(t.storage().writable());
  }
}

TEST_CASE("tensors that share a torch storage share one Storage", "[io][torch_bin]") {
  for (const auto& file : good_fixtures()) {
    INFO("fixture " << file);
    const auto& spec = spec_of(file);
    const StateDict sd = load_torch_bin((fixtures / file).string());
    std::map<std::string, std::size_t> group_of;
    std::size_t g = 0;
    for (const auto& group : spec["shared_storage"]) {
      for (const auto& name : group) group_of[name.get<std::string>()] = g;
      ++g;
    }
    for (const auto& [a, ta] : sd) {
      for (const auto& [b, tb] : sd) {
        if (a >= b || ta.storage().nbytes() == 0 || tb.storage().nbytes() == 0) continue;
        const bool shared = group_of.count(a) && group_of.count(b) && group_of[a] == group_of[b];
        INFO(a << " / " << b);
        CHECK((ta.storage() == tb.storage()) == shared);
      }
    }
  }
  const StateDict sd = load_torch_bin((fixtures / "state_dict.bin").string());
  REQUIRE(expected()["fixtures"]["state_dict.bin"]["shared_storage"].size() == 3);
  CHECK(sd.at("tied.embed.weight").is_same(sd.at("tied.lm_head.weight")));
  CHECK(sd.at("views.base").shares_storage(sd.at("views.base_t")));
}

TEST_CASE("torch views keep their strides and storage offsets", "[io][torch_bin]") {
  const StateDict sd = load_torch_bin((fixtures / "state_dict.bin").string());
  const Tensor& base = sd.at("views.base");
  const Tensor& base_t = sd.at("views.base_t");
  CHECK(base.is_contiguous());
  CHECK_FALSE(base_t.is_contiguous());
  CHECK(base_t.strides() == Shape{1, 6});
  CHECK(base_t.data_ptr() == base.data_ptr());
  for (std::int64_t i = 0; i < 6; ++i) {
    for (std::int64_t j = 0; j < 4; ++j) CHECK(base_t.at<float>({i, j}) == base.at<float>({j, i}));
  }

  // A narrow slice saved without its base: the whole storage is in the file, the view starts
  // at its offset.
  const Tensor& rows = sd.at("views.rows_1_3");
  CHECK(rows.storage_offset() == 5);
  CHECK(rows.storage().nbytes() == 40 * 8);
  CHECK(rows.at<std::int64_t>({0, 0}) == 5);
  CHECK(rows.at<std::int64_t>({2, 4}) == 19);

  const Tensor& cols = sd.at("views.cols_2_4");
  const Tensor& cols_t = sd.at("views.cols_2_4_t");
  CHECK(cols.storage_offset() == 2);
  CHECK(cols.strides() == Shape{7, 1});
  CHECK_FALSE(cols.is_contiguous());
  CHECK(cols_t.strides() == Shape{1, 7});
  CHECK(hex_of(cols_t.transpose(0, 1)) == hex_of(cols));

  const Tensor& scalar = sd.at("scalar");
  CHECK(scalar.dim() == 0);
  CHECK(scalar.item<float>() == -7.25f);
  CHECK(sd.at("empty.f32").numel() == 0);
  CHECK(sd.at("empty.f32").shape() == Shape{0, 3});
}

TEST_CASE("foreign globals in a torch pickle are refused, never called", "[io][torch_bin]") {
  for (const char* file : {"malicious_os_system.bin", "malicious_eval.bin", "legacy.bin"}) {
    INFO("fixture " << file);
    const auto& spec = expected()["fixtures"][file];
    REQUIRE(spec.contains("error_contains"));
    const std::string path = (fixtures / file).string();
    for (int via_memory = 0; via_memory < 2; ++via_memory) {
      try {
        if (via_memory) {
          const std::string bytes = read_file(path);
          (void)parse_torch_bin(as_bytes(bytes), path);
        } else {
          (void)load_torch_bin(path);
        }
        FAIL("accepted " << file);
      } catch (const FormatError& e) {
        const std::string msg = e.what();
        INFO(msg);
        for (const auto& needle : spec["error_contains"]) CHECK(msg.find(needle.get<std::string>()) != std::string::npos);
      }
    }
  }
}

TEST_CASE("truncated torch files raise FormatError", "[io][torch_bin]") {
  for (const auto& file : good_fixtures()) {
    const std::string bytes = read_file(fixtures / file);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      INFO(file << " cut to " << n << " bytes");
      CHECK_THROWS_AS(parse_torch_bin(as_bytes(std::string_view(bytes).substr(0, n)), file), FormatError);
    }
    TempDir dir;
    for (std::size_t n : {std::size_t{0}, std::size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
      const std::string path = dir.file("cut.bin");
      std::ofstream(path, std::ios::binary) << bytes.substr(0, n);
      INFO(file << " cut to " << n << " bytes on disk");
      CHECK_THROWS_AS(load_torch_bin(path), FormatError);
    }
  }
}

TEST_CASE("corrupted torch files load or raise FormatError, never anything else", "[io][torch_bin]") {
  for (const auto& file : good_fixtures()) {
    const std::string good = read_file(fixtures / file);
    for (std::size_t at = 0; at < good.size(); ++at) {
      for (unsigned char mask : {0x01, 0x80, 0xFF}) {
        std::string bad = good;
        bad[at] = static_cast<char>(static_cast<unsigned char>(bad[at]) ^ mask);
        parses_or_format_error([&] { (void)parse_torch_bin(as_bytes(bad), file); },
                               file + " with byte " + std::to_string(at) + " ^ " + std::to_string(mask));
      }
    }
  }
  // Damage that must be detected: the pickle's STOP, the central directory signature.
  const std::string good = read_file(fixtures / "state_dict.bin");
  const auto zip = ZipArchive::parse(as_bytes(good), "state_dict.bin");
  const ZipEntry* pkl = zip.find("state_dict/data.pkl");
  REQUIRE(pkl);
  std::string no_stop = good;
  no_stop[pkl->data_offset + pkl->size - 1] = 'N';
  CHECK_THROWS_AS(parse_torch_bin(as_bytes(no_stop), "state_dict.bin"), FormatError);
  std::string no_cd = good;
  const auto cd = no_cd.rfind(std::string("PK\x01\x02", 4));
  REQUIRE(cd != std::string::npos);
  no_cd[cd + 2] = 9;
  CHECK_THROWS_AS(parse_torch_bin(as_bytes(no_cd), "state_dict.bin"), FormatError);
}

TEST_CASE("save_torch_bin then load_torch_bin is bit-exact for every dtype", "[io][torch_bin]") {
  TempDir dir;
  StateDict sd;
  for (const auto& info : dtype_table) {
    const DType d = info.dtype;
    // Bytes 0..n-1 as raw elements: every bit pattern class a dtype has (NaNs included) appears.
    const std::int64_t n = 24;
    Tensor t = Tensor::empty({2, 3, 4}, d);
    auto* p = static_cast<unsigned char*>(t.data_ptr());
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 37 + 11);
    if (d == DType::boolean) {
      for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(i % 3 == 0);
    }
    const std::string name(dtype_name(d));
    sd.insert_or_assign("plain." + name, t);
    sd.insert_or_assign("view_t." + name, t.transpose(0, 2));
    sd.insert_or_assign("slice." + name, t.narrow(1, 1, 2));
    sd.insert_or_assign("scalar." + name, t.flatten().narrow(0, 5, 1).view(Shape{}));
  }
  sd.insert_or_assign("empty", Tensor::empty({0, 4}, DType::bf16));
  const std::string path = dir.file("round_trip.bin");
  save_torch_bin(sd, path);
  const StateDict back = load_torch_bin(path);
  REQUIRE(back.keys() == sd.keys());
  for (const auto& [name, t] : sd) {
    INFO(name);
    const Tensor& b = back.at(name);
    CHECK(b.dtype() == t.dtype());
    CHECK(b.shape() == t.shape());
    CHECK(b.strides() == t.strides());
    CHECK(b.storage_offset() == t.storage_offset());
    CHECK(hex_of(b) == hex_of(t));
  }
  for (const auto& info : dtype_table) {
    const std::string name(dtype_name(info.dtype));
    CHECK(back.at("plain." + name).storage() == back.at("view_t." + name).storage());
    CHECK(back.at("plain." + name).storage() == back.at("scalar." + name).storage());
  }

  // A real torch file survives a save/load cycle through accel unchanged.
  const StateDict real = load_torch_bin((fixtures / "state_dict.bin").string());
  const std::string again = dir.file("again.bin");
  save_torch_bin(real, again);
  check_fixture(load_torch_bin(again), expected()["fixtures"]["state_dict.bin"]);
}
