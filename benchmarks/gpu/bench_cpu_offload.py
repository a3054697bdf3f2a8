# Accelerate's cpu_offload on a GPU, the reference row of bench_gpu_offload: a transformers LLaMA
# of the given shape (bf16, random weights made on the GPU and moved to the CPU), every module's
# weights kept in CPU memory and moved to cuda:0 when called, a greedy decode loop with the KV
# cache. Prints one JSON line: {"tokens_per_s": median, "accelerate": version, "torch": version}.
#
#   python3 benchmarks/gpu/bench_cpu_offload.py --layers 32 --embd 4096 --ff 11008 --heads 32 \
#       --kv-heads 32 --vocab 32000 --prompt 8 --decode 8 --reps 3
import argparse, json, statistics, time

import accelerate
import torch
from accelerate import cpu_offload, init_empty_weights
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
for name, default in [("layers", 32), ("embd", 4096), ("ff", 11008), ("heads", 32), ("kv-heads", 32),
                      ("vocab", 32000), ("prompt", 8), ("decode", 8), ("reps", 3)]:
    p.add_argument("--" + name, type=int, default=default)
a = p.parse_args()

config = LlamaConfig(vocab_size=a.vocab, hidden_size=a.embd, intermediate_size=a.ff, num_hidden_layers=a.layers,
                     num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=4096,
                     rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="bfloat16")
with init_empty_weights():
    model = LlamaForCausalLM(config)
# Random weights, drawn on the GPU (fast) and kept on the CPU, as a loaded model's would be.
state = {k: (torch.randn(v.shape, dtype=torch.bfloat16, device="cuda") * 0.02).cpu() for k, v in model.state_dict().items()}
model.load_state_dict(state, assign=True)
del state
model.eval()
cpu_offload(model, execution_device="cuda:0")

prompt = torch.tensor([[(i * 7919) % a.vocab for i in range(a.prompt)]], device="cuda:0")
rates = []
with torch.no_grad():
    for _ in range(a.reps):
        out = model(prompt, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(a.decode):
            out = model(tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        rates.append(a.decode / (time.perf_counter() - t))
print(json.dumps({"tokens_per_s": statistics.median(rates), "accelerate": accelerate.__version__, "torch": torch.__version__}))
