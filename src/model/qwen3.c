/* model/qwen3.c — Qwen3 (Qwen3ForCausalLM, and Qwen3-Embedding's Qwen3Model weights):
 * per-head RMSNorm on q and k before RoPE, explicit head_dim, bias only if attention_bias.
 * Mirrors transformers' modeling_qwen3.py. Embedding checkpoints pool the last token (runtime). */
#include "model/bind.h"
#include "model/blocks.h"

int qwen_bind_common(struct hearth_model *m, const struct st_set *st, enum hearth_dtype dtype,
                     int bias, int qk_norm, struct hearth_err *err);

static int qwen3_bind(struct hearth_model *m, const struct st_set *st, enum hearth_dtype dtype,
                      struct hearth_err *err) {
  return qwen_bind_common(m, st, dtype, m->cfg.attention_bias, 1, err);
}

static void qwen3_forward(struct hearth_model *m, struct hb_batch *b, int want_hidden) {
  block_embed(m, b->n_tokens, 1.0f);
  block_layers_qwen(m, b, want_hidden, /*qk_norm=*/1, /*bias=*/m->cfg.attention_bias);
}

const struct family_ops family_qwen3 = {"qwen3", qwen3_bind, qwen3_forward};
