/* model/gemma4.c — Gemma 4 text decoders: E2B / E4B (Gemma4ForConditionalGeneration, per-layer
 * embeddings and KV sharing), text-only saves (Gemma4ForCausalLM) and the dense 12B
 * (Gemma4UnifiedForConditionalGeneration, K = V on full layers). Mirrors transformers 5.17's
 * modeling_gemma4.py (models.md §3.5):
 *
 *   x = embed(id) · sqrt(d)
 *   PLE:  ple = (rmsnorm_S(x·W_plmpᵀ / sqrt(d)) + E_ple[id] · sqrt(S)) / sqrt(2)      [T, L·S]
 *   layer i:  a = rmsnorm(x)
 *     q = rope(rmsnorm_hd(a·Wqᵀ)); K = rope(rmsnorm_hd(a·Wkᵀ)); V = rmsnorm0_hd(a·Wvᵀ or a·Wkᵀ)
 *     (KV-shared layers: K, V of their source layer's cache)
 *     x += rmsnorm(attn(q, K, V; scale 1, window on sliding layers)·Woᵀ)
 *     x += rmsnorm(down(gelu_tanh(gate(m)) * up(m))),  m = rmsnorm(x)
 *     PLE: x += rmsnorm(W_proj · (gelu_tanh(x·W_gateᵀ) * ple[:, i]))
 *     x *= layer_scalar
 *   logits = cap · tanh(rmsnorm(x) · Eᵀ / cap)
 *
 * Sliding layers use default RoPE (theta 1e4) over their head; full layers proportional RoPE (theta
 * 1e6, the first partial·hd/2 pairs of the split-half layout, frequencies over the whole head dim).
 * The norms multiply by the weight as stored (no 1 + w). The vision and audio towers are never read. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/half.h"
#include "model/bind.h"
#include "model/blocks.h"

/* A view of a scratch tensor as [rows × cols] (rows·cols within its allocation): per-layer widths. */
static struct hb_tensor view2d(const struct hb_tensor *t, int64_t rows, int64_t cols) {
  struct hb_tensor v = *t;
  v.rows = rows;
  v.cols = cols;
  v.bytes = 0;
  return v;
}

/* The text decoder's tensor prefix: multimodal saves nest it under model.language_model. */
static const char *text_prefix(const struct st_set *st) {
  return st_find(st, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
}

/* layer_scalar: a one-element tensor, read on the host (it multiplies the residual stream). */
static int read_scalar(struct binder *b, const char *name, float *out, struct hearth_err *err) {
  const struct st_tensor *t = bind_lookup(b, name);
  if (!t) return err_set(err, HEARTH_ERR_FORMAT, "checkpoint: tensor '%s' is missing", name);
  int64_t n = 1;
  for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
  if (n != 1) return err_set(err, HEARTH_ERR_FORMAT, "checkpoint: tensor '%s' must hold one value", name);
  if (t->dtype == ST_BF16) *out = bf16_to_f32(*(const uint16_t *)t->data);
  else if (t->dtype == ST_F16) *out = f16_to_f32(*(const uint16_t *)t->data);
  else if (t->dtype == ST_F32) memcpy(out, t->data, sizeof *out);
  else return err_set(err, HEARTH_ERR_UNSUPPORTED, "checkpoint: tensor '%s' has dtype %s", name, st_dtype_name(t->dtype));
  b->n_params += 1;
  return 0;
}

static int upload_ones(struct hearth_model *m, struct hb_tensor *dst, int n, struct hearth_err *err) {
  float v[HF_MAX_HEAD_DIM];
  for (int i = 0; i < n; i++) v[i] = 1.0f;
  struct hb_host_weight hw = {.dtype = HB_F32, .rows = 1, .cols = n, .data = v};
  return m->be->weight_upload(m->bctx, dst, &hw, err);
}

static int gemma4_bind(struct hearth_model *m, const struct st_set *st, enum hearth_dtype dtype,
                       struct hearth_err *err) {
  const struct hb_ops *be = m->be;
  if (!be->gelu_mul || !be->scale || !be->softcap || !be->rope_prop)
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "the %s backend does not run Gemma 4 yet (use --backend cpu)", be->name);
  const struct hf_config *c = &m->cfg;
  struct binder b = {m, st, dtype, 0};
  const char *P = text_prefix(st);
  int64_t d = c->hidden_size, nq = c->num_attention_heads, L = c->num_hidden_layers, S = c->g4.ple_dim;
  char name[256];
  int rc;
#define NAME(...) (snprintf(name, sizeof name, __VA_ARGS__), name)
  if ((rc = bind_matrix(&b, &m->w.tok_embd, NAME("%sembed_tokens.weight", P), c->vocab_size, d, err))) return rc;
  if ((rc = bind_vector(&b, &m->w.out_norm, NAME("%snorm.weight", P), d, err))) return rc;
  m->w.lm_head = m->w.tok_embd; /* tied: Gemma 4 stores no lm_head.weight */
  m->w.lm_head_tied = 1;
  if (S) {
    if ((rc = bind_matrix(&b, &m->w.ple_embd, NAME("%sembed_tokens_per_layer.weight", P), c->g4.ple_vocab, L * S, err))) return rc;
    if ((rc = bind_matrix(&b, &m->w.ple_model_proj, NAME("%sper_layer_model_projection.weight", P), L * S, d, err))) return rc;
    if ((rc = bind_vector(&b, &m->w.ple_proj_norm, NAME("%sper_layer_projection_norm.weight", P), S, err))) return rc;
  }
  for (int i = 0; i < L; i++) {
    struct layer_weights *W = &m->w.layers[i];
    const struct hf_layer *y = &c->layer[i];
    int64_t hd = y->head_dim, kvd = (int64_t)y->n_kv_heads * hd, ff = y->n_ff;
#define BM(field, suffix, rows, cols) \
    if ((rc = bind_matrix(&b, &W->field, NAME("%slayers.%d.%s", P, i, suffix), rows, cols, err))) return rc;
#define BV(field, suffix, n) \
    if ((rc = bind_vector(&b, &W->field, NAME("%slayers.%d.%s", P, i, suffix), n, err))) return rc;
    BV(attn_norm, "input_layernorm.weight", d);
    BM(wq, "self_attn.q_proj.weight", nq * hd, d);
    BV(q_norm, "self_attn.q_norm.weight", hd);
    if (y->kv_source == i) { /* KV-shared layers have no k/v tensors (any present are ignored) */
      BM(wk, "self_attn.k_proj.weight", kvd, d);
      BV(k_norm, "self_attn.k_norm.weight", hd);
      if (!y->k_eq_v) { BM(wv, "self_attn.v_proj.weight", kvd, d); }
    }
    BM(wo, "self_attn.o_proj.weight", d, nq * hd);
    BV(post_attn_norm, "post_attention_layernorm.weight", d);
    BV(ffn_norm, "pre_feedforward_layernorm.weight", d);
    BV(post_ffn_norm, "post_feedforward_layernorm.weight", d);
    BM(w_gate, "mlp.gate_proj.weight", ff, d);
    BM(w_up, "mlp.up_proj.weight", ff, d);
    BM(w_down, "mlp.down_proj.weight", d, ff);
    if ((rc = read_scalar(&b, NAME("%slayers.%d.layer_scalar", P, i), &W->layer_scalar, err))) return rc;
    if (S) {
      BM(ple_gate, "per_layer_input_gate.weight", S, d);
      BM(ple_proj, "per_layer_projection.weight", d, S);
      BV(ple_norm, "post_per_layer_input_norm.weight", d);
    }
#undef BM
#undef BV
  }
#undef NAME
  /* the scale-free V norm runs as rmsnorm with a weight of ones, one per head width */
  for (int i = 0; i < L; i++) {
    struct hb_tensor *o = &m->w.ones[c->layer[i].sliding ? 0 : 1];
    if (!o->data && (rc = upload_ones(m, o, c->layer[i].head_dim, err))) return rc;
  }
  m->info.n_params = b.n_params;
  return 0;
}

/* ple = (rmsnorm_S(x0·W_plmpᵀ / sqrt(d)) + E_ple[id]·sqrt(S)) / sqrt(2), from the scaled embedding x0. */
static void ple_inputs(struct hearth_model *m, int n) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  const struct hf_config *cfg = &m->cfg;
  struct hb_tensor x = rows_view(&s->x, n), ple = rows_view(&s->ple, n), tok = rows_view(&s->ple_tok, n);
  be->matmul(c, &ple, &x, &m->w.ple_model_proj, NULL, n);
  be->scale(c, &ple, (float)(1.0 / sqrt((double)cfg->hidden_size)), n); /* a Python float in transformers */
  be->rmsnorm(c, &ple, &ple, &m->w.ple_proj_norm, cfg->rms_norm_eps, 0.0f); /* per S-wide chunk */
  be->embed(c, &tok, &m->w.ple_embd, &s->ids, n, sqrtf((float)cfg->g4.ple_dim));
  be->add(c, &ple, &tok, n);
  be->scale(c, &ple, (float)(1.0 / sqrt(2.0)), n);
}

/* The decode fusions (backend.h: norm_matmul, g4_qkv_post, norm_add, norm_swiglu with GeGLU, gelu_matmul,
 * add_norm_matmul): about 8 launches a layer instead of 25 (bench/NOTES.md, session 27 and branch g4fold). A backend
 * without them (the CPU's) runs the plain ops; where a fused op declines a shape, the plain ops it stands for run
 * instead. */
static int fused(const struct hb_ops *be) { return be->g4_qkv_post && be->norm_add && be->norm_matmul; }

/* The residual stream on the fused path. Each norm_add (x = (x + rmsnorm(y)·w)·s) is held back (pend) and folded into
 * the projection that reads x next (add_norm_matmul: −1 launch each, 3 a layer on E2B/E4B, 2 on the 12B); that op
 * writes the new x into the other buffer, since its other blocks still read the old one, so the stream alternates
 * between scratch.x and scratch.x2 (cur). Where the fold declines (n > 4, the exact path), before the plain ops and
 * before the head, res_settle runs the held-back norm_add in place. Every step starts in scratch.x (the embedding). */
struct g4_res {
  struct hb_tensor *cur, *alt; /* alt NULL: no second buffer, nothing is held back */
  struct hb_tensor y;          /* the pending norm_add: y (a view of scratch.o), w, s */
  const struct hb_tensor *w;
  float s;
  int pend;
};

static void res_add(struct hearth_model *m, struct g4_res *r, const struct hb_tensor *y, const struct hb_tensor *w,
                    float s, int n) {
  if (r->alt && m->be->add_norm_matmul) {
    r->y = *y;
    r->w = w;
    r->s = s;
    r->pend = 1;
    return;
  }
  struct hb_tensor x = rows_view(r->cur, n);
  m->be->norm_add(m->bctx, &x, y, w, m->cfg.rms_norm_eps, s, n);
}

static void res_settle(struct hearth_model *m, struct g4_res *r, int n) {
  if (!r->pend) return;
  r->pend = 0;
  struct hb_tensor x = rows_view(r->cur, n);
  m->be->norm_add(m->bctx, &x, &r->y, r->w, m->cfg.rms_norm_eps, r->s, n);
}

/* the pending norm_add and the projection after it in one launch (add_norm_matmul's arguments): 0 when that ran (the
 * stream moved to the other buffer); 1 when nothing was pending or the op declined, with the norm_add settled: the
 * caller runs its plain ops on r->cur */
static int res_fold(struct hearth_model *m, struct g4_res *r, const struct hb_tensor *norm_w, int n_mm,
                    struct hb_tensor *const *outs, const struct hb_tensor *const *ws, int act, int n) {
  if (!r->pend) return 1;
  struct hb_tensor x = rows_view(r->cur, n), xo = rows_view(r->alt, n);
  if (!m->be->add_norm_matmul(m->bctx, &xo, &x, &r->y, r->w, r->s, norm_w, m->cfg.rms_norm_eps, n_mm, outs, ws, act,
                              n)) {
    struct hb_tensor *t = r->cur;
    r->cur = r->alt;
    r->alt = t;
    r->pend = 0;
    return 0;
  }
  res_settle(m, r, n);
  return 1;
}

/* The batch as a sliding layer sees it: the sliding pool's block tables when the model has that pool
 * (runtime/kv_ring.h; a shared sliding layer's source is a sliding layer too). Positions and lengths are the
 * batch's own, so the ops need nothing new. */
static struct hb_batch sliding_view(const struct hb_batch *b) {
  struct hb_batch v = *b;
  if (b->block_table_swa) {
    v.block_table = b->block_table_swa;
    v.d_block_table = b->d_block_table_swa;
  }
  return v;
}

static void attention(struct hearth_model *m, int i, struct hb_batch *b_all, struct g4_res *r) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  const struct hf_config *cfg = &m->cfg;
  const struct hf_layer *y = &cfg->layer[i];
  const struct layer_weights *W = &m->w.layers[i];
  struct hb_batch bsw = y->sliding ? sliding_view(b_all) : *b_all, *b = &bsw;
  int n = b->n_tokens, nq = cfg->num_attention_heads, hd = y->head_dim, nkv = y->n_kv_heads;
  struct hb_tensor xn = rows_view(&s->xn, n), o = rows_view(&s->o, n);
  struct hb_tensor q = view2d(&s->q, n, (int64_t)nq * hd), a = view2d(&s->attn, n, (int64_t)nq * hd);
  struct hb_tensor k = view2d(&s->k, n, (int64_t)nkv * hd), v = view2d(&s->v, n, (int64_t)nkv * hd);
  const struct hb_tensor *ones = &m->w.ones[y->sliding ? 0 : 1];
  float theta = y->sliding ? cfg->rope_theta : cfg->g4.rope_theta_full;
  int pairs = y->sliding ? hd / 2 : cfg->g4.rope_pairs_full;
  float factor = y->sliding ? 1.0f : cfg->g4.rope_factor_full;
  const float eps = cfg->rms_norm_eps;
  const int own = y->kv_source == i, fz = fused(be); /* own: the layer writes K/V (not KV-shared) */
  /* K = V layers: V is the raw k_proj output (before k_norm and RoPE); computed again rather than copied */
  const struct hb_tensor *wv = y->k_eq_v ? &W->wk : &W->wv;
  if (fz) {
    struct hb_tensor *outs[3] = {&q, &k, &v};
    const struct hb_tensor *ws[3] = {&W->wq, &W->wk, wv}, *bs[3] = {NULL, NULL, NULL};
    if (res_fold(m, r, &W->attn_norm, own ? 3 : 1, outs, ws, -1, n)) {
      struct hb_tensor x = rows_view(r->cur, n);
      be->norm_matmul(c, &x, &W->attn_norm, eps, 0.0f, own ? 3 : 1, outs, ws, bs, n, 0);
    }
  } else {
    struct hb_tensor x = rows_view(r->cur, n);
    be->rmsnorm(c, &xn, &x, &W->attn_norm, eps, 0.0f);
    be->matmul(c, &q, &xn, &W->wq, NULL, n);
    if (own) {
      be->matmul(c, &k, &xn, &W->wk, NULL, n);
      be->matmul(c, &v, &xn, wv, NULL, n);
    }
  }
  struct hb_attn_params ap = {
    .n_heads = nq, .n_kv_heads = nkv, .head_dim = hd, .scale = 1.0f, /* QK-norm replaces 1/sqrt(hd) */
    .window = y->sliding ? cfg->g4.sliding_window : 0, .softcap = 0.0f,
  };
  /* the post step inside the decode attention where the backend has that (one launch fewer a layer) */
  const int post_attn = fz && be->g4_post_attention &&
                        !be->g4_post_attention(c, &a, &q, &k, &v, &W->q_norm, &W->k_norm, eps,
                                               own ? &m->kv.layers[i] : NULL, &m->kv.layers[y->kv_source], b, &ap,
                                               pairs, theta, factor);
  if (post_attn) {
    /* done: a = attention of the turned q over the cache with this step's keys */
  } else if (!fz || be->g4_qkv_post(c, &q, &k, &v, &W->q_norm, &W->k_norm, eps, own ? &m->kv.layers[i] : NULL, b,
                                    nq, nkv, hd, pairs, theta, factor)) {
    be->rmsnorm(c, &q, &q, &W->q_norm, eps, 0.0f);
    be->rope_prop(c, &q, b, nq, hd, pairs, theta, factor);
    if (own) {
      be->rmsnorm(c, &k, &k, &W->k_norm, eps, 0.0f);
      be->rope_prop(c, &k, b, nkv, hd, pairs, theta, factor);
      be->rmsnorm(c, &v, &v, ones, eps, 0.0f);
      be->kv_write(c, &m->kv.layers[i], &k, &v, b);
    }
  }
  if (!post_attn) be->attention(c, &a, &q, &m->kv.layers[y->kv_source], b, &ap);
  be->matmul(c, &o, &a, &W->wo, NULL, n);
  if (fz) {
    res_add(m, r, &o, &W->post_attn_norm, 1.0f, n);
  } else {
    struct hb_tensor x = rows_view(r->cur, n);
    be->rmsnorm(c, &o, &o, &W->post_attn_norm, eps, 0.0f);
    be->add(c, &x, &o, n);
  }
}

/* s: the layer scalar when this block ends the layer on the fused path (else 1; the plain path scales afterwards) */
static void mlp(struct hearth_model *m, int i, int n, float s_end, struct g4_res *r) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  const struct hf_config *cfg = &m->cfg;
  const struct layer_weights *W = &m->w.layers[i];
  int64_t ff = cfg->layer[i].n_ff;
  struct hb_tensor xn = rows_view(&s->xn, n), o = rows_view(&s->o, n);
  struct hb_tensor g = view2d(&s->gate, n, ff), u = view2d(&s->up, n, ff);
  const float eps = cfg->rms_norm_eps;
  const int fz = fused(be);
  struct hb_tensor *gu[2] = {&g, &u};
  const struct hb_tensor *wgu[2] = {&W->w_gate, &W->w_up};
  const int folded = fz && be->norm_swiglu && !res_fold(m, r, &W->ffn_norm, 2, gu, wgu, HB_ACT_GELU_TANH, n);
  res_settle(m, r, n); /* (nothing pending after a fold) */
  struct hb_tensor x = rows_view(r->cur, n);
  if (folded) {
    /* g = gelu_tanh(gate) * up of the new x, in the fused GEMV's epilogue */
  } else if (fz && be->norm_swiglu && !be->norm_swiglu(c, &x, &W->ffn_norm, eps, &W->w_gate, &W->w_up, &g, n, HB_ACT_GELU_TANH)) {
    /* g = gelu_tanh(gate) * up in the gate/up GEMV's epilogue */
  } else if (fz) {
    struct hb_tensor *outs[2] = {&g, &u};
    const struct hb_tensor *ws[2] = {&W->w_gate, &W->w_up}, *bs[2] = {NULL, NULL};
    be->norm_matmul(c, &x, &W->ffn_norm, eps, 0.0f, 2, outs, ws, bs, n, 0);
    be->gelu_mul(c, &g, &g, &u, 0, n);
  } else {
    be->rmsnorm(c, &xn, &x, &W->ffn_norm, eps, 0.0f);
    be->matmul(c, &g, &xn, &W->w_gate, NULL, n);
    be->matmul(c, &u, &xn, &W->w_up, NULL, n);
    be->gelu_mul(c, &g, &g, &u, 0, n);
  }
  be->matmul(c, &o, &g, &W->w_down, NULL, n);
  if (fz) {
    res_add(m, r, &o, &W->post_ffn_norm, s_end, n);
  } else {
    be->rmsnorm(c, &o, &o, &W->post_ffn_norm, eps, 0.0f);
    be->add(c, &x, &o, n);
  }
}

/* x += rmsnorm(W_proj · (gelu_tanh(x·W_gateᵀ) * ple[:, i·S .. i·S+S))) */
static void ple_layer(struct hearth_model *m, int i, int n, float s_end, struct g4_res *r) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  const struct hf_config *cfg = &m->cfg;
  const struct layer_weights *W = &m->w.layers[i];
  int S = cfg->g4.ple_dim;
  struct hb_tensor o = rows_view(&s->o, n), ple = rows_view(&s->ple, n);
  struct hb_tensor g = view2d(&s->gate, n, S);
  struct hb_tensor *go[1] = {&g};
  const struct hb_tensor *gw[1] = {&W->ple_gate};
  if (!fused(be) || res_fold(m, r, NULL, 1, go, gw, -1, n)) {
    struct hb_tensor x = rows_view(r->cur, n);
    be->matmul(c, &g, &x, &W->ple_gate, NULL, n);
  }
  if (!fused(be) || !be->gelu_matmul || be->gelu_matmul(c, &o, &g, &ple, i * S, &W->ple_proj, n)) {
    be->gelu_mul(c, &g, &g, &ple, i * S, n);
    be->matmul(c, &o, &g, &W->ple_proj, NULL, n);
  }
  if (fused(be)) {
    res_add(m, r, &o, &W->ple_norm, s_end, n);
    return;
  }
  struct hb_tensor x = rows_view(r->cur, n);
  be->rmsnorm(c, &o, &o, &W->ple_norm, cfg->rms_norm_eps, 0.0f);
  be->add(c, &x, &o, n);
}

static void gemma4_forward(struct hearth_model *m, struct hb_batch *b, int want_hidden) {
  const struct hf_config *cfg = &m->cfg;
  int n = b->n_tokens;
  block_embed(m, n, sqrtf((float)cfg->hidden_size));
  if (cfg->g4.ple_dim) ple_inputs(m, n);
  const int fz = fused(m->be), ple = cfg->g4.ple_dim != 0;
  struct g4_res r = {&m->scratch.x, fz && m->scratch.x2.data ? &m->scratch.x2 : NULL, {0}, NULL, 1.0f, 0};
  for (int i = 0; i < cfg->num_hidden_layers; i++) {
    const float ls = m->w.layers[i].layer_scalar;
    attention(m, i, b, &r);
    mlp(m, i, n, fz && !ple ? ls : 1.0f, &r); /* fused: the last norm_add of the layer multiplies by the scalar */
    if (ple) ple_layer(m, i, n, fz ? ls : 1.0f, &r);
    if (!fz) {
      struct hb_tensor x = rows_view(r.cur, n);
      m->be->scale(m->bctx, &x, ls, n);
    }
  }
  res_settle(m, &r, n); /* the last norm_add runs on its own before the final norm (the head's GEMV is f32 out) */
  block_head_of(m, b, want_hidden, r.cur);
  if (!want_hidden && b->n_out > 0 && cfg->g4.final_logit_softcapping > 0.0f) {
    struct hb_tensor lg = rows_view(&m->scratch.logits, b->n_out);
    m->be->softcap(m->bctx, &lg, cfg->g4.final_logit_softcapping, b->n_out);
  }
}

const struct family_ops family_gemma4 = {"gemma4", gemma4_bind, gemma4_forward};
