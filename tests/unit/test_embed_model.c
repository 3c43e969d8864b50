/* tests/unit/test_embed_model.c — checkpoints that are embedding models although config.json names
 * a causal LM: loaded with hearth_model_params.embedding (what `serve --embedding-model` sets) or
 * told by a sentence-transformers modules.json + 1_Pooling/config.json, and their pooling modes.
 *
 * The checkpoints are made here, at test time, from the committed qwen3emb oracle fixture
 * (Qwen3ForCausalLM, tied, tensors named without "model." as Qwen3-Embedding publishes them): the
 * same tensors renamed with the "model." prefix, as fine-tuned Qwen3 embedders are often saved.
 * Their embeddings must equal, bit for bit, those of the plain embedding path on the original. */
#include <jansson.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hearth.h"
#include "test.h"

#define FIXTURE HEARTH_SOURCE_DIR "/tests/fixtures/model/qwen3emb"

static char g_dir[64]; /* the renamed checkpoint */

static void write_text(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, rel);
  FILE *f = fopen(p, "wb");
  if (!f) { perror(p); abort(); }
  fputs(text, f);
  fclose(f);
}

static void remove_rel(const char *rel) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, rel);
  unlink(p);
}

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* g_dir = a new directory holding FIXTURE's config.json and its safetensors with every tensor
 * renamed "model.<name>" (data bytes unchanged); 0 on success */
static int make_prefixed(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/hearth-embed-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  size_t n, cn;
  unsigned char *st = slurp(FIXTURE "/model.safetensors", &n);
  unsigned char *cfg = slurp(FIXTURE "/config.json", &cn);
  if (!st || !cfg || n < 8) { free(st); free(cfg); return -1; }
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)st[i] << (8 * i);
  json_error_t je;
  json_t *h = json_loadb((const char *)st + 8, (size_t)hl, 0, &je), *renamed = json_object();
  const char *key;
  json_t *v;
  json_object_foreach(h, key, v) {
    char name[256];
    snprintf(name, sizeof name, "%s%s", strcmp(key, "__metadata__") ? "model." : "", key);
    json_object_set(renamed, name, v);
  }
  char *text = json_dumps(renamed, JSON_COMPACT);
  size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
  char p[512];
  snprintf(p, sizeof p, "%s/model.safetensors", g_dir);
  FILE *f = fopen(p, "wb");
  int rc = f ? 0 : -1;
  if (f) {
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    fwrite(lenb, 1, 8, f);
    fwrite(text, 1, tl, f);
    for (size_t i = tl; i < padded; i++) fputc(' ', f);
    fwrite(st + 8 + hl, 1, n - 8 - (size_t)hl, f);
    rc = fclose(f) ? -1 : 0;
  }
  snprintf(p, sizeof p, "%s/config.json", g_dir);
  f = fopen(p, "wb");
  if (!f || fwrite(cfg, 1, cn, f) != cn) rc = -1;
  if (f && fclose(f)) rc = -1;
  free(text);
  json_decref(h);
  json_decref(renamed);
  free(st);
  free(cfg);
  return rc;
}

static void cleanup(void) {
  const char *files[] = {"model.safetensors", "config.json", "modules.json", "1_Pooling/config.json"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) remove_rel(files[i]);
  char p[512];
  snprintf(p, sizeof p, "%s/1_Pooling", g_dir);
  rmdir(p);
  rmdir(g_dir);
}

static struct hearth_model *load(const char *path, enum hearth_dtype dtype, int embedding, struct hearth_err *err) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = path;
  p.dtype = dtype;
  p.n_threads = 2;
  p.kv_tokens = 256;
  p.embedding = embedding;
  struct hearth_model *m = NULL;
  memset(err, 0, sizeof *err);
  if (hearth_model_load(&p, &m, err)) return NULL;
  return m;
}

enum { D_MAX = 128, N_TOK = 7 };
static const int32_t TOKENS[N_TOK] = {17, 301, 5, 250, 88, 123, 398};

/* embeds tokens[0..n) on a fresh session of m into out[0..d) */
static int embed(struct hearth_model *m, const int32_t *tokens, int n, float *out) {
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  int rc = hearth_session_new(m, NULL, &s, &err);
  if (!rc) rc = hearth_session_embed(s, tokens, n, out, &err);
  if (rc) fprintf(stderr, "embed: %s\n", err.msg);
  hearth_session_free(s);
  return rc;
}

/* the prefixed checkpoint loaded with `embedding` embeds exactly as FIXTURE does on the plain path */
static void expect_same_as_plain(enum hearth_dtype dtype, int embedding) {
  struct hearth_err err;
  struct hearth_model *ref = load(FIXTURE, dtype, 0, &err), *m = load(g_dir, dtype, embedding, &err);
  CHECKF(m != NULL, "load %s: %s", g_dir, err.msg);
  REQUIRE(ref && m);
  REQUIRE(hearth_model_info(ref)->is_embedding); /* the plain path: bare names, no head */
  CHECK(hearth_model_info(m)->is_embedding);
  CHECK(hearth_model_info(m)->pooling == HEARTH_POOL_LAST);
  CHECK(!strcmp(hearth_model_info(m)->arch, "Qwen3ForCausalLM"));
  int d = hearth_model_info(m)->n_embd;
  CHECK(d == hearth_model_info(ref)->n_embd && d <= D_MAX);
  for (int n = 1; n <= N_TOK && d <= D_MAX; n += 3) {
    float a[D_MAX], b[D_MAX];
    CHECK(embed(ref, TOKENS, n, a) == 0 && embed(m, TOKENS, n, b) == 0);
    CHECKF(!memcmp(a, b, (size_t)d * sizeof *a), "dtype %d, %d tokens: the embeddings differ", (int)dtype, n);
  }
  hearth_model_free(m);
  hearth_model_free(ref);
}

TEST_GROUP(causal_named) {
  REQUIRE(make_prefixed() == 0);
  struct hearth_err err;
  /* without the flag, this checkpoint looks like a tied causal LM: what `--model` serves */
  struct hearth_model *m = load(g_dir, HEARTH_DTYPE_INT4, 0, &err);
  CHECKF(m != NULL, "load: %s", err.msg);
  if (m) CHECK(!hearth_model_info(m)->is_embedding);
  hearth_model_free(m);
  expect_same_as_plain(HEARTH_DTYPE_INT4, 1);
  expect_same_as_plain(HEARTH_DTYPE_F32, 1);
  cleanup();
}

static void write_st(const char *pooling_json) {
  char p[512];
  snprintf(p, sizeof p, "%s/1_Pooling", g_dir);
  mkdir(p, 0755);
  write_text("modules.json",
             "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},\n"
             " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"},\n"
             " {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", \"type\": \"sentence_transformers.models.Normalize\"}]\n");
  write_text("1_Pooling/config.json", pooling_json);
}

#define POOL_JSON(cls, mean, last) \
  "{\"word_embedding_dimension\": 128, \"pooling_mode_cls_token\": " cls ", \"pooling_mode_mean_tokens\": " mean \
  ", \"pooling_mode_max_tokens\": false, \"pooling_mode_mean_sqrt_len_tokens\": false, " \
  "\"pooling_mode_weightedmean_tokens\": false, \"pooling_mode_lasttoken\": " last ", \"include_prompt\": true}"

static double dot(const float *a, const float *b, int d) {
  double s = 0;
  for (int i = 0; i < d; i++) s += (double)a[i] * b[i];
  return s;
}

/* Mean pooling over a causal model: position t's hidden state is the last-token state of the
 * prefix tokens[0..t], so the mean-pooled vector must lie in the cone of the (normalised) prefix
 * embeddings e_t: solve the least squares m ~ sum c_t e_t and require a ~zero residual, c_t > 0. */
static void check_mean(struct hearth_model *ref, const float *mean, int n, int d) {
  static float e[N_TOK][D_MAX];
  for (int t = 0; t < n; t++) CHECK(embed(ref, TOKENS, t + 1, e[t]) == 0);
  double G[N_TOK][N_TOK + 1];
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < n; j++) G[i][j] = dot(e[i], e[j], d);
    G[i][n] = dot(e[i], mean, d);
  }
  for (int k = 0; k < n; k++) /* Gauss-Jordan; the Gram matrix of independent vectors needs no pivoting */
    for (int i = 0; i < n; i++) {
      if (i == k) continue;
      double f = G[i][k] / G[k][k];
      for (int j = k; j <= n; j++) G[i][j] -= f * G[k][j];
    }
  double r2 = 0;
  for (int i = 0; i < d; i++) {
    double v = mean[i];
    for (int t = 0; t < n; t++) v -= G[t][n] / G[t][t] * e[t][i];
    r2 += v * v;
  }
  for (int t = 0; t < n; t++) CHECKF(G[t][n] / G[t][t] > 0, "coefficient %d = %g", t, G[t][n] / G[t][t]);
  CHECKF(sqrt(r2) < 1e-4, "mean-pooled vector is %g away from the span of the prefix embeddings", sqrt(r2));
  double far = 0; /* and it is not the last token's */
  for (int i = 0; i < d; i++) far += (mean[i] - e[n - 1][i]) * (mean[i] - e[n - 1][i]);
  CHECKF(sqrt(far) > 1e-3, "mean pooling returned the last token's embedding");
}

TEST_GROUP(sentence_transformers) {
  REQUIRE(make_prefixed() == 0);
  /* lasttoken: detected without the flag, exactly the plain path */
  write_st(POOL_JSON("false", "false", "true"));
  expect_same_as_plain(HEARTH_DTYPE_INT4, 0);
  struct hearth_err err;
  struct hearth_model *ref = load(FIXTURE, HEARTH_DTYPE_F32, 0, &err);
  REQUIRE(ref != NULL);
  int d = hearth_model_info(ref)->n_embd;
  float got[D_MAX], want[D_MAX];
  /* cls: the first token's state, i.e. the plain embedding of the first token alone */
  write_st(POOL_JSON("true", "false", "false"));
  struct hearth_model *m = load(g_dir, HEARTH_DTYPE_F32, 0, &err);
  CHECKF(m != NULL, "cls: %s", err.msg);
  if (m) {
    CHECK(hearth_model_info(m)->is_embedding && hearth_model_info(m)->pooling == HEARTH_POOL_CLS);
    CHECK(embed(m, TOKENS, N_TOK, got) == 0 && embed(ref, TOKENS, 1, want) == 0);
    CHECK(!memcmp(got, want, (size_t)d * sizeof *got));
  }
  hearth_model_free(m);
  /* mean, in the string form newer sentence-transformers write */
  write_st("{\"word_embedding_dimension\": 128, \"pooling_mode\": \"mean\"}");
  m = load(g_dir, HEARTH_DTYPE_F32, 0, &err);
  CHECKF(m != NULL, "mean: %s", err.msg);
  if (m) {
    CHECK(hearth_model_info(m)->is_embedding && hearth_model_info(m)->pooling == HEARTH_POOL_MEAN);
    CHECK(embed(m, TOKENS, 1, got) == 0 && embed(ref, TOKENS, 1, want) == 0);
    CHECK(!memcmp(got, want, (size_t)d * sizeof *got)); /* one token: the mean is that token */
    CHECK(embed(m, TOKENS, 4, got) == 0);
    CHECK(fabs(dot(got, got, d) - 1) < 1e-5);
    check_mean(ref, got, 4, d);
  }
  hearth_model_free(m);
  hearth_model_free(ref);
  cleanup();
}

/* loading g_dir fails with code and a message holding needle */
static void expect_refused(const char *what, int code, const char *needle) {
  struct hearth_err err;
  struct hearth_model *m = load(g_dir, HEARTH_DTYPE_INT4, 0, &err);
  CHECKF(m == NULL, "%s: loaded", what);
  CHECKF(err.code == code, "%s: code %d, want %d (%s)", what, err.code, code, err.msg);
  CHECKF(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err.msg);
  hearth_model_free(m);
}

TEST_GROUP(sentence_transformers_errors) {
  REQUIRE(make_prefixed() == 0);
  write_st(POOL_JSON("false", "false", "false"));
  write_text("1_Pooling/config.json", "{\"pooling_mode_max_tokens\": true}");
  expect_refused("max pooling", HEARTH_ERR_UNSUPPORTED, "pooling_mode_max_tokens");
  write_st(POOL_JSON("true", "true", "false"));
  expect_refused("two modes", HEARTH_ERR_UNSUPPORTED, "several modes");
  write_st(POOL_JSON("false", "false", "false"));
  expect_refused("no mode", HEARTH_ERR_UNSUPPORTED, "no mode");
  write_st("{\"pooling_mode\": \"mean\", \"include_prompt\": false}");
  expect_refused("mean without the prompt", HEARTH_ERR_UNSUPPORTED, "include_prompt");
  write_st("{\"pooling_mode_lasttoken\": true, \"word_embedding_dimension\": 64}");
  expect_refused("dimension", HEARTH_ERR_FORMAT, "word_embedding_dimension 64");
  write_st("{\"pooling_mode_lasttoken\": tru");
  expect_refused("bad JSON", HEARTH_ERR_FORMAT, "1_Pooling/config.json");
  remove_rel("1_Pooling/config.json");
  expect_refused("missing pooling config", HEARTH_ERR_FORMAT, "is missing");
  write_text("modules.json", "[{\"type\": \"sentence_transformers.models.Transformer\", \"path\": \"\"},"
                             " {\"type\": \"sentence_transformers.models.Pooling\", \"path\": \"../1_Pooling\"}]");
  expect_refused("pooling path outside the model", HEARTH_ERR_FORMAT, "folder name");
  write_st(POOL_JSON("false", "false", "true"));
  write_text("modules.json", "[{\"type\": \"sentence_transformers.models.Transformer\", \"path\": \"\"},"
                             " {\"type\": \"sentence_transformers.models.Pooling\", \"path\": \"1_Pooling\"},"
                             " {\"type\": \"sentence_transformers.models.Dense\", \"path\": \"2_Dense\"}]");
  expect_refused("a Dense module", HEARTH_ERR_UNSUPPORTED, "sentence_transformers.models.Dense");
  write_text("modules.json", "{\"not\": \"a list\"}");
  expect_refused("modules.json not a list", HEARTH_ERR_FORMAT, "modules.json");
  /* a modules.json without a Pooling module says nothing: the checkpoint stays a causal LM */
  write_text("modules.json", "[{\"type\": \"sentence_transformers.models.Transformer\", \"path\": \"\"}]");
  struct hearth_err err;
  struct hearth_model *m = load(g_dir, HEARTH_DTYPE_INT4, 0, &err);
  CHECKF(m != NULL, "no Pooling module: %s", err.msg);
  if (m) CHECK(!hearth_model_info(m)->is_embedding);
  hearth_model_free(m);
  cleanup();
}

TEST_MAIN(T(causal_named), T(sentence_transformers), T(sentence_transformers_errors))
