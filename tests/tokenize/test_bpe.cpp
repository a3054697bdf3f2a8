// The BPE model: merge order against a direct transcription of the algorithm, unknown characters,
// byte fallback, prefixes and suffixes, both merge spellings, and malformed models.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/tokenize/bpe.hpp"

using accel::tokenize::BpeModel;
using accel::tokenize::JsonNode;
using accel::tokenize::TokenId;
using nlohmann::json;
using Ids = std::vector<TokenId>;

namespace {

const std::string bpe_source = "bpe-test.json";

BpeModel model_of(const json& j) { return BpeModel::from_json(JsonNode(j, "model", bpe_source)); }

Ids encode(const BpeModel& m, std::string_view word) {
  Ids out;
  m.encode_word(word, out);
  return out;
}

json bpe(json vocab, json merges, json extra = json::object()) {
  json m = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  m.update(extra);
  return m;
}

// GPT-2's bpe() as its encoder.py states it: while some adjacent pair has a rank, merge every
// occurrence of the lowest-ranked pair, left to right. Quadratic, and obviously right.
std::vector<std::string> reference_bpe(std::string_view word, const std::map<std::pair<std::string, std::string>, int>& ranks) {
  std::vector<std::string> w;
  for (const char c : word) w.emplace_back(1, c);
  while (w.size() > 1) {
    int best = std::numeric_limits<int>::max();
    std::pair<std::string, std::string> pair;
    for (std::size_t i = 0; i + 1 < w.size(); ++i) {
      const auto it = ranks.find({w[i], w[i + 1]});
      if (it != ranks.end() && it->second < best) best = it->second, pair = it->first;
    }
    if (best == std::numeric_limits<int>::max()) break;
    std::vector<std::string> next;
    for (std::size_t i = 0; i < w.size();) {
      if (i + 1 < w.size() && w[i] == pair.first && w[i + 1] == pair.second) {
        next.push_back(w[i] + w[i + 1]);
        i += 2;
      } else {
        next.push_back(w[i++]);
      }
    }
    w = std::move(next);
  }
  return w;
}

}  // namespace

TEST_CASE("bpe: the heap merges exactly as the reference algorithm", "[tokenize][bpe]") {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    // Merges in the order training makes them: each joins two tokens that exist already.
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    json vocab = json::object();
    for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
    json merges = json::array();
    std::map<std::pair<std::string, std::string>, int> ranks;
    while (ranks.size() < 40) {
      const std::string& a = tokens[rng() % tokens.size()];
      const std::string& b = tokens[rng() % tokens.size()];
      if (ranks.count({a, b}) || (a + b).size() > 8) continue;
      ranks[{a, b}] = static_cast<int>(merges.size());
      merges.push_back(a + " " + b);
      if (!vocab.contains(a + b)) {
        vocab[a + b] = tokens.size();
        tokens.push_back(a + b);
      }
    }
    const BpeModel m = model_of(bpe(vocab, merges));
    for (int n = 0; n < 50; ++n) {
      std::string word(rng() % 60, 'a');
      for (auto& c : word) c = static_cast<char>('a' + rng() % 4);
      Ids expected;
      for (const auto& t : reference_bpe(word, ranks)) expected.push_back(vocab.at(t).get<TokenId>());
      INFO(word);
      CHECK(encode(m, word) == expected);
    }
  }
}

TEST_CASE("bpe: equal ranks merge leftmost first; a pair listed twice keeps its later rank", "[tokenize][bpe]") {
  const BpeModel m = model_of(bpe({{"a", 0}, {"aa", 1}}, {"a a"}));
  CHECK(encode(m, "aaa") == Ids{1, 0});
  CHECK(encode(m, "aaaa") == Ids{1, 1});
  CHECK(encode(m, "") == Ids{});
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}};
  CHECK(encode(model_of(bpe(vocab, {"a b", "b c"})), "abc") == Ids{3, 2});
  CHECK(encode(model_of(bpe(vocab, {"a b", "b c", "a b"})), "abc") == Ids{0, 4});
}

TEST_CASE("bpe: merges as \"a b\" strings or [a, b] pairs; #version lines are skipped", "[tokenize][bpe]") {
  const json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"x y", 3}, {"z", 4}, {"x yz", 5}};
  const BpeModel strings = model_of(bpe(vocab, {"#version: 0.2", "a b"}));
  // (json::array: a braced list of two-string lists would read as an object.)
  const BpeModel pairs = model_of(bpe(vocab, json::array({json::array({"a", "b"}), json::array({"x y", "z"})})));
  CHECK(encode(strings, "ab") == Ids{2});
  CHECK(encode(pairs, "ab") == Ids{2});
  CHECK(pairs.size() == 6);
  CHECK(pairs.token_to_id("x yz") == 5);
  CHECK(*pairs.id_to_token(2) == "ab");
  CHECK(pairs.id_to_token(99) == nullptr);
}

TEST_CASE("bpe: unknown characters: unk, fused unk, dropped", "[tokenize][bpe]") {
  const json vocab = {{"<unk>", 0}, {"a", 1}};
  CHECK(encode(model_of(bpe(vocab, json::array(), {{"unk_token", "<unk>"}})), "axya") == Ids{1, 0, 0, 1});
  CHECK(encode(model_of(bpe(vocab, json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", true}})), "axya") == Ids{1, 0, 1});
  CHECK(encode(model_of(bpe(vocab, json::array())), "axya") == Ids{1, 1});  // no unk_token: dropped
  // A multi-byte character is one unknown, an invalid byte another.
  CHECK(encode(model_of(bpe(vocab, json::array(), {{"unk_token", "<unk>"}})), "\xC3\xA9\xFF") == Ids{0, 0});
}

TEST_CASE("bpe: byte fallback, and an unknown run keeps its place before fallback bytes", "[tokenize][bpe]") {
  json vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  const BpeModel m = model_of(bpe(vocab, json::array(), {{"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}}));
  CHECK(encode(m, "a\xC3\xA9") == Ids{1, 2, 3});          // é -> <0xC3> <0xA9>
  CHECK(encode(m, "\xE6\x97\xA5\xC3\xA9") == Ids{0, 2, 3});  // 日 has no byte tokens: <unk>, then é's bytes
  CHECK(encode(m, "\xC3") == Ids{2});                      // a lone invalid byte falls back too
}

TEST_CASE("bpe: continuing_subword_prefix and end_of_word_suffix", "[tokenize][bpe]") {
  const json vocab = {{"a", 0}, {"##b", 1}, {"##c</w>", 2}, {"ab", 3}, {"abc</w>", 4}, {"c</w>", 5}};
  const BpeModel m = model_of(bpe(vocab, {"a ##b", "ab ##c</w>"}, {{"continuing_subword_prefix", "##"}, {"end_of_word_suffix", "</w>"}}));
  CHECK(encode(m, "abc") == Ids{4});
  CHECK(encode(m, "c") == Ids{5});
  CHECK(m.options().continuing_subword_prefix == "##");
}

TEST_CASE("bpe: ignore_merges takes whole-word tokens directly", "[tokenize][bpe]") {
  const json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"ba", 3}, {"aba", 4}};
  CHECK(encode(model_of(bpe(vocab, {"a b"}, {{"ignore_merges", true}})), "aba") == Ids{4});
  CHECK(encode(model_of(bpe(vocab, {"a b"})), "aba") == Ids{2, 0});
}

TEST_CASE("bpe: malformed models are FormatErrors naming the file and the key", "[tokenize][bpe]") {
  const json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}};
  using Catch::Contains;
  CHECK_THROWS_WITH(model_of(bpe(vocab, {"a b", "a c"})), Contains(bpe_source) && Contains("model.merges[1]") && Contains("'c'"));
  CHECK_THROWS_WITH(model_of(bpe(vocab, {"b a"})), Contains("model.merges[0]") && Contains("'ba'"));
  CHECK_THROWS_WITH(model_of(bpe(vocab, {"a  b"})), Contains("model.merges[0]"));
  CHECK_THROWS_WITH(model_of(bpe(vocab, {42})), Contains("model.merges[0]"));
  CHECK_THROWS_WITH(model_of(bpe(vocab, {{"a", "b", "c"}})), Contains("model.merges[0]"));
  CHECK_THROWS_WITH(model_of(bpe({{"a", -1}}, json::array())), Contains("model.vocab['a']"));
  CHECK_THROWS_WITH(model_of(bpe({{"a", 1 << 24}}, json::array())), Contains("model.vocab['a']"));
  CHECK_THROWS_WITH(model_of(bpe({{"a", "0"}}, json::array())), Contains("expected an integer"));
  CHECK_THROWS_WITH(model_of(bpe({{"a", 0}, {"b", 0}}, json::array())), Contains("id 0"));
  CHECK_THROWS_WITH(model_of(bpe(vocab, json::array(), {{"unk_token", "<unk>"}})), Contains("model.unk_token"));
  CHECK_THROWS_WITH(model_of(bpe(vocab, json::array(), {{"type", "WordPiece"}})), Contains("WordPiece"));
  CHECK_THROWS_WITH(model_of({{"type", "BPE"}, {"vocab", vocab}}), Contains("missing \"merges\""));
  CHECK_THROWS_WITH(model_of(bpe(json::array(), json::array())), Contains("model.vocab"));
  CHECK_THROWS_AS(model_of(bpe(vocab, "a b")), accel::FormatError);
}
