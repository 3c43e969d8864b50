/* tests/unit/test_embed_batch.c — hearth_embed_batch: many inputs packed into few forward passes give
 * every input the embedding, bit for bit, that hearth_session_embed gives it alone (issue 31 item 4).
 *
 * Model: the committed qwen3emb oracle fixture (Qwen3, hidden 128, 2 layers, vocabulary 400), int4 on
 * the CPU backend with its SIMD kernels (the server's path), or on CUDA (TEST_BACKEND below). Pooling modes other than the default
 * last token come from a sentence-transformers modules.json written beside links to the fixture. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hearth.h"
#include "test.h"

/* tests/cuda builds this file again as test_cuda_embed_batch with TEST_BACKEND=HEARTH_BACKEND_CUDA
 * (label cuda): the same bit-for-bit claims asked of the CUDA backend */
#ifndef TEST_BACKEND
#define TEST_BACKEND HEARTH_BACKEND_CPU
#endif

#define FIXTURE HEARTH_SOURCE_DIR "/tests/fixtures/model/qwen3emb"
#define CAUSAL HEARTH_SOURCE_DIR "/tests/fixtures/model/qwen3"

enum { N = 2048, LMAX = 800, D_MAX = 128, PASS = 512 /* model_load.c's tokens per forward pass */ };

static int32_t g_tok[N][LMAX];
static int g_len[N];

/* 2,048 inputs of 1..300 tokens in a scrambled order, and five longer than one pass (600..800) */
static void make_inputs(void) {
  if (g_len[0]) return;
  for (int i = 0; i < N; i++) {
    g_len[i] = 1 + (int)(((unsigned)i * 2654435761u) >> 7) % 300;
    if (i % 500 == 3) g_len[i] = 600 + 100 * (i / 1000);
    for (int t = 0; t < g_len[i]; t++) g_tok[i][t] = (int32_t)(((unsigned)i * 131u + (unsigned)t * 17u + (unsigned)(t * t)) % 400u);
  }
}

static struct hearth_model *load(const char *path, int kv_tokens) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = path;
  p.backend = TEST_BACKEND;
  p.n_threads = 2;
  p.kv_tokens = kv_tokens;
  struct hearth_model *m = NULL;
  struct hearth_err err = {0};
  if (hearth_model_load(&p, &m, &err)) fprintf(stderr, "load %s: %s\n", path, err.msg);
  return m;
}

/* out[i * d] = hearth_session_embed of input idx[i] alone, on one session */
static int embed_alone(struct hearth_model *m, const int *idx, int n, float *out) {
  const int d = hearth_model_info(m)->n_embd;
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  int rc = hearth_session_new(m, NULL, &s, &err);
  for (int i = 0; !rc && i < n; i++) rc = hearth_session_embed(s, g_tok[idx[i]], g_len[idx[i]], out + (size_t)i * d, &err);
  if (rc) fprintf(stderr, "embed alone: %s\n", err.msg);
  hearth_session_free(s);
  return rc;
}

static int embed_batch(struct hearth_model *m, const int *idx, int n, float *out, struct hearth_embed_stats *st) {
  const int32_t **t = malloc((size_t)n * sizeof *t);
  int *l = malloc((size_t)n * sizeof *l);
  for (int i = 0; i < n; i++) {
    t[i] = g_tok[idx[i]];
    l[i] = g_len[idx[i]];
  }
  struct hearth_err err = {0};
  int rc = hearth_embed_batch(m, t, l, n, out, NULL, NULL, st, &err);
  if (rc) fprintf(stderr, "embed batch: %s\n", err.msg);
  free(t);
  free(l);
  return rc;
}

/* rows of a and b that differ in any bit */
static int n_differ(const float *a, const float *b, int n, int d) {
  int bad = 0;
  for (int i = 0; i < n; i++) bad += memcmp(a + (size_t)i * d, b + (size_t)i * d, (size_t)d * sizeof *a) != 0;
  return bad;
}

/* alone, all 2,048 in one call, and a subset in another order: the same bits; the call packs its
 * passes (no more than 15 % of the pass capacity left empty) */
TEST_GROUP(last_token_invariance) {
  make_inputs();
  struct hearth_model *m = load(FIXTURE, 4096);
  REQUIRE(m);
  const int d = hearth_model_info(m)->n_embd;
  REQUIRE(hearth_model_info(m)->pooling == HEARTH_POOL_LAST && d <= D_MAX);
  static int idx[N], sub[N];
  static float alone[N * D_MAX], batch[N * D_MAX], part[N * D_MAX];
  for (int i = 0; i < N; i++) idx[i] = i;
  REQUIRE(embed_alone(m, idx, N, alone) == 0);
  struct hearth_embed_stats st;
  REQUIRE(embed_batch(m, idx, N, batch, &st) == 0);
  int bad = n_differ(alone, batch, N, d);
  CHECKF(bad == 0, "%d of %d inputs embed differently in a batch of %d than alone", bad, N, N);
  long long sum = 0, long_passes = 0;
  for (int i = 0; i < N; i++) {
    sum += g_len[i];
    if (g_len[i] > PASS) long_passes += (g_len[i] + PASS - 1) / PASS;
  }
  CHECKF(st.n_tokens == sum, "stats: %lld tokens evaluated, the inputs hold %lld", st.n_tokens, sum);
  CHECKF((double)st.n_forwards <= 1.15 * (double)sum / PASS + (double)long_passes,
         "%d forward passes for %lld tokens: the passes are not packed", st.n_forwards, sum);
  int ns = 0;
  for (int i = N - 1; i >= 0; i -= 7) sub[ns++] = i; /* other neighbours, other order */
  REQUIRE(embed_batch(m, sub, ns, part, NULL) == 0);
  bad = 0;
  for (int i = 0; i < ns; i++) bad += memcmp(part + (size_t)i * d, alone + (size_t)sub[i] * d, (size_t)d * sizeof *part) != 0;
  CHECKF(bad == 0, "%d of %d inputs of a subset differ from alone", bad, ns);
  /* the embeddings are unit vectors and not all alike (the check above cannot pass on zeros) */
  double n0 = 0, dotab = 0;
  for (int j = 0; j < d; j++) {
    n0 += (double)batch[j] * batch[j];
    dotab += (double)batch[j] * batch[(size_t)1 * d + j];
  }
  CHECKF(n0 > 0.999 && n0 < 1.001, "|e0|^2 = %f", n0);
  CHECKF(dotab < 0.9999, "inputs 0 and 1 embed alike (cos %f)", dotab);
  hearth_model_free(m);
}

/* cls and mean pooling (sentence-transformers Pooling configs): batch = alone, bit for bit */
static char g_dir[64];

static void write_file(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, rel);
  FILE *f = fopen(p, "wb");
  if (!f) { perror(p); abort(); }
  fputs(text, f);
  fclose(f);
}

static void pooled_dir(const char *cls, const char *mean) {
  char p[512], q[512];
  snprintf(g_dir, sizeof g_dir, "/tmp/hearth-embb-XXXXXX");
  if (!mkdtemp(g_dir)) abort();
  const char *files[] = {"config.json", "model.safetensors"};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", FIXTURE, files[i]);
    snprintf(q, sizeof q, "%s/%s", g_dir, files[i]);
    if (symlink(p, q)) abort();
  }
  snprintf(p, sizeof p, "%s/1_Pooling", g_dir);
  mkdir(p, 0755);
  write_file("modules.json",
             "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},\n"
             " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}]\n");
  snprintf(q, sizeof q,
           "{\"word_embedding_dimension\": 128, \"pooling_mode_cls_token\": %s, \"pooling_mode_mean_tokens\": %s, "
           "\"pooling_mode_lasttoken\": false}", cls, mean);
  write_file("1_Pooling/config.json", q);
}

static void rm_dir(void) {
  const char *files[] = {"config.json", "model.safetensors", "modules.json", "1_Pooling/config.json"};
  char p[512];
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/1_Pooling", g_dir);
  rmdir(p);
  rmdir(g_dir);
}

static void pooled_invariance(const char *cls, const char *mean, enum hearth_pooling want) {
  pooled_dir(cls, mean);
  struct hearth_model *m = load(g_dir, 4096);
  CHECK(m != NULL);
  if (m) {
    CHECK(hearth_model_info(m)->pooling == want);
    const int d = hearth_model_info(m)->n_embd, n = 120;
    static int idx[120];
    static float a[120 * D_MAX], b[120 * D_MAX];
    for (int i = 0; i < n; i++) idx[i] = (i * 17) % N;
    CHECK(embed_alone(m, idx, n, a) == 0);
    struct hearth_embed_stats st;
    CHECK(embed_batch(m, idx, n, b, &st) == 0);
    int bad = n_differ(a, b, n, d);
    CHECKF(bad == 0, "pooling %d: %d of %d inputs differ between batch and alone", (int)want, bad, n);
    /* cls: one token per input, at most max_seqs sequences (model_load.c: 64 on the CPU, 256 on CUDA) a pass */
    const int S = hearth_model_info(m)->max_seqs;
    if (want == HEARTH_POOL_CLS)
      CHECKF(S >= 1 && st.n_tokens == n && st.n_forwards == (n + S - 1) / S, "cls: %lld tokens in %d passes of at most %d",
             st.n_tokens, st.n_forwards, S);
  }
  hearth_model_free(m);
  rm_dir();
}

TEST_GROUP(pooling_modes) {
  make_inputs();
  pooled_invariance("true", "false", HEARTH_POOL_CLS);
  pooled_invariance("false", "true", HEARTH_POOL_MEAN);
}

/* a pool of 16 blocks (256 tokens): passes shrink to what it holds, results unchanged */
TEST_GROUP(small_pool) {
  make_inputs();
  struct hearth_model *m = load(FIXTURE, 256), *ref = load(FIXTURE, 4096);
  REQUIRE(m && ref);
  const int d = hearth_model_info(m)->n_embd;
  static int idx[300];
  static float a[300 * D_MAX], b[300 * D_MAX];
  int n = 0;
  for (int i = 0; i < N && n < 300; i++)
    if (g_len[i] <= 256) idx[n++] = i;
  REQUIRE(embed_alone(ref, idx, n, a) == 0);
  struct hearth_embed_stats st;
  REQUIRE(embed_batch(m, idx, n, b, &st) == 0);
  int bad = n_differ(a, b, n, d);
  CHECKF(bad == 0, "%d of %d inputs differ with a 256-token pool", bad, n);
  /* an input longer than the pool is refused, naming it */
  int big = -1;
  for (int i = 0; i < N && big < 0; i++)
    if (g_len[i] > 256) big = i;
  struct hearth_err err = {0};
  const int32_t *t = g_tok[big];
  CHECK(hearth_embed_batch(m, &t, &g_len[big], 1, a, NULL, NULL, NULL, &err) == HEARTH_ERR_CTX_FULL);
  CHECKF(strstr(err.msg, "input 0") != NULL, "message: %s", err.msg);
  hearth_model_free(m);
  hearth_model_free(ref);
}

static int g_polls, g_stop_after;
static int stop_after(void *arg) {
  (void)arg;
  return ++g_polls > g_stop_after;
}

/* cancelled calls give their KV blocks back: many cancelled calls on a 256-token pool, then a full
 * call that needs every block still succeeds with the same bits */
TEST_GROUP(abort_hook) {
  make_inputs();
  struct hearth_model *m = load(FIXTURE, 256);
  REQUIRE(m);
  const int d = hearth_model_info(m)->n_embd;
  static int idx[200];
  static float a[200 * D_MAX], b[200 * D_MAX];
  int n = 0;
  for (int i = 0; i < N && n < 200; i++)
    if (g_len[i] <= 256) idx[n++] = i;
  REQUIRE(embed_alone(m, idx, n, a) == 0);
  const int32_t *t[200];
  int l[200];
  for (int i = 0; i < n; i++) {
    t[i] = g_tok[idx[i]];
    l[i] = g_len[idx[i]];
  }
  for (int k = 0; k < 20; k++) {
    struct hearth_err err = {0};
    g_polls = 0;
    g_stop_after = k;
    CHECK(hearth_embed_batch(m, t, l, n, b, stop_after, NULL, NULL, &err) == HEARTH_ERR_CANCELLED);
    CHECKF(g_polls == k + 1, "stop after %d polls: polled %d times", k, g_polls);
  }
  struct hearth_err err = {0};
  CHECK(hearth_embed_batch(m, t, l, n, b, NULL, NULL, NULL, &err) == 0);
  CHECK(n_differ(a, b, n, d) == 0);
  /* an input longer than a pass is cancellable between its passes */
  hearth_model_free(m);
  m = load(FIXTURE, 4096);
  REQUIRE(m);
  int lg = -1;
  for (int i = 0; i < N && lg < 0; i++)
    if (g_len[i] > PASS) lg = i;
  const int32_t *tl = g_tok[lg];
  g_polls = 0;
  g_stop_after = 1; /* the check before the call's first pass, then the one before the input's second pass */
  CHECK(hearth_embed_batch(m, &tl, &g_len[lg], 1, b, stop_after, NULL, NULL, &err) == HEARTH_ERR_CANCELLED);
  CHECKF(g_polls >= 2, "a %d-token input was polled %d times", g_len[lg], g_polls);
  hearth_model_free(m);
}

/* bad arguments are refused before anything runs, naming the input */
TEST_GROUP(errors) {
  make_inputs();
  struct hearth_model *m = load(FIXTURE, 1024), *lm = load(CAUSAL, 1024);
  REQUIRE(m && lm);
  struct hearth_err err = {0};
  float out[4 * D_MAX];
  int32_t good[3] = {1, 2, 3}, bad[2] = {5, 400};
  const int32_t *t[3] = {good, bad, good};
  int l[3] = {3, 2, 0};
  CHECK(hearth_embed_batch(m, t, l, 2, out, NULL, NULL, NULL, &err) == HEARTH_ERR_ARG);
  CHECKF(strstr(err.msg, "input 1") && strstr(err.msg, "400"), "message: %s", err.msg);
  t[1] = good;
  CHECK(hearth_embed_batch(m, t, l, 3, out, NULL, NULL, NULL, &err) == HEARTH_ERR_ARG);
  CHECKF(strstr(err.msg, "input 2") != NULL, "message: %s", err.msg);
  CHECK(hearth_embed_batch(lm, t, l, 1, out, NULL, NULL, NULL, &err) == HEARTH_ERR_ARG);
  struct hearth_embed_stats st = {7, 7};
  CHECK(hearth_embed_batch(m, t, l, 0, out, NULL, NULL, &st, &err) == 0);
  CHECK(st.n_forwards == 0 && st.n_tokens == 0);
  hearth_model_free(m);
  hearth_model_free(lm);
}

TEST_MAIN(T(last_token_invariance), T(pooling_modes), T(small_pool), T(abort_hook), T(errors))
