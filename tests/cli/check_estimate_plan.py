#!/usr/bin/env python3
"""Checks `accel estimate-memory` and `accel plan` numbers against values computed here, without accel.

    check_estimate_plan.py ACCEL estimate CONFIG_DIR [--with-head]
        every row of estimate-memory (--json bytes and the table) on a transformers config.json;
        the model tree is rebuilt here from the config and its parameter count must equal the
        published one (PUBLISHED below) before any byte is compared
    check_estimate_plan.py ACCEL spec-estimate QUERIES.json
        estimate-memory on a conformance model spec, against the sizes real Accelerate computed
        (expected/NAME.json: calculate_maximum_sizes, compute_module_sizes with a dtype)
    check_estimate_plan.py ACCEL spec-plan QUERIES.json CASE_ID... [--with-reserve]
        `accel plan --json` on a conformance spec with a case's max_memory / no-split / dtype /
        balancing, against the device map real Accelerate returned for that case; --with-reserve
        raises every budget and takes the excess back with --reserve (same map expected)
    check_estimate_plan.py ACCEL plan-config CONFIG_DIR
        `accel plan` on a config.json (the causal LM, float16) with --reserve, --kv-cache,
        --balanced and --balanced-low-0, against maps from the re-implementation of Accelerate
        0.34.2's infer_auto_device_map / get_balanced_memory below (itself checked against
        Accelerate's answers by spec-plan)

Sizes follow Accelerate: a bool element weighs 1/8 byte, a dtype never upcasts a smaller tensor
and leaves bool / integer tensors alone.
"""

import json
import math
import os
import re
import subprocess
import sys

GIB = 1 << 30
BITS = {"float64": 64, "float32": 32, "float16": 16, "bfloat16": 16, "int64": 64, "int32": 32, "int16": 16,
        "int8": 8, "uint8": 8, "bool": 1}

# Parameter counts of the published models (base model, causal LM).
PUBLISHED = {
    "gpt2": (124_439_808, 124_439_808),              # GPT2Model; GPT2LMHeadModel ties lm_head to wte
    "llama2_7b": (6_607_343_616, 6_738_415_616),     # LlamaModel; + the untied 32000 x 4096 lm_head
    "tinyllama_1.1b": (1_034_512_384, 1_100_048_384),
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def run(accel, *args, expect_rc=0):
    p = subprocess.run([accel, *args], capture_output=True, text=True)
    if p.returncode != expect_rc:
        sys.exit(f"accel {' '.join(args)}: exit {p.returncode}, wanted {expect_rc}\n{p.stdout}\n{p.stderr}")
    return p.stdout, p.stderr


def human_bytes(size, binary=False):
    """accel's (and Accelerate's convert_bytes') units, printed with %g after rounding to 2 decimals;
    `binary` labels the same 1024 steps KiB, MiB, ... as `accel plan` does."""
    units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"] if binary else ["bytes", "KB", "MB", "GB", "TB", "PB"]
    for unit in units[:5]:
        if size < 1024.0:
            return "%g %s" % (int(size * 100 + 0.5) / 100, unit)
        size /= 1024.0
    return "%g %s" % (int(size * 100 + 0.5) / 100, units[5])


def plan_bytes(size):
    return human_bytes(size, binary=True)


# ---- model trees (the conformance spec format) ---------------------------------------------------

def mod(name, cls, params=(), buffers=(), children=()):
    return {"name": name, "class": cls, "params": [{"name": n, "shape": s, "dtype": "float32"} for n, s in params],
            "buffers": [{"name": n, "shape": s, "dtype": d, "persistent": False} for n, s, d in buffers],
            "children": list(children)}


def linear(name, n_in, n_out, bias=False):
    return mod(name, "Linear", [("weight", [n_out, n_in])] + ([("bias", [n_out])] if bias else []))


def gpt2_spec(c, with_head):
    e, n_pos = c["n_embd"], c["n_positions"]
    inner = c.get("n_inner") or 4 * e
    conv = lambda name, n_in, n_out: mod(name, "Conv1D", [("weight", [n_in, n_out]), ("bias", [n_out])])
    norm = lambda name: mod(name, "LayerNorm", [("weight", [e]), ("bias", [e])])
    blocks = [mod(str(i), "GPT2Block", children=[
        norm("ln_1"),
        mod("attn", "GPT2Attention", buffers=[("bias", [1, 1, n_pos, n_pos], "bool"), ("masked_bias", [], "float32")],
            children=[conv("c_attn", e, 3 * e), conv("c_proj", e, e), mod("attn_dropout", "Dropout"),
                      mod("resid_dropout", "Dropout")]),
        norm("ln_2"),
        mod("mlp", "GPT2MLP", children=[conv("c_fc", e, inner), conv("c_proj", inner, e), mod("act", "NewGELUActivation"),
                                        mod("dropout", "Dropout")])]) for i in range(c["n_layer"])]
    body = mod("transformer" if with_head else "", "GPT2Model", children=[
        mod("wte", "Embedding", [("weight", [c["vocab_size"], e])]), mod("wpe", "Embedding", [("weight", [n_pos, e])]),
        mod("drop", "Dropout"), mod("h", "ModuleList", children=blocks), norm("ln_f")])
    spec = {"no_split_modules": ["GPT2Block"], "root": body, "tied": []}
    if with_head:
        spec["root"] = mod("", "GPT2LMHeadModel", children=[body, linear("lm_head", e, c["vocab_size"])])
        if c.get("tie_word_embeddings", True):
            spec["tied"] = [["transformer.wte.weight", "lm_head.weight"]]
    return spec


def llama_spec(c, with_head):
    h, inter = c["hidden_size"], c["intermediate_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    hd = c.get("head_dim") or h // heads
    rms = lambda name: mod(name, "LlamaRMSNorm", [("weight", [h])])
    layers = [mod(str(i), "LlamaDecoderLayer", children=[
        mod("self_attn", "LlamaAttention", children=[linear("q_proj", h, heads * hd), linear("k_proj", h, kv * hd),
                                                     linear("v_proj", h, kv * hd), linear("o_proj", heads * hd, h)]),
        mod("mlp", "LlamaMLP", children=[linear("gate_proj", h, inter), linear("up_proj", h, inter),
                                         linear("down_proj", inter, h), mod("act_fn", "SiLU")]),
        rms("input_layernorm"), rms("post_attention_layernorm")]) for i in range(c["num_hidden_layers"])]
    body = mod("model" if with_head else "", "LlamaModel", children=[
        mod("embed_tokens", "Embedding", [("weight", [c["vocab_size"], h])]), mod("layers", "ModuleList", children=layers),
        rms("norm"), mod("rotary_emb", "LlamaRotaryEmbedding", buffers=[("inv_freq", [hd // 2], "float32")])])
    spec = {"no_split_modules": ["LlamaDecoderLayer"], "root": body, "tied": []}
    if with_head:
        spec["root"] = mod("", "LlamaForCausalLM", children=[body, linear("lm_head", h, c["vocab_size"])])
        if c.get("tie_word_embeddings", False):
            spec["tied"] = [["model.embed_tokens.weight", "lm_head.weight"]]
    return spec


def spec_from_config(c, with_head):
    return (gpt2_spec if c["model_type"] == "gpt2" else llama_spec)(c, with_head)


# ---- Accelerate 0.34.2's size and placement functions, on spec trees --------------------------------

class Node:
    def __init__(self, d, prefix):
        self.name = prefix
        self.cls = d.get("class", "")
        join = lambda n: f"{prefix}.{n}" if prefix else n
        self.params = [(join(p["name"]), p) for p in d.get("params", [])]
        self.buffers = [(join(b["name"]), b) for b in d.get("buffers", [])]
        self.children = [Node(ch, join(ch["name"])) for ch in d.get("children", [])]


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def tensor_bytes(t, dtype=None):
    own = BITS[t.get("dtype", "float32")]
    if dtype is None or t.get("dtype", "float32").startswith(("int", "uint", "bool")):
        bits = own
    else:
        bits = min(own, BITS[dtype])
    return numel(t["shape"]) * bits / 8


def named_tensors(root, tied, buffers=True):
    """(name, tensor) of every parameter and buffer; a tied parameter only under its first name."""
    dup = {}
    for group in tied:
        for n in group:
            dup[n] = group
    seen, out = set(), []
    def walk(node):
        for n, p in node.params:
            key = tuple(dup.get(n, [n]))
            if key in seen:
                continue
            seen.add(key)
            out.append((n, p))
        for ch in node.children:
            walk(ch)
    def walk_buffers(node):
        for n, b in node.buffers:
            out.append((n, b))
        for ch in node.children:
            walk_buffers(ch)
    walk(root)
    if buffers:
        walk_buffers(root)
    return out


def compute_module_sizes(root, tied, dtype=None):
    sizes = {}
    for name, t in named_tensors(root, tied):
        size = tensor_bytes(t, dtype)
        parts = name.split(".")
        for i in range(len(parts) + 1):
            key = ".".join(parts[:i])
            sizes[key] = sizes.get(key, 0) + size
    return sizes


def get_max_layer_size(entries, sizes, no_split):
    max_size, names = 0, []
    todo = list(entries)
    while todo:
        name, node = todo.pop(0)
        kids = node.children if isinstance(node, Node) else []
        if not kids or node.cls in no_split:
            s = sizes.get(name, 0)
            if s > max_size:
                max_size, names = s, [name]
            elif s == max_size:
                names.append(name)
        else:
            todo = [(k.name, k) for k in kids] + todo
    return max_size, names


def initial_entries(root):
    return [(n, p) for n, p in root.params] + [(k.name, k) for k in root.children] + [(n, b) for n, b in root.buffers]


def calculate_maximum_sizes(root, tied, no_split):
    sizes = compute_module_sizes(root, tied)
    return sizes[""], get_max_layer_size(initial_entries(root), sizes, no_split)


def clean_device_map(dm, module_name=""):
    prefix = "" if module_name == "" else module_name + "."
    values = [v for k, v in dm.items() if k.startswith(prefix)]
    if values and all(v == values[0] for v in values):
        for k in [k for k in dm if k.startswith(prefix)]:
            del dm[k]
        dm[module_name] = values[0]
    kids = [k for k in dm if k.startswith(prefix) and len(k) > len(module_name)]
    idx = len(module_name.split(".")) + 1 if module_name else 1
    for child in sorted(set(".".join(k.split(".")[:idx]) for k in kids)):
        clean_device_map(dm, child)
    return dm


def infer_auto_device_map(root, tied, max_memory, no_split, dtype=None):
    """max_memory: list of (key, bytes) in Accelerate's order; keys are ints, "cpu", "disk". No ties."""
    assert not tied, "the re-implementation here covers untied models only"
    budgets = dict(max_memory)
    devices = [k for k, _ in max_memory] + ([] if "disk" in budgets else ["disk"])
    gpus = [d for d in devices if d not in ("cpu", "disk")]
    main = [gpus[0], "cpu"] if gpus else ["cpu"]
    sizes = compute_module_sizes(root, tied, dtype)
    todo = initial_entries(root)
    max_layer, max_names = get_max_layer_size(todo, sizes, no_split)
    dm, current, used = {}, 0, 0
    while todo:
        name, node = todo.pop(0)
        max_names = [n for n in max_names if n != name and not n.startswith(name + ".")]
        if not max_names:
            max_layer, max_names = get_max_layer_size([(n, m) for n, m in todo if isinstance(m, Node)], sizes, no_split)
        size = sizes.get(name, 0)
        device = devices[current]
        cap = budgets[device] if device != "disk" else None
        if cap is not None and device in main:
            cap -= max_layer
        if cap is not None and used + size > cap:
            kids = node.children if isinstance(node, Node) else []
            if not kids or node.cls in no_split:
                current += 1
                todo.insert(0, (name, node))
                used = 0
            else:
                todo = [(n, p) for n, p in node.params] + [(k.name, k) for k in kids] + todo
                max_layer, max_names = get_max_layer_size([(n, m) for n, m in todo if isinstance(m, Node)], sizes,
                                                          no_split)
        else:
            used += size
            dm[name] = device
    return clean_device_map(dm)


def get_balanced_memory(root, tied, max_memory, no_split, dtype=None, low_zero=False):
    budgets = dict(max_memory)
    gpus = sorted(k for k, v in max_memory if isinstance(k, int) and v > 0)
    n = len(gpus)
    if n == 0:
        return max_memory
    if n == 1:
        low_zero = False
    sizes = compute_module_sizes(root, tied, dtype)
    per_gpu = sizes[""] // (n - 1 if low_zero else n)
    buffer = 0
    if no_split:
        found = {}
        def walk(node):
            if node.name and node.cls in no_split and node.cls not in found and node.name in sizes:
                found[node.cls] = sizes[node.name]
            for k in node.children:
                walk(k)
        walk(root)
        buffer = max(found.values()) if found else 0
    keys = list(sizes)
    leaves = [k for k in keys if not any(k == "" or p.startswith(k + ".") for p in keys)]
    mods = {k: v for k, v in sizes.items() if k not in leaves}
    keys = list(mods)
    leaves = [k for k in keys if not any(k == "" or p.startswith(k + ".") for p in keys)]
    mean_leaves = int(sum(mods[k] for k in leaves) / max(len(leaves), 1))
    per_gpu += int(1.25 * max(buffer, mean_leaves))
    for g in gpus[:-1]:
        budgets[g] = min(budgets[0] if low_zero and g == 0 else per_gpu, budgets[g])
    if low_zero:
        min_zero = max(0, sizes[""] - sum(budgets[i] for i in range(1, n)))
        budgets[0] = min(min_zero, budgets[0])
    return [(k, budgets[k]) for k, _ in max_memory]


# ---- estimate-memory ----------------------------------------------------------------------------

def expected_rows(root, tied, no_split, dtypes, half_sizes=None):
    """Rows of estimate-memory: sizes from float32, float16 / bfloat16 by the dtype rule."""
    total, (largest, names) = calculate_maximum_sizes(root, tied, no_split)
    rows = {}
    for d in dtypes:
        if d == "float32":
            rows[d] = (largest, total, total * 4)
        elif d in ("float16", "bfloat16"):
            s = half_sizes[d] if half_sizes and d in half_sizes else compute_module_sizes(root, tied, d)
            rows[d] = (max(s.get(n, 0) for n in names) if names else 0, s[""],
                       total * 2)
        else:
            div = 4 if d == "int8" else 8
            rows[d] = (largest / div, total / div, None)
    return rows, names


def compare_estimate(accel, model_arg, rows, names, extra=()):
    out, _ = run(accel, "estimate-memory", model_arg, "--json", *extra)
    got = json.loads(out)
    check(got["largest_layer_names"] == names, f"largest layer names {got['largest_layer_names'][:3]}... != {names[:3]}...")
    by = {r["dtype"]: r for r in got["rows"]}
    for d, (largest, total, training) in rows.items():
        r = by.get(d)
        if r is None:
            check(False, f"no {d} row")
            continue
        # --json byte counts are whole numbers: a sub-byte remainder (int4) rounds up.
        for key, want in (("largest_layer", largest), ("total_size", total), ("training_adam", training)):
            want = None if want is None else math.ceil(want)
            check(r[key] == want and (want is None or isinstance(r[key], int)), f"{d} {key} {r[key]!r} != {want}")
    table, _ = run(accel, "estimate-memory", model_arg, *extra)
    for d, (largest, total, training) in rows.items():
        want = [d, human_bytes(largest), human_bytes(total), "N/A" if training is None else human_bytes(training)]
        line = next((l for l in table.splitlines() if l.startswith(f"| {d} ")), "")
        cells = [c.strip() for c in line.strip("|").split("|")]
        check(cells == want, f"table row {cells} != {want}")
    first = names[0] if names else "(none)"
    more = f" (and {len(names) - 1} more of the same size)" if len(names) > 1 else ""
    check(f"Largest layer: {first}{more}\n" in table, f"table does not name the largest layer {first}{more}")
    return table


def cmd_estimate(accel, config_dir, with_head):
    cfg = json.load(open(os.path.join(config_dir, "config.json")))
    spec = spec_from_config(cfg, with_head)
    root = Node(spec["root"], "")
    params = sum(numel(t["shape"]) for _, t in named_tensors(root, spec["tied"], buffers=False))
    key = os.path.basename(os.path.normpath(config_dir))
    if key in PUBLISHED:
        check(params == PUBLISHED[key][1 if with_head else 0],
              f"the tree rebuilt from {key} has {params} parameters, published {PUBLISHED[key]}")
    dtypes = ["float32", "float16", "bfloat16", "int8", "int4"]
    rows, names = expected_rows(root, spec["tied"], spec["no_split_modules"], dtypes)
    # Accelerate's own rows: float32, int8, int4 and the training column equal the ones above;
    # its float16 halves everything, where a cast keeps bool buffers (GPT-2's attn.bias) whole.
    total32 = rows["float32"][1]
    bool_bytes = sum(tensor_bytes(t) for n, t in named_tensors(root, spec["tied"]) if t.get("dtype") == "bool")
    check(rows["float16"][1] == total32 / 2 + bool_bytes / 2, "float16 differs from Accelerate's by more than the bools")
    check(rows["float32"][2] == 4 * total32 and rows["float16"][2] == 2 * total32, "training column")
    print(f"{key} ({'causal LM' if with_head else 'base model'}): {params} parameters, float32 {total32:.0f} bytes, "
          f"largest layer {names[0]} {rows['float32'][0]:.0f} bytes")
    compare_estimate(accel, config_dir, rows, names, ["--with-head"] if with_head else [])


# ---- conformance specs --------------------------------------------------------------------------

def load_query(path):
    q = json.load(open(path))
    spec_path = os.path.normpath(os.path.join(os.path.dirname(path), q["spec"]))
    name = os.path.splitext(os.path.basename(path))[0]
    expected = json.load(open(os.path.join(os.path.dirname(path), "..", "expected", name + ".json")))
    return q, spec_path, json.load(open(spec_path)), {r["id"]: r for r in expected["results"]}


def cmd_spec_estimate(accel, query_path):
    q, spec_path, spec, expected = load_query(query_path)
    ref = expected["calculate_maximum_sizes"]["result"]
    total, largest, names = ref["total_size"], ref["largest_layer"]["max_size"], ref["largest_layer"]["layer_names"]
    root = Node(spec["root"], "")
    # Accelerate's own compute_module_sizes(dtype=...) answers, where the query file has one.
    half = {}
    for case in q["cases"]:
        d = case["args"].get("dtype")
        if case["op"] == "compute_module_sizes" and d in ("float16", "bfloat16") and not case["args"].get("special_dtypes"):
            half[d] = expected[case["id"]]["result"]
    dtypes = ["float32"] + sorted(half) + ["int8", "int4"]
    rows = {"float32": (largest, total, total * 4), "int8": (largest / 4, total / 4, None),
            "int4": (largest / 8, total / 8, None)}
    for d, s in half.items():
        rows[d] = (max(s.get(n, 0) for n in names), s[""], total * 2)
    # The tree walk here must agree with Accelerate before it is trusted on configs.
    check(calculate_maximum_sizes(root, spec.get("tied", []), spec.get("no_split_modules", [])) == (total, (largest, names)),
          "calculate_maximum_sizes here differs from Accelerate's")
    print(f"{spec['name']}: Accelerate total {total}, largest layer {largest} ({len(names)} of them), rows {sorted(rows)}")
    compare_estimate(accel, spec_path, rows, names, ["--dtypes", ",".join(dtypes)])


def mm_arg(max_memory):
    return ",".join(f"{k}={v}" for k, v in max_memory.items())


def plan_json(accel, model, *args):
    out, err = run(accel, "plan", model, *args, "--json")
    return json.loads(out), err


def cmd_spec_plan(accel, query_path, case_ids):
    """With --with-reserve, every budget grows by an amount that --reserve then takes back: the
    map must still be Accelerate's for the original budgets (balanced ones included)."""
    with_reserve = "--with-reserve" in case_ids
    case_ids = [c for c in case_ids if c != "--with-reserve"]
    q, spec_path, spec, expected = load_query(query_path)
    cases = {c["id"]: c for c in q["cases"]}
    root = Node(spec["root"], "")
    tied = spec.get("tied", [])
    for cid in case_ids:
        case, ref = cases[cid], expected[cid]["result"]
        a = case["args"]
        budgets = dict(a["max_memory"])
        reserve = []
        if with_reserve:
            for i, k in enumerate(budgets):
                budgets[k] += 1000 * (i + 1) + 3
                reserve.append(f"{k}={1000 * (i + 1) + 3}")
        args = ["--max-memory", mm_arg(budgets), "--no-split", ",".join(a.get("no_split_module_classes", []))]
        if reserve:
            args += ["--reserve", ",".join(reserve)]
        if a.get("dtype"):
            args += ["--dtype", a["dtype"]]
        if case["op"] == "balanced_infer_auto_device_map":
            args.append("--balanced-low-0" if a.get("low_zero") else "--balanced")
            ref = ref["device_map"]
        else:
            assert case["op"] == "infer_auto_device_map", case["op"]
        got, _ = plan_json(accel, spec_path, *args)
        check(got == ref, f"{cid}: accel plan {got} != Accelerate {ref}")
        if not tied:
            mm = [(int(k) if k.isdigit() else k, v) for k, v in a["max_memory"].items()]
            ns = a.get("no_split_module_classes", [])
            if case["op"] == "balanced_infer_auto_device_map":
                mm = get_balanced_memory(root, tied, mm, ns, a.get("dtype"), a.get("low_zero", False))
            mine = infer_auto_device_map(root, tied, mm, ns, a.get("dtype"))
            check(mine == ref, f"{cid}: the re-implementation here gives {mine}, Accelerate {ref}")
        print(f"{cid}{' (budgets + --reserve)' if with_reserve else ''}: {len(ref)} entries match Accelerate")


# ---- plan on a config.json ----------------------------------------------------------------------

def cmd_plan_config(accel, config_dir):
    cfg = json.load(open(os.path.join(config_dir, "config.json")))
    spec = spec_from_config(cfg, True)  # plan places the causal LM
    root, tied, ns = Node(spec["root"], ""), spec["tied"], spec["no_split_modules"]
    f16 = compute_module_sizes(root, tied, "float16")
    model = int(f16[""])
    kv_heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_seq = 2 * cfg["num_hidden_layers"] * kv_heads * head_dim * 4096 * 2  # one 4096-token float16 sequence
    batch = max(1, round(0.2 * model / kv_seq))  # a cache of about a fifth of the model
    kv = kv_seq * batch
    kv_arg = f"4096x{batch}"
    print(f"causal LM in float16: {model} bytes; KV cache {kv_arg} in float16: {kv} bytes")

    def expect(budgets, cli_args, reserve=None, balanced=None, label=""):
        """budgets: [(key, bytes)]; reserve: {key: bytes} taken off before placing (and before balancing)."""
        free = [(k, max(0, v - (reserve or {}).get(k, 0))) for k, v in budgets]
        if balanced is not None:
            free = get_balanced_memory(root, tied, free, ns, "float16", balanced == "low0")
        want = infer_auto_device_map(root, tied, free, ns, "float16")
        got, err = plan_json(accel, config_dir, "--max-memory", mm_arg(dict(budgets)), "--dtype", "float16", *cli_args)
        check(got == want, f"{label}: accel plan {json.dumps(got)} != {json.dumps(want)}")
        on = {}
        for name, dev in want.items():
            on[dev] = on.get(dev, 0) + f16[name]
        print(f"{label}: {len(want)} entries match; bytes per device {on}")
        return got, err

    def devices(dm):
        return set(dm.values())

    gpu = model * 6 // 10
    two = [(0, gpu), (1, gpu), ("cpu", 64 * GIB)]
    plain, _ = expect(two, [], label="2 GPUs of 60% of the model")
    check(devices(plain) == {0, 1}, f"the model spans both GPUs and nothing else: {devices(plain)}")
    r = model // 10
    reserved, _ = expect(two, ["--reserve", f"0={r},1={r}"], {0: r, 1: r}, label="--reserve 10% of the model each")
    check(reserved != plain and "cpu" in devices(reserved), "--reserve pushes weights to the cpu")
    # The KV cache is split evenly over the GPUs: the same map as --reserve with half each.
    with_kv, err = expect(two, ["--kv-cache", kv_arg], {0: kv // 2, 1: kv // 2}, label=f"--kv-cache {kv_arg}")
    check(f"= {plan_bytes(kv)}, reserved on GPU 0, 1 ({plan_bytes(kv / 2)} each)" in err, f"--kv-cache note: {err!r}")
    same, _ = plan_json(accel, config_dir, "--max-memory", mm_arg(dict(two)), "--dtype", "float16",
                        "--reserve", f"0={kv // 2},1={kv // 2}")
    check(same == with_kv, "--kv-cache and the equivalent --reserve give different maps")
    check(with_kv != plain, "the KV cache changes the map")
    expect(two, ["--kv-cache", kv_arg, "--reserve", f"0={r}"], {0: kv // 2 + r, 1: kv // 2},
           label=f"--kv-cache {kv_arg} + --reserve 0=10%")
    table, _ = run(accel, "plan", config_dir, "--max-memory", mm_arg(dict(two)), "--dtype", "float16", "--kv-cache",
                   kv_arg, "--reserve", f"0={r}")
    for dev, held in ((0, kv / 2 + r), (1, kv / 2)):
        row = r"\| %d +\| [^|]+\| %s +\| %s +\|" % (dev, re.escape(plan_bytes(held)), re.escape(plan_bytes(gpu)))
        check(re.search(row, table) is not None, f"the table shows GPU {dev}'s reserve {plan_bytes(held)}")
    check("KV cache: 2 x %d layers x %d KV heads x %d head dim x 4096 tokens x batch %d in float16 = %s" %
          (cfg["num_hidden_layers"], kv_heads, head_dim, batch, plan_bytes(kv)) in table, "the table names the KV cache")

    # --offload prefetch:N keeps N more of the largest layer (plus 3 pages of read alignment) free
    # on the first GPU, where offloaded blocks run: the same map as the equivalent --reserve.
    largest = get_max_layer_size(initial_entries(root), f16, ns)[0]
    ring = 2 * (largest + 3 * 4096)
    ahead, err = expect(two, ["--offload", "prefetch:2"], {0: ring}, label="--offload prefetch:2")
    check(re.search(r"read-ahead: prefetch:2 = 2 x the largest layer \(.+\) = %s, reserved on 0" % re.escape(plan_bytes(ring)),
                    err) is not None, f"--offload note: {err!r}")
    synced, _ = plan_json(accel, config_dir, "--max-memory", mm_arg(dict(two)), "--dtype", "float16", "--offload", "sync")
    check(synced == plain, "--offload sync keeps nothing more free")
    run(accel, "plan", config_dir, "--max-memory", mm_arg(dict(two)), "--offload", "prefetch:9", expect_rc=1)

    roomy = [(0, model), (1, model), ("cpu", 64 * GIB)]
    bal, _ = expect(roomy, ["--balanced"], balanced="even", label="--balanced 2 GPUs of 100%")
    check(devices(bal) == {0, 1}, "--balanced uses both GPUs")
    # GPUs 1 and 2 hold less than the model together, so GPU 0 takes the rest, and only that.
    small = model * 2 // 5
    three = [(0, model), (1, small), (2, small), ("cpu", 64 * GIB)]
    low0, _ = expect(three, ["--balanced-low-0"], balanced="low0", label="--balanced-low-0 100% + 2 x 40%")
    on0 = sum(f16[n] for n, d in low0.items() if d == 0)
    on1 = sum(f16[n] for n, d in low0.items() if d == 1)
    check(0 < on0 < on1, "--balanced-low-0 gives GPU 0 the least")
    # Budgets just above half the model: the KV cache comes off them before they are balanced.
    even, _ = expect(two, ["--balanced"], balanced="even", label="--balanced 2 x 60%")
    bal_kv, _ = expect(two, ["--balanced", "--kv-cache", kv_arg], {0: kv // 2, 1: kv // 2}, balanced="even",
                       label=f"--balanced --kv-cache {kv_arg}, 2 x 60%")
    check(bal_kv != even, "the KV cache changes a balanced map under tight budgets")
    # A cpu-only budget keeps the KV cache on the cpu.
    _, err = expect([("cpu", model // 2)], ["--kv-cache", kv_arg], {"cpu": kv}, label="cpu only --kv-cache")
    check("reserved on cpu" in err, "a cpu-only plan reserves the KV cache on the cpu")


def main():
    accel, cmd, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if cmd == "estimate":
        cmd_estimate(accel, rest[0], "--with-head" in rest[1:])
    elif cmd == "spec-estimate":
        cmd_spec_estimate(accel, rest[0])
    elif cmd == "spec-plan":
        cmd_spec_plan(accel, rest[0], rest[1:])
    elif cmd == "plan-config":
        cmd_plan_config(accel, rest[0])
    else:
        sys.exit(f"unknown command {cmd}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
