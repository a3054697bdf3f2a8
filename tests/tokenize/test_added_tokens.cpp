// Added tokens: leftmost-longest matching, single_word, lstrip / rstrip, normalized matching.
#include <catch2/catch.hpp>

#include "tokenizer_fixtures.hpp"

#include <string>
#include <vector>

#include "accel/tokenize/added_tokens.hpp"
#include "accel/tokenize/tokenizer.hpp"

using accel::tokenize::AddedToken;
using accel::tokenize::AddedTokenMatcher;
using accel::tokenize::TokenId;
using accel::tokenize::Tokenizer;
using tok_test::json;
using Ids = std::vector<TokenId>;

namespace {

json token(int id, const std::string& content, json flags = json::object()) {
  json t = tok_test::added_token(id, content, false, false);
  t.update(flags);
  return t;
}

Tokenizer gpt2_with(std::initializer_list<json> extra) {
  json doc = tok_test::gpt2_doc();
  for (const auto& t : extra) doc["added_tokens"].push_back(t);
  return Tokenizer::from_json(doc.dump());
}

}  // namespace

TEST_CASE("added tokens: leftmost first, then longest", "[tokenize][added]") {
  const Tokenizer t = gpt2_with({token(400, "<a>"), token(401, "<a><b>"), token(402, "abc"), token(403, "bcd")});
  CHECK(t.encode("<a><b>") == Ids{401});
  CHECK(t.encode("<a><c>") == Ids{400, 60, 99, 62});
  CHECK(t.encode("abcd") == Ids{402, 100});  // "abc" starts first, so "bcd" cannot match
  CHECK(t.encode("xbcd") == Ids{120, 403});
  CHECK(t.encode("<a") == Ids{60, 97});
}

TEST_CASE("added tokens: single_word needs word boundaries", "[tokenize][added]") {
  const Tokenizer t = gpt2_with({token(404, "yes", {{"single_word", true}})});
  CHECK(t.encode("yes") == Ids{404});
  CHECK(t.encode("say yes!") == Ids{115, 97, 121, 32, 404, 0x21});
  CHECK(t.encode("eyes") == Ids{101, 121, 101, 115});
  CHECK(t.encode("yes_") == Ids{121, 101, 115, 95});
}

TEST_CASE("added tokens: lstrip and rstrip swallow white space", "[tokenize][added]") {
  const Tokenizer plain = gpt2_with({token(405, "<mask>")});
  const Tokenizer left = gpt2_with({token(405, "<mask>", {{"lstrip", true}})});
  const Tokenizer right = gpt2_with({token(405, "<mask>", {{"rstrip", true}})});
  CHECK(plain.encode("a <mask>b") == Ids{97, 32, 405, 98});
  CHECK(left.encode("a \t <mask>b") == Ids{97, 405, 98});
  CHECK(right.encode("<mask>  \nb") == Ids{405, 98});
  CHECK(right.encode("a <mask> ") == Ids{97, 32, 405});
  // decode gives the token's content: the swallowed spaces are gone for good.
  CHECK(left.decode(left.encode("a <mask>b")) == "a<mask>b");
}

TEST_CASE("added tokens: normalized ones are matched in the normalized text", "[tokenize][added]") {
  json doc = tok_test::llama2_doc();
  doc["added_tokens"].push_back(token(279, "wor", {{"normalized", true}}));
  const Tokenizer normalized = Tokenizer::from_json(doc.dump());
  // The token is looked for as the normalizer rewrites it: "▁wor".
  CHECK(normalized.encode("Hello world", false) == Ids{272, 279, 276});
  CHECK(normalized.encode("Helloworld", false) == Ids{272, 264, 274, 276});

  doc = tok_test::llama2_doc();
  doc["added_tokens"].push_back(token(279, "wor", {{"normalized", false}}));
  const Tokenizer raw = Tokenizer::from_json(doc.dump());
  // Matched in the raw text: each side is normalized on its own and gets its own ▁.
  CHECK(raw.encode("Hello world", false) == Ids{272, 259, 279, 259, 276});
  CHECK(raw.vocab_size() == 280);
  // A non-special added token is text: skip_special_tokens keeps it.
  CHECK(raw.decode({272, 279}, true) == "Hellowor");
}

TEST_CASE("added tokens: the matcher splits text into runs and tokens", "[tokenize][added]") {
  std::vector<AddedToken> tokens(2);
  tokens[0].content = "<x>";
  tokens[1].content = "\xE6\x97\xA5";
  AddedTokenMatcher m;
  CHECK(m.empty());
  m.add(tokens[0].content, 0);
  m.add(tokens[1].content, 1);
  const auto segs = m.split("a<x>\xE6\x97\xA5<x", tokens);
  REQUIRE(segs.size() == 4);
  CHECK((segs[0].begin == 0 && segs[0].end == 1 && !segs[0].is_token()));
  CHECK((segs[1].begin == 1 && segs[1].end == 4 && segs[1].token == 0));
  CHECK((segs[2].begin == 4 && segs[2].end == 7 && segs[2].token == 1));
  CHECK((segs[3].begin == 7 && segs[3].end == 9 && !segs[3].is_token()));
  CHECK(m.split("", tokens).empty());
}
