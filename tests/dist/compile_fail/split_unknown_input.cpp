// split_between_processes takes sequences, tensors and maps of them; anything else fails to compile.
// expect: split_between_processes: inputs must be a vector / deque / list, a Tensor, or a map of those
#include "accel/dist/partial_state.hpp"

int main() {
  const accel::dist::PartialState<> state;
  return state.split_between_processes(3);
}
