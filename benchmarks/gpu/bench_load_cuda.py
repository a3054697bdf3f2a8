# Loading a safetensors checkpoint straight to cuda:0: Accelerate's load_checkpoint_in_model vs
# accel's (through the main example), next to safetensors' own load_file and the pinned H2D
# bandwidth of the same bytes (the hardware's limit). Medians of 5, interleaved.
#
#   python3 benchmarks/gpu/bench_load_cuda.py [path/to/big_model_inference]
#
# Needs a GPU, PyTorch, transformers, safetensors and Accelerate; the checkpoint (a 1.1B LLaMA,
# TinyLlama's shape, random bf16 weights, 2.05 GiB) is written to /tmp/ck first, and read once
# so that both loaders start from a warm page cache.
import json, os, re, statistics, subprocess, sys, time
import torch
from accelerate import init_empty_weights, load_checkpoint_in_model
from safetensors.torch import save_file, load_file
from transformers import LlamaConfig, LlamaForCausalLM

d = "/tmp/ck"; os.makedirs(d, exist_ok=True)
cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=32000, hidden_size=2048,
           intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
           tie_word_embeddings=False, torch_dtype="bfloat16", max_position_embeddings=2048, rms_norm_eps=1e-5)
json.dump(cfg, open(f"{d}/config.json", "w"))
config = LlamaConfig(**cfg)
with init_empty_weights():
    skel = LlamaForCausalLM(config)
sd = {k: torch.randn(v.shape, dtype=torch.bfloat16, device="cuda").cpu() for k, v in skel.state_dict().items()}
nbytes = sum(t.numel() * t.element_size() for t in sd.values())
save_file(sd, f"{d}/model.safetensors", metadata={"format": "pt"})
del sd
subprocess.run(["cat", f"{d}/model.safetensors"], stdout=subprocess.DEVNULL)  # page cache warm
print(f"checkpoint: {nbytes/2**30:.2f} GiB bf16, {len(skel.state_dict())} tensors", flush=True)

def acc():
    with init_empty_weights():
        m = LlamaForCausalLM(config)
    torch.cuda.synchronize(); t = time.perf_counter()
    load_checkpoint_in_model(m, f"{d}/model.safetensors", device_map={"": 0}, dtype=torch.bfloat16)
    torch.cuda.synchronize(); dt = time.perf_counter() - t
    del m; torch.cuda.empty_cache(); return dt

def st():
    torch.cuda.synchronize(); t = time.perf_counter()
    x = load_file(f"{d}/model.safetensors", device="cuda:0")
    torch.cuda.synchronize(); dt = time.perf_counter() - t
    del x; torch.cuda.empty_cache(); return dt

exe = sys.argv[1] if len(sys.argv) > 1 else "build/examples/big_model_inference"
def ours():
    out = subprocess.run([exe, "--config", f"{d}/config.json", "--checkpoint", d, "--max-memory", "0=70GB,cpu=16GB",
                          "--dtype", "bfloat16"], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout, out.stderr); sys.exit(1)
    m = re.search(r"loaded \d+ files? in ([0-9.]+) ms", out.stdout)
    return float(m.group(1)) / 1e3, out.stdout

a, s, o = [], [], []
log = ""
for i in range(5):
    a.append(acc()); s.append(st()); dt, log = ours(); o.append(dt)
print(log)
pin = torch.empty(nbytes // 2, dtype=torch.bfloat16).pin_memory(); dev = torch.empty_like(pin, device="cuda")
h2d = []
for i in range(5):
    torch.cuda.synchronize(); t = time.perf_counter(); dev.copy_(pin, non_blocking=True); torch.cuda.synchronize(); h2d.append(time.perf_counter() - t)
gb = nbytes / 1e9
med = statistics.median
print(f"pinned H2D copy of the same bytes (torch): {med(h2d)*1e3:.1f} ms = {gb/med(h2d):.1f} GB/s")
print(f"safetensors load_file(device='cuda:0'):      {med(s)*1e3:.1f} ms = {gb/med(s):.1f} GB/s")
print(f"Accelerate load_checkpoint_in_model -> cuda:0: {med(a)*1e3:.1f} ms = {gb/med(a):.1f} GB/s")
print(f"accel load_checkpoint_in_model -> cuda:0:      {med(o)*1e3:.1f} ms = {gb/med(o):.1f} GB/s  ({med(a)/med(o):.2f}x Accelerate)")
print("medians of 5; runs:", [round(x*1e3) for x in a], [round(x*1e3) for x in s], [round(x*1e3) for x in o])
