/* model/blocks.c — embedding, attention, SwiGLU MLP and head blocks over the op table.
 * Blocks only enqueue device work (no host copies), so a whole forward pass can be captured into a
 * graph by backends that offer it. Where a backend provides a fused op (backend.h, optional part)
 * the block uses it; the plain sequence it replaces is written beside it. */
#include "model/blocks.h"

#include <math.h>

void block_embed(struct hearth_model *m, int n, float scale) {
  struct model_scratch *s = &m->scratch;
  struct hb_tensor x = rows_view(&s->x, n);
  m->be->embed(m->bctx, &x, &m->w.tok_embd, &s->ids, n, scale);
}

/* the rows the last layer carries past its attention: the batch's output rows when they are fewer than its tokens */
static int trim_rows(const struct hb_batch *b) {
  return b->out_rows && b->n_out < b->n_tokens ? b->n_out : b->n_tokens;
}

/* block_attention; with trim set, the last layer of a pass whose outputs are a few of its rows (out_rows: the end of
 * each prompt, a record's last token): its keys and values are written for every row, but past the attention only
 * the output rows are carried on. Their attention outputs and residuals are gathered into scratch.q and scratch.sel
 * here, and o_proj, the MLP and the head run on those rows alone (mlp_swiglu_of, head_selected). The ops and their
 * order per row are the untrimmed pass's, so a batch-invariant backend gives the same bits. Returns the rows carried
 * on: n_out (0 when the batch wants no output), or n_tokens untrimmed. */
static int attention_trim(struct hearth_model *m, const struct layer_weights *L, int layer, struct hb_batch *b,
                          int qk_norm, int bias, int trim) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  const struct hf_config *cfg = &m->cfg;
  int n = b->n_tokens;
  struct hb_tensor x = rows_view(&s->x, n), xn = rows_view(&s->xn, n), q = rows_view(&s->q, n),
                   k = rows_view(&s->k, n), v = rows_view(&s->v, n), a = rows_view(&s->attn, n),
                   o = rows_view(&s->o, n);
  struct hb_kv_layer *kv = &m->kv.layers[layer];
  const struct hb_tensor *ws[3] = {&L->wq, &L->wk, &L->wv};
  const struct hb_tensor *bs[3] = {bias ? &L->bq : NULL, bias ? &L->bk : NULL, bias ? &L->bv : NULL};
  /* norm + QKV + rope + cache write in one launch where the backend has it (decode) */
  int fused_rope = !qk_norm && be->norm_qkv_rope_kv &&
                   !be->norm_qkv_rope_kv(c, &x, &L->attn_norm, cfg->rms_norm_eps, ws, bs, &q, kv, b,
                                         cfg->num_attention_heads, cfg->rope_theta, n);
  if (!fused_rope) {
    if (be->norm_matmul) {
      struct hb_tensor *outs[3] = {&q, &k, &v};
      be->norm_matmul(c, &x, &L->attn_norm, cfg->rms_norm_eps, 0.0f, 3, outs, ws, bs, n, 0);
    } else {
      be->rmsnorm(c, &xn, &x, &L->attn_norm, cfg->rms_norm_eps, 0.0f);
      be->matmul(c, &q, &xn, &L->wq, bias ? &L->bq : NULL, n);
      be->matmul(c, &k, &xn, &L->wk, bias ? &L->bk : NULL, n);
      be->matmul(c, &v, &xn, &L->wv, bias ? &L->bv : NULL, n);
    }
    /* Qwen3's per-head q/k norms inside rope_kv_write where the backend takes them (one pass over q and k less) */
    int normed = qk_norm && be->rope_kv_write &&
                 !be->rope_kv_write(c, &q, &k, &v, kv, b, cfg->num_attention_heads, cfg->head_dim, cfg->rope_theta,
                                    &L->q_norm, &L->k_norm, cfg->rms_norm_eps);
    if (!normed) {
      if (qk_norm) {
        be->rmsnorm(c, &q, &q, &L->q_norm, cfg->rms_norm_eps, 0.0f);
        be->rmsnorm(c, &k, &k, &L->k_norm, cfg->rms_norm_eps, 0.0f);
      }
      if (be->rope_kv_write) {
        be->rope_kv_write(c, &q, &k, &v, kv, b, cfg->num_attention_heads, cfg->head_dim, cfg->rope_theta, NULL,
                          NULL, 0.0f);
      } else {
        be->rope_neox(c, &q, b, cfg->num_attention_heads, cfg->head_dim, cfg->head_dim, cfg->rope_theta);
        be->rope_neox(c, &k, b, cfg->num_key_value_heads, cfg->head_dim, cfg->head_dim, cfg->rope_theta);
        be->kv_write(c, kv, &k, &v, b);
      }
    }
  }
  struct hb_attn_params ap = {
    .n_heads = cfg->num_attention_heads, .n_kv_heads = cfg->num_key_value_heads,
    .head_dim = cfg->head_dim, .scale = 1.0f / sqrtf((float)cfg->head_dim), .window = 0, .softcap = 0.0f,
  };
  const int nk = trim ? trim_rows(b) : n;
  if (nk == 0) return 0; /* a prefill chunk that ends no sequence: its last layer only writes the cache */
  /* one token (or a verify's rows as one-token steps): attention and x += a · Woᵀ in one launch where the backend
   * has it (short sequences) */
  if (nk == n && be->attn_o && !be->attn_o(c, &x, &q, kv, b, &ap, &L->wo)) return n;
  be->attention(c, &a, &q, kv, b, &ap);
  if (nk < n) { /* carry on with the output rows: a into scratch.q, x into scratch.sel */
    struct hb_tensor aq = rows_view(&s->q, nk), xs = rows_view(&s->sel, nk);
    be->gather_rows(c, &aq, &a, b);
    be->gather_rows(c, &xs, &x, b);
    a = aq;
    x = xs;
    o = rows_view(&s->o, nk);
    n = nk;
  }
  if (be->norm_matmul) { /* x += a · Woᵀ in one launch */
    struct hb_tensor *outs[1] = {&x};
    const struct hb_tensor *ws[1] = {&L->wo};
    const struct hb_tensor *bs[1] = {NULL};
    be->norm_matmul(c, &a, NULL, 0.0f, 0.0f, 1, outs, ws, bs, n, 1);
  } else {
    be->matmul(c, &o, &a, &L->wo, NULL, n);
    be->add(c, &x, &o, n);
  }
  return n;
}

void block_attention(struct hearth_model *m, const struct layer_weights *L, int layer,
                     struct hb_batch *b, int qk_norm, int bias) {
  attention_trim(m, L, layer, b, qk_norm, bias, 0);
}

/* block_mlp_swiglu on the residual rows of x_all */
static void mlp_swiglu_of(struct hearth_model *m, const struct layer_weights *L, int n, const struct hb_tensor *x_all) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  struct hb_tensor x = rows_view(x_all, n), xn = rows_view(&s->xn, n), g = rows_view(&s->gate, n),
                   u = rows_view(&s->up, n), o = rows_view(&s->o, n);
  /* decode: silu(gate) * up in the gate/up GEMV's epilogue, then x += h·Wdᵀ in one launch */
  if (be->norm_swiglu && be->norm_matmul &&
      !be->norm_swiglu(c, &x, &L->ffn_norm, m->cfg.rms_norm_eps, &L->w_gate, &L->w_up, &g, n, HB_ACT_SILU)) {
    struct hb_tensor *outs[1] = {&x};
    const struct hb_tensor *ws[1] = {&L->w_down};
    be->norm_matmul(c, &g, NULL, 0.0f, 0.0f, 1, outs, ws, NULL, n, 1);
    return;
  }
  if (be->norm_matmul && be->silu_matmul) {
    struct hb_tensor *outs[2] = {&g, &u};
    const struct hb_tensor *ws[2] = {&L->w_gate, &L->w_up};
    const struct hb_tensor *bs[2] = {NULL, NULL};
    be->norm_matmul(c, &x, &L->ffn_norm, m->cfg.rms_norm_eps, 0.0f, 2, outs, ws, bs, n, 0);
    be->silu_matmul(c, &g, &u, &x, &L->w_down, n, 1); /* x += (silu(g)*u)·Wdᵀ */
    return;
  }
  be->rmsnorm(c, &xn, &x, &L->ffn_norm, m->cfg.rms_norm_eps, 0.0f);
  be->matmul(c, &g, &xn, &L->w_gate, NULL, n);
  be->matmul(c, &u, &xn, &L->w_up, NULL, n);
  be->silu_mul(c, &g, &g, &u, n);
  be->matmul(c, &o, &g, &L->w_down, NULL, n);
  be->add(c, &x, &o, n);
}

void block_mlp_swiglu(struct hearth_model *m, const struct layer_weights *L, int n) {
  mlp_swiglu_of(m, L, n, &m->scratch.x);
}

/* the final norm over the n_out rows in scratch.sel, then the LM head into scratch.logits unless want_hidden */
static void head_selected(struct hearth_model *m, int n_out, int want_hidden) {
  struct model_scratch *s = &m->scratch;
  struct hb_tensor sel = rows_view(&s->sel, n_out);
  m->be->rmsnorm(m->bctx, &sel, &sel, &m->w.out_norm, m->cfg.rms_norm_eps, 0.0f);
  if (want_hidden) return;
  struct hb_tensor lg = rows_view(&s->logits, n_out);
  m->be->matmul(m->bctx, &lg, &sel, &m->w.lm_head, NULL, n_out);
}

void block_head(struct hearth_model *m, struct hb_batch *b, int want_hidden) {
  block_head_of(m, b, want_hidden, &m->scratch.x);
}

void block_head_of(struct hearth_model *m, struct hb_batch *b, int want_hidden, const struct hb_tensor *x_all) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  int n = b->n_tokens;
  if (b->n_out == 0) return; /* a prefill chunk that ends no sequence */
  struct hb_tensor x = rows_view(x_all, n), sel = rows_view(&s->sel, b->n_out);
  /* every row wanted, in order (a decode step): the norm runs as the head GEMV's prologue */
  int all_rows = !want_hidden && be->norm_matmul && b->n_out == n && b->out_rows;
  for (int i = 0; all_rows && i < n; i++) all_rows = b->out_rows[i] == i;
  if (all_rows) {
    struct hb_tensor lg = rows_view(&s->logits, n);
    struct hb_tensor *outs[1] = {&lg};
    const struct hb_tensor *ws[1] = {&m->w.lm_head};
    be->norm_matmul(c, &x, &m->w.out_norm, m->cfg.rms_norm_eps, 0.0f, 1, outs, ws, NULL, n, 0);
    return;
  }
  /* select first, then normalise: the final norm is per row, so only the wanted rows pay */
  be->gather_rows(c, &sel, &x, b);
  head_selected(m, b->n_out, want_hidden);
}

void block_layers_qwen(struct hearth_model *m, struct hb_batch *b, int want_hidden, int qk_norm, int bias) {
  const int L = m->cfg.num_hidden_layers;
  for (int i = 0; i < L - 1; i++) {
    block_attention(m, &m->w.layers[i], i, b, qk_norm, bias);
    block_mlp_swiglu(m, &m->w.layers[i], b->n_tokens);
  }
  const int n = attention_trim(m, &m->w.layers[L - 1], L - 1, b, qk_norm, bias, 1);
  if (n < b->n_tokens) { /* trimmed: the output rows went on in scratch.sel (none: nothing more to do) */
    if (n == 0) return;
    mlp_swiglu_of(m, &m->w.layers[L - 1], n, &m->scratch.sel);
    head_selected(m, n, want_hidden);
    return;
  }
  block_mlp_swiglu(m, &m->w.layers[L - 1], n);
  block_head(m, b, want_hidden);
}
