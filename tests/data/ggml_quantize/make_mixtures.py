#!/usr/bin/env python3
"""Writes mixtures.json: the tensor types llama-quantize chooses under each file scheme.

Usage: PYTHONPATH=<llama.cpp>/gguf-py python3 make_mixtures.py LLAMA_QUANTIZE OUT.json

For a few synthetic models (random float32 weights in the tensor order llama.cpp's converter
writes: HF names sorted, GPT-2's embedding again as output.weight; shapes that exercise the rules:
16 layers for the layer-dependent raises, four query heads per key head, a LLaMA head tied to the
embedding, GPT-2's fused attn_qkv, rows that do not fill 256-blocks), each written as an F32 GGUF file with gguf-py, runs `llama-quantize IN OUT
TYPE 1` for each quantized scheme and records every tensor's name, dims (GGUF order) and type.
tests/quant/test_gguf_convert.cpp feeds the same names and dims to GgufTypeRules.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

import types

import numpy as np

try:
    import sentencepiece  # noqa: F401  (gguf-py imports it; nothing here uses it)
except ImportError:
    sys.modules["sentencepiece"] = types.SimpleNamespace(SentencePieceProcessor=None)
import gguf  # noqa: E402

SCHEMES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"]

MODELS = {
    # name: (arch, layers, hidden, heads, kv_heads, ffn, vocab, tied)
    "llama16_gqa4": ("llama", 16, 256, 4, 1, 512, 300, False),
    "llama8_tied": ("llama", 8, 256, 4, 4, 256, 300, True),
    "llama4_narrow": ("llama", 4, 96, 4, 4, 160, 300, False),
    "gpt2_8": ("gpt2", 8, 256, 4, 4, 1024, 300, False),  # the converter writes GPT-2's tied head
}


def hf_order(arch, layers, tied):
    """(gguf name, kind) in the converter's order: sorted HF names."""
    names = []
    if arch == "llama":
        if not tied:
            names.append(("lm_head.weight", "output.weight"))
        names.append(("model.embed_tokens.weight", "token_embd.weight"))
        per = [("input_layernorm.weight", "attn_norm.weight"), ("mlp.down_proj.weight", "ffn_down.weight"),
               ("mlp.gate_proj.weight", "ffn_gate.weight"), ("mlp.up_proj.weight", "ffn_up.weight"),
               ("post_attention_layernorm.weight", "ffn_norm.weight"), ("self_attn.k_proj.weight", "attn_k.weight"),
               ("self_attn.o_proj.weight", "attn_output.weight"), ("self_attn.q_proj.weight", "attn_q.weight"),
               ("self_attn.v_proj.weight", "attn_v.weight")]
        for i in range(layers):
            names += [(f"model.layers.{i}.{h}", f"blk.{i}.{g}") for h, g in per]
        names.append(("model.norm.weight", "output_norm.weight"))
    else:
        per = [("attn.c_attn.bias", "attn_qkv.bias"), ("attn.c_attn.weight", "attn_qkv.weight"),
               ("attn.c_proj.bias", "attn_output.bias"), ("attn.c_proj.weight", "attn_output.weight"),
               ("ln_1.bias", "attn_norm.bias"), ("ln_1.weight", "attn_norm.weight"), ("ln_2.bias", "ffn_norm.bias"),
               ("ln_2.weight", "ffn_norm.weight"), ("mlp.c_fc.bias", "ffn_up.bias"), ("mlp.c_fc.weight", "ffn_up.weight"),
               ("mlp.c_proj.bias", "ffn_down.bias"), ("mlp.c_proj.weight", "ffn_down.weight")]
        for i in range(layers):
            names += [(f"transformer.h.{i}.{h}", f"blk.{i}.{g}") for h, g in per]
        names += [("transformer.ln_f.bias", "output_norm.bias"), ("transformer.ln_f.weight", "output_norm.weight"),
                  ("transformer.wpe.weight", "position_embd.weight"), ("transformer.wte.weight", "token_embd.weight")]
    names.sort(key=lambda p: p[0])
    order = [g for _, g in names]
    if arch == "gpt2":  # the converter writes wte again as output.weight, right after it
        order.insert(order.index("token_embd.weight") + 1, "output.weight")
    return order


def shape_of(g, arch, hidden, heads, kv, ffn, vocab):
    """numpy shape (rows, cols) of GGUF tensor g."""
    hd = hidden // heads
    base = g.split(".", 2)[-1] if g.startswith("blk.") else g
    table = {
        "token_embd.weight": (vocab, hidden), "output.weight": (vocab, hidden), "position_embd.weight": (64, hidden),
        "attn_q.weight": (hidden, hidden), "attn_k.weight": (kv * hd, hidden), "attn_v.weight": (kv * hd, hidden),
        "attn_output.weight": (hidden, hidden), "ffn_gate.weight": (ffn, hidden), "ffn_up.weight": (ffn, hidden),
        "ffn_down.weight": (hidden, ffn), "attn_qkv.weight": (3 * hidden, hidden), "attn_qkv.bias": (3 * hidden,),
        "ffn_up.bias": (ffn,),
    }
    return table.get(base, (hidden,))


def write_model(path, arch, layers, hidden, heads, kv, ffn, vocab, tied):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    if arch == "llama":
        w.add_head_count_kv(kv)
        w.add_rope_dimension_count(hidden // heads)
        w.add_layer_norm_rms_eps(1e-5)
    else:
        w.add_layer_norm_eps(1e-5)
    w.add_file_type(0)
    w.add_tokenizer_model("none")
    rng = np.random.default_rng(7)
    order = []
    for g in hf_order(arch, layers, tied):
        shape = shape_of(g, arch, hidden, heads, kv, ffn, vocab)
        w.add_tensor(g, rng.standard_normal(shape, dtype=np.float32) * 0.05)
        order.append((g, list(reversed(shape))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return order


def types_of(path):
    r = gguf.GGUFReader(str(path))
    return {t.name: t.tensor_type.name for t in r.tensors}


def main():
    quantize, out = sys.argv[1], pathlib.Path(sys.argv[2])
    result = {"llama_quantize": "llama.cpp c392e509, llama-quantize IN OUT TYPE 1 (no importance matrix)", "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name, (arch, layers, hidden, heads, kv, ffn, vocab, tied) in MODELS.items():
            f32 = tmp / f"{name}.gguf"
            order = write_model(f32, arch, layers, hidden, heads, kv, ffn, vocab, tied)
            entry = {"architecture": arch, "n_layer": layers, "n_head": heads, "n_head_kv": kv,
                     "has_output": not tied, "tensors": [[g, ne] for g, ne in order], "types": {}}
            for s in SCHEMES:
                q = tmp / f"{name}-{s}.gguf"
                subprocess.run([quantize, str(f32), str(q), s, "1"], check=True, capture_output=True)
                t = types_of(q)
                entry["types"][s.lower()] = [t[g] for g, _ in order]
                q.unlink()
            result["models"][name] = entry
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
