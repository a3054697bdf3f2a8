#!/usr/bin/env python3
"""Checks `accel run` on the reference model folders of tests/data/models.

Usage: check_run.py GROUP ACCEL MODELS_DIR WORK_DIR
  reference  every model folder: --ids PROMPT --json reproduces the reference greedy tokens (fp32)
  dtypes     bfloat16 and float16 run, report their dtype and timings; sampling with a seed repeats
  prompt     --prompt through a tokenizer.json written here (byte-level, one token per byte)
  errors     incomplete or inconsistent folders exit 1 naming the file and the key or tensor;
             conflicting or missing prompt options exit 2
"""
import json
import pathlib
import shutil
import subprocess
import sys

FAILURES = []


def run(accel, *args):
    return subprocess.run([accel, "run", *map(str, args)], capture_output=True, text=True, timeout=120)


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def as_json(proc, what):
    check(proc.returncode == 0, f"{what}: exit {proc.returncode}: {proc.stderr.strip()}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        check(False, f"{what}: stdout is not JSON: {proc.stdout[:200]!r}")
        return {}


def reference(accel, models):
    for folder in sorted(p for p in models.iterdir() if (p / "reference.json").exists()):
        ref = json.loads((folder / "reference.json").read_text())
        expected = ref.get("greedy_new_tokens_cached", ref["greedy_new_tokens"])
        ids = ",".join(map(str, ref["prompt_ids"]))
        out = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", len(expected), "--json"), folder.name)
        # A generated eos ends the output early; the references keep eos out of their 16 tokens.
        check(out.get("generated_ids") == expected, f"{folder.name}: {out.get('generated_ids')} != {expected}")
        check(out.get("prompt_ids") == ref["prompt_ids"], f"{folder.name}: prompt_ids echoed")
        for key in ("load_s", "ttft_s", "tokens_per_s"):
            check(isinstance(out.get(key), (int, float)) and out[key] >= 0, f"{folder.name}: {key} is a number")
        check(out.get("dtype") == "float32", f"{folder.name}: config's torch_dtype float32 is the default")


def dtypes(accel, models):
    folder = models / "tiny_llama"
    ids = ",".join(map(str, json.loads((folder / "reference.json").read_text())["prompt_ids"]))
    for dtype in ("bfloat16", "float16"):
        out = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", 8, "--dtype", dtype, "--json"), dtype)
        check(out.get("dtype") == dtype, f"{dtype}: reported dtype {out.get('dtype')}")
        check(len(out.get("generated_ids", [])) == 8, f"{dtype}: 8 new tokens")
    sampled = [as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", 12, "--temperature", "1.3",
                           "--top-k", "20", "--seed", seed, "--json"), f"seed {seed}")["generated_ids"]
               for seed in (5, 5, 6)]
    check(sampled[0] == sampled[1], "the same seed samples the same tokens")
    check(sampled[0] != sampled[2], "another seed samples other tokens")
    greedy = json.loads((folder / "reference.json").read_text())
    greedy = greedy.get("greedy_new_tokens_cached", greedy["greedy_new_tokens"])
    copied = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", len(greedy), "--disable-mmap", "--json"),
                     "--disable-mmap")
    check(copied.get("generated_ids") == greedy, f"--disable-mmap: {copied.get('generated_ids')} != {greedy}")
    text = run(accel, folder, "--ids", ids, "--max-new-tokens", 4)
    check(text.returncode == 0 and "tokens/s" in text.stdout and "time to first token" in text.stdout,
          f"text output shows timings: {text.stdout!r}")


def byte_level_char(b):
    """GPT-2's byte-to-unicode map for one byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in printable:
        return chr(b)
    n = sum(1 for x in range(b) if x not in printable)
    return chr(256 + n)


def prompt(accel, models, work):
    folder = work / "llama_with_tokenizer"
    shutil.copytree(models / "tiny_llama", folder)
    # ids 0-2 special, 3-97 the printable ASCII bytes: one token per byte, no merges.
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i, b in enumerate(range(32, 127)):
        vocab[byte_level_char(b)] = 3 + i
    for i in range(len(vocab), 128):
        vocab[f"<extra_{i}>"] = i
    tokenizer = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": []},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    text = "Hello, accel!"
    out = as_json(run(accel, folder, "--prompt", text, "--max-new-tokens", 10, "--json"), "--prompt")
    check(out.get("prompt_ids") == [vocab[byte_level_char(ord(c))] for c in text], f"prompt ids {out.get('prompt_ids')}")
    inverse = {i: t for t, i in vocab.items()}
    # Specials (0-2) are skipped; every other token decodes to its text (the <extra_N> ones too).
    decoded = "".join(inverse[i] for i in out.get("generated_ids", []) if i >= 3)
    decoded = decoded.replace(byte_level_char(32), " ")
    check(out.get("text") == decoded, f"text {out.get('text')!r} != {decoded!r}")


def broken_folder(models, work, name, edit):
    folder = work / name
    shutil.copytree(models / "tiny_gpt2", folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def errors(accel, models, work):
    def expect(proc, code, *needles, what):
        check(proc.returncode == code, f"{what}: exit {proc.returncode} (expected {code}): {proc.stderr.strip()}")
        for n in needles:
            check(n in proc.stderr, f"{what}: stderr names {n!r}: {proc.stderr.strip()}")

    ids = ("--ids", "1,2,3")
    f = broken_folder(models, work, "no_model_type", lambda c: c.pop("model_type"))
    expect(run(accel, f, *ids), 1, "config.json", "model_type", what="missing model_type")
    f = broken_folder(models, work, "unknown_type", lambda c: c.update(model_type="bert"))
    expect(run(accel, f, *ids), 1, "config.json", "bert", what="unknown model_type")
    f = broken_folder(models, work, "wrong_width", lambda c: c.update(n_embd=64))
    expect(run(accel, f, *ids), 1, "model.safetensors", "in the checkpoint but shape",
           what="shapes that disagree with the config")
    f = broken_folder(models, work, "missing_layers", lambda c: c.pop("n_layer"))
    expect(run(accel, f, *ids), 1, "transformer.h.2", what="a config key left to its default (12 layers)")
    f = broken_folder(models, work, "bad_count", lambda c: c.update(n_head=2.5))
    expect(run(accel, f, *ids), 1, "config.json", "n_head", what="a fractional head count")
    expect(run(accel, work / "nowhere", *ids), 1, "config.json", what="a folder without config.json")
    expect(run(accel, models / "tiny_gpt2", "--prompt", "hi"), 1, "tokenizer.json", what="--prompt without tokenizer")
    expect(run(accel, models / "tiny_gpt2", "--ids", "1,999"), 1, "999", what="an id outside the vocabulary")
    expect(run(accel, models / "tiny_gpt2", "--ids", "1,2", "--dtype", "int8"), 1, "--dtype", what="--dtype int8")
    expect(run(accel, models / "tiny_gpt2", "--ids", "1", "--top-p", "1.5"), 1, "--top-p", what="--top-p 1.5")
    expect(run(accel, models / "tiny_gpt2"), 2, "--prompt", what="no prompt at all")
    expect(run(accel, models / "tiny_gpt2", "--ids", "1", "--prompt", "x"), 2, "not both", what="both prompts")


def main():
    group, accel, models, work = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    {"reference": lambda: reference(accel, models), "dtypes": lambda: dtypes(accel, models),
     "prompt": lambda: prompt(accel, models, work), "errors": lambda: errors(accel, models, work)}[group]()
    print(f"{group}: {'FAILED ' + str(len(FAILURES)) if FAILURES else 'ok'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
