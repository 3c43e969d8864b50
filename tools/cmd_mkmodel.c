/* tools/cmd_mkmodel.c — `hearth mkmodel`: a random-weight bf16 checkpoint of any supported config,
 * with the tensor names and shapes the Hub uses, so full-size models can be benchmarked without
 * downloads (random weights cost exactly the same work as real ones). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "base/half.h"
#include "commands.h"
#include "load/hf_config.h"

struct mk_tensor {
  char name[160];
  int64_t rows, cols; /* cols = 0 for vectors */
  int kind;           /* 0 matrix, 1 norm weight (~1), 2 bias */
};

static int add(struct mk_tensor **v, int *n, int *cap, const char *name, int64_t rows, int64_t cols, int kind) {
  if (*n == *cap) {
    *cap = *cap ? *cap * 2 : 64;
    struct mk_tensor *g = realloc(*v, (size_t)*cap * sizeof *g);
    if (!g) return -1;
    *v = g;
  }
  struct mk_tensor *t = &(*v)[(*n)++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->rows = rows;
  t->cols = cols;
  t->kind = kind;
  return 0;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
  return *s;
}

/* Approximately normal(0, std) from the sum of four uniforms (cheap; shape is what matters). */
static float rng_normalish(uint64_t *s, float std) {
  uint64_t r = rng_next(s);
  float u = 0;
  for (int i = 0; i < 4; i++) u += (float)((r >> (16 * i)) & 0xffff) / 65535.0f;
  return (u - 2.0f) * 1.7320508f * std;
}

/* Gemma 4's text tensors (models.md §3.4): per-layer head dims and MLP widths, no k/v on KV-shared layers,
 * no v_proj on K = V full layers, sandwich norms, layer_scalar, PLE when configured. Multimodal
 * architectures nest them under model.language_model. (no vision/audio tensors: hearth never reads them). */
static int add_gemma4(struct mk_tensor **ts, int *n, int *cap, const struct hf_config *c) {
  const char *pre = strstr(c->arch, "ConditionalGeneration") || !strcmp(c->arch, "gemma4") || !strcmp(c->arch, "gemma4_unified")
                        ? "model.language_model." : "model.";
  int64_t d = c->hidden_size, nq = c->num_attention_heads, L = c->num_hidden_layers, S = c->g4.ple_dim;
  char name[160];
#define G(kind, r, cc, ...) do { snprintf(name, sizeof name, __VA_ARGS__); if (add(ts, n, cap, name, r, cc, kind)) return -1; } while (0)
  G(0, c->vocab_size, d, "%sembed_tokens.weight", pre);
  G(1, d, 0, "%snorm.weight", pre);
  if (S) {
    G(0, c->g4.ple_vocab, L * S, "%sembed_tokens_per_layer.weight", pre);
    G(0, L * S, d, "%sper_layer_model_projection.weight", pre);
    G(1, S, 0, "%sper_layer_projection_norm.weight", pre);
  }
  for (int l = 0; l < L; l++) {
    const struct hf_layer *y = &c->layer[l];
    int64_t hd = y->head_dim, kvd = (int64_t)y->n_kv_heads * hd, ff = y->n_ff;
    G(1, d, 0, "%slayers.%d.input_layernorm.weight", pre, l);
    G(0, nq * hd, d, "%slayers.%d.self_attn.q_proj.weight", pre, l);
    G(1, hd, 0, "%slayers.%d.self_attn.q_norm.weight", pre, l);
    if (y->kv_source == l) {
      G(0, kvd, d, "%slayers.%d.self_attn.k_proj.weight", pre, l);
      G(1, hd, 0, "%slayers.%d.self_attn.k_norm.weight", pre, l);
      if (!y->k_eq_v) G(0, kvd, d, "%slayers.%d.self_attn.v_proj.weight", pre, l);
    }
    G(0, d, nq * hd, "%slayers.%d.self_attn.o_proj.weight", pre, l);
    G(1, d, 0, "%slayers.%d.post_attention_layernorm.weight", pre, l);
    G(1, d, 0, "%slayers.%d.pre_feedforward_layernorm.weight", pre, l);
    G(1, d, 0, "%slayers.%d.post_feedforward_layernorm.weight", pre, l);
    G(0, ff, d, "%slayers.%d.mlp.gate_proj.weight", pre, l);
    G(0, ff, d, "%slayers.%d.mlp.up_proj.weight", pre, l);
    G(0, d, ff, "%slayers.%d.mlp.down_proj.weight", pre, l);
    G(1, 1, 0, "%slayers.%d.layer_scalar", pre, l);
    if (S) {
      G(0, S, d, "%slayers.%d.per_layer_input_gate.weight", pre, l);
      G(0, d, S, "%slayers.%d.per_layer_projection.weight", pre, l);
      G(1, d, 0, "%slayers.%d.post_per_layer_input_norm.weight", pre, l);
    }
  }
#undef G
  return 0;
}

int cmd_mkmodel(int argc, char **argv) {
  const char *config = NULL, *outdir = NULL;
  long seed = 1;
  int embedding = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config")) { if (!(config = arg_value(argc, argv, &i))) return 2; }
    else if (!strcmp(argv[i], "--out")) { if (!(outdir = arg_value(argc, argv, &i))) return 2; }
    else if (!strcmp(argv[i], "--seed")) { const char *v; if (!(v = arg_value(argc, argv, &i)) || arg_int("--seed", v, 0, 0x7fffffffL, &seed)) return 2; }
    else if (!strcmp(argv[i], "--embedding")) embedding = 1;
    else { fprintf(stderr, "usage: hearth mkmodel --config CONFIG.json --out DIR [--seed N] [--embedding]\n"); return 2; }
  }
  if (!config || !outdir) { fprintf(stderr, "usage: hearth mkmodel --config CONFIG.json --out DIR [--seed N] [--embedding]\n"); return 2; }
  FILE *f = fopen(config, "rb");
  if (!f) { fprintf(stderr, "hearth mkmodel: cannot read %s\n", config); return 1; }
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 > cap) { cap = cap ? cap * 2 : 65536; char *g = realloc(text, cap); if (!g) { free(text); fclose(f); return 1; } text = g; }
    size_t r = fread(text + len, 1, cap - len, f);
    len += r;
    if (!r) break;
  }
  fclose(f);
  struct hf_config c;
  struct hearth_err err = {0};
  if (hf_config_parse(text, len, config, &c, &err)) { fprintf(stderr, "hearth mkmodel: %s\n", err.msg); free(text); return 1; }
  const char *pre = embedding ? "" : "model.";
  struct mk_tensor *ts = NULL;
  int n = 0, tcap = 0;
  char name[160];
  int64_t d = c.hidden_size, qd = (int64_t)c.num_attention_heads * c.head_dim, kvd = (int64_t)c.num_key_value_heads * c.head_dim, ff = c.intermediate_size;
  int qwen3 = c.family == HEARTH_FAMILY_QWEN3, bias = c.family == HEARTH_FAMILY_QWEN2 || c.attention_bias;
  if (c.family == HEARTH_FAMILY_GEMMA4) {
    if (add_gemma4(&ts, &n, &tcap, &c)) goto oom;
    goto write;
  }
  snprintf(name, sizeof name, "%sembed_tokens.weight", pre); add(&ts, &n, &tcap, name, c.vocab_size, d, 0);
  for (int l = 0; l < c.num_hidden_layers; l++) {
#define T(suffix, r, cc, k) do { snprintf(name, sizeof name, "%slayers.%d.%s", pre, l, suffix); if (add(&ts, &n, &tcap, name, r, cc, k)) goto oom; } while (0)
    T("input_layernorm.weight", d, 0, 1);
    T("self_attn.q_proj.weight", qd, d, 0);
    T("self_attn.k_proj.weight", kvd, d, 0);
    T("self_attn.v_proj.weight", kvd, d, 0);
    T("self_attn.o_proj.weight", d, qd, 0);
    if (bias) { T("self_attn.q_proj.bias", qd, 0, 2); T("self_attn.k_proj.bias", kvd, 0, 2); T("self_attn.v_proj.bias", kvd, 0, 2); }
    if (qwen3) { T("self_attn.q_norm.weight", c.head_dim, 0, 1); T("self_attn.k_norm.weight", c.head_dim, 0, 1); }
    T("post_attention_layernorm.weight", d, 0, 1);
    T("mlp.gate_proj.weight", ff, d, 0);
    T("mlp.up_proj.weight", ff, d, 0);
    T("mlp.down_proj.weight", d, ff, 0);
#undef T
  }
  snprintf(name, sizeof name, "%snorm.weight", pre); add(&ts, &n, &tcap, name, d, 0, 1);
  if (!c.tie_word_embeddings && !embedding) add(&ts, &n, &tcap, "lm_head.weight", c.vocab_size, d, 0);
write:

  if (mkdir(outdir, 0755) && errno != EEXIST) { fprintf(stderr, "hearth mkmodel: cannot create %s: %s\n", outdir, strerror(errno)); goto fail; }
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", outdir);
  FILE *cf = fopen(path, "wb");
  if (!cf || fwrite(text, 1, len, cf) != len) { fprintf(stderr, "hearth mkmodel: cannot write %s\n", path); if (cf) fclose(cf); goto fail; }
  fclose(cf);
  /* header */
  size_t hcap = (size_t)n * 200 + 64, hl = 0;
  char *hdr = malloc(hcap);
  if (!hdr) goto oom;
  hl += (size_t)snprintf(hdr + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    uint64_t bytes = (uint64_t)ts[i].rows * (uint64_t)(ts[i].cols ? ts[i].cols : 1) * 2;
    if (ts[i].cols)
      hl += (size_t)snprintf(hdr + hl, hcap - hl, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}", ts[i].name,
                             (long long)ts[i].rows, (long long)ts[i].cols, (unsigned long long)off, (unsigned long long)(off + bytes));
    else
      hl += (size_t)snprintf(hdr + hl, hcap - hl, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}", ts[i].name,
                             (long long)ts[i].rows, (unsigned long long)off, (unsigned long long)(off + bytes));
    off += bytes;
  }
  hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
  while (hl % 8) hdr[hl++] = ' ';
  snprintf(path, sizeof path, "%s/model.safetensors", outdir);
  FILE *sf = fopen(path, "wb");
  if (!sf) { fprintf(stderr, "hearth mkmodel: cannot write %s\n", path); free(hdr); goto fail; }
  unsigned char lenb[8];
  for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(((uint64_t)hl >> (8 * i)) & 0xff);
  int ok = fwrite(lenb, 1, 8, sf) == 8 && fwrite(hdr, 1, hl, sf) == hl;
  free(hdr);
  uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)seed * 0x2545f4914f6cdd1dull;
  if (!s) s = 1;
  enum { CHUNK = 1 << 16 };
  uint16_t *buf = malloc(CHUNK * sizeof *buf);
  if (!buf) { fclose(sf); goto oom; }
  for (int i = 0; ok && i < n; i++) {
    uint64_t cnt = (uint64_t)ts[i].rows * (uint64_t)(ts[i].cols ? ts[i].cols : 1);
    /* std 1/sqrt(fan_in) keeps activations O(1) through the stack, so outputs vary */
    float std = ts[i].kind == 0 ? 1.0f / sqrtf((float)ts[i].cols) : ts[i].kind == 1 ? 0.1f : 0.02f;
    for (uint64_t k = 0; ok && k < cnt; k += CHUNK) {
      uint64_t m = cnt - k < CHUNK ? cnt - k : CHUNK;
      for (uint64_t j = 0; j < m; j++) buf[j] = f32_to_bf16((ts[i].kind == 1 ? 1.0f : 0.0f) + rng_normalish(&s, std));
      ok = fwrite(buf, 2, m, sf) == m;
    }
  }
  free(buf);
  if (fclose(sf) || !ok) { fprintf(stderr, "hearth mkmodel: write failed for %s\n", path); goto fail; }
  fprintf(stderr, "hearth mkmodel: wrote %s (%d tensors, %.1f MiB)\n", outdir, n, (double)off / 1048576.0);
  free(ts);
  free(text);
  return 0;
oom:
  fprintf(stderr, "hearth mkmodel: out of memory\n");
fail:
  free(ts);
  free(text);
  return 1;
}
