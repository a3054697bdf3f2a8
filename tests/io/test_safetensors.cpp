#include <catch2/catch.hpp>

#include "../file_bytes.hpp"
#include "../temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include "accel/core/memory_stats.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/safetensors_write.hpp"

namespace fs = std::filesystem;
using namespace accel;
using namespace accel::io;

namespace {

using accel_test::TempDir;

std::string raw_file(const std::string& header, const std::string& data) {
  std::string out;
  store_le<std::uint64_t>(out, header.size());
  return out + header + data;
}

using accel_test::read_raw;
using accel_test::write_raw;

// Throws FormatError whose message contains `needle`.
void require_rejects(const std::string& header, const std::string& data, const std::string& needle) {
  const std::string bytes = raw_file(header, data);
  try {
    (void)parse_safetensors_header(as_bytes(bytes), "bad.safetensors");
    FAIL("accepted: " << header);
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("bad.safetensors") != std::string::npos);
    CHECK(msg.find(needle) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors writer matches the reference layout byte for byte", "[io][safetensors]") {
  TempDir dir;
  // Two f32 and one i64 tensor: the i64 sorts first (higher alignment), then names ascending.
  Tensor b = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  Tensor a = Tensor::from_vector<float>({5, 6});
  Tensor c = Tensor::from_vector<std::int64_t>({7});
  save_file(NamedTensors{{"b", b}, {"a", a}, {"c", c}}, dir.file("m.safetensors"), {{"format", "pt"}});

  const std::string header =
      R"({"__metadata__":{"format":"pt"},"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("b":{"dtype":"F32","shape":[2,2],"data_offsets":[16,32]}})";
  std::string padded = header;
  padded.resize((padded.size() + 7) / 8 * 8, ' ');
  std::string data;
  const std::int64_t seven = 7;
  const float av[] = {5, 6}, bv[] = {1, 2, 3, 4};
  data.append(reinterpret_cast<const char*>(&seven), 8);
  data.append(reinterpret_cast<const char*>(av), 8);
  data.append(reinterpret_cast<const char*>(bv), 16);
  CHECK(read_raw(dir.file("m.safetensors")) == raw_file(padded, data));
  CHECK(safetensors_header_json({{"b", b}, {"a", a}, {"c", c}}, {{"format", "pt"}}) == header);

  // No temporary left behind.
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}) == 1);
}

TEST_CASE("safetensors reader round-trips every dtype with zero-copy views", "[io][safetensors]") {
  TempDir dir;
  NamedTensors in;
  for (const auto& info : dtype_table) {
    Tensor t = Tensor::empty(Shape{3, 2}, info.dtype);
    auto* p = static_cast<unsigned char*>(t.data_ptr());
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 7 + info.itemsize);
    if (info.dtype == DType::boolean) t.fill_(1.0);
    in.emplace_back("t." + std::string(info.name), t);
  }
  in.emplace_back("empty", Tensor::empty(Shape{0, 4}, DType::f16));
  in.emplace_back("scalar", Tensor::full(Shape{}, 2.5, DType::f64));
  save_file(in, dir.file("all.safetensors"));

  const auto before = memory_stats(Device::cpu()).allocated_bytes;
  auto f = SafetensorsFile::open(dir.file("all.safetensors"));
  std::vector<Tensor> views;
  for (const auto& [name, t] : in) {
    Tensor r = f.tensor(name);
    REQUIRE(r.dtype() == t.dtype());
    REQUIRE(r.shape() == t.shape());
    REQUIRE(r.storage().kind() == MemoryKind::mapped);
    CHECK(std::memcmp(r.data_ptr(), t.data_ptr(), t.nbytes()) == 0);
    views.push_back(r);
  }
  // Zero-copy: opening and viewing every tensor allocated no tensor bytes.
  CHECK(memory_stats(Device::cpu()).allocated_bytes == before);
  CHECK(f.tensor("scalar").item<double>() == 2.5);
  CHECK(f.info("t.float32").dtype == DType::f32);
  CHECK(f.keys().front() == "t.int64");  // offset order: I64 ranks highest in the reference
  CHECK_THROWS_AS(f.info("missing"), KeyError);

  // Materialised: converted to f32 on the CPU.
  Tensor h = f.tensor("t.float16", Device::cpu(), DType::f32);
  CHECK(h.dtype() == DType::f32);
  CHECK(h.storage().kind() == MemoryKind::host);
  CHECK(h.to_vector<float>() == f.tensor("t.float16").to_vector<float>());
}

TEST_CASE("safetensors writer accepts strided tensors", "[io][safetensors]") {
  TempDir dir;
  Tensor base = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor tr = base.t();  // 3x2, non-contiguous
  save_file(NamedTensors{{"tr", tr}}, dir.file("t.safetensors"));
  auto f = SafetensorsFile::open(dir.file("t.safetensors"));
  CHECK(f.tensor("tr").shape() == Shape{3, 2});
  CHECK(f.tensor("tr").to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("safetensors writer rejects bad input and leaves nothing behind", "[io][safetensors]") {
  TempDir dir;
  Tensor a = Tensor::ones(Shape{2});
  CHECK_THROWS_AS(save_file(NamedTensors{{"a", a}, {"a", a}}, dir.file("d.safetensors")), ValueError);
  CHECK_THROWS_AS(save_file(NamedTensors{{"m", a.to_meta()}}, dir.file("d.safetensors")), ValueError);
  CHECK_THROWS_AS(save_file(NamedTensors{{"a", a}}, dir.file("no/such/dir/x.safetensors")), IOError);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("safetensors header validation rejects every malformed header", "[io][safetensors]") {
  const std::string eight(8, '\0');
  // Baseline accepted.
  {
    const std::string ok = raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight);
    auto h = parse_safetensors_header(as_bytes(ok), "ok");
    REQUIRE(h.tensors.size() == 1);
    CHECK(h.tensors[0].nbytes() == 8);
  }
  SECTION("length") {
    std::string tiny = "abc";
    CHECK_THROWS_AS(parse_safetensors_header(as_bytes(tiny), "t"), FormatError);
    std::string big;
    store_le<std::uint64_t>(big, 100'000'001);
    CHECK_THROWS_WITH(parse_safetensors_header(as_bytes(big), "t"), Catch::Contains("100000000"));
    std::string past;
    store_le<std::uint64_t>(past, 50);
    past += "{}";
    CHECK_THROWS_WITH(parse_safetensors_header(as_bytes(past), "t"), Catch::Contains("past the end"));
    std::string huge;
    store_le<std::uint64_t>(huge, ~std::uint64_t{0});
    CHECK_THROWS_AS(parse_safetensors_header(as_bytes(huge), "t"), FormatError);
  }
  SECTION("json") {
    require_rejects("{\"a\":\xff}", "", "UTF-8");
    require_rejects("[1, 2]", "", "not a JSON object");
    require_rejects("{\"a\": ", "", "invalid JSON");
    require_rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                    std::string(4, '\0'), "duplicate key");
    require_rejects(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", std::string(4, '\0'), "nested");
  }
  SECTION("entries") {
    require_rejects(R"({"a":1})", "", "tensor 'a'");
    require_rejects(R"({"a":{"dtype":"F32","shape":[2]}})", eight, "data_offsets");
    require_rejects(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", eight, "unknown dtype");
    require_rejects(R"({"a":{"dtype":"float32","shape":[2],"data_offsets":[0,8]}})", eight, "unknown dtype");
    require_rejects(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight, "shape");
    require_rejects(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight, "shape");
    require_rejects(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight, "data_offsets");
    require_rejects(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight, "end before");
    require_rejects(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight, "needs 12 bytes");
    require_rejects(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight, "overflow");
    require_rejects(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", std::string(4, '\0'), "dimensions");
  }
  SECTION("layout") {
    // A gap, an overlap, a short and a long data section.
    require_rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight, "tensor 'a'");
    require_rejects(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    eight, "tensor 'b'");
    require_rejects(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0'), "covered exactly");
    require_rejects(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(12, '\0'), "covered exactly");
  }
  SECTION("metadata") {
    require_rejects(R"({"__metadata__":{"k":1}})", "", "metadata value of 'k'");
    require_rejects(R"({"__metadata__":[]})", "", "__metadata__");
    const std::string ok = raw_file(R"({"__metadata__":{"k":"v"}})", "");
    auto h = parse_safetensors_header(as_bytes(ok), "t");
    CHECK(h.metadata.at("k") == "v");
    CHECK(h.tensors.empty());
  }
}

TEST_CASE("safetensors file errors name the file", "[io][safetensors]") {
  TempDir dir;
  write_raw(dir.file("bad.safetensors"), raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"));
  CHECK_THROWS_WITH(SafetensorsFile::open(dir.file("bad.safetensors")),
                    Catch::Contains("bad.safetensors") && Catch::Contains("tensor 'w'"));
  CHECK_THROWS_AS(SafetensorsFile::open(dir.file("missing.safetensors")), IOError);
}

TEST_CASE("safetensors reader copies misaligned tensors instead of viewing them", "[io][safetensors]") {
  TempDir dir;
  // The f32 tensor starts one byte after a 4-aligned data section: misaligned for f32.
  std::string data = "\x01" + std::string(4, '\0');
  std::string header = R"({"p":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"q":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  while (header.size() % 4) header += ' ';
  float one = 1.0f;
  std::memcpy(data.data() + 1, &one, 4);
  write_raw(dir.file("odd.safetensors"), raw_file(header, data));
  auto f = SafetensorsFile::open(dir.file("odd.safetensors"));
  Tensor q = f.tensor("q");
  CHECK(q.storage().kind() == MemoryKind::host);
  CHECK(q.item<float>() == 1.0f);
}
