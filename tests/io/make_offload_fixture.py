#!/usr/bin/env python3
"""Writes tests/data/offload_fixture/: an offload folder laid out as accelerate/utils/offload.py
writes one, using the standard library only (so CI and a bare machine can regenerate it).

    python3 tests/io/make_offload_fixture.py [OUT_DIR]

What Accelerate does, and what this script reproduces without numpy:
  - offload_weight: a `<name>.dat` file holds the tensor as np.memmap writes a C-order array:
    raw little-endian element bytes, nothing else. bfloat16 is viewed as int16 first (numpy has
    no bfloat16) and recorded with dtype "bfloat16"; every other dtype is recorded with numpy's
    name ("float32", "float16", "int64", "bool").
  - the index entry is {"dtype": ..., "shape": list(array.shape)} taken *before* a 0-d array is
    reshaped to one element for the memmap: a scalar is recorded with shape [] and stored as one
    element.
  - save_offload_index: index.json is json.dump(index, f, indent=2) merged into any existing
    index (dict.update: existing names keep their place), with no trailing newline.
"""

import json
import os
import struct
import sys


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16_bits(x):
    # torch's float -> bfloat16: round to nearest even on the upper 16 bits of the f32 pattern.
    b = f32_bits(x)
    if (b & 0x7F800000) == 0x7F800000 and (b & 0x007FFFFF):
        return (b >> 16) | 0x0040  # quiet NaN
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


# numpy name -> struct code of one little-endian element
CODES = {"float32": "f", "float16": "e", "int64": "q", "int16": "h", "bool": "?"}


def make_tensor(dtype, shape, values):
    """(recorded dtype, shape, raw bytes) of a tensor, as Accelerate would see it after .numpy()."""
    count = 1
    for e in shape:
        count *= e
    assert count == len(values), (shape, len(values))
    if dtype == "bfloat16":
        raw = b"".join(struct.pack("<H", bf16_bits(v)) for v in values)
    else:
        raw = b"".join(struct.pack("<" + CODES[dtype], v) for v in values)
    return dtype, list(shape), raw


def offload_weight(weight, weight_name, offload_folder, index=None):
    dtype, shape, raw = weight
    if index is not None:
        index[weight_name] = {"dtype": dtype, "shape": list(shape)}
    # np.memmap(mode="w+") creates the file at exactly the array's size and flush() writes it.
    with open(os.path.join(offload_folder, f"{weight_name}.dat"), "wb") as f:
        f.write(raw)
    return index


def save_offload_index(index, offload_folder):
    if not index:
        return
    path = os.path.join(offload_folder, "index.json")
    current = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            current = json.load(f)
    current.update(index)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(current, f, indent=2)


def offload_state_dict(save_dir, state_dict):
    os.makedirs(save_dir, exist_ok=True)
    index = {}
    for name, weight in state_dict.items():
        index = offload_weight(weight, name, save_dir, index=index)
    save_offload_index(index, save_dir)


# The fixture's tensors. Every value is exact in its dtype so tests can compare values too.
STATE_DICT = {
    "proj.weight": make_tensor("float32", [2, 3], [0.5, -1.25, 3.0, 0.0, -0.0, 1024.0]),
    "proj.bias": make_tensor("float16", [3], [1.0, -0.5, 65504.0]),
    "embed.weight": make_tensor(
        "bfloat16", [4, 2], [1.0, -2.0, 0.15625, 3.140625, 256.0, -0.0, float("inf"), 0.0078125]
    ),
    "embed.position_ids": make_tensor("int64", [4], [0, -1, 2**40, -(2**63)]),
    "attn.mask": make_tensor("bool", [5], [True, False, True, True, False]),
    "attn.scale": make_tensor("float32", [], [2.5]),
    "conv.kernel": make_tensor("float32", [2, 2, 3], [i * 0.25 - 1.0 for i in range(12)]),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "data", "offload_fixture")
    os.makedirs(out, exist_ok=True)
    # A fresh folder every time: save_offload_index would otherwise merge into a stale index.
    for path in [os.path.join(out, f"{name}.dat") for name in STATE_DICT] + [os.path.join(out, "index.json")]:
        if os.path.isfile(path):
            os.remove(path)
    offload_state_dict(out, STATE_DICT)


if __name__ == "__main__":
    main()
