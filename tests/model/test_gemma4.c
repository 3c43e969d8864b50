/* test_gemma4.c — Gemma 4 config parsing, checkpoint binding and the cached forward pass, without the
 * transformers fixtures (those are test_oracle's gemma4_* groups):
 *   real_configs:  configs/gemma-4-{e2b,e4b,12b}-it.json give models.md §3.3's derived geometry (full-layer
 *                  indices, KV heads, KV-sharing sources, double-wide MLP, proportional RoPE pairs).
 *   config_forms:  per_layer_config overrides (by index and by type), text-only configs, and clear errors.
 *   bind:          a tiny E-style checkpoint (PLE, KV sharing, double-wide MLP, window 4) written here loads in
 *                  f32 / bf16 / int4; KV-shared layers bind without k/v tensors and own no KV storage; stray k/v
 *                  tensors on shared layers are ignored; a missing layer_scalar or v_proj is named in the error.
 *   cached:        the paged-cache path (prefill in chunks, then one token at a time, past the sliding window)
 *                  gives the logits of one whole-sequence prefill, for the E-style and the K = V dense model;
 *                  the text-only layout (model.*, gemma4_text) gives the multimodal layout's logits.
 *   ring*:         the sliding-window ring (runtime/kv_ring.h) against keeping every position, on the gemma4_e
 *                  fixture: bit-identical logits (ring_cases.h), blocks given back in a small pool, the KV bytes
 *                  allocated, the disk store's version 3 round trip. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/half.h"
#include "hearth.h"
#include "load/hf_config.h"
#include "model/model.h"
#include "test.h"

static char g_dir[256];

static void write_file(const char *name, const void *data, size_t n) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  FILE *f = fopen(p, "wb");
  if (!f) { fprintf(stderr, "cannot write %s\n", p); return; }
  fwrite(data, 1, n, f);
  fclose(f);
}

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
  if (s) s[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return s;
}

static int parse_file(const char *rel, struct hf_config *c) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", HEARTH_SOURCE_DIR, rel);
  size_t n;
  char *t = read_text(p, &n);
  if (!t) { fprintf(stderr, "cannot read %s\n", p); return -1; }
  struct hearth_err err = {0};
  int rc = hf_config_parse(t, n, rel, c, &err);
  if (rc) fprintf(stderr, "%s: %s\n", rel, err.msg);
  free(t);
  return rc;
}

TEST_GROUP(real_configs) {
  static struct hf_config c;
  REQUIRE(parse_file("configs/gemma-4-e2b-it.json", &c) == 0);
  CHECK(c.family == HEARTH_FAMILY_GEMMA4 && c.num_hidden_layers == 35 && c.hidden_size == 1536);
  for (int i = 0; i < 35; i++) {
    int full = i % 5 == 4, shared = i >= 15;
    CHECKF(c.layer[i].sliding == !full, "e2b layer %d type", i);
    CHECKF(c.layer[i].head_dim == (full ? 512 : 256) && c.layer[i].n_kv_heads == 1, "e2b layer %d heads", i);
    CHECKF(c.layer[i].kv_source == (shared ? (full ? 14 : 13) : i), "e2b layer %d source %d", i, c.layer[i].kv_source);
    CHECKF(c.layer[i].n_ff == (shared ? 12288 : 6144), "e2b layer %d ff %d", i, c.layer[i].n_ff);
    CHECK(!c.layer[i].k_eq_v);
  }
  CHECK(c.g4.ple_dim == 256 && c.g4.ple_vocab == 262144 && c.g4.sliding_window == 512 && c.g4.n_kv_shared == 20);
  CHECK(c.g4.rope_pairs_full == 64 && c.rope_theta == 10000.0f && c.g4.rope_theta_full == 1e6f);
  CHECK(c.g4.final_logit_softcapping == 30.0f && c.tie_word_embeddings);
  int has1 = 0, has106 = 0;
  for (int i = 0; i < c.n_eos; i++) { has1 |= c.eos_token_ids[i] == 1; has106 |= c.eos_token_ids[i] == 106; }
  CHECK(has1 && has106 && c.bos_token_id == 2);

  REQUIRE(parse_file("configs/gemma-4-e4b-it.json", &c) == 0);
  for (int i = 0; i < 42; i++) {
    int full = i % 6 == 5, shared = i >= 24;
    CHECKF(c.layer[i].kv_source == (shared ? (full ? 23 : 22) : i), "e4b layer %d source %d", i, c.layer[i].kv_source);
    CHECKF(c.layer[i].n_ff == 10240 && c.layer[i].n_kv_heads == 2, "e4b layer %d", i);
  }

  REQUIRE(parse_file("configs/gemma-4-12b-it.json", &c) == 0);
  CHECK(c.num_hidden_layers == 48 && c.hidden_size == 3840 && c.g4.ple_dim == 0 && c.g4.n_kv_shared == 0);
  CHECK(c.g4.sliding_window == 1024);
  for (int i = 0; i < 48; i++) {
    int full = i % 6 == 5;
    CHECKF(c.layer[i].k_eq_v == full && c.layer[i].n_kv_heads == (full ? 1 : 8) && c.layer[i].kv_source == i &&
           c.layer[i].head_dim == (full ? 512 : 256) && c.layer[i].n_ff == 15360, "12b layer %d", i);
  }
}

#define TC_BASE "\"model_type\":\"gemma4_text\",\"vocab_size\":64,\"hidden_size\":128,\"intermediate_size\":128," \
                "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32"

static void expect_error(const char *json, const char *needle) {
  static struct hf_config c;
  struct hearth_err err = {0};
  int rc = hf_config_parse(json, strlen(json), "config.json", &c, &err);
  CHECKF(rc != 0, "accepted: %s", json);
  CHECKF(strstr(err.msg, "config.json") && strstr(err.msg, needle), "message lacks '%s': %s", needle, err.msg);
}

TEST_GROUP(config_forms) {
  static struct hf_config c;
  struct hearth_err err = {0};
  /* a transformers 5.17-style save: per_layer_config instead of global_head_dim, K = V */
  const char *plc = "{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"attention_k_eq_v\":true,"
                    "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\"],"
                    "\"per_layer_config\":{\"1\":{\"head_dim\":64,\"num_key_value_heads\":1},\"3\":{\"head_dim\":64,\"num_key_value_heads\":1}}}";
  CHECKF(hf_config_parse(plc, strlen(plc), "config.json", &c, &err) == 0, "%s", err.msg);
  CHECK(c.layer[1].head_dim == 64 && c.layer[1].n_kv_heads == 1 && c.layer[1].k_eq_v && c.layer[0].head_dim == 32);
  CHECK(c.layer[0].n_kv_heads == 2 && !c.layer[0].k_eq_v && c.g4.rope_pairs_full == 8 && c.g4.global_head_dim == 64);
  /* keyed by layer type */
  const char *plt = "{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ","
                    "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\"],"
                    "\"per_layer_config\":{\"full_attention\":{\"head_dim\":128}}}";
  CHECKF(hf_config_parse(plt, strlen(plt), "config.json", &c, &err) == 0, "%s", err.msg);
  CHECK(c.layer[3].head_dim == 128 && c.layer[2].head_dim == 32 && c.layer[3].n_kv_heads == 2);
  /* no layer_types: every 6th layer full, and the last one forced full; default global_head_dim 512 */
  const char *def = "{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE "}";
  CHECKF(hf_config_parse(def, strlen(def), "config.json", &c, &err) == 0, "%s", err.msg);
  CHECK(c.layer[0].sliding && c.layer[2].sliding && !c.layer[3].sliding && c.layer[3].head_dim == 512);
  CHECK(c.rope_theta == 10000.0f && c.g4.rope_pairs_full == 64 && c.g4.sliding_window == 512);
  expect_error("{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"enable_moe_block\":true}", "enable_moe_block");
  expect_error("{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"layer_types\":[\"sliding_attention\"]}", "layer_types");
  expect_error("{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"layer_types\":[\"sliding_attention\",\"x\",\"full_attention\",\"full_attention\"]}", "layer_types[1]");
  /* shared layers 2, 3 need an earlier full layer: layers 0, 1 are sliding */
  expect_error("{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"num_kv_shared_layers\":2,"
               "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\",\"full_attention\"]}", "KV-shared layer 3");
  expect_error("{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"hidden_activation\":\"silu\"}", "hidden_activation");
  expect_error("{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\"},"
               "\"full_attention\":{\"rope_type\":\"yarn\"}}}", "full_attention.rope_type");
  expect_error("{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"per_layer_config\":{\"9\":{\"head_dim\":64}}}", "per_layer_config");
  /* a PLE table with fewer rows than the vocabulary would be read past its end by the gather */
  expect_error("{\"architectures\":[\"Gemma4ForCausalLM\"]," TC_BASE ",\"hidden_size_per_layer_input\":128,"
               "\"vocab_size_per_layer_input\":63}", "vocab_size_per_layer_input");
}

/* ---- a tiny checkpoint written here ---------------------------------------------------------- */

struct tens { char name[128]; int64_t rows, cols; int kind; }; /* kind: 0 matrix, 1 norm, 2 scalar */

static uint64_t g_rng = 88172645463325252ull;
static float nrand(void) {
  float u = 0;
  for (int i = 0; i < 4; i++) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    u += (float)(g_rng >> 40) / 16777216.0f;
  }
  return (u - 2.0f) * 1.7320508f;
}

/* Writes config.json and model.safetensors for `cfg` (a config.json text), naming tensors with `prefix`.
 * skip / extra: a tensor left out / an unused one added (NULL: none). */
static int write_checkpoint(const char *cfg, const char *prefix, const char *skip, const char *extra) {
  static struct hf_config c;
  struct hearth_err err = {0};
  if (hf_config_parse(cfg, strlen(cfg), "config.json", &c, &err)) { fprintf(stderr, "%s\n", err.msg); return -1; }
  write_file("config.json", cfg, strlen(cfg));
  static struct tens t[512];
  int n = 0;
  int64_t d = c.hidden_size, L = c.num_hidden_layers, S = c.g4.ple_dim, nq = c.num_attention_heads;
#define ADD(k, r, cc, ...) do { snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__); t[n].rows = r; t[n].cols = cc; t[n].kind = k; n++; } while (0)
  ADD(0, c.vocab_size, d, "%sembed_tokens.weight", prefix);
  ADD(1, d, 0, "%snorm.weight", prefix);
  if (S) {
    ADD(0, c.g4.ple_vocab, L * S, "%sembed_tokens_per_layer.weight", prefix);
    ADD(0, L * S, d, "%sper_layer_model_projection.weight", prefix);
    ADD(1, S, 0, "%sper_layer_projection_norm.weight", prefix);
  }
  for (int i = 0; i < L; i++) {
    const struct hf_layer *y = &c.layer[i];
    int64_t hd = y->head_dim, kvd = y->n_kv_heads * hd;
    ADD(1, d, 0, "%slayers.%d.input_layernorm.weight", prefix, i);
    ADD(0, nq * hd, d, "%slayers.%d.self_attn.q_proj.weight", prefix, i);
    ADD(1, hd, 0, "%slayers.%d.self_attn.q_norm.weight", prefix, i);
    if (y->kv_source == i) {
      ADD(0, kvd, d, "%slayers.%d.self_attn.k_proj.weight", prefix, i);
      ADD(1, hd, 0, "%slayers.%d.self_attn.k_norm.weight", prefix, i);
      if (!y->k_eq_v) ADD(0, kvd, d, "%slayers.%d.self_attn.v_proj.weight", prefix, i);
    }
    ADD(0, d, nq * hd, "%slayers.%d.self_attn.o_proj.weight", prefix, i);
    ADD(1, d, 0, "%slayers.%d.post_attention_layernorm.weight", prefix, i);
    ADD(1, d, 0, "%slayers.%d.pre_feedforward_layernorm.weight", prefix, i);
    ADD(1, d, 0, "%slayers.%d.post_feedforward_layernorm.weight", prefix, i);
    ADD(0, y->n_ff, d, "%slayers.%d.mlp.gate_proj.weight", prefix, i);
    ADD(0, y->n_ff, d, "%slayers.%d.mlp.up_proj.weight", prefix, i);
    ADD(0, d, y->n_ff, "%slayers.%d.mlp.down_proj.weight", prefix, i);
    ADD(2, 1, 0, "%slayers.%d.layer_scalar", prefix, i);
    if (S) {
      ADD(0, S, d, "%slayers.%d.per_layer_input_gate.weight", prefix, i);
      ADD(0, d, S, "%slayers.%d.per_layer_projection.weight", prefix, i);
      ADD(1, d, 0, "%slayers.%d.post_per_layer_input_norm.weight", prefix, i);
    }
  }
  if (extra) ADD(0, 8, d, "%s", extra);
#undef ADD
  size_t hcap = (size_t)n * 200 + 64, hl = 0;
  char *hdr = malloc(hcap);
  uint64_t off = 0;
  hl += (size_t)snprintf(hdr, hcap, "{");
  for (int i = 0; i < n; i++) {
    if (skip && !strcmp(t[i].name, skip)) continue;
    uint64_t bytes = (uint64_t)t[i].rows * (uint64_t)(t[i].cols ? t[i].cols : 1) * 2;
    if (t[i].cols)
      hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}",
                             hl > 1 ? "," : "", t[i].name, (long long)t[i].rows, (long long)t[i].cols,
                             (unsigned long long)off, (unsigned long long)(off + bytes));
    else
      hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}",
                             hl > 1 ? "," : "", t[i].name, (long long)t[i].rows, (unsigned long long)off,
                             (unsigned long long)(off + bytes));
    off += bytes;
  }
  hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
  while (hl % 8) hdr[hl++] = ' ';
  size_t total = 8 + hl + off;
  unsigned char *buf = malloc(total);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, hdr, hl);
  uint16_t *w = (uint16_t *)(buf + 8 + hl);
  g_rng = 88172645463325252ull; /* the same values for the same tensor list, whatever the prefix */
  for (int i = 0; i < n; i++) {
    if (skip && !strcmp(t[i].name, skip)) continue;
    int64_t cnt = t[i].rows * (t[i].cols ? t[i].cols : 1);
    float std = t[i].kind == 0 ? 1.0f / sqrtf((float)t[i].cols) : 0.1f;
    for (int64_t k = 0; k < cnt; k++)
      *w++ = f32_to_bf16(t[i].kind == 0 ? nrand() * std : (t[i].kind == 1 ? 1.0f : 0.9f) + nrand() * std);
  }
  write_file("model.safetensors", buf, total);
  free(buf);
  free(hdr);
  return 0;
}

static const char *k_e_cfg =
  "{\"architectures\":[\"Gemma4ForConditionalGeneration\"],\"model_type\":\"gemma4\",\"eos_token_id\":[1,106],"
  "\"text_config\":{\"model_type\":\"gemma4_text\",\"vocab_size\":96,\"hidden_size\":128,\"intermediate_size\":128,"
  "\"num_hidden_layers\":7,\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":32,\"global_head_dim\":64,"
  "\"sliding_window\":4,\"hidden_size_per_layer_input\":128,\"vocab_size_per_layer_input\":96,\"num_kv_shared_layers\":4,"
  "\"use_double_wide_mlp\":true,\"final_logit_softcapping\":30.0,\"eos_token_id\":1,\"bos_token_id\":2,"
  "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
  "\"sliding_attention\",\"full_attention\"]}}";

/* the same text config, text-only (Gemma4ForCausalLM, names under model.) */
static const char *k_e_text_cfg =
  "{\"architectures\":[\"Gemma4ForCausalLM\"],\"model_type\":\"gemma4_text\",\"vocab_size\":96,\"hidden_size\":128,"
  "\"intermediate_size\":128,\"num_hidden_layers\":7,\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":32,"
  "\"global_head_dim\":64,\"sliding_window\":4,\"hidden_size_per_layer_input\":128,\"vocab_size_per_layer_input\":96,"
  "\"num_kv_shared_layers\":4,\"use_double_wide_mlp\":true,\"final_logit_softcapping\":30.0,\"eos_token_id\":1,"
  "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
  "\"sliding_attention\",\"full_attention\"]}";

static const char *k_dense_cfg =
  "{\"architectures\":[\"Gemma4UnifiedForConditionalGeneration\"],\"model_type\":\"gemma4_unified\","
  "\"text_config\":{\"model_type\":\"gemma4_unified_text\",\"vocab_size\":96,\"hidden_size\":128,\"intermediate_size\":256,"
  "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"global_head_dim\":64,"
  "\"num_global_key_value_heads\":1,\"attention_k_eq_v\":true,\"sliding_window\":4,\"final_logit_softcapping\":30.0,"
  "\"use_bidirectional_attention\":\"vision\","
  "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\"]}}";

static struct hearth_model *load(enum hearth_dtype dt, struct hearth_err *err) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = g_dir;
  p.dtype = dt;
  p.n_threads = 2;
  p.kv_tokens = 256;
  struct hearth_model *m = NULL;
  if (hearth_model_load(&p, &m, err)) return NULL;
  return m;
}

static void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/hearth_test_gemma4_XXXXXX");
  if (!mkdtemp(g_dir)) fprintf(stderr, "mkdtemp failed\n");
}

static void remove_dir(void) {
  const char *names[] = {"config.json", "model.safetensors"};
  char p[512];
  for (int i = 0; i < 2; i++) { snprintf(p, sizeof p, "%s/%s", g_dir, names[i]); unlink(p); }
  rmdir(g_dir);
}

TEST_GROUP(bind) {
  make_dir();
  REQUIRE(write_checkpoint(k_e_cfg, "model.language_model.", NULL, NULL) == 0);
  struct hearth_err err = {0};
  enum hearth_dtype dts[3] = {HEARTH_DTYPE_F32, HEARTH_DTYPE_BF16, HEARTH_DTYPE_INT4};
  for (int k = 0; k < 3; k++) {
    struct hearth_model *m = load(dts[k], &err);
    CHECKF(m != NULL, "load: %s", err.msg);
    if (!m) continue;
    const struct hearth_model_info *mi = hearth_model_info(m);
    CHECK(mi->family == HEARTH_FAMILY_GEMMA4 && mi->n_layer == 7 && mi->n_vocab == 96);
    for (int i = 0; i < 7; i++) {
      int shared = i >= 3;
      CHECKF((m->kv.layers[i].k.data == NULL) == shared, "layer %d KV storage", i);
      CHECKF((m->w.layers[i].wk.data == NULL) == shared, "layer %d k_proj bound", i);
      CHECKF(m->w.layers[i].layer_scalar > 0.5f && m->w.layers[i].layer_scalar < 1.3f, "layer %d scalar %g", i, m->w.layers[i].layer_scalar);
    }
    CHECK(m->w.layers[3].w_gate.rows == 256 && m->w.layers[2].w_gate.rows == 128); /* double-wide on shared layers */
    CHECK(m->w.ple_embd.data != NULL);
    /* KV bytes: layers 0, 1 (sliding, 1 x 32) and 2 (full, 1 x 64) store K and V in f32 */
    CHECKF(mi->kv_bytes == (uint64_t)mi->kv_blocks * mi->kv_block_tokens * 2 * (32 + 32 + 64) * 4, "kv_bytes %llu", (unsigned long long)mi->kv_bytes);
    struct hearth_session *s = NULL;
    struct hearth_session_params sp = {0};
    REQUIRE(hearth_session_new(m, &sp, &s, &err) == 0);
    int32_t ids[6] = {2, 17, 5, 88, 40, 3};
    CHECKF(hearth_session_sync(s, ids, 6, &err) == 0, "%s", err.msg);
    const float *lg = hearth_session_logits(s);
    int finite = lg != NULL, capped = 1;
    for (int i = 0; finite && i < 96; i++) { finite = isfinite(lg[i]); capped &= fabsf(lg[i]) < 30.0f; }
    CHECK(finite && capped);
    hearth_session_free(s);
    hearth_model_free(m);
  }
  /* a stray k_proj on a KV-shared layer is ignored */
  REQUIRE(write_checkpoint(k_e_cfg, "model.language_model.", NULL, "model.language_model.layers.4.self_attn.k_proj.weight") == 0);
  struct hearth_model *m = load(HEARTH_DTYPE_F32, &err);
  CHECKF(m != NULL, "stray k_proj: %s", err.msg);
  hearth_model_free(m);
  /* missing tensors are named */
  REQUIRE(write_checkpoint(k_e_cfg, "model.language_model.", "model.language_model.layers.5.layer_scalar", NULL) == 0);
  CHECK(load(HEARTH_DTYPE_F32, &err) == NULL && strstr(err.msg, "layers.5.layer_scalar"));
  REQUIRE(write_checkpoint(k_e_cfg, "model.language_model.", "model.language_model.layers.1.self_attn.v_proj.weight", NULL) == 0);
  CHECK(load(HEARTH_DTYPE_F32, &err) == NULL && strstr(err.msg, "layers.1.self_attn.v_proj.weight"));
  /* K = V full layers have no v_proj, and need none */
  REQUIRE(write_checkpoint(k_dense_cfg, "model.language_model.", NULL, NULL) == 0);
  m = load(HEARTH_DTYPE_INT4, &err);
  CHECKF(m != NULL, "dense: %s", err.msg);
  if (m) CHECK(m->w.layers[1].wv.data == NULL && m->w.layers[0].wv.data != NULL && m->kv.layers[1].n_kv_heads == 1);
  hearth_model_free(m);
  remove_dir();
}

/* logits after: one prefill of all n tokens (a), and prefill of `first` tokens in chunks of 3 then one
 * token at a time (b); max |a - b| */
static double cached_vs_whole(struct hearth_model *m, const int32_t *ids, int n, int first, float *whole) {
  struct hearth_err err = {0};
  struct hearth_session *a = NULL, *b = NULL;
  struct hearth_session_params sp = {0};
  if (hearth_session_new(m, &sp, &a, &err) || hearth_session_new(m, &sp, &b, &err)) return 1e9;
  double worst = 1e9;
  if (hearth_session_sync(a, ids, n, &err)) goto out;
  int V = hearth_model_info(m)->n_vocab;
  memcpy(whole, hearth_session_logits(a), (size_t)V * sizeof(float));
  if (hearth_session_sync(b, ids, 3, &err)) goto out;
  for (int i = 3; i < first; i += 3)
    if (hearth_session_append(b, ids + i, i + 3 <= first ? 3 : first - i, &err)) goto out;
  for (int i = first; i < n; i++)
    if (hearth_session_append(b, ids + i, 1, &err)) goto out;
  const float *lb = hearth_session_logits(b);
  worst = 0;
  for (int i = 0; i < V; i++) if (fabs((double)whole[i] - lb[i]) > worst) worst = fabs((double)whole[i] - lb[i]);
out:
  if (worst >= 1e9) fprintf(stderr, "session: %s\n", err.msg);
  hearth_session_free(a);
  hearth_session_free(b);
  return worst;
}

TEST_GROUP(cached) {
  make_dir();
  int32_t ids[19] = {2, 17, 5, 88, 40, 3, 9, 9, 61, 12, 33, 70, 71, 1, 0, 95, 50, 18, 44};
  float whole[96], whole2[96];
  struct hearth_err err = {0};
  REQUIRE(write_checkpoint(k_e_cfg, "model.language_model.", NULL, NULL) == 0);
  struct hearth_model *m = load(HEARTH_DTYPE_F32, &err);
  REQUIRE(m != NULL);
  double d = cached_vs_whole(m, ids, 19, 9, whole);
  CHECKF(d < 1e-4, "E-style: cached vs whole-sequence logits differ by %g", d);
  hearth_model_free(m);
  /* the text-only layout of the same weights */
  REQUIRE(write_checkpoint(k_e_text_cfg, "model.", NULL, NULL) == 0);
  m = load(HEARTH_DTYPE_F32, &err);
  CHECKF(m != NULL, "text-only: %s", err.msg);
  if (m) {
    cached_vs_whole(m, ids, 19, 9, whole2);
    double w = 0;
    for (int i = 0; i < 96; i++) if (fabsf(whole[i] - whole2[i]) > w) w = fabsf(whole[i] - whole2[i]);
    CHECKF(w == 0, "text-only layout gives other logits (max diff %g)", w);
  }
  hearth_model_free(m);
  REQUIRE(write_checkpoint(k_dense_cfg, "model.language_model.", NULL, NULL) == 0);
  m = load(HEARTH_DTYPE_F32, &err);
  REQUIRE(m != NULL);
  d = cached_vs_whole(m, ids, 19, 6, whole);
  CHECKF(d < 1e-4, "dense: cached vs whole-sequence logits differ by %g", d);
  hearth_model_free(m);
  remove_dir();
}

/* The on-disk prefix store with per-layer KV widths (sliding 1 x 32, full 1 x 64, shared layers none): blocks
 * written by one load serve the next, with the logits of a fresh computation. */
TEST_GROUP(disk_cache) {
  make_dir();
  REQUIRE(write_checkpoint(k_e_cfg, "model.language_model.", NULL, NULL) == 0);
  char store[300], cmd[700];
  snprintf(store, sizeof store, "%s_kv", g_dir);
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = g_dir;
  p.dtype = HEARTH_DTYPE_F32;
  p.n_threads = 2;
  p.kv_tokens = 256;
  p.kv_cache_dir = store;
  int32_t t[40];
  for (int i = 0; i < 40; i++) t[i] = (i * 37 + 11) % 96;
  float want[96];
  struct hearth_err err = {0};
  struct hearth_model *m = NULL;
  struct hearth_session *s = NULL;
  REQUIRE(hearth_model_load(&p, &m, &err) == 0);
  REQUIRE(hearth_session_new(m, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 40, &err) == 0);
  memcpy(want, hearth_session_logits(s), sizeof want);
  hearth_session_free(s);
  hearth_model_free(m);
  m = NULL;
  REQUIRE(hearth_model_load(&p, &m, &err) == 0);
  REQUIRE(hearth_session_new(m, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 40, &err) == 0);
  CHECKF(hearth_session_n_reused(s) == 32, "reused %d of 40 tokens (2 blocks of 16 expected)", hearth_session_n_reused(s));
  double d = 0;
  for (int i = 0; i < 96; i++) if (fabs((double)hearth_session_logits(s)[i] - want[i]) > d) d = fabs((double)hearth_session_logits(s)[i] - want[i]);
  CHECKF(d < 1e-4, "logits from disk blocks differ by %g", d);
  hearth_session_free(s);
  hearth_model_free(m);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", store);
  CHECK(system(cmd) == 0);
  remove_dir();
}

#include "ring_cases.h"

static const char *fixture_e(char *buf, size_t n) {
  snprintf(buf, n, "%s/tests/fixtures/model/gemma4_e", HEARTH_SOURCE_DIR);
  return buf;
}

/* The sliding-window ring (runtime/kv_ring.h; the fixture's window is 8 keys, blocks are 16 tokens) gives what
 * keeping every position gives, bit for bit: ring_cases.h's script with a sliding pool as large as the main one
 * (kv_seqs 0) and a small one (kv_seqs 1), f32 and int4. */
TEST_GROUP(ring) {
  char dir[512];
  fixture_e(dir, sizeof dir);
  ring_vs_keep(dir, HEARTH_BACKEND_CPU, HEARTH_DTYPE_F32, 0, 1);
  ring_vs_keep(dir, HEARTH_BACKEND_CPU, HEARTH_DTYPE_F32, 1, 1);
  ring_vs_keep(dir, HEARTH_BACKEND_CPU, HEARTH_DTYPE_INT4, 1, 1);
}

/* blocks go back: a 1,000-token session in a 38-block sliding pool (ring_cases.h) */
TEST_GROUP(ring_small_pool) {
  char dir[512];
  fixture_e(dir, sizeof dir);
  ring_small_pool_case(dir, HEARTH_BACKEND_CPU, HEARTH_DTYPE_F32);
}

/* The memory a long context takes: the sliding layers' pool of a one-session model is a few windows, not the
 * context (E-style fixture: layers 0, 1 sliding 1 x 32 wide, layer 2 full 1 x 64; f32 K and V). */
TEST_GROUP(ring_memory) {
  char dir[512];
  fixture_e(dir, sizeof dir);
  struct hearth_err err = {0};
  struct hearth_model *keep = ring_load(dir, HEARTH_BACKEND_CPU, HEARTH_DTYPE_F32, 32768, -1, NULL, &err);
  struct hearth_model *ring = ring_load(dir, HEARTH_BACKEND_CPU, HEARTH_DTYPE_F32, 32768, 1, NULL, &err);
  REQUIRE(keep && ring);
  const uint64_t tok = 32768, full = 2 * 64 * 4, sl = 2 * (32 + 32) * 4;
  CHECKF(hearth_model_info(keep)->kv_bytes == tok * (full + sl), "keep everything: %llu B",
         (unsigned long long)hearth_model_info(keep)->kv_bytes);
  CHECKF(hearth_model_info(ring)->kv_bytes == tok * full + 38ull * 16 * sl, "ring: %llu B",
         (unsigned long long)hearth_model_info(ring)->kv_bytes);
  hearth_model_free(keep);
  hearth_model_free(ring);
}

/* the disk store's version 3 round trip (ring_cases.h) */
TEST_GROUP(ring_disk) {
  char dir[512];
  fixture_e(dir, sizeof dir);
  ring_disk_case(dir, HEARTH_BACKEND_CPU, HEARTH_DTYPE_F32);
  ring_disk_long_case(dir, HEARTH_BACKEND_CPU, HEARTH_DTYPE_F32);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmisleading-indentation"
#endif
TEST_MAIN(T(real_configs), T(config_forms), T(bind), T(cached), T(disk_cache), T(ring), T(ring_small_pool), T(ring_memory),
          T(ring_disk))
