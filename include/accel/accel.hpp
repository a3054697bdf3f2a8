// The umbrella header: every public facility of accel, layer by layer (docs/design.md). Each layer's
// headers can also be included on their own; this one is for programs that want everything.
#pragma once

#include "accel/core/byte_size.hpp"
#include "accel/core/convert.hpp"
#include "accel/core/device.hpp"
#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/mapped_file.hpp"
#include "accel/core/memory_stats.hpp"
#include "accel/core/tensor.hpp"
#include "accel/policy/policies.hpp"

#include "accel/ops/ops.hpp"

#include "accel/nested/nested.hpp"
#include "accel/utils/utils.hpp"

#include "accel/nn/containers.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/layers.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/set_tensor.hpp"
#include "accel/nn/spec.hpp"
#include "accel/nn/tied.hpp"

#include "accel/models/models.hpp"

#include "accel/tokenize/tokenize.hpp"

#include "accel/io/checkpoint_files.hpp"
#include "accel/io/checkpoint_format.hpp"
#include "accel/io/confined_path.hpp"
#include "accel/io/file_names.hpp"
#include "accel/io/ggml_dequantize.hpp"
#include "accel/io/gguf.hpp"
#include "accel/io/gguf_model.hpp"
#include "accel/io/gguf_tokenizer.hpp"
#include "accel/io/gguf_write.hpp"
#include "accel/io/inspect.hpp"
#include "accel/io/load_state_dict.hpp"
#include "accel/io/offload.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/io/save.hpp"
#include "accel/io/safetensors_write.hpp"
#include "accel/io/sharded_index.hpp"
#include "accel/io/sharding.hpp"
#include "accel/io/torch_bin.hpp"
#include "accel/io/torch_bin_write.hpp"

#include "accel/plan/balanced_memory.hpp"
#include "accel/plan/device_map.hpp"
#include "accel/plan/infer_auto_device_map.hpp"
#include "accel/plan/max_memory.hpp"
#include "accel/plan/module_sizes.hpp"
#include "accel/plan/runtime_reserve.hpp"
#include "accel/plan/shard_checkpoint.hpp"

#include "accel/hooks/hooks.hpp"

#include "accel/dispatch/big_modeling.hpp"
#include "accel/dispatch/dispatch_model.hpp"
#include "accel/dispatch/load_checkpoint.hpp"
#include "accel/dispatch/load_pretrained.hpp"
#include "accel/dispatch/quantizer.hpp"
#include "accel/quant/quant.hpp"
#include "accel/dist/dist.hpp"

#include "accel/engine/from_pretrained.hpp"

#if defined(ACCEL_WITH_CUDA)
#include "accel/backend/cuda/runtime.hpp"
#endif
