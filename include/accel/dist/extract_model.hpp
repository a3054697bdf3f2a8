// extract_model_from_parallel(model): the model inside its distributed wrappers (Accelerate's
// extract_model_from_parallel, which unwraps DistributedDataParallel, DataParallel, FSDP and
// DeepSpeed engines by following `.module`).
//
//   auto& inner = dist::extract_model_from_parallel(wrapped);   wrapped.module().module()... until no wrapper
//
// A wrapper says so with `static constexpr bool is_parallel_wrapper = true` and gives its model
// with `module()` (a user's wrapper may, as the dist layer's data-parallel wrapper will). Anything
// else is returned as it is: a plain model is its own extraction.
//
// Differences from Accelerate: keep_fp32_wrapper has no counterpart (a model's precision is its
// policy bundle, not a wrapper around its forward), nor does recursive (wrappers do not nest
// inside the module tree); a torch.compile wrapper does not exist in C++.
#pragma once

#include <type_traits>

namespace accel::dist {

/// A distributed wrapper: marks itself and hands out the model it wraps.
template <class T>
concept ParallelWrapper = T::is_parallel_wrapper && requires(T& w) { w.module(); };

/// The model inside every ParallelWrapper around `model`; `model` itself when it is none.
template <class M>
decltype(auto) extract_model_from_parallel(M& model) {
  if constexpr (ParallelWrapper<std::remove_cv_t<M>>) {
    return extract_model_from_parallel(model.module());
  } else {
    return (model);
  }
}

}  // namespace accel::dist
