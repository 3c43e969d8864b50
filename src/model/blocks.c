/* model/blocks.c — embedding, attention, SwiGLU MLP and head blocks over the op table. */
#include "model/blocks.h"

#include <math.h>

int block_embed(struct hearth_model *m, const int32_t *ids, int n, float scale, struct hearth_err *err) {
  struct model_scratch *s = &m->scratch;
  if (m->be->write(m->bctx, &s->ids, 0, n, ids)) return err_set(err, HEARTH_ERR_BACKEND, "%s: cannot copy token ids", m->be->name);
  struct hb_tensor x = rows_view(&s->x, n);
  m->be->embed(m->bctx, &x, &m->w.tok_embd, &s->ids, n, scale);
  return 0;
}

void block_attention(struct hearth_model *m, const struct layer_weights *L, int layer,
                     struct hb_batch *b, int qk_norm, int bias) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  const struct hf_config *cfg = &m->cfg;
  int n = b->n_tokens;
  struct hb_tensor x = rows_view(&s->x, n), xn = rows_view(&s->xn, n), q = rows_view(&s->q, n),
                   k = rows_view(&s->k, n), v = rows_view(&s->v, n), a = rows_view(&s->attn, n),
                   o = rows_view(&s->o, n);
  be->rmsnorm(c, &xn, &x, &L->attn_norm, cfg->rms_norm_eps, 0.0f);
  be->matmul(c, &q, &xn, &L->wq, bias ? &L->bq : NULL, n);
  be->matmul(c, &k, &xn, &L->wk, bias ? &L->bk : NULL, n);
  be->matmul(c, &v, &xn, &L->wv, bias ? &L->bv : NULL, n);
  if (qk_norm) {
    be->rmsnorm(c, &q, &q, &L->q_norm, cfg->rms_norm_eps, 0.0f);
    be->rmsnorm(c, &k, &k, &L->k_norm, cfg->rms_norm_eps, 0.0f);
  }
  be->rope_neox(c, &q, b, cfg->num_attention_heads, cfg->head_dim, cfg->head_dim, cfg->rope_theta);
  be->rope_neox(c, &k, b, cfg->num_key_value_heads, cfg->head_dim, cfg->head_dim, cfg->rope_theta);
  be->kv_write(c, &m->kv.layers[layer], &k, &v, b);
  struct hb_attn_params ap = {
    .n_heads = cfg->num_attention_heads, .n_kv_heads = cfg->num_key_value_heads,
    .head_dim = cfg->head_dim, .scale = 1.0f / sqrtf((float)cfg->head_dim), .window = 0, .softcap = 0.0f,
  };
  be->attention(c, &a, &q, &m->kv.layers[layer], b, &ap);
  be->matmul(c, &o, &a, &L->wo, NULL, n);
  be->add(c, &x, &o, n);
}

void block_mlp_swiglu(struct hearth_model *m, const struct layer_weights *L, int n) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  struct hb_tensor x = rows_view(&s->x, n), xn = rows_view(&s->xn, n), g = rows_view(&s->gate, n),
                   u = rows_view(&s->up, n), o = rows_view(&s->o, n);
  be->rmsnorm(c, &xn, &x, &L->ffn_norm, m->cfg.rms_norm_eps, 0.0f);
  be->matmul(c, &g, &xn, &L->w_gate, NULL, n);
  be->matmul(c, &u, &xn, &L->w_up, NULL, n);
  be->silu_mul(c, &g, &g, &u, n);
  be->matmul(c, &o, &g, &L->w_down, NULL, n);
  be->add(c, &x, &o, n);
}

int block_head(struct hearth_model *m, struct hb_batch *b, float *out, int want_hidden,
               struct hearth_err *err) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *s = &m->scratch;
  int n = b->n_tokens;
  struct hb_tensor x = rows_view(&s->x, n), xn = rows_view(&s->xn, n), sel = rows_view(&s->sel, b->n_out);
  if (b->n_out == 0) return be->sync(c, err); /* a prefill chunk that ends no sequence */
  be->rmsnorm(c, &xn, &x, &m->w.out_norm, m->cfg.rms_norm_eps, 0.0f);
  be->gather_rows(c, &sel, &xn, b);
  if (want_hidden) {
    if (be->read(c, &sel, 0, b->n_out, out)) return err_set(err, HEARTH_ERR_BACKEND, "%s: read failed", be->name);
    return be->sync(c, err);
  }
  struct hb_tensor lg = rows_view(&s->logits, b->n_out);
  be->matmul(c, &lg, &sel, &m->w.lm_head, NULL, b->n_out);
  if (be->read(c, &lg, 0, b->n_out, out)) return err_set(err, HEARTH_ERR_BACKEND, "%s: read failed", be->name);
  return be->sync(c, err);
}
