// Malformed, unsupported and hostile tokenizer.json files: FormatErrors that name the file and
// the key, never a crash.
#include <catch2/catch.hpp>

#include "tokenizer_fixtures.hpp"

#include <string>

#include "accel/core/errors.hpp"
#include "accel/tokenize/tokenizer.hpp"

using accel::FormatError;
using accel::tokenize::Tokenizer;
using Catch::Contains;
using tok_test::json;

namespace {
Tokenizer load(const json& doc) { return Tokenizer::from_json(doc.dump(), "bad-tokenizer.json"); }
}  // namespace

TEST_CASE("errors: not JSON, not an object, no model", "[tokenize][errors]") {
  CHECK_THROWS_WITH(Tokenizer::from_json("{\"model\": ", "cut.json"), Contains("cut.json") && Contains("invalid JSON"));
  CHECK_THROWS_AS(Tokenizer::from_json(""), FormatError);
  CHECK_THROWS_WITH(Tokenizer::from_json("[1, 2]", "list.json"), Contains("list.json") && Contains("JSON object"));
  CHECK_THROWS_WITH(Tokenizer::from_json("{}", "empty.json"), Contains("missing \"model\""));
  CHECK_THROWS_WITH(Tokenizer::from_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\xFF\": 0}, \"merges\": []}}"),
                    Contains("invalid JSON"));
}

TEST_CASE("errors: nesting deeper than the limit", "[tokenize][errors]") {
  const int depth = accel::tokenize::tokenizer_limits::max_depth + 1;
  const std::string deep = "{\"extra\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
  CHECK_THROWS_WITH(Tokenizer::from_json(deep, "deep.json"), Contains("deep.json") && Contains("nested deeper"));
  const std::string bomb(200000, '[');
  CHECK_THROWS_AS(Tokenizer::from_json(bomb), FormatError);
}

TEST_CASE("errors: unsupported components are named", "[tokenize][errors]") {
  json doc = tok_test::gpt2_doc();
  doc["normalizer"] = {{"type", "NFC"}};
  CHECK_THROWS_WITH(load(doc), Contains("bad-tokenizer.json") && Contains("normalizer.type") && Contains("'NFC'"));

  doc = tok_test::llama2_doc();
  doc["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", "\\s+"}};
  CHECK_THROWS_WITH(load(doc), Contains("normalizer.normalizers[1].pattern.Regex") && Contains("\\s+"));

  doc = tok_test::llama3_doc();
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|\\s+";
  CHECK_THROWS_WITH(load(doc), Contains("pre_tokenizer.pretokenizers[0].pattern.Regex") && Contains("'\\p{L}+|\\s+'"));

  doc = tok_test::llama3_doc();
  doc["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  CHECK_THROWS_WITH(load(doc), Contains("pre_tokenizer.pretokenizers[0].behavior") && Contains("Sideways"));

  doc = tok_test::gpt2_doc();
  doc["pre_tokenizer"] = {{"type", "Whitespace"}};
  CHECK_THROWS_WITH(load(doc), Contains("pre-tokenizer 'Whitespace'"));

  doc = tok_test::gpt2_doc();
  doc["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  CHECK_THROWS_WITH(load(doc), Contains("decoder.type") && Contains("'WordPiece'"));

  doc = tok_test::gpt2_doc();
  doc["post_processor"] = {{"type", "Frobnicate"}};
  CHECK_THROWS_WITH(load(doc), Contains("post_processor.type") && Contains("Frobnicate"));

  doc = tok_test::gpt2_doc();
  doc["model"]["type"] = "Unigram";
  CHECK_THROWS_WITH(load(doc), Contains("model.type") && Contains("Unigram"));

  doc = tok_test::llama2_metaspace_doc();
  doc["pre_tokenizer"]["replacement"] = "__";
  CHECK_THROWS_WITH(load(doc), Contains("pre_tokenizer.replacement"));
}

TEST_CASE("errors: post-processor templates must name known tokens", "[tokenize][errors]") {
  json doc = tok_test::llama2_doc();
  doc["post_processor"]["single"][0]["SpecialToken"]["id"] = "<bos>";
  CHECK_THROWS_WITH(load(doc), Contains("post_processor.single[0].SpecialToken.id") && Contains("<bos>"));

  doc = tok_test::llama2_doc();
  doc["post_processor"]["special_tokens"]["<s>"]["ids"] = {999};
  CHECK_THROWS_WITH(load(doc), Contains("post_processor") && Contains("id 999"));

  doc = tok_test::llama2_doc();
  doc["post_processor"]["single"][1]["Sequence"]["id"] = "B";
  CHECK_THROWS_WITH(load(doc), Contains("sequence A"));

  doc = tok_test::llama2_doc();
  doc["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", {"<s>", 1}}, {"sep", {"</s>", 2}}};
  const Tokenizer roberta = load(doc);
  CHECK(roberta.encode("Hello") == std::vector<accel::tokenize::TokenId>{1, 272, 2});
  CHECK(roberta.eos_id() == 2);
}

TEST_CASE("errors: added tokens", "[tokenize][errors]") {
  json doc = tok_test::gpt2_doc();
  doc["added_tokens"].push_back(tok_test::added_token(270, "<|other|>"));
  CHECK_THROWS_WITH(load(doc), Contains("added_tokens[1].id") && Contains("270"));

  doc = tok_test::gpt2_doc();
  doc["added_tokens"].push_back(tok_test::added_token(271, "<|endoftext|>"));
  CHECK_THROWS_WITH(load(doc), Contains("added_tokens[1].content"));

  doc = tok_test::gpt2_doc();
  doc["added_tokens"].push_back(tok_test::added_token(271, ""));
  CHECK_THROWS_WITH(load(doc), Contains("added_tokens[1].content") && Contains("empty"));

  doc = tok_test::gpt2_doc();
  doc["added_tokens"][0]["id"] = 1 << 24;
  CHECK_THROWS_WITH(load(doc), Contains("added_tokens[0].id"));

  doc = tok_test::gpt2_doc();
  doc["added_tokens"][0]["special"] = "yes";
  CHECK_THROWS_WITH(load(doc), Contains("added_tokens[0].special") && Contains("true or false"));

  doc = tok_test::gpt2_doc();
  doc["added_tokens"] = {{"id", 1}};
  CHECK_THROWS_AS(load(doc), FormatError);
}

TEST_CASE("errors: encode and decode arguments", "[tokenize][errors]") {
  const Tokenizer t = Tokenizer::from_json(tok_test::llama2_json());
  CHECK_THROWS_AS(t.decode({279}), accel::ValueError);
  CHECK_THROWS_WITH(t.decode({1, 2, 100000}), Contains("id 100000") && Contains("position 2"));
  CHECK_NOTHROW(t.decode({0, 1, 2}));
}
