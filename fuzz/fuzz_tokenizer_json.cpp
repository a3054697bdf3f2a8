// Fuzz target: Tokenizer::from_json over arbitrary tokenizer.json text.
//
// A tokenizer that loads is then used: fixed texts (ASCII, spaces and newlines, multi-byte
// characters, invalid UTF-8, a special-token lookalike, empty) are encoded with and without
// special tokens, every id must be a token, and decoding the ids must succeed. A tokenizer whose
// pre-tokenizer and decoder are both plain ByteLevel, with every byte in its vocabulary, must give
// the text back exactly.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/tokenize/tokenizer.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool byte_level_both_ways(const accel::tokenize::Tokenizer& t) {
  using accel::tokenize::DecoderStep;
  using accel::tokenize::PreTokenizerStep;
  const auto& pre = t.pre_tokenizer().steps();
  const auto& dec = t.decoder().steps();
  const auto& options = t.model().options();
  if (!t.normalizer().empty() || !t.added_tokens().empty() || pre.size() != 1 ||
      pre[0].kind != PreTokenizerStep::Kind::byte_level || pre[0].add_prefix_space || dec.size() != 1 ||
      dec[0].kind != DecoderStep::Kind::byte_level || !options.continuing_subword_prefix.empty() ||
      !options.end_of_word_suffix.empty()) {
    return false;
  }
  // Every byte needs its stand-in in the vocabulary, or it is dropped or unknown.
  for (int b = 0; b < 256; ++b) {
    std::string stand_in;
    accel::tokenize::to_byte_level(std::string(1, static_cast<char>(b)), stand_in);
    if (!t.model().token_to_id(stand_in)) return false;
  }
  return true;
}

void use(const accel::tokenize::Tokenizer& t) {
  static const std::vector<std::string> texts = {
      "", "Hello world", "  two  spaces\n\nnew\r\nlines\t", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
      "\xFF\xFE\xC0\x80\xED\xA0\x80", "<s></s><|endoftext|><unk>", "it's 12345 THEY'LL",
  };
  const bool round_trip = byte_level_both_ways(t);
  for (const auto& text : texts) {
    for (const bool special : {false, true}) {
      const auto ids = t.encode(text, special);
      for (const auto id : ids) check(t.id_to_token(id).has_value());
      const std::string back = t.decode(ids);
      if (round_trip && !special) check(back == text);
      (void)t.decode(ids, true);
    }
  }
  if (t.vocab_size() > 0) (void)t.token_to_id("a");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    use(accel::tokenize::Tokenizer::from_json(text, "fuzz-tokenizer.json"));
  } catch (const accel::Error&) {
  }
  return 0;
}
