// Offload policies: no_offload, sync_offload, prefetch<N>, and offload_kind, the trait a policy
// bundle finds them by.
//
// no_offload: weights stay where the device map put them. sync_offload: Accelerate's
// behaviour, weights copied in before a block's forward and dropped after. prefetch<N>: the
// next N blocks' weights travel (pinned staging ring + copy stream on CUDA, read-ahead thread
// for disk) while the current block computes. The default of a policy bundle is no_offload.
// with_offload_depth(n, f) turns a run-time depth into the tag, in one place.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "accel/core/errors.hpp"

#include "accel/policy/kind.hpp"

namespace accel::policy {

/// Base of every offload tag; `is_offload_v` detects it, so a tag needs no registration.
struct offload_tag {};

/// The members every offload tag carries, written once; the tag's type is its identity (no
/// run-time enum stands beside it: code that differs per tag is chosen by overload or
/// `if constexpr` on these).
template <bool Offloads, std::size_t Depth>
struct basic_offload : offload_tag {
  /// Whether hooks move weights at all.
  static constexpr bool offloads = Offloads;
  /// Blocks whose weights are in flight ahead of the computing one (0: none), which is what
  /// the planner reserves staging memory for and the read-ahead ring holds buffers for.
  static constexpr std::size_t prefetch_depth = Depth;
};

/// Weights stay where the device map put them.
struct no_offload : basic_offload<false, 0> {};

/// Accelerate's behaviour: weights copied in before a block's forward and dropped after.
struct sync_offload : basic_offload<true, 0> {};

/// The next N blocks' weights travel while the current block computes.
template <std::size_t N>
struct prefetch : basic_offload<true, N> {
  static_assert(N >= 1, "accel::policy::prefetch<N>: N is the number of blocks in flight and must be >= 1; "
                        "use sync_offload for no prefetching");
};

/// True for offload tags.
template <class T>
inline constexpr bool is_offload_v = std::is_base_of_v<offload_tag, T>;

/// An offload tag: no_offload, sync_offload or prefetch<N>.
template <class T>
concept Offload = is_offload_v<T>;

/// True for prefetch<N>: weights read ahead, block by block.
template <Offload T>
inline constexpr bool prefetches_v = T::prefetch_depth > 0;

/// The tag as code spells it ("sync_offload", "prefetch<2>"), for messages.
template <Offload T>
std::string offload_name() {
  if constexpr (prefetches_v<T>) return "prefetch<" + std::to_string(T::prefetch_depth) + ">";
  else return T::offloads ? "sync_offload" : "no_offload";
}

/// The deepest read-ahead with_offload_depth has an instantiation for.
inline constexpr std::size_t max_compiled_prefetch_depth = 4;

/// ValueError when no compiled offload tag has read-ahead `depth` (checked before work that a
/// later with_offload_depth would waste).
inline void check_offload_depth(std::size_t depth) {
  if (depth > max_compiled_prefetch_depth) {
    throw ValueError("offload: prefetch:" + std::to_string(depth) + " is out of range (sync, or prefetch:1 to prefetch:" +
                     std::to_string(max_compiled_prefetch_depth) + ")");
  }
}

/// Calls f(tag) with the offload tag a run-time depth names: sync_offload for 0, prefetch<N> for
/// N in 1..max_compiled_prefetch_depth; the one place a run-time choice (a CLI flag, a config
/// file) becomes a compile-time policy. ValueError past the compiled depths.
template <class F>
decltype(auto) with_offload_depth(std::size_t depth, F&& f) {
  static_assert(max_compiled_prefetch_depth == 4, "with_offload_depth: one case per compiled depth");
  check_offload_depth(depth);
  switch (depth) {
    case 0: return f(sync_offload{});
    case 1: return f(prefetch<1>{});
    case 2: return f(prefetch<2>{});
    case 3: return f(prefetch<3>{});
    default: return f(prefetch<4>{});  // 4, the deepest (check_offload_depth refused the rest)
  }
}

/// The offload kind of a policy bundle (see kind.hpp for what each member is for).
struct offload_kind {
  /// The kind's name, that of the bundle member it fills.
  static constexpr std::string_view name = "offload";
  /// Recognises offload tags among a bundle's tags.
  template <class T>
  using matches = std::bool_constant<is_offload_v<T>>;
  /// A bundle that names no offload policy leaves weights where the device map put them.
  using default_tag = no_offload;
  /// Gives a bundle `P::offload`.
  template <class Tag>
  struct member {
    /// The bundle's offload tag.
    using offload = Tag;
  };
  /// Compiles only when Ok; otherwise the error lists the offload tags.
  template <bool Ok>
  static constexpr void valid_choices() {
    static_assert(Ok, "accel::policies<...>: at most one offload tag per bundle; valid choices: no_offload, "
                      "sync_offload, prefetch<N>");
  }
};

static_assert(PolicyKind<offload_kind>);

}  // namespace accel::policy
