#!/usr/bin/env python3
"""PyTorch's side of bench_gpu_quant: the same products through torch (and bitsandbytes when it is
installed), timed the same way (medians of --reps runs of --iters back-to-back calls).

    python3 bench_gpu_quant.py [--m 4096] [--k 4096,14336] [--n 1,16] [--iters 100] [--reps 5]

Rows: torch bf16 F.linear (cuBLAS through PyTorch), bitsandbytes NF4 (bnb.matmul_4bit, its GEMV
for one row) and LLM.int8 (bnb.matmul with threshold 6) when `import bitsandbytes` works.
"""
import argparse
import time

import torch


def per_call(f, iters, reps):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) / iters)
    runs.sort()
    return runs[len(runs) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--k", default="4096,14336")
    ap.add_argument("--n", default="1,16")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    try:
        import bitsandbytes as bnb
        import bitsandbytes.functional as bf
    except Exception as e:  # noqa: BLE001 - any import failure means "not installed here"
        bnb = None
        print(f"bitsandbytes: not available ({type(e).__name__}: {e})")
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}" + (f"; bitsandbytes {bnb.__version__}" if bnb else ""))
    print(f"{'m':6} {'k':6} {'n':3} {'weight':14} {'us/call':>10}")
    for k in map(int, a.k.split(",")):
        w = torch.empty(a.m, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
        rows = [("torch bf16", lambda x: torch.nn.functional.linear(x, w))]
        if bnb:
            q4, st4 = bf.quantize_4bit(w, quant_type="nf4")
            rows.append(("bnb NF4", lambda x: bnb.matmul_4bit(x, q4.t(), quant_state=st4)))
            lin8 = bnb.nn.Linear8bitLt(k, a.m, bias=False, has_fp16_weights=False, threshold=6.0)
            lin8.weight = bnb.nn.Int8Params(w.cpu().half(), requires_grad=False, has_fp16_weights=False)
            lin8 = lin8.cuda()
            rows.append(("bnb int8", lambda x: lin8(x.half())))
        for n in map(int, a.n.split(",")):
            x = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
            for name, f in rows:
                try:
                    s = per_call(lambda: f(x), a.iters, a.reps)
                    print(f"{a.m:<6} {k:<6} {n:<3} {name:14} {s * 1e6:10.1f}")
                except Exception as e:  # noqa: BLE001
                    print(f"{a.m:<6} {k:<6} {n:<3} {name:14} failed: {e}")


if __name__ == "__main__":
    main()
