/* load/hf_config.h — config.json (+ generation_config.json) into one commented struct.
 *
 * The family is detected once here from `architectures` / `model_type` through a name table;
 * after this, no code compares strings. Every dimension comes from the file; a missing or
 * out-of-range field is an error naming config.json and the field. */
#ifndef HEARTH_LOAD_HF_CONFIG_H
#define HEARTH_LOAD_HF_CONFIG_H
#include "base/err.h"
#include "hearth.h"

#define HF_MAX_HEAD_DIM 1024 /* largest head_dim the kernels accept (Gemma 4 global layers: 512) */

struct hf_config {
  enum hearth_family family;
  char arch[64];           /* architectures[0], or model_type when absent */
  int is_embedding;        /* no LM head in the checkpoint (Qwen3-Embedding style) — set by bind */
  int vocab_size;          /* rows of embed_tokens: Qwen2.5 151936, Qwen3-Emb 151669 */
  int hidden_size;         /* 896 (0.5B), 2048 (3B), 1024 (Qwen3-Emb-0.6B) */
  int intermediate_size;   /* 4864, 11008, 3072 */
  int num_hidden_layers;   /* 24, 36, 28 */
  int num_attention_heads; /* 14, 16, 16 */
  int num_key_value_heads; /* 2, 2, 8 */
  int head_dim;            /* explicit in Qwen3 (128); hidden/heads otherwise (64, 128) */
  int max_position_embeddings; /* 32768 */
  float rms_norm_eps;      /* 1e-6 */
  float rope_theta;        /* 1e6 */
  int tie_word_embeddings; /* 1 for all the small Qwen models */
  int attention_bias;      /* Qwen2: q/k/v bias always; Qwen3: attention_bias (false) */
  int bos_token_id;        /* -1 if null */
  int n_eos;
  int eos_token_ids[8];    /* config.json eos, plus generation_config.json's, deduplicated */
};

/* Reads DIR/config.json and, when present, DIR/generation_config.json. */
int hf_config_load(const char *dir, struct hf_config *cfg, struct hearth_err *err);
/* Parses config.json text (path is only used in messages). */
int hf_config_parse(const char *text, size_t len, const char *path, struct hf_config *cfg,
                    struct hearth_err *err);
const char *hf_family_name(enum hearth_family f);
#endif
