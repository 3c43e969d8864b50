#!/usr/bin/env python3
"""Builds the tiny whole-model fixtures of tests/fixtures/model/ and their references.

Run on the oracle machine (transformers 5.17, torch, safetensors):

    PYTHONUNBUFFERED=1 python3 make_model_fixtures.py --out DIR

For every fixture it
  1. draws random weights from a fixed seed (pure-Python RNG, so the draw is the same on any
     machine), rounds them to bf16, puts them into a transformers model and saves it with
     save_pretrained in bf16 (config.json, model.safetensors or shards + index,
     generation_config.json when transformers writes one);
  2. loads the directory back with transformers in float32 on the CPU (eager attention) and
     records, for several prompts of token ids: the greedy continuation (plain argmax, lowest id
     on ties, no penalties, own loop of full forwards), the top-1/top-2 logit margin of every
     step, the top-k logits of the last prompt position; then the same after the int4
     quantize -> dequantize of issue 2 is applied to the eligible weights (in f32);
     for the embedding model: last-token pooled, L2-normalised last_hidden_state, f32 and int4;
  3. cross-checks transformers' logits against an independent float64 forward written here from
     the safetensors file, and stores the difference in reference.json.

--no-hf skips transformers (weights written by a small safetensors writer, references from the
float64 forward): only for developing the script where transformers is not installed.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import sys

import torch

TOPK = 10
N_GEN = 24
PROMPT_LENS = (1, 5, 17, 40)
EMB_PROMPT_LENS = (1, 2, 5, 17, 40, 64)
GROUP = 128

# ----------------------------------------------------------------------------------------------
# fixture specifications

SPECS = [
    dict(name="qwen2", family="qwen2", seed=1234, vocab=1000, hidden=128, inter=256, layers=2,
         heads=4, kv_heads=2, head_dim=32, theta=1000000.0, tied=True, bias=True, qk_norm=False,
         embedding=False, bos=998, eos=999, gen_eos=[999, 998], max_pos=4096,
         # init scales (see init_weights)
         emb_std=0.35, lin_gain=2.0, out_gain=2.0, norm_spread=0.25, bias_std=0.3,
         final_scale=3.0),
    dict(name="qwen3", family="qwen3", seed=4321, vocab=600, hidden=128, inter=192, layers=2,
         heads=4, kv_heads=2, head_dim=64, theta=10000.0, tied=False, bias=False, qk_norm=True,
         embedding=False, bos=None, eos=599, gen_eos=None, max_pos=2048,
         emb_std=0.35, lin_gain=2.0, out_gain=1.0, norm_spread=0.25, bias_std=0.0,
         final_scale=3.0),
    dict(name="qwen3emb", family="qwen3", seed=777, vocab=400, hidden=128, inter=256, layers=2,
         heads=4, kv_heads=2, head_dim=64, theta=1000000.0, tied=True, bias=False, qk_norm=True,
         embedding=True, bos=398, eos=398, gen_eos=None, max_pos=8192,
         emb_std=0.35, lin_gain=1.0, out_gain=1.0, norm_spread=0.25, bias_std=0.0,
         final_scale=3.0),
]
# the sharded variant: the qwen2 weights, saved in shards, with a Hub-style (v4) config.json
SHARDED = dict(name="qwen2_sharded", base="qwen2", max_shard_size="300KB")


# ----------------------------------------------------------------------------------------------
# deterministic random weights

class Rng:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def normal(self, n, std):
        # Box-Muller on random.random(), whose stream Python keeps stable across versions
        out = []
        rr = self.r.random
        while len(out) < n:
            u1 = rr()
            u2 = rr()
            if u1 <= 0.0:
                continue
            rad = math.sqrt(-2.0 * math.log(u1))
            out.append(rad * math.cos(2.0 * math.pi * u2) * std)
            out.append(rad * math.sin(2.0 * math.pi * u2) * std)
        return out[:n]


def bf16_round(t):
    return t.to(torch.float32).to(torch.bfloat16).to(torch.float32)


def hf_names(spec):
    """Tensor names as the CausalLM class holds them (prefix 'model.')."""
    names = []
    H, I, D = spec["hidden"], spec["inter"], spec["head_dim"]
    nq, nkv = spec["heads"], spec["kv_heads"]
    names.append(("model.embed_tokens.weight", (spec["vocab"], H), "emb"))
    for i in range(spec["layers"]):
        p = "model.layers.%d." % i
        names.append((p + "input_layernorm.weight", (H,), "norm"))
        names.append((p + "self_attn.q_proj.weight", (nq * D, H), "lin"))
        names.append((p + "self_attn.k_proj.weight", (nkv * D, H), "lin"))
        names.append((p + "self_attn.v_proj.weight", (nkv * D, H), "lin"))
        if spec["bias"]:
            names.append((p + "self_attn.q_proj.bias", (nq * D,), "bias"))
            names.append((p + "self_attn.k_proj.bias", (nkv * D,), "bias"))
            names.append((p + "self_attn.v_proj.bias", (nkv * D,), "bias"))
        names.append((p + "self_attn.o_proj.weight", (H, nq * D), "out"))
        if spec["qk_norm"]:
            names.append((p + "self_attn.q_norm.weight", (D,), "norm"))
            names.append((p + "self_attn.k_norm.weight", (D,), "norm"))
        names.append((p + "post_attention_layernorm.weight", (H,), "norm"))
        names.append((p + "mlp.gate_proj.weight", (I, H), "lin"))
        names.append((p + "mlp.up_proj.weight", (I, H), "lin"))
        names.append((p + "mlp.down_proj.weight", (H, I), "out"))
    names.append(("model.norm.weight", (H,), "norm"))
    if not spec["tied"] and not spec["embedding"]:
        names.append(("lm_head.weight", (spec["vocab"], H), "emb"))
    return names


def init_weights(spec):
    """f32 tensors holding bf16 values. Scales chosen so that the residual stream is not
    dominated by the token embedding (a tied tiny model would otherwise repeat its input) and
    the logits spread over a few units (clear top-1/top-2 margins)."""
    rng = Rng(spec["seed"])
    w = {}
    for name, shape, kind in hf_names(spec):
        n = 1
        for s in shape:
            n *= s
        if kind == "emb":
            vals = rng.normal(n, spec["emb_std"])
        elif kind == "lin":
            vals = rng.normal(n, spec["lin_gain"] / math.sqrt(shape[1]))
        elif kind == "out":
            vals = rng.normal(n, spec["out_gain"] / math.sqrt(shape[1]))
        elif kind == "bias":
            vals = rng.normal(n, spec["bias_std"])
        elif kind == "norm":
            vals = [1.0 + v for v in rng.normal(n, spec["norm_spread"])]
            if name.endswith("model.norm.weight"):  # the final norm sets the logit scale
                vals = [spec.get("final_scale", 1.0) * v for v in vals]
        else:
            raise ValueError(kind)
        w[name] = bf16_round(torch.tensor(vals, dtype=torch.float32).reshape(shape))
    return w


def make_prompts(spec, lens):
    r = random.Random(spec["seed"] * 7 + 1)
    return [[r.randrange(spec["vocab"]) for _ in range(n)] for n in lens]


# ----------------------------------------------------------------------------------------------
# the int4 format of issue 2

def int4_eligible(name, t):
    return t.dim() == 2 and t.shape[1] % GROUP == 0


def int4_qdq(w):
    """Quantize -> dequantize one [out, in] f32 tensor (values are bf16): per group of 128 along
    the input dimension, m = the element of largest magnitude (first on ties, sign kept),
    d = fp16(m / -8) (m/-8 in f32), q = clamp(round_half_away(w/d), -8, 7) (0 when d == 0),
    w' = q*d in f32."""
    out_f, in_f = w.shape
    g = w.to(torch.float32).reshape(out_f, in_f // GROUP, GROUP)
    a = g.abs()
    amax = a.max(dim=-1, keepdim=True).values
    pos = torch.arange(GROUP).expand_as(g)
    first = torch.where(a == amax, pos, torch.full_like(pos, GROUP)).min(dim=-1, keepdim=True).values
    m = torch.gather(g, -1, first)
    d = (m / -8.0).to(torch.float16).to(torch.float32)
    x = g / torch.where(d == 0, torch.ones_like(d), d)          # f32 division
    xd = x.to(torch.float64)
    q = torch.sign(xd) * torch.floor(xd.abs() + 0.5)            # half away from zero, exact in f64
    q = q.clamp(-8, 7)
    q = torch.where(d == 0, torch.zeros_like(q), q)
    wq = (q.to(torch.float32) * d).reshape(out_f, in_f)
    return wq


def self_test_int4():
    # ties, sign, rounding half away, clamp at +7, zero group
    w = torch.zeros(2, GROUP)
    w[0, 0] = -2.0
    w[0, 1] = 2.0           # tie in magnitude: the first (-2) wins -> d = 0.25
    w[0, 2] = 0.375         # /0.25 = 1.5 -> 2 (away from zero)
    w[0, 3] = -0.375        # -> -2 ... with d = +0.25: -1.5 -> -2
    w[0, 4] = 0.125         # 0.5 -> 1
    wq = int4_qdq(w)
    assert wq[0, 0].item() == -2.0, wq[0, 0]
    assert wq[0, 1].item() == 1.75, wq[0, 1]  # 2/0.25 = 8 -> clamp 7 -> 1.75
    assert wq[0, 2].item() == 0.5 and wq[0, 3].item() == -0.5 and wq[0, 4].item() == 0.25
    assert torch.all(wq[1] == 0)
    w2 = torch.zeros(1, GROUP)
    w2[0, 5] = 3.0          # positive max: d = -0.375, q = -8
    wq2 = int4_qdq(w2)
    assert wq2[0, 5].item() == 3.0


def quantize_weights(w):
    """Returns (quantized dict, names quantized, names kept)."""
    out, qn, kept = {}, [], []
    for name, t in w.items():
        if int4_eligible(name, t):
            out[name] = int4_qdq(t)
            qn.append(name)
        else:
            out[name] = t.clone()
            if t.dim() == 2:
                kept.append(name)
    return out, qn, kept


# ----------------------------------------------------------------------------------------------
# an independent float64 forward (cross-check of transformers and fallback without it)

def rms(x, w, eps):
    x = x.to(torch.float64)
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w.to(torch.float64)


def manual_forward(spec, w, ids):
    """Returns (logits [T, V] or None, final hidden [T, H]) in float64."""
    f = lambda n: w[n].to(torch.float64)
    T = len(ids)
    H, D, nq, nkv = spec["hidden"], spec["head_dim"], spec["heads"], spec["kv_heads"]
    eps = 1e-6
    h = f("model.embed_tokens.weight")[torch.tensor(ids)]
    pos = torch.arange(T, dtype=torch.float64)
    inv = 1.0 / (spec["theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = pos[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]

    def rope(x):
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(spec["layers"]):
        p = "model.layers.%d." % i
        a = rms(h, f(p + "input_layernorm.weight"), eps)
        q = a @ f(p + "self_attn.q_proj.weight").T
        k = a @ f(p + "self_attn.k_proj.weight").T
        v = a @ f(p + "self_attn.v_proj.weight").T
        if spec["bias"]:
            q = q + f(p + "self_attn.q_proj.bias")
            k = k + f(p + "self_attn.k_proj.bias")
            v = v + f(p + "self_attn.v_proj.bias")
        q = q.reshape(T, nq, D)
        k = k.reshape(T, nkv, D)
        v = v.reshape(T, nkv, D)
        if spec["qk_norm"]:
            q = rms(q, f(p + "self_attn.q_norm.weight"), eps)
            k = rms(k, f(p + "self_attn.k_norm.weight"), eps)
        q, k = rope(q), rope(k)
        rep = nq // nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(D) + mask
        pr = torch.softmax(s, -1)
        o = torch.einsum("hqk,khd->qhd", pr, v).reshape(T, nq * D)
        h = h + o @ f(p + "self_attn.o_proj.weight").T
        m = rms(h, f(p + "post_attention_layernorm.weight"), eps)
        g = m @ f(p + "mlp.gate_proj.weight").T
        u = m @ f(p + "mlp.up_proj.weight").T
        h = h + (torch.nn.functional.silu(g) * u) @ f(p + "mlp.down_proj.weight").T
    h = rms(h, f("model.norm.weight"), eps)
    if spec["embedding"]:
        return None, h
    head = "model.embed_tokens.weight" if spec["tied"] else "lm_head.weight"
    return h @ f(head).T, h


# ----------------------------------------------------------------------------------------------
# reference recording (shared by the transformers and the float64 paths)

def step_record(logits):
    """logits: 1-D tensor. Returns (argmax lowest id on ties, top1 - top2 margin)."""
    lf = logits.to(torch.float64)
    tok = int(torch.argmax(lf).item())  # torch.argmax returns the first maximal index
    mx = lf.max()
    tie = torch.nonzero(lf == mx).flatten()
    tok = int(tie.min().item())
    top2 = torch.topk(lf, 2).values
    return tok, float(top2[0] - top2[1])


def topk_record(logits, k):
    lf = logits.to(torch.float64)
    vals, idx = torch.topk(lf, k)
    # order: value descending, id ascending among equals
    pairs = sorted(zip(idx.tolist(), vals.tolist()), key=lambda p: (-p[1], p[0]))
    return [p[0] for p in pairs], [p[1] for p in pairs]


def greedy(last_logits_fn, prompt, n_gen):
    toks, margins = [], []
    seq = list(prompt)
    first = None
    for step in range(n_gen):
        lg = last_logits_fn(seq)
        if step == 0:
            first = lg
        t, mg = step_record(lg)
        toks.append(t)
        margins.append(mg)
        seq.append(t)
    ids, vals = topk_record(first, TOPK)
    return dict(tokens=toks, margins=margins, topk_ids=ids, topk_logits=vals)


def f32list(t):
    return [float(x) for x in t.to(torch.float32).tolist()]


# ----------------------------------------------------------------------------------------------
# files

def write_safetensors(path, tensors, dtype=torch.bfloat16):
    """Small safetensors writer (only for --no-hf)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].to(dtype).contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = dict(dtype="BF16" if dtype == torch.bfloat16 else "F32",
                            shape=list(t.shape), data_offsets=[off, off + len(raw)])
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as fp:
        fp.write(struct.pack("<Q", len(hb)))
        fp.write(hb)
        for b in blobs:
            fp.write(b)


def read_safetensors_dir(d):
    """name -> f32 tensor for every tensor of the directory (single file or shards)."""
    files = []
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as fp:
            files = sorted(set(json.load(fp)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        with open(os.path.join(d, fn), "rb") as fp:
            n = struct.unpack("<Q", fp.read(8))[0]
            hdr = json.loads(fp.read(n))
            data = fp.read()
        for name, info in hdr.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            raw = bytearray(data[a:b])
            assert info["dtype"] == "BF16", (name, info["dtype"])
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.zeros(0, dtype=torch.bfloat16)
            out[name] = t.to(torch.float32).reshape(info["shape"]).clone()
    return out


def legacy_config(spec):
    """A config.json shaped like the Hub files of the real checkpoints (transformers v4 keys)."""
    if spec["family"] == "qwen2":
        c = {
            "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
            "bos_token_id": spec["bos"], "eos_token_id": spec["eos"], "hidden_act": "silu",
            "hidden_size": spec["hidden"], "initializer_range": 0.02,
            "intermediate_size": spec["inter"], "max_position_embeddings": spec["max_pos"],
            "max_window_layers": spec["layers"], "model_type": "qwen2",
            "num_attention_heads": spec["heads"], "num_hidden_layers": spec["layers"],
            "num_key_value_heads": spec["kv_heads"], "rms_norm_eps": 1e-06,
            "rope_theta": spec["theta"], "sliding_window": spec["max_pos"],
            "tie_word_embeddings": spec["tied"], "torch_dtype": "bfloat16",
            "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False,
            "vocab_size": spec["vocab"],
        }
    else:
        c = {
            "architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
            "attention_dropout": 0.0, "bos_token_id": spec["bos"], "eos_token_id": spec["eos"],
            "head_dim": spec["head_dim"], "hidden_act": "silu", "hidden_size": spec["hidden"],
            "initializer_range": 0.02, "intermediate_size": spec["inter"],
            "max_position_embeddings": spec["max_pos"], "max_window_layers": spec["layers"],
            "model_type": "qwen3", "num_attention_heads": spec["heads"],
            "num_hidden_layers": spec["layers"], "num_key_value_heads": spec["kv_heads"],
            "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": int(spec["theta"]),
            "sliding_window": None, "tie_word_embeddings": spec["tied"],
            "torch_dtype": "bfloat16", "transformers_version": "4.51.3", "use_cache": True,
            "use_sliding_window": False, "vocab_size": spec["vocab"],
        }
    return c


def file_names(spec, w):
    """Tensor names as stored in the file: the embedding model has no 'model.' prefix."""
    if spec["embedding"]:
        return {(n[len("model."):] if n.startswith("model.") else n): t for n, t in w.items()}
    return dict(w)


# ----------------------------------------------------------------------------------------------
# transformers

def hf_config(spec):
    import transformers as tf
    common = dict(vocab_size=spec["vocab"], hidden_size=spec["hidden"],
                  intermediate_size=spec["inter"], num_hidden_layers=spec["layers"],
                  num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
                  max_position_embeddings=spec["max_pos"], rms_norm_eps=1e-6,
                  tie_word_embeddings=spec["tied"], hidden_act="silu",
                  bos_token_id=spec["bos"], eos_token_id=spec["eos"], use_sliding_window=False)
    cls = tf.Qwen2Config if spec["family"] == "qwen2" else tf.Qwen3Config
    if spec["family"] == "qwen3":
        common.update(head_dim=spec["head_dim"], attention_bias=False)
    try:
        cfg = cls(rope_parameters={"rope_type": "default", "rope_theta": spec["theta"]}, **common)
    except TypeError:
        cfg = cls(rope_theta=spec["theta"], **common)
    return cfg


def check_rope(model, spec, where):
    inv = None
    for name, buf in model.named_buffers():
        if name.endswith("rotary_emb.inv_freq"):
            inv = buf
            break
    if inv is None:
        print("  [%s] warning: no rotary_emb.inv_freq buffer found" % where)
        return
    D = spec["head_dim"]
    exp = 1.0 / (spec["theta"] ** (2.0 / D))
    got = float(inv[1])
    if inv.numel() != D // 2 or abs(got - exp) > 1e-6 * exp:
        print("  [%s] WARNING: rope inv_freq %s (n=%d), expected %r (n=%d)" % (
            where, got, inv.numel(), exp, D // 2))
    else:
        print("  [%s] rope inv_freq ok (theta %g, n=%d)" % (where, spec["theta"], D // 2))


def hf_from_pretrained(cls, d):
    import transformers  # noqa: F401
    try:
        m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = cls.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    m = m.to(torch.float32).eval()
    for n, p in m.named_parameters():
        assert p.dtype == torch.float32, (n, p.dtype)
    return m


def hf_save(spec, w, d, max_shard_size=None):
    import transformers as tf
    cfg = hf_config(spec)
    if spec["embedding"]:
        model = tf.Qwen3Model(cfg)
        wf = file_names(spec, w)
    else:
        model = (tf.Qwen2ForCausalLM if spec["family"] == "qwen2" else tf.Qwen3ForCausalLM)(cfg)
        wf = w
    model = model.to(torch.float32)
    params = dict(model.named_parameters())
    if spec["tied"] and "lm_head.weight" in params and "lm_head.weight" not in wf:
        print("  note: lm_head.weight is a separate parameter before tying; set from the embedding")
        wf = dict(wf)
        wf["lm_head.weight"] = wf["model.embed_tokens.weight"]
    missing = set(params) - set(wf)
    extra = set(wf) - set(params)
    assert not missing and not extra, ("parameter names", sorted(missing), sorted(extra))
    with torch.no_grad():
        for n, t in wf.items():
            assert tuple(params[n].shape) == tuple(t.shape), (n, params[n].shape, t.shape)
            params[n].copy_(t)
    if spec["tied"] and not spec["embedding"]:
        if hasattr(model, "tie_weights"):
            model.tie_weights()
        assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight), "not tied"
    check_rope(model, spec, "built")
    model = model.to(torch.bfloat16)
    if not spec["embedding"] and spec.get("gen_eos"):
        model.generation_config.eos_token_id = list(spec["gen_eos"])
    kw = {}
    if max_shard_size:
        kw["max_shard_size"] = max_shard_size
    try:
        model.save_pretrained(d, safe_serialization=True, **kw)
    except TypeError:
        model.save_pretrained(d, **kw)


def postprocess_dir(spec, d, legacy):
    """Drops a tied lm_head.weight if transformers stored one (the Hub files have none) and
    optionally replaces config.json with a Hub-style one."""
    notes = []
    if legacy:
        with open(os.path.join(d, "config.json"), "w") as fp:
            json.dump(legacy_config(spec), fp, indent=2)
            fp.write("\n")
        notes.append("config.json replaced by a Hub-style (v4) config")
    if spec["embedding"]:
        single = os.path.join(d, "model.safetensors")
        t = read_safetensors_dir(d)
        if any(n.startswith("model.") for n in t):
            write_safetensors(single, {(n[6:] if n.startswith("model.") else n): v for n, v in t.items()})
            notes.append("'model.' prefix stripped from the file's names")
    if spec["tied"] and not spec["embedding"]:
        single = os.path.join(d, "model.safetensors")
        if os.path.exists(single):
            t = read_safetensors_dir(d)
            if "lm_head.weight" in t:
                del t["lm_head.weight"]
                write_safetensors(single, t)
                notes.append("tied lm_head.weight removed from the file")
    return notes


def list_files(d):
    return sorted(os.listdir(d))


# ----------------------------------------------------------------------------------------------

def build_fixture(spec, out, use_hf, legacy=False, max_shard_size=None, name=None, w=None):
    name = name or spec["name"]
    d = os.path.join(out, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    print("== %s" % name)
    if w is None:
        w = init_weights(spec)
    notes = []
    if use_hf:
        hf_save(spec, w, d, max_shard_size=max_shard_size)
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), file_names(spec, w))
        legacy = True
        notes.append("written without transformers (--no-hf)")
    notes += postprocess_dir(spec, d, legacy)
    print("  files:", list_files(d))

    # the weights as stored, back in f32, with the CausalLM names
    wd = read_safetensors_dir(d)
    stored_names = sorted(wd)
    if spec["embedding"]:
        assert not any(n.startswith("model.") for n in wd), "embedding file has prefixed names"
        wd = {("model." + n): t for n, t in wd.items()}
    for n, t in w.items():
        if n in wd:
            assert torch.equal(wd[n], t), ("stored weight differs", n)
        else:
            assert n == "lm_head.weight" and spec["tied"], ("missing in file", n)
    wq, qnames, kept = quantize_weights(wd)

    ref = dict(format=1, name=name, family=spec["family"], seed=spec["seed"],
               source="transformers" if use_hf else "float64 forward (no transformers)",
               notes=notes, stored_tensors=stored_names,
               config=dict(n_vocab=spec["vocab"], n_embd=spec["hidden"], n_layer=spec["layers"],
                           n_head=spec["heads"], n_head_kv=spec["kv_heads"],
                           head_dim=spec["head_dim"], n_ff=spec["inter"], rope_theta=spec["theta"],
                           tied=spec["tied"], is_embedding=spec["embedding"],
                           n_ctx_train=spec["max_pos"]),
               int4_quantized=[n for n in sorted(qnames)], int4_kept_bf16=sorted(kept),
               topk=TOPK, n_gen=N_GEN, cases=[])
    if use_hf:
        import transformers as tf
        ref["versions"] = dict(transformers=tf.__version__, torch=torch.__version__,
                               python=sys.version.split()[0])

    models = {}
    if use_hf:
        import transformers as tf
        cls = tf.Qwen3Model if spec["embedding"] else (
            tf.Qwen2ForCausalLM if spec["family"] == "qwen2" else tf.Qwen3ForCausalLM)
        m32 = hf_from_pretrained(cls, d)
        check_rope(m32, spec, "loaded")
        def key_of(n):
            k = n if not spec["embedding"] else "model." + n
            if k == "lm_head.weight" and spec["tied"]:
                k = "model.embed_tokens.weight"
            return k
        # the loaded parameters must equal the stored bf16 values
        for n, p in m32.named_parameters():
            assert torch.equal(p.detach(), wd[key_of(n)]), ("loaded weight differs", n)
        if spec["tied"] and not spec["embedding"]:
            assert torch.equal(m32.lm_head.weight, m32.model.embed_tokens.weight), "loaded model not tied"
        mq = hf_from_pretrained(cls, d)
        with torch.no_grad():
            for n, p in mq.named_parameters():
                p.copy_(wq[key_of(n)])
        if spec["tied"] and not spec["embedding"]:
            assert torch.equal(mq.lm_head.weight, wq["model.embed_tokens.weight"])
        models = dict(f32=m32, int4=mq)

    weights = dict(f32=wd, int4=wq)
    maxdiff = dict(f32=0.0, int4=0.0)

    def hf_last_logits(m):
        def fn(seq):
            with torch.no_grad():
                return m(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].to(torch.float32)
        return fn

    def man_last_logits(ww):
        def fn(seq):
            return manual_forward(spec, ww, seq)[0][-1]
        return fn

    if spec["embedding"]:
        for prompt in make_prompts(spec, EMB_PROMPT_LENS):
            case = dict(prompt=prompt)
            for kind in ("f32", "int4"):
                _, hm = manual_forward(spec, weights[kind], prompt)
                em = torch.nn.functional.normalize(hm[-1], dim=0)
                if use_hf:
                    with torch.no_grad():
                        hs = models[kind](input_ids=torch.tensor([prompt]), use_cache=False).last_hidden_state[0, -1]
                    e = torch.nn.functional.normalize(hs.to(torch.float32), dim=0)
                    maxdiff[kind] = max(maxdiff[kind], float((e.double() - em).abs().max()))
                else:
                    e = em.to(torch.float32)
                case[kind] = dict(embedding=f32list(e))
            cos = float(torch.dot(torch.tensor(case["f32"]["embedding"], dtype=torch.float64),
                                  torch.tensor(case["int4"]["embedding"], dtype=torch.float64)))
            case["cos_f32_int4"] = cos
            print("  prompt len %2d: cos(f32, int4) = %.6f" % (len(prompt), cos))
            ref["cases"].append(case)
    else:
        for prompt in make_prompts(spec, PROMPT_LENS):
            case = dict(prompt=prompt)
            for kind in ("f32", "int4"):
                fn = hf_last_logits(models[kind]) if use_hf else man_last_logits(weights[kind])
                g = greedy(fn, prompt, N_GEN)
                # cross-check every step's logits against the float64 forward
                seq = prompt + g["tokens"][:-1]
                lm, _ = manual_forward(spec, weights[kind], seq)
                if use_hf:
                    with torch.no_grad():
                        lh = models[kind](input_ids=torch.tensor([seq]), use_cache=False).logits[0]
                    lh = lh[len(prompt) - 1:].to(torch.float64)
                    maxdiff[kind] = max(maxdiff[kind], float((lh - lm[len(prompt) - 1:]).abs().max()))
                case[kind] = g
            print("  prompt len %2d: f32 %s  min margin %.4g | int4 agree %d/%d  min margin %.4g" % (
                len(prompt), g_short(case["f32"]["tokens"]), min(case["f32"]["margins"]),
                sum(a == b for a, b in zip(case["f32"]["tokens"], case["int4"]["tokens"])), N_GEN,
                min(case["int4"]["margins"])))
            ref["cases"].append(case)
    ref["crosscheck_max_abs_diff_vs_float64"] = maxdiff
    if use_hf:
        print("  max |transformers f32 - float64 forward|: f32 %.3g int4 %.3g" % (maxdiff["f32"], maxdiff["int4"]))
        if max(maxdiff.values()) > 1e-3:
            print("  WARNING: transformers and the float64 forward disagree")
    if not spec["embedding"]:
        summarize(ref)
    with open(os.path.join(d, "reference.json"), "w") as fp:
        json.dump(ref, fp, indent=1)
        fp.write("\n")
    return ref, w


def g_short(toks):
    return " ".join(str(t) for t in toks[:8]) + " ..."


def summarize(ref):
    for kind, thr in (("f32", 1e-3), ("int4", 1e-2)):
        mins, used, distinct = [], 0, set()
        for c in ref["cases"]:
            ms = c[kind]["margins"]
            mins.append(min(ms))
            k = next((i for i, x in enumerate(ms) if x < thr), len(ms))
            used += k
            distinct.update(c[kind]["tokens"])
        print("  %s: min margin %.4g, steps before the first margin < %g: %d/%d, distinct tokens %d" % (
            kind, min(mins), thr, used, N_GEN * len(ref["cases"]), len(distinct)))
        ref.setdefault("summary", {})[kind] = dict(min_margin=min(mins), steps_checked=used,
                                                   distinct_tokens=len(distinct))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except Exception:
        pass
    self_test_int4()
    print("python %s, torch %s" % (sys.version.split()[0], torch.__version__))
    if not a.no_hf:
        import transformers
        print("transformers %s" % transformers.__version__)
    os.makedirs(a.out, exist_ok=True)
    use_hf = not a.no_hf
    failures = 0
    built = {}
    for spec in SPECS:
        if a.only and spec["name"] != a.only:
            continue
        try:
            ref, w = build_fixture(spec, a.out, use_hf, legacy=spec["embedding"])
            built[spec["name"]] = (spec, ref, w)
        except Exception as e:  # keep going: one run must bring back as much as it can
            import traceback
            traceback.print_exc()
            print("FAILED %s: %r" % (spec["name"], e))
            failures += 1
    if "qwen2" in built:
        spec, ref0, w = built["qwen2"]
        try:
            ref1, _ = build_fixture(spec, a.out, use_hf, legacy=True,
                                    max_shard_size=SHARDED["max_shard_size"], name=SHARDED["name"], w=w)
            d = os.path.join(a.out, SHARDED["name"])
            if use_hf and not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
                print("WARNING: the sharded variant has no index.json")
            same = all(c0[k] == c1[k] for c0, c1 in zip(ref0["cases"], ref1["cases"]) for k in ("f32", "int4"))
            print("  sharded references identical to qwen2's: %s" % same)
        except Exception as e:
            import traceback
            traceback.print_exc()
            print("FAILED %s: %r" % (SHARDED["name"], e))
            failures += 1
    print("done, %d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
