// Writes tokenizer.json files and their encodings with the Hugging Face `tokenizers` library, so
// that accel's tokenizer is compared with an independent implementation
// (tests/tokenize/test_reference_tokenizers.cpp reads what this writes).
//
// Usage: node make_tokenizer_references.mjs OUT_DIR      (the fixtures live in tests/data/tokenizers)
//
// Needs the library's Node bindings (the npm package `tokenizers`, a build of the Rust library),
// installed anywhere outside the repository and found through NODE_PATH:
//   mkdir -p ~/npm-tok && cd ~/npm-tok && npm init -y && npm install tokenizers
//   NODE_PATH=~/npm-tok/node_modules node tests/tokenize/make_tokenizer_references.mjs tests/data/tokenizers
//
// For each family below the library's BPE trainer (Tokenizer.train with its default settings, all
// the bindings offer) learns merges from the text of CORPUS with that family's normalizer and
// pre-tokenizer (the LLaMA-2 family's on Metaspace-split "▁word" pieces, as SentencePiece learns
// them); the first MERGES of them, the alphabet and the special tokens make a small vocabulary
// laid out as the family's real one is. The tokenizer.json is written by the library itself, read
// back, and asked for the encodings of TEXTS and the family's SPECIAL_TEXTS. The output is the
// same from run to run.
//
//   gpt2_style     ByteLevel pre-tokenizer (GPT-2's regex), decoder and post-processor;
//                  <|endoftext|> in the vocabulary and added
//   llama3_style   Split(LLaMA-3's regex) + ByteLevel(use_regex false), ignore_merges with a few
//                  tokens only that reaches, specials added past the vocabulary, a BOS template
//   llama2_style   Prepend("▁") + Replace(" ", "▁") normalizer, no pre-tokenizer, byte fallback
//                  with the 256 <0xNN> tokens, fuse_unk, <unk> <s> </s>, a "<s> $A" template, the
//                  Replace / ByteFallback / Fuse / Strip decoder; control characters, kana and
//                  characters outside the Basic Multilingual Plane are left out of the vocabulary
//                  (they take bytes)
//   mistral_style  llama2_style's model with the newer layout: no normalizer, a Metaspace
//                  pre-tokenizer (prepend_scheme "first", split false), Metaspace in the decoder
//   unk_style      llama2_style without byte fallback or <0xNN> tokens: unknown characters are
//                  <unk>, runs of them fused into one; a normalized added token "hi there"
//   roberta_style  ByteLevel with add_prefix_space, RobertaProcessing (<s> $A </s>), and added
//                  tokens with lstrip, rstrip, single_word, normalized and a space inside
//
// OUT_DIR/<name>/tokenizer.json and OUT_DIR/<name>/expected.json:
//   {"tokenizers_version", "vocab_size" (added tokens included), "cases": [{"text",
//    "ids" (add_special_tokens true), "ids_plain" (false), "tokens" (id_to_token of ids),
//    "decoded" (decode(ids, skip_special_tokens false)), "decoded_skip" (true)}]}
import { createRequire } from 'node:module'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

const require = createRequire(import.meta.url)
const tk = require('tokenizers')
const VERSION = require('tokenizers/package.json').version

const CORPUS = Array(20)
  .fill([
    'The quick brown fox jumps over the lazy dog.',
    'Hello world! Hello, accel. The model reads its weights once per token.',
    "It's what they've said: we'll see, I'm sure you'd agree.",
    'Numbers 0123456789 and 3.14159, 2024-11-25, 1,000,000 tokens per second.',
    'def forward(self, x):\n    return self.proj(x) + x  # residual\n',
    'Café, naïve, résumé, São Paulo, Zürich, Ångström.',
    '日本語のテキストと中文文本。',
    'Emoji: 😀🚀✨ and symbols © ® ™ € £ ¥.',
    '    indented\tline with\ttabs\n\nand blank lines\r\n',
    'UPPER lower MiXeD case WORDS and snake_case and camelCase.',
  ])
  .flat()

const TEXTS = [
  '',
  'Hello world',
  'The quick brown fox jumps over the lazy dog.',
  ' leading space and  double  spaces   ',
  "It's what they've said: we'll see",
  "I'M SHOUTING: IT'S, WE'LL, THEY'VE, YOU'D",
  'numbers: 1234567 and 3.14, 2024',
  'Café naïve Ångström',
  '日本語 中文',
  'emoji 😀🚀 mixed',
  'tabs\tand\nnewlines\n\n  and\r\nCRLF',
  'unseen letters: ξψω ЖЩЯ',
  'def f(x):\n    return x**2\n',
  'trailing newline\n',
  '   ',
  '\n\n\n',
  ' ',
  'no\u00a0break\u3000ideographic\u2009thin spaces',
  'x  \n  y',
  '!!! ??? ...',
  '▁ already has a metaspace ▁▁',
  'aaaaaaaaaaaaaaaa lllllll eeeeee',
  '    four spaces\t\t\ttabs',
  'e\u0301te\u0301 combining, \u01c5emal \u02b0 x\u00b2\u00b3 \u00bd \u216b \u3007 \u0663\u0664\u0665 \u0967\u0968',
  'soft\u00adhyphen zero\u200dwidth\ufeffbom nel\u0085here vt\u000bff\u000cfs\u001cus\u001f',
  'flags \u{1F1FA}\u{1F1F8} family \u{1F468}\u200d\u{1F469}\u200d\u{1F467} heart \u2764\ufe0f',
  "'s 's 'S '\u017f 'll 'LL '' it''s ' x' 'tis",
  '$hello #tag @user (parens) [brackets] {braces} <angle>',
  'a\r\n\r\nb \n \n end with spaces  \n',
  '1234567890123 3.14159e-10 0x1F',
  '\ufb01 ligature \uff21\uff22\uff23 fullwidth \u0130stanbul \u00df \u03a3\u0391\u03a3 \u03c3\u03b1\u03c2',
  'line\u2028separator \u{1D518}\u{1D52B}\u{1D526} math letters',
  // After a letter or number "'s" is a contraction; after anything else "'" joins the run of others.
  "newer letters \u{1E030}'s \u{11F04}'s \u{10D50}'s \u{1E4F0}'s, digits \u{11F50}'s \u{16D70}'s, older \u{10E80}'s",
]
const SENTENCE_PIECE_SPECIAL_TEXTS = [
  'Hello</s> world',
  '<s>start',
  'literal <0x41> text',
  '</s>',
  ' <unk> x',
  '</s></s>',
  '<s> <s>  spaced',
  'x</s>y',
  '<s',
]
const SPECIAL_TEXTS = {
  gpt2_style: ['Hello<|endoftext|>world', '<|endoftext|>', ' <|endoftext|> spaced <|endoftext|>', '<|endof'],
  llama3_style: [
    'Hi<|end_of_text|> there',
    '<|begin_of_text|>text',
    'a <|begin_of_text|><|end_of_text|> b',
    '<|reserved_special_token_0|>\n<|end_of',
  ],
  llama2_style: SENTENCE_PIECE_SPECIAL_TEXTS,
  mistral_style: SENTENCE_PIECE_SPECIAL_TEXTS,
  unk_style: ['Hello</s> world', '<s>start', 'unknown ξψω then Ж', 'hi there', 'say hi there, hi there!', 'chi therex'],
  roberta_style: [
    'Hello <mask> world',
    'Hello<mask>world',
    '   <mask>   spaces',
    'end [END]   next',
    'accel is accel-ish, not accelerate: accel_x xaccel accel',
    'one NEW TOKEN two NEW TOKENS',
    '<s>x</s> <pad><unk>',
    // \w around a single_word token: marks, Alphabetic symbols and Join_Control are word characters, '²' is not.
    'e\u0301accel accel\u0301 \u00b2accel \u24b6accel accel\u200dx \u203faccel \u2167accel accel\u00b2',
  ],
}

const MERGES = 250
const MS = '\u2581' // ▁
const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" +
  '|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+'

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'accel-tok-'))
const corpusFile = path.join(tmp, 'corpus.txt')
fs.writeFileSync(corpusFile, CORPUS.join('\n') + '\n')

// GPT-2's stand-in character for each byte: printable bytes stand for themselves, the others take
// U+0100, U+0101, ... in byte order.
function byteChars() {
  const out = []
  let next = 256
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
    out.push(String.fromCodePoint(printable ? b : next++))
  }
  return out
}

function byteToken(b) {
  return `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`
}

const byteLevel = (usePrefix, useRegex, trim = true) => ({
  type: 'ByteLevel',
  add_prefix_space: usePrefix,
  trim_offsets: trim,
  use_regex: useRegex,
})

function addedToken(id, content, special = true, normalized = false) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized, special }
}

function template(bos, bosId) {
  return {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [
      { SpecialToken: { id: bos, type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: bos, type_id: 1 } },
      { Sequence: { id: 'B', type_id: 1 } },
    ],
    special_tokens: { [bos]: { id: bos, ids: [bosId], tokens: [bos] } },
  }
}

function document({ added = [], normalizer = null, preTokenizer = null, postProcessor = null, decoder = null, model }) {
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer,
    pre_tokenizer: preTokenizer,
    post_processor: postProcessor,
    decoder,
    model,
  }
}

function bpe(vocab, merges, options = {}) {
  return {
    type: 'BPE',
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: false,
    byte_fallback: false,
    ignore_merges: false,
    ...options,
    vocab,
    merges,
  }
}

// The merges the library's BPE trainer learns from CORPUS with this normalizer and pre-tokenizer,
// in the order it learned them.
function trainedMerges(normalizer, preTokenizer) {
  const tok = tk.Tokenizer.fromString(JSON.stringify(document({ normalizer, preTokenizer, model: bpe({}, []) })))
  tok.train([corpusFile])
  const file = path.join(tmp, 'trained.json')
  tok.save(file)
  const merges = JSON.parse(fs.readFileSync(file, 'utf8')).model.merges
  return merges.map((m) => (typeof m === 'string' ? m.split(' ') : m))
}

// Appends to `vocab` (token -> id, ids consecutive) the tokens of the first `count` merges whose
// two parts it holds; returns those merges.
function extend(vocab, merges, count) {
  const kept = []
  for (const [a, b] of merges) {
    if (kept.length === count) break
    if (!(a in vocab) || !(b in vocab) || a + b in vocab) continue
    vocab[a + b] = Object.keys(vocab).length
    kept.push([a, b])
  }
  return kept
}

function gpt2Style() {
  const merges = trainedMerges(null, byteLevel(false, true))
  const vocab = {}
  for (const c of byteChars()) vocab[c] = Object.keys(vocab).length
  const kept = extend(vocab, merges, MERGES)
  const eot = Object.keys(vocab).length
  vocab['<|endoftext|>'] = eot
  return document({
    added: [addedToken(eot, '<|endoftext|>', true, true)],
    preTokenizer: byteLevel(false, true),
    postProcessor: byteLevel(true, true, false),
    decoder: byteLevel(true, true),
    model: bpe(
      vocab,
      kept.map(([a, b]) => `${a} ${b}`),
    ),
  })
}

function llama3Style() {
  const split = { type: 'Split', pattern: { Regex: LLAMA3_PATTERN }, behavior: 'Isolated', invert: false }
  const preTokenizer = { type: 'Sequence', pretokenizers: [split, byteLevel(false, false)] }
  const merges = trainedMerges(null, preTokenizer)
  const vocab = {}
  for (const c of byteChars()) vocab[c] = Object.keys(vocab).length
  const kept = extend(vocab, merges, MERGES)
  // Whole words no merge builds: only ignore_merges reaches them.
  const bl = (s) => [...Buffer.from(s, 'utf8')].map((b) => byteChars()[b]).join('')
  for (const word of ['456', bl(' quick'), bl(' jumps'), bl(' naïve'), 'Hello', bl(' SHOUTING')]) {
    if (!(word in vocab)) vocab[word] = Object.keys(vocab).length
  }
  const base = Object.keys(vocab).length
  const specials = ['<|begin_of_text|>', '<|end_of_text|>', '<|reserved_special_token_0|>']
  return document({
    added: specials.map((s, i) => addedToken(base + i, s)),
    preTokenizer,
    postProcessor: { type: 'Sequence', processors: [byteLevel(true, true, false), template(specials[0], base)] },
    decoder: byteLevel(true, true),
    model: bpe(vocab, kept, { ignore_merges: true }),
  })
}

// The SentencePiece-like model of the LLaMA-2 family: merges learned on "▁word" pieces.
function llama2Model({ byteFallback }) {
  const merges = trainedMerges(null, { type: 'Metaspace', replacement: MS, prepend_scheme: 'always', split: true })
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 }
  if (byteFallback) for (let b = 0; b < 256; ++b) vocab[byteToken(b)] = Object.keys(vocab).length
  const chars = new Set()
  for (const line of CORPUS) for (const c of line.replaceAll(' ', MS)) chars.add(c)
  chars.add(MS)
  const sorted = [...chars].sort((x, y) => x.codePointAt(0) - y.codePointAt(0))
  for (const c of sorted) {
    const cp = c.codePointAt(0)
    if (cp < 0x20 || cp > 0xffff || (cp >= 0x3040 && cp <= 0x30ff)) continue
    vocab[c] = Object.keys(vocab).length
  }
  const kept = extend(vocab, merges, MERGES)
  // Runs of spaces, as SentencePiece vocabularies have them.
  kept.push(...extend(vocab, [[MS, MS], [MS + MS, MS + MS]], 2))
  return bpe(
    vocab,
    kept.map(([a, b]) => `${a} ${b}`),
    { unk_token: '<unk>', fuse_unk: true, byte_fallback: byteFallback },
  )
}

const sentencePieceSpecials = () => [addedToken(0, '<unk>'), addedToken(1, '<s>'), addedToken(2, '</s>')]
const prependReplace = {
  type: 'Sequence',
  normalizers: [
    { type: 'Prepend', prepend: MS },
    { type: 'Replace', pattern: { String: ' ' }, content: MS },
  ],
}
const replaceDecoder = {
  type: 'Sequence',
  decoders: [
    { type: 'Replace', pattern: { String: MS }, content: ' ' },
    { type: 'ByteFallback' },
    { type: 'Fuse' },
    { type: 'Strip', content: ' ', start: 1, stop: 0 },
  ],
}

function llama2Style() {
  return document({
    added: sentencePieceSpecials(),
    normalizer: prependReplace,
    postProcessor: template('<s>', 1),
    decoder: replaceDecoder,
    model: llama2Model({ byteFallback: true }),
  })
}

function mistralStyle() {
  const metaspace = { type: 'Metaspace', replacement: MS, prepend_scheme: 'first', split: false }
  return document({
    added: sentencePieceSpecials(),
    preTokenizer: metaspace,
    postProcessor: template('<s>', 1),
    decoder: { type: 'Sequence', decoders: [metaspace, { type: 'ByteFallback' }, { type: 'Fuse' }] },
    model: llama2Model({ byteFallback: true }),
  })
}

function unkStyle() {
  const model = llama2Model({ byteFallback: false })
  // A token added after training, matched (and decoded) in its normalized form "▁hi▁there".
  const added = [...sentencePieceSpecials(), addedToken(Object.keys(model.vocab).length, 'hi there', false, true)]
  return document({
    added,
    normalizer: prependReplace,
    postProcessor: template('<s>', 1),
    decoder: replaceDecoder,
    model,
  })
}

// A byte-level model with added tokens of every kind, as RoBERTa and fine-tuned models have them.
function robertaStyle() {
  const merges = trainedMerges(null, byteLevel(true, true))
  const vocab = { '<s>': 0, '<pad>': 1, '</s>': 2, '<unk>': 3 }
  for (const c of byteChars()) vocab[c] = Object.keys(vocab).length
  const kept = extend(vocab, merges, MERGES)
  const next = Object.keys(vocab).length
  vocab['<mask>'] = next
  const added = [
    addedToken(0, '<s>'),
    addedToken(1, '<pad>'),
    addedToken(2, '</s>'),
    addedToken(3, '<unk>'),
    { ...addedToken(next, '<mask>'), lstrip: true },
    { ...addedToken(next + 1, '[END]'), rstrip: true },
    { ...addedToken(next + 2, 'accel', false, true), single_word: true },
    addedToken(next + 3, 'NEW TOKEN', false, true),
  ]
  return document({
    added,
    preTokenizer: byteLevel(true, true),
    postProcessor: {
      type: 'RobertaProcessing',
      sep: ['</s>', 2],
      cls: ['<s>', 0],
      trim_offsets: true,
      add_prefix_space: true,
    },
    decoder: byteLevel(true, true),
    model: bpe(
      vocab,
      kept.map(([a, b]) => `${a} ${b}`),
    ),
  })
}

async function main() {
  const out = process.argv[2]
  if (!out) {
    console.error('usage: node make_tokenizer_references.mjs OUT_DIR')
    process.exit(2)
  }
  const families = {
    gpt2_style: gpt2Style,
    llama3_style: llama3Style,
    llama2_style: llama2Style,
    mistral_style: mistralStyle,
    unk_style: unkStyle,
    roberta_style: robertaStyle,
  }
  for (const [name, make] of Object.entries(families)) {
    const folder = path.join(out, name)
    fs.mkdirSync(folder, { recursive: true })
    const file = path.join(folder, 'tokenizer.json')
    tk.Tokenizer.fromString(JSON.stringify(make())).save(file, true)
    const tok = tk.Tokenizer.fromFile(file) // what is tested is what the file says
    const cases = []
    for (const text of [...TEXTS, ...SPECIAL_TEXTS[name]]) {
      const encoding = await tok.encode(text, null, { addSpecialTokens: true })
      const ids = encoding.getIds()
      const plain = await tok.encode(text, null, { addSpecialTokens: false })
      cases.push({
        text,
        ids,
        ids_plain: plain.getIds(),
        tokens: ids.map((id) => tok.idToToken(id)),
        decoded: await tok.decode(ids, false),
        decoded_skip: await tok.decode(ids, true),
      })
    }
    // One case per line.
    const lines = cases.map((c) => ' ' + JSON.stringify(c)).join(',\n')
    const version = JSON.stringify(`${VERSION} (npm package tokenizers)`)
    const head = `"tokenizers_version": ${version}, "vocab_size": ${tok.getVocabSize(true)}`
    fs.writeFileSync(path.join(folder, 'expected.json'), `{${head}, "cases": [\n${lines}\n]}\n`)
    console.log(`${name}: ${tok.getVocabSize(true)} tokens, ${cases.length} cases`)
  }
  fs.rmSync(tmp, { recursive: true, force: true })
}

await main()
