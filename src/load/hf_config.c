/* load/hf_config.c — config.json parsing and family detection. */
#include "load/hf_config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"

/* architectures / model_type -> family. The only place that compares family names. */
static const struct { const char *name; enum hearth_family family; } k_families[] = {
  {"Qwen2ForCausalLM", HEARTH_FAMILY_QWEN2},
  {"qwen2", HEARTH_FAMILY_QWEN2},
  {"Qwen3ForCausalLM", HEARTH_FAMILY_QWEN3},
  {"Qwen3Model", HEARTH_FAMILY_QWEN3},
  {"qwen3", HEARTH_FAMILY_QWEN3},
  /* Gemma 4: E2B/E4B (multimodal, text under text_config), text-only saves, and the 12B */
  {"Gemma4ForConditionalGeneration", HEARTH_FAMILY_GEMMA4},
  {"Gemma4ForCausalLM", HEARTH_FAMILY_GEMMA4},
  {"Gemma4UnifiedForConditionalGeneration", HEARTH_FAMILY_GEMMA4},
  {"Gemma4UnifiedForCausalLM", HEARTH_FAMILY_GEMMA4},
  {"gemma4", HEARTH_FAMILY_GEMMA4},
  {"gemma4_text", HEARTH_FAMILY_GEMMA4},
  {"gemma4_unified", HEARTH_FAMILY_GEMMA4},
  {"gemma4_unified_text", HEARTH_FAMILY_GEMMA4},
};

const char *hf_family_name(enum hearth_family f) {
  switch (f) {
  case HEARTH_FAMILY_QWEN2: return "qwen2";
  case HEARTH_FAMILY_QWEN3: return "qwen3";
  case HEARTH_FAMILY_GEMMA4: return "gemma4";
  }
  return "?";
}

static int get_int(json_t *root, const char *path, const char *key, int required, int def, int lo,
                   int hi, int *out, struct hearth_err *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) {
    if (required) return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' is missing", path, key);
    *out = def;
    return 0;
  }
  if (!json_is_integer(v)) return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' must be an integer", path, key);
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' = %lld is out of range [%d, %d]", path, key, (long long)x, lo, hi);
  *out = (int)x;
  return 0;
}

static int get_num(json_t *root, const char *path, const char *key, double def, double lo, double hi,
                   float *out, struct hearth_err *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) { *out = (float)def; return 0; }
  if (!json_is_number(v)) return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' must be a number", path, key);
  double x = json_number_value(v);
  if (!(x >= lo && x <= hi)) return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' = %g is out of range", path, key, x);
  *out = (float)x;
  return 0;
}

static int get_bool(json_t *root, const char *path, const char *key, int def, int *out, struct hearth_err *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) { *out = def; return 0; }
  if (!json_is_boolean(v)) return err_set(err, HEARTH_ERR_FORMAT, "%s: field '%s' must be true or false", path, key);
  *out = json_is_true(v);
  return 0;
}

static void add_eos(struct hf_config *c, json_int_t id) {
  if (id < 0 || id > 0x7fffffff) return;
  for (int i = 0; i < c->n_eos; i++) if (c->eos_token_ids[i] == id) return;
  if (c->n_eos < 8) c->eos_token_ids[c->n_eos++] = (int)id;
}

static void read_eos(json_t *root, struct hf_config *c) {
  json_t *e = json_object_get(root, "eos_token_id");
  if (json_is_integer(e)) add_eos(c, json_integer_value(e));
  if (json_is_array(e)) {
    size_t i;
    json_t *x;
    json_array_foreach(e, i, x) if (json_is_integer(x)) add_eos(c, json_integer_value(x));
  }
}

/* Caps far above any supported model (Qwen3-235B: 94 layers, 64 x 128 attention width), low
 * enough that products of them cannot overflow and a hostile config fails here, by name. */
enum { MAX_DIM = 1 << 20, MAX_VOCAB = 1 << 22, MAX_LAYERS = HF_MAX_LAYERS, MAX_PROJ = 1 << 16 };

int hf_config_parse(const char *text, size_t len, const char *path, struct hf_config *c,
                    struct hearth_err *err) {
  memset(c, 0, sizeof *c);
  json_error_t jerr;
  json_t *root = json_loadb(text, len, 0, &jerr);
  if (!root) return err_set(err, HEARTH_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", path, jerr.text, jerr.line);
  int rc = 0;
  if (!json_is_object(root)) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: not a JSON object", path); goto done; }
  const char *arch = NULL;
  json_t *archs = json_object_get(root, "architectures");
  if (json_is_array(archs) && json_array_size(archs) > 0 && json_is_string(json_array_get(archs, 0)))
    arch = json_string_value(json_array_get(archs, 0));
  json_t *mt = json_object_get(root, "model_type");
  const char *model_type = json_is_string(mt) ? json_string_value(mt) : NULL;
  if (!arch && !model_type) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: neither 'architectures' nor 'model_type' is present", path); goto done; }
  int found = 0;
  for (size_t i = 0; i < sizeof k_families / sizeof k_families[0] && !found; i++)
    if ((arch && !strcmp(arch, k_families[i].name))) { c->family = k_families[i].family; found = 1; }
  for (size_t i = 0; i < sizeof k_families / sizeof k_families[0] && !found; i++)
    if ((model_type && !strcmp(model_type, k_families[i].name))) { c->family = k_families[i].family; found = 1; }
  if (!found) {
    rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: unsupported model family (architectures[0] = '%s', model_type = '%s'); hearth supports Qwen2ForCausalLM, Qwen3ForCausalLM/Qwen3Model and Gemma 4", path, arch ? arch : "", model_type ? model_type : "");
    goto done;
  }
  snprintf(c->arch, sizeof c->arch, "%s", arch ? arch : model_type);
  /* Gemma 4 multimodal configs nest the decoder's fields in text_config; all dims come from there */
  json_t *tc = root;
  if (c->family == HEARTH_FAMILY_GEMMA4 && json_is_object(json_object_get(root, "text_config")))
    tc = json_object_get(root, "text_config");
  if ((rc = get_int(tc, path, "vocab_size", 1, 0, 1, MAX_VOCAB, &c->vocab_size, err))) goto done;
  if ((rc = get_int(tc, path, "hidden_size", 1, 0, 1, MAX_DIM, &c->hidden_size, err))) goto done;
  if ((rc = get_int(tc, path, "intermediate_size", 1, 0, 1, MAX_DIM, &c->intermediate_size, err))) goto done;
  if ((rc = get_int(tc, path, "num_hidden_layers", 1, 0, 1, MAX_LAYERS, &c->num_hidden_layers, err))) goto done;
  if ((rc = get_int(tc, path, "num_attention_heads", 1, 0, 1, 4096, &c->num_attention_heads, err))) goto done;
  if ((rc = get_int(tc, path, "num_key_value_heads", 0, c->num_attention_heads, 1, 4096, &c->num_key_value_heads, err))) goto done;
  if (c->num_attention_heads % c->num_key_value_heads) {
    rc = err_set(err, HEARTH_ERR_FORMAT, "%s: field 'num_attention_heads' (%d) is not a multiple of 'num_key_value_heads' (%d)", path, c->num_attention_heads, c->num_key_value_heads);
    goto done;
  }
  json_t *jhd = json_object_get(tc, "head_dim");
  if ((!jhd || json_is_null(jhd)) && c->hidden_size % c->num_attention_heads) {
    rc = err_set(err, HEARTH_ERR_FORMAT, "%s: field 'hidden_size' (%d) is not a multiple of 'num_attention_heads' (%d) "
                 "and no 'head_dim' is given", path, c->hidden_size, c->num_attention_heads);
    goto done;
  }
  int def_hd = c->hidden_size / c->num_attention_heads;
  if ((rc = get_int(tc, path, "head_dim", 0, def_hd, 2, 4096, &c->head_dim, err))) goto done;
  if (c->head_dim < 2) { /* the default hidden_size / num_attention_heads is not range-checked */
    rc = err_set(err, HEARTH_ERR_FORMAT, "%s: field 'head_dim' = %d (hidden_size / num_attention_heads when absent) must be at least 2", path, c->head_dim);
    goto done;
  }
  if (c->head_dim % 2) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: field 'head_dim' must be even", path); goto done; }
  if (c->head_dim > HF_MAX_HEAD_DIM) { /* kernels keep one head's accumulator on the stack */
    rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: field 'head_dim' = %d exceeds hearth's limit of %d", path, c->head_dim, HF_MAX_HEAD_DIM);
    goto done;
  }
  /* projection widths: every product is of ints checked above, so int64 cannot overflow */
  if ((int64_t)c->num_attention_heads * c->head_dim > MAX_PROJ) {
    rc = err_set(err, HEARTH_ERR_FORMAT, "%s: 'num_attention_heads' x 'head_dim' = %lld exceeds hearth's limit of %d",
                 path, (long long)c->num_attention_heads * c->head_dim, MAX_PROJ);
    goto done;
  }
  if ((rc = get_int(tc, path, "max_position_embeddings", 0, 32768, 1, 1 << 24, &c->max_position_embeddings, err))) goto done;
  if ((rc = get_num(tc, path, "rms_norm_eps", 1e-6, 0, 1, &c->rms_norm_eps, err))) goto done;
  c->rope_theta = 10000.0f;
  json_t *rp = json_object_get(tc, "rope_parameters");
  if (json_is_object(rp) && json_object_get(rp, "rope_theta")) {
    if ((rc = get_num(rp, path, "rope_theta", 10000.0, 1, 1e12, &c->rope_theta, err))) goto done;
  } else if ((rc = get_num(tc, path, "rope_theta", 10000.0, 1, 1e12, &c->rope_theta, err))) {
    goto done;
  }
  json_t *rs = json_object_get(tc, "rope_scaling");
  if (rs && !json_is_null(rs)) {
    json_t *ty = json_object_get(rs, "rope_type");
    if (!ty) ty = json_object_get(rs, "type");
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "default")) {
      rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: field 'rope_scaling' (%s) is not supported", path, json_is_string(ty) ? json_string_value(ty) : "?");
      goto done;
    }
  }
  if ((rc = get_bool(tc, path, "tie_word_embeddings", 0, &c->tie_word_embeddings, err))) goto done;
  if (c->family == HEARTH_FAMILY_QWEN2) c->attention_bias = 1;
  else if ((rc = get_bool(tc, path, "attention_bias", 0, &c->attention_bias, err))) goto done;
  int sw = 0;
  if ((rc = get_bool(tc, path, "use_sliding_window", 0, &sw, err))) goto done;
  if (sw) { rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: field 'use_sliding_window' = true is not supported for this family", path); goto done; }
  json_t *bos = json_object_get(tc, "bos_token_id");
  if (!json_is_integer(bos)) bos = json_object_get(root, "bos_token_id");
  c->bos_token_id = json_is_integer(bos) ? (int)json_integer_value(bos) : -1;
  read_eos(root, c);
  if (tc != root) read_eos(tc, c);
  if (c->family == HEARTH_FAMILY_GEMMA4) {
    rc = hf_config_gemma4(tc, path, c, err);
    goto done;
  }
  for (int i = 0; i < c->num_hidden_layers; i++)
    c->layer[i] = (struct hf_layer){.head_dim = c->head_dim, .n_kv_heads = c->num_key_value_heads,
                                    .n_ff = c->intermediate_size, .sliding = 0, .kv_source = i, .k_eq_v = 0};
done:
  json_decref(root);
  return rc;
}

int hf_config_load(const char *dir, struct hf_config *c, struct hearth_err *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  size_t len;
  char *text;
  int rc = file_read_all(path, FILE_CAP_JSON, &text, &len, err);
  if (rc) return rc;
  rc = hf_config_parse(text, len, "config.json", c, err);
  free(text);
  if (rc) return rc;
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  if (!file_exists(path)) return 0; /* optional: it only adds stop ids */
  if ((rc = file_read_all(path, FILE_CAP_JSON, &text, &len, err))) return rc;
  json_error_t jerr;
  json_t *g = json_loadb(text, len, 0, &jerr);
  free(text);
  if (!g) return err_set(err, HEARTH_ERR_FORMAT, "generation_config.json: not valid JSON: %s (line %d)", jerr.text, jerr.line);
  json_t *e = json_object_get(g, "eos_token_id");
  if (e && !json_is_null(e) && !json_is_integer(e) && !json_is_array(e)) {
    json_decref(g);
    return err_set(err, HEARTH_ERR_FORMAT, "generation_config.json: field 'eos_token_id' must be an integer or a list");
  }
  read_eos(g, c);
  json_decref(g);
  return 0;
}
