#!/usr/bin/env python3
"""Runs `accel inspect` on a checkpoint and checks every row against values computed here,
independently of accel (the standard library reads the files itself).

    check_inspect.py ACCEL PATH [--json]          table (default) or --json output must match
    check_inspect.py ACCEL PATH --expect-error T  exit status 1 and T in the error message
    check_inspect.py ACCEL --hostile WORK         hostile inputs made in WORK: each refused at once,
                                                  exit status 1, the file and the entry named

PATH: a .safetensors file, a sharded *.index.json, a folder holding one of those (searched in
accel's order: model.safetensors, model.safetensors.index.json, pytorch_model.bin,
pytorch_model.bin.index.json, one other *.index.json), a torch .bin (its expected tensors come
from expected.json beside it, written by make_torch_bin_fixtures.py with torch), or an offload
folder (index.json + .dat files).
"""

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

TORCH_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
               "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I64": "int64", "I32": "int32",
               "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
            "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


def row(name, dtype, shape, raw):
    return {"name": name, "dtype": dtype, "shape": list(shape), "nbytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest()}


def safetensors_rows(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + n:]
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    rows = [row(k, TORCH_NAMES[v["dtype"]], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in entries]
    return metadata, rows, {r["name"]: r for r in rows}


def index_rows(path):
    with open(path) as f:
        index = json.load(f)
    folder, shards, rows = os.path.dirname(path), {}, []
    for name, shard in index["weight_map"].items():
        if shard not in shards:
            shards[shard] = safetensors_rows(os.path.join(folder, shard))[2]
        rows.append(shards[shard][name])
    return index.get("metadata", {}), rows


def torch_bin_rows(path):
    with open(os.path.join(os.path.dirname(path), "expected.json")) as f:
        fixtures = json.load(f)["fixtures"]
    spec = fixtures[os.path.basename(path)]
    if "same_tensors_as" in spec:
        spec = fixtures[spec["same_tensors_as"]]
    return {}, [row(t["name"], t["dtype"], t["shape"], bytes.fromhex(t["hex"])) for t in spec["tensors"]]


def offload_rows(folder):
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    rows = []
    for name, info in index.items():
        with open(os.path.join(folder, name + ".dat"), "rb") as f:
            rows.append(row(name, info["dtype"], info["shape"], f.read()))
    return {}, rows


FOLDER_ORDER = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def expected_rows(path):
    if os.path.isdir(path):
        for name in FOLDER_ORDER:
            if os.path.isfile(os.path.join(path, name)):
                return expected_rows(os.path.join(path, name))
        indexes = sorted(n for n in os.listdir(path) if n.endswith(".index.json") and n != ".index.json")
        if len(indexes) == 1:
            return expected_rows(os.path.join(path, indexes[0]))
        return offload_rows(path)
    if path.endswith(".index.json"):
        return index_rows(path)
    if path.endswith(".safetensors"):
        return safetensors_rows(path)[:2]
    return torch_bin_rows(path)


def fail(msg, out=""):
    print("FAIL:", msg)
    if out:
        print(out)
    sys.exit(1)


def check_json(text, metadata, rows):
    got = json.loads(text)
    if list(got) != ["metadata", "tensors"]:
        fail(f"top-level keys {list(got)}, expected ['metadata', 'tensors']")
    if got["metadata"] != metadata:
        fail(f"metadata {got['metadata']} != {metadata}")
    for t in got["tensors"]:
        if list(t) != ["name", "dtype", "shape", "nbytes", "sha256"]:
            fail(f"tensor keys {list(t)}")
    if got["tensors"] != rows:
        for g, e in zip(got["tensors"], rows):
            if g != e:
                fail(f"got {g}\nexpected {e}")
        fail(f"{len(got['tensors'])} tensors, expected {len(rows)}")


def check_table(text, metadata, rows):
    pattern = re.compile(r"^(\S+)\s+(\S+)\s+(\[[^\]]*\])\s+(\d+)\s+([0-9a-f]{64})$")
    got = []
    for line in text.splitlines():
        m = pattern.match(line)
        if m:
            shape = json.loads(m.group(3))
            got.append({"name": m.group(1), "dtype": m.group(2), "shape": shape, "nbytes": int(m.group(4)),
                        "sha256": m.group(5)})
    if got != rows:
        for g, e in zip(got, rows):
            if g != e:
                fail(f"got {g}\nexpected {e}", text)
        fail(f"{len(got)} table rows, expected {len(rows)}", text)
    summary = f"{len(rows)} tensors, {sum(r['nbytes'] for r in rows)} bytes"
    if summary not in text:
        fail(f"no summary line '{summary}'", text)
    for k, v in metadata.items():
        if f"metadata {k}: {v if isinstance(v, str) else json.dumps(v)}" not in text:
            fail(f"metadata {k} missing from the table", text)


def refused(accel, path, *needles, what):
    """`accel inspect PATH --json` must exit 1 within a second, naming every needle."""
    start = time.monotonic()
    try:
        p = subprocess.run([accel, "inspect", path, "--json"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        fail(f"{what}: accel inspect {path} still running after 10 s")
    elapsed = time.monotonic() - start
    if p.returncode != 1:
        fail(f"{what}: exit {p.returncode} (expected 1): {p.stderr}", p.stdout)
    for needle in needles:
        if needle not in p.stderr:
            fail(f"{what}: '{needle}' not in the error: {p.stderr}")
    if elapsed > 1.0:
        fail(f"{what}: took {elapsed:.2f} s")
    print(f"PASS: {what}: {p.stderr.strip()}")


def hostile(accel, work):
    """Index entries leading out of their folder, NUL bytes, absolute paths, FIFOs, directories,
    text and legacy pickles: each refused at once, naming the file and the entry."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(os.path.join(work, "x.dat"), "wb") as f:  # what an escaping entry would hash
        f.write(b"\x11" * 12)
    entry = {"dtype": "float32", "shape": [3]}
    for case, name, needle in (("dotdot", "../x", "'../x.dat' leads out of the folder"),
                               ("absolute", "/etc/passwd", "'/etc/passwd.dat' is absolute"),
                               ("nul", "a\0b", "'a\\x00b.dat' holds a NUL byte")):
        folder = os.path.join(work, "offload_" + case)
        os.makedirs(folder)
        with open(os.path.join(folder, "index.json"), "w") as f:
            json.dump({name: entry}, f)
        refused(accel, folder, os.path.join(folder, "index.json"), needle, what=f"offload index entry {name!r}")

    folder = os.path.join(work, "sharded_dotdot")
    os.makedirs(folder)
    index = os.path.join(folder, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"weight_map": {"w": "../x.dat"}}, f)
    refused(accel, folder, index, "tensor 'w'", "'../x.dat' leads out of the folder", what="shard name '../x.dat'")

    fifo = os.path.join(work, "fifo", "model.safetensors")
    os.makedirs(os.path.dirname(fifo))
    os.mkfifo(fifo)
    refused(accel, fifo, fifo, "is a FIFO, not a regular file", what="a FIFO")
    refused(accel, os.path.dirname(fifo), fifo, "is a FIFO, not a regular file", what="a folder whose model.safetensors is a FIFO")

    folder = os.path.join(work, "dir_named_file")
    os.makedirs(os.path.join(folder, "model.safetensors"))
    refused(accel, folder, os.path.join(folder, "model.safetensors"), "is a directory, not a regular file",
            what="a directory named model.safetensors")

    text = os.path.join(work, "notes.txt")
    with open(text, "w") as f:
        f.write("not a checkpoint\n")
    refused(accel, text, text, "not a checkpoint format accel reads", what="a text file")
    legacy = os.path.join(work, "legacy.bin")
    with open(legacy, "wb") as f:
        f.write(b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.")
    refused(accel, legacy, legacy, "legacy torch pickle", what="a legacy torch pickle")


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[1] == "--hostile":
        hostile(args[0], args[2])
        return
    accel, path, rest = args[0], args[1], args[2:]
    as_json = "--json" in rest
    if "--expect-error" in rest:
        needle = rest[rest.index("--expect-error") + 1]
        p = subprocess.run([accel, "inspect", path], capture_output=True, text=True)
        if p.returncode != 1 or needle not in p.stderr:
            fail(f"expected exit 1 with '{needle}', got {p.returncode}: {p.stderr}", p.stdout)
        print(f"PASS: refused with: {p.stderr.strip()}")
        return
    p = subprocess.run([accel, "inspect", path] + (["--json"] if as_json else []), capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"exit {p.returncode}: {p.stderr}", p.stdout)
    metadata, rows = expected_rows(path)
    (check_json if as_json else check_table)(p.stdout, metadata, rows)
    print(f"PASS: {len(rows)} tensors match ({'json' if as_json else 'table'})")


if __name__ == "__main__":
    main()
