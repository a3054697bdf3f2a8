// Random generators across the processes of a run: utils/random.hpp's seeding and synchronization
// completed with a dist::PartialState.
//
//   set_seed(state, seed, device_specific = false, deterministic = false)
//   synchronize_rng_state(state, rng_type, generator = nullptr)      the main process's state everywhere
//   synchronize_rng_states(state, {rng_types...}, generator = nullptr)
//
// Synchronizing broadcasts the main process's get_state() (16 bytes: seed, offset) with
// broadcast_object_list and set_state()s it on the others: every process then draws the same
// values, as Accelerate does before shuffling a dataset. RNGType::cuda synchronizes the generator
// of the process's own GPU (state.device()) with the main process's; without a GPU it does nothing.
// set_seed's device_specific adds state.process_index(), the rank the process group agreed on,
// instead of reading the environment.
//
// This is a header of its own so that utils/random.hpp does not bring MPI's headers to programs
// that do not distribute. Differences from Accelerate: as in utils/random.hpp (Philox states, the
// type is required, types with no C++ backend are a ValueError).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/dist/collectives.hpp"
#include "accel/dist/partial_state.hpp"
#include "accel/utils/enums.hpp"
#include "accel/utils/random.hpp"

namespace accel::utils {

/// Seeds every generator of the library; device_specific adds the process's index in `state`.
template <class D>
void set_seed(const dist::PartialState<D>& state, std::uint64_t seed, bool device_specific = false,
              bool deterministic = false) {
  set_seed(seed + (device_specific ? static_cast<std::uint64_t>(state.process_index()) : 0), false, deterministic);
}

/// Makes every process's generator of `rng_type` equal to the main process's (a broadcast of its
/// state). `generator` is required for RNGType::generator; types with no C++ meaning are a
/// ValueError, on every process before anything is sent.
template <class D>
void synchronize_rng_state(const dist::PartialState<D>& state, RNGType rng_type, Generator* generator = nullptr) {
  synchronize_rng_state(rng_type, generator);  // checks the arguments
  Generator* gen = nullptr;
  switch (rng_type) {
    case RNGType::torch: gen = &default_generator(); break;
    case RNGType::generator: gen = generator; break;
    case RNGType::cuda:
#if defined(ACCEL_WITH_CUDA)
      if (state.device().is_cuda()) gen = &cuda_generator(state.device().index());
#endif
      break;
    default: break;
  }
  // Every process takes part, with or without a generator, so that the broadcasts meet.
  std::vector<std::vector<std::uint8_t>> bytes{gen ? gen->get_state() : std::vector<std::uint8_t>{}};
  dist::broadcast_object_list(state, bytes, 0);
  if (gen && !bytes.front().empty()) gen->set_state(bytes.front());
}

/// synchronize_rng_state for each type, in order.
template <class D>
void synchronize_rng_states(const dist::PartialState<D>& state, std::initializer_list<RNGType> types,
                            Generator* generator = nullptr) {
  for (const RNGType t : types) synchronize_rng_state(state, t, generator);
}

/// The same with the types by name ("torch", "cuda", "generator"); ValueError for another name.
template <class D>
void synchronize_rng_states(const dist::PartialState<D>& state, const std::vector<std::string>& types,
                            Generator* generator = nullptr) {
  for (const std::string& t : types) synchronize_rng_state(state, enum_from_string<RNGType>(t), generator);
}

}  // namespace accel::utils

namespace accel {
using utils::set_seed, utils::synchronize_rng_state, utils::synchronize_rng_states;
}  // namespace accel
