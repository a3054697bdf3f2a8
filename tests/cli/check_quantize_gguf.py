#!/usr/bin/env python3
"""Checks `accel quantize IN OUT.gguf --scheme S`: model folders written as GGUF files.

Usage: check_quantize_gguf.py ACCEL MODELS_DIR WORK_DIR

- For tiny_llama, tiny_llama_tied_headdim, tiny_qwen2, tiny_mistral and tiny_gpt2: the F32 file runs
  in `accel run` with the greedy tokens transformers gave (reference.json; Mistral's 4-token window
  has no GGUF key, so its file is checked on one token after a prompt within the window); F16 and BF16 files give
  the same tokens; `--json` reports the scheme, architecture, types and sizes, and the file's own
  header says general.file_type and general.quantization_version.
- A folder with a tokenizer (the default model at its tiny test shape) as Q8_0: the file carries the
  tokenizer (tokenizer.ggml.model "gpt2"), and `accel run FILE --prompt TEXT` encodes the prompt as
  the folder does and generates.
- Usage and input errors: a non-GGUF scheme for OUT.gguf, a GGUF scheme for a folder output,
  --dtype with OUT.gguf, an architecture without a GGUF form, a GGUF file as input; none leaves a
  file behind.
"""
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
from cli_checks import FAILURES, check, accel, as_json


def gguf_metadata(path):
    """The scalar and string metadata of a GGUF file (arrays skipped)."""
    data = path.read_bytes()
    assert data[:4] == b"GGUF", path
    _, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        s = data[pos + 8:pos + 8 + n].decode("utf-8", "replace")
        pos += 8 + n
        return s

    def value(t):
        nonlocal pos
        if t == 8:
            return string()
        if t == 9:
            (et, n) = struct.unpack_from("<IQ", data, pos)
            pos += 12
            items = [value(et) for _ in range(n)]
            return ("array", len(items))
        (v,) = struct.unpack_from(fmt[t], data, pos)
        pos += sizes[t]
        return v

    out = {}
    for _ in range(n_kv):
        key = string()
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        out[key] = value(t)
    return out


def reference_run(binary, model, ref, window=None):
    """Greedy tokens of `model` on the reference prompt; within `window` positions when one is given."""
    ids = ref["prompt_ids"] if window is None else ref["prompt_ids"][:window - 1]
    n = len(ref["greedy_new_tokens"]) if window is None else 1
    out = as_json(accel(binary, "run", model, "--ids", ",".join(map(str, ids)), "--max-new-tokens", n, "--json"),
                  f"accel run {model}")
    return out.get("generated_ids")


def folders(binary, models, work):
    for name in ("tiny_llama", "tiny_llama_tied_headdim", "tiny_qwen2", "tiny_mistral", "tiny_gpt2"):
        folder = models / name
        ref = json.loads((folder / "reference.json").read_text())
        window = 4 if name == "tiny_mistral" else None
        want = ref["greedy_new_tokens"] if window is None else reference_run(binary, folder, ref, window)
        for scheme, file_type in (("f32", 0), ("f16", 1), ("bf16", 32)):
            out = work / f"{name}-{scheme}.gguf"
            q = as_json(accel(binary, "quantize", folder, out, "--scheme", scheme, "--json"), f"{name} {scheme}")
            check(q.get("scheme") == scheme and q.get("out") == str(out), f"{name} {scheme}: --json {q}")
            arch = "llama" if name == "tiny_mistral" else name.split("_")[1]
            check(q.get("architecture") == arch, f"{name} {scheme}: architecture {q.get('architecture')}")
            types = q.get("types", {})
            check(set(types) <= {"F32", scheme.upper()} and types.get("F32", 0) > 0,
                  f"{name} {scheme}: types {types}")
            check(q.get("tensors") == sum(types.values()), f"{name} {scheme}: tensors {q.get('tensors')} vs {types}")
            check(q.get("output_bytes") == out.stat().st_size, f"{name} {scheme}: output_bytes")
            check(q.get("tokenizer") is False, f"{name} {scheme}: no tokenizer.json, yet tokenizer {q.get('tokenizer')}")
            meta = gguf_metadata(out)
            check(meta.get("general.file_type") == file_type, f"{name} {scheme}: general.file_type {meta.get('general.file_type')}")
            check(meta.get("general.quantization_version") == 2, f"{name} {scheme}: quantization_version")
            check("tokenizer.ggml.model" not in meta, f"{name} {scheme}: tokenizer.ggml.model {meta.get('tokenizer.ggml.model')}")
            got = reference_run(binary, out, ref, window)
            check(got == want, f"{name} {scheme}: accel run FILE.gguf gave {got}, the folder {want}")


def with_tokenizer(binary, work):
    """The default model at its tiny shape: a LLaMA folder with a byte-level BPE tokenizer.json."""
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"), ACCEL_DEFAULT_MODEL_SHAPE="layers=2,intermediate=1024,shard=16MB")
    prompt = "The baker brought bread to the sea"
    run = as_json(accel(binary, "run", "--prompt", prompt, "--max-new-tokens", 4, "--json", env=env), "default model")
    folders_found = [p.parent for p in (work / "cache").rglob("tokenizer.json")]
    check(len(folders_found) == 1, f"default model folder: {folders_found}")
    if not folders_found:
        return
    folder = folders_found[0]
    out = work / "default-q8_0.gguf"
    q = as_json(accel(binary, "quantize", folder, out, "--scheme", "q8_0", "--json"), "default model q8_0")
    check(q.get("tokenizer") is True, f"default model: tokenizer {q.get('tokenizer')}")
    check(q.get("types", {}).get("Q8_0", 0) > 0, f"default model: types {q.get('types')}")
    check(q.get("output_bytes", 1e18) < q.get("input_bytes", 0), f"default model: {q.get('input_bytes')} -> {q.get('output_bytes')}")
    meta = gguf_metadata(out)
    check(meta.get("tokenizer.ggml.model") == "gpt2", f"default model: tokenizer.ggml.model {meta.get('tokenizer.ggml.model')}")
    check(meta.get("general.file_type") == 7, f"default model: file_type {meta.get('general.file_type')}")
    r = as_json(accel(binary, "run", out, "--prompt", prompt, "--max-new-tokens", 4, "--json"), "default model q8_0 run")
    check(r.get("prompt_ids") == run.get("prompt_ids") and r.get("prompt_ids"),
          f"default model: the GGUF file encodes {r.get('prompt_ids')}, the folder {run.get('prompt_ids')}")
    check(len(r.get("generated_ids", [])) == 4, f"default model q8_0: generated {r.get('generated_ids')}")


def errors(binary, models, work):
    folder = models / "tiny_llama"
    out = work / "err.gguf"
    cases = [
        (("quantize", folder, out, "--scheme", "nf4"), 2, "not a GGUF scheme"),
        (("quantize", folder, work / "err_dir", "--scheme", "q4_k_m"), 2, "ending in .gguf"),
        (("quantize", folder, out, "--scheme", "q8_0", "--dtype", "float16"), 2, "--dtype"),
        (("quantize", folder, out, "--scheme", "q3_k_m"), 2, "q4_k_m"),
    ]
    bert = work / "bert"
    bert.mkdir(exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "bert"
    (bert / "config.json").write_text(json.dumps(config))
    shutil.copy(folder / "model.safetensors", bert / "model.safetensors")
    cases.append((("quantize", bert, out, "--scheme", "f16"), 1, "'bert'"))
    f32 = work / "tiny_llama-f32.gguf"
    cases.append((("quantize", f32, out, "--scheme", "q8_0"), 1, "GGUF file already"))
    for args, code, text in cases:
        proc = accel(binary, *args)
        check(proc.returncode == code and text in proc.stderr,
              f"accel {' '.join(map(str, args))}: exit {proc.returncode} (want {code}), stderr {proc.stderr.strip()!r} "
              f"(want {text!r})")
        check(not out.exists() and not (work / "err_dir").exists(), f"accel {' '.join(map(str, args))} left a file")


def main():
    binary, models, work = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    folders(binary, models, work)
    with_tokenizer(binary, work)
    errors(binary, models, work)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("accel quantize OUT.gguf: all checks passed")


if __name__ == "__main__":
    main()
