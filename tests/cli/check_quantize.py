#!/usr/bin/env python3
"""Checks `accel quantize` and `accel run --quantize` on the reference model folders.

Usage: check_quantize.py ACCEL MODELS_DIR WORK_DIR
  For tiny_llama and tiny_gpt2, each of nf4, nf4 + double quantization, fp4 and int8:
  - `accel quantize IN OUT --scheme S` writes transformers' layout: config.json with bitsandbytes'
    quantization_config, model.safetensors with each quantized weight's state tensors beside it
    (4-bit: packed uint8 [n/2, 1], absmax, quant_map, nested_* with double quantization, the
    quant_state JSON tensor; int8: int8 weight, SCB, weight_format), fewer bytes for 4-bit;
  - `accel run OUT` gives the tokens of `accel run IN --quantize S` (the saved folder is the
    model quantized on load);
  - `accel inspect OUT --json` lists every quantized weight with its scheme and logical shape, and
    `accel inspect OUT --dequantize W --out F` writes W in its logical shape, near the float weight;
  each Quanto type: `accel quantize --scheme quanto-T` writes Diffusers' layout (optimum-quanto's
  tensors, quantization_config with quant_method quanto) and `accel run OUT` runs it as stored
  (int8: the float model's greedy tokens);
  `accel run --quantize` with the GGUF and TorchAO schemes: the 8-bit ones (q8_0, fp8) give the
  float model's greedy tokens, the 4-bit ones (q4_0, int4-g128, int4-g32) quantize layers and
  generate (their logit bounds are the library tests'), placed across CPU and disk they give the
  in-memory tokens with the CPU within its budget, q4_k on a model without 256-wide rows says it
  ran unquantized;
  then the usage and input errors, and a damaged quant state named with file and tensor.
"""
import json
import math
import pathlib
import struct
import shutil
import subprocess
import sys
from cli_checks import FAILURES, check, accel, as_json


def header(path):
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n])


def f32_tensor(path, name):
    """A float32 tensor of a safetensors file, flat."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    e = json.loads(raw[8:8 + n])[name]
    a, b = e["data_offsets"]
    data = raw[8 + n + a:8 + n + b]
    return list(struct.unpack(f"<{len(data) // 4}f", data)), e["shape"]


def inspect_checks(binary, src, out, tag, scheme, dq, layers):
    listing = as_json(accel(binary, "inspect", out, "--json"), f"{tag}: inspect")
    bnb = listing.get("bitsandbytes", [])
    check(len(bnb) == layers, f"{tag}: inspect lists {len(bnb)} quantized weights, {layers} layers were quantized")
    h = header(src / "model.safetensors")
    for w in bnb:
        check(w.get("scheme") == scheme and w.get("double_quant") == dq, f"{tag}: inspect {w}")
        check(w.get("shape") == h.get(w.get("name"), {}).get("shape"), f"{tag}: {w.get('name')}: logical shape {w.get('shape')}")
    if not bnb:
        return
    name = bnb[0]["name"]
    f = out / "w.f32"
    done = accel(binary, "inspect", out / "model.safetensors", "--dequantize", name, "--out", f)
    check(done.returncode == 0, f"{tag}: --dequantize {name}: {done.stderr.strip()}")
    want, shape = f32_tensor(src / "model.safetensors", name)
    got = list(struct.unpack(f"<{len(want)}f", f.read_bytes())) if f.is_file() and f.stat().st_size == 4 * len(want) else []
    check(len(got) == len(want), f"{tag}: --dequantize wrote {f.stat().st_size if f.is_file() else 0} bytes for {shape}")
    if got:
        err = math.sqrt(sum((x - y) ** 2 for x, y in zip(got, want)) / sum(y * y for y in want))
        bound = 0.02 if scheme == "int8" else 0.2
        check(err < bound, f"{tag}: --dequantize {name}: relative error {err:.4f} >= {bound}")


SCHEMES = [("nf4", False), ("nf4", True), ("fp4", False), ("int8", False)]


def main():
    binary, models, work = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ("tiny_llama", "tiny_gpt2"):
        src = models / name
        ids = ",".join(map(str, json.loads((src / "reference.json").read_text())["prompt_ids"]))
        for scheme, dq in SCHEMES:
            tag = f"{name} {scheme}{' double-quant' if dq else ''}"
            out = work / f"{name}_{scheme}{'_dq' if dq else ''}"
            extra = ["--double-quant"] if dq else []
            q = as_json(accel(binary, "quantize", src, out, "--scheme", scheme, *extra, "--json"), f"{tag}: quantize")
            check(q.get("layers_quantized", 0) > 0, f"{tag}: layers quantized {q.get('layers_quantized')}")
            if scheme != "int8":
                check(q.get("output_bytes", 1e30) < 0.6 * q.get("input_bytes", 0), f"{tag}: 4-bit output is smaller: {q}")
            config = json.loads((out / "config.json").read_text())
            qc = config.get("quantization_config", {})
            check(qc.get("quant_method") == "bitsandbytes", f"{tag}: quant_method {qc}")
            check(qc.get("load_in_4bit") == (scheme != "int8") and qc.get("load_in_8bit") == (scheme == "int8"),
                  f"{tag}: load_in flags {qc}")
            if scheme != "int8":
                check(qc.get("bnb_4bit_quant_type") == scheme and qc.get("bnb_4bit_use_double_quant") == dq,
                      f"{tag}: 4-bit fields {qc}")
            h = header(out / "model.safetensors")
            packed = [k[: -len(".absmax")] for k in h if k.endswith(".weight.absmax")]
            if scheme == "int8":
                scb = [k for k in h if k.endswith(".SCB")]
                check(len(scb) == q.get("layers_quantized"), f"{tag}: one SCB per layer: {len(scb)}")
                for k in scb:
                    w = h.get(k[: -len(".SCB")] + ".weight", {})
                    check(w.get("dtype") == "I8", f"{tag}: {k}: int8 weight {w.get('dtype')}")
                    check(k[: -len(".SCB")] + ".weight_format" in h, f"{tag}: {k}: weight_format beside it")
            else:
                check(len(packed) == q.get("layers_quantized"), f"{tag}: one absmax per layer: {len(packed)}")
                for w in packed:
                    e = h.get(w, {})
                    check(e.get("dtype") == "U8" and len(e.get("shape", [])) == 2 and e["shape"][1] == 1,
                          f"{tag}: {w}: packed uint8 [n/2, 1]: {e}")
                    for side in (".quant_map", f".quant_state.bitsandbytes__{scheme}"):
                        check(w + side in h, f"{tag}: {w}{side} beside it")
                    check((w + ".nested_absmax" in h) == dq, f"{tag}: {w}: nested absmax only with double quantization")
            if name == "tiny_llama":
                inspect_checks(binary, src, out, tag, scheme, dq, q.get("layers_quantized"))
            saved = as_json(accel(binary, "run", out, "--ids", ids, "--max-new-tokens", 10, "--json"), f"{tag}: run OUT")
            onload = as_json(accel(binary, "run", src, "--ids", ids, "--max-new-tokens", 10, "--quantize", scheme, *extra,
                                   "--json"), f"{tag}: run --quantize")
            check(saved.get("generated_ids") == onload.get("generated_ids") and saved.get("generated_ids"),
                  f"{tag}: saved {saved.get('generated_ids')} != on load {onload.get('generated_ids')}")

    # Quanto: saved as Diffusers saves it (optimum-quanto's tensors), run as stored; the 8-bit types
    # give the float model's greedy tokens.
    for name in ("tiny_llama", "tiny_gpt2"):
        src = models / name
        base = as_json(accel(binary, "run", src, "--ids", "3,1,4,1,5", "--max-new-tokens", 8, "--json"), f"{name}: float run")
        for wd in ("int8", "int4", "int2", "float8"):
            tag = f"{name} quanto-{wd}"
            out = work / f"{name}_quanto_{wd}"
            q = as_json(accel(binary, "quantize", src, out, "--scheme", f"quanto-{wd}", "--json"), f"{tag}: quantize")
            check(q.get("layers_quantized", 0) > 0, f"{tag}: layers quantized {q.get('layers_quantized')}")
            qc = json.loads((out / "config.json").read_text()).get("quantization_config", {})
            check(qc.get("quant_method") == "quanto" and qc.get("weights_dtype") == wd, f"{tag}: quantization_config {qc}")
            h = header(out / "model.safetensors")
            data = ".weight._data" if wd in ("int8", "float8") else ".weight._data._data"
            layers = [k[: -len(".weight._scale")] for k in h if k.endswith(".weight._scale")]
            check(len(layers) == q.get("layers_quantized"), f"{tag}: one _scale per layer: {len(layers)}")
            for l in layers:
                want = {"int8": "I8", "float8": "F8_E4M3"}.get(wd, "U8")
                check(h.get(l + data, {}).get("dtype") == want, f"{tag}: {l}{data}: {h.get(l + data)}")
                check((l + ".weight._shift" in h) == (wd in ("int4", "int2")), f"{tag}: {l}: _shift for int4 / int2 only")
                check(l + ".input_scale" in h and l + ".output_scale" in h and l + ".weight" not in h,
                      f"{tag}: {l}: activation scales, no float weight")
            run = as_json(accel(binary, "run", out, "--ids", "3,1,4,1,5", "--max-new-tokens", 8, "--json"), f"{tag}: run OUT")
            got = run.get("generated_ids", [])
            check(0 < len(got) <= 8, f"{tag}: tokens {got}")  # int2 may meet the end token early
            if wd == "int8":
                check(got == base.get("generated_ids"), f"{tag}: {got} != float {base.get('generated_ids')}")
    bad = accel(binary, "quantize", models / "tiny_llama", work / "x", "--scheme", "quanto-int3")
    check(bad.returncode == 2 and "quanto-int4" in bad.stderr, f"unknown Quanto scheme: {bad.stderr.strip()}")

    # GGUF blocks and TorchAO schemes on load. 8 tokens: fp8 leaves tiny_llama's greedy path at the 10th.
    for name in ("tiny_llama", "tiny_gpt2"):
        src = models / name
        ids = "3,1,4,1,5"
        base = as_json(accel(binary, "run", src, "--ids", ids, "--max-new-tokens", 8, "--json"), f"{name}: float run")
        check("quantization" not in base, f"{name}: a float run has no quantization entry")
        for scheme in ("q8_0", "fp8", "q4_0", "int4-g128", "int4-g32"):
            tag = f"{name} --quantize {scheme}"
            out = as_json(accel(binary, "run", src, "--ids", ids, "--max-new-tokens", 8, "--quantize", scheme, "--json"), tag)
            q = out.get("quantization", {})
            check(q.get("scheme") == scheme and q.get("method") == ("gguf" if scheme.startswith("q") else "torchao"),
                  f"{tag}: quantization {q}")
            check(q.get("layers", 0) >= 2, f"{tag}: layers quantized {q}")
            got = out.get("generated_ids", [])
            check(len(got) == 8 and all(0 <= i < 128 for i in got), f"{tag}: tokens {got}")
            if scheme in ("q8_0", "fp8"):
                check(got == base.get("generated_ids"), f"{tag}: {got} != float {base.get('generated_ids')}")
    # Quantized on load across CPU and disk: the in-memory tokens, the CPU within its budget.
    src = models / "tiny_llama"
    # Q4_0 quantizes only down_proj here (48 inputs are not whole blocks of 32): larger blocks.
    for scheme, kib in (("int4-g32", 100), ("q4_0", 120), ("fp8", 100)):
        tag = f"tiny_llama --quantize {scheme} --max-memory cpu={kib}KB"
        mem = as_json(accel(binary, "run", src, "--ids", "3,1,4,1,5", "--max-new-tokens", 8, "--quantize", scheme, "--json"),
                      f"{tag}: in memory")
        out = as_json(accel(binary, "run", src, "--ids", "3,1,4,1,5", "--max-new-tokens", 8, "--quantize", scheme,
                            "--max-memory", f"cpu={kib}KB", "--json"), tag)
        check(out.get("placed_bytes", {}).get("disk", 0) > 0, f"{tag}: placed {out.get('placed_bytes')}")
        check(out.get("generated_ids") == mem.get("generated_ids"),
              f"{tag}: {out.get('generated_ids')} != in memory {mem.get('generated_ids')}")
        check(0 < out.get("peak_bytes", {}).get("cpu", 1e30) <= kib * 1024, f"{tag}: peak {out.get('peak_bytes')}")
    none = accel(binary, "run", models / "tiny_llama", "--ids", "3,1", "--max-new-tokens", 2, "--quantize", "q4_k", "--json")
    check(none.returncode == 0 and "runs unquantized" in none.stderr and json.loads(none.stdout or "{}").get(
        "quantization", {}).get("layers") == 0, f"q4_k without 256-wide rows: {none.returncode} {none.stderr.strip()}")
    bad = accel(binary, "run", models / "tiny_llama", "--ids", "1", "--quantize", "q3_k")
    check(bad.returncode == 2 and "q4_k" in bad.stderr and "int4-g128" in bad.stderr, f"unknown --quantize: {bad.stderr.strip()}")
    bad = accel(binary, "run", models / "tiny_llama", "--ids", "1", "--quantize", "q8_0", "--double-quant")
    check(bad.returncode == 2 and "double-quant" in bad.stderr, f"q8_0 --double-quant: {bad.stderr.strip()}")

    src = models / "tiny_llama"
    bad = accel(binary, "quantize", src, work / "x", "--scheme", "q2_k")
    check(bad.returncode == 2 and "q2_k" in bad.stderr, f"unknown scheme: {bad.returncode} {bad.stderr.strip()}")
    bad = accel(binary, "quantize", src, work / "x", "--scheme", "int8", "--double-quant")
    check(bad.returncode == 2 and "double-quant" in bad.stderr, f"int8 --double-quant: {bad.stderr.strip()}")
    bad = accel(binary, "quantize", work / "tiny_llama_nf4", work / "y", "--scheme", "nf4")
    check(bad.returncode == 1 and "quantized already" in bad.stderr, f"quantizing a quantized folder: {bad.stderr.strip()}")
    bad = accel(binary, "run", src, "--ids", "1,2", "--double-quant")
    check(bad.returncode == 2 and "--quantize" in bad.stderr, f"--double-quant alone: {bad.stderr.strip()}")
    bad = accel(binary, "quantize", src, work / "x")
    check(bad.returncode == 2 and "--scheme" in bad.stderr, f"no --scheme: {bad.stderr.strip()}")
    bad = accel(binary, "quantize", src, work / "x", "--scheme", "nf4", "--json", "--quiet")
    check(bad.returncode == 2 and "exclude each other" in bad.stderr, f"--json --quiet: {bad.stderr.strip()}")
    # A quant state whose absmax has another layer's count: inspect and --dequantize name file and tensor.
    damaged = work / "damaged"
    shutil.copytree(work / "tiny_llama_nf4", damaged)
    raw = bytearray((damaged / "model.safetensors").read_bytes())
    n = int.from_bytes(raw[:8], "little")
    h = json.loads(raw[8:8 + n])
    # Two layers' absmax entries swapped: a valid safetensors file whose up_proj state has k_proj's count.
    up, k = "model.layers.0.mlp.up_proj.weight.absmax", "model.layers.0.self_attn.k_proj.weight.absmax"
    h[up], h[k] = h[k], h[up]
    text = json.dumps(h, separators=(",", ":")).encode()
    check(len(text) <= n, "the damaged header fits in the old one")
    text += b" " * (n - len(text))
    (damaged / "model.safetensors").write_bytes(bytes(raw[:8]) + text + bytes(raw[8 + n:]))
    for args in (("inspect", damaged), ("inspect", damaged, "--dequantize", "model.layers.0.mlp.up_proj.weight", "--out",
                                         work / "never.f32")):
        bad = accel(binary, *args)
        check(bad.returncode == 1 and "model.safetensors" in bad.stderr and "up_proj" in bad.stderr,
              f"damaged absmax, {args[2:] or 'listing'}: {bad.returncode} {bad.stderr.strip()}")
    quiet = accel(binary, "quantize", src, work / "quiet", "--scheme", "nf4", "--quiet", "--progress")
    check(quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "",
          f"--quiet prints nothing: {quiet.returncode} {quiet.stdout!r} {quiet.stderr!r}")
    check((work / "quiet" / "model.safetensors").is_file(), "--quiet still writes the folder")

    print(f"quantize: {'FAILED ' + str(len(FAILURES)) if FAILURES else 'ok'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
