/* model/blocks.h — the shared toolkit family forward passes are written with.
 * Each block enqueues backend ops on the model's backend; none of them allocates. */
#ifndef HEARTH_MODEL_BLOCKS_H
#define HEARTH_MODEL_BLOCKS_H
#include "model/model.h"

/* A view of the first n rows of a scratch tensor. */
static inline struct hb_tensor rows_view(const struct hb_tensor *t, int n) {
  struct hb_tensor v = *t;
  v.rows = n;
  v.bytes = 0;
  return v;
}

/* Embeds scratch.ids (already on the backend) into scratch.x, times scale. */
void block_embed(struct hearth_model *m, int n, float scale);
/* Row selection (the batch's out_rows) into scratch.sel, final norm, then the LM head into
 * scratch.logits unless want_hidden (then scratch.sel holds the final hidden states). */
void block_head(struct hearth_model *m, struct hb_batch *b, int want_hidden);
/* block_head reading the residual stream from x_all (Gemma 4's fused decode alternates two buffers) */
void block_head_of(struct hearth_model *m, struct hb_batch *b, int want_hidden, const struct hb_tensor *x_all);
/* h += down(silu(gate(xn)) * up(xn)) for the first n rows, xn = rmsnorm(h) with ffn_norm. */
void block_mlp_swiglu(struct hearth_model *m, const struct layer_weights *L, int n);
/* Qwen2 / Qwen3's layer stack and head, the last layer trimmed to the output rows. */
void block_layers_qwen(struct hearth_model *m, struct hb_batch *b, int want_hidden, int qk_norm, int bias);
/* Standard GQA self-attention with NeoX RoPE over the paged cache, qk-norm optional.
 * h += o_proj(attn(rope(q), rope(k), v)), xn = rmsnorm(h) with attn_norm. */
void block_attention(struct hearth_model *m, const struct layer_weights *L, int layer,
                     struct hb_batch *b, int qk_norm, int bias);
#endif
