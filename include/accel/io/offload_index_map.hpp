// An offload index with a name -> place map beside it.
//
//   OffloadIndexMap ix;                          ix.set("layer.weight", {{"dtype", "float32"}, {"shape", {4}}});
//   OffloadIndexMap merged(read_offload_index(folder));   merged.find("layer.weight");
//   OffloadIndex plain = std::move(ix).release();
//
// OffloadIndex is nlohmann::ordered_json, whose objects are vectors: its operator[] and find
// compare the name with every key, so filling the index of a model one weight at a time is
// quadratic (90,951 entries, the size of a large mixture-of-experts model's index: 16 s in
// bench_index_build, 0.36 s through this map). This map keeps each name's place, so an insert or
// a lookup costs O(log n) and the order stays the Python dict's.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "accel/core/errors.hpp"

namespace accel::io {

/// The offload index: name -> entry, insertion-ordered like the Python dict it mirrors.
using OffloadIndex = nlohmann::ordered_json;

/// An OffloadIndex that answers lookups and inserts by name in O(log n).
class OffloadIndexMap {
 public:
  OffloadIndexMap() : index_(OffloadIndex::object()) {}

  /// Takes `index` over: a JSON object, or null for an empty index (ValueError for anything
  /// else). A name it repeats, which only an index built by hand can hold, is found and updated
  /// at its first place; the later copy stays in index() as it was.
  explicit OffloadIndexMap(OffloadIndex index) : index_(std::move(index)) {
    if (index_.is_null()) index_ = OffloadIndex::object();
    if (!index_.is_object()) throw ValueError("an offload index must be a JSON object, not " + std::string(index_.type_name()));
    const auto& entries = objects();
    for (std::size_t i = 0; i < entries.size(); ++i) place_.emplace(entries.begin()[i].first, i);
  }

  /// The entry of `name`, or nullptr; valid until the next set().
  const nlohmann::ordered_json* find(std::string_view name) const {
    const auto at = place_.find(name);
    return at == place_.end() ? nullptr : &objects().begin()[at->second].second;
  }
  bool contains(std::string_view name) const { return place_.find(name) != place_.end(); }

  /// Sets the entry of `name`: a name already present keeps its place, a new one goes last.
  void set(const std::string& name, nlohmann::ordered_json entry) {
    auto& entries = objects();
    if (const auto at = place_.find(name); at != place_.end()) {
      entries.begin()[at->second].second = std::move(entry);
      return;
    }
    // The vector first: if either insert throws, neither keeps the name.
    entries.emplace_back(name, std::move(entry));
    try {
      place_.emplace(name, entries.size() - 1);
    } catch (...) {
      entries.pop_back();
      throw;
    }
  }

  std::size_t size() const noexcept { return place_.size(); }
  bool empty() const noexcept { return place_.empty(); }
  const OffloadIndex& index() const noexcept { return index_; }
  /// The index, moved out; the map is left empty.
  OffloadIndex release() && {
    OffloadIndex out = std::move(index_);
    index_ = OffloadIndex::object();
    place_.clear();
    return out;
  }

 private:
  OffloadIndex::object_t& objects() { return index_.get_ref<OffloadIndex::object_t&>(); }
  const OffloadIndex::object_t& objects() const { return index_.get_ref<const OffloadIndex::object_t&>(); }

  OffloadIndex index_;
  std::map<std::string, std::size_t, std::less<>> place_;
};

}  // namespace accel::io
