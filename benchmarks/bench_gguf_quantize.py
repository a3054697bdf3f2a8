#!/usr/bin/env python3
"""Seconds to write a quantized GGUF file: `accel quantize DIR OUT.gguf --scheme S` from a Hugging
Face folder, next to llama.cpp's `llama-quantize IN.gguf OUT.gguf TYPE 2` from the same weights as a
GGUF file, interleaved in one run (scheme by scheme, repetition by repetition), 2 threads each.

  python3 benchmarks/bench_gguf_quantize.py --accel build/tools/accel --llama-quantize PATH \\
      [--schemes q8_0,q4_k_m,iq4_xs] [--source bf16] [--reps 3] [--work DIR] [--json] MODEL_DIR

llama.cpp's own route from a folder is convert_hf_to_gguf.py (to F16 / BF16 / F32), then
llama-quantize; only the second step is timed here. Its input, IN.gguf, is written once, before the
runs, by `accel quantize DIR IN.gguf --scheme SOURCE` (bf16 by default: a bfloat16 folder's values
exactly, so both programs quantize the same numbers). accel's time includes reading the folder's
safetensors; llama-quantize's includes reading IN.gguf; both write their output to --work (default: a
temporary folder). Prints per scheme the medians, the ratio (above 1: accel is faster) and the
files' sizes, and, when llama.cpp's gguf-py imports (--gguf-py PATH: its folder), how many tensors
the two files hold byte for byte the same (their order and the metadata's differ: llama-quantize keeps
its input's order). OMP_NUM_THREADS=2 for accel; llama-quantize gets nthread 2.

A model folder: any LLaMA / Mistral / Qwen2 / GPT-2 folder, or the built-in default model, which
`accel run --max-new-tokens 1` writes into ~/.cache/accel/default-model-v1 (155M parameters).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LLAMA_TYPE = {"f16": "F16", "bf16": "BF16", "f32": "F32", "q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1", "q5_0": "Q5_0",
              "q5_1": "Q5_1", "q4_k_s": "Q4_K_S", "q4_k_m": "Q4_K_M", "q5_k_s": "Q5_K_S", "q5_k_m": "Q5_K_M",
              "q6_k": "Q6_K", "iq4_nl": "IQ4_NL", "iq4_xs": "IQ4_XS"}


def timed(cmd, env=None):
    """Seconds that `cmd` ran; an error names the command and the end of its stderr."""
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[-400:]}")
    return seconds


def same_tensors(ours, theirs):
    """'K of N' tensors with the same type and bytes under the same name, or None without gguf-py."""
    try:
        import gguf  # llama.cpp's gguf-py
    except ImportError:
        return None
    a = {t.name: t for t in gguf.GGUFReader(ours).tensors}
    b = {t.name: t for t in gguf.GGUFReader(theirs).tensors}
    same = sum(1 for n, t in a.items() if n in b and t.tensor_type == b[n].tensor_type and
               t.data.tobytes() == b[n].data.tobytes())
    return f"{same} of {max(len(a), len(b))}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--accel", required=True)
    p.add_argument("--llama-quantize", required=True)
    p.add_argument("--schemes", default="q8_0,q4_k_m,iq4_xs")
    p.add_argument("--source", choices=("bf16", "f16", "f32"), default="bf16")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--work", default="")
    p.add_argument("--gguf-py", default="")
    p.add_argument("--json", action="store_true")
    p.add_argument("model")
    a = p.parse_args()
    if a.gguf_py:
        sys.path.insert(0, a.gguf_py)
    schemes = [s.strip().lower() for s in a.schemes.split(",") if s.strip()]
    unknown = [s for s in schemes if s not in LLAMA_TYPE]
    if unknown:
        sys.exit(f"bench_gguf_quantize: unknown scheme {unknown[0]}; expected one of {', '.join(LLAMA_TYPE)}")
    work = a.work or tempfile.mkdtemp(prefix="accel-quantize-bench-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    source = os.path.join(work, f"source-{a.source}.gguf")
    timed([a.accel, "quantize", a.model, source, "--scheme", a.source, "--quiet"], env)
    runs = {(s, who): [] for s in schemes for who in ("accel", "llama.cpp")}
    sizes = {}
    for rep in range(a.reps):
        for s in schemes:
            ours, theirs = os.path.join(work, f"accel-{s}.gguf"), os.path.join(work, f"llama-{s}.gguf")
            runs[(s, "accel")].append(timed([a.accel, "quantize", a.model, ours, "--scheme", s, "--quiet"], env))
            runs[(s, "llama.cpp")].append(timed([a.llama_quantize, source, theirs, LLAMA_TYPE[s], "2"]))
            sizes[s] = (os.path.getsize(ours), os.path.getsize(theirs))
            print(f"rep {rep + 1} {s}: accel {runs[(s, 'accel')][-1]:.2f} s, llama-quantize {runs[(s, 'llama.cpp')][-1]:.2f} s",
                  file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    same = {s: same_tensors(os.path.join(work, f"accel-{s}.gguf"), os.path.join(work, f"llama-{s}.gguf")) for s in schemes}
    if a.json:
        print(json.dumps({"model": a.model, "source": a.source, "reps": a.reps,
                          "rows": [{"scheme": s, "seconds": {w: med[(s, w)] for w in ("accel", "llama.cpp")},
                                    "bytes": {"accel": sizes[s][0], "llama.cpp": sizes[s][1]},
                                    "identical_tensors": same[s]} for s in schemes]}, indent=1))
    else:
        print(f"{a.model}: 2 threads, medians of {a.reps}; llama-quantize reads a {a.source.upper()} GGUF of the folder")
        print(f"{'scheme':8} {'accel s':>9} {'llama-quantize s':>17} {'ratio':>6} {'bytes (accel / llama.cpp)':>26}  "
              "identical tensors")
        for s in schemes:
            o, t = med[(s, "accel")], med[(s, "llama.cpp")]
            print(f"{s:8} {o:9.2f} {t:17.2f} {t / o:5.2f}x {sizes[s][0]:>12} / {sizes[s][1]:<12}  " +
                  (same[s] or "not compared (llama.cpp's gguf-py, or what it imports, is missing: --gguf-py PATH)"))


if __name__ == "__main__":
    main()
