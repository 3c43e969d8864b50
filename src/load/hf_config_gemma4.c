/* load/hf_config_gemma4.c — the Gemma 4 text config: layer types, the two RoPE parameter sets,
 * per-layer head dims and KV heads, KV sharing, PLE, double-wide MLP, K = V, final softcap.
 *
 * The rules are those of transformers 5.17's configuration_gemma4.py / modeling_gemma4.py
 * (models.md §3.2-3.3):
 *   - full layers use global_head_dim (default 512); their KV heads are num_global_key_value_heads
 *     only when attention_k_eq_v, otherwise num_key_value_heads;
 *   - newer saves replace global_head_dim / num_global_key_value_heads by a per_layer_config table of
 *     overrides (keyed by layer index or by layer type); when present it wins, as in transformers;
 *   - layers i >= L - num_kv_shared_layers are KV-shared: they attend over the K/V of the last
 *     non-shared layer of the same type, and with use_double_wide_mlp their MLP is 2x wide. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "load/hf_config.h"

static int want_int(json_t *o, const char *path, const char *key, int def, int lo, int hi, int *out,
                    struct hearth_err *err) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) { *out = def; return 0; }
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' must be an integer in [%d, %d]", path, key, lo, hi);
  *out = (int)json_integer_value(v);
  return 0;
}

static int want_bool(json_t *o, const char *path, const char *key, int *out, struct hearth_err *err) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) { *out = 0; return 0; }
  if (!json_is_boolean(v)) return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' must be true or false", path, key);
  *out = json_is_true(v);
  return 0;
}

static int want_num(json_t *o, const char *path, const char *key, double def, double lo, double hi, double *out,
                    struct hearth_err *err) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) { *out = def; return 0; }
  if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi))
    return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' must be a number in [%g, %g]", path, key, lo, hi);
  *out = json_number_value(v);
  return 0;
}

/* layer_types[i]: 1 sliding, 0 full. Absent: transformers' default pattern (every 6th layer full). */
static int read_layer_types(json_t *tc, const char *path, struct hf_config *c, struct hearth_err *err) {
  int L = c->num_hidden_layers;
  json_t *lt = json_object_get(tc, "layer_types");
  if (!lt || json_is_null(lt)) {
    for (int i = 0; i < L; i++) c->layer[i].sliding = (i + 1) % 6 != 0;
  } else {
    if (!json_is_array(lt) || (int)json_array_size(lt) != L)
      return err_set(err, HEARTH_ERR_FORMAT, "%s: field 'layer_types' must list num_hidden_layers (%d) entries", path, L);
    for (int i = 0; i < L; i++) {
      const char *t = json_string_value(json_array_get(lt, (size_t)i));
      if (t && !strcmp(t, "sliding_attention")) c->layer[i].sliding = 1;
      else if (t && !strcmp(t, "full_attention")) c->layer[i].sliding = 0;
      else return err_set(err, HEARTH_ERR_FORMAT, "%s: layer_types[%d] = '%s' is not sliding_attention or full_attention", path, i, t ? t : "?");
    }
  }
  c->layer[L - 1].sliding = 0; /* transformers forces the last layer to full attention */
  return 0;
}

/* rope_parameters.{sliding_attention, full_attention} (absent: the class defaults). */
static int read_rope(json_t *tc, const char *path, struct hf_config *c, struct hearth_err *err) {
  json_t *rp = json_object_get(tc, "rope_parameters");
  json_t *sl = json_is_object(rp) ? json_object_get(rp, "sliding_attention") : NULL;
  json_t *fu = json_is_object(rp) ? json_object_get(rp, "full_attention") : NULL;
  if (rp && !json_is_null(rp) && (!json_is_object(sl) || !json_is_object(fu)))
    return err_set(err, HEARTH_ERR_FORMAT, "%s: field 'rope_parameters' must hold sliding_attention and full_attention", path);
  double th_s = 10000.0, th_f = 1000000.0, partial = 0.25, factor = 1.0;
  int rc;
  if (sl) {
    const char *ty = json_string_value(json_object_get(sl, "rope_type"));
    if (ty && strcmp(ty, "default"))
      return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: rope_parameters.sliding_attention.rope_type '%s' is not supported (default)", path, ty);
    if ((rc = want_num(sl, path, "rope_theta", 10000.0, 1.0, 1e12, &th_s, err))) return rc;
  }
  if (fu) {
    const char *ty = json_string_value(json_object_get(fu, "rope_type"));
    if (!ty || strcmp(ty, "proportional"))
      return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: rope_parameters.full_attention.rope_type '%s' is not supported (proportional)", path, ty ? ty : "?");
    if ((rc = want_num(fu, path, "rope_theta", 1000000.0, 1.0, 1e12, &th_f, err))) return rc;
    if ((rc = want_num(fu, path, "partial_rotary_factor", 1.0, 0.0, 1.0, &partial, err))) return rc;
    if ((rc = want_num(fu, path, "factor", 1.0, 1e-6, 1e6, &factor, err))) return rc;
  }
  c->rope_theta = (float)th_s;
  c->g4.rope_theta_full = (float)th_f;
  c->g4.rope_factor_full = (float)factor;
  /* Python: int(partial * head_dim // 2), a float floor division */
  c->g4.rope_pairs_full = (int)((partial * (double)c->g4.global_head_dim) / 2.0);
  return 0;
}

/* per_layer_config: {"<layer index>" or "<layer type>": {"head_dim": .., "num_key_value_heads": ..}} */
static int read_per_layer_config(json_t *tc, const char *path, struct hf_config *c, struct hearth_err *err) {
  json_t *plc = json_object_get(tc, "per_layer_config");
  if (!plc || json_is_null(plc)) return 0;
  if (!json_is_object(plc)) return err_set(err, HEARTH_ERR_FORMAT, "%s: field 'per_layer_config' must be an object", path);
  const char *key;
  json_t *ov;
  int L = c->num_hidden_layers;
  /* an override table replaces the raw keys: reset the full layers to the plain values first */
  for (int i = 0; i < L; i++)
    if (!c->layer[i].sliding) { c->layer[i].head_dim = c->head_dim; c->layer[i].n_kv_heads = c->num_key_value_heads; }
  json_object_foreach(plc, key, ov) {
    if (!json_is_object(ov)) return err_set(err, HEARTH_ERR_FORMAT, "%s: per_layer_config['%s'] must be an object", path, key);
    int lo = -1, hi = -1, type = -1; /* a layer range, or a layer type (1 sliding, 0 full) */
    if (!strcmp(key, "sliding_attention")) type = 1;
    else if (!strcmp(key, "full_attention")) type = 0;
    else {
      char *end;
      long v = strtol(key, &end, 10);
      if (*key == '\0' || *end || v < 0 || v >= L)
        return err_set(err, HEARTH_ERR_FORMAT, "%s: per_layer_config key '%s' is not a layer index or type", path, key);
      lo = hi = (int)v;
    }
    for (int i = 0; i < L; i++) {
      if (type >= 0 ? c->layer[i].sliding != type : (i < lo || i > hi)) continue;
      int rc;
      if ((rc = want_int(ov, path, "head_dim", c->layer[i].head_dim, 2, HF_MAX_HEAD_DIM, &c->layer[i].head_dim, err))) return rc;
      if ((rc = want_int(ov, path, "num_key_value_heads", c->layer[i].n_kv_heads, 1, 4096, &c->layer[i].n_kv_heads, err))) return rc;
    }
  }
  return 0;
}

int hf_config_gemma4(struct json_t *tc, const char *path, struct hf_config *c, struct hearth_err *err) {
  int L = c->num_hidden_layers, rc, moe = 0, bias = 0;
  struct hf_gemma4 *g = &c->g4;
  const char *act = json_string_value(json_object_get(tc, "hidden_activation"));
  if (act && strcmp(act, "gelu_pytorch_tanh"))
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: hidden_activation '%s' is not supported (gelu_pytorch_tanh)", path, act);
  if ((rc = want_bool(tc, path, "enable_moe_block", &moe, err))) return rc;
  if (moe) return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: enable_moe_block = true (Gemma 4 26B-A4B) is not supported", path);
  if ((rc = want_bool(tc, path, "attention_bias", &bias, err))) return rc;
  if (bias) return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: attention_bias = true is not supported for Gemma 4", path);
  const char *bidi = json_string_value(json_object_get(tc, "use_bidirectional_attention"));
  if (bidi && !strcmp(bidi, "all"))
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: use_bidirectional_attention = 'all' is not supported", path);
  c->tie_word_embeddings = 1; /* Gemma 4 always ties (the class default, and every checkpoint) */
  json_t *tie = json_object_get(tc, "tie_word_embeddings");
  if (json_is_false(tie)) return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: tie_word_embeddings = false is not supported for Gemma 4", path);
  if ((rc = want_int(tc, path, "sliding_window", 512, 1, 1 << 24, &g->sliding_window, err))) return rc;
  if ((rc = want_int(tc, path, "global_head_dim", 512, 2, HF_MAX_HEAD_DIM, &g->global_head_dim, err))) return rc;
  if (g->global_head_dim % 2) return err_set(err, HEARTH_ERR_FORMAT, "%s: field 'global_head_dim' must be even", path);
  int k_eq_v = 0, dw = 0, gkv = 0;
  if ((rc = want_bool(tc, path, "attention_k_eq_v", &k_eq_v, err))) return rc;
  if ((rc = want_bool(tc, path, "use_double_wide_mlp", &dw, err))) return rc;
  if ((rc = want_int(tc, path, "num_global_key_value_heads", 0, 1, 4096, &gkv, err))) return rc;
  if ((rc = want_int(tc, path, "num_kv_shared_layers", 0, 0, L - 1, &g->n_kv_shared, err))) return rc;
  if ((rc = want_int(tc, path, "hidden_size_per_layer_input", 0, 0, 1 << 16, &g->ple_dim, err))) return rc;
  if ((rc = want_int(tc, path, "vocab_size_per_layer_input", c->vocab_size, 1, 1 << 22, &g->ple_vocab, err))) return rc;
  if (g->ple_dim && g->ple_vocab < c->vocab_size) /* every token id indexes the PLE table too */
    return err_set(err, HEARTH_ERR_FORMAT, "%s: field 'vocab_size_per_layer_input' (%d) is smaller than 'vocab_size' (%d)",
                   path, g->ple_vocab, c->vocab_size);
  double cap = 0;
  if ((rc = want_num(tc, path, "final_logit_softcapping", 0.0, 0.0, 1e6, &cap, err))) return rc;
  g->final_logit_softcapping = (float)cap;
  if ((rc = read_layer_types(tc, path, c, err))) return rc;
  int first_shared = L - g->n_kv_shared;
  for (int i = 0; i < L; i++) {
    struct hf_layer *y = &c->layer[i];
    int full = !y->sliding, shared = i >= first_shared;
    y->head_dim = full ? g->global_head_dim : c->head_dim;
    y->k_eq_v = full && k_eq_v;
    y->n_kv_heads = y->k_eq_v && gkv ? gkv : c->num_key_value_heads;
    y->n_ff = c->intermediate_size * (dw && shared ? 2 : 1);
    y->kv_source = i;
  }
  if ((rc = read_per_layer_config(tc, path, c, err))) return rc;
  for (int i = 0; i < L; i++) /* what the full layers ended up with, for their RoPE */
    if (!c->layer[i].sliding) { g->global_head_dim = c->layer[i].head_dim; break; }
  if ((rc = read_rope(tc, path, c, err))) return rc;
  for (int i = 0; i < L; i++) {
    struct hf_layer *y = &c->layer[i];
    if (y->head_dim % 2 || c->num_attention_heads % y->n_kv_heads)
      return err_set(err, HEARTH_ERR_FORMAT, "%s: layer %d: head_dim %d / %d KV heads do not fit %d attention heads", path, i, y->head_dim, y->n_kv_heads, c->num_attention_heads);
    if (i < first_shared) continue;
    int src = -1;
    for (int j = first_shared - 1; j >= 0 && src < 0; j--)
      if (c->layer[j].sliding == y->sliding) src = j;
    if (src < 0)
      return err_set(err, HEARTH_ERR_FORMAT, "%s: KV-shared layer %d has no earlier non-shared %s layer to share with", path, i, y->sliding ? "sliding" : "full");
    const struct hf_layer *s = &c->layer[src];
    if (s->head_dim != y->head_dim || s->n_kv_heads != y->n_kv_heads)
      return err_set(err, HEARTH_ERR_FORMAT, "%s: KV-shared layer %d and its source %d differ in head geometry", path, i, src);
    y->kv_source = src;
  }
  if (g->rope_pairs_full > g->global_head_dim / 2) g->rope_pairs_full = g->global_head_dim / 2;
  return 0;
}
