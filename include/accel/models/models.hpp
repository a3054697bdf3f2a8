// The models layer: GPT-2 and LLaMA-family modules with their forwards, configs, rotary
// frequencies, the KV cache and the CausalLM interface generation runs on.
#pragma once

#include "accel/models/causal_lm.hpp"
#include "accel/models/generate.hpp"
#include "accel/models/gpt2.hpp"
#include "accel/models/hf_config.hpp"
#include "accel/models/hf_models.hpp"
#include "accel/models/kv_cache.hpp"
#include "accel/models/llama.hpp"
#include "accel/models/rope.hpp"
