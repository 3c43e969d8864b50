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
#define HF_MAX_LAYERS 1024   /* num_hidden_layers accepted */

/* One decoder layer's geometry: the same for every layer of a Qwen model; per layer type for
 * Gemma 4 (sliding layers: head_dim 256, full layers: global_head_dim 512 and their own KV heads). */
struct hf_layer {
  int head_dim;    /* 256 sliding / 512 full on Gemma 4 */
  int n_kv_heads;  /* full layers of K=V models: num_global_key_value_heads */
  int n_ff;        /* 2 x intermediate_size on Gemma 4's KV-shared layers with use_double_wide_mlp */
  int sliding;     /* 1: sliding-window attention (Gemma 4 "sliding_attention" layers) */
  int kv_source;   /* the layer whose K/V it attends over: itself, or for a KV-shared layer the last
                    * non-shared layer of the same type (that layer's cache; it stores none) */
  int k_eq_v;      /* V is the raw k_proj output (Gemma 4 full layers with attention_k_eq_v) */
};

/* Gemma 4 text-config fields beyond the common ones (models.md §3.2); zero for other families. */
struct hf_gemma4 {
  int sliding_window;            /* 512 (E2B, E4B), 1024 (12B): keys with pos > q - window */
  int global_head_dim;           /* 512 */
  int n_kv_shared;               /* num_kv_shared_layers: 20 (E2B), 18 (E4B), 0 (12B) */
  int ple_dim;                   /* hidden_size_per_layer_input: 256 (E2B, E4B), 0 (12B) */
  int ple_vocab;                 /* vocab_size_per_layer_input: rows of the PLE table (262144) */
  float rope_theta_full;         /* 1e6 (sliding layers use hf_config.rope_theta, 1e4) */
  int rope_pairs_full;           /* proportional RoPE: int(partial_rotary_factor * global_head_dim // 2)
                                  * rotated pairs (64), the others pass through */
  float rope_factor_full;        /* proportional RoPE 'factor' (inv_freq /= factor), 1.0 */
  float final_logit_softcapping; /* 30; 0 = off */
};

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
  struct hf_gemma4 g4;     /* family GEMMA4 only */
  struct hf_layer layer[HF_MAX_LAYERS]; /* [num_hidden_layers], filled for every family */
};

/* Reads DIR/config.json and, when present, DIR/generation_config.json. */
int hf_config_load(const char *dir, struct hf_config *cfg, struct hearth_err *err);
/* Parses config.json text (path is only used in messages). */
int hf_config_parse(const char *text, size_t len, const char *path, struct hf_config *cfg,
                    struct hearth_err *err);
const char *hf_family_name(enum hearth_family f);

/* load/hf_config_gemma4.c: the Gemma 4 fields of the text config `tc` (config.json's text_config,
 * or the root of a text-only config) into c->g4 and c->layer[] (hf_config_parse calls it). */
struct json_t;
int hf_config_gemma4(struct json_t *tc, const char *path, struct hf_config *c, struct hearth_err *err);
#endif
