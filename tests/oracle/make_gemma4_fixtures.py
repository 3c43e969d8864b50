#!/usr/bin/env python3
"""Builds the tiny Gemma 4 fixtures of tests/fixtures/model/ and their transformers references.

Run on the oracle machine (transformers 5.17, torch; CPU is enough):

    PYTHONUNBUFFERED=1 python3 tests/oracle/make_gemma4_fixtures.py --out tests/fixtures/model

Same conventions as make_model_fixtures.py (whose helpers it imports): pure-Python seeded RNG
weights rounded to bf16, saved with save_pretrained in bf16; references from transformers in
float32 on the CPU with eager attention: greedy continuation (own loop of full forwards,
use_cache=False, argmax lowest id on ties), top-1/top-2 margin of every step, top-10 logits of
the last prompt position, for the stored weights (f32) and after the int4 quantize->dequantize
of issue 2 (int4); plus a cross-check against an independent float64 forward written here.

Fixtures (see tests/oracle/README.md):
  gemma4_e      Gemma4ForConditionalGeneration / gemma4, text under model.language_model.*, no
                vision/audio towers (vision_config = audio_config = None). Every E2B/E4B
                mechanism: per-layer embeddings (PLE), KV sharing (2 shared sliding + 2 shared
                full layers, whose sources are not the last non-shared layer overall),
                double-wide MLP on the shared layers, sliding window 8 < prompt lengths, both
                layer types with their own head dims, proportional partial RoPE on full layers,
                v-norm, layer_scalar, final logit softcapping, tied head.
  gemma4_dense  Gemma4UnifiedForConditionalGeneration / gemma4_unified (the 12B's class): no PLE,
                no sharing, attention_k_eq_v with num_global_key_value_heads on full layers.

--no-hf writes the files itself and takes the references from the float64 forward (development
only, no transformers).
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import (  # noqa: E402
    N_GEN, PROMPT_LENS, TOPK, Rng, bf16_round, g_short, greedy, hf_from_pretrained,
    make_prompts, quantize_weights, read_safetensors_dir, self_test_int4, summarize,
    write_safetensors)

S_, F_ = "sliding_attention", "full_attention"

SPECS = [
    dict(name="gemma4_e", arch="Gemma4ForConditionalGeneration", model_type="gemma4", seed=2468,
         vocab=512, hidden=128, inter=128, layers=7,
         # non-shared: 0 S, 1 S, 2 F; shared (num_kv_shared_layers = 4): 3 S, 4 F, 5 S, 6 F.
         # Shared sliding layers read layer 1, shared full layers read layer 2.
         layer_types=[S_, S_, F_, S_, F_, S_, F_],
         heads=4, kv_heads=1, head_dim=32, global_head_dim=64, global_kv_heads=None,
         k_eq_v=False, ple_dim=128, kv_shared=4, double_wide=True, window=8, softcap=30.0,
         theta_local=10000.0, theta_global=1000000.0, partial=0.25,
         pad=0, eos=1, bos=2, gen_eos=[1, 106], max_pos=4096,
         emb_std=0.1, lin_gain=2.0, out_gain=1.0, norm_spread=0.25, final_scale=6.0,
         scalar_mean=0.8, scalar_std=0.15, q_norm_scale=0.5, k_norm_scale=0.25),
    dict(name="gemma4_dense", arch="Gemma4UnifiedForConditionalGeneration",
         model_type="gemma4_unified", seed=1357,
         vocab=512, hidden=128, inter=128, layers=6,
         layer_types=[S_, S_, F_, S_, S_, F_],
         heads=4, kv_heads=2, head_dim=32, global_head_dim=64, global_kv_heads=1,
         k_eq_v=True, ple_dim=0, kv_shared=0, double_wide=False, window=8, softcap=30.0,
         theta_local=10000.0, theta_global=1000000.0, partial=0.25,
         pad=0, eos=1, bos=2, gen_eos=[1, 106], max_pos=4096,
         emb_std=0.1, lin_gain=2.0, out_gain=1.0, norm_spread=0.25, final_scale=6.0,
         scalar_mean=0.8, scalar_std=0.15, q_norm_scale=0.5, k_norm_scale=0.25),
]

PREFIX = "model.language_model."


# ----------------------------------------------------------------------------------------------
# derived per-layer geometry (the rules of modeling_gemma4.py)

def geometry(spec):
    L = spec["layers"]
    types = spec["layer_types"]
    first_shared = L - spec["kv_shared"]
    out = []
    for i in range(L):
        full = types[i] == F_
        hd = spec["global_head_dim"] if full else spec["head_dim"]
        alt = spec["k_eq_v"] and full                  # K = V, num_global_key_value_heads
        nkv = spec["global_kv_heads"] if alt else spec["kv_heads"]
        shared = spec["kv_shared"] > 0 and i >= first_shared
        src = i
        if shared:
            prev = types[:first_shared]
            src = len(prev) - 1 - prev[::-1].index(types[i])
        ff = spec["inter"] * (2 if (spec["double_wide"] and shared) else 1)
        out.append(dict(full=full, head_dim=hd, kv_heads=nkv, k_eq_v=alt, shared=shared,
                        kv_source=src, ff=ff))
    return out


def text_names(spec):
    """(name without PREFIX, shape, init kind) of every stored text tensor."""
    H, V, L, S = spec["hidden"], spec["vocab"], spec["layers"], spec["ple_dim"]
    nq = spec["heads"]
    names = [("embed_tokens.weight", (V, H), "emb"), ("norm.weight", (H,), "final_norm")]
    if S:
        names.append(("embed_tokens_per_layer.weight", (V, L * S), "ple_emb"))
        names.append(("per_layer_model_projection.weight", (L * S, H), "lin"))
        names.append(("per_layer_projection_norm.weight", (S,), "norm"))
    for i, g in enumerate(geometry(spec)):
        p = "layers.%d." % i
        hd, nkv, ff = g["head_dim"], g["kv_heads"], g["ff"]
        names.append((p + "input_layernorm.weight", (H,), "norm"))
        names.append((p + "self_attn.q_proj.weight", (nq * hd, H), "lin"))
        names.append((p + "self_attn.q_norm.weight", (hd,), "norm"))
        if not g["shared"]:
            names.append((p + "self_attn.k_proj.weight", (nkv * hd, H), "lin"))
            names.append((p + "self_attn.k_norm.weight", (hd,), "norm"))
            if not g["k_eq_v"]:
                names.append((p + "self_attn.v_proj.weight", (nkv * hd, H), "lin"))
        names.append((p + "self_attn.o_proj.weight", (H, nq * hd), "out"))
        names.append((p + "post_attention_layernorm.weight", (H,), "norm"))
        names.append((p + "pre_feedforward_layernorm.weight", (H,), "norm"))
        names.append((p + "post_feedforward_layernorm.weight", (H,), "norm"))
        names.append((p + "mlp.gate_proj.weight", (ff, H), "lin"))
        names.append((p + "mlp.up_proj.weight", (ff, H), "lin"))
        names.append((p + "mlp.down_proj.weight", (H, ff), "out"))
        names.append((p + "layer_scalar", (1,), "scalar"))
        if S:
            names.append((p + "per_layer_input_gate.weight", (S, H), "lin"))
            names.append((p + "per_layer_projection.weight", (H, S), "out"))
            names.append((p + "post_per_layer_input_norm.weight", (H,), "norm"))
    return names


def init_weights(spec):
    """Text tensors (names without PREFIX) as f32 holding bf16 values. The embedding is small
    because it is scaled by sqrt(hidden) on the way in (rms ~1.1 in the residual) while the tied
    head sees it unscaled; the final norm weight (x final_scale) puts the logits at ~10-25, where
    the softcap of 30 bends them visibly."""
    rng = Rng(spec["seed"])
    w = {}
    for name, shape, kind in text_names(spec):
        n = 1
        for s in shape:
            n *= s
        if kind == "emb":
            vals = rng.normal(n, spec["emb_std"])
        elif kind == "ple_emb":          # x sqrt(ple_dim) on the way in -> rms ~1
            vals = rng.normal(n, 1.0 / math.sqrt(spec["ple_dim"]))
        elif kind == "lin":
            vals = rng.normal(n, spec["lin_gain"] / math.sqrt(shape[1]))
        elif kind == "out":
            vals = rng.normal(n, spec["out_gain"] / math.sqrt(shape[1]))
        elif kind == "norm":
            vals = [1.0 + v for v in rng.normal(n, spec["norm_spread"])]
            # q/k norm weights set the attention-logit scale (attention scaling is 1.0): at ~1 the
            # logits of random heads have std ~sqrt(head_dim), attention is near one-hot and the model
            # chaotic (int8-activation noise flipped ~40 % of teacher-forced int4 steps); a power of two
            # keeps the values bf16
            if name.endswith("q_norm.weight"):
                vals = [spec["q_norm_scale"] * v for v in vals]
            elif name.endswith("k_norm.weight"):
                vals = [spec["k_norm_scale"] * v for v in vals]
        elif kind == "final_norm":
            vals = [spec["final_scale"] * (1.0 + v) for v in rng.normal(n, spec["norm_spread"])]
        elif kind == "scalar":
            vals = [spec["scalar_mean"] + v for v in rng.normal(n, spec["scalar_std"])]
        else:
            raise ValueError(kind)
        w[name] = bf16_round(torch.tensor(vals, dtype=torch.float32).reshape(shape))
    return w


# ----------------------------------------------------------------------------------------------
# an independent float64 forward (cross-check of transformers, and the --no-hf references)

def rms64(x, w=None, eps=1e-6):
    x = x.to(torch.float64)
    y = x * torch.pow((x * x).mean(-1, keepdim=True) + eps, -0.5)
    return y if w is None else y * w.to(torch.float64)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rope_tables(spec, full, T):
    """cos/sin [T, hd]: default RoPE (sliding) or proportional partial RoPE (full): the first
    int(partial * hd // 2) frequencies are theta^(-2j/hd) (denominator: the whole head dim), the
    others 0; pairs are (i, i + hd/2) over the whole head."""
    inv = inv_freq(spec, full)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    return cos, sin


def apply_rope(x, cos, sin):
    """x [T, heads, hd]"""
    hd = x.shape[-1]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos[:, None, :] + torch.cat([-x2, x1], -1) * sin[:, None, :]


def manual_forward(spec, w, ids):
    """Returns logits [T, V] (after softcapping) in float64. w: text names without PREFIX."""
    f = lambda n: w[n].to(torch.float64)
    T = len(ids)
    H, L, S, nq = spec["hidden"], spec["layers"], spec["ple_dim"], spec["heads"]
    idx = torch.tensor(ids)
    x = f("embed_tokens.weight")[idx] * math.sqrt(H)
    ple = None
    if S:
        tok = f("embed_tokens_per_layer.weight")[idx].reshape(T, L, S) * math.sqrt(S)
        ctx = (x @ f("per_layer_model_projection.weight").T) * (H ** -0.5)
        ctx = rms64(ctx.reshape(T, L, S), f("per_layer_projection_norm.weight"))
        ple = (ctx + tok) * (2.0 ** -0.5)
    ropes = {False: rope_tables(spec, False, T), True: rope_tables(spec, True, T)}
    qi = torch.arange(T)[:, None]
    ki = torch.arange(T)[None, :]
    causal = ki <= qi
    masks = {True: causal, False: causal & (qi - ki < spec["window"])}
    kv = {}
    for i, g in enumerate(geometry(spec)):
        p = "layers.%d." % i
        hd = g["head_dim"]
        cos, sin = ropes[g["full"]]
        r = x
        a = rms64(x, f(p + "input_layernorm.weight"))
        q = (a @ f(p + "self_attn.q_proj.weight").T).reshape(T, nq, hd)
        q = apply_rope(rms64(q, f(p + "self_attn.q_norm.weight")), cos, sin)
        if g["shared"]:
            k, v = kv[g["kv_source"]]
        else:
            kr = (a @ f(p + "self_attn.k_proj.weight").T).reshape(T, g["kv_heads"], hd)
            vr = kr if g["k_eq_v"] else (a @ f(p + "self_attn.v_proj.weight").T).reshape(T, g["kv_heads"], hd)
            k = apply_rope(rms64(kr, f(p + "self_attn.k_norm.weight")), cos, sin)
            v = rms64(vr)
            kv[i] = (k, v)
        rep = nq // k.shape[1]
        kk = k.repeat_interleave(rep, dim=1)
        vv = v.repeat_interleave(rep, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, kk)          # scaling 1.0
        s = s.masked_fill(~masks[g["full"]][None], float("-inf"))
        o = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vv).reshape(T, nq * hd)
        x = r + rms64(o @ f(p + "self_attn.o_proj.weight").T, f(p + "post_attention_layernorm.weight"))
        r = x
        m = rms64(x, f(p + "pre_feedforward_layernorm.weight"))
        m = (gelu_tanh(m @ f(p + "mlp.gate_proj.weight").T) * (m @ f(p + "mlp.up_proj.weight").T)) @ f(p + "mlp.down_proj.weight").T
        x = r + rms64(m, f(p + "post_feedforward_layernorm.weight"))
        if S:
            gt = gelu_tanh(x @ f(p + "per_layer_input_gate.weight").T) * ple[:, i, :]
            x = x + rms64(gt @ f(p + "per_layer_projection.weight").T, f(p + "post_per_layer_input_norm.weight"))
        x = x * f(p + "layer_scalar")
    h = rms64(x, f("norm.weight"))
    logits = h @ f("embed_tokens.weight").T
    c = spec["softcap"]
    return torch.tanh(logits / c) * c


# ----------------------------------------------------------------------------------------------
# transformers

def hf_text_config(spec):
    tc = dict(vocab_size=spec["vocab"], hidden_size=spec["hidden"],
              intermediate_size=spec["inter"], num_hidden_layers=spec["layers"],
              num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
              head_dim=spec["head_dim"], global_head_dim=spec["global_head_dim"],
              hidden_activation="gelu_pytorch_tanh", max_position_embeddings=spec["max_pos"],
              rms_norm_eps=1e-6, pad_token_id=spec["pad"], eos_token_id=spec["eos"],
              bos_token_id=spec["bos"], tie_word_embeddings=True, attention_bias=False,
              sliding_window=spec["window"], layer_types=list(spec["layer_types"]),
              final_logit_softcapping=spec["softcap"], attention_k_eq_v=spec["k_eq_v"],
              num_kv_shared_layers=spec["kv_shared"], use_double_wide_mlp=spec["double_wide"],
              rope_parameters={
                  S_: {"rope_type": "default", "rope_theta": spec["theta_local"]},
                  F_: {"rope_type": "proportional", "partial_rotary_factor": spec["partial"],
                       "rope_theta": spec["theta_global"]}})
    if spec["global_kv_heads"] is not None:
        tc["num_global_key_value_heads"] = spec["global_kv_heads"]
    if spec["model_type"] == "gemma4":
        tc.update(hidden_size_per_layer_input=spec["ple_dim"],
                  vocab_size_per_layer_input=spec["vocab"], enable_moe_block=False)
    return tc


def hf_classes(spec):
    import transformers as tf
    if spec["model_type"] == "gemma4":
        return tf.Gemma4Config, tf.Gemma4ForConditionalGeneration
    try:
        return tf.Gemma4UnifiedConfig, tf.Gemma4UnifiedForConditionalGeneration
    except AttributeError:  # not exported at the top level: take them from the model package
        from transformers.models.gemma4_unified import configuration_gemma4_unified as c, modeling_gemma4_unified as m
        return c.Gemma4UnifiedConfig, m.Gemma4UnifiedForConditionalGeneration


def hf_build(spec):
    cfg_cls, model_cls = hf_classes(spec)
    cfg = cfg_cls(text_config=hf_text_config(spec), vision_config=None, audio_config=None,
                  tie_word_embeddings=True)
    return model_cls(cfg)


def tensors_of(model):
    """name -> tensor for every parameter and buffer (tied parameters listed once)."""
    out = dict(model.named_parameters())
    for n, b in model.named_buffers():
        out.setdefault(n, b)
    return out


def assign(model, wf):
    """Copies the stored tensors (full names) into the model; every stored tensor must have a
    place and every parameter of the text model must be set."""
    have = tensors_of(model)
    extra = sorted(set(wf) - set(have))
    assert not extra, ("stored names the model does not have", extra)
    params = dict(model.named_parameters())
    missing = sorted(n for n in params if n not in wf and n != "lm_head.weight")
    assert not missing, ("model parameters without a stored value", missing)
    with torch.no_grad():
        for n, t in wf.items():
            assert tuple(have[n].shape) == tuple(t.shape), (n, tuple(have[n].shape), tuple(t.shape))
            have[n].copy_(t.to(have[n].dtype))
        if "lm_head.weight" in params and "lm_head.weight" not in wf:
            print("  note: lm_head.weight is a separate parameter; set from the embedding")
            params["lm_head.weight"].copy_(wf[PREFIX + "embed_tokens.weight"])


def inv_freq(spec, full):
    """The rotary inverse frequencies transformers builds for a layer type (see rope_tables)."""
    if full:
        hd, theta = spec["global_head_dim"], spec["theta_global"]
        n_rot = int(spec["partial"] * hd // 2)
    else:
        hd, theta = spec["head_dim"], spec["theta_local"]
        n_rot = hd // 2
    inv = torch.zeros(hd // 2, dtype=torch.float64)
    j = torch.arange(n_rot, dtype=torch.float64)
    inv[:n_rot] = 1.0 / (theta ** (2.0 * j / hd))
    return inv


def check_rope(model, spec, where):
    found = 0
    for name, buf in model.named_buffers():
        for full, key in ((False, "sliding_attention_inv_freq"), (True, "full_attention_inv_freq")):
            if name.endswith(key) and "original" not in name:
                exp = inv_freq(spec, full)
                got = buf.to(torch.float64).flatten()
                ok = got.numel() == exp.numel() and bool(torch.allclose(got, exp, rtol=1e-6, atol=0))
                print("  [%s] %s: n=%d %s" % (where, name, got.numel(), "ok" if ok else
                                              "MISMATCH got %s expected %s" % (got.tolist(), exp.tolist())))
                found += 1
    if found < 2:
        print("  [%s] warning: found %d rotary inv_freq buffers, expected 2" % (where, found))


def hf_save(spec, w, d):
    model = hf_build(spec).to(torch.float32)
    assign(model, {PREFIX + n: t for n, t in w.items()})
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    emb = PREFIX + "embed_tokens.weight"
    assert torch.equal(model.get_output_embeddings().weight, tensors_of(model)[emb]), "head not tied"
    check_rope(model, spec, "built")
    model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = list(spec["gen_eos"])
    model.generation_config.bos_token_id = spec["bos"]
    model.generation_config.pad_token_id = spec["pad"]
    model.save_pretrained(d)


def postprocess_dir(spec, d):
    """Drops a tied lm_head.weight if one was written (the Hub files have none)."""
    notes = []
    t = read_safetensors_dir(d)
    if "lm_head.weight" in t:
        del t["lm_head.weight"]
        for fn in os.listdir(d):
            if fn.startswith("model") and fn.endswith(".safetensors") or fn == "model.safetensors.index.json":
                os.remove(os.path.join(d, fn))
        write_safetensors(os.path.join(d, "model.safetensors"), t)
        notes.append("tied lm_head.weight removed from the file")
    return notes


def legacy_like_config(spec):
    """The config.json the --no-hf path writes: shaped like the Hub files (nested text_config,
    raw global_head_dim / num_global_key_value_heads keys)."""
    tc = hf_text_config(spec)
    tc["model_type"] = spec["model_type"] + "_text"   # gemma4_text, gemma4_unified_text
    return {"architectures": [spec["arch"]], "model_type": spec["model_type"], "text_config": tc,
            "vision_config": None, "audio_config": None, "tie_word_embeddings": True,
            "dtype": "bfloat16"}


# ----------------------------------------------------------------------------------------------

def build_fixture(spec, out, use_hf):
    name = spec["name"]
    d = os.path.join(out, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    print("== %s (%s)" % (name, spec["arch"]))
    w = init_weights(spec)
    notes = []
    if use_hf:
        hf_save(spec, w, d)
        notes += postprocess_dir(spec, d)
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), {PREFIX + n: t for n, t in w.items()})
        with open(os.path.join(d, "config.json"), "w") as fp:
            json.dump(legacy_like_config(spec), fp, indent=2)
            fp.write("\n")
        with open(os.path.join(d, "generation_config.json"), "w") as fp:
            json.dump({"bos_token_id": spec["bos"], "eos_token_id": spec["gen_eos"],
                       "pad_token_id": spec["pad"]}, fp, indent=2)
            fp.write("\n")
        notes.append("written without transformers (--no-hf)")
    print("  files:", sorted(os.listdir(d)))

    stored = read_safetensors_dir(d)
    stored_names = sorted(stored)
    text = {}
    for n, t in stored.items():
        assert n.startswith(PREFIX), ("stored tensor outside the text model", n)
        text[n[len(PREFIX):]] = t
    exp_names = set(n for n, _, _ in text_names(spec))
    assert set(text) == exp_names, ("stored names", sorted(set(text) - exp_names), sorted(exp_names - set(text)))
    for n, t in w.items():
        assert torch.equal(text[n], t), ("stored weight differs", n)
    wq, qnames, kept = quantize_weights(text)

    geo = geometry(spec)
    ref = dict(format=1, name=name, family="gemma4", seed=spec["seed"],
               source="transformers" if use_hf else "float64 forward (no transformers)",
               notes=notes, stored_tensors=stored_names,
               config=dict(architecture=spec["arch"], model_type=spec["model_type"],
                           n_vocab=spec["vocab"], n_embd=spec["hidden"], n_layer=spec["layers"],
                           n_head=spec["heads"], n_head_kv=spec["kv_heads"],
                           head_dim=spec["head_dim"], global_head_dim=spec["global_head_dim"],
                           n_head_kv_global=spec["global_kv_heads"], n_ff=spec["inter"],
                           layer_types=list(spec["layer_types"]), sliding_window=spec["window"],
                           rope_theta_sliding=spec["theta_local"], rope_theta_full=spec["theta_global"],
                           partial_rotary_factor=spec["partial"], ple_dim=spec["ple_dim"],
                           n_kv_shared=spec["kv_shared"], double_wide_mlp=spec["double_wide"],
                           k_eq_v=spec["k_eq_v"], final_logit_softcapping=spec["softcap"],
                           tied=True, is_embedding=False, n_ctx_train=spec["max_pos"],
                           eos=spec["gen_eos"], bos=spec["bos"],
                           q_norm_scale=spec["q_norm_scale"], k_norm_scale=spec["k_norm_scale"]),
               layers=[dict(index=i, type=spec["layer_types"][i], head_dim=g["head_dim"],
                            n_head_kv=g["kv_heads"], k_eq_v=g["k_eq_v"], kv_shared=g["shared"],
                            kv_source=g["kv_source"], n_ff=g["ff"]) for i, g in enumerate(geo)],
               int4_quantized=sorted(PREFIX + n for n in qnames),
               int4_kept_bf16=sorted(PREFIX + n for n in kept),
               topk=TOPK, n_gen=N_GEN, cases=[])

    models = {}
    if use_hf:
        import transformers as tf
        ref["versions"] = dict(transformers=tf.__version__, torch=torch.__version__,
                               python=sys.version.split()[0])
        _, cls = hf_classes(spec)
        m32 = hf_from_pretrained(cls, d)
        check_rope(m32, spec, "loaded")
        have = tensors_of(m32)
        for n, t in text.items():
            assert torch.equal(have[PREFIX + n].detach().to(torch.float32), t), ("loaded weight differs", n)
        assert torch.equal(m32.get_output_embeddings().weight, have[PREFIX + "embed_tokens.weight"]), "not tied"
        mq = hf_from_pretrained(cls, d)
        hq = tensors_of(mq)
        with torch.no_grad():
            for n, t in wq.items():
                hq[PREFIX + n].copy_(t)
        assert torch.equal(mq.get_output_embeddings().weight, wq["embed_tokens.weight"]), "int4 head not tied"
        models = dict(f32=m32, int4=mq)
    weights = dict(f32=text, int4=wq)
    maxdiff = dict(f32=0.0, int4=0.0)

    def hf_last_logits(m):
        def fn(seq):
            with torch.no_grad():
                return m(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].to(torch.float32)
        return fn

    def man_last_logits(ww):
        return lambda seq: manual_forward(spec, ww, seq)[-1].to(torch.float32)

    for prompt in make_prompts(spec, PROMPT_LENS):
        case = dict(prompt=prompt)
        for kind in ("f32", "int4"):
            fn = hf_last_logits(models[kind]) if use_hf else man_last_logits(weights[kind])
            g = greedy(fn, prompt, N_GEN)
            seq = prompt + g["tokens"][:-1]
            lm = manual_forward(spec, weights[kind], seq)
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
        print("    top logits f32: %s" % ", ".join("%.3f" % v for v in case["f32"]["topk_logits"][:4]))
        ref["cases"].append(case)
    ref["crosscheck_max_abs_diff_vs_float64"] = maxdiff
    if use_hf:
        print("  max |transformers f32 - float64 forward|: f32 %.3g int4 %.3g" % (maxdiff["f32"], maxdiff["int4"]))
        if max(maxdiff.values()) > 1e-3:
            print("  WARNING: transformers and the float64 forward disagree")
    summarize(ref)
    with open(os.path.join(d, "reference.json"), "w") as fp:
        json.dump(ref, fp, indent=1)
        fp.write("\n")
    return ref


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    self_test_int4()
    print("python %s, torch %s" % (sys.version.split()[0], torch.__version__))
    use_hf = not a.no_hf
    if use_hf:
        import transformers
        print("transformers %s" % transformers.__version__)
    os.makedirs(a.out, exist_ok=True)
    failures = 0
    for spec in SPECS:
        if a.only and spec["name"] != a.only:
            continue
        try:
            build_fixture(spec, a.out, use_hf)
        except Exception as e:  # keep going: one run must bring back as much as it can
            import traceback
            traceback.print_exc()
            print("FAILED %s: %r" % (spec["name"], e))
            failures += 1
    print("done, %d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
