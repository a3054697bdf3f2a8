#!/usr/bin/env python3
"""Writes the small checkpoints the `accel` CLI tests read, with the standard library only.

    python3 tests/cli/make_cli_checkpoints.py OUT_DIR

OUT_DIR/tiny.safetensors          a LLaMA-shaped model (3 decoder layers) in several dtypes, with
                                  "__metadata__" {"format": "pt"}, laid out as the reference
                                  safetensors writer does (dtype alignment descending, then name)
OUT_DIR/sharded/                  the same tensors split over two shards, with
                                  model.safetensors.index.json as transformers writes it

Tensor bytes are a fixed pattern, so hashes are stable from run to run.
"""

import json
import os
import struct
import sys

# name, safetensors dtype, shape
TENSORS = [
    ("model.embed_tokens.weight", "BF16", [8, 4]),
    ("model.layers.0.self_attn.q_proj.weight", "F32", [4, 4]),
    ("model.layers.0.mlp.up_proj.weight", "F16", [6, 4]),
    ("model.layers.1.self_attn.q_proj.weight", "F32", [4, 4]),
    ("model.layers.1.mlp.up_proj.weight", "F16", [6, 4]),
    ("model.layers.2.self_attn.q_proj.weight", "F32", [4, 4]),
    ("model.layers.2.mlp.up_proj.weight", "F16", [6, 4]),
    ("model.norm.weight", "F32", [4]),
    ("model.position_ids", "I64", [1, 8]),
    ("model.mask", "BOOL", [2, 2]),
    ("model.scale", "F64", []),
    ("lm_head.weight", "BF16", [8, 4]),
]

ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "BOOL": 1}
# The reference writer's order: larger alignment first, then by name.
RANK = {"BOOL": 0, "F16": 6, "BF16": 7, "F32": 9, "F64": 10, "I64": 11}


def tensor_bytes(index, dtype, shape):
    n = 1
    for d in shape:
        n *= d
    if dtype == "BOOL":
        return bytes((i + index) % 2 for i in range(n))
    if dtype in ("F32", "F64"):
        code = "<f" if dtype == "F32" else "<d"
        return b"".join(struct.pack(code, (i - n / 2) / 8 + index) for i in range(n))
    return bytes(((i * 29 + index * 7 + 1) & 0x7F) for i in range(n * ITEMSIZE[dtype]))


def write_safetensors(path, tensors, metadata):
    ordered = sorted(tensors, key=lambda t: (-RANK[t[1]], t[0]))
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in ordered:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "sharded"), exist_ok=True)
    tensors = [(n, d, s, tensor_bytes(i, d, s)) for i, (n, d, s) in enumerate(TENSORS)]
    write_safetensors(os.path.join(out, "tiny.safetensors"), tensors, {"format": "pt"})

    shards = {"model-00001-of-00002.safetensors": tensors[:5], "model-00002-of-00002.safetensors": tensors[5:]}
    weight_map = {}
    for shard, part in shards.items():
        write_safetensors(os.path.join(out, "sharded", shard), part, {"format": "pt"})
        weight_map.update({t[0]: shard for t in part})
    index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": weight_map}
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
