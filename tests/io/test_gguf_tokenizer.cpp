// The tokenizer of GGUF metadata against the tokenizers library's encodings: the GPT-2-style and
// LLaMA-2-style fixtures of tests/data/tokenizers written into GGUF files as llama.cpp's converter
// writes them (tokens, token types, merges or scores, bos / eos ids and flags), then encoded and
// decoded through gguf_tokenizer; unsupported models and pre-tokenizers are FormatError.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/io/gguf_tokenizer.hpp"
#include "accel/io/gguf_write.hpp"

using namespace accel;
using namespace accel::io;
using Ids = std::vector<tokenize::TokenId>;

namespace {

std::filesystem::path tok_fixture(const std::string& name) {
  return std::filesystem::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "tokenizers" / name;
}

nlohmann::json read_json(const std::filesystem::path& p) { return nlohmann::json::parse(std::ifstream(p)); }

/// A GGUF file holding the tokenizer.json of fixture `name` as llama.cpp's metadata.
std::string write_tokenizer_gguf(const std::string& name, const std::string& model, accel_test::TempDir& dir,
                                 const std::string& pre = "", std::optional<std::uint32_t> bos = std::nullopt) {
  const auto j = read_json(tok_fixture(name) / "tokenizer.json");
  std::vector<std::string> tokens(j["model"]["vocab"].size());
  for (const auto& [tok, id] : j["model"]["vocab"].items()) tokens.at(id.get<std::size_t>()) = tok;
  std::vector<std::int64_t> types(tokens.size(), 1);
  for (const auto& a : j["added_tokens"]) {
    const auto id = a["id"].get<std::size_t>();
    if (id >= tokens.size()) tokens.resize(id + 1), types.resize(id + 1, 1);
    tokens[id] = a["content"].get<std::string>();
    types[id] = a["special"].get<bool>() ? 3 : 4;
  }
  GgufWriter w;
  w.add("general.architecture", gguf_string("llama"));
  w.add("tokenizer.ggml.model", gguf_string(model));
  std::vector<GgufValue> tv, ty;
  for (const auto& t : tokens) tv.push_back(gguf_string(t));
  for (const auto t : types) ty.push_back({GgufValueType::int32, std::int64_t{t}});
  w.add("tokenizer.ggml.tokens", gguf_array(GgufValueType::string, tv));
  w.add("tokenizer.ggml.token_type", gguf_array(GgufValueType::int32, ty));
  const auto& merges = j["model"]["merges"];
  if (model == "gpt2") {
    std::vector<GgufValue> mv;
    for (const auto& m : merges) mv.push_back(gguf_string(m[0].get<std::string>() + " " + m[1].get<std::string>()));
    w.add("tokenizer.ggml.merges", gguf_array(GgufValueType::string, mv));
    if (!pre.empty()) w.add("tokenizer.ggml.pre", gguf_string(pre));
    if (bos) w.add("tokenizer.ggml.bos_token_id", gguf_u32(*bos));
  } else {
    // SentencePiece scores that rank each piece by the first merge that makes it; pieces no merge
    // makes rank last.
    std::vector<float> score(tokens.size(), -1e9f);
    std::map<std::string, std::size_t> id;
    for (std::size_t i = 0; i < tokens.size(); ++i) id[tokens[i]] = i;
    for (std::size_t k = merges.size(); k-- > 0;) {
      const auto it = id.find(merges[k][0].get<std::string>() + merges[k][1].get<std::string>());
      if (it != id.end()) score[it->second] = -static_cast<float>(k);
    }
    std::vector<GgufValue> sv;
    for (const float s : score) sv.push_back(gguf_f32(s));
    w.add("tokenizer.ggml.scores", gguf_array(GgufValueType::float32, sv));
    w.add("tokenizer.ggml.unknown_token_id", gguf_u32(0));
    w.add("tokenizer.ggml.bos_token_id", gguf_u32(1));
    w.add("tokenizer.ggml.eos_token_id", gguf_u32(2));
  }
  const std::string path = dir.file(name + ".gguf");
  w.save(path);
  return path;
}

void check_against_fixture(const tokenize::Tokenizer& t, const std::string& name) {
  const auto doc = read_json(tok_fixture(name) / "expected.json");
  for (const auto& c : doc.at("cases")) {
    const auto text = c.at("text").get<std::string>();
    INFO(name << ": text \"" << text << "\"");
    CHECK(t.encode(text, true) == c.at("ids").get<Ids>());
    CHECK(t.encode(text, false) == c.at("ids_plain").get<Ids>());
    CHECK(t.decode(c.at("ids").get<Ids>(), true) == c.at("decoded_skip").get<std::string>());
  }
}

}  // namespace

TEST_CASE("GGUF tokenizer metadata: the gpt2 model encodes as the tokenizers library", "[io][gguf][tokenize]") {
  accel_test::TempDir dir;
  const auto f = GgufFile::open(write_tokenizer_gguf("gpt2_style", "gpt2", dir));
  REQUIRE(has_gguf_tokenizer(f));
  check_against_fixture(gguf_tokenizer(f), "gpt2_style");
}

TEST_CASE("GGUF tokenizer metadata: LLaMA-3's pre-tokenizer encodes as the tokenizers library", "[io][gguf][tokenize]") {
  accel_test::TempDir dir;
  // As llama.cpp's converter writes a LLaMA-3 tokenizer: "llama-bpe", bos without add_bos_token.
  const auto f = GgufFile::open(write_tokenizer_gguf("llama3_style", "gpt2", dir, "llama-bpe", 511));
  const auto t = gguf_tokenizer(f);
  CHECK(t.bos_id() == 511);
  check_against_fixture(t, "llama3_style");
  // Qwen2's name gives Qwen2's regex: numbers one digit at a time.
  const auto q = gguf_tokenizer(GgufFile::open(write_tokenizer_gguf("llama3_style", "gpt2", dir, "qwen2")));
  CHECK(q.encode("1234", false).size() == 4);
}

TEST_CASE("GGUF tokenizer metadata: the llama model (merges from scores) encodes as the tokenizers library",
          "[io][gguf][tokenize]") {
  accel_test::TempDir dir;
  const auto f = GgufFile::open(write_tokenizer_gguf("llama2_style", "llama", dir));
  const auto t = gguf_tokenizer(f);
  CHECK(t.bos_id() == 1);
  check_against_fixture(t, "llama2_style");
}

TEST_CASE("GGUF tokenizer metadata: what is not read is FormatError naming it", "[io][gguf][tokenize]") {
  accel_test::TempDir dir;
  const auto write = [&](const std::string& model, const std::string& pre) {
    GgufWriter w;
    w.add("tokenizer.ggml.model", gguf_string(model));
    if (!pre.empty()) w.add("tokenizer.ggml.pre", gguf_string(pre));
    w.add("tokenizer.ggml.tokens", gguf_array(GgufValueType::string, {gguf_string("a")}));
    w.save(dir.file("t.gguf"));
    return GgufFile::open(dir.file("t.gguf"));
  };
  CHECK_THROWS_WITH(gguf_tokenizer(write("bert", "")), Catch::Contains("t.gguf") && Catch::Contains("'bert'"));
  CHECK_THROWS_WITH(gguf_tokenizer(write("gpt2", "deepseek-coder")), Catch::Contains("'deepseek-coder'"));
  CHECK(has_gguf_tokenizer(GgufFile::open(dir.file("t.gguf"))));
}
