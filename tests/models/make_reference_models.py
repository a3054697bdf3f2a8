#!/usr/bin/env python3
"""Builds the tiny reference models under tests/data/models/ and records their outputs.

Usage: python3 tests/models/make_reference_models.py [OUT_DIR]   (default: tests/data/models)

Needs only PyTorch (the Debian package python3-torch); transformers is not used. Every model is
written from scratch here in plain PyTorch, following the published semantics of transformers'
GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM, so the C++ forward
passes are checked against an implementation that does not share their code. The outputs are
committed, so the test suite itself runs without torch. Re-running the script reproduces the
same bytes (fixed seeds, one thread, deterministic writers).

For every model it writes OUT_DIR/<name>/:
  config.json        the keys transformers writes for that model_type (sorted, indent 2)
  model.safetensors  float32 weights, tensor names exactly as the *ForCausalLM state_dict (a tied
                     lm_head is omitted, as transformers saves a tied model)
  reference.json     prompt_ids (12 ids), logits (fp32 full forward of the prompt, one row of
                     vocab_size floats per position, 9 significant digits so each value is the
                     exact float32), greedy_new_tokens (16 tokens, greedy argmax, each step a full
                     forward of prompt + tokens so far, no cache), greedy_logits_last (the
                     last-position logits of the forward that produced the 16th token, i.e. the
                     forward over 12 + 15 = 27 ids), eos_token_id (chosen so that it is not among
                     the greedy tokens, so generation runs the full 16 steps), min_greedy_margin
                     (smallest top-1 minus top-2 logit over the greedy steps, with and without a
                     cache: at least 0.01, argmax is never a near tie), seed (of the weights and
                     prompt), rope (inverse frequencies and attention factor, LLaMA family), notes
                     (semantics, per model). tiny_llama_rope_dynamic also has
                     greedy_new_tokens_cached and greedy_logits_last_cached: the same greedy
                     decoding with a KV cache (prefill, then one token per forward), which differs
                     for dynamic RoPE (see its notes).

Models:
  tiny_gpt2               GPT2LMHeadModel, vocab 96, n_positions 64, n_embd 32, 2 layers, 4 heads,
                          tied lm_head, keys prefixed `transformer.`
  tiny_gpt2_base_keys     the same weights, config and reference, keys without `transformer.`
                          (the layout of the original `gpt2` checkpoint)
  tiny_llama              LlamaForCausalLM, vocab 128, hidden 48, intermediate 96, 2 layers, 6 heads,
                          2 kv heads (GQA), head_dim 8, untied lm_head, no biases
  tiny_llama_tied_headdim tied embeddings, head_dim 16 != hidden 48 / 4 heads, attention and MLP
                          biases, 4 kv heads, 2 layers
  tiny_llama_rope_linear | _dynamic | _llama3 | _yarn   rope_scaling variants, 1 layer, otherwise
                          shaped as tiny_llama (6 heads, 2 kv heads, head_dim 8, untied)
  tiny_mistral            MistralForCausalLM, sliding_window 4, 2 layers, GQA 6 / 2, untied
  tiny_qwen2              Qwen2ForCausalLM, q/k/v biases, tied embeddings, rope_theta 1e6, 2 layers
  All but tiny_gpt2 and tiny_llama use vocab 64 and intermediate 64, hidden 48 (size budget).

Formulas (all fp32):
  GPT-2 (GPT2LMHeadModel): h = wte[ids] + wpe[pos], pos = 0..T-1. Per block:
    a = LayerNorm_1(h) (biased variance, eps = layer_norm_epsilon);
    qkv = a @ c_attn.weight + c_attn.bias (Conv1D: weight is [in, out]), split into q, k, v of
    n_embd each, heads are consecutive slices of head_dim = n_embd / n_head;
    scores = q k^T / sqrt(head_dim) (scale_attn_weights), causal (key j <= query i), softmax;
    h += (softmax @ v, heads concatenated) @ attn.c_proj.weight + bias;
    m = gelu_new(LayerNorm_2(h) @ c_fc.weight + bias) @ mlp.c_proj.weight + bias; h += m;
    gelu_new(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    logits = LayerNorm_f(h) @ wte^T (lm_head tied to wte).
  LLaMA family (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM): h = embed_tokens[ids].
    Per layer: h += o_proj(attn(input_layernorm(h))); h += down_proj(silu(gate_proj(x)) * up_proj(x))
    with x = post_attention_layernorm(h); logits = lm_head(norm(h)) (lm_head = embed_tokens when
    tied). RMSNorm(x) = weight * x / sqrt(mean(x^2) + rms_norm_eps). Linear weights are [out, in].
    Attention: q/k/v = *_proj(x) viewed as [T, heads, head_dim]; RoPE on q and k (half-split:
    rotate_half(x) = cat(-x[d/2:], x[:d/2]); x' = x cos + rotate_half(x) sin, with
    cos/sin = cos/sin(pos * inv_freq) repeated twice along head_dim and multiplied by the rope
    attention factor); query head h uses kv head h // (num_heads / num_kv_heads);
    scores = q k^T * head_dim^-0.5 + mask; softmax in fp32; heads concatenated; o_proj.
    head_dim = config.head_dim when present, else hidden_size / num_attention_heads.
  RoPE inverse frequencies (transformers' modeling_rope_utils, by rope_type; dim = head_dim):
    default: inv_freq[i] = 1 / theta^(2i/dim), i = 0..dim/2-1.
    linear:  default / factor.
    dynamic: for a sequence length L > max_position_embeddings (M):
             theta' = theta * (factor * L / M - (factor - 1))^(dim / (dim - 2)), then default with
             theta'; for L <= M the default frequencies. See the notes of tiny_llama_rope_dynamic
             for which L applies with and without a cache.
    llama3:  wavelen = 2 pi / inv_freq; with low_wavelen = original_max_position_embeddings /
             low_freq_factor and high_wavelen = original_max_position_embeddings / high_freq_factor:
             wavelen < high_wavelen: unchanged; wavelen > low_wavelen: inv_freq / factor;
             otherwise s = (original_max_position_embeddings / wavelen - low_freq_factor) /
             (high_freq_factor - low_freq_factor), inv_freq * ((1 - s) / factor + s).
    yarn:    attention factor = 0.1 ln(factor) + 1 (multiplies cos and sin); beta_fast 32,
             beta_slow 1; corr(r) = dim ln(orig / (2 pi r)) / (2 ln theta);
             low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), dim - 1);
             ramp[i] = clamp((i - low) / (high - low), 0, 1) for i = 0..dim/2-1 (high += 0.001 if
             equal); extrapolation weight e = 1 - ramp;
             inv_freq = (1 / (factor theta^(2i/dim))) (1 - e) + (1 / theta^(2i/dim)) e.
"""

import json
import math
import os
import struct
import sys

import torch

torch.set_num_threads(1)

PROMPT_LEN = 12
NEW_TOKENS = 16
WEIGHT_STD = 0.2


# ----------------------------------------------------------------------------------------------
# Writers


def write_safetensors(path, tensors):
    """tensors: list of (name, float32 tensor). Names are sorted; data follows in that order."""
    items = sorted(tensors, key=lambda kv: kv[0])
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, t in items:
        t = t.detach().to(torch.float32).contiguous()
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def fmt_float(x):
    x = float(x)
    if not math.isfinite(x):
        raise ValueError("non-finite value in reference output")
    return "%.9g" % x


def fmt_row(row):
    return "[" + ",".join(fmt_float(v) for v in row) + "]"


def write_reference(path, ref):
    lines = ["{"]
    entries = []
    for key, value in ref.items():
        if key in ("logits",):
            body = "[\n" + ",\n".join("    " + fmt_row(r) for r in value) + "\n  ]"
        elif key in ("greedy_logits_last", "greedy_logits_last_cached"):
            body = fmt_row(value)
        elif key == "min_greedy_margin":
            body = fmt_float(value)
        elif key == "rope":
            body = json.dumps(value, sort_keys=True)
        else:
            body = json.dumps(value)
        entries.append('  "%s": %s' % (key, body))
    lines.append(",\n".join(entries))
    lines.append("}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def write_config(path, config):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------------------
# Random weights


class Init:
    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def weight(self, *shape):
        return torch.randn(*shape, generator=self.g) * WEIGHT_STD

    def norm(self, n):
        return 1.0 + 0.1 * torch.randn(n, generator=self.g)

    def bias(self, n):
        return 0.1 * torch.randn(n, generator=self.g)

    def ids(self, vocab, n):
        return [int(v) for v in torch.randint(0, vocab, (n,), generator=self.g)]


# ----------------------------------------------------------------------------------------------
# GPT-2


def gpt2_weights(cfg, init):
    d, L, V, P = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
    inner = cfg["n_inner"] or 4 * d
    w = [("transformer.wte.weight", init.weight(V, d)), ("transformer.wpe.weight", init.weight(P, d))]
    for i in range(L):
        p = "transformer.h.%d." % i
        w += [
            (p + "ln_1.weight", init.norm(d)),
            (p + "ln_1.bias", init.bias(d)),
            (p + "attn.c_attn.weight", init.weight(d, 3 * d)),
            (p + "attn.c_attn.bias", init.bias(3 * d)),
            (p + "attn.c_proj.weight", init.weight(d, d)),
            (p + "attn.c_proj.bias", init.bias(d)),
            (p + "ln_2.weight", init.norm(d)),
            (p + "ln_2.bias", init.bias(d)),
            (p + "mlp.c_fc.weight", init.weight(d, inner)),
            (p + "mlp.c_fc.bias", init.bias(inner)),
            (p + "mlp.c_proj.weight", init.weight(inner, d)),
            (p + "mlp.c_proj.bias", init.bias(d)),
        ]
    w += [("transformer.ln_f.weight", init.norm(d)), ("transformer.ln_f.bias", init.bias(d))]
    return w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def attention(q, k, v, q_pos, k_pos, scale, window=None):
    """q: [H, T, d]; k, v: [H, S, d]; q_pos [T], k_pos [S] absolute positions."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    visible = k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        visible = visible & (k_pos[None, :] > q_pos[:, None] - window)
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1)
    return torch.matmul(probs, v)


def gpt2_forward(cfg, W, ids, start=0, cache=None):
    d, H = cfg["n_embd"], cfg["n_head"]
    hd = d // H
    eps = cfg["layer_norm_epsilon"]
    T = len(ids)
    pos = torch.arange(start, start + T)
    h = W["transformer.wte.weight"][torch.tensor(ids)] + W["transformer.wpe.weight"][pos]
    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d." % i
        a = layer_norm(h, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(d, dim=-1)
        q = q.view(T, H, hd).transpose(0, 1)
        k = k.view(T, H, hd).transpose(0, 1)
        v = v.view(T, H, hd).transpose(0, 1)
        if cache is not None:
            if i in cache:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            cache[i] = (k, v)
        k_pos = torch.arange(0, k.shape[1])
        o = attention(q, k, v, pos, k_pos, 1.0 / math.sqrt(hd))
        o = o.transpose(0, 1).reshape(T, d)
        h = h + (o @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"])
        m = layer_norm(h, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = gelu_new(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        h = h + (m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"])
    h = layer_norm(h, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    return h @ W["transformer.wte.weight"].t()


# ----------------------------------------------------------------------------------------------
# RoPE


def rope_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def default_inv_freq(theta, dim):
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rope_init(cfg, seq_len=None):
    """(inv_freq float32 [dim/2], attention factor). seq_len only matters for 'dynamic'."""
    dim = rope_dim(cfg)
    theta = cfg["rope_theta"]
    rs = cfg.get("rope_scaling")
    kind = (rs or {}).get("rope_type", "default")
    if kind == "default":
        return default_inv_freq(theta, dim), 1.0
    factor = rs["factor"]
    if kind == "linear":
        return default_inv_freq(theta, dim) / factor, 1.0
    if kind == "dynamic":
        M = cfg["max_position_embeddings"]
        if seq_len is None or seq_len <= M:
            return default_inv_freq(theta, dim), 1.0
        # transformers evaluates this with a 0-dim int64 tensor for seq_len, i.e. in float32.
        L = torch.tensor(seq_len, dtype=torch.int64)
        base = theta * ((factor * L / M) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), 1.0
    if kind == "llama3":
        inv = default_inv_freq(theta, dim)
        orig = rs["original_max_position_embeddings"]
        lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
        low_wavelen, high_wavelen = orig / lo, orig / hi
        wavelen = 2 * math.pi / inv
        s = (orig / wavelen - lo) / (hi - lo)
        medium = (1 - s) * inv / factor + s * inv
        out = torch.where(wavelen > low_wavelen, inv / factor, inv)
        out = torch.where((wavelen >= high_wavelen) & (wavelen <= low_wavelen), medium, out)
        return out, 1.0
    if kind == "yarn":
        orig = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        att = rs.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def corr(rot):
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

        low = max(math.floor(corr(beta_fast)), 0)
        high = min(math.ceil(corr(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        pos_freqs = theta ** (torch.arange(0, dim, 2).float() / dim)
        inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
        return inv, float(att)
    raise ValueError("unsupported rope_type " + kind)


class RopeState:
    """Inverse frequencies in effect, including transformers' dynamic-NTK bookkeeping: the
    rotary module keeps max_seq_len_cached (initially max_position_embeddings); a forward whose
    largest position id is P uses L = P + 1: if L > max_seq_len_cached, inv_freq is recomputed
    for L and max_seq_len_cached = L; if L < max_position_embeddings while max_seq_len_cached >
    max_position_embeddings, the original inv_freq is restored and max_seq_len_cached reset."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.dynamic = (cfg.get("rope_scaling") or {}).get("rope_type") == "dynamic"
        self.original, self.att = rope_init(cfg)
        self.inv = self.original
        self.M = cfg["max_position_embeddings"]
        self.cached = self.M

    def update(self, max_pos):
        if not self.dynamic:
            return
        L = max_pos + 1
        if L > self.cached:
            self.inv, self.att = rope_init(self.cfg, seq_len=L)
            self.cached = L
        if L < self.M and self.cached > self.M:
            self.inv = self.original
            self.cached = self.M


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, pos, inv, att):
    """x: [H, T, d]."""
    freqs = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos = emb.cos() * att
    sin = emb.sin() * att
    return x * cos[None] + rotate_half(x) * sin[None]


# ----------------------------------------------------------------------------------------------
# LLaMA family


def llama_weights(cfg, init):
    V, d, I = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], rope_dim(cfg)
    mt = cfg["model_type"]
    qkv_bias = cfg.get("attention_bias", False) or mt == "qwen2"
    o_bias = cfg.get("attention_bias", False) and mt != "qwen2"
    mlp_bias = cfg.get("mlp_bias", False)
    w = [("model.embed_tokens.weight", init.weight(V, d))]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        for name, out_f, in_f, bias in (
            ("self_attn.q_proj", H * hd, d, qkv_bias),
            ("self_attn.k_proj", KV * hd, d, qkv_bias),
            ("self_attn.v_proj", KV * hd, d, qkv_bias),
            ("self_attn.o_proj", d, H * hd, o_bias),
            ("mlp.gate_proj", I, d, mlp_bias),
            ("mlp.up_proj", I, d, mlp_bias),
            ("mlp.down_proj", d, I, mlp_bias),
        ):
            w.append((p + name + ".weight", init.weight(out_f, in_f)))
            if bias:
                w.append((p + name + ".bias", init.bias(out_f)))
        w.append((p + "input_layernorm.weight", init.norm(d)))
        w.append((p + "post_attention_layernorm.weight", init.norm(d)))
    w.append(("model.norm.weight", init.norm(d)))
    if not cfg["tie_word_embeddings"]:
        w.append(("lm_head.weight", init.weight(V, d)))
    return w


def rms_norm(x, w, eps):
    x = x.float()
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def linear(W, name, x):
    y = x @ W[name + ".weight"].t()
    if name + ".bias" in W:
        y = y + W[name + ".bias"]
    return y


def sliding_window_of(cfg):
    if cfg["model_type"] == "mistral":
        return cfg.get("sliding_window")
    if cfg["model_type"] == "qwen2" and cfg.get("use_sliding_window"):
        raise ValueError("qwen2 sliding window not modelled here")
    return None


def llama_forward(cfg, W, ids, rope, start=0, cache=None):
    d = cfg["hidden_size"]
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], rope_dim(cfg)
    eps = cfg["rms_norm_eps"]
    window = sliding_window_of(cfg)
    T = len(ids)
    pos = torch.arange(start, start + T)
    rope.update(start + T - 1)
    h = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        x = rms_norm(h, W[p + "input_layernorm.weight"], eps)
        q = linear(W, p + "self_attn.q_proj", x).view(T, H, hd).transpose(0, 1)
        k = linear(W, p + "self_attn.k_proj", x).view(T, KV, hd).transpose(0, 1)
        v = linear(W, p + "self_attn.v_proj", x).view(T, KV, hd).transpose(0, 1)
        q = apply_rope(q, pos, rope.inv, rope.att)
        k = apply_rope(k, pos, rope.inv, rope.att)
        if cache is not None:  # keys are cached after RoPE, as transformers' caches do
            if i in cache:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            cache[i] = (k, v)
        rep = H // KV
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        k_pos = torch.arange(0, k.shape[1])
        o = attention(q, k, v, pos, k_pos, hd ** -0.5, window)
        o = o.transpose(0, 1).reshape(T, H * hd)
        h = h + linear(W, p + "self_attn.o_proj", o)
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps)
        g = linear(W, p + "mlp.gate_proj", x)
        u = linear(W, p + "mlp.up_proj", x)
        h = h + linear(W, p + "mlp.down_proj", torch.nn.functional.silu(g) * u)
    h = rms_norm(h, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return h @ head.t()


# ----------------------------------------------------------------------------------------------
# Model definitions


def gpt2_config(vocab, n_positions, n_embd, n_layer, n_head):
    # tie_word_embeddings is left out: true is the default and transformers does not write it.
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": None,
        "embd_pdrop": 0.1,
        "eos_token_id": None,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_embd": n_embd,
        "n_head": n_head,
        "n_inner": None,
        "n_layer": n_layer,
        "n_positions": n_positions,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab,
    }


def llama_config(vocab=128, hidden=48, inter=96, layers=2, heads=6, kv=2, head_dim=8, max_pos=64,
                 theta=10000.0, rope_scaling=None, tied=False, attention_bias=False, mlp_bias=False):
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": attention_bias,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": max_pos,
        "mlp_bias": mlp_bias,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_scaling": rope_scaling,
        "rope_theta": theta,
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab,
    }


def mistral_config():
    # head_dim is left out (as in the published Mistral-7B configs): hidden_size / heads = 8.
    return {
        "architectures": ["MistralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 48,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "model_type": "mistral",
        "num_attention_heads": 6,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "sliding_window": 4,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": 64,
    }


def qwen2_config():
    # As the published Qwen2 configs: no head_dim key, a sliding_window value that is inert
    # because use_sliding_window is false.
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 48,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "max_window_layers": 2,
        "model_type": "qwen2",
        "num_attention_heads": 6,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": 4,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 64,
    }


COMMON_LLAMA_NOTES = (
    "Decoder: RMSNorm w * x / sqrt(mean(x^2) + eps) in fp32; attention scores q.k * head_dim^-0.5, "
    "softmax in fp32; GQA query head h reads kv head h // (num_attention_heads / num_key_value_heads); "
    "RoPE half-split (rotate_half), cos/sin of pos * inv_freq repeated twice along head_dim, times the "
    "rope attention factor (1 unless yarn); SiLU-gated MLP. All weights and activations fp32. "
    "Greedy: argmax (lowest id on an exact tie; none occur, see min_greedy_margin), each step a full "
    "forward of prompt + generated tokens without a cache. Causal mask: query i sees keys j <= i."
)

GPT2_NOTES = (
    "GPT-2: h = wte[ids] + wpe[0..T-1]; LayerNorm with biased variance, eps 1e-5; Conv1D weights "
    "[in, out] (y = x W + b); c_attn output split q | k | v, head n is columns [n*8, n*8+8) of each; "
    "scores q.k / sqrt(head_dim) (scale_attn_weights, no layer-index scaling), causal (key j <= query i), "
    "softmax in fp32; gelu_new(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); MLP width "
    "4 * n_embd (n_inner null); logits = ln_f(h) wte^T (tied; lm_head.weight not stored). "
    "tie_word_embeddings is absent from config.json: transformers' default (true) applies. "
    "Greedy: argmax, each step a full forward without a cache."
)


def model_specs():
    specs = []
    specs.append(dict(name="tiny_gpt2", kind="gpt2", seed=1001,
                      config=gpt2_config(96, 64, 32, 2, 4), notes=GPT2_NOTES))
    specs.append(dict(
        name="tiny_llama", kind="llama", seed=1002, config=llama_config(),
        notes=COMMON_LLAMA_NOTES + " Untied lm_head, no biases, rope default theta 10000."))
    specs.append(dict(
        name="tiny_llama_tied_headdim", kind="llama", seed=1003,
        config=llama_config(vocab=64, inter=64, heads=4, kv=4, head_dim=16, tied=True,
                            attention_bias=True, mlp_bias=True),
        notes=COMMON_LLAMA_NOTES + " head_dim 16 from config (hidden_size / heads would be 12): "
        "q_proj is [64, 48], o_proj [48, 64]. attention_bias: q, k, v and o_proj have biases; "
        "mlp_bias: gate, up and down have biases. Tied: lm_head = model.embed_tokens.weight, "
        "lm_head.weight not stored."))
    rope_common = dict(vocab=64, inter=64, layers=1)
    specs.append(dict(
        name="tiny_llama_rope_linear", kind="llama", seed=1004,
        config=llama_config(**rope_common, rope_scaling={"rope_type": "linear", "factor": 4.0}),
        notes=COMMON_LLAMA_NOTES + " rope linear: inv_freq = default / 4."))
    specs.append(dict(
        name="tiny_llama_rope_dynamic", kind="llama", seed=1005,
        config=llama_config(**rope_common, max_pos=16,
                            rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
        notes=COMMON_LLAMA_NOTES + " rope dynamic (factor 2, max_position_embeddings M = 16, dim 8): "
        "a forward whose sequence length (largest position id + 1) is L uses, for every position in it, "
        "inv_freq computed with theta' = theta * (2 * L / 16 - 1)^(8 / 6) if L > 16, the default "
        "inv_freq otherwise. The prompt forward (L = 12) uses the default; the no-cache greedy steps "
        "have L = 12 .. 27, so steps with L >= 17 rescale every position. "
        "With a KV cache transformers behaves differently, and greedy_new_tokens_cached / "
        "greedy_logits_last_cached record it: the rotary module keeps max_seq_len_cached, initially M; "
        "each forward takes L = max(position_ids) + 1; if L > max_seq_len_cached it recomputes inv_freq "
        "for L and sets max_seq_len_cached = L; if L < M while max_seq_len_cached > M it restores the "
        "default inv_freq and max_seq_len_cached = M (so L == M after growth keeps the grown inv_freq). "
        "The new inv_freq applies only to the queries and keys computed in that forward; cached keys "
        "keep the rotation they were stored with (keys are cached after RoPE). For this prompt: "
        "prefill positions 0..11 and decode positions 12..15 use the default inv_freq, the token at "
        "position p >= 16 is rotated with inv_freq(L = p + 1). rope.inv_freq_by_seq_len lists "
        "inv_freq for L = 17 .. 28."))
    specs.append(dict(
        name="tiny_llama_rope_llama3", kind="llama", seed=1006,
        config=llama_config(**rope_common, max_pos=256, theta=16.0,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 32}),
        notes=COMMON_LLAMA_NOTES + " rope llama3: theta 16 and head_dim 8 make the default "
        "wavelengths 2 pi / inv_freq = 2pi, 4pi, 8pi, 16pi (6.28, 12.57, 25.13, 50.27); with "
        "original_max_position_embeddings 32, high_freq_wavelen = 32 / 4 = 8 and low_freq_wavelen = "
        "32 / 1 = 32, so pair 0 is high-frequency (kept), pairs 1 and 2 are medium (smoothed, "
        "s = 32 / wavelen - 1 over 3: 0.5155, 0.0911), pair 3 is low-frequency (divided by 8). "
        "(All three bands cannot occur with original_max_position_embeddings 16: the shortest "
        "wavelength is always 2 pi > 16 / 4.) Comparisons: wavelen < high: kept; wavelen > low: / factor; "
        "otherwise smoothed."))
    specs.append(dict(
        name="tiny_llama_rope_yarn", kind="llama", seed=1007,
        config=llama_config(**rope_common, max_pos=64, theta=10.0,
                            rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 16}),
        notes=COMMON_LLAMA_NOTES + " rope yarn: factor 4, original_max_position_embeddings 16, "
        "max_position_embeddings 64 = 4 * 16 (some transformers releases take factor = "
        "max_position_embeddings / original_max_position_embeddings when the latter is given, "
        "others the configured factor; both are 4 here). beta_fast 32, beta_slow 1 (defaults), "
        "truncate (floor/ceil) as default; theta 10 so that the ramp is not a step: "
        "corr(32) = -4.39 -> low 0, corr(1) = 1.62 -> high 2, ramp = [0, 0.5, 1, 1], extrapolation "
        "weight [1, 0.5, 0, 0]. Attention factor 0.1 ln 4 + 1 = 1.1386294 multiplies both cos and sin "
        "(so q.k scales by its square); no other mscale keys are set."))
    specs.append(dict(
        name="tiny_mistral", kind="llama", seed=1008, config=mistral_config(),
        notes=COMMON_LLAMA_NOTES.replace("query i sees keys j <= i",
                                         "sliding window, see below")
        + " Mistral: no head_dim in config (hidden_size / heads = 8). Sliding window mask, every "
        "layer: query at absolute position i sees key j iff i - sliding_window < j <= i, i.e. the "
        "last 4 positions including itself (transformers' sliding_window_overlay: kv_idx > q_idx - "
        "sliding_window, and causal kv_idx <= q_idx). Same rule with a cache (absolute positions)."))
    specs.append(dict(
        name="tiny_qwen2", kind="llama", seed=1009, config=qwen2_config(),
        notes=COMMON_LLAMA_NOTES + " Qwen2: q_proj, k_proj, v_proj have biases, o_proj and the MLP "
        "none; tied lm_head (not stored); rope_theta 1e6; no head_dim in config (48 / 6 = 8). "
        "use_sliding_window is false, so sliding_window (4) is ignored and attention is fully causal "
        "(current transformers sets sliding_window to None in that case)."))
    return specs


# ----------------------------------------------------------------------------------------------
# Reference generation


def greedy(forward, prompt, steps):
    ids = list(prompt)
    margins = []
    last = None
    for _ in range(steps):
        logits = forward(ids)
        row = logits[-1]
        top = torch.topk(row, 2).values
        margins.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(row)))
        last = row
    return ids[len(prompt):], last, min(margins)


def greedy_cached(forward_cached, prompt, steps):
    cache = {}
    ids = list(prompt)
    logits = forward_cached(ids, 0, cache)
    out, rows, margins = [], [], []
    for step in range(steps):
        row = logits[-1]
        rows.append(row)
        top = torch.topk(row, 2).values
        margins.append(float(top[0] - top[1]))
        tok = int(torch.argmax(row))
        out.append(tok)
        ids.append(tok)
        if step + 1 < steps:
            logits = forward_cached([tok], len(ids) - 1, cache)
    return out, rows[-1], min(margins)


def choose_eos(preferred, vocab, avoid, descending=False):
    if preferred not in avoid:
        return preferred
    order = range(vocab - 1, -1, -1) if descending else range(preferred, vocab)
    for t in order:
        if t not in avoid:
            return t
    raise RuntimeError("no free eos id")


MIN_MARGIN = 0.01  # top-1 minus top-2 logit at every greedy step, far above the 1e-4 tolerance
SEED_STRIDE = 7919


def build(spec):
    """Weights and prompt come from seed spec["seed"]; the first of seed, seed + 7919, ... whose
    greedy steps all have a top-1 / top-2 gap of at least MIN_MARGIN is kept."""
    for attempt in range(50):
        result = build_with_seed(spec, spec["seed"] + SEED_STRIDE * attempt)
        if result is not None:
            return result
    raise RuntimeError("no seed with clear greedy margins for " + spec["name"])


def build_with_seed(spec, seed):
    cfg = dict(spec["config"])
    init = Init(seed)
    vocab = cfg["vocab_size"]
    if spec["kind"] == "gpt2":
        weights = gpt2_weights(cfg, init)
    else:
        weights = llama_weights(cfg, init)
    W = dict(weights)
    prompt = init.ids(vocab, PROMPT_LEN)

    ref = {}
    with torch.no_grad():
        if spec["kind"] == "gpt2":
            def fwd(ids):
                return gpt2_forward(cfg, W, ids)

            def fwd_cached(ids, start, cache):
                return gpt2_forward(cfg, W, ids, start, cache)
        else:
            def fwd(ids):
                # One rotary state across the greedy steps (lengths never decrease), as a
                # transformers model called repeatedly without a cache.
                return llama_forward(cfg, W, ids, fwd.rope)

            def fwd_cached(ids, start, cache):
                if start == 0:
                    fwd_cached.rope = RopeState(cfg)
                return llama_forward(cfg, W, ids, fwd_cached.rope, start, cache)

        if spec["kind"] != "gpt2":
            fwd.rope = RopeState(cfg)
        prompt_logits = fwd(prompt)
        if spec["kind"] != "gpt2":
            fwd.rope = RopeState(cfg)
        tokens, last, margin = greedy(fwd, prompt, NEW_TOKENS)
        c_tokens, c_last, c_margin = greedy_cached(fwd_cached, prompt, NEW_TOKENS)

    assert torch.isfinite(prompt_logits).all() and torch.isfinite(last).all()
    assert torch.isfinite(c_last).all()
    if min(margin, c_margin) < MIN_MARGIN:
        return None
    dynamic = (cfg.get("rope_scaling") or {}).get("rope_type") == "dynamic"
    if not dynamic:
        # The cached path is an independent check of the masks and positions used above.
        assert c_tokens == tokens, (spec["name"], tokens, c_tokens)
        assert float((c_last - last).abs().max()) < 1e-4, spec["name"]
    if len(set(tokens)) < 4:  # keep sequences that exercise more than a fixed point
        return None

    avoid = set(tokens) | set(c_tokens)
    if spec["kind"] == "gpt2":
        eos = choose_eos(vocab - 1, vocab, avoid, descending=True)
        cfg["bos_token_id"] = eos
        cfg["eos_token_id"] = eos
    else:
        eos = choose_eos(cfg["eos_token_id"], vocab, avoid | {cfg["bos_token_id"]})
        cfg["eos_token_id"] = eos

    ref["prompt_ids"] = prompt
    ref["logits"] = prompt_logits.tolist()
    ref["greedy_new_tokens"] = tokens
    ref["greedy_logits_last"] = last.tolist()
    if dynamic:
        ref["greedy_new_tokens_cached"] = c_tokens
        ref["greedy_logits_last_cached"] = c_last.tolist()
    ref["eos_token_id"] = eos
    ref["min_greedy_margin"] = min(margin, c_margin)
    ref["seed"] = seed
    if spec["kind"] != "gpt2":
        inv, att = rope_init(cfg)
        rope = {"inv_freq": [float(fmt_float(v)) for v in inv.tolist()], "attention_factor": att}
        if dynamic:
            rope["inv_freq_by_seq_len"] = {
                str(L): [float(fmt_float(v)) for v in rope_init(cfg, seq_len=L)[0].tolist()]
                for L in range(cfg["max_position_embeddings"] + 1, PROMPT_LEN + NEW_TOKENS + 1)}
        ref["rope"] = rope
    ref["notes"] = spec["notes"]
    return cfg, weights, ref


def emit(out_dir, name, cfg, weights, ref):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    write_config(os.path.join(d, "config.json"), cfg)
    write_safetensors(os.path.join(d, "model.safetensors"), weights)
    write_reference(os.path.join(d, "reference.json"), ref)


def main(argv):
    out_dir = argv[1] if len(argv) > 1 else os.path.join("tests", "data", "models")
    for spec in model_specs():
        cfg, weights, ref = build(spec)
        emit(out_dir, spec["name"], cfg, weights, ref)
        print("%-26s prompt %s\n%-26s greedy %s (eos %s, min margin %.4f)" % (
            spec["name"], ref["prompt_ids"], "", ref["greedy_new_tokens"], ref["eos_token_id"],
            ref["min_greedy_margin"]))
        if "greedy_new_tokens_cached" in ref:
            print("%-26s cached %s" % ("", ref["greedy_new_tokens_cached"]))
        if spec["name"] == "tiny_gpt2":
            base = [(k[len("transformer."):], v) for k, v in weights]
            ref_base = dict(ref)
            ref_base["notes"] = ref["notes"] + (
                " Same model as tiny_gpt2, stored with the keys of the original `gpt2` checkpoint "
                "(no `transformer.` prefix: wte.weight, h.0.attn.c_attn.weight, ln_f.weight, ...).")
            emit(out_dir, "tiny_gpt2_base_keys", cfg, base, ref_base)


if __name__ == "__main__":
    main(sys.argv)
