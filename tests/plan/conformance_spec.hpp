// The models of Accelerate's own tests, as the conformance set describes them (shared/conformance).
#pragma once

#include <memory>
#include <string>

#include "accel/nn/spec.hpp"

namespace accel_test {

/// The meta module tree of `shared/conformance/accelerate/specs/<name>.json`.
inline std::shared_ptr<accel::nn::Module> spec(const char* name) {
  return accel::nn::module_from_spec_file(std::string(ACCEL_SHARED_DIR) + "/conformance/accelerate/specs/" + name +
                                          ".json");
}

}  // namespace accel_test
