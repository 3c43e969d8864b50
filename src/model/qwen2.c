/* model/qwen2.c — Qwen2 / Qwen2.5 (Qwen2ForCausalLM): q/k/v bias, SwiGLU, tied or untied head.
 * Mirrors transformers' modeling_qwen2.py: pre-norm decoder, GQA, NeoX RoPE over the full head. */
#include <stdio.h>

#include "model/bind.h"
#include "model/blocks.h"

/* Binds the layer stack common to Qwen2 and Qwen3; `bias` and `qk_norm` select the extras. */
int qwen_bind_common(struct hearth_model *m, const struct st_set *st, enum hearth_dtype dtype,
                     int bias, int qk_norm, struct hearth_err *err);

int qwen_bind_common(struct hearth_model *m, const struct st_set *st, enum hearth_dtype dtype,
                     int bias, int qk_norm, struct hearth_err *err) {
  const struct hf_config *c = &m->cfg;
  struct binder b = {m, st, dtype, 0};
  int64_t d = c->hidden_size, qd = (int64_t)c->num_attention_heads * c->head_dim,
          kvd = (int64_t)c->num_key_value_heads * c->head_dim, ff = c->intermediate_size;
  char name[256];
  int rc;
  if ((rc = bind_matrix(&b, &m->w.tok_embd, "model.embed_tokens.weight", c->vocab_size, d, err))) return rc;
  if ((rc = bind_vector(&b, &m->w.out_norm, "model.norm.weight", d, err))) return rc;
  for (int i = 0; i < c->num_hidden_layers; i++) {
    struct layer_weights *L = &m->w.layers[i];
#define BINDM(field, suffix, rows, cols) \
    snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix); \
    if ((rc = bind_matrix(&b, &L->field, name, rows, cols, err))) return rc;
#define BINDV(field, suffix, n) \
    snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix); \
    if ((rc = bind_vector(&b, &L->field, name, n, err))) return rc;
    BINDV(attn_norm, "input_layernorm.weight", d);
    BINDM(wq, "self_attn.q_proj.weight", qd, d);
    BINDM(wk, "self_attn.k_proj.weight", kvd, d);
    BINDM(wv, "self_attn.v_proj.weight", kvd, d);
    BINDM(wo, "self_attn.o_proj.weight", d, qd);
    if (bias) {
      BINDV(bq, "self_attn.q_proj.bias", qd);
      BINDV(bk, "self_attn.k_proj.bias", kvd);
      BINDV(bv, "self_attn.v_proj.bias", kvd);
    }
    if (qk_norm) {
      BINDV(q_norm, "self_attn.q_norm.weight", c->head_dim);
      BINDV(k_norm, "self_attn.k_norm.weight", c->head_dim);
    }
    BINDV(ffn_norm, "post_attention_layernorm.weight", d);
    BINDM(w_gate, "mlp.gate_proj.weight", ff, d);
    BINDM(w_up, "mlp.up_proj.weight", ff, d);
    BINDM(w_down, "mlp.down_proj.weight", d, ff);
#undef BINDM
#undef BINDV
  }
  /* The head: lm_head.weight when present and the config does not tie; otherwise the embedding.
   * A checkpoint without lm_head and without a config tie is an embedding model (Qwen3-Embedding
   * ships no head), unless it is a tied model that simply omits it. An embedding model named so
   * before binding (c->is_embedding) binds no head even when the checkpoint carries one. */
  const struct st_tensor *head = st_find(st, "lm_head.weight");
  if (head && !c->tie_word_embeddings && !c->is_embedding) {
    if ((rc = bind_matrix(&b, &m->w.lm_head, "lm_head.weight", c->vocab_size, d, err))) return rc;
    m->w.lm_head_tied = 0;
  } else {
    m->w.lm_head = m->w.tok_embd;
    m->w.lm_head_tied = 1;
    if (!head && !c->tie_word_embeddings) m->cfg.is_embedding = 1;
  }
  if (!st_find(st, "model.embed_tokens.weight") && st_find(st, "embed_tokens.weight") && !head)
    m->cfg.is_embedding = 1; /* Qwen3Model weights saved without the "model." prefix */
  m->info.n_params = b.n_params;
  return 0;
}

static int qwen2_bind(struct hearth_model *m, const struct st_set *st, enum hearth_dtype dtype,
                      struct hearth_err *err) {
  return qwen_bind_common(m, st, dtype, 1, 0, err);
}

static void qwen2_forward(struct hearth_model *m, struct hb_batch *b, int want_hidden) {
  block_embed(m, b->n_tokens, 1.0f);
  block_layers_qwen(m, b, want_hidden, /*qk_norm=*/0, /*bias=*/1);
}

const struct family_ops family_qwen2 = {"qwen2", qwen2_bind, qwen2_forward};
