#!/usr/bin/env python3
"""bitsandbytes quantization on load against the bf16 model it came from: decode tokens/s of
`accel run DIR`, `accel run DIR --quantize nf4` and `accel run DIR --quantize int8`, interleaved
in one run (round by round, tier by tier, so a slow minute of a shared machine falls on all), 2
threads, and the ratios to bf16 beside the goals (NF4 2.0x, int8 1.5x: they read 2.5x and 1.7x
fewer bytes per token of the 483M anchor model).

  python3 benchmarks/bench_bnb_decode.py --accel build/tools/accel [--reps 3] [--tokens 32] \\
      [--tiers avx512_bf16,avx2,...] [--json] MODEL_DIR

MODEL_DIR: a Hugging Face bf16 folder; `bench_decode --dtype bfloat16 --folder DIR` writes the
483M anchor model as one. --tiers caps accel's CPU kernels at each tier in turn (ACCEL_CPU_ARCH;
default: the machine's own); a tier the machine lacks is reported and skipped. Prints the median
of each (tier, scheme) and the ratios.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gguf_decode import accel_run  # noqa: E402

SCHEMES = (("bf16", ()), ("nf4", ("--quantize", "nf4")), ("int8", ("--quantize", "int8")))
GOALS = {"nf4": 2.0, "int8": 1.5}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--accel", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--tiers", default="")
    p.add_argument("--json", action="store_true")
    p.add_argument("model_dir")
    a = p.parse_args()
    tiers = [t for t in a.tiers.split(",") if t] or [""]
    runs = {}
    ran = {}
    for rep in range(a.reps):
        for tier in tiers:
            if ran.get(tier) == "skip":
                continue
            for name, extra in SCHEMES:
                j = accel_run(a.accel, a.model_dir, range(1, 9), a.tokens, tier, extra)
                got = j.get("cpu_tier", "?")
                if tier and got != tier:
                    print(f"tier {tier}: this machine runs {got} at most; skipped", file=sys.stderr)
                    ran[tier] = "skip"
                    break
                ran[tier] = got
                runs.setdefault((tier, name), []).append(j["tokens_per_s"])
                print(f"rep {rep + 1} {got} {name}: {j['tokens_per_s']:.1f} tokens/s", file=sys.stderr)
    rows = []
    for tier in tiers:
        if ran.get(tier) in (None, "skip"):
            continue
        med = {name: statistics.median(runs[(tier, name)]) for name, _ in SCHEMES}
        rows.append({"cpu_tier": ran[tier], "tokens_per_s": med,
                     "ratio_to_bf16": {k: med[k] / med["bf16"] for k in GOALS}})
    out = sys.stderr if a.json else sys.stdout
    print(f"decode of {a.tokens} tokens after 8, 2 threads, medians of {a.reps} interleaved rounds", file=out)
    print(f"{'tier':14} {'bf16':>8} {'nf4':>8} {'int8':>8}   nf4/bf16 (goal 2.0)  int8/bf16 (goal 1.5)", file=out)
    for r in rows:
        t, q = r["tokens_per_s"], r["ratio_to_bf16"]
        print(f"{r['cpu_tier']:14} {t['bf16']:8.1f} {t['nf4']:8.1f} {t['int8']:8.1f}   {q['nf4']:.2f}x"
              f"{'' if q['nf4'] >= 2.0 else ' (short)':8}            {q['int8']:.2f}x{'' if q['int8'] >= 1.5 else ' (short)'}",
              file=out)
    if a.json:
        print(json.dumps({"model_dir": a.model_dir, "reps": a.reps, "tokens": a.tokens, "rows": rows}))


if __name__ == "__main__":
    main()
