#!/usr/bin/env python3
"""`accel run` on GGUF files written here, independently of accel, from the reference model folders.

Usage: check_run_gguf.py ACCEL MODELS_DIR WORK_DIR

Each float32 model.safetensors of tiny_llama, tiny_llama_tied_headdim, tiny_gpt2 and tiny_qwen2
is converted to a GGUF F32 file the way llama.cpp's convert_hf_to_gguf.py lays one out (its tensor
names, LLaMA's q/k rows interleaved per head and Qwen2's left as they are, GPT-2's Conv1D weights
transposed, the hyper-parameters as metadata), and `accel run FILE.gguf --ids ... --json` must give the greedy tokens that
transformers gave (reference.json), which `accel run` of the folder also gives. A GGUF file of an
unsupported architecture exits 1 naming the file. A BF16 file of tiny_llama runs a 64-token prompt
in bfloat16 at every CPU tier (ACCEL_CPU_ARCH).
"""
import array
import json
import os
import pathlib
import struct
import subprocess
import sys

FAILURES = []

UINT32, FLOAT32, STRING = 4, 6, 8
F32, BF16 = 0, 30  # ggml tensor types
TIERS = ("scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16")  # ACCEL_CPU_ARCH's x86 tiers, lowest first


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def read_safetensors(path):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{path}: {name} is {info['dtype']}"
        begin, end = info["data_offsets"]
        out[name] = (info["shape"], body[begin:end])
    return out


def permute_rows(raw, rows, cols, n_head):
    """llama.cpp's permute: HF row h*hd + j*hd/2 + i goes to row h*hd + 2i + j."""
    hd = rows // n_head
    row_bytes = cols * 4
    out = bytearray(len(raw))
    for r in range(rows):
        h, k = divmod(r, hd)
        j, i = divmod(k, hd // 2)
        dst = h * hd + 2 * i + j
        out[dst * row_bytes:(dst + 1) * row_bytes] = raw[r * row_bytes:(r + 1) * row_bytes]
    return bytes(out)


def transpose(raw, rows, cols):
    a = array.array("f")
    a.frombytes(raw)
    t = array.array("f", [a[r * cols + c] for c in range(cols) for r in range(rows)])
    return t.tobytes()


def gguf_name(arch, hf):
    parts = hf.split(".")
    if arch in ("llama", "qwen2"):
        fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                 "lm_head.weight": "output.weight"}
        if hf in fixed:
            return fixed[hf]
        if parts[:2] != ["model", "layers"]:
            return None
        block, rest = parts[2], ".".join(parts[3:])
        table = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
                 "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    else:
        fixed = {"transformer.wte.weight": "token_embd.weight", "transformer.wpe.weight": "position_embd.weight",
                 "transformer.ln_f.weight": "output_norm.weight", "transformer.ln_f.bias": "output_norm.bias",
                 "lm_head.weight": "output.weight"}
        if hf in fixed:
            return fixed[hf]
        if parts[:2] != ["transformer", "h"]:
            return None
        block, rest = parts[2], ".".join(parts[3:])
        table = {"ln_1": "attn_norm", "ln_2": "ffn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
                 "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    module, _, leaf = rest.rpartition(".")
    return f"blk.{block}.{table[module]}.{leaf}" if module in table else None


def write_gguf(path, kv, tensors):
    def string(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, (vtype, value) in kv.items():
        out += string(key) + struct.pack("<I", vtype)
        out += {UINT32: lambda v: struct.pack("<I", v), FLOAT32: lambda v: struct.pack("<f", v),
                STRING: string}[vtype](value)
    offset, blobs = 0, []
    for name, (shape, raw, ggml_type) in tensors.items():
        ne = list(reversed(shape))
        out += string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", e) for e in ne)
        out += struct.pack("<IQ", ggml_type, offset)
        blobs.append(raw + b"\0" * (-len(raw) % 32))
        offset += len(blobs[-1])
    out += b"\0" * (-len(out) % 32)
    path.write_bytes(bytes(out) + b"".join(blobs))


def to_bf16(raw):
    """float32 bytes as bfloat16, rounded to nearest even (as llama.cpp's converter rounds)."""
    words = array.array("I", raw)
    return array.array("H", [(w + 0x7FFF + ((w >> 16) & 1)) >> 16 & 0xFFFF for w in words]).tobytes()


def convert(folder, out, bf16=False, context=None):
    """The folder's GGUF F32 file; with bf16, its 2-D weights bfloat16 (llama-quantize's BF16 keeps
    the 1-D ones float32); context overrides the context length."""
    config = json.loads((folder / "config.json").read_text())
    arch = config["model_type"]
    weights = read_safetensors(folder / "model.safetensors")
    if arch in ("llama", "qwen2"):
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads", heads)
        head_dim = config.get("head_dim", config["hidden_size"] // heads)
        kv = {"general.architecture": (STRING, arch),
              f"{arch}.context_length": (UINT32, config["max_position_embeddings"]),
              f"{arch}.embedding_length": (UINT32, config["hidden_size"]),
              f"{arch}.block_count": (UINT32, config["num_hidden_layers"]),
              f"{arch}.feed_forward_length": (UINT32, config["intermediate_size"]),
              f"{arch}.attention.head_count": (UINT32, heads),
              f"{arch}.attention.head_count_kv": (UINT32, kv_heads),
              f"{arch}.rope.dimension_count": (UINT32, head_dim),
              f"{arch}.attention.key_length": (UINT32, head_dim),
              f"{arch}.attention.value_length": (UINT32, head_dim),
              f"{arch}.attention.layer_norm_rms_epsilon": (FLOAT32, config["rms_norm_eps"]),
              f"{arch}.rope.freq_base": (FLOAT32, config.get("rope_theta", 10000.0))}
    else:
        kv = {"general.architecture": (STRING, "gpt2"),
              "gpt2.context_length": (UINT32, config["n_positions"]),
              "gpt2.embedding_length": (UINT32, config["n_embd"]),
              "gpt2.block_count": (UINT32, config["n_layer"]),
              "gpt2.feed_forward_length": (UINT32, config.get("n_inner") or 4 * config["n_embd"]),
              "gpt2.attention.head_count": (UINT32, config["n_head"]),
              "gpt2.attention.layer_norm_epsilon": (FLOAT32, config["layer_norm_epsilon"])}
    tied = config.get("tie_word_embeddings", arch == "gpt2")
    tensors = {}
    for hf, (shape, raw) in weights.items():
        name = gguf_name(arch, hf)
        if name is None or (tied and hf == "lm_head.weight"):
            continue
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            n_head = heads if ".attn_q." in name else kv_heads
            cols = shape[1] if len(shape) == 2 else 1
            raw = permute_rows(raw, shape[0], cols, n_head)
        if arch == "gpt2" and len(shape) == 2 and name.startswith("blk.") and name.endswith(".weight"):
            raw, shape = transpose(raw, shape[0], shape[1]), [shape[1], shape[0]]
        tensors[name] = (shape, to_bf16(raw) if bf16 and len(shape) == 2 else raw, BF16 if bf16 and len(shape) == 2 else F32)
    if context:
        kv[f"{arch}.context_length"] = (UINT32, context)
    write_gguf(out, kv, tensors)


def main():
    accel, models, work = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    work.mkdir(parents=True, exist_ok=True)
    for name in ("tiny_llama", "tiny_llama_tied_headdim", "tiny_gpt2", "tiny_qwen2"):
        folder = models / name
        ref = json.loads((folder / "reference.json").read_text())
        gguf = work / f"{name}.gguf"
        convert(folder, gguf)
        ids = ",".join(map(str, ref["prompt_ids"]))
        n = len(ref["greedy_new_tokens"])
        for what, model in (("gguf", gguf), ("folder", folder)):
            proc = subprocess.run([accel, "run", str(model), "--ids", ids, "--max-new-tokens", str(n), "--json"],
                                  capture_output=True, text=True, timeout=120)
            check(proc.returncode == 0, f"{name} ({what}): exit {proc.returncode}: {proc.stderr.strip()}")
            if proc.returncode == 0:
                out = json.loads(proc.stdout)
                check(out.get("generated_ids") == ref["greedy_new_tokens"],
                      f"{name} ({what}): {out.get('generated_ids')} != transformers' {ref['greedy_new_tokens']}")
                check(out.get("dtype") == "float32", f"{name} ({what}): an F32 file runs in float32")
    bad = work / "falcon.gguf"
    write_gguf(bad, {"general.architecture": (STRING, "falcon")}, {"token_embd.weight": ([2, 32], b"\0" * 256, F32)})
    proc = subprocess.run([accel, "run", str(bad), "--ids", "1"], capture_output=True, text=True, timeout=60)
    check(proc.returncode == 1 and "falcon.gguf" in proc.stderr and "falcon" in proc.stderr,
          f"unsupported architecture: exit {proc.returncode}: {proc.stderr.strip()}")
    bf16_at_every_tier(accel, models, work)
    if FAILURES:
        sys.exit(1)
    print("ok: GGUF files converted here run as transformers' models, and a BF16 file at every CPU tier")


def bf16_at_every_tier(accel, models, work):
    """A BF16 file with a 64-token prompt runs in bfloat16 at every CPU tier (ACCEL_CPU_ARCH): the
    prompt's rows go through the matrix products, oneDNN's bf16 matmul where the tier has one and
    float32 blocks of the weight elsewhere, never an error. A tier above the machine's runs its best."""
    gguf = work / "tiny_llama_bf16.gguf"
    convert(models / "tiny_llama", gguf, bf16=True, context=128)
    ids = ",".join(str(5 * i % 120 + 3) for i in range(64))
    for tier in TIERS:
        proc = subprocess.run([accel, "run", str(gguf), "--ids", ids, "--max-new-tokens", "4", "--json"],
                              capture_output=True, text=True, timeout=120, env=dict(os.environ, ACCEL_CPU_ARCH=tier))
        check(proc.returncode == 0, f"BF16 at ACCEL_CPU_ARCH={tier}: exit {proc.returncode}: {proc.stderr.strip()}")
        if proc.returncode != 0:
            continue
        out = json.loads(proc.stdout)
        ran = out.get("cpu_tier")
        check(ran in TIERS and TIERS.index(ran) <= TIERS.index(tier), f"BF16 at ACCEL_CPU_ARCH={tier}: ran {ran!r}")
        check(out.get("dtype") == "bfloat16", f"BF16 at ACCEL_CPU_ARCH={tier}: runs in {out.get('dtype')}")
        check(len(out.get("generated_ids", [])) == 4, f"BF16 at ACCEL_CPU_ARCH={tier}: {out.get('generated_ids')}")


if __name__ == "__main__":
    main()
