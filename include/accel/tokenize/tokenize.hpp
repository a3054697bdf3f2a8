// The tokenize layer: tokenizer.json readers for byte-level BPE (GPT-2, LLaMA-3) and BPE with
// byte fallback (LLaMA-2, Mistral), with encode and decode.
//
//   Tokenizer                 tokenizer.hpp: from_file / from_json, encode, decode, vocabulary queries
//   BpeModel                  bpe.hpp: the BPE model and its merge algorithm
//   AddedTokenMatcher         added_tokens.hpp: special and added tokens found in text
//   Normalizer, PreTokenizer, Decoder, PostProcessor    the pipeline stages, one header each
//   split_by_pattern          split_patterns.hpp: GPT-2's and LLaMA-3's split regexes as scanners
//   to_byte_level             byte_level.hpp: GPT-2's byte-to-character table
//   tokenizer_limits          tokenizer_json.hpp: the bounds a tokenizer.json must keep
#pragma once

#include "accel/tokenize/added_tokens.hpp"
#include "accel/tokenize/bpe.hpp"
#include "accel/tokenize/byte_level.hpp"
#include "accel/tokenize/decoder.hpp"
#include "accel/tokenize/normalizer.hpp"
#include "accel/tokenize/post_processor.hpp"
#include "accel/tokenize/pre_tokenizer.hpp"
#include "accel/tokenize/split_patterns.hpp"
#include "accel/tokenize/tokenizer.hpp"
#include "accel/tokenize/tokenizer_json.hpp"
#include "accel/tokenize/unicode.hpp"
#include "accel/tokenize/vocab.hpp"
