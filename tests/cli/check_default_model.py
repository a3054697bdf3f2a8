#!/usr/bin/env python3
"""Checks `accel run` without a model: the built-in default model and the demo it runs.

Usage: check_default_model.py GROUP ACCEL WORK_DIR
  tiny  a 2-layer model of the default's vocabulary and layer 0 (ACCEL_DEFAULT_MODEL_SHAPE) written
        into a temporary XDG_CACHE_HOME: the folder's files; the tokenizer against a byte-level
        BPE encoder of this file's own and its decoding; the cache reused on the second call; a
        half-written or truncated folder written again, never used; the demo's placement on CPU
        and disk, its token check and its text, --json, --quiet and --progress output; --check on
        a model folder given by path
  real  the default model itself: its config.json, sizes and shards as the README states them,
        and the demo's token check on it (8 new tokens), then with a 64-token prompt at every CPU
        tier (ACCEL_CPU_ARCH)
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

FAILURES = []
TIERS = ("scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16")  # ACCEL_CPU_ARCH's x86 tiers, lowest first
TINY_SHAPE = "layers=2,intermediate=512,shard=4MB"


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def run(accel, cache, *args, shape=None, tier=None):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    env.pop("ACCEL_DEFAULT_MODEL_SHAPE", None)
    env.pop("ACCEL_CPU_ARCH", None)
    if shape:
        env["ACCEL_DEFAULT_MODEL_SHAPE"] = shape
    if tier:
        env["ACCEL_CPU_ARCH"] = tier
    return subprocess.run([accel, "run", *map(str, args)], capture_output=True, text=True, timeout=240, env=env)


def as_json(proc, what):
    check(proc.returncode == 0, f"{what}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        check(False, f"{what}: stdout is not JSON: {proc.stdout[:200]!r}")
        return {}


def byte_chars():
    """GPT-2's byte -> stand-in character table."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


# GPT-2's split pattern for ASCII text (the tests' texts are ASCII: letters are [A-Za-z]).
ASCII_GPT2 = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


class Bpe:
    """A byte-level BPE encoder and decoder over a tokenizer.json, written from the format alone."""

    def __init__(self, tokenizer):
        model = tokenizer["model"]
        self.vocab = model["vocab"]
        self.inverse = {i: t for t, i in self.vocab.items()}
        for added in tokenizer["added_tokens"]:
            self.inverse[added["id"]] = added["content"]
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(model["merges"])}
        self.chars = byte_chars()
        self.bytes_of = {c: b for b, c in self.chars.items()}

    def encode(self, text):
        ids = []
        for word in ASCII_GPT2.findall(text):
            parts = [self.chars[b] for b in word.encode()]
            while len(parts) > 1:
                ranked = [(self.ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
                rank, i = min(ranked)
                if rank == 1 << 30:
                    break
                parts[i:i + 2] = [parts[i] + parts[i + 1]]
            ids += [self.vocab[p] for p in parts]
        return ids

    def decode(self, ids):
        return bytes(self.bytes_of[c] for i in ids for c in self.inverse[i]).decode("utf-8", "replace")


def model_dir(cache, shape_name):
    return cache / "accel" / shape_name


def check_folder(folder, what):
    marker = json.loads((folder / "accel-default-model.json").read_text())
    for name, size in marker["files"].items():
        check((folder / name).stat().st_size == size, f"{what}: {name} has the size the marker lists")
    for name in ("config.json", "generation_config.json", "tokenizer.json", "model.safetensors.index.json"):
        check(name in marker["files"], f"{what}: {name} is written")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    check(len(shards) == marker["shards"] and len(shards) > 1, f"{what}: {len(shards)} shards")
    check(all(re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", s) for s in shards), f"{what}: shard names {shards}")
    check(index["metadata"]["total_size"] == marker["weight_bytes"], f"{what}: total_size is the weights' bytes")
    leftovers = [p.name for p in folder.parent.iterdir() if p.name.startswith(".")]
    check(not leftovers, f"{what}: no temporary folders left: {leftovers}")
    return marker


def tokenizer_checks(accel, cache, folder):
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    bpe = Bpe(tokenizer)
    check(len(bpe.vocab) == 510 and len(tokenizer["model"]["merges"]) == 254, "510 vocabulary tokens, 254 merges")
    check(tokenizer["added_tokens"][0]["content"] == "<|endoftext|>" and tokenizer["added_tokens"][0]["id"] == 510,
          "<|endoftext|> is token 510")
    check(tokenizer["pre_tokenizer"]["type"] == "ByteLevel" and tokenizer["decoder"]["type"] == "ByteLevel",
          "ByteLevel pre-tokenizer and decoder")
    config = json.loads((folder / "config.json").read_text())
    for text in ("In the winter the old lighthouse keeper climbed the stairs.",
                 "Words it never saw: zebra, 1234 quartz!\n\nNew lines  and  spaces.",
                 "The baker's son made bread; the sea was grey."):
        out = as_json(run(accel, cache, "--prompt", text, "--max-new-tokens", 6, "--json", shape=TINY_SHAPE), text)
        ids = out.get("prompt_ids", [])
        check(ids == bpe.encode(text), f"{text!r}: accel's ids {ids} != this file's BPE {bpe.encode(text)}")
        check(bpe.decode(ids) == text, f"{text!r}: the ids decode back to the text")
        check(out.get("text") == bpe.decode(out.get("generated_ids", [])), f"{text!r}: text is the new ids decoded")
        check(all(i < config["vocab_size"] for i in out.get("generated_ids", [])), f"{text!r}: ids in the vocabulary")


def tiny(accel, work):
    cache = work / "cache"
    folder = model_dir(cache, "default-model-v1-l2-i512-s4000000")
    first = as_json(run(accel, cache, "--json", shape=TINY_SHAPE), "first run")
    check(first.get("default_model", {}).get("written_now") is True, "the first run writes the model")
    check(pathlib.Path(first.get("model_dir", "")) == folder, f"model_dir {first.get('model_dir')} is {folder}")
    marker = check_folder(folder, "first run")
    for key in ("prompt", "prompt_ids", "generated_ids", "text", "load_s", "ttft_s", "tokens_per_s", "device_map",
                "placed_bytes", "reservations", "offload_gb_per_s", "peak_bytes", "check"):
        check(key in first, f"--json has {key}")
    check(first.get("prompt") == "In the winter", f"the default prompt: {first.get('prompt')!r}")
    check(len(first.get("generated_ids", [])) == 32, "32 new tokens")
    placed = first.get("placed_bytes", {})
    check(placed.get("cpu", 0) > 0 and placed.get("disk", 0) > 0, f"the demo puts weights on cpu and disk: {placed}")
    budget = 0.6 * marker["weight_bytes"]
    check(first.get("peak_bytes", {}).get("cpu", budget + 1) <= budget, f"cpu peak {first.get('peak_bytes')} <= {budget}")
    check(isinstance(first.get("offload_gb_per_s"), (int, float)) and first["offload_gb_per_s"] > 0, "offload rate")
    c = first.get("check", {})
    check(c.get("identical") is True and c.get("first_difference") is None and
          c.get("unrestricted_ids") == first.get("generated_ids"), f"the token check passes: {c}")

    # The second call finds the folder complete and writes nothing.
    stamp = (folder / "accel-default-model.json").stat().st_mtime_ns
    second = as_json(run(accel, cache, "--json", "--max-new-tokens", 4, shape=TINY_SHAPE), "second run")
    check(second.get("default_model", {}).get("written_now") is False, "the second run reuses the model")
    check((folder / "accel-default-model.json").stat().st_mtime_ns == stamp, "the marker is not rewritten")
    check(second.get("generated_ids") == first.get("generated_ids")[:4], "the same tokens from the reused model")

    tokenizer_checks(accel, cache, folder)

    # Text output: the plan with both devices, the text, the figures, the check.
    text = run(accel, cache, shape=TINY_SHAPE)
    check(text.returncode == 0, f"text demo: exit {text.returncode}: {text.stderr.strip()[-300:]}")
    for needle in ("default model: ", "demo budget: --max-memory cpu=", "placement (", " cpu ", " disk ",
                   "In the winter" + first.get("text", "\0"), "time to first token", "tokens/s", "offload stream",
                   "peak:", "token check: identical to an unrestricted run"):
        check(needle in text.stdout, f"text demo prints {needle!r}: {text.stdout!r}")
    check(text.stdout.index("placement (") < text.stdout.index("In the winter"), "the plan comes before the text")
    quiet = run(accel, cache, "--quiet", "--progress", shape=TINY_SHAPE)
    check(quiet.returncode == 0 and quiet.stdout == first.get("text", "\0") + "\n",
          f"--quiet prints the text alone: {quiet.stdout!r}")
    check(quiet.stderr == "", f"--quiet silences progress: {quiet.stderr!r}")
    progress = run(accel, cache, "--progress", "--max-new-tokens", 2, shape=TINY_SHAPE)
    check("Loading checkpoint" in progress.stderr and "100%" in progress.stderr, f"--progress: {progress.stderr!r}")
    plain = run(accel, cache, "--max-new-tokens", 2, shape=TINY_SHAPE)
    check("Loading checkpoint" not in plain.stderr, f"no bar when stderr is no terminal: {plain.stderr!r}")
    bad = run(accel, cache, "--json", "--quiet", shape=TINY_SHAPE)
    check(bad.returncode == 2 and "exclude each other" in bad.stderr, f"--json --quiet: {bad.returncode} {bad.stderr!r}")

    # --check on a folder given by path, under a placement of its own.
    out = as_json(run(accel, cache, folder, "--prompt", "The baker", "--max-new-tokens", 8, "--max-memory",
                      f"cpu={int(marker['weight_bytes'] * 0.7)}", "--offload", "sync", "--check", "--json"), "--check")
    check(out.get("check", {}).get("identical") is True, f"--check on a model folder: {out.get('check')}")
    check("default_model" not in out, "a model folder given by path is not the default model")

    # Every placement and offload policy gives the demo's tokens: half of the weights' size as the
    # CPU budget (one block computes, the rest on disk) and one and a half (all in memory, no room
    # kept for read-ahead), each under sync and read-ahead of one and four blocks.
    want = first.get("generated_ids", [])[:8]
    for share in (0.5, 1.5):
        for policy in ("sync", "prefetch:1", "prefetch:4"):
            what = f"cpu={share:.0%} of the weights, --offload {policy}"
            out = as_json(run(accel, cache, "--json", "--max-new-tokens", 8, "--max-memory",
                              f"cpu={int(marker['weight_bytes'] * share)}", "--offload", policy, shape=TINY_SHAPE), what)
            check(out.get("generated_ids") == want, f"{what}: tokens {out.get('generated_ids')} are the demo's {want}")
            on_disk = out.get("placed_bytes", {}).get("disk", 0)
            check((on_disk > 0) == (share < 1), f"{what}: {out.get('placed_bytes')}")
    # Quantized on load, each scheme runs the default model in memory: 8 new tokens of its vocabulary.
    for scheme in ("int8", "nf4", "fp4"):
        out = as_json(run(accel, cache, "--json", "--max-new-tokens", 8, "--quantize", scheme, shape=TINY_SHAPE),
                      f"--quantize {scheme}")
        ids = out.get("generated_ids", [])
        check(len(ids) == 8 and all(0 <= i < 511 for i in ids), f"--quantize {scheme}: {ids}")

    # A folder without a complete marker is never used: it is replaced by a full write.
    def half_written(f):
        (f / "accel-default-model.json").unlink()
        sorted(f.glob("model-*.safetensors"))[-1].unlink()

    def truncated(f):
        os.truncate(sorted(f.glob("model-*.safetensors"))[0], 1000)

    for what, damage in (("half-written", half_written), ("truncated shard", truncated)):
        damage(folder)
        (folder / "stray.txt").write_text("left by a run that died")
        out = as_json(run(accel, cache, "--json", "--max-new-tokens", 4, shape=TINY_SHAPE), what)
        check(out.get("default_model", {}).get("written_now") is True, f"{what}: the model is written again")
        check(out.get("generated_ids") == first.get("generated_ids")[:4], f"{what}: the same tokens as before")
        check(not (folder / "stray.txt").exists(), f"{what}: the damaged folder is gone")
        check_folder(folder, what)
    # An unwritable cache is an error that names the folder.
    blocked = work / "blocked"
    blocked.write_text("a file where the cache folder would go")
    bad = run(accel, blocked, "--max-new-tokens", 1, shape=TINY_SHAPE)
    check(bad.returncode == 1 and str(blocked) in bad.stderr, f"a cache under a file: {bad.returncode} {bad.stderr!r}")


def real(accel, work):
    cache = work / "cache"
    out = as_json(run(accel, cache, "--json", "--max-new-tokens", 8), "the default model")
    folder = model_dir(cache, "default-model-v1")
    marker = check_folder(folder, "default model")
    config = json.loads((folder / "config.json").read_text())
    expected = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
                "num_hidden_layers": 12, "num_attention_heads": 16, "num_key_value_heads": 16,
                "intermediate_size": 2816, "vocab_size": 511, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    for key, value in expected.items():
        check(config.get(key) == value, f"config.json {key} = {config.get(key)!r}, expected {value!r}")
    check(marker["parameters"] == 155_212_800 and marker["weight_bytes"] == 310_425_600,
          f"155.2M parameters, 310.4 MB: {marker['parameters']}, {marker['weight_bytes']}")
    check(marker["shards"] == 4, f"4 shards: {marker['shards']}")
    sizes = [(folder / f).stat().st_size for f in marker["files"] if f.endswith(".safetensors")]
    check(max(sizes) <= 100_000_000 + 64 * 1024, f"shards of at most 100 MB: {sizes}")
    check(out.get("check", {}).get("identical") is True, f"the demo's token check: {out.get('check')}")
    placed = out.get("placed_bytes", {})
    check(placed.get("cpu", 0) > 0 and placed.get("disk", 0) > 0, f"cpu and disk: {placed}")
    # The bfloat16 model with a 64-token prompt at every CPU tier (a prompt of that many rows goes
    # through the matrix products, not the GEMV: oneDNN's bf16 matmul where it has one, the f32
    # blocks elsewhere). A tier above the machine's runs its best one; the demo's token check holds.
    ids = ",".join(str(7 * i % 500 + 3) for i in range(64))
    for tier in TIERS:
        capped = as_json(run(accel, cache, "--ids", ids, "--max-new-tokens", 4, "--json", tier=tier),
                         f"ACCEL_CPU_ARCH={tier}")
        ran = capped.get("cpu_tier")
        check(ran in TIERS and TIERS.index(ran) <= TIERS.index(tier), f"ACCEL_CPU_ARCH={tier}: ran {ran!r}")
        check(len(capped.get("prompt_ids", [])) == 64 and len(capped.get("generated_ids", [])) == 4,
              f"ACCEL_CPU_ARCH={tier}: 64 prompt tokens, 4 new: {capped.get('generated_ids')}")
        check(capped.get("check", {}).get("identical") is True, f"ACCEL_CPU_ARCH={tier}: token check {capped.get('check')}")


def main():
    group, accel, work = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    {"tiny": tiny, "real": real}[group](accel, work)
    print(f"{group}: {'FAILED ' + str(len(FAILURES)) if FAILURES else 'ok'}")
    if not FAILURES:
        shutil.rmtree(work, ignore_errors=True)  # the real model is 310 MB
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
