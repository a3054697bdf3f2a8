#!/usr/bin/env python3
"""Decode tokens/s of GGUF files run as they are: `accel run FILE.gguf` next to llama.cpp's
llama-bench on the same file, interleaved in one run (file by file, repetition by repetition, so
a slow minute of a shared machine falls on both), 2 threads each.

  python3 benchmarks/bench_gguf_decode.py --accel build/tools/accel --llama-bench PATH \\
      [--reps 3] [--tokens 32] [--tier T] FILE.gguf [FILE.gguf ...]

--tier caps accel's CPU kernels at one tier (ACCEL_CPU_ARCH: scalar, avx2, avx512, avx512_vnni,
avx512_bf16); give a llama-bench built for the same tier (for AVX2: -DGGML_NATIVE=OFF -DGGML_AVX2=ON
-DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF). The report names the tier accel ran at.

accel: `accel run FILE --ids 1..8 --max-new-tokens N --json`, its tokens_per_s (the decode after
the first token; OMP_NUM_THREADS=2). llama.cpp: `llama-bench -m FILE -p 0 -n N -t 2 -r 1`, its
avg_ts. Prints each file's medians and the ratio (above 1: accel is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def accel_rate(accel, gguf, tokens, tier):
    """(tokens/s, the CPU tier that ran)."""
    env = dict(os.environ, OMP_NUM_THREADS="2")
    if tier:
        env["ACCEL_CPU_ARCH"] = tier
    out = subprocess.run([accel, "run", gguf, "--ids", "1,2,3,4,5,6,7,8", "--max-new-tokens", str(tokens), "--json"],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"accel run {gguf}: {out.stderr.strip()[-300:]}")
    j = json.loads(out.stdout)
    return j["tokens_per_s"], j.get("cpu_tier", "?")


def llama_rate(llama_bench, gguf, tokens):
    out = subprocess.run([llama_bench, "-m", gguf, "-p", "0", "-n", str(tokens), "-t", "2", "-r", "1", "-o", "jsonl"],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"llama-bench {gguf}: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout.splitlines()[0])["avg_ts"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--accel", required=True)
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--tier", default="")
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    ours = {f: [] for f in a.files}
    theirs = {f: [] for f in a.files}
    tier = "?"
    for rep in range(a.reps):
        for f in a.files:
            rate, tier = accel_rate(a.accel, f, a.tokens, a.tier)
            ours[f].append(rate)
            theirs[f].append(llama_rate(a.llama_bench, f, a.tokens))
            print(f"rep {rep + 1} {os.path.basename(f)}: accel {ours[f][-1]:.1f}, llama.cpp {theirs[f][-1]:.1f} tokens/s",
                  file=sys.stderr, flush=True)
    print(f"decode of {a.tokens} tokens, 2 threads, accel's CPU tier {tier}, medians of {a.reps}")
    print(f"{'file':34} {'accel tokens/s':>15} {'llama.cpp':>10} {'ratio':>7}")
    for f in a.files:
        o, t = statistics.median(ours[f]), statistics.median(theirs[f])
        print(f"{os.path.basename(f):34} {o:15.1f} {t:10.1f} {o / t:6.2f}x")


if __name__ == "__main__":
    main()
