#!/usr/bin/env python3
"""Writes tests/data/torch_bin/: small checkpoints produced by the real torch.save, and
expected.json describing what a reader must find in them.

    python3 tests/io/make_torch_bin_fixtures.py [OUT_DIR]

Needs torch (Debian: python3-torch); neither the build nor the tests do: the files are checked in.
Regenerating with another torch version may change the bytes (archive layout, pickle memo
numbering) but not expected.json's tensors, which is the point: the reader is held to what torch
writes, not to what accel's own writer writes.

Fixtures:
  state_dict.bin      an OrderedDict with one tensor per torch dtype the reader maps (float32,
                      float16, bfloat16, int64, bool, uint8, int8), a 0-d tensor, one tensor
                      object saved under two names, a transposed view and two narrow slices of
                      storages that are not saved whole, empty tensors, and an nn.Parameter
  state_dict_protocol4.bin
                      the same state dict pickled with protocol 4 (torch.save(pickle_protocol=4))
  module.bin          nn.Module.state_dict() of a small model: the OrderedDict carries
                      `_metadata` (pickled as BUILD state), buffers, a 0-d int64 buffer
                      (num_batches_tracked) and an lm_head tied to the embedding
  plain_dict.bin      a plain dict (EMPTY_DICT + SETITEMS rather than an OrderedDict REDUCE)
  legacy.bin          torch.save(..., _use_new_zipfile_serialization=False): the pre-1.6 format,
                      which the reader does not support and must reject cleanly
  malicious_os_system.bin, malicious_eval.bin
                      a state dict holding an object whose __reduce__ names os.system /
                      builtins.eval: loading must refuse the global, never call it

expected.json: {"torch_version", "fixtures": {file: {"tensors": [...], "shared_storage": [[names]]}
or {"same_tensors_as": file} or {"error_contains": [...]}}}. Each tensor lists name, dtype (torch's name), shape, stride,
storage_offset, storage_numel, hex (its elements in C order as little-endian bytes) and values
(tensor.tolist(), with non-finite floats as the strings "nan", "inf", "-inf" since JSON has no
spelling for them). shared_storage groups the names whose tensors view one storage.
"""

import json
import math
import os
import sys
from collections import OrderedDict

import torch


def encode_values(v):
    if isinstance(v, list):
        return [encode_values(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def storage_of(t):
    s = t.storage()
    return s.data_ptr(), s.size()


def describe(sd):
    tensors, groups = [], OrderedDict()
    for name, t in sd.items():
        t = t.detach()
        ptr, numel = storage_of(t)
        tensors.append({
            "name": name,
            "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "storage_offset": t.storage_offset(),
            "storage_numel": numel,
            "hex": t.contiguous().numpy().tobytes().hex() if t.dtype != torch.bfloat16
            else t.contiguous().view(torch.int16).numpy().tobytes().hex(),
            "values": encode_values(t.tolist()),
        })
        # Empty storages have no address worth comparing: they share nothing.
        if numel > 0:
            groups.setdefault(ptr, []).append(name)
    shared = [names for names in groups.values() if len(names) > 1]
    return {"tensors": tensors, "shared_storage": shared}


def state_dict_fixture():
    torch.manual_seed(0)
    f32 = torch.tensor([0.0, -0.0, 1.0, -2.5, 3.4028234663852886e38, 1.401298464324817e-45,
                        1.1754943508222875e-38, float("inf"), float("-inf"), float("nan"), math.pi,
                        -1.0e-3], dtype=torch.float32).reshape(3, 4)
    f16 = torch.tensor([0.0, -0.0, 1.0, 65504.0, 5.960464477539063e-08, -3.140625, float("inf"),
                        0.333251953125], dtype=torch.float16).reshape(2, 2, 2)
    bf16 = (torch.randn(2, 5) * 100).to(torch.bfloat16)
    i64 = torch.tensor([-(2 ** 63), 2 ** 63 - 1, 0, -1, 2 ** 53 + 1, 42], dtype=torch.int64)
    boolean = torch.tensor([[True, False, True], [False, False, True]])
    u8 = torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8)
    i8 = torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8)
    tied = torch.randn(4, 3)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    rows = torch.arange(40, dtype=torch.int64).reshape(8, 5)
    cols = torch.randn(5, 7).to(torch.float16)

    sd = OrderedDict()
    sd["dtypes.float32"] = f32
    sd["dtypes.float16"] = f16
    sd["dtypes.bfloat16"] = bf16
    sd["dtypes.int64"] = i64
    sd["dtypes.bool"] = boolean
    sd["dtypes.uint8"] = u8
    sd["dtypes.int8"] = i8
    sd["scalar"] = torch.tensor(-7.25)
    sd["tied.embed.weight"] = tied
    sd["tied.lm_head.weight"] = tied                          # same object: the pickle memo
    sd["views.base"] = base
    sd["views.base_t"] = base.t()                            # a second view of the same storage
    sd["views.rows_1_3"] = rows.narrow(0, 1, 3)              # offset 5, contiguous
    sd["views.cols_2_4"] = cols[:, 2:4]                      # offset 2, strided
    sd["views.cols_2_4_t"] = cols[:, 2:4].t()                # offset 2, transposed
    sd["empty.f32"] = torch.empty(0, 3)
    sd["empty.i64"] = torch.empty(0, dtype=torch.int64)
    sd["param"] = torch.nn.Parameter(torch.randn(2, 2))      # torch._utils._rebuild_parameter
    return sd


def format_expected(version, fixtures):
    """expected.json with one line per tensor: small enough to diff and review."""
    lines = ["{", f' "torch_version": {json.dumps(version)},', ' "fixtures": {']
    for i, (file, spec) in enumerate(fixtures.items()):
        lines.append(f"  {json.dumps(file)}: {{")
        if "tensors" in spec:
            lines.append('   "tensors": [')
            rows = [f"    {json.dumps(t)}" for t in spec["tensors"]]
            lines.append(",\n".join(rows))
            lines.append("   ],")
            lines.append(f'   "shared_storage": {json.dumps(spec["shared_storage"])}')
        elif "same_tensors_as" in spec:
            lines.append(f'   "same_tensors_as": {json.dumps(spec["same_tensors_as"])}')
        else:
            lines.append(f'   "error_contains": {json.dumps(spec["error_contains"])}')
        lines.append("  }" + ("," if i + 1 < len(fixtures) else ""))
    lines += [" }", "}", ""]
    return "\n".join(lines)


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4)
        self.norm = torch.nn.BatchNorm1d(4)
        self.proj = torch.nn.Linear(4, 4)
        self.lm_head = torch.nn.Linear(4, 8, bias=False)
        self.lm_head.weight = self.embed.weight
        self.register_buffer("position_ids", torch.arange(8).unsqueeze(0))


class Evil:
    """Pickles as a call of `fn(arg)`: what a booby-trapped checkpoint looks like."""

    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "torch_bin")
    os.makedirs(out, exist_ok=True)
    fixtures = OrderedDict()

    sd = state_dict_fixture()
    torch.save(sd, os.path.join(out, "state_dict.bin"))
    fixtures["state_dict.bin"] = describe(sd)

    # Protocol 4 framing and opcodes (FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL).
    torch.save(sd, os.path.join(out, "state_dict_protocol4.bin"), pickle_protocol=4)
    fixtures["state_dict_protocol4.bin"] = {"same_tensors_as": "state_dict.bin"}

    torch.manual_seed(1)
    model = TinyModel()
    msd = model.state_dict()
    torch.save(msd, os.path.join(out, "module.bin"))
    fixtures["module.bin"] = describe(msd)

    plain = {"b": torch.tensor([1, 2, 3], dtype=torch.int8), "a": torch.ones(2, dtype=torch.bfloat16)}
    torch.save(plain, os.path.join(out, "plain_dict.bin"))
    fixtures["plain_dict.bin"] = describe(plain)

    torch.save(OrderedDict(w=torch.ones(2)), os.path.join(out, "legacy.bin"),
               _use_new_zipfile_serialization=False)
    fixtures["legacy.bin"] = {"error_contains": ["legacy.bin", "not a zip archive"]}

    for file, fn, arg in (("malicious_os_system.bin", os.system, "echo accel-fixture-was-executed"),
                          ("malicious_eval.bin", eval, "print('accel-fixture-was-executed')")):
        evil = OrderedDict(w=torch.ones(2), payload=Evil(fn, arg))
        torch.save(evil, os.path.join(out, file))
        # The pickled spelling: os.system lives in posix, and protocol 2 writes Python 3's
        # builtins under its Python 2 name.
        name = f"{fn.__module__}.{fn.__name__}".replace("builtins.", "__builtin__.")
        fixtures[file] = {"error_contains": [file, "refusing to load global " + name]}

    with open(os.path.join(out, "expected.json"), "w") as f:
        f.write(format_expected(torch.__version__.split("+")[0], fixtures))


if __name__ == "__main__":
    main()
