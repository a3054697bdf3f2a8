// The pipeline stages on their own: Split behaviors, the Metaspace and ByteLevel pre-tokenizers,
// normalizers, decoders and post-processors, each read from its tokenizer.json object.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"
#include "accel/tokenize/decoder.hpp"
#include "accel/tokenize/normalizer.hpp"
#include "accel/tokenize/post_processor.hpp"
#include "accel/tokenize/pre_tokenizer.hpp"

using namespace accel::tokenize;
using nlohmann::json;
using Strings = std::vector<std::string>;

namespace {

const std::string stages_source = "stages.json";
const std::string ms = "\xE2\x96\x81";

Strings words(const json& pre, std::string_view text, bool at_start = true) {
  std::vector<PreToken> out;
  PreTokenizer::from_json(JsonNode(pre, "pre_tokenizer", stages_source)).apply(text, at_start, out);
  Strings s;
  for (auto& w : out) s.push_back(w.text);
  return s;
}

json split(const std::string& literal, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"String", literal}}}, {"behavior", behavior}, {"invert", invert}};
}

std::string decode(const json& decoder, Strings tokens) {
  if (decoder.is_null()) return Decoder::from_json(std::nullopt).apply(std::move(tokens));
  return Decoder::from_json(JsonNode(decoder, "decoder", stages_source)).apply(std::move(tokens));
}

}  // namespace

TEST_CASE("split: the five behaviors on a literal pattern", "[tokenize][stages]") {
  const std::string text = "The-final--countdown";
  CHECK(words(split("-", "Removed"), text) == Strings{"The", "final", "countdown"});
  CHECK(words(split("-", "Isolated"), text) == Strings{"The", "-", "final", "-", "-", "countdown"});
  CHECK(words(split("-", "MergedWithPrevious"), text) == Strings{"The-", "final-", "-", "countdown"});
  CHECK(words(split("-", "MergedWithNext"), text) == Strings{"The", "-final", "-", "-countdown"});
  CHECK(words(split("-", "Contiguous"), text) == Strings{"The", "-", "final", "--", "countdown"});
  // invert: the pattern names what to keep.
  CHECK(words(split("Hello", "Removed", true), "Hello Hello Hello") == Strings{"Hello", "Hello", "Hello"});
  CHECK(words(split("", "Isolated"), "abc") == Strings{"abc"});
  CHECK(words(split("-", "Removed"), "---").empty());
}

TEST_CASE("split: a known regex inside a Sequence, then ByteLevel", "[tokenize][stages]") {
  const json pre = {{"type", "Sequence"},
                    {"pretokenizers",
                     {{{"type", "Split"},
                       {"pattern", {{"Regex", std::string(llama3_regex)}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  CHECK(words(pre, "Hi there\n") == Strings{"Hi", "\xC4\xA0there", "\xC4\x8A"});  // Ġthere, Ċ
}

TEST_CASE("byte level pre-tokenizer: prefix space, regex, stand-ins", "[tokenize][stages]") {
  const json with_space = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  CHECK(words(with_space, "Hi you") == Strings{"\xC4\xA0Hi", "\xC4\xA0you"});
  CHECK(words({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}, "Hi you") ==
        Strings{"Hi\xC4\xA0you"});
  CHECK(words({{"type", "ByteLevel"}, {"add_prefix_space", false}}, "").empty());
}

TEST_CASE("metaspace pre-tokenizer: replacement, prepend schemes, split", "[tokenize][stages]") {
  const json first = {{"type", "Metaspace"}, {"replacement", ms}, {"prepend_scheme", "first"}, {"split", true}};
  CHECK(words(first, "Hey  friend") == Strings{ms + "Hey", ms, ms + "friend"});
  CHECK(words(first, "Hey", false) == Strings{"Hey"});  // not the start of the text: no prepend
  CHECK(words(first, " Hey") == Strings{ms + "Hey"});   // a leading space already is the ▁
  json never = first;
  never["prepend_scheme"] = "never";
  never["split"] = false;
  CHECK(words(never, "a b") == Strings{"a" + ms + "b"});
  json bad = first;
  bad["prepend_scheme"] = "sometimes";
  CHECK_THROWS_WITH(words(bad, "x"), Catch::Contains("pre_tokenizer.prepend_scheme") && Catch::Contains("sometimes"));
}

TEST_CASE("normalizers: Prepend, Replace, Strip and their order", "[tokenize][stages]") {
  const json llama = {{"type", "Sequence"},
                      {"normalizers",
                       {{{"type", "Prepend"}, {"prepend", ms}},
                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", ms}}}}};
  const Normalizer n = Normalizer::from_json(JsonNode(llama, "normalizer", stages_source));
  CHECK(n.apply("Hello world") == ms + "Hello" + ms + "world");
  CHECK(n.apply(" ") == ms + ms);
  CHECK(n.apply("").empty());
  const json strip = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}};
  CHECK(Normalizer::from_json(JsonNode(strip, "normalizer", stages_source)).apply(" \t x \n") == "x \n");
  CHECK(Normalizer::from_json(std::nullopt).empty());
  CHECK(replace_all("aaa", "aa", "b") == "ba");
}

TEST_CASE("decoders: each step", "[tokenize][stages]") {
  CHECK(decode(nullptr, {"a", "b"}) == "a b");  // no decoder: joined with spaces
  CHECK(decode({{"type", "ByteLevel"}}, {"Hello", "\xC4\xA0world", "<|x y|>"}) == "Hello world<|x y|>");
  const json fallback = {{"type", "ByteFallback"}};
  CHECK(decode(fallback, {"a", "<0xE6>", "<0x97>", "<0xA5>", "b"}) == "a\xE6\x97\xA5" "b");
  CHECK(decode(fallback, {"<0xff>", "<0x4G>", "<0x41>"}) == "\xFF<0x4G>A");  // bytes kept as they are
  const json strip = {{"type", "Strip"}, {"content", " "}, {"start", 2}, {"stop", 1}};
  CHECK(decode(strip, {"   a  "}) == " a ");
  CHECK(decode({{"type", "BPEDecoder"}, {"suffix", "</w>"}}, {"hel", "lo</w>", "you</w>"}) == "hello you");
  const json metaspace = {{"type", "Metaspace"}, {"replacement", ms}, {"prepend_scheme", "always"}};
  CHECK(decode(metaspace, {ms + ms + "a", ms + "b"}) == " a b");
  CHECK(byte_fallback_value("<0x0A>") == 10);
  CHECK(byte_fallback_value("<0x0A") == -1);
}

TEST_CASE("post-processors: templates, roberta, sequences", "[tokenize][stages]") {
  const json bos_eos = {{"type", "TemplateProcessing"},
                        {"single",
                         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                          {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                        {"special_tokens",
                         {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
                          {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}};
  const PostProcessor p = PostProcessor::from_json(JsonNode(bos_eos, "post_processor", stages_source));
  CHECK(p.prefix() == std::vector<TokenId>{1});
  CHECK(p.suffix() == std::vector<TokenId>{2});
  const json seq = {{"type", "Sequence"},
                    {"processors",
                     {{{"type", "ByteLevel"}},
                      bos_eos,
                      {{"type", "RobertaProcessing"}, {"cls", {"<c>", 7}}, {"sep", {"<e>", 8}}}}}};
  const PostProcessor q = PostProcessor::from_json(JsonNode(seq, "post_processor", stages_source));
  CHECK(q.prefix() == std::vector<TokenId>{7, 1});  // the later processor wraps the earlier one
  CHECK(q.suffix() == std::vector<TokenId>{2, 8});
  CHECK(PostProcessor::from_json(std::nullopt).prefix().empty());
}
