// Offload policies: no_offload, sync_offload, prefetch<N>.
//
// no_offload: weights stay where the device map put them. sync_offload: Accelerate's
// behaviour, weights copied in before a block's forward and dropped after. prefetch<N>: the
// next N blocks' weights travel (pinned staging ring + copy stream on CUDA, read-ahead thread
// for disk) while the current block computes. The default of a policy bundle is no_offload.
#pragma once

#include <cstddef>
#include <type_traits>

namespace accel::policy {

struct offload_tag {};

struct no_offload : offload_tag {
  static constexpr std::size_t prefetch_depth = 0;
  static constexpr bool offloads = false;
};

struct sync_offload : offload_tag {
  static constexpr std::size_t prefetch_depth = 0;
  static constexpr bool offloads = true;
};

template <std::size_t N>
struct prefetch : offload_tag {
  static_assert(N >= 1, "accel::policy::prefetch<N>: N is the number of blocks in flight and must be >= 1; "
                        "use sync_offload for no prefetching");
  static constexpr std::size_t prefetch_depth = N;
  static constexpr bool offloads = true;
};

template <class T>
inline constexpr bool is_offload_v = std::is_base_of_v<offload_tag, T>;

/// An offload tag: no_offload, sync_offload or prefetch<N>.
template <class T>
concept Offload = is_offload_v<T>;

}  // namespace accel::policy
