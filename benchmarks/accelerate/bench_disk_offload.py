"""Decode tokens/s of a LLaMA-architecture model under Accelerate's disk_offload, next to the same model in memory.

The model is plain torch (no transformers): embedding, N decoder layers (RMSNorm, q/k/v/o projections with
rotary embedding and grouped-query attention, RMSNorm, SwiGLU MLP gate/up/down), final RMSNorm, lm_head, with
transformers' module names (model.embed_tokens, model.layers.N.self_attn.q_proj, ..., model.norm, lm_head) and a
key/value cache, so each decode step is a forward of one token. Every projection, norm and the embedding is its
own leaf module, so disk_offload hooks each of them as it hooks a transformers model.

Two modes, on CPU, with torch.set_num_threads(--threads):
  in memory     the plain model (measured first);
  disk_offload  accelerate.disk_offload(model, DIR, execution_device="cpu", offload_buffers=False): the weights
                are written to DIR as index.json + one .dat file per tensor, and before each leaf module's
                forward its weights are read back from the .dat file (numpy memmap, copied into a tensor), then
                dropped again after it.
Each run: a prefill of --prompt-tokens tokens (ids (i * 7919) % vocab, as bench_decode uses) gives the first
token, then --new-tokens greedy decode steps, one token each. The decode rate is new-tokens / (time of those
steps); the figure printed is the median over --repeats runs, after --warmup untimed runs. With --drop-cache,
every .dat file is fsync'ed and its page cache dropped (posix_fadvise DONTNEED) before EVERY forward pass, the
prefill and each decode step, outside the timed region: each token then reads all the weights from storage, as
with a model larger than the page cache. The bytes the process read from storage during the decode steps
(/proc/self/io read_bytes) are printed per token, which shows whether reads were cold. The tokens generated
in both modes are compared (same weights, so they must match).

Model: --random builds seeded random weights (N(0, 0.02); norms 1) of the shape of
shared/anchors/make_bench_model.py (hidden 2048, 8 layers, 32 heads / 4 KV heads, intermediate 5632, vocab
32000, untied lm_head: 483M parameters; rms eps 1e-5, rope theta 10000), each size overridable with the flags of
bench_decode (--embd/--hidden, --layers, --ff/--intermediate, --heads, --kv-heads, --vocab). --model DIR reads a
Hugging Face LLaMA folder instead (config.json + model.safetensors, or model.safetensors.index.json + shards),
with the safetensors package when it is installed and a reader of the file format here otherwise.

    python3 bench_disk_offload.py --random [--accelerate-src PATH] [--dtype float32|bfloat16] [--threads 2]
        [--prompt-tokens 16] [--new-tokens 32] [--repeats 3] [--warmup 1] [--drop-cache] [--seed 0]
        [--offload-dir DIR] [--keep-offload] [--stand-in-missing-deps]
    python3 bench_disk_offload.py --model DIR ...

PATH is an Accelerate checkout (its src/ is put first on sys.path; default: $ACCELERATE_SRC, else an installed
accelerate), as for bench_infer_auto_device_map.py. --offload-dir must be absent or empty (disk_offload reuses an
existing index.json); by default a temporary folder is made and removed at the end. Lines for a person come
first; the last line is one JSON object: accelerate_version, torch_version, dtype, threads,
in_memory_tokens_per_s, disk_offload_tokens_per_s, offload_bytes, cold, and more (prefill rates, every run's
rate, the bytes read per decode token, the offload folder's file system, whether tokens matched).

Accelerate from 0.23 on imports huggingface_hub, and from 0.25 on safetensors, at import time; Debian ships
neither. disk_offload calls neither (it writes and reads .dat files with numpy), so --stand-in-missing-deps puts
placeholder modules under those names when the real ones are missing: importing works, and any call into them
raises. The JSON's stand_in_modules lists the ones used.

Timings need the cores to themselves: with --threads 2 on a 2-core machine that also runs other work, torch's
thread pool waits on descheduled threads and a step can take tens of milliseconds whatever the model.

Tested on Debian 12 with /usr/bin/python3 (3.11.2), torch 1.13.1 (Debian python3-torch 1.13.1+dfsg-4, which
reports 1.13.0a0) and numpy 1.24.2, with Accelerate v0.22.0 (needs no stand-ins) and v0.34.2 and v1.2.1 (with
--stand-in-missing-deps), each the tag's src/ from github.com/huggingface/accelerate:

    ACCELERATE_SRC=/path/to/accelerate-v0.22.0 /usr/bin/python3 benchmarks/accelerate/bench_disk_offload.py --random
    ACCELERATE_SRC=/path/to/accelerate-v1.2.1 /usr/bin/python3 benchmarks/accelerate/bench_disk_offload.py --random \
        --stand-in-missing-deps --drop-cache

and checked against tests/data/models/tiny_llama (logits of reference.json equal, greedy tokens with the cache
equal).
"""
import argparse
import importlib.abc
import importlib.machinery
import json
import os
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import time

# Shape of shared/anchors/make_bench_model.py's model (and bench_decode's default).
DEFAULT_SHAPE = {"hidden": 2048, "layers": 8, "intermediate": 5632, "heads": 32, "kv_heads": 4, "vocab": 32000}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--accelerate-src", default=os.environ.get("ACCELERATE_SRC"),
                   help="an Accelerate checkout (default: $ACCELERATE_SRC, else an installed accelerate)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="DIR", help="a Hugging Face LLaMA folder (config.json + safetensors)")
    src.add_argument("--random", action="store_true", help="seeded random weights of the shape below")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--embd", "--hidden", dest="hidden", type=int, default=DEFAULT_SHAPE["hidden"])
    p.add_argument("--layers", type=int, default=DEFAULT_SHAPE["layers"])
    p.add_argument("--ff", "--intermediate", dest="intermediate", type=int, default=DEFAULT_SHAPE["intermediate"])
    p.add_argument("--heads", type=int, default=DEFAULT_SHAPE["heads"])
    p.add_argument("--kv-heads", type=int, default=DEFAULT_SHAPE["kv_heads"])
    p.add_argument("--vocab", type=int, default=DEFAULT_SHAPE["vocab"])
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="weights and activations (default float32)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    p.add_argument("--prompt-tokens", "--prompt", dest="prompt_tokens", type=int, default=16)
    p.add_argument("--new-tokens", "--decode", dest="new_tokens", type=int, default=32,
                   help="decode steps timed per run (default 32)")
    p.add_argument("--repeats", "--reps", dest="repeats", type=int, default=3, help="timed runs per mode (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per mode first (default 1)")
    p.add_argument("--drop-cache", action="store_true",
                   help="drop the .dat files' page cache before every disk_offload forward pass (cold reads)")
    p.add_argument("--offload-dir", help="where disk_offload writes (absent or empty; default: a temporary folder)")
    p.add_argument("--keep-offload", action="store_true", help="leave the offload folder in place at the end")
    p.add_argument("--stand-in-missing-deps", action="store_true",
                   help="placeholder huggingface_hub / safetensors modules if missing (Accelerate >= 0.23)")
    a = p.parse_args()
    if a.prompt_tokens < 1 or a.new_tokens < 1 or a.repeats < 1 or a.warmup < 0 or a.threads < 1:
        p.error("--prompt-tokens, --new-tokens, --repeats and --threads must be >= 1, --warmup >= 0")
    return a


# ---------------------------------------------------------------------------------------------------------------
# Imports


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of `roots` (and their submodules) with placeholder modules. Any name taken from one is an
    exception class whose construction raises, so `except Name:` clauses compile and every call fails loudly."""

    def __init__(self, roots):
        self.roots = set(roots)
        self.made = []

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        self.made.append(name)
        module.__path__ = []
        module.__version__ = "0+stand-in"

        def getattr_(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)

            def refuse(cls, *args, **kwargs):
                raise ImportError(f"{name}.{attr} is a stand-in: the package {name.split('.')[0]} is not installed")

            cls = type(attr, (Exception,), {"__new__": refuse, "__module__": name})
            setattr(module, attr, cls)
            return cls

        module.__getattr__ = getattr_


def import_libraries(src, stand_in):
    """(torch, numpy, accelerate, disk_offload, stand-in module names), or raises ImportError."""
    if src:
        root = os.path.join(src, "src") if os.path.isdir(os.path.join(src, "src", "accelerate")) else src
        if not os.path.isdir(os.path.join(root, "accelerate")):
            raise ImportError(f"no accelerate package under {src}")
        sys.path.insert(0, root)
    import torch  # first, so that a missing torch is named as such
    import numpy

    finder = None
    if stand_in:
        import importlib.util
        missing = [m for m in ("huggingface_hub", "safetensors") if importlib.util.find_spec(m) is None]
        if missing:
            finder = _StandInFinder(missing)
            sys.meta_path.append(finder)
    try:
        import accelerate
        from accelerate import disk_offload
    except ImportError as e:
        if not stand_in and getattr(e, "name", None) in ("huggingface_hub", "safetensors"):
            raise ImportError(f"{e} (Accelerate >= 0.23 imports it; --stand-in-missing-deps supplies a placeholder, "
                              "or use Accelerate v0.22.0)") from e
        raise
    return torch, numpy, accelerate, disk_offload, (sorted(finder.made) if finder else [])


# ---------------------------------------------------------------------------------------------------------------
# Model


def build_model(torch, cfg):
    """LlamaForCausalLM with every parameter on the meta device (filled in by the caller)."""
    nn = torch.nn
    meta = torch.device("meta")
    hidden, heads, kv_heads, head_dim = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    eps, theta, dtype = cfg["rms_norm_eps"], cfg["rope_theta"], cfg["dtype"]
    groups = heads // kv_heads

    def linear(i, o):
        return nn.Linear(i, o, bias=False, device=meta, dtype=dtype)

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    class LlamaRMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(hidden, device=meta, dtype=dtype), requires_grad=False)
            self.variance_epsilon = eps

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
            return self.weight * h.to(x.dtype)

    class LlamaRotaryEmbedding(nn.Module):
        def __init__(self):
            super().__init__()
            exponent = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
            self.register_buffer("inv_freq", 1.0 / (theta ** exponent), persistent=False)

        def forward(self, x, start):
            pos = torch.arange(start, start + x.shape[1], dtype=torch.float32)
            angles = torch.outer(pos, self.inv_freq)
            angles = torch.cat((angles, angles), dim=-1)  # (seq, head_dim)
            return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    class LlamaAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = linear(hidden, heads * head_dim)
            self.k_proj = linear(hidden, kv_heads * head_dim)
            self.v_proj = linear(hidden, kv_heads * head_dim)
            self.o_proj = linear(heads * head_dim, hidden)
            self.scale = head_dim ** -0.5

        def forward(self, x, cos, sin, past):
            b, s, _ = x.shape
            q = self.q_proj(x).view(b, s, heads, head_dim).transpose(1, 2)
            k = self.k_proj(x).view(b, s, kv_heads, head_dim).transpose(1, 2)
            v = self.v_proj(x).view(b, s, kv_heads, head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if past is not None:
                k = torch.cat((past[0], k), dim=2)
                v = torch.cat((past[1], v), dim=2)
            present = (k, v)
            if groups > 1:  # grouped-query attention: each KV head serves `groups` query heads
                k = k.repeat_interleave(groups, dim=1)
                v = v.repeat_interleave(groups, dim=1)
            scores = torch.matmul(q, k.transpose(2, 3)) * self.scale  # (b, heads, s, total)
            total = k.shape[2]
            if s > 1:  # causal: query i (at position total - s + i) sees keys up to its own position
                qpos = torch.arange(total - s, total).unsqueeze(1)
                kpos = torch.arange(total).unsqueeze(0)
                scores = scores.masked_fill(kpos > qpos, float("-inf"))
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, heads * head_dim)
            return self.o_proj(out), present

    class LlamaMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = linear(hidden, cfg["intermediate"])
            self.up_proj = linear(hidden, cfg["intermediate"])
            self.down_proj = linear(cfg["intermediate"], hidden)
            self.act_fn = nn.SiLU()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    class LlamaDecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = LlamaAttention()
            self.mlp = LlamaMLP()
            self.input_layernorm = LlamaRMSNorm()
            self.post_attention_layernorm = LlamaRMSNorm()

        def forward(self, x, cos, sin, past):
            a, present = self.self_attn(self.input_layernorm(x), cos, sin, past)
            x = x + a
            x = x + self.mlp(self.post_attention_layernorm(x))
            return x, present

    class LlamaModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg["vocab"], hidden, device=meta, dtype=dtype)
            self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(cfg["layers"])])
            self.norm = LlamaRMSNorm()
            self.rotary_emb = LlamaRotaryEmbedding()

        def forward(self, input_ids, past_key_values, start):
            x = self.embed_tokens(input_ids)
            cos, sin = self.rotary_emb(x, start)
            cache = []
            for i, layer in enumerate(self.layers):
                x, present = layer(x, cos, sin, past_key_values[i] if past_key_values is not None else None)
                cache.append(present)
            return self.norm(x), cache

    class LlamaForCausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = LlamaModel()
            self.lm_head = linear(hidden, cfg["vocab"])

        def forward(self, input_ids, past_key_values=None, start=0):
            x, cache = self.model(input_ids, past_key_values, start)
            return self.lm_head(x), cache

    return LlamaForCausalLM()


def set_parameter(torch, model, name, value):
    owner, _, leaf = name.rpartition(".")
    model.get_submodule(owner)._parameters[leaf] = torch.nn.Parameter(value, requires_grad=False)


def fill_random(torch, model, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    for name, p in list(model.named_parameters()):
        if name.endswith("norm.weight"):
            value = torch.ones(p.shape, dtype=dtype)
        else:
            value = torch.empty(p.shape, dtype=torch.float32).normal_(0.0, 0.02, generator=gen).to(dtype)
        set_parameter(torch, model, name, value)


def read_config(folder, dtype):
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    if c.get("attention_bias") or c.get("mlp_bias"):
        raise ValueError("attention_bias / mlp_bias models are not supported here")
    heads = c["num_attention_heads"]
    cfg = {"hidden": c["hidden_size"], "layers": c["num_hidden_layers"], "intermediate": c["intermediate_size"],
           "heads": heads, "kv_heads": c.get("num_key_value_heads") or heads, "vocab": c["vocab_size"],
           "head_dim": c.get("head_dim") or c["hidden_size"] // heads, "rms_norm_eps": c.get("rms_norm_eps", 1e-6),
           "rope_theta": c.get("rope_theta", 10000.0), "tie_word_embeddings": bool(c.get("tie_word_embeddings")),
           "dtype": dtype}
    if c.get("rope_scaling"):
        print(f"note: rope_scaling {c['rope_scaling']} is ignored (it changes values, not the work per token)")
    return cfg


def safetensors_files(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, s) for s in shards]
    single = os.path.join(folder, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {folder}")


def read_safetensors(torch, path):
    """(name, tensor) for each tensor of a .safetensors file: an 8-byte little-endian header length, a JSON
    header {name: {dtype, shape, data_offsets}}, then the raw little-endian data."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        load_file = None
    if load_file is not None and getattr(sys.modules.get("safetensors"), "__version__", "") != "0+stand-in":
        yield from load_file(path).items()
        return
    dtypes = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in dtypes:
                raise ValueError(f"{path}: {name} has dtype {info['dtype']}, not read here")
            begin, end = info["data_offsets"]
            dtype = dtypes[info["dtype"]]
            if end == begin:
                yield name, torch.empty(info["shape"], dtype=dtype)
                continue
            buf = bytearray(end - begin)
            f.seek(base + begin)
            if f.readinto(buf) != len(buf):
                raise ValueError(f"{path}: {name} runs past the end of the file")
            yield name, torch.frombuffer(buf, dtype=dtype).reshape(info["shape"])


def load_weights(torch, model, folder, cfg):
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    for path in safetensors_files(folder):
        for name, t in read_safetensors(torch, path):
            if name not in expected:
                continue
            if tuple(t.shape) != expected[name]:
                raise ValueError(f"{name}: shape {tuple(t.shape)} in {path}, {expected[name]} expected")
            set_parameter(torch, model, name, t.to(cfg["dtype"]))
            del expected[name]
    if "lm_head.weight" in expected and cfg["tie_word_embeddings"]:
        set_parameter(torch, model, "lm_head.weight", model.model.embed_tokens.weight.detach().clone())
        del expected["lm_head.weight"]
    if expected:
        raise ValueError(f"{len(expected)} weights missing from {folder}, e.g. {sorted(expected)[:3]}")


# ---------------------------------------------------------------------------------------------------------------
# Timing


def process_read_bytes():
    """Bytes this process made the storage layer fetch so far (None where /proc/self/io is missing)."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def generate(torch, model, prompt, new_tokens, before_pass=None):
    """Greedy: a prefill, then new_tokens decode steps. (prefill s, decode s, tokens, read bytes during decode).
    before_pass runs before every forward pass, outside the timed region."""
    with torch.no_grad():
        if before_pass:
            before_pass()
        t0 = time.perf_counter()
        logits, cache = model(prompt, past_key_values=None, start=0)
        tok = logits[:, -1].argmax(-1, keepdim=True)
        prefill = time.perf_counter() - t0
        tokens = [int(tok)]
        decode = 0.0
        pos = prompt.shape[1]
        read0 = process_read_bytes()
        for _ in range(new_tokens):
            if before_pass:
                before_pass()
            t0 = time.perf_counter()
            logits, cache = model(tok, past_key_values=cache, start=pos)
            tok = logits[:, -1].argmax(-1, keepdim=True)
            decode += time.perf_counter() - t0
            tokens.append(int(tok))
            pos += 1
        read1 = process_read_bytes()
    return prefill, decode, tokens, (read1 - read0 if read0 is not None and read1 is not None else None)


def run_mode(torch, label, model, prompt, args, before_pass=None):
    for _ in range(args.warmup):
        generate(torch, model, prompt, args.new_tokens, before_pass)
    pre, dec, reads, tokens = [], [], [], None
    for r in range(args.repeats):
        p, d, toks, rb = generate(torch, model, prompt, args.new_tokens, before_pass)
        pre.append(args.prompt_tokens / p)
        dec.append(args.new_tokens / d)
        if rb is not None:
            reads.append(rb / args.new_tokens)
        tokens = tokens or toks
        print(f"  {label:<12} run {r + 1}: prefill {pre[-1]:9.2f} tokens/s, decode {dec[-1]:9.3f} tokens/s"
              + (f", {rb / args.new_tokens / 1e6:.1f} MB read from storage per decode token" if rb is not None else ""),
              flush=True)
    return {"prefill": statistics.median(pre), "decode": statistics.median(dec), "decode_runs": dec,
            "read_per_token": statistics.median(reads) if reads else None, "tokens": tokens}


def dat_files(folder):
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".dat"))


def drop_page_cache(paths):
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages are not dropped; the offload files were just written
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def filesystem_of(path):
    """(mount point, file system type) holding path, from /proc/mounts."""
    path = os.path.realpath(path)
    best = ("?", "?")
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1].replace("\\040", " ")
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
                    best = (mnt, parts[2])
    except OSError:
        pass
    return best


def main():
    args = parse_args()
    try:
        torch, numpy, accelerate, disk_offload, stand_ins = import_libraries(args.accelerate_src,
                                                                            args.stand_in_missing_deps)
    except ImportError as e:
        print(f"cannot import Accelerate or torch: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    if args.random:
        cfg = {"hidden": args.hidden, "layers": args.layers, "intermediate": args.intermediate, "heads": args.heads,
               "kv_heads": args.kv_heads, "vocab": args.vocab, "head_dim": args.hidden // args.heads,
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "dtype": dtype}
        source = f"random (seed {args.seed})"
    else:
        cfg = read_config(args.model, dtype)
        source = os.path.abspath(args.model)
    if cfg["heads"] % cfg["kv_heads"] or cfg["head_dim"] % 2:
        print("heads must be a multiple of kv-heads, and the head size even", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    model = build_model(torch, cfg)
    if args.random:
        fill_random(torch, model, args.seed, dtype)
    else:
        load_weights(torch, model, args.model, cfg)
    model.eval()
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    prompt = torch.tensor([[(i * 7919) % cfg["vocab"] for i in range(args.prompt_tokens)]], dtype=torch.int64)

    print(f"accelerate {accelerate.__version__} ({os.path.dirname(accelerate.__file__)}), torch {torch.__version__}, "
          f"numpy {numpy.__version__}, python {platform.python_version()}"
          + (f"; stand-in modules: {', '.join(stand_ins)}" if stand_ins else ""))
    print(f"model: {source}: hidden {cfg['hidden']}, {cfg['layers']} layers, {cfg['heads']} heads / "
          f"{cfg['kv_heads']} KV heads, intermediate {cfg['intermediate']}, vocab {cfg['vocab']}; "
          f"{n_params / 1e6:.1f}M parameters, {weight_bytes / 1e6:.1f} MB in {args.dtype} (ready in {build_s:.1f} s)")
    print(f"{args.threads} torch threads; prompt {args.prompt_tokens} tokens, {args.new_tokens} decode steps, "
          f"{args.warmup} warm-up + {args.repeats} timed runs per mode")

    print("in memory:", flush=True)
    mem = run_mode(torch, "in memory", model, prompt, args)

    made_dir = args.offload_dir is None
    offload_dir = tempfile.mkdtemp(prefix="bench-disk-offload-") if made_dir else os.path.abspath(args.offload_dir)
    if not made_dir:
        if os.path.isdir(offload_dir) and os.listdir(offload_dir):
            print(f"--offload-dir {offload_dir} is not empty (disk_offload would reuse what is there)", file=sys.stderr)
            return 2
        os.makedirs(offload_dir, exist_ok=True)
    try:
        t0 = time.perf_counter()
        disk_offload(model, offload_dir, execution_device="cpu", offload_buffers=False)
        offload_s = time.perf_counter() - t0
        files = dat_files(offload_dir)
        offload_bytes = sum(os.path.getsize(p) for p in files)
        mount, fstype = filesystem_of(offload_dir)
        print(f"disk_offload wrote {len(files)} .dat files, {offload_bytes / 1e6:.1f} MB, to {offload_dir} "
              f"({fstype} at {mount}) in {offload_s:.2f} s; "
              + ("page cache of those files dropped before every forward pass (cold reads)" if args.drop_cache
                 else "page cache left as it is (warm reads)"), flush=True)
        before = (lambda: drop_page_cache(files)) if args.drop_cache else None
        print("disk_offload:", flush=True)
        off = run_mode(torch, "disk_offload", model, prompt, args, before)
    finally:
        if made_dir and not args.keep_offload:
            shutil.rmtree(offload_dir, ignore_errors=True)

    same = mem["tokens"] == off["tokens"]
    ratio = off["decode"] / mem["decode"]
    print(f"decode, median of {args.repeats}: in memory {mem['decode']:.3f} tokens/s, disk_offload "
          f"{off['decode']:.3f} tokens/s ({ratio:.3f}x){'' if same else '; generated tokens DIFFER'}")
    print(json.dumps({
        "accelerate_version": accelerate.__version__, "torch_version": torch.__version__,
        "numpy_version": numpy.__version__, "python_version": platform.python_version(),
        "dtype": args.dtype, "threads": args.threads, "model": source,
        "shape": {k: cfg[k] for k in ("hidden", "layers", "intermediate", "heads", "kv_heads", "vocab")},
        "parameters": n_params, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
        "repeats": args.repeats, "warmup": args.warmup,
        "in_memory_tokens_per_s": round(mem["decode"], 4), "disk_offload_tokens_per_s": round(off["decode"], 4),
        "disk_offload_vs_in_memory": round(ratio, 4),
        "in_memory_runs_tokens_per_s": [round(x, 4) for x in mem["decode_runs"]],
        "disk_offload_runs_tokens_per_s": [round(x, 4) for x in off["decode_runs"]],
        "in_memory_prefill_tokens_per_s": round(mem["prefill"], 4),
        "disk_offload_prefill_tokens_per_s": round(off["prefill"], 4),
        "offload_bytes": offload_bytes, "offload_files": len(files), "offload_write_s": round(offload_s, 4),
        "offload_fs": fstype, "cold": bool(args.drop_cache),
        "disk_offload_read_bytes_per_decode_token": (None if off["read_per_token"] is None
                                                     else int(off["read_per_token"])),
        "same_tokens": same, "stand_in_modules": stand_ins,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
