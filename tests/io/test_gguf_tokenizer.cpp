// The tokenizer of GGUF metadata against the tokenizers library's encodings: the GPT-2-style and
// LLaMA-2-style fixtures of tests/data/tokenizers written into GGUF files as llama.cpp's converter
// writes them (tokens, token types, merges or scores, bos / eos ids and flags), then encoded and
// decoded through gguf_tokenizer; unsupported models and pre-tokenizers are FormatError.
// The reverse, gguf_tokenizer_metadata: every fixture the GGUF form carries (and the default
// model's tokenizer) written as metadata, read back, and encoded and decoded as its tokenizer.json
// does, over the fixtures' texts and more; the keys and values it writes; what it refuses.
#include <catch2/catch.hpp>

#include "../temp_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../tools/default_model_parts.hpp"
#include "../../tools/default_model_text.hpp"
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

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The metadata of `json` written into a GGUF file, and the file read back.
GgufFile metadata_gguf(const std::string& json, const nlohmann::json& config, accel_test::TempDir& dir,
                       const std::string& name, std::size_t vocab_size = 0) {
  GgufWriter w;
  w.add("general.architecture", gguf_string("llama"));
  for (auto& [key, value] : gguf_tokenizer_metadata(json, config, name, vocab_size)) w.add(key, value);
  const std::string path = dir.file(name + ".gguf");
  w.save(path);
  return GgufFile::open(path);
}

/// The fixture texts, and more: unicode, spaces, digits, and each added token alone, inside words,
/// between spaces and twice.
std::vector<std::string> round_trip_texts(const nlohmann::json& tokenizer, const std::string& fixture) {
  std::vector<std::string> texts;
  if (!fixture.empty()) {
    const auto expected = read_json(tok_fixture(fixture) / "expected.json");
    for (const auto& c : expected.at("cases")) texts.push_back(c.at("text"));
  }
  for (const char* t : {"Hello world", "\xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 \xE2\x9C\x93 \xF0\x9D\x84\x9E",
                        "\xE4\xBD\xA0\xE5\xA5\xBD, \xF0\x9F\xA6\x99\xF0\x9F\xA6\x99 llamas", "  two leading",
                        "trailing two  ", " \t \n\r\n  ", "1 22 333 4444 55555 666666", "3.14159, 2,718 and -42",
                        "x1y22z333", "a\n\nb\n\n\nc", "\xE2\x96\x81\xE2\x96\x81 metaspaces \xE2\x96\x81",
                        "don't I'LL we'd", "\xFF\xFE invalid bytes \x80"}) {
    texts.emplace_back(t);
  }
  texts.emplace_back(300, 'a');
  for (const auto& a : tokenizer.at("added_tokens")) {
    const std::string c = a.at("content");
    for (const std::string& t : {c, "x" + c + "y", " " + c + " z", c + c, "word " + c + "\nnext"}) texts.push_back(t);
  }
  return texts;
}

/// `rt` encodes and decodes every text as `ref` does.
void check_same_texts(const tokenize::Tokenizer& ref, const tokenize::Tokenizer& rt, const std::vector<std::string>& texts) {
  for (const auto& text : texts) {
    INFO("text \"" << text << "\"");
    const auto ids = ref.encode(text, true);
    CHECK(rt.encode(text, true) == ids);
    CHECK(rt.encode(text, false) == ref.encode(text, false));
    CHECK(rt.decode(ids, false) == ref.decode(ids, false));
    CHECK(rt.decode(ids, true) == ref.decode(ids, true));
  }
}

/// `rt` encodes and decodes every text as `ref` does, has its bos, and decodes every id to the
/// same text.
void check_same_tokenizer(const tokenize::Tokenizer& ref, const tokenize::Tokenizer& rt, const std::vector<std::string>& texts) {
  check_same_texts(ref, rt, texts);
  CHECK(rt.bos_id() == ref.bos_id());
  for (tokenize::TokenId id = 0; id < static_cast<tokenize::TokenId>(ref.vocab_size()); ++id) {
    INFO("id " << id);
    CHECK(rt.decode({id}, false) == ref.decode({id}, false));
  }
}

/// A fixture round trip: tokenizer.json -> metadata -> GGUF file -> Tokenizer, checked against the
/// fixture's own Tokenizer.
void check_fixture_round_trip(const std::string& name, const nlohmann::json& config = nullptr) {
  accel_test::TempDir dir;
  const std::string json = read_text(tok_fixture(name) / "tokenizer.json");
  const auto f = metadata_gguf(json, config, dir, name);
  const auto ref = tokenize::Tokenizer::from_json(json, name);
  check_same_tokenizer(ref, gguf_tokenizer(f), round_trip_texts(nlohmann::json::parse(json), name));
}

std::vector<std::string> strings_of(const GgufFile& f, const char* key) {
  std::vector<std::string> out;
  for (const auto& v : f.get_array(key).items) out.push_back(*v.as_string());
  return out;
}

std::vector<double> numbers_of(const GgufFile& f, const char* key) {
  std::vector<double> out;
  for (const auto& v : f.get_array(key).items) out.push_back(*v.as_double());
  return out;
}

}  // namespace

TEST_CASE("GGUF tokenizer metadata from tokenizer.json: byte-level fixtures read back as the same tokenizer",
          "[io][gguf][tokenize]") {
  SECTION("GPT-2") { check_fixture_round_trip("gpt2_style", {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}}); }
  SECTION("LLaMA-3") { check_fixture_round_trip("llama3_style"); }
  SECTION("the default model's") {
    namespace dm = cli::default_model;
    const std::string json = dm::tokenizer_json(dm::learn_byte_level_bpe(cli::default_model_text, dm::merges), dm::eos_id).dump();
    accel_test::TempDir dir;
    const auto f = metadata_gguf(json, {{"eos_token", "<|endoftext|>"}}, dir, "default_model");
    CHECK(f.get_string("tokenizer.ggml.pre") == "gpt-2");
    CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == dm::eos_id);
    auto texts = round_trip_texts(nlohmann::json::parse(json), "");
    texts.emplace_back(cli::default_model_text);
    check_same_tokenizer(tokenize::Tokenizer::from_json(json, "default_model"), gguf_tokenizer(f), texts);
  }
}

TEST_CASE("GGUF tokenizer metadata from tokenizer.json: SentencePiece-style fixtures read back as the same tokenizer",
          "[io][gguf][tokenize]") {
  SECTION("LLaMA-2") { check_fixture_round_trip("llama2_style"); }
  SECTION("Mistral") {
    // Mistral's Metaspace pre-tokenizer ("first") puts no "▁" in front of text that starts with one
    // (a space) or follows a special token; llama.cpp's SentencePiece tokenizer does, and so does the
    // reader (LLaMA-2's normalizer). Texts with neither read back as the file's; every text as the
    // file's in LLaMA-2's form.
    accel_test::TempDir dir;
    const std::string json = read_text(tok_fixture("mistral_style") / "tokenizer.json");
    const auto rt = gguf_tokenizer(metadata_gguf(json, nullptr, dir, "mistral_style"));
    const auto doc = nlohmann::json::parse(json);
    const auto texts = round_trip_texts(doc, "mistral_style");
    auto llama2_form = doc;
    const auto llama2 = read_json(tok_fixture("llama2_style") / "tokenizer.json");
    llama2_form["normalizer"] = llama2["normalizer"];
    llama2_form["pre_tokenizer"] = nullptr;
    llama2_form["decoder"] = llama2["decoder"];
    check_same_tokenizer(tokenize::Tokenizer::from_json(llama2_form.dump(), "mistral_style as LLaMA-2"), rt, texts);
    std::vector<std::string> plain;
    for (const auto& text : texts) {
      bool special = false;
      for (const auto& a : doc["added_tokens"]) {
        special = special || text.find(a["content"].get<std::string>()) != std::string::npos;
      }
      if (!special && !text.starts_with(' ') && !text.starts_with("\xE2\x96\x81")) plain.push_back(text);
    }
    CHECK(plain.size() > 30);
    check_same_texts(tokenize::Tokenizer::from_json(json, "mistral_style"), rt, plain);
  }
}

TEST_CASE("GGUF tokenizer metadata from tokenizer.json: the keys and values llama.cpp's converter writes",
          "[io][gguf][tokenize]") {
  accel_test::TempDir dir;
  SECTION("gpt2: tokens, types, merges, pre, ids from tokenizer_config.json, chat template") {
    const std::string json = read_text(tok_fixture("gpt2_style") / "tokenizer.json");
    const nlohmann::json config = {{"bos_token", "<|endoftext|>"},
                                   {"eos_token", {{"content", "<|endoftext|>"}, {"special", true}}},
                                   {"pad_token", "<|endoftext|>"},
                                   {"add_bos_token", true},  // the post-processor decides
                                   {"chat_template", "{{ messages }}"}};
    const auto f = metadata_gguf(json, config, dir, "gpt2", 510);
    CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
    CHECK(f.get_string("tokenizer.ggml.pre") == "gpt-2");
    const auto tokens = strings_of(f, "tokenizer.ggml.tokens");
    const auto types = numbers_of(f, "tokenizer.ggml.token_type");
    REQUIRE(tokens.size() == 510);
    REQUIRE(types.size() == 510);
    CHECK(tokens[506] == "<|endoftext|>");
    CHECK(types[506] == 3);
    CHECK(types[0] == 1);
    CHECK(tokens[507] == "[PAD507]");
    CHECK(types[509] == 5);
    const auto merges = strings_of(f, "tokenizer.ggml.merges");
    REQUIRE(merges.size() == 250);
    CHECK(merges[0] == "e l");
    CHECK(merges[2] == "\xC4\xA0 s");
    CHECK(f.get_uint("tokenizer.ggml.bos_token_id") == 506);
    CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == 506);
    CHECK(f.get_uint("tokenizer.ggml.padding_token_id") == 506);
    CHECK_FALSE(f.find("tokenizer.ggml.unknown_token_id"));
    CHECK(*f.find("tokenizer.ggml.add_bos_token")->as_bool() == false);
    CHECK(*f.find("tokenizer.ggml.add_eos_token")->as_bool() == false);
    CHECK(f.get_string("tokenizer.chat_template") == "{{ messages }}");
    CHECK_FALSE(f.find("tokenizer.ggml.scores"));
    // vocab_size below the tokenizer's ids
    CHECK_THROWS_AS(gguf_tokenizer_metadata(json, nullptr, "gpt2", 100), ValueError);
  }
  SECTION("gpt2: LLaMA-3's regex is llama-bpe, with bos from the post-processor") {
    const auto f = metadata_gguf(read_text(tok_fixture("llama3_style") / "tokenizer.json"), nlohmann::json::object(), dir, "l3");
    CHECK(f.get_string("tokenizer.ggml.pre") == "llama-bpe");
    CHECK(strings_of(f, "tokenizer.ggml.tokens").size() == 514);
    CHECK(numbers_of(f, "tokenizer.ggml.token_type")[513] == 3);
    CHECK(f.get_uint("tokenizer.ggml.bos_token_id") == 511);
    CHECK_FALSE(f.find("tokenizer.ggml.eos_token_id"));
    CHECK(*f.find("tokenizer.ggml.add_bos_token")->as_bool() == true);
    CHECK(*f.find("tokenizer.ggml.add_eos_token")->as_bool() == false);
  }
  SECTION("gpt2: Qwen2's regex (and its NFC normalizer) is qwen2; added tokens that are not special") {
    auto j = read_json(tok_fixture("llama3_style") / "tokenizer.json");
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = std::string(tokenize::qwen2_regex);
    j["normalizer"] = {{"type", "NFC"}};
    j["post_processor"] = nullptr;
    j["added_tokens"].push_back({{"id", 514}, {"content", "<|im_start|>"}, {"special", false}, {"normalized", false}});
    j["added_tokens"].push_back({{"id", 515}, {"content", "my\xE2\x96\x81word"}, {"special", false}, {"normalized", false}});
    const std::string json = j.dump();
    const auto f = metadata_gguf(json, {{"eos_token", "<|end_of_text|>"}}, dir, "qwen2");
    j["normalizer"] = nullptr;  // not read by tokenize::Tokenizer; the texts below are NFC
    CHECK(f.get_string("tokenizer.ggml.pre") == "qwen2");
    const auto tokens = strings_of(f, "tokenizer.ggml.tokens");
    const auto types = numbers_of(f, "tokenizer.ggml.token_type");
    CHECK(types[514] == 3);  // looks special
    CHECK(tokens[515] == "my word");
    CHECK(types[515] == 4);
    CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == 512);
    CHECK(*f.find("tokenizer.ggml.add_bos_token")->as_bool() == false);
    const auto ref = tokenize::Tokenizer::from_json(j.dump(), "qwen2");
    const auto rt = gguf_tokenizer(f);
    CHECK(rt.encode("1234", false).size() == 4);
    for (const char* text : {"1234 and 56", "Hello world, 2024!", "<|im_start|>user\nhi<|end_of_text|>", "it's 'S"}) {
      INFO(text);
      CHECK(rt.encode(text, true) == ref.encode(text, true));
    }
  }
  SECTION("llama: scores that rebuild the merges, types, unk / bos from the model and post-processor") {
    const std::string json = read_text(tok_fixture("llama2_style") / "tokenizer.json");
    const auto j = nlohmann::json::parse(json);
    const auto f = metadata_gguf(json, {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}}, dir, "l2");
    CHECK(f.get_string("tokenizer.ggml.model") == "llama");
    CHECK(f.get_string("tokenizer.ggml.pre") == "default");
    const auto types = numbers_of(f, "tokenizer.ggml.token_type");
    const auto scores = numbers_of(f, "tokenizer.ggml.scores");
    REQUIRE(types.size() == 594);
    REQUIRE(scores.size() == 594);
    CHECK(types[0] == 2);
    CHECK(types[1] == 3);
    CHECK(types[2] == 3);
    CHECK(types[3] == 6);    // <0x00>
    CHECK(types[258] == 6);  // <0xFF>
    CHECK(types[259] == 1);
    CHECK_FALSE(f.find("tokenizer.ggml.merges"));
    CHECK(f.get_uint("tokenizer.ggml.unknown_token_id") == 0);
    CHECK(f.get_uint("tokenizer.ggml.bos_token_id") == 1);
    CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == 2);
    CHECK(*f.find("tokenizer.ggml.add_bos_token")->as_bool() == true);
    CHECK(*f.find("tokenizer.ggml.add_eos_token")->as_bool() == false);
    // The reader's merges from these scores are the file's, in its order, and other splits of the
    // pieces those make (as llama.cpp's SentencePiece tokenizer takes any two pieces that make one).
    const auto& merges = j["model"]["merges"];
    std::set<std::string> made;
    for (const auto& m : merges) made.insert(m[0].get<std::string>() + m[1].get<std::string>());
    nlohmann::json in_file = nlohmann::json::array();
    const auto read_back = nlohmann::json::parse(gguf_tokenizer_json(f));
    for (const auto& m : read_back["model"]["merges"]) {
      if (std::find(merges.begin(), merges.end(), m) != merges.end()) {
        in_file.push_back(m);
      } else {
        INFO(m.dump());
        CHECK(made.count(m[0].get<std::string>() + m[1].get<std::string>()) == 1);
      }
    }
    CHECK(in_file == merges);
  }
  SECTION("an eos the post-processor appends; a chat template list") {
    auto j = read_json(tok_fixture("llama2_style") / "tokenizer.json");
    j["post_processor"]["single"].push_back({{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}});
    j["post_processor"]["special_tokens"]["</s>"] = {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}};
    const nlohmann::json config = {
        {"chat_template", {{{"name", "default"}, {"template", "A"}}, {{"name", "tool-Use"}, {"template", "B"}}}}};
    const std::string json = j.dump();
    const auto f = metadata_gguf(json, config, dir, "eos");
    CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == 2);
    CHECK(*f.find("tokenizer.ggml.add_eos_token")->as_bool() == true);
    CHECK(f.get_string("tokenizer.chat_template") == "A");
    CHECK(f.get_string("tokenizer.chat_template.tool_use") == "B");
    CHECK(strings_of(f, "tokenizer.chat_templates") == std::vector<std::string>{"tool_use"});
    const auto ref = tokenize::Tokenizer::from_json(json, "eos");
    CHECK(gguf_tokenizer(f).encode("Hello world", true) == ref.encode("Hello world", true));
    CHECK(ref.encode("Hello world", true).back() == 2);
  }
  SECTION("save_gguf_model takes the metadata, its bos / eos in place of config.json's") {
    auto config = read_json(std::filesystem::path(ACCEL_SOURCE_DIR) / "tests" / "data" / "models" / "tiny_llama" / "config.json");
    config["vocab_size"] = 594;
    config["bos_token_id"] = 7;
    const std::string json = read_text(tok_fixture("llama2_style") / "tokenizer.json");
    save_gguf_model(dir.file("model.gguf"), config, {}, gguf_tokenizer_metadata(json, nullptr, "llama2_style", 594));
    const auto f = GgufFile::open(dir.file("model.gguf"));
    CHECK(f.get_uint("tokenizer.ggml.bos_token_id") == 1);
    CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == 2);  // config.json's: the tokenizer names none
    CHECK(gguf_tokenizer(f).encode("Hello world", true) == tokenize::Tokenizer::from_json(json, "l2").encode("Hello world", true));
  }
}

TEST_CASE("GGUF tokenizer metadata from tokenizer.json: what has no GGUF form is FormatError naming it",
          "[io][gguf][tokenize]") {
  const auto fixture = [](const char* name) { return read_json(tok_fixture(name) / "tokenizer.json"); };
  // RoBERTa's prefix space, and a BPE with neither byte fallback nor ByteLevel.
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(fixture("roberta_style").dump(), nullptr, "roberta.json"),
                    Catch::Contains("roberta.json") && Catch::Contains("add_prefix_space"));
  CHECK_THROWS_AS(gguf_tokenizer_metadata(fixture("roberta_style").dump(), nullptr, "roberta.json"), FormatError);
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(fixture("unk_style").dump(), nullptr, "unk.json"),
                    Catch::Contains("unk.json") && Catch::Contains("byte fallback"));
  // Another model.
  auto wp = nlohmann::json{{"model", {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}}}};
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(wp.dump(), nullptr, "bert.json"),
                    Catch::Contains("bert.json") && Catch::Contains("'WordPiece'"));
  CHECK_THROWS_AS(gguf_tokenizer_metadata(wp.dump(), nullptr, "bert.json"), FormatError);
  wp["model"]["type"] = "Unigram";
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(wp.dump(), nullptr, "t5.json"), Catch::Contains("'Unigram'"));
  // A split regex the reader has no name for: the error lists those it has.
  auto j = fixture("llama3_style");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}+|\\p{L}+";
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(j.dump(), nullptr, "odd.json"),
                    Catch::Contains("odd.json") && Catch::Contains("gpt-2") && Catch::Contains("llama-bpe") &&
                        Catch::Contains("qwen2"));
  CHECK_THROWS_AS(gguf_tokenizer_metadata(j.dump(), nullptr, "odd.json"), FormatError);
  // A normalizer llama.cpp does not run; two tokens in front; a bos other than the one added.
  j = fixture("gpt2_style");
  j["normalizer"] = {{"type", "Lowercase"}};
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(j.dump(), nullptr, "lower.json"), Catch::Contains("'Lowercase'"));
  j = fixture("llama2_style");
  const nlohmann::json bos_item = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  j["post_processor"]["single"].insert(j["post_processor"]["single"].begin(), bos_item);
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(j.dump(), nullptr, "two.json"), Catch::Contains("2 token(s) in front"));
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(fixture("llama2_style").dump(), {{"bos_token", "</s>"}}, "bos.json"),
                    Catch::Contains("bos.json") && Catch::Contains("bos_token"));
  // No space in front of the text (add_dummy_prefix off): llama.cpp's reader would put one there.
  j = fixture("llama2_style");
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
  CHECK_THROWS_WITH(gguf_tokenizer_metadata(j.dump(), nullptr, "noprefix.json"), Catch::Contains("in front"));
  // Malformed JSON.
  CHECK_THROWS_AS(gguf_tokenizer_metadata("{\"model\": ", nullptr, "broken.json"), FormatError);
}
