#!/usr/bin/env python3
"""`accel estimate-memory` and `accel plan` on models whose sizes reach what a byte count holds.

    check_huge_sizes.py ACCEL WORK_DIR

Sizes are counted in eighths of a byte in 64 bits, so about 2^60 bytes is the most a size holds.
A model past that must be refused with exit status 1 and a message that names the tensor (one
tensor too large) or the module (layers that fit one by one but not together), never printed
with wrapped, negative byte counts. A model just below it must be sized and planned, and its
largest layer must never exceed its total.
"""

import json
import os
import re
import subprocess
import sys

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def llama_config(**fields):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 64,
         "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 1, "num_key_value_heads": 1,
         "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "torch_dtype": "float32"}
    c.update(fields)
    return c


def write(work, name, obj):
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "config.json" if "model_type" in obj else "spec.json")
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def run(accel, *args):
    p = subprocess.run([accel, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def expect_refused(accel, what, args, names):
    rc, out, err = run(accel, *args)
    check(rc == 1, f"{what}: exit {rc}, wanted 1\n{out}\n{err}")
    check(out == "", f"{what}: printed a result for a model it cannot size:\n{out}")
    check(names in err, f"{what}: the error does not name '{names}':\n{err}")
    check("2^60 bytes" in err, f"{what}: the error does not say what overflowed:\n{err}")
    check(not re.search(r"(?<![\w.])-\d", err), f"{what}: a negative number in the error:\n{err}")


def main():
    accel, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)

    # One tensor past the limit: 4096 heads of 2^24 dimensions make a q_proj of 2^60 float32
    # elements, 2^62 bytes (every config field is within the bounds the config reader accepts).
    one = write(work, "one_huge_tensor", llama_config(num_attention_heads=4096, head_dim=2**24, hidden_size=2**24,
                                                      intermediate_size=16, num_hidden_layers=1))
    expect_refused(accel, "estimate-memory, one huge tensor", ["estimate-memory", one],
                   "'layers.0.self_attn.q_proj.weight'")
    expect_refused(accel, "plan, one huge tensor", ["plan", one, "--max-memory", "0=1GB,cpu=1GB"],
                   "'model.layers.0.self_attn.q_proj.weight'")

    # Layers of 7.9 * 10^15 bytes each fit one by one; 200 of them do not fit one count.
    many = write(work, "many_huge_layers", llama_config(hidden_size=2**24, intermediate_size=2**24,
                                                        num_hidden_layers=200))
    expect_refused(accel, "estimate-memory, many huge layers", ["estimate-memory", many], "module 'layers'")
    expect_refused(accel, "plan, many huge layers", ["plan", many, "--max-memory", "0=1GB"], "module 'model.layers'")
    expect_refused(accel, "plan --balanced, many huge layers",
                   ["plan", many, "--max-memory", "0=1GB,1=1GB", "--balanced"], "module 'model.layers'")

    # A model spec: the path of the tensor, however deep.
    spec = write(work, "spec_huge_tensor", {
        "format": "accelerate-oracle-spec/v1",
        "root": {"name": "", "class": "M", "children": [
            {"name": "blocks", "class": "List", "children": [
                {"name": "0", "class": "Block", "params": [{"name": "w", "shape": [4, 4]}]},
                {"name": "1", "class": "Block", "children": [
                    {"name": "proj", "class": "Linear", "params": [{"name": "weight", "shape": [10**9, 10**9],
                                                                      "dtype": "float16"}]}]}]}]}})
    expect_refused(accel, "plan, spec", ["plan", spec, "--max-memory", "cpu=1GB"], "'blocks.1.proj.weight'")

    # Just below the limit (about 2 * 10^15 bytes): sized and planned, largest layer <= total.
    big = write(work, "big_but_countable", llama_config(hidden_size=1_000_000, intermediate_size=3_000_000,
                                                        num_hidden_layers=40, num_attention_heads=8,
                                                        num_key_value_heads=8))
    rc, out, err = run(accel, "estimate-memory", big, "--json")
    check(rc == 0, f"estimate-memory --json on a big model: exit {rc}\n{err}")
    if rc == 0:
        rows = json.loads(out)["rows"]
        check(len(rows) == 5, f"estimate-memory rows: {rows}")
        for r in rows:
            check(0 < r["largest_layer"] <= r["total_size"], f"estimate-memory {r['dtype']}: largest layer {r}")
            check(r["training_adam"] is None or r["training_adam"] >= r["total_size"], f"training column {r}")
        check(rows[0]["total_size"] > 10**15, f"float32 total {rows[0]['total_size']}")
    rc, out, err = run(accel, "estimate-memory", big)
    check(rc == 0 and not re.search(r"(?<![\w.])-\d", out), f"estimate-memory table on a big model:\n{out}\n{err}")
    rc, out, err = run(accel, "plan", big, "--max-memory", "0=100000000000000,cpu=1000000000000000", "--json")
    check(rc == 0, f"plan on a big model: exit {rc}\n{err}")
    if rc == 0:
        dm = json.loads(out)
        check(set(dm.values()) <= {0, "cpu", "disk"} and "model.embed_tokens" in dm, f"plan on a big model: {dm}")
    rc, out, err = run(accel, "plan", big, "--max-memory", "0=100000000000000,cpu=1000000000000000")
    check(rc == 0 and not re.search(r"(?<![\w.])-\d", out), f"plan table on a big model:\n{out}\n{err}")

    if failures:
        sys.exit(f"{len(failures)} failed")
    print("all passed")


if __name__ == "__main__":
    main()
