// A restricted pickle interpreter: rebuilds plain data from a pickle stream, never runs code.
//
//   pickle::Unpickler u(bytes, "model.bin/data.pkl", hooks);
//   pickle::Ref root = u.load();
//
// Supports the opcodes torch.save (protocol 2, plus the protocol 3-5 framing and string forms)
// emits. GLOBAL / STACK_GLOBAL names are checked by `hooks.allow_global` — anything else is a
// FormatError "refusing to load global X" — and REDUCE calls only `collections.OrderedDict` (built
// in) or what `hooks.reduce` accepts. Bounded: every opcode consumes input, containers nest at
// most `max_depth` deep, and a container cannot be modified once placed inside another, so
// cycles cannot form.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/storage.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"

namespace accel::io::pickle {

/// Python value kinds the interpreter can build.
enum class Kind : std::uint8_t { none, boolean, integer, floating, string, bytes, tuple, list, dict, global, storage, tensor };

struct Object;
/// Shared reference to a value (the memo and containers share values, as Python does).
using Ref = std::shared_ptr<Object>;

/// One Python value. Only the fields of its kind are meaningful.
struct Object {
  Kind kind = Kind::none;
  bool boolean = false;
  std::int64_t integer = 0;
  double floating = 0.0;
  std::string text;                        ///< string, bytes, or "module.name" of a global
  std::vector<Ref> items;                  ///< tuple, list
  std::vector<std::pair<std::string, Ref>> entries;  ///< dict (string keys, insertion order)
  std::map<std::string, std::size_t, std::less<>> entry_index;
  Storage storage;                         ///< storage
  DType storage_dtype = DType::u8;         ///< storage
  std::uint64_t storage_numel = 0;         ///< storage
  Tensor tensor;                           ///< tensor
  int depth = 0;        ///< nesting depth of containers below this value
  bool frozen = false;  ///< placed inside a container: may no longer be modified

  static Ref make(Kind k) {
    auto r = std::make_shared<Object>();
    r->kind = k;
    return r;
  }
  bool is_int() const noexcept { return kind == Kind::integer; }
  bool is_sequence() const noexcept { return kind == Kind::tuple || kind == Kind::list; }
};

/// What the interpreter asks its user: which globals exist, how to call them, and how to
/// resolve persistent ids.
struct Hooks {
  std::function<bool(std::string_view module, std::string_view name)> allow_global;
  /// Called for REDUCE of an allowed global other than collections.OrderedDict.
  std::function<Ref(const std::string& global, const Ref& args)> reduce;
  /// Called for BINPERSID with the persistent id value.
  std::function<Ref(const Ref& pid)> persistent_load;
};

/// Interprets one pickle stream. `source` names it in errors.
class Unpickler {
 public:
  static constexpr int max_depth = 64;

  Unpickler(ByteSpan data, std::string source, Hooks hooks)
      : d_(data), source_(std::move(source)), hooks_(std::move(hooks)) {}

  /// Runs to STOP and returns the value on top of the stack.
  Ref load() {
    while (true) {
      const std::size_t at = pos_;
      const auto op = static_cast<unsigned char>(byte());
      switch (op) {
        case 0x80: (void)byte(); break;                 // PROTO
        case 0x95: (void)take(8); break;                // FRAME (protocol 4 framing: ignore)
        case '.': {                                     // STOP
          if (stack_.empty()) fail(at, "STOP with an empty stack");
          return stack_.back();
        }
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case 'N': push(Object::make(Kind::none)); break;
        case 0x88: push(boolean(true)); break;
        case 0x89: push(boolean(false)); break;
        case 'J': push(integer(static_cast<std::int32_t>(load_le<std::uint32_t>(take(4))))); break;  // BININT
        case 'K': push(integer(static_cast<unsigned char>(byte()))); break;                         // BININT1
        case 'M': push(integer(load_le<std::uint16_t>(take(2)))); break;                            // BININT2
        case 0x8a: {                                                                                 // LONG1
          const auto n = static_cast<unsigned char>(byte());
          if (n > 8) fail(at, "LONG1 of " + std::to_string(n) + " bytes exceeds 64 bits");
          const std::byte* p = take(n);
          std::uint64_t v = 0;
          for (unsigned i = 0; i < n; ++i) v |= std::uint64_t(std::to_integer<unsigned char>(p[i])) << (8 * i);
          if (n > 0 && n < 8 && (std::to_integer<unsigned char>(p[n - 1]) & 0x80)) v |= ~std::uint64_t{0} << (8 * n);
          push(integer(static_cast<std::int64_t>(v)));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian IEEE double
          const std::byte* p = take(8);
          std::uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | std::to_integer<unsigned char>(p[i]);
          auto o = Object::make(Kind::floating);
          std::memcpy(&o->floating, &bits, 8);
          push(o);
          break;
        }
        case 'X': push(text(Kind::string, load_le<std::uint32_t>(take(4)), at)); break;       // BINUNICODE
        case 0x8c: push(text(Kind::string, static_cast<unsigned char>(byte()), at)); break;   // SHORT_BINUNICODE
        case 0x8d: push(text(Kind::string, load_le<std::uint64_t>(take(8)), at)); break;      // BINUNICODE8
        case 'U': push(text(Kind::bytes, static_cast<unsigned char>(byte()), at)); break;     // SHORT_BINSTRING
        case 'T': push(text(Kind::bytes, load_le<std::uint32_t>(take(4)), at)); break;        // BINSTRING
        case 'C': push(text(Kind::bytes, static_cast<unsigned char>(byte()), at)); break;     // SHORT_BINBYTES
        case 'B': push(text(Kind::bytes, load_le<std::uint32_t>(take(4)), at)); break;        // BINBYTES
        case '}': push(Object::make(Kind::dict)); break;                                      // EMPTY_DICT
        case ']': push(Object::make(Kind::list)); break;                                      // EMPTY_LIST
        case ')': push(Object::make(Kind::tuple)); break;                                     // EMPTY_TUPLE
        case 't': push(container(Kind::tuple, pop_mark(at), at)); break;                     // TUPLE
        case 'l': push(container(Kind::list, pop_mark(at), at)); break;                      // LIST
        case 0x85: push(container(Kind::tuple, pop_n(1, at), at)); break;                    // TUPLE1
        case 0x86: push(container(Kind::tuple, pop_n(2, at), at)); break;                    // TUPLE2
        case 0x87: push(container(Kind::tuple, pop_n(3, at), at)); break;                    // TUPLE3
        case 'd': {                                                                           // DICT
          auto items = pop_mark(at);
          auto dict = Object::make(Kind::dict);
          set_items(dict, items, at);
          push(dict);
          break;
        }
        case 'a': {  // APPEND
          auto v = pop(at);
          append(top(at), {v}, at);
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_mark(at);
          append(top(at), items, at);
          break;
        }
        case 's': {  // SETITEM
          auto v = pop(at);
          auto k = pop(at);
          set_items(top(at), {k, v}, at);
          break;
        }
        case 'u': {  // SETITEMS
          auto items = pop_mark(at);
          set_items(top(at), items, at);
          break;
        }
        case 'q': memo_put(static_cast<unsigned char>(byte()), at); break;   // BINPUT
        case 'r': memo_put(load_le<std::uint32_t>(take(4)), at); break;      // LONG_BINPUT
        case 0x94: memo_put(static_cast<std::uint32_t>(memo_.size()), at); break;  // MEMOIZE
        case 'h': push(memo_get(static_cast<unsigned char>(byte()), at)); break;  // BINGET
        case 'j': push(memo_get(load_le<std::uint32_t>(take(4)), at)); break;     // LONG_BINGET
        case '0': (void)pop(at); break;                                          // POP
        case '1': (void)pop_mark(at); break;                                     // POP_MARK
        case '2': push(top(at)); break;                                          // DUP
        case 'c': {                                                              // GLOBAL
          const std::string module = line(at);
          const std::string name = line(at);
          push(global(module, name, at));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto name = pop(at);
          auto module = pop(at);
          if (name->kind != Kind::string || module->kind != Kind::string) fail(at, "STACK_GLOBAL needs two strings");
          push(global(module->text, name->text, at));
          break;
        }
        case 'Q': {  // BINPERSID
          auto pid = pop(at);
          if (!hooks_.persistent_load) fail(at, "persistent ids are not supported here");
          freeze(pid);
          push(hooks_.persistent_load(pid));
          break;
        }
        case 'R': {  // REDUCE
          auto args = pop(at);
          auto fn = pop(at);
          if (fn->kind != Kind::global) fail(at, "REDUCE of a value that is not a callable global");
          if (args->kind != Kind::tuple) fail(at, "REDUCE arguments are not a tuple");
          freeze(args);
          if (fn->text == "collections.OrderedDict") {
            if (!args->items.empty()) fail(at, "collections.OrderedDict called with arguments");
            push(Object::make(Kind::dict));
          } else {
            if (!hooks_.reduce) fail(at, "cannot call " + fn->text);
            push(hooks_.reduce(fn->text, args));
          }
          break;
        }
        case 'b': {  // BUILD: only attribute state on dicts (an OrderedDict's _metadata), ignored
          auto state = pop(at);
          auto obj = top(at);
          if (obj->kind != Kind::dict) fail(at, "BUILD on a value that is not a dict");
          if (state->kind != Kind::dict && state->kind != Kind::none && state->kind != Kind::tuple) {
            fail(at, "BUILD with unsupported state");
          }
          break;
        }
        default: fail(at, "unsupported opcode 0x" + hex(op));
      }
    }
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw FormatError("pickle '" + source_ + "' at byte " + std::to_string(at) + ": " + what);
  }
  static std::string hex(unsigned v) {
    const char* digits = "0123456789abcdef";
    return {digits[(v >> 4) & 15], digits[v & 15]};
  }

  std::byte byte() {
    if (pos_ >= d_.size()) fail(pos_, "unexpected end of data (no STOP)");
    return d_[pos_++];
  }
  const std::byte* take(std::uint64_t n) {
    if (n > d_.size() - pos_) fail(pos_, "needs " + std::to_string(n) + " bytes, " + std::to_string(d_.size() - pos_) + " left");
    const std::byte* p = d_.data() + pos_;
    pos_ += static_cast<std::size_t>(n);
    return p;
  }
  std::string line(std::size_t at) {
    const std::size_t start = pos_;
    while (pos_ < d_.size() && d_[pos_] != std::byte{'\n'}) ++pos_;
    if (pos_ >= d_.size()) fail(at, "GLOBAL name not terminated by a newline");
    std::string s(reinterpret_cast<const char*>(d_.data() + start), pos_ - start);
    ++pos_;
    return s;
  }

  static Ref boolean(bool b) {
    auto o = Object::make(Kind::boolean);
    o->boolean = b;
    return o;
  }
  static Ref integer(std::int64_t v) {
    auto o = Object::make(Kind::integer);
    o->integer = v;
    return o;
  }
  Ref text(Kind k, std::uint64_t n, std::size_t at) {
    const std::byte* p = take(n);
    auto o = Object::make(k);
    o->text.assign(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
    if (k == Kind::string && !is_valid_utf8(o->text)) fail(at, "string is not valid UTF-8");
    return o;
  }
  Ref global(const std::string& module, const std::string& name, std::size_t at) {
    const bool ok = (module == "collections" && name == "OrderedDict") ||
                    (hooks_.allow_global && hooks_.allow_global(module, name));
    if (!ok) fail(at, "refusing to load global " + module + "." + name);
    auto o = Object::make(Kind::global);
    o->text = module + "." + name;
    return o;
  }

  void push(Ref r) { stack_.push_back(std::move(r)); }
  Ref pop(std::size_t at) {
    if (stack_.size() <= floor()) fail(at, "stack underflow");
    Ref r = std::move(stack_.back());
    stack_.pop_back();
    return r;
  }
  const Ref& top(std::size_t at) {
    if (stack_.size() <= floor()) fail(at, "stack underflow");
    return stack_.back();
  }
  std::size_t floor() const noexcept { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Ref> pop_mark(std::size_t at) {
    if (marks_.empty()) fail(at, "no MARK on the stack");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                           std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  std::vector<Ref> pop_n(std::size_t n, std::size_t at) {
    if (stack_.size() < floor() + n) fail(at, "stack underflow");
    std::vector<Ref> items(std::make_move_iterator(stack_.end() - static_cast<std::ptrdiff_t>(n)),
                           std::make_move_iterator(stack_.end()));
    stack_.resize(stack_.size() - n);
    return items;
  }

  void adopt(Object& parent, const Ref& child, std::size_t at) {
    if (child.get() == &parent) fail(at, "a container cannot contain itself");
    freeze(child);
    if (child->depth + 1 > parent.depth) parent.depth = child->depth + 1;
    if (parent.depth > max_depth) fail(at, "values nested deeper than " + std::to_string(max_depth) + " levels");
  }
  static void freeze(const Ref& r) { r->frozen = true; }

  Ref container(Kind k, std::vector<Ref> items, std::size_t at) {
    auto o = Object::make(k);
    for (const auto& it : items) adopt(*o, it, at);
    o->items = std::move(items);
    return o;
  }
  void append(const Ref& list, const std::vector<Ref>& items, std::size_t at) {
    if (list->kind != Kind::list) fail(at, "APPEND to a value that is not a list");
    if (list->frozen) fail(at, "APPEND to a list already placed in another container");
    for (const auto& it : items) {
      adopt(*list, it, at);
      list->items.push_back(it);
    }
  }
  void set_items(const Ref& dict, const std::vector<Ref>& items, std::size_t at) {
    if (dict->kind != Kind::dict) fail(at, "SETITEM on a value that is not a dict");
    if (dict->frozen) fail(at, "SETITEM on a dict already placed in another container");
    if (items.size() % 2 != 0) fail(at, "SETITEMS with an odd number of items");
    for (std::size_t i = 0; i < items.size(); i += 2) {
      const Ref& k = items[i];
      if (k->kind != Kind::string) fail(at, "dict key is not a string");
      adopt(*dict, items[i + 1], at);
      if (auto it = dict->entry_index.find(k->text); it != dict->entry_index.end()) {
        dict->entries[it->second].second = items[i + 1];
      } else {
        dict->entry_index.emplace(k->text, dict->entries.size());
        dict->entries.emplace_back(k->text, items[i + 1]);
      }
    }
  }
  void memo_put(std::uint32_t key, std::size_t at) { memo_[key] = top(at); }
  Ref memo_get(std::uint32_t key, std::size_t at) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail(at, "memo key " + std::to_string(key) + " was never stored");
    return it->second;
  }

  ByteSpan d_;
  std::size_t pos_ = 0;
  std::string source_;
  Hooks hooks_;
  std::vector<Ref> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, Ref> memo_;
};

}  // namespace accel::io::pickle
