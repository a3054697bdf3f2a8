// The GGUF reader and the ggml dequantizers against ../shared/conformance/gguf: every file its
// manifest lists, compared the way the manifest's README prescribes (header fields, metadata in
// file order with types and exact bits, tensor infos, bitwise float32 dequantization), malformed
// files rejected with FormatError, lenient ones read or rejected without crashing.
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "accel/io/gguf.hpp"
#include "accel/io/gguf_write.hpp"
#include "accel/io/ggml_blocks.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "../file_bytes.hpp"
#include "../temp_dir.hpp"

using namespace accel;
using namespace accel::io;
using nlohmann::json;

namespace {

const std::filesystem::path gguf_dir = std::filesystem::path(ACCEL_SHARED_DIR) / "conformance" / "gguf";

json manifest() { return json::parse(accel_test::read_raw(gguf_dir / "manifest.json")); }

std::uint64_t hex_bits(const json& j) { return std::stoull(j.get<std::string>(), nullptr, 16); }

/// Compares one metadata value with its manifest entry (type names, exact integers, float bits).
void check_value(const GgufValue& v, const std::string& type, const json& value, const json* bits,
                 const std::string& where) {
  INFO(where);
  REQUIRE(gguf_value_type_name(v.type) == type);
  if (type == "STRING") {
    REQUIRE(v.as_string());
    CHECK(*v.as_string() == value.get<std::string>());
  } else if (type == "BOOL") {
    REQUIRE(v.as_bool());
    CHECK(*v.as_bool() == value.get<bool>());
  } else if (type == "FLOAT32" || type == "FLOAT64") {
    REQUIRE(v.is_float());
    const double d = *v.as_double();
    REQUIRE(bits);
    if (type == "FLOAT32") {
      CHECK(std::bit_cast<std::uint32_t>(static_cast<float>(d)) == hex_bits(*bits));
    } else {
      CHECK(std::bit_cast<std::uint64_t>(d) == hex_bits(*bits));
    }
  } else if (type.starts_with("UINT")) {
    REQUIRE(std::holds_alternative<std::uint64_t>(v.data));
    CHECK(std::get<std::uint64_t>(v.data) == value.get<std::uint64_t>());
  } else {
    REQUIRE(std::holds_alternative<std::int64_t>(v.data));
    CHECK(std::get<std::int64_t>(v.data) == value.get<std::int64_t>());
  }
}

void check_metadata(const GgufHeader& h, const json& expected) {
  REQUIRE(h.metadata.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& e = expected[i];
    const auto& [key, v] = h.metadata[i];
    const std::string where = "key " + e["key"].get<std::string>();
    REQUIRE(key == e["key"].get<std::string>());
    const auto type = e["type"].get<std::string>();
    if (type != "ARRAY") {
      check_value(v, type, e["value"], e.contains("bits") ? &e["bits"] : nullptr, where);
      continue;
    }
    INFO(where);
    REQUIRE(v.as_array());
    const auto& a = *v.as_array();
    CHECK(gguf_value_type_name(a.elem_type) == e["elem_type"].get<std::string>());
    REQUIRE(a.items.size() == e["value"].size());
    for (std::size_t k = 0; k < a.items.size(); ++k) {
      const json* bits = e.contains("bits") ? &e["bits"][k] : nullptr;
      check_value(a.items[k], e["elem_type"].get<std::string>(), e["value"][k], bits,
                  where + "[" + std::to_string(k) + "]");
    }
  }
}

/// Dequantizes (or, for the integer and F64 types, reads) tensor `t` and compares it with its
/// reference array per the manifest's rule.
void check_tensor_values(const GgufFile& f, const GgufTensorInfo& t, const json& e) {
  const std::string ref = accel_test::read_raw(gguf_dir / e["ref"].get<std::string>());
  INFO("tensor " << t.name << " (" << ggml_type_name(t.type) << ")");
  if (e["ref_dtype"].get<std::string>() != "float32") {
    // Raw values: the file's bytes, viewed as the plain dtype in torch order.
    const Tensor v = f.tensor(t.name);
    REQUIRE(v.nbytes() == ref.size());
    CHECK(std::memcmp(v.data_ptr(), ref.data(), ref.size()) == 0);
    return;
  }
  const Tensor v = io::dequantize(f, t.name);
  REQUIRE(v.dtype() == DType::f32);
  REQUIRE(v.nbytes() == ref.size());
  const auto* got = static_cast<const std::uint32_t*>(v.data_ptr());
  std::size_t mismatches = 0, first = 0;
  const bool nan_lenient = e["compare"].get<std::string>() != "bitwise" || t.type == GgmlType::f16;
  for (std::size_t i = 0; i < ref.size() / 4; ++i) {
    std::uint32_t want;
    std::memcpy(&want, ref.data() + 4 * i, 4);
    bool same = got[i] == want;
    if (!same && nan_lenient) {
      same = std::isnan(std::bit_cast<float>(got[i])) && std::isnan(std::bit_cast<float>(want));
    }
    if (!same && mismatches++ == 0) first = i;
  }
  INFO("first mismatch at element " << first);
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("GGUF conformance: valid files open with the manifest's header, metadata and tensors",
          "[io][gguf][conformance]") {
  const json m = manifest();
  std::size_t files = 0, tensors = 0, lattice = 0;
  for (const auto& e : m["files"]) {
    if (e["expect"] != "ok") continue;
    const auto path = (gguf_dir / e["file"].get<std::string>()).string();
    INFO(path);
    const auto f = GgufFile::open(path);
    const auto& h = f.header();
    CHECK(h.version == e["version"].get<std::uint32_t>());
    CHECK(h.alignment == e["alignment"].get<std::uint64_t>());
    CHECK(h.data_offset == e["data_offset"].get<std::uint64_t>());
    CHECK(h.metadata.size() == e["n_kv"].get<std::size_t>());
    check_metadata(h, e["metadata"]);
    REQUIRE(h.tensors.size() == e["n_tensors"].get<std::size_t>());
    for (std::size_t i = 0; i < h.tensors.size(); ++i) {
      const auto& t = h.tensors[i];
      const auto& te = e["tensors"][i];
      INFO("tensor " << i);
      CHECK(t.name == te["name"].get<std::string>());
      CHECK(ggml_type_name(t.type) == te["type"].get<std::string>());
      CHECK(static_cast<std::uint32_t>(t.type) == te["type_id"].get<std::uint32_t>());
      CHECK(t.ne == te["ne"].get<std::vector<std::uint64_t>>());
      CHECK(t.numel == te["n_elements"].get<std::uint64_t>());
      CHECK(t.nbytes == te["n_bytes"].get<std::uint64_t>());
      CHECK(t.offset == te["offset"].get<std::uint64_t>());
      CHECK(t.file_offset == te["file_offset"].get<std::uint64_t>());
      CHECK(f.info(t.name).file_offset == t.file_offset);
      // Every type dequantizes: none is left out of the bitwise comparison.
      REQUIRE(ggml_type_info(t.type).dequantizable);
      check_tensor_values(f, t, te);
      ++tensors;
      lattice += with_ggml_lattice_block(t.type, [](auto) {});
    }
    ++files;
  }
  CHECK(files >= 34);
  CHECK(tensors >= 256);
  // The seven lattice IQ types among them, eight tensors each in the reference set.
  CHECK(lattice >= 7 * 8);
}

TEST_CASE("GGUF conformance: malformed files are FormatError, lenient ones never crash",
          "[io][gguf][conformance]") {
  const json m = manifest();
  std::size_t rejected = 0;
  for (const auto& e : m["files"]) {
    const auto path = (gguf_dir / e["file"].get<std::string>()).string();
    INFO(path << ": " << e["description"].get<std::string>());
    if (e["expect"] == "reject") {
      CHECK_THROWS_AS(GgufFile::open(path), FormatError);
      ++rejected;
    } else if (e["expect"] == "either") {
      try {
        const auto f = GgufFile::open(path);
        // Accepted: read every tensor the way a loader would.
        for (const auto& t : f.tensors()) {
          if (ggml_type_info(t.type).dequantizable) (void)io::dequantize(f, t.name);
        }
      } catch (const FormatError&) {
      }
    }
  }
  CHECK(rejected >= 27);
}

TEST_CASE("GGUF lenient files: what is accepted reads as described", "[io][gguf][conformance]") {
  SECTION("n_dims = 0 is one element") {
    const auto f = GgufFile::open((gguf_dir / "lenient/zero_ndims_scalar.gguf").string());
    REQUIRE(f.tensors().size() == 1);
    const Tensor t = io::dequantize(f, f.tensors()[0].name);
    CHECK(t.numel() == 1);
    CHECK(static_cast<const float*>(t.data_ptr())[0] == 2.5f);
  }
  SECTION("a nested array keeps its structure") {
    const auto f = GgufFile::open((gguf_dir / "lenient/nested_array.gguf").string());
    const GgufArray* outer = nullptr;
    for (const auto& [k, v] : f.header().metadata) {
      if (v.as_array() && v.as_array()->elem_type == GgufValueType::array) outer = v.as_array();
    }
    REQUIRE(outer);
    REQUIRE(outer->items.size() == 2);
    REQUIRE(outer->items[1].as_array());
    CHECK(outer->items[1].as_array()->items.size() == 2);
    CHECK(outer->items[1].as_array()->items[1].as_uint() == 2u);
  }
  SECTION("the empty tensor name and two tensors over one offset") {
    const auto f = GgufFile::open((gguf_dir / "lenient/empty_tensor_name.gguf").string());
    CHECK(f.contains(""));
    const Tensor t = io::dequantize(f, "");
    REQUIRE(t.numel() == 4);
    for (int i = 0; i < 4; ++i) CHECK(static_cast<const float*>(t.data_ptr())[i] == float(i + 1));
    const auto g = GgufFile::open((gguf_dir / "lenient/aliased_tensors.gguf").string());
    REQUIRE(g.tensors().size() == 2);
    CHECK(g.tensors()[0].file_offset == g.tensors()[1].file_offset);
  }
  SECTION("a big-endian file is refused as such") {
    CHECK_THROWS_WITH(GgufFile::open((gguf_dir / "lenient/big_endian.gguf").string()),
                      Catch::Contains("big-endian"));
  }
}

TEST_CASE("GGUF errors name the file and the key or tensor", "[io][gguf]") {
  const auto dir = gguf_dir / "malformed";
  CHECK_THROWS_WITH(GgufFile::open((dir / "duplicate_key.gguf").string()),
                    Catch::Contains("duplicate_key.gguf") && Catch::Contains("'oracle.answer' appears twice"));
  CHECK_THROWS_WITH(GgufFile::open((dir / "kquant_row_128.gguf").string()),
                    Catch::Contains("Q4_K") && Catch::Contains("block size 256"));
  CHECK_THROWS_WITH(GgufFile::open((dir / "tensor_bigger_than_file.gguf").string()),
                    Catch::Contains("reach past the end"));
  CHECK_THROWS_WITH(GgufFile::open((dir / "alignment_wrong_type.gguf").string()),
                    Catch::Contains("general.alignment") && Catch::Contains("UINT32"));
  CHECK_THROWS_WITH(GgufFile::open((dir / "tensor_type_removed_q4_2.gguf").string()),
                    Catch::Contains("ggml type 4"));
}

TEST_CASE("GGUF alignment 1: tensors at odd addresses read through copies", "[io][gguf]") {
  // A hand-made file: general.alignment = 1, a 3-byte I8 tensor, then an F32 and a Q8_0 tensor
  // that start at odd offsets.
  std::string b = "GGUF";
  const auto u32 = [&](std::uint32_t v) { io::store_le(b, v); };
  const auto u64 = [&](std::uint64_t v) { io::store_le(b, v); };
  const auto str = [&](const std::string& s) { u64(s.size()); b += s; };
  u32(3), u64(3), u64(1);
  str("general.alignment"), u32(4), u32(1);
  str("a"), u32(1), u64(3), u32(24), u64(0);
  str("b"), u32(1), u64(2), u32(0), u64(3);
  str("c"), u32(1), u64(32), u32(8), u64(11);
  b += std::string("\x01\x02\x03", 3);
  const float fv[2] = {1.5f, -2.0f};
  b.append(reinterpret_cast<const char*>(fv), 8);
  b += std::string("\x00\x40", 2);  // the Q8_0 block: f16 scale 2.0, then 32 int8
  for (int i = 0; i < 32; ++i) b.push_back(static_cast<char>(i - 16));
  accel_test::TempDir dir;
  accel_test::write_raw(dir.file("odd.gguf"), b);
  const auto f = GgufFile::open(dir.file("odd.gguf"));
  CHECK(f.header().alignment == 1);
  const Tensor t = f.tensor("b");
  CHECK(t.at<float>({0}) == 1.5f);
  CHECK(t.at<float>({1}) == -2.0f);
  const Tensor q = io::dequantize(f, "c");
  for (int i = 0; i < 32; ++i) CHECK(static_cast<const float*>(q.data_ptr())[i] == 2.0f * (i - 16));
  CHECK_THROWS_AS(f.tensor("c"), DTypeError);
  CHECK_THROWS_WITH(f.info("missing"), Catch::Contains("odd.gguf") && Catch::Contains("'missing'"));
}

TEST_CASE("ggml type table: block sizes, row bytes and names", "[io][gguf]") {
  CHECK(ggml_row_nbytes(GgmlType::q4_k, 4096) == 16 * 144);
  CHECK(ggml_row_nbytes(GgmlType::f16, 7) == 14);
  CHECK_THROWS_AS(ggml_row_nbytes(GgmlType::q4_0, 33), ShapeError);
  CHECK(ggml_type_from_string("q6_k") == GgmlType::q6_k);
  CHECK_FALSE(ggml_type_from_string("Q4_2"));
  CHECK(find_ggml_type(4) == nullptr);
  CHECK(find_ggml_type(1000) == nullptr);
  CHECK(ggml_type_of(DType::bf16) == GgmlType::bf16);
  CHECK_FALSE(ggml_type_of(DType::u8));
  for (const auto& row : ggml_type_table) CHECK(row.dequantizable);
}

namespace {
/// The 256 floats of one hand-made block of type t, through dequantize_row's dispatch.
template <class B>
std::vector<float> decode_block(GgmlType t, const B& b) {
  std::vector<float> y(256);
  io::dequantize_row(t, reinterpret_cast<const std::byte*>(&b), y.data(), y.size());
  return y;
}

void check_run(const std::vector<float>& y, std::size_t at, std::initializer_list<float> want) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << at + i);
    CHECK(y[at + i] == want.begin()[i]);
  }
}

constexpr std::uint16_t f16_two = 0x4000;

// Code-point coordinates the tests below use, as ggml-common.h's tables spell them (bytes low to high).
// iq2xxs_grid[5] = 25 8 25 8 8 8 8 8, iq2xxs_grid[200] = 8 8 8 8 25 8 43 25
// iq2xs_grid[300] = 8 25 25 8 8 25 8 25, iq2xs_grid[511] = iq2s_grid[1023] = eight 43s
// iq2s_grid[777] = 8 43 8 8 25 8 43 25
// iq3xxs_grid[0] = 4 4 4 4, iq3xxs_grid[13] = 28 4 12 4, iq3xxs_grid[255] = 4 28 52 62
// iq3s_grid[300] = 3 5 3 7, iq3s_grid[511] = 1 1 15 15
// iq1s_grid[0] = eight -1s, iq1s_grid[5] = 0 -1 0 -1 -1 -1 -1 -1, iq1s_grid[1234] = 1 -1 1 -1 0 -1 1 0,
// iq1s_grid[2047] = eight 1s
}  // namespace

TEST_CASE("lattice IQ blocks decode as their formats say, through the generated grids", "[io][gguf]") {
  SECTION("IQ2_XXS: four byte indices, then 7-bit sign indices and a 4-bit scale in one word") {
    block_iq2_xxs b{};
    b.d = f16_two;
    b.qs[8] = 5, b.qs[9] = 200;  // group 1, points 0 and 1
    // Scale 3 (db = 2 * 3.5 / 4), point 0 signs 0b101, point 1 sign 0b1 (odd: weight 7 negative too).
    const std::uint32_t aux = (3u << 28) | 0b101u | (1u << 7);
    std::memcpy(b.qs + 12, &aux, 4);
    const auto y = decode_block(GgmlType::iq2_xxs, b);
    check_run(y, 0, {2, 2, 2, 2, 2, 2, 2, 2});  // group 0: point 0 (all 8), db = 2 * 0.5 / 4
    check_run(y, 32, {-43.75f, 14, -43.75f, 14, 14, 14, 14, 14});
    check_run(y, 40, {-14, 14, 14, 14, 43.75f, 14, 75.25f, -43.75f});
  }
  SECTION("IQ2_XS: a 9-bit index and a 7-bit sign index per point, two scales per group") {
    block_iq2_xs b{};
    b.d = f16_two;
    b.qs[8] = static_cast<std::uint16_t>(300 | (0b11 << 9));    // group 2, point 0
    b.qs[10] = static_cast<std::uint16_t>(511 | (0x40 << 9));   // group 2, point 2: odd, weight 7 too
    b.scales[2] = 0x51;                                          // db 2 * 1.5 / 4, then 2 * 5.5 / 4
    const auto y = decode_block(GgmlType::iq2_xs, b);
    check_run(y, 64, {-6, -18.75f, 18.75f, 6, 6, 18.75f, 6, 18.75f});
    check_run(y, 80, {118.25f, 118.25f, 118.25f, 118.25f, 118.25f, 118.25f, -118.25f, -118.25f});
  }
  SECTION("IQ2_S: 10-bit indices (two high bits in qh) and explicit sign bytes") {
    block_iq2_s b{};
    b.d = f16_two;
    b.qs[29] = 777 & 0xFF, b.qs[31] = 1023 & 0xFF;  // group 7, points 1 and 3
    b.qh[7] = (3 << 2) | (3 << 6);
    b.qs[32 + 29] = 0x81, b.qs[32 + 31] = 0x0F;     // eight stored sign bits each, any parity
    b.scales[7] = 0x20;                               // db 2 * 0.5 / 4, then 2 * 2.5 / 4
    const auto y = decode_block(GgmlType::iq2_s, b);
    check_run(y, 232, {-2, 10.75f, 2, 2, 6.25f, 2, 10.75f, -6.25f});
    check_run(y, 248, {-53.75f, -53.75f, -53.75f, -53.75f, 53.75f, 53.75f, 53.75f, 53.75f});
  }
  SECTION("IQ3_XXS: byte indices of 4-weight points, signs and scale in one word per group") {
    block_iq3_xxs b{};
    b.d = f16_two;
    b.qs[0] = 13, b.qs[1] = 255;
    // Scale 2 (db = 2 * 2.5 / 2); pair 0 signs 0b10001, pair 1 sign 0b1 (odd: weight 7 too).
    const std::uint32_t aux = (2u << 28) | 0b10001u | (1u << 7);
    std::memcpy(b.qs + 64, &aux, 4);
    const auto y = decode_block(GgmlType::iq3_xxs, b);
    check_run(y, 0, {-70, 10, 30, 10, -10, 70, 130, 155});
    check_run(y, 8, {-10, 10, 10, 10, 10, 10, 10, -10});
  }
  SECTION("IQ3_S: 9-bit indices (the ninth in qh), explicit signs, odd scales") {
    block_iq3_s b{};
    b.d = f16_two;
    b.qs[28] = 300 & 0xFF, b.qs[29] = 511 & 0xFF;  // group 3, pair 2
    b.qh[3] = (1 << 4) | (1 << 5);
    b.signs[14] = 0x90;
    b.scales[1] = 0x30;  // group 3: db = 2 * (1 + 2 * 3)
    const auto y = decode_block(GgmlType::iq3_s, b);
    check_run(y, 112, {42, 70, 42, 98, -14, 14, 210, -210});
  }
  SECTION("IQ1_S: 11-bit indices, a 3-bit scale and the delta's sign per group") {
    block_iq1_s b{};
    b.d = f16_two;
    b.qs[20] = 1234 & 0xFF, b.qs[23] = 0xFF;  // group 5, points 0 and 3
    b.qh[5] = static_cast<std::uint16_t>((1234 >> 8) | (7 << 9) | (2 << 12) | 0x8000);  // dl = 2 * 5, delta -1/8
    const auto y = decode_block(GgmlType::iq1_s, b);
    check_run(y, 160, {8.75f, -11.25f, 8.75f, -11.25f, -1.25f, -11.25f, 8.75f, -1.25f});
    check_run(y, 168, {-11.25f, -11.25f});
    check_run(y, 184, {8.75f, 8.75f, 8.75f, 8.75f, 8.75f, 8.75f, 8.75f, 8.75f});
    check_run(y, 0, {-1.75f, -1.75f});  // group 0: dl = 2, delta +1/8, point 0
  }
  SECTION("IQ1_M: the f16 scale split over the scale words' top nibbles, two scales per group") {
    block_iq1_m b{};
    b.scales[3] = 0x4000 | 1 | (3 << 3);  // d = 2 (its top nibble 4); group 6: dl 2 * 3, then 2 * 7
    b.qs[24] = 1234 & 0xFF, b.qs[25] = 5, b.qs[27] = 0xFF;
    b.qh[12] = (1234 >> 8) | 0x08;  // point 0: delta -1/8; point 1: +1/8
    b.qh[13] = 0xF0;                // point 2: index 0, +1/8; point 3: 2047, -1/8
    const auto y = decode_block(GgmlType::iq1_m, b);
    check_run(y, 192, {5.25f, -6.75f, 5.25f, -6.75f, -0.75f, -6.75f, 5.25f, -0.75f});
    check_run(y, 200, {0.75f, -5.25f, 0.75f, -5.25f, -5.25f, -5.25f, -5.25f, -5.25f});
    check_run(y, 208, {-12.25f, -12.25f});
    check_run(y, 216, {12.25f, 12.25f});
    check_run(y, 0, {-1.75f, -1.75f});  // group 0: dl = 2 * 1, delta +1/8, point 0
  }
}

TEST_CASE("IQ2 / IQ3 sign bytes: the stored 7 bits and an even number of minus signs", "[io][gguf]") {
  for (unsigned i = 0; i < 128; ++i) {
    const std::uint8_t s = io::iq2_signs(i);
    CHECK((s & 127u) == i);
    CHECK(std::popcount(s) % 2 == 0);
    CHECK(io::iq2_signs(i | 128u) == s);  // only 7 bits are read
  }
  // Every grid code indexes an entry its book holds (the books are padded to a power of two).
  const auto codes_in = [](const auto& grid, int bits, int coords, unsigned entries) {
    for (const std::uint16_t p : grid) {
      for (int j = 0; j < coords; ++j) REQUIRE(((p >> (bits * j)) & ((1u << bits) - 1)) < entries);
    }
  };
  codes_in(ggml_iq::iq2xxs_grid, 2, 8, 3);
  codes_in(ggml_iq::iq2xs_grid, 2, 8, 3);
  codes_in(ggml_iq::iq2s_grid, 2, 8, 3);
  codes_in(ggml_iq::iq1s_grid, 2, 8, 3);
  codes_in(ggml_iq::iq3xxs_grid, 3, 4, 8);
  codes_in(ggml_iq::iq3s_grid, 3, 4, 8);
}

TEST_CASE("k4_scales_mins unpacks what k4_scale_min does, for every byte pattern", "[io][gguf]") {
  // Every value of each byte position, with the other eleven bytes varying.
  std::uint8_t s[12];
  for (int pos = 0; pos < 12; ++pos) {
    for (int v = 0; v < 256; ++v) {
      for (int i = 0; i < 12; ++i) s[i] = static_cast<std::uint8_t>((i * 89 + v * 37 + pos * 11) & 0xFF);
      s[pos] = static_cast<std::uint8_t>(v);
      std::uint8_t sc[8], mn[8];
      io::k4_scales_mins(s, sc, mn);
      for (int j = 0; j < 8; ++j) {
        std::uint8_t want_sc, want_mn;
        io::k4_scale_min(j, s, want_sc, want_mn);
        REQUIRE(sc[j] == want_sc);
        REQUIRE(mn[j] == want_mn);
      }
    }
  }
}

TEST_CASE("GGUF extents whose product overflows with zeros counted as 1 are refused", "[io][gguf]") {
  // ne = [0, 2^62, 2^62]: no element, but every stride a Tensor would derive overflows.
  std::string b = "GGUF";
  io::store_le<std::uint32_t>(b, 3);
  io::store_le<std::uint64_t>(b, 1);
  io::store_le<std::uint64_t>(b, 0);
  io::store_le<std::uint64_t>(b, 1);
  b += "t";
  io::store_le<std::uint32_t>(b, 3);
  for (const std::uint64_t e : {std::uint64_t{0}, std::uint64_t{1} << 62, std::uint64_t{1} << 62}) io::store_le(b, e);
  io::store_le<std::uint32_t>(b, 0);
  io::store_le<std::uint64_t>(b, 0);
  b.resize(96, '\0');
  CHECK_THROWS_WITH(parse_gguf(io::as_bytes(b), "overflow.gguf"), Catch::Contains("overflow.gguf") && Catch::Contains("overflows"));
}

TEST_CASE("GGUF keys and tensor names the spec forbids are refused, with their byte offset", "[io][gguf]") {
  // One key (a UINT32) and one F32 tensor of one element.
  const auto file = [](const std::string& key, const std::string& name) {
    std::string b = "GGUF";
    io::store_le<std::uint32_t>(b, 3);
    io::store_le<std::uint64_t>(b, 1);
    io::store_le<std::uint64_t>(b, 1);
    io::store_le<std::uint64_t>(b, key.size());
    b += key;
    io::store_le<std::uint32_t>(b, 4);
    io::store_le<std::uint32_t>(b, 7);
    io::store_le<std::uint64_t>(b, name.size());
    b += name;
    io::store_le<std::uint32_t>(b, 1);
    io::store_le<std::uint64_t>(b, 1);
    io::store_le<std::uint32_t>(b, 0);
    io::store_le<std::uint64_t>(b, 0);
    b.resize((b.size() + 31) / 32 * 32 + 4, '\0');
    return b;
  };
  const auto parse = [&](const std::string& key, const std::string& name) {
    const std::string b = file(key, name);
    return parse_gguf(io::as_bytes(b), "spec.gguf");
  };
  CHECK(parse("general.quantization_version", "w").metadata.size() == 1);
  CHECK(parse("llama.rope.scaling.original_context_length", std::string(64, 'n')).tensors[0].name.size() == 64);
  CHECK(parse("a1_b.c2", "").tensors.size() == 1);
  for (const auto& [key, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "is empty"},
           {"general.na\xc3\xafve", "not ASCII"},
           {".general", "empty segment"},
           {"general..name", "empty segment"},
           {"general.", "empty segment"},
           {"General.name", "lower_snake_case"},
           {"general.file-type", "lower_snake_case"},
           {"general name", "lower_snake_case"},
           {std::string(65536, 'k'), "longer than 65535"}}) {
    INFO(key.substr(0, 40));
    CHECK_THROWS_WITH(parse(key, "w"), Catch::Contains("spec.gguf") && Catch::Contains(why) &&
                                           Catch::Contains("at byte 24") && Catch::Contains("lower_snake_case ASCII"));
  }
  CHECK_THROWS_WITH(parse("general.na\xc3\xafve", "w"), Catch::Contains("'general.na\\xc3\\xafve'"));
  CHECK(parse("general.name", "na\xc3\xafve").tensors.size() == 1);  // names have no ASCII rule
  CHECK_THROWS_AS(parse("general.name", std::string(65, 'n')), FormatError);
  CHECK_THROWS_WITH(parse("general.name", std::string(65, 'n')),
                    Catch::Contains("tensor 0") && Catch::Contains("65 bytes") && Catch::Contains("at most 64") &&
                        Catch::Contains("at byte 52"));
  // The writer refuses what the reader would.
  GgufWriter w;
  CHECK_THROWS_AS(w.add("General.name", gguf_string("x")), ValueError);
  CHECK_THROWS_AS(w.add("", gguf_string("x")), ValueError);
  CHECK_THROWS_AS(w.add_tensor(std::string(65, 'n'), Tensor::zeros({2})), ValueError);
  w.add("general.name", gguf_string("x"));
  w.add_tensor(std::string(64, 'n'), Tensor::zeros({2}));
}

TEST_CASE("GgufWriter tensor sources: bytes made while writing, checked, and no file when one fails", "[io][gguf]") {
  accel_test::TempDir tmp;
  const std::string path = tmp.file("src.gguf");
  const Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  int made = 0;
  {
    GgufWriter w;
    w.add("general.architecture", gguf_string("llama"));
    w.add_tensor_source("a", GgmlType::f32, {2, 2}, [&] {
      ++made;
      return std::string(static_cast<const char*>(a.data_ptr()), a.nbytes());
    });
    CHECK(made == 0);  // nothing is made before save()
    CHECK_THROWS_AS(w.add_tensor_source("a", GgmlType::f32, {2, 2}, [] { return std::string(); }), ValueError);
    w.save(path);
    CHECK(made == 1);
    const auto f = GgufFile::open(path);
    CHECK(f.tensor("a").to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  }
  {
    GgufWriter w;
    w.add_tensor_source("short", GgmlType::f32, {4}, [] { return std::string(8, '\0'); });
    CHECK_THROWS_WITH(w.save(tmp.file("short.gguf")),
                      Catch::Contains("'short'") && Catch::Contains("needs 16 bytes, got 8"));
    CHECK_FALSE(std::filesystem::exists(tmp.file("short.gguf")));
  }
  {
    GgufWriter w;
    w.add_tensor("first", a);
    w.add_tensor_source("fails", GgmlType::f32, {4}, []() -> std::string { throw IOError("the source is gone"); });
    CHECK_THROWS_AS(w.save(tmp.file("fails.gguf")), IOError);
    CHECK_FALSE(std::filesystem::exists(tmp.file("fails.gguf")));
  }
}
