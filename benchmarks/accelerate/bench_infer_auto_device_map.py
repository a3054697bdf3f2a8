"""Accelerate's infer_auto_device_map and compute_module_sizes on the model bench_plan plans.

The model is LLaMA-3-70B-shaped (80 layers, hidden 8192, intermediate 28672, 64 heads / 8 KV
heads, vocab 128256, bf16), built on the meta device from plain torch modules whose names,
classes, order and shapes are those of accel's LlamaForCausalLM (and of transformers'): the
planner sees exactly what it sees in transformers, without transformers. The call is the one
bench_plan times: 4 GPUs x 40GB + cpu 64GB + disk 1000GB, no-split LlamaDecoderLayer, dtype bf16.

    python3 bench_infer_auto_device_map.py [--accelerate-src PATH] [--runs N] [--print-map]

prints one JSON line per function ({"function", "median_ms", "median_cpu_ms", "runs", versions}),
and with --print-map the device map Accelerate chose. PATH is an Accelerate checkout (its src/ is
put first on sys.path; default: $ACCELERATE_SRC, else an installed accelerate).

    python3 bench_infer_auto_device_map.py --serve [--accelerate-src PATH]

is how bench_plan drives it, so that both libraries are timed in alternating rounds of one run. It
answers one line per request line: "ready {json}" (or "error <why>") once at start, then
"infer K" / "sizes K" -> "times <wall ms>,<cpu ms> ..." for K timed calls (cpu: the process's CPU
time), "map" -> "map {json}", "sizes_table" -> "sizes_table [[name, bytes], ...]"; end of input
ends it.

Accelerate logs a warning per call for GPU ids that this machine does not have; that logger is
raised to ERROR so that the timings do not include writing the warnings out.
"""
import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--accelerate-src", default=os.environ.get("ACCELERATE_SRC"),
                   help="an Accelerate checkout (default: $ACCELERATE_SRC, else an installed accelerate)")
    p.add_argument("--runs", type=int, default=21, help="timed calls per function (default 21)")
    p.add_argument("--print-map", action="store_true", help="also print the device map as JSON")
    p.add_argument("--serve", action="store_true", help="answer requests on stdin (used by bench_plan)")
    return p.parse_args()


def import_libraries(src):
    """(torch, accelerate, infer_auto_device_map, compute_module_sizes), or raises ImportError."""
    if src:
        root = os.path.join(src, "src") if os.path.isdir(os.path.join(src, "src", "accelerate")) else src
        if not os.path.isdir(os.path.join(root, "accelerate")):
            raise ImportError(f"no accelerate package under {src}")
        sys.path.insert(0, root)
    import torch  # noqa: F401  (first, so that a missing torch is named as such)
    import accelerate
    from accelerate.utils import compute_module_sizes, infer_auto_device_map

    logging.getLogger("accelerate.utils.modeling").setLevel(logging.ERROR)
    return torch, accelerate, infer_auto_device_map, compute_module_sizes


def build_model(torch):
    nn = torch.nn
    meta, bf16 = torch.device("meta"), torch.bfloat16
    vocab, hidden, inter, layers, heads, kv_heads = 128256, 8192, 28672, 80, 64, 8
    head_dim = hidden // heads

    def linear(i, o):
        return nn.Linear(i, o, bias=False, device=meta, dtype=bf16)

    class LlamaRMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(hidden, device=meta, dtype=bf16))

    class LlamaRotaryEmbedding(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", torch.empty(head_dim // 2, device=meta, dtype=torch.float32),
                                 persistent=False)

    class LlamaAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = linear(hidden, heads * head_dim)
            self.k_proj = linear(hidden, kv_heads * head_dim)
            self.v_proj = linear(hidden, kv_heads * head_dim)
            self.o_proj = linear(heads * head_dim, hidden)

    class LlamaMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = linear(hidden, inter)
            self.up_proj = linear(hidden, inter)
            self.down_proj = linear(inter, hidden)
            self.act_fn = nn.SiLU()

    class LlamaDecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = LlamaAttention()
            self.mlp = LlamaMLP()
            self.input_layernorm = LlamaRMSNorm()
            self.post_attention_layernorm = LlamaRMSNorm()

    class LlamaModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, hidden, device=meta, dtype=bf16)
            self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(layers)])
            self.norm = LlamaRMSNorm()
            self.rotary_emb = LlamaRotaryEmbedding()

    class LlamaForCausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = LlamaModel()
            self.lm_head = linear(hidden, vocab)

    return LlamaForCausalLM()


class Bench:
    def __init__(self, src):
        self.torch, self.accelerate, self.infer, self.sizes = import_libraries(src)
        self.model = build_model(self.torch)
        self.max_memory = {0: "40GB", 1: "40GB", 2: "40GB", 3: "40GB", "cpu": "64GB", "disk": "1000GB"}
        for k, v in self.max_memory.items():  # once, as bench_plan converts its budgets once
            self.max_memory[k] = self.accelerate.utils.convert_file_size_to_int(v)

    def call_infer(self):
        return self.infer(self.model, max_memory=dict(self.max_memory), no_split_module_classes=["LlamaDecoderLayer"],
                          dtype=self.torch.bfloat16)

    def call_sizes(self):
        return self.sizes(self.model, dtype=self.torch.bfloat16)

    def versions(self):
        return {"accelerate": self.accelerate.__version__, "accelerate_file": self.accelerate.__file__,
                "torch": self.torch.__version__, "python": platform.python_version()}


def timed(fn, k):
    """(wall ms, process cpu ms) of each of k calls."""
    out = []
    for _ in range(k):
        c, t = time.process_time_ns(), time.perf_counter_ns()
        fn()
        t, c = time.perf_counter_ns() - t, time.process_time_ns() - c
        out.append((t / 1e6, c / 1e6))
    return out


def serve(args):
    def say(line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        b = Bench(args.accelerate_src)
        b.call_infer(), b.call_sizes()  # first calls outside the timings
    except Exception as e:  # the reason goes to bench_plan, which prints it
        say(f"error {type(e).__name__}: {e}".replace("\n", " "))
        return 1
    say("ready " + json.dumps(b.versions()))
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] in ("infer", "sizes") and len(words) == 2:
            fn = b.call_infer if words[0] == "infer" else b.call_sizes
            say("times " + " ".join(f"{w:.6f},{c:.6f}" for w, c in timed(fn, int(words[1]))))
        elif words[0] == "map":
            say("map " + json.dumps(b.call_infer()))
        elif words[0] == "sizes_table":
            say("sizes_table " + json.dumps(list(b.call_sizes().items())))
        else:
            say(f"error unknown request {line.strip()!r}")
    return 0


def main():
    args = parse_args()
    if args.serve:
        return serve(args)
    try:
        b = Bench(args.accelerate_src)
    except ImportError as e:
        print(f"cannot import Accelerate or torch: {e}", file=sys.stderr)
        return 2
    b.call_infer(), b.call_sizes()
    info = b.versions()
    for name, fn in (("infer_auto_device_map", b.call_infer), ("compute_module_sizes", b.call_sizes)):
        t = timed(fn, args.runs)
        wall, cpu = [w for w, _ in t], [c for _, c in t]
        print(json.dumps({"function": name, "median_ms": round(statistics.median(wall), 4),
                          "median_cpu_ms": round(statistics.median(cpu), 4), "min_ms": round(min(wall), 4),
                          "runs": args.runs, **info}))
    if args.print_map:
        print(json.dumps(b.call_infer()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
