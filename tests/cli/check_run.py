#!/usr/bin/env python3
"""Checks `accel run` on the reference model folders of tests/data/models.

Usage: check_run.py GROUP ACCEL MODELS_DIR WORK_DIR
  reference  every model folder: --ids PROMPT --json reproduces the reference greedy tokens (fp32)
  dtypes     bfloat16 and float16 run, report their dtype and timings; sampling with a seed repeats
  prompt     --prompt through a tokenizer.json written here (byte-level, one token per byte)
  errors     incomplete or inconsistent folders exit 1 naming the file and the key or tensor;
             conflicting or missing prompt options exit 2
  placement  a 20-layer LLaMA written here under --max-memory cpu=<a third of its weights>, and
             GPT-2 under a tighter share, with --offload sync and prefetch:1..4, --device-map
             strategies, a device-map file and an offload folder: the tokens of the unrestricted
             run, something on disk, bytes per device, reservations, the CPU peak within the
             budget and the offload rate reported
  formats    tiny_llama and tiny_gpt2 as safetensors shards with their index and as a
             pytorch_model.bin (written here without torch; torch.load reads it): the reference tokens
"""
import array
import json
import os
import pathlib
import shutil
import subprocess
import sys
from cli_checks import FAILURES, check, as_json

def run(accel, *args, env=None):
    return subprocess.run([accel, "run", *map(str, args)], capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})


def reference(accel, models):
    for folder in sorted(p for p in models.iterdir() if (p / "reference.json").exists()):
        ref = json.loads((folder / "reference.json").read_text())
        expected = ref.get("greedy_new_tokens_cached", ref["greedy_new_tokens"])
        ids = ",".join(map(str, ref["prompt_ids"]))
        out = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", len(expected), "--json"), folder.name)
        # A generated eos ends the output early; the references keep eos out of their 16 tokens.
        check(out.get("generated_ids") == expected, f"{folder.name}: {out.get('generated_ids')} != {expected}")
        check(out.get("prompt_ids") == ref["prompt_ids"], f"{folder.name}: prompt_ids echoed")
        for key in ("load_s", "warmup_s", "ttft_s", "tokens_per_s"):
            check(isinstance(out.get(key), (int, float)) and out[key] >= 0, f"{folder.name}: {key} is a number")
        cold = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", len(expected), "--json", "--no-warmup"),
                       f"{folder.name} --no-warmup")
        check("warmup_s" not in cold and cold.get("generated_ids") == expected,
              f"{folder.name}: --no-warmup runs none and generates the same tokens")
        check(out.get("dtype") == "float32", f"{folder.name}: config's torch_dtype float32 is the default")
        tiers = ("scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16")
        check(out.get("cpu_tier") in tiers, f"{folder.name}: cpu_tier {out.get('cpu_tier')!r} names a tier")


def safetensors_tensors(path):
    """(header entries in file order, data bytes) of a safetensors file."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return entries, raw[8 + n:]


def write_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, bytes)]."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(t[3] for t in tensors))


def write_sharded(folder, entries, data, shards=3):
    """The checkpoint as `shards` safetensors files and model.safetensors.index.json."""
    per = -(-len(entries) // shards)
    weight_map, total = {}, 0
    for k in range(shards):
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = []
        for tname, e in entries[k * per:(k + 1) * per]:
            a, b = e["data_offsets"]
            part.append((tname, e["dtype"], e["shape"], data[a:b]))
            weight_map[tname] = name
            total += b - a
        write_safetensors(folder / name, part)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                     "weight_map": weight_map}))


def write_torch_bin(path, entries, data):
    """pytorch_model.bin as torch.save writes it (a zip of data.pkl and one file per storage), made
    without torch: the pickle names torch._utils._rebuild_tensor_v2 and torch.<T>Storage, which
    stand-in modules let Python's pickler spell."""
    import collections, io, pickle, sys, types, zipfile
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise RuntimeError("a stand-in: only its name is pickled")

    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    storage_types = {"F32": "FloatStorage", "F16": "HalfStorage", "BF16": "BFloat16Storage", "I64": "LongStorage"}
    for cls in storage_types.values():
        setattr(torch, cls, type(cls, (), {"__module__": "torch"}))
    saved = {k: sys.modules.get(k) for k in ("torch", "torch._utils")}
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    try:
        class Storage:
            def __init__(self, key, kind, numel):
                self.key, self.kind, self.numel = key, kind, numel

        class Tensor:
            def __init__(self, storage, shape):
                self.storage, self.shape = storage, shape

            def __reduce__(self):
                stride, acc = [], 1
                for d in reversed(self.shape):
                    stride.insert(0, acc)
                    acc *= d
                return (_rebuild_tensor_v2, (self.storage, 0, tuple(self.shape), tuple(stride), False,
                                             collections.OrderedDict()))

        class Pickler(pickle.Pickler):
            def persistent_id(self, obj):
                if isinstance(obj, Storage):
                    return ("storage", getattr(torch, storage_types[obj.kind]), obj.key, "cpu", obj.numel)
                return None

        sd, files = collections.OrderedDict(), []
        for k, (name, e) in enumerate(entries):
            a, b = e["data_offsets"]
            size = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8}[e["dtype"]]
            sd[name] = Tensor(Storage(str(k), e["dtype"], (b - a) // size), e["shape"])
            files.append((str(k), data[a:b]))
        buf = io.BytesIO()
        Pickler(buf, protocol=2).dump(sd)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        for key, blob in files:
            z.writestr(f"archive/data/{key}", blob)
        z.writestr("archive/version", "3\n")


def formats(accel, models, work):
    """The reference models' weights as safetensors shards and as pytorch_model.bin give the
    reference tokens through `accel run`, as the single model.safetensors does."""
    for name in ("tiny_llama", "tiny_gpt2"):
        src = models / name
        ref = json.loads((src / "reference.json").read_text())
        expected = ref.get("greedy_new_tokens_cached", ref["greedy_new_tokens"])
        ids = ",".join(map(str, ref["prompt_ids"]))
        entries, data = safetensors_tensors(src / "model.safetensors")
        for label, write in (("safetensors shards", lambda f: write_sharded(f, entries, data)),
                             ("pytorch_model.bin", lambda f: write_torch_bin(f / "pytorch_model.bin", entries, data))):
            folder = work / f"{name}_{label.split()[0].replace('.', '_')}"
            folder.mkdir()
            shutil.copy(src / "config.json", folder / "config.json")
            write(folder)
            out = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", len(expected), "--json"), f"{name} {label}")
            check(out.get("generated_ids") == expected, f"{name} {label}: {out.get('generated_ids')} != {expected}")


def dtypes(accel, models):
    folder = models / "tiny_llama"
    ids = ",".join(map(str, json.loads((folder / "reference.json").read_text())["prompt_ids"]))
    for dtype in ("bfloat16", "float16"):
        out = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", 8, "--dtype", dtype, "--json"), dtype)
        check(out.get("dtype") == dtype, f"{dtype}: reported dtype {out.get('dtype')}")
        # The forward that ran is the one compiled for the dtype (LlamaForCausalLM<policies<bf16>>).
        want = {"bfloat16": "bf16", "float16": "fp16"}[dtype]
        check(out.get("mixed_precision") == want, f"{dtype}: compiled precision {out.get('mixed_precision')}, not {want}")
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
    check(copied.get("mixed_precision") == "no", f"float32: compiled precision {copied.get('mixed_precision')}, not no")
    text = run(accel, folder, "--ids", ids, "--max-new-tokens", 4)
    check(text.returncode == 0 and "tokens/s" in text.stdout and "time to first token" in text.stdout,
          f"text output shows timings: {text.stdout!r}")
    # ACCEL_CPU_ARCH caps the kernels: a bfloat16 run (more prompt rows than the GEMV takes, so
    # oneDNN's capped bf16 matmul or the f32 blocks) reports its tier and generates; a name that is
    # no tier is an error that lists the valid ones.
    for tier in ("scalar", "avx2"):
        capped = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", len(greedy), "--dtype", "bfloat16",
                             "--json", env={"ACCEL_CPU_ARCH": tier}), f"ACCEL_CPU_ARCH={tier}")
        check(capped.get("cpu_tier") in (tier, "scalar"), f"ACCEL_CPU_ARCH={tier}: cpu_tier {capped.get('cpu_tier')!r}")
        check(len(capped.get("generated_ids", [])) == len(greedy), f"ACCEL_CPU_ARCH={tier}: {len(greedy)} new tokens")
    bad = run(accel, folder, "--ids", ids, "--max-new-tokens", 2, env={"ACCEL_CPU_ARCH": "avx3"})
    check(bad.returncode != 0 and "ACCEL_CPU_ARCH=avx3" in bad.stderr and "avx512_bf16" in bad.stderr,
          f"ACCEL_CPU_ARCH=avx3 is refused with the valid names: {bad.returncode} {bad.stderr.strip()!r}")


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


def weight_bytes(folder):
    """Bytes of the weights a safetensors checkpoint holds (its header's offsets)."""
    raw = (folder / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    return sum(e["data_offsets"][1] - e["data_offsets"][0] for k, e in header.items() if k != "__metadata__")


def write_llama(folder, layers=20, hidden=64, inter=256, heads=4, kv_heads=2, vocab=256):
    """A LLaMA folder (config.json, f32 model.safetensors) with deterministic small weights: many
    small blocks, so that a third of the weights holds a few of them beside the KV cache."""
    folder.mkdir(parents=True, exist_ok=True)
    head_dim = hidden // heads
    shapes = [("model.embed_tokens.weight", [vocab, hidden])]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [(p + "self_attn.q_proj.weight", [hidden, hidden]), (p + "self_attn.k_proj.weight", [kv_heads * head_dim, hidden]),
                   (p + "self_attn.v_proj.weight", [kv_heads * head_dim, hidden]), (p + "self_attn.o_proj.weight", [hidden, hidden]),
                   (p + "mlp.gate_proj.weight", [inter, hidden]), (p + "mlp.up_proj.weight", [inter, hidden]),
                   (p + "mlp.down_proj.weight", [hidden, inter]), (p + "input_layernorm.weight", [hidden]),
                   (p + "post_attention_layernorm.weight", [hidden])]
    shapes += [("model.norm.weight", [hidden]), ("lm_head.weight", [vocab, hidden])]
    header, blobs, offset, state = {}, [], 0, 12345
    for name, shape in shapes:
        n = 1
        for d in shape:
            n *= d
        if name.endswith("norm.weight"):
            values = array.array("f", [1.0] * n)
        else:
            values = array.array("f", bytes(4 * n))
            for k in range(n):
                state = (state * 1103515245 + 12345) % 2147483648
                values[k] = (state / 2147483648.0 - 0.5) * 0.2
        blob = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(folder / "model.safetensors", "wb") as out:
        out.write(len(text).to_bytes(8, "little") + text)
        for blob in blobs:
            out.write(blob)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu"}))


def placement(accel, models, work):
    write_llama(work / "llama20")
    # A third of the weights of the 20-layer model; as much as all its weights for the two-layer GPT-2, whose
    # one block with the KV cache and activations needs more than a third.
    for folder, share in ((work / "llama20", 1 / 3), (models / "tiny_gpt2", 1.0)):
        name = folder.name
        ids = "3,1,4,1,5,9"
        base = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", 8, "--json"), f"{name}: unrestricted")
        check("device_map" not in base, f"{name}: no placement unless asked")
        budget = int(weight_bytes(folder) * share)
        for policy in ("sync", "prefetch:1", "prefetch:2", "prefetch:4"):
            what = f"{name} --max-memory cpu={budget} --offload {policy}"
            out = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", 8, "--max-memory", f"cpu={budget}",
                              "--offload", policy, "--json"), what)
            check(out.get("generated_ids") == base.get("generated_ids"), f"{what}: tokens {out.get('generated_ids')}")
            check("disk" in set(map(str, out.get("device_map", {}).values())), f"{what}: something on disk")
            if name == "llama20":
                check(out.get("offload") == policy, f"{what}: offload {out.get('offload')} (the budget holds it)")
            check(isinstance(out.get("offload_gb_per_s"), (int, float)) and out["offload_gb_per_s"] > 0,
                  f"{what}: offload_gb_per_s {out.get('offload_gb_per_s')}")
            check(out.get("peak_bytes", {}).get("cpu", budget + 1) <= budget, f"{what}: cpu peak {out.get('peak_bytes')} <= {budget}")
            check(any("KV cache" in r["what"] for r in out.get("reservations", [])), f"{what}: the KV cache is reserved")
            check(sum(out.get("placed_bytes", {}).values()) > 0, f"{what}: bytes per device")
            placed_map = out.get("device_map", {})
        for strategy in ("sequential", "balanced", "balanced_low_0"):
            what = f"{name} --device-map {strategy}"
            out = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", 8, "--device-map", strategy,
                              "--max-memory", f"cpu={budget}", "--json"), what)
            check(out.get("generated_ids") == base.get("generated_ids"), f"{what}: tokens")
        # An explicit map from a file, with its disk weights' index in an offload folder of ours.
        plan = {k: "disk" if ".layers." in k or ".h." in k or k.endswith(".layers") or k.endswith(".h") else "cpu"
                for k in placed_map}
        check("disk" in plan.values(), f"{name}: a map with disk blocks to write: {plan}")
        plan_file = work / f"{name}_map.json"
        plan_file.write_text(json.dumps(plan))
        what = f"{name} --device-map FILE --offload-folder"
        out = as_json(run(accel, folder, "--ids", ids, "--max-new-tokens", 8, "--device-map", plan_file,
                          "--offload-folder", work / f"{name}_offload", "--json"), what)
        check(out.get("generated_ids") == base.get("generated_ids"), f"{what}: tokens")
        check((work / f"{name}_offload" / "index.json").exists(), f"{what}: the offload index is written")
    # Bad placement options: exit 1 naming the option, or 2 for a usage mistake.
    folder = work / "llama20"
    bad = run(accel, folder, "--ids", "1,2", "--max-memory", "cpu=1KB")
    check(bad.returncode == 1 and "--max-memory" in bad.stderr, f"a budget too small for one block: {bad.stderr.strip()}")
    bad = run(accel, folder, "--ids", "1,2", "--device-map", "auto", "--offload", "prefetch:9")
    check(bad.returncode == 1 and "--offload" in bad.stderr, f"prefetch:9: {bad.stderr.strip()}")
    bad = run(accel, folder, "--ids", "1,2", "--offload", "sync")
    check(bad.returncode == 2, f"--offload without a placement: exit {bad.returncode}")


def main():
    group, accel, models, work = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    {"reference": lambda: reference(accel, models), "dtypes": lambda: dtypes(accel, models),
     "prompt": lambda: prompt(accel, models, work), "errors": lambda: errors(accel, models, work),
     "placement": lambda: placement(accel, models, work), "formats": lambda: formats(accel, models, work)}[group]()
    print(f"{group}: {'FAILED ' + str(len(FAILURES)) if FAILURES else 'ok'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
