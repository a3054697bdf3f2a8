# `accel run` on a 7B-shaped LLaMA (bf16, random weights, 13.5 GB) with about half of it on
# cuda:0 and the rest in CPU memory, next to Accelerate's load_checkpoint_and_dispatch and a
# greedy decode loop on the same files, the same budget and the same machine. Prints both
# runs' load time, tokens/s and placement, then the ratio.
#
#   python3 benchmarks/gpu/bench_run_offload.py [--accel build/tools/accel] [--dir /tmp/llama7b]
#       [--gpu-budget 7GiB] [--prompt 8] [--decode 16] [--layers 32] [--skip-accelerate]
#
# The checkpoint is written once (sharded safetensors with their index, HF layout) and read once
# so that both loaders start from a warm page cache. Needs a GPU, PyTorch, transformers,
# safetensors and Accelerate; the accel side is the CLI (--check: its tokens against the whole
# model on cuda:0).
import argparse, json, os, subprocess, sys, time

import torch
from safetensors.torch import save_file

p = argparse.ArgumentParser()
p.add_argument("--accel", default="build/tools/accel")
p.add_argument("--dir", default="/tmp/llama7b")
p.add_argument("--gpu-budget", default="7GiB")
p.add_argument("--cpu-budget", default="100GiB")
p.add_argument("--prompt", type=int, default=8)
p.add_argument("--decode", type=int, default=16)
p.add_argument("--layers", type=int, default=32)
p.add_argument("--skip-accelerate", action="store_true")
a = p.parse_args()

cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=32000, hidden_size=4096,
           intermediate_size=11008, num_hidden_layers=a.layers, num_attention_heads=32, num_key_value_heads=32,
           tie_word_embeddings=False, torch_dtype="bfloat16", max_position_embeddings=4096, rms_norm_eps=1e-6,
           bos_token_id=1, eos_token_id=2, hidden_act="silu", rope_theta=10000.0)
ids = [(i * 7919) % cfg["vocab_size"] for i in range(a.prompt)]


def shapes():
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    yield "model.embed_tokens.weight", (v, h)
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            yield b + f"self_attn.{n}.weight", (h, h)
        yield b + "mlp.gate_proj.weight", (f, h)
        yield b + "mlp.up_proj.weight", (f, h)
        yield b + "mlp.down_proj.weight", (h, f)
        yield b + "input_layernorm.weight", (h,)
        yield b + "post_attention_layernorm.weight", (h,)
    yield "model.norm.weight", (h,)
    yield "lm_head.weight", (v, h)


def write_checkpoint(d, shard_bytes=2 << 30):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        return
    os.makedirs(d, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    shards, cur, size = [], {}, 0
    for name, shape in shapes():
        if len(shape) == 1:
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
        if cur and size + t.numel() * 2 > shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = t
        size += t.numel() * 2
    shards.append(cur)
    weight_map, total = {}, 0
    for i, sd in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sd, os.path.join(d, fname), metadata={"format": "pt"})
        for k, t in sd.items():
            weight_map[k] = fname
            total += t.numel() * 2
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, open(index + ".tmp", "w"), indent=2)
    os.replace(index + ".tmp", index)


t0 = time.perf_counter()
write_checkpoint(a.dir)
files = sorted(f for f in os.listdir(a.dir) if f.endswith(".safetensors"))
total = sum(os.path.getsize(os.path.join(a.dir, f)) for f in files)
for f in files:  # page cache warm for both loaders
    subprocess.run(["cat", os.path.join(a.dir, f)], stdout=subprocess.DEVNULL, check=True)
print(f"checkpoint: {a.dir}, {total / 1e9:.2f} GB bf16 in {len(files)} shards, ready in {time.perf_counter() - t0:.1f} s",
      flush=True)

# accel: the CLI, as a user runs it.
cmd = [a.accel, "run", a.dir, "--ids", ",".join(map(str, ids)), "--max-new-tokens", str(a.decode),
       "--max-memory", f"0={a.gpu_budget},cpu={a.cpu_budget}", "--check", "--json"]
print("$ " + " ".join(cmd), flush=True)
out = subprocess.run(cmd, capture_output=True, text=True)
if out.returncode != 0:
    print(out.stdout[-4000:], out.stderr[-4000:])
    sys.exit(1)
ours = json.loads(out.stdout)
print("accel placed bytes:", {k: f"{v / 1e9:.2f} GB" for k, v in ours.get("placed_bytes", {}).items()})
print(f"accel: load {ours['load_s']:.2f} s, first token {ours['ttft_s']:.3f} s, {ours['tokens_per_s']:.2f} tokens/s, "
      f"offload {ours.get('offload_gb_per_s') or 0:.1f} GB/s, peak {ours.get('peak_bytes')}", flush=True)
chk = ours.get("check", {})
print(f"accel token check vs the whole model on {chk.get('unrestricted_device')}: "
      f"{'identical' if chk.get('identical') else 'DIFFERENT at ' + str(chk.get('first_difference'))} "
      f"({chk.get('unrestricted_tokens_per_s', 0):.1f} tokens/s with every weight on the GPU)", flush=True)
if a.skip_accelerate:
    sys.exit(0)

# Accelerate: the same files, the same budget, its planner and hooks, a greedy loop with the KV cache.
import accelerate
from accelerate import init_empty_weights, infer_auto_device_map, load_checkpoint_and_dispatch
from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype", "rope_theta")})
torch.cuda.synchronize()
t = time.perf_counter()
with init_empty_weights():
    model = LlamaForCausalLM(config)
model = model.to(torch.bfloat16)
dm = infer_auto_device_map(model, max_memory={0: a.gpu_budget, "cpu": a.cpu_budget},
                           no_split_module_classes=["LlamaDecoderLayer"], dtype=torch.bfloat16)
model = load_checkpoint_and_dispatch(model, a.dir, device_map=dm, no_split_module_classes=["LlamaDecoderLayer"],
                                     dtype=torch.bfloat16)
model.eval()
torch.cuda.synchronize()
load_s = time.perf_counter() - t
placed = {}
for name, prm in model.named_parameters():
    where = next((v for k, v in dm.items() if name == k or name.startswith(k + ".") or k == ""), "?")
    placed[str(where)] = placed.get(str(where), 0) + prm.numel() * 2
print("Accelerate placed bytes:", {k: f"{v / 1e9:.2f} GB" for k, v in placed.items()}, flush=True)
with torch.no_grad():
    prompt = torch.tensor([ids], device="cuda:0")
    t = time.perf_counter()
    o = model(prompt, use_cache=True)
    past, tok = o.past_key_values, o.logits[:, -1:].argmax(-1)
    torch.cuda.synchronize()
    ttft = time.perf_counter() - t
    theirs = [int(tok)]
    t = time.perf_counter()
    for _ in range(a.decode - 1):
        o = model(tok, past_key_values=past, use_cache=True)
        past, tok = o.past_key_values, o.logits[:, -1:].argmax(-1)
        theirs.append(int(tok))
    torch.cuda.synchronize()
    tps = (a.decode - 1) / (time.perf_counter() - t)
print(f"Accelerate {accelerate.__version__} (torch {torch.__version__}): load {load_s:.2f} s, first token {ttft:.3f} s, "
      f"{tps:.2f} tokens/s", flush=True)
mine = ours["generated_ids"]
same = next((i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y), None)
print(f"tokens: accel {mine}\n        Accelerate {theirs}\n        "
      f"{'identical' if same is None else 'first difference at ' + str(same)}")
print(f"accel / Accelerate: decode {ours['tokens_per_s'] / tps:.2f}x, load {load_s / ours['load_s']:.2f}x faster")
