#!/usr/bin/env python3
"""Decode and prefill tokens/s of GGUF files run as they are: `accel run FILE.gguf` next to
llama.cpp's llama-bench (and, when given, ik_llama.cpp's) on the same file, interleaved in one run
(file by file, repetition by repetition, so a slow minute of a shared machine falls on all), 2
threads each.

  python3 benchmarks/bench_gguf_decode.py --accel build/tools/accel --llama-bench PATH \\
      [--ik-llama-bench PATH [--rtr]] [--reps 3] [--tokens 32] [--prompt 64] [--phase both] \\
      [--tier T] [--json] FILE.gguf [FILE.gguf ...]

--tier caps accel's CPU kernels at one tier (ACCEL_CPU_ARCH: scalar, avx2, avx512, avx512_vnni,
avx512_bf16); give peers built for the same tier (for AVX2: -DGGML_NATIVE=OFF -DGGML_AVX2=ON
-DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF and the other AVX-512 switches off). The report
names the tier accel ran at.

decode: `accel run FILE --ids 1..8 --max-new-tokens N --json`, its tokens_per_s (the decode after
the first token); `llama-bench -m FILE -p 0 -n N -t 2 -r 1`, its avg_ts.
prefill: `accel run FILE --ids <P ids> --max-new-tokens 1 --json`, P / ttft_s (the prompt's
forward and the first token); `llama-bench -m FILE -p P -n 0 -t 2 -r 1`, its avg_ts.
OMP_NUM_THREADS=2 for accel. --rtr runs ik_llama.cpp with -rtr 1 (its weights repacked into
interleaved rows at load). Prints each file's medians and the ratios (above 1: accel is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def accel_run(accel, gguf, ids, tokens, tier, extra=()):
    """`accel run` of a GGUF file or model folder (`extra`: more options) as JSON."""
    env = dict(os.environ, OMP_NUM_THREADS="2")
    if tier:
        env["ACCEL_CPU_ARCH"] = tier
    out = subprocess.run([accel, "run", gguf, *extra, "--ids", ",".join(map(str, ids)), "--max-new-tokens", str(tokens),
                          "--json"], capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"accel run {gguf}: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout)


def accel_rate(accel, gguf, phase, a):
    """(tokens/s, the CPU tier that ran)."""
    if phase == "decode":
        j = accel_run(accel, gguf, range(1, 9), a.tokens, a.tier)
        return j["tokens_per_s"], j.get("cpu_tier", "?")
    j = accel_run(accel, gguf, [1 + 7 * i % 500 for i in range(a.prompt)], 1, a.tier)
    return a.prompt / j["ttft_s"], j.get("cpu_tier", "?")


def bench_rate(llama_bench, gguf, phase, a, extra=()):
    p, n = (0, a.tokens) if phase == "decode" else (a.prompt, 0)
    out = subprocess.run([llama_bench, "-m", gguf, "-p", str(p), "-n", str(n), "-t", "2", "-r", "1", "-o", "json", *extra],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{llama_bench} {gguf}: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout)[0]["avg_ts"]  # -o json: ik_llama.cpp's llama-bench has no jsonl


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--accel", required=True)
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--ik-llama-bench", default="")
    p.add_argument("--rtr", action="store_true")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--phase", choices=("decode", "prefill", "both"), default="both")
    p.add_argument("--tier", default="")
    p.add_argument("--json", action="store_true")
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    phases = ("decode", "prefill") if a.phase == "both" else (a.phase,)
    peers = [("llama.cpp", a.llama_bench, ())]
    if a.ik_llama_bench:
        peers.append(("ik_llama.cpp" + (" -rtr" if a.rtr else ""), a.ik_llama_bench, ("-rtr", "1") if a.rtr else ()))
    runs = {(f, ph, who): [] for f in a.files for ph in phases for who in ["accel"] + [n for n, _, _ in peers]}
    tier = "?"
    for rep in range(a.reps):
        for f in a.files:
            for ph in phases:
                rate, tier = accel_rate(a.accel, f, ph, a)
                runs[(f, ph, "accel")].append(rate)
                line = f"rep {rep + 1} {os.path.basename(f)} {ph}: accel {rate:.1f}"
                for name, path, extra in peers:
                    runs[(f, ph, name)].append(bench_rate(path, f, ph, a, extra))
                    line += f", {name} {runs[(f, ph, name)][-1]:.1f}"
                print(line + " tokens/s", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    if a.json:
        print(json.dumps({"cpu_tier": tier, "reps": a.reps, "decode_tokens": a.tokens, "prompt_tokens": a.prompt,
                          "rows": [{"file": os.path.basename(f), "phase": ph, "tokens_per_s": {w: med[(f, ph, w)] for w in
                                    ["accel"] + [n for n, _, _ in peers]}} for f in a.files for ph in phases]}, indent=1))
        return
    print(f"2 threads, accel's CPU tier {tier}, medians of {a.reps}; decode: {a.tokens} tokens after 8, "
          f"prefill: a {a.prompt}-token prompt")
    head = f"{'file':28} {'phase':8} {'accel t/s':>10}"
    for name, _, _ in peers:
        head += f" {name:>17} {'ratio':>6}"
    print(head)
    for f in a.files:
        for ph in phases:
            o = med[(f, ph, "accel")]
            row = f"{os.path.basename(f):28} {ph:8} {o:10.1f}"
            for name, _, _ in peers:
                t = med[(f, ph, name)]
                row += f" {t:17.1f} {o / t:5.2f}x"
            print(row)


if __name__ == "__main__":
    main()
