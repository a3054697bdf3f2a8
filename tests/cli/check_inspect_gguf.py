#!/usr/bin/env python3
"""`accel inspect` on the GGUF conformance files (../shared/conformance/gguf), checked against
their manifest, which llama.cpp's own code produced.

    check_inspect_gguf.py ACCEL GGUF_DIR

For every valid file: `accel inspect FILE --json` must give the manifest's version, alignment and
data offset, every metadata key in file order with its GGUF type and value (floats by their bits),
and per tensor the GGUF type name, ne (GGUF order), bytes, offset and the SHA-256 of the stored
bytes; the table form must list every tensor. `--dequantize` of the first two tensors of each file
must succeed and write their reference float32 arrays byte for byte (F16 NaNs: position only),
every type included: the lattice IQ types (IQ1_*, IQ2_*, IQ3_*) are counted to prove it.
Malformed files must exit 1 naming the file; lenient ones exit 0 or 1, never crash.
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile

LATTICE = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(accel, *args):
    return subprocess.run([accel, *args], capture_output=True, text=True, errors="replace", timeout=120)


def f32_bytes(x):
    """x rounded to float32 (to infinity past its range, as a C conversion does)."""
    try:
        return struct.pack("<f", x)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, x))


def same_scalar(got, want, typ, bits, where):
    if typ in ("FLOAT32", "FLOAT64"):
        if isinstance(got, str):
            got_f = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[got]
        else:
            got_f = float(got)
        if typ == "FLOAT32":
            got_bits = struct.unpack("<I", struct.pack("<f", got_f))[0]
        else:
            got_bits = struct.unpack("<Q", struct.pack("<d", got_f))[0]
        if math.isnan(got_f):
            ok = want == "nan"
        else:
            ok = got_bits == int(bits, 16)
        if not ok:
            fail(f"{where}: {got!r} (bits {got_bits:#x}) != {want!r} ({bits})")
    elif got != want:
        fail(f"{where}: {got!r} != {want!r}")


def check_json(accel, gguf_dir, entry):
    path = os.path.join(gguf_dir, entry["file"])
    r = run(accel, "inspect", path, "--json")
    if r.returncode != 0:
        fail(f"{path}: exit {r.returncode}: {r.stderr}")
    got = json.loads(r.stdout)
    if list(got) != ["gguf", "metadata", "tensors"]:
        fail(f"{path}: top-level keys {list(got)}")
    head = got["gguf"]
    for key in ("version", "alignment", "data_offset"):
        if head[key] != entry[key]:
            fail(f"{path}: {key} {head[key]} != {entry[key]}")
    meta = list(got["metadata"].items())
    if [k for k, _ in meta] != [m["key"] for m in entry["metadata"]]:
        fail(f"{path}: metadata keys differ")
    for (key, value), want in zip(meta, entry["metadata"]):
        if value["type"] != want["type"]:
            fail(f"{path}: {key} type {value['type']} != {want['type']}")
        if want["type"] == "ARRAY":
            if value["elem_type"] != want["elem_type"] or len(value["value"]) != len(want["value"]):
                fail(f"{path}: {key} array differs")
            bits = want.get("bits", [None] * len(want["value"]))
            for i, (g, w) in enumerate(zip(value["value"], want["value"])):
                same_scalar(g, w, want["elem_type"], bits[i], f"{path}: {key}[{i}]")
        else:
            same_scalar(value["value"], want["value"], want["type"], want.get("bits"), f"{path}: {key}")
    if len(got["tensors"]) != len(entry["tensors"]):
        fail(f"{path}: {len(got['tensors'])} tensors, expected {len(entry['tensors'])}")
    for g, w in zip(got["tensors"], entry["tensors"]):
        want = {"name": w["name"], "dtype": w["type"], "shape": w["ne"], "nbytes": w["n_bytes"],
                "sha256": w["bytes_sha256"], "offset": w["offset"]}
        if g != want:
            fail(f"{path}: tensor row {g} != {want}")


def check_table(accel, gguf_dir, entry):
    path = os.path.join(gguf_dir, entry["file"])
    r = run(accel, "inspect", path)
    if r.returncode != 0:
        fail(f"{path}: table exit {r.returncode}: {r.stderr}")
    for w in entry["tensors"]:
        if not any(line.split()[:2] == [w["name"], w["type"]] and w["bytes_sha256"] in line
                   for line in r.stdout.splitlines() if line.strip()):
            fail(f"{path}: no table row for {w['name']} {w['type']}:\n{r.stdout}")


def check_dequantize(accel, gguf_dir, entry, work):
    path = os.path.join(gguf_dir, entry["file"])
    count = lattice = 0
    # Two tensors per file: the library's own test compares every tensor; this one proves the CLI path.
    for w in entry["tensors"][:2]:
        out = os.path.join(work, "t.bin")
        r = run(accel, "inspect", path, "--dequantize", w["name"], "--out", out)
        if r.returncode != 0:
            fail(f"{path}: --dequantize {w['name']}: exit {r.returncode}: {r.stderr}")
        with open(out, "rb") as f:
            got = f.read()
        with open(os.path.join(gguf_dir, w["ref"]), "rb") as f:
            ref = f.read()
        if w["ref_dtype"] != "float32":
            # Integer and F64 references hold the raw values; accel writes them as float32.
            fmt = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "float64": "d"}[w["ref_dtype"]]
            n = len(got) // 4
            want = struct.unpack(f"<{n}{fmt}", ref)
            have = struct.unpack(f"<{n}f", got)
            if any(f32_bytes(float(a)) != struct.pack("<f", b) for a, b in zip(want, have)):
                fail(f"{path}: {w['name']} values differ from the reference")
        elif got != ref:
            if w["type"] == "F16" and w["ref_nan_count"]:
                g = struct.unpack(f"<{len(got) // 4}f", got)
                e = struct.unpack(f"<{len(ref) // 4}f", ref)
                if all((math.isnan(a) and math.isnan(b)) or struct.pack("<f", a) == struct.pack("<f", b)
                       for a, b in zip(g, e)):
                    count += 1
                    continue
            fail(f"{path}: {w['name']} ({w['type']}) dequantizes to different bytes")
        count += 1
        lattice += w["type"] in LATTICE
    return count, lattice


def main():
    accel, gguf_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(gguf_dir, "manifest.json")) as f:
        manifest = json.load(f)
    checked = dequantized = lattice = rejected = 0
    with tempfile.TemporaryDirectory() as work:
        for entry in manifest["files"]:
            path = os.path.join(gguf_dir, entry["file"])
            if entry["expect"] == "ok":
                check_json(accel, gguf_dir, entry)
                check_table(accel, gguf_dir, entry)
                n, n_lattice = check_dequantize(accel, gguf_dir, entry, work)
                dequantized += n
                lattice += n_lattice
                checked += 1
            else:
                r = run(accel, "inspect", path)
                allowed = (1,) if entry["expect"] == "reject" else (0, 1)
                if r.returncode not in allowed:
                    fail(f"{path}: exit {r.returncode} (allowed {allowed}): {r.stderr}")
                if r.returncode == 1:
                    if os.path.basename(path) not in r.stderr:
                        fail(f"{path}: the error does not name the file: {r.stderr}")
                    rejected += 1
    if checked < 30 or dequantized < 60 or lattice < 2 * len(LATTICE):
        fail(f"only {checked} files and {dequantized} tensors ({lattice} of the lattice IQ types) checked")
    print(f"ok: {checked} GGUF files inspected, {dequantized} tensors dequantized byte for byte "
          f"({lattice} of the lattice IQ types), {rejected} files refused")


if __name__ == "__main__":
    main()
