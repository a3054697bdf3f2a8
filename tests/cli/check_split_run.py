#!/usr/bin/env python3
"""Checks `mpirun -np N accel run`: the model split across N processes.

Usage: check_split_run.py MPIRUN ACCEL MODELS_DIR WORK_DIR
  For N = 2 and 3, on a 20-layer LLaMA written here (check_run.write_llama):
  - a budget per process of a share of the weights: the plan uses every process, each holds what
    its budget allows (allocator peak with --disable-mmap, so the weights count), and the tokens
    are the unrestricted single-process run's (--check);
  - a budget too small for the model: the rest goes to disk on the last process, same tokens;
  - sequential fills process 0 first;
  then GPT-2 from a split-map file naming processes; the LLaMA quantized on load (bitsandbytes
  nf4 and int8, GGUF q8_0, TorchAO int4) across 2 processes, each holding its own quantized blocks,
  with the single-process quantized run's tokens; folders saved by `accel quantize` (bitsandbytes
  nf4, Quanto int8) and a Q8_0 GGUF file across 2 processes with one process's tokens; and the
  usage errors.
"""
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import check_run  # noqa: E402  (write_llama, weight_bytes)

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def split_run(mpirun, n, accel, *args):
    cmd = [mpirun, "--oversubscribe", "--allow-run-as-root", "-np", str(n), accel, "run", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})


def as_json(proc, what):
    check(proc.returncode == 0, f"{what}: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        check(False, f"{what}: stdout is not one JSON object: {proc.stdout[:300]!r}")
        return {}


def ranks_of(out):
    return {int(v.split(":")[0][4:]) for v in out.get("split_map", {}).values()}


def main():
    mpirun, accel, models, work = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
    work.mkdir(parents=True, exist_ok=True)
    folder = work / "llama20"
    if not (folder / "model.safetensors").exists():
        check_run.write_llama(folder)
    total = check_run.weight_bytes(folder)
    ids = "5,17,3,99,42"
    for n in (2, 3):
        budget = int(total * 0.75 / n) + 300_000
        what = f"-np {n} cpu={budget}"
        out = as_json(split_run(mpirun, n, accel, folder, "--ids", ids, "--max-new-tokens", 10, "--max-memory",
                                f"cpu={budget}", "--disable-mmap", "--check", "--json"), what)
        check(out.get("processes") == n, f"{what}: processes {out.get('processes')}")
        check(out.get("check", {}).get("identical") is True, f"{what}: tokens {out.get('check')}")
        check(ranks_of(out) == set(range(n)), f"{what}: every process holds blocks: {out.get('split_map')}")
        placed = out.get("placed_bytes", {})
        check(any(k.endswith(":disk") for k in placed), f"{what}: a share of 3/4 leaves blocks on disk: {placed}")
        check(all(k == f"rank{n - 1}:disk" for k in placed if k.endswith(":disk")), f"{what}: disk on the last process: {placed}")
        for r in range(n):
            peak = out.get("peak_bytes", {}).get(f"rank{r}:cpu", budget + 1)
            check(peak <= budget, f"{what}: process {r} peak {peak} <= {budget}")
            check(placed.get(f"rank{r}:cpu", 0) <= budget, f"{what}: process {r} holds {placed.get(f'rank{r}:cpu')}")
        pipe = out.get("pipeline", {})
        check(pipe.get("broadcasts", 0) >= 10 and pipe.get("transfers", 0) > 0, f"{what}: pipeline {pipe}")

        roomy = as_json(split_run(mpirun, n, accel, folder, "--ids", ids, "--max-new-tokens", 10, "--max-memory",
                                  f"cpu={total * 4}", "--device-map", "sequential", "--json"), f"-np {n} sequential")
        check(ranks_of(roomy) == {0}, f"-np {n} sequential: process 0 holds all: {roomy.get('split_map')}")
        check(roomy.get("generated_ids") == out.get("generated_ids"), f"-np {n} sequential: same tokens")

    # GPT-2 from a file that names processes (the embeddings together: GPT-2 adds their outputs).
    gpt2 = models / "tiny_gpt2"
    ref = json.loads((gpt2 / "reference.json").read_text())
    expected = ref.get("greedy_new_tokens_cached", ref["greedy_new_tokens"])
    split = {"transformer.wte": "rank0:cpu", "transformer.wpe": "rank0:cpu"}
    for i in range(json.loads((gpt2 / "config.json").read_text())["n_layer"]):
        split[f"transformer.h.{i}"] = f"rank{(i + 1) % 2}:cpu"
    split.update({"transformer.ln_f": "rank1:cpu", "lm_head": "rank0:cpu"})
    (work / "gpt2_split.json").write_text(json.dumps(split))
    out = as_json(split_run(mpirun, 2, accel, gpt2, "--ids", ",".join(map(str, ref["prompt_ids"])), "--max-new-tokens",
                            len(expected), "--device-map", work / "gpt2_split.json", "--json"), "gpt2 split file")
    check(out.get("generated_ids") == expected, f"gpt2 split file: {out.get('generated_ids')} != {expected}")

    # Quantized on load across processes: the same tokens as one process quantizing the same way,
    # every process holding blocks, and together less than the float weights.
    for scheme in ("nf4", "int8", "q8_0", "int4-g32"):
        what = f"-np 2 --quantize {scheme}"
        one = subprocess.run([accel, "run", str(folder), "--ids", ids, "--max-new-tokens", "10", "--quantize", scheme,
                              "--json"], capture_output=True, text=True, timeout=240,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        single = as_json(one, f"--quantize {scheme} in one process")
        budget = int(total * 0.35)
        out = as_json(split_run(mpirun, 2, accel, folder, "--ids", ids, "--max-new-tokens", 10, "--quantize", scheme,
                                "--max-memory", f"cpu={budget}", "--disable-mmap", "--json"), what)
        check(out.get("processes") == 2, f"{what}: processes {out.get('processes')}")
        check(out.get("generated_ids") == single.get("generated_ids"),
              f"{what}: {out.get('generated_ids')} != one process's {single.get('generated_ids')}")
        check(ranks_of(out) == {0, 1}, f"{what}: every process holds blocks: {out.get('split_map')}")
        placed = out.get("placed_bytes", {})
        check(not any(k.endswith(":disk") for k in placed), f"{what}: quantized, the model fits without disk: {placed}")
        held = sum(v for k, v in placed.items() if k.endswith(":cpu"))
        check(0 < held < 0.5 * total, f"{what}: {held} bytes held of {total} float")
        for r in range(2):
            peak = out.get("peak_bytes", {}).get(f"rank{r}:cpu", budget + 1)
            check(peak <= budget, f"{what}: process {r} peak {peak} <= {budget}")

    # Saved quantized (bitsandbytes and Quanto folders, a Q8_0 GGUF file), then split: the same
    # tokens as one process reading the same files.
    for scheme, out_name in (("nf4", "llama20_nf4"), ("quanto-int8", "llama20_quanto"), ("q8_0", "llama20_q8_0.gguf")):
        saved = work / out_name
        what = f"-np 2 on a file saved {scheme}"
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        q = subprocess.run([accel, "quantize", str(folder), str(saved), "--scheme", scheme, "--quiet"], capture_output=True,
                           text=True, timeout=240, env=env)
        check(q.returncode == 0, f"{what}: quantize exit {q.returncode}: {q.stderr.strip()[-500:]}")
        single = as_json(subprocess.run([accel, "run", str(saved), "--ids", ids, "--max-new-tokens", "10", "--json"],
                                        capture_output=True, text=True, timeout=240, env=env), f"{what}, one process")
        out = as_json(split_run(mpirun, 2, accel, saved, "--ids", ids, "--max-new-tokens", 10, "--max-memory",
                                f"cpu={int(total * 0.35)}", "--json"), what)
        check(single.get("quantization") is not None and out.get("quantization") is not None,
              f"{what}: loaded through its quantizer: {single.get('quantization')} / {out.get('quantization')}")
        check(out.get("generated_ids") == single.get("generated_ids"),
              f"{what}: {out.get('generated_ids')} != one process's {single.get('generated_ids')}")
        check(ranks_of(out) == {0, 1}, f"{what}: every process holds blocks: {out.get('split_map')}")

    bad = split_run(mpirun, 2, accel, gpt2, "--ids", "1,2", "--device-map", "balanced_low_0")
    check(bad.returncode == 2 and "balanced_low_0" in bad.stderr, f"balanced_low_0 across processes: {bad.stderr.strip()[-500:]}")
    (work / "unranked.json").write_text(json.dumps({"": "cpu"}))
    bad = split_run(mpirun, 2, accel, gpt2, "--ids", "1,2", "--device-map", work / "unranked.json")
    check(bad.returncode == 1 and "rank" in bad.stderr, f"a map without processes: {bad.stderr.strip()[-500:]}")

    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("split run: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
