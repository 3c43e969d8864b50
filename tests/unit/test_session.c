/* tests/unit/test_session.c — sessions over the shared KV pool: prefix reuse through the prefix
 * cache, divergence inside a shared block, eviction when the pool is full, and multi-session
 * steps. Every result is compared with the same tokens evaluated from scratch on a model that
 * has no cached prefixes. Uses the tiny qwen2 oracle fixture. */
#include <math.h>
#include <unistd.h>

#include "hearth.h"
#include "model/model.h"
#include "runtime/kv_cache.h"
#include "runtime/row_score.h"
#include "runtime/warm_up.h"
#include "backend/backend.h"
#include "test.h"
#include "unit/step_sampled.h"

#define FIXTURE HEARTH_SOURCE_DIR "/tests/fixtures/model/qwen2"

static struct hearth_model *load(int kv_tokens) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = FIXTURE;
  p.n_threads = 2;
  p.kv_tokens = kv_tokens;
  struct hearth_model *m = NULL;
  struct hearth_err err = {0};
  if (hearth_model_load(&p, &m, &err)) fprintf(stderr, "load: %s\n", err.msg);
  return m;
}

static void prompt(int32_t *t, int n, int salt) {
  for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 37 + salt * 101 + 11) % 997);
}

/* Logits of `tokens` computed from nothing on a fresh session of model `ref`. */
static void reference_logits(struct hearth_model *ref, const int32_t *tokens, int n, float *out) {
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  hearth_session_new(ref, NULL, &s, &err);
  /* evaluate token by token from an empty session: no prefix cache entries exist for this order */
  hearth_session_sync(s, tokens, n, &err);
  memcpy(out, hearth_session_logits(s), (size_t)hearth_model_info(ref)->n_vocab * sizeof *out);
  hearth_session_free(s);
}

static float max_diff(const float *a, const float *b, int n) {
  float d = 0;
  for (int i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
  return d;
}

TEST_GROUP(prefix_reuse) {
  struct hearth_model *m = load(1024), *ref = load(1024);
  REQUIRE(m && ref);
  int V = hearth_model_info(m)->n_vocab;
  float *want = malloc((size_t)V * sizeof *want);
  int32_t t[80], u[80];
  prompt(t, 80, 1);
  struct hearth_session *a = NULL, *b = NULL;
  struct hearth_err err = {0};
  REQUIRE(hearth_session_new(m, NULL, &a, &err) == 0 && hearth_session_new(m, NULL, &b, &err) == 0);
  REQUIRE(hearth_session_sync(a, t, 70, &err) == 0);
  uint64_t h0, m0, h1, m1;
  int e0, e1;
  kv_prefix_stats(&m->kv, &h0, &m0, &e0);
  CHECK(e0 == 70 / 16); /* every full block of a registered */
  /* b: same 70 tokens -> 4 cached blocks reused, only the tail evaluated */
  REQUIRE(hearth_session_sync(b, t, 70, &err) == 0);
  kv_prefix_stats(&m->kv, &h1, &m1, &e1);
  CHECKF(h1 - h0 == 4, "hits %llu", (unsigned long long)(h1 - h0));
  CHECK(hearth_session_n_reused(b) == 64);
  reference_logits(ref, t, 70, want);
  CHECKF(max_diff(hearth_session_logits(b), want, V) < 1e-4f, "shared prefix changed the logits");
  CHECKF(max_diff(hearth_session_logits(a), want, V) < 1e-4f, "a");
  /* b diverges at position 37, inside shared block 2: must not corrupt a's block */
  memcpy(u, t, sizeof u);
  u[37] = 5;
  CHECK(hearth_session_prepare(b, u, 60, &err) == 32); /* the cut at 37 falls back to block 2's start */
  REQUIRE(hearth_session_sync(b, u, 60, &err) == 0);
  reference_logits(ref, u, 60, want);
  CHECKF(max_diff(hearth_session_logits(b), want, V) < 1e-4f, "divergence inside a shared block");
  /* a continues: its cached blocks must be intact */
  REQUIRE(hearth_session_append(a, &t[70], 10, &err) == 0);
  reference_logits(ref, t, 80, want);
  CHECKF(max_diff(hearth_session_logits(a), want, V) < 1e-4f, "a after b diverged");
  /* a syncs back to a shorter prefix ending inside its own registered block */
  REQUIRE(hearth_session_sync(a, t, 20, &err) == 0);
  reference_logits(ref, t, 20, want);
  CHECKF(max_diff(hearth_session_logits(a), want, V) < 1e-4f, "a truncated into a shared block");
  hearth_session_free(a);
  hearth_session_free(b);
  free(want);
  hearth_model_free(m);
  hearth_model_free(ref);
}

TEST_GROUP(eviction) {
  struct hearth_model *m = load(96); /* 6 blocks of 16 */
  REQUIRE(m);
  struct hearth_err err = {0};
  int32_t t[64];
  for (int k = 0; k < 20; k++) {
    struct hearth_session *s = NULL;
    prompt(t, 64, k + 10);
    REQUIRE(hearth_session_new(m, NULL, &s, &err) == 0);
    CHECKF(hearth_session_sync(s, t, 64, &err) == 0, "round %d: %s", k, err.msg);
    hearth_session_free(s);
  }
  /* two live sessions of 48 tokens need 6 blocks: the cache must give all its blocks back */
  struct hearth_session *a = NULL, *b = NULL;
  REQUIRE(hearth_session_new(m, NULL, &a, &err) == 0 && hearth_session_new(m, NULL, &b, &err) == 0);
  prompt(t, 64, 99);
  CHECKF(hearth_session_sync(a, t, 48, &err) == 0, "%s", err.msg);
  prompt(t, 64, 98);
  CHECKF(hearth_session_sync(b, t, 48, &err) == 0, "%s", err.msg);
  /* and a third cannot fit: a clear error, not a crash */
  struct hearth_session *c = NULL;
  REQUIRE(hearth_session_new(m, NULL, &c, &err) == 0);
  prompt(t, 64, 97);
  int free_before = kv_pool_free_blocks(&m->kv);
  CHECK(hearth_session_sync(c, t, 40, &err) == HEARTH_ERR_CTX_FULL);
  CHECK(kv_pool_free_blocks(&m->kv) == free_before); /* a failed step gives its blocks back */
  CHECK(hearth_session_n_tokens(c) == 0);
  hearth_session_free(a);
  hearth_session_free(b);
  hearth_session_free(c);
  hearth_model_free(m);
}

TEST_GROUP(multi_session_step) {
  struct hearth_model *m = load(2048), *ref = load(2048);
  REQUIRE(m && ref);
  int V = hearth_model_info(m)->n_vocab;
  float *want = malloc((size_t)V * sizeof *want);
  enum { N = 5 };
  struct hearth_session *ss[N];
  int32_t toks[N][40];
  const int32_t *tp[N];
  int cnt[N];
  struct hearth_err err = {0};
  for (int i = 0; i < N; i++) {
    prompt(toks[i], 40, 200 + i);
    REQUIRE(hearth_session_new(m, NULL, &ss[i], &err) == 0);
    tp[i] = toks[i];
    cnt[i] = 10 + 5 * i; /* different prompt lengths in one batch */
  }
  REQUIRE(hearth_sessions_step(ss, N, tp, cnt, &err) == 0);
  for (int i = 0; i < N; i++) {
    reference_logits(ref, toks[i], cnt[i], want);
    CHECKF(max_diff(hearth_session_logits(ss[i]), want, V) < 1e-4f, "session %d", i);
  }
  /* one decode token each */
  for (int i = 0; i < N; i++) { tp[i] = &toks[i][cnt[i]]; cnt[i] = 1; }
  REQUIRE(hearth_sessions_step(ss, N, tp, cnt, &err) == 0);
  for (int i = 0; i < N; i++) {
    reference_logits(ref, toks[i], 10 + 5 * i + 1, want);
    CHECKF(max_diff(hearth_session_logits(ss[i]), want, V) < 1e-4f, "decode session %d", i);
    hearth_session_free(ss[i]);
  }
  /* the greedy step returns the argmax of what the logits step would have produced */
  struct hearth_session *g1 = NULL, *g2 = NULL;
  REQUIRE(hearth_session_new(m, NULL, &g1, &err) == 0 && hearth_session_new(ref, NULL, &g2, &err) == 0);
  int32_t gid[1];
  float glp[1];
  const int32_t *gp[1] = {toks[0]};
  int gc[1] = {12};
  REQUIRE(hearth_sessions_step_greedy(&g1, 1, gp, gc, gid, glp, &err) == 0);
  REQUIRE(hearth_session_sync(g2, toks[0], 12, &err) == 0);
  const float *lg = hearth_session_logits(g2);
  int32_t best = 0;
  for (int i = 1; i < V; i++) if (lg[i] > lg[best]) best = i;
  CHECK(gid[0] == best);
  CHECK(fabsf(glp[0] - hearth_logprob(lg, V, best)) < 1e-4f);
  hearth_session_free(g1);
  hearth_session_free(g2);
  /* per-session choice: session 0 greedy, session 1 with its logits; ids/logprobs of a logits session untouched */
  {
    struct hearth_session *sel[2] = {NULL, NULL}, *tw[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
      REQUIRE(hearth_session_new(m, NULL, &sel[i], &err) == 0 && hearth_session_new(ref, NULL, &tw[i], &err) == 0);
    const int32_t *sp[2] = {toks[1], toks[2]};
    int sc[2] = {11, 14};
    const uint8_t flags[2] = {1, 0};
    int32_t sid[2] = {-7, -7};
    float slp[2] = {0.5f, 0.5f};
    REQUIRE(hearth_sessions_step_select(sel, 2, sp, sc, flags, sid, slp, &err) == 0);
    REQUIRE(hearth_session_sync(tw[0], toks[1], 11, &err) == 0 && hearth_session_sync(tw[1], toks[2], 14, &err) == 0);
    const float *l0 = hearth_session_logits(tw[0]);
    int32_t b0 = 0;
    for (int i = 1; i < V; i++) if (l0[i] > l0[b0]) b0 = i;
    CHECK(sid[0] == b0);
    CHECK(fabsf(slp[0] - hearth_logprob(l0, V, b0)) < 1e-4f);
    CHECK(sid[1] == -7 && slp[1] == 0.5f);
    CHECK(hearth_session_logits(sel[1]) && max_diff(hearth_session_logits(sel[1]), hearth_session_logits(tw[1]), V) < 1e-4f);
    /* a greedy session with no new token gets no choice (its id is left as it was) */
    const uint8_t both[2] = {1, 1};
    int zc[2] = {1, 0};
    const int32_t *zp[2] = {&toks[1][11], &toks[2][14]};
    sid[0] = sid[1] = -7;
    REQUIRE(hearth_sessions_step_select(sel, 2, zp, zc, both, sid, NULL, &err) == 0);
    CHECK(sid[0] >= 0 && sid[0] < V && sid[1] == -7);
    CHECK(hearth_session_n_tokens(sel[0]) == 12 && hearth_session_n_tokens(sel[1]) == 14);
    for (int i = 0; i < 2; i++) { hearth_session_free(sel[i]); hearth_session_free(tw[i]); }
  }
  /* the same session twice in one step is refused */
  struct hearth_session *x = NULL;
  REQUIRE(hearth_session_new(m, NULL, &x, &err) == 0);
  struct hearth_session *dup[2] = {x, x};
  int one[2] = {1, 1};
  const int32_t *dt[2] = {toks[0], toks[0]};
  CHECK(hearth_sessions_step(dup, 2, dt, one, &err) == HEARTH_ERR_ARG);
  int32_t bad = 100000;
  CHECK(hearth_session_append(x, &bad, 1, &err) == HEARTH_ERR_ARG);
  hearth_session_free(x);
  free(want);
  hearth_model_free(m);
  hearth_model_free(ref);
}

/* The prefix cache on disk: a second model instance (a "restart") reuses blocks the first wrote,
 * with identical logits; a damaged file is ignored; another model never sees them. */
TEST_GROUP(disk_prefix_cache) {
  char dir[256];
  snprintf(dir, sizeof dir, "/tmp/hearth_test_kvstore_%d", (int)getpid());
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = FIXTURE;
  p.n_threads = 2;
  p.kv_tokens = 512;
  p.kv_cache_dir = dir;
  struct hearth_err err = {0};
  struct hearth_model *m1 = NULL, *m2 = NULL, *ref = load(512);
  REQUIRE(ref);
  REQUIRE(hearth_model_load(&p, &m1, &err) == 0);
  int V = hearth_model_info(m1)->n_vocab;
  float *want = malloc((size_t)V * sizeof *want);
  int32_t t[70];
  prompt(t, 70, 7);
  struct hearth_session *s = NULL;
  REQUIRE(hearth_session_new(m1, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 70, &err) == 0);
  hearth_session_free(s);
  hearth_model_free(m1);
  /* restart */
  REQUIRE(hearth_model_load(&p, &m2, &err) == 0);
  REQUIRE(hearth_session_new(m2, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 70, &err) == 0);
  CHECKF(hearth_session_n_reused(s) == 64, "reused %d", hearth_session_n_reused(s));
  reference_logits(ref, t, 70, want);
  CHECKF(max_diff(hearth_session_logits(s), want, V) < 1e-4f, "logits from disk blocks differ");
  hearth_session_free(s);
  hearth_model_free(m2);
  /* a file cut short (a crash mid-write by another tool, a full disk) is ignored, removed and rewritten */
  char cmd0[1200];
  snprintf(cmd0, sizeof cmd0, "for f in %s/*/*.kv; do truncate -s -8 $f; done", dir);
  REQUIRE(system(cmd0) == 0);
  m2 = NULL;
  REQUIRE(hearth_model_load(&p, &m2, &err) == 0);
  REQUIRE(hearth_session_new(m2, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 70, &err) == 0);
  CHECKF(hearth_session_n_reused(s) == 0, "truncated blocks were used (%d)", hearth_session_n_reused(s));
  CHECKF(max_diff(hearth_session_logits(s), want, V) < 1e-4f, "after truncation");
  hearth_session_free(s);
  hearth_model_free(m2);
  m2 = NULL;
  REQUIRE(hearth_model_load(&p, &m2, &err) == 0); /* rewritten by the run before: reused again */
  REQUIRE(hearth_session_new(m2, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 70, &err) == 0);
  CHECKF(hearth_session_n_reused(s) == 64, "rewritten blocks: reused %d", hearth_session_n_reused(s));
  hearth_session_free(s);
  hearth_model_free(m2);
  /* damage every file: the next run must ignore them and still be right */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "for f in %s/*/*.kv; do printf 'garbage' | dd of=$f bs=1 seek=200 conv=notrunc 2>/dev/null; done", dir);
  REQUIRE(system(cmd) == 0);
  m2 = NULL;
  REQUIRE(hearth_model_load(&p, &m2, &err) == 0);
  REQUIRE(hearth_session_new(m2, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 70, &err) == 0);
  CHECKF(hearth_session_n_reused(s) == 0, "damaged blocks were used (%d)", hearth_session_n_reused(s));
  CHECKF(max_diff(hearth_session_logits(s), want, V) < 1e-4f, "after damage");
  hearth_session_free(s);
  hearth_model_free(m2);
  /* a block file is never written through a planted link (the temporary name was predictable:
   * <key>.kv.tmp<pid>, opened without O_EXCL) */
  char victim[280];
  snprintf(victim, sizeof victim, "%s.victim", dir);
  FILE *vf = fopen(victim, "w");
  REQUIRE(vf);
  fputs("untouched", vf);
  fclose(vf);
  snprintf(cmd, sizeof cmd, "for f in %s/*/*.kv; do rm -f $f; ln -s %s $f.tmp%d; done", dir, victim, (int)getpid());
  REQUIRE(system(cmd) == 0);
  m2 = NULL;
  REQUIRE(hearth_model_load(&p, &m2, &err) == 0);
  REQUIRE(hearth_session_new(m2, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 70, &err) == 0);
  hearth_session_free(s);
  hearth_model_free(m2);
  char got[32] = "";
  vf = fopen(victim, "r");
  REQUIRE(vf);
  CHECK(fgets(got, sizeof got, vf) && !strcmp(got, "untouched"));
  fclose(vf);
  unlink(victim);
  /* a store directory others may write is refused */
  snprintf(cmd, sizeof cmd, "chmod 0777 %s/*", dir);
  REQUIRE(system(cmd) == 0);
  m2 = NULL;
  CHECK(hearth_model_load(&p, &m2, &err) != 0);
  CHECKF(strstr(err.msg, "KV cache directory"), "%s", err.msg);
  hearth_model_free(m2);
  snprintf(cmd, sizeof cmd, "chmod 0700 %s/*", dir);
  REQUIRE(system(cmd) == 0);
  /* another dtype is another fingerprint: nothing reused */
  p.dtype = HEARTH_DTYPE_F32;
  m2 = NULL;
  REQUIRE(hearth_model_load(&p, &m2, &err) == 0);
  REQUIRE(hearth_session_new(m2, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 70, &err) == 0);
  CHECK(hearth_session_n_reused(s) == 0);
  hearth_session_free(s);
  hearth_model_free(m2);
  hearth_model_free(ref);
  free(want);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

/* Batch invariance: greedy tokens of a request are the same whether it runs alone or batched with
 * others (prompt chunks of several sessions plus decode tokens in one step, after prefix-cache
 * hits shortened the chunks). Kernel precision must not depend on the batch. */
TEST_GROUP(batch_invariance) {
  enum { N = 12, G = 12 };
  struct hearth_model *m = load(8192);
  REQUIRE(m);
  int V = hearth_model_info(m)->n_vocab;
  struct hearth_err err = {0};
  static int32_t pr[N][120], alone[N][G];
  int np[N];
  struct hearth_session *s[N];
  for (int i = 0; i < N; i++) {
    np[i] = 30 + 7 * i; /* 30..107: both sides of any small-batch cut-over */
    for (int k = 0; k < np[i]; k++) pr[i][k] = k < 24 ? (k * 31 + 7) % V : (k * 17 + i * 101) % V;
    REQUIRE(hearth_session_new(m, NULL, &s[i], &err) == 0);
    REQUIRE(hearth_session_sync(s[i], pr[i], np[i], &err) == 0);
    for (int g = 0; g < G; g++) {
      const float *lg = hearth_session_logits(s[i]);
      int32_t b = 0;
      for (int k = 1; k < V; k++) if (lg[k] > lg[b]) b = k;
      alone[i][g] = b;
      if (g + 1 < G) REQUIRE(hearth_session_append(s[i], &b, 1, &err) == 0);
    }
  }
  const int32_t *tp[N];
  int cnt[N], bad = 0;
  int32_t cur[N];
  for (int i = 0; i < N; i++) { /* the same sessions, matched again: reuse, then one mixed step */
    int h = hearth_session_prepare(s[i], pr[i], np[i], &err);
    REQUIRE(h >= 0);
    tp[i] = pr[i] + h;
    cnt[i] = np[i] - h;
  }
  REQUIRE(hearth_sessions_step(s, N, tp, cnt, &err) == 0);
  for (int g = 0; g < G; g++) {
    for (int i = 0; i < N; i++) {
      const float *lg = hearth_session_logits(s[i]);
      int32_t b = 0;
      for (int k = 1; k < V; k++) if (lg[k] > lg[b]) b = k;
      if (b != alone[i][g]) bad++;
      cur[i] = b;
      tp[i] = &cur[i];
      cnt[i] = 1;
    }
    if (g + 1 < G) REQUIRE(hearth_sessions_step(s, N, tp, cnt, &err) == 0);
  }
  CHECKF(bad == 0, "%d of %d greedy tokens differ between alone and batched", bad, N * G);
  for (int i = 0; i < N; i++) hearth_session_free(s[i]);
  hearth_model_free(m);
}

/* append_logits: every appended position's logits, in forward passes of up to max_out rows, equal
 * the last-position logits of syncing each prefix on its own; the session's logits are the last
 * position's afterwards. 150 positions: more than one pass. */
TEST_GROUP(append_logits) {
  struct hearth_model *m = load(1024), *ref = load(1024);
  if (!m || !ref) { test_failures++; hearth_model_free(m); hearth_model_free(ref); return; }
  const int V = hearth_model_info(m)->n_vocab, n = 150;
  int32_t toks[150];
  prompt(toks, n, 5);
  float *all = malloc((size_t)n * V * sizeof *all), *one = malloc((size_t)V * sizeof *one);
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  CHECK(hearth_session_new(m, NULL, &s, &err) == 0);
  CHECK(hearth_session_sync(s, toks, 10, &err) == 0);                    /* a held prefix first */
  CHECK(hearth_session_append_logits(s, toks + 10, n - 10, all, &err) == 0);
  CHECK(hearth_session_n_tokens(s) == n);
  float worst = 0;
  for (int i = 10; i < n; i += 7) {
    reference_logits(ref, toks, i + 1, one);
    float d = max_diff(all + (size_t)(i - 10) * V, one, V);
    if (d > worst) worst = d;
  }
  reference_logits(ref, toks, n, one);
  float dl = max_diff(all + (size_t)(n - 11) * V, one, V), ds = max_diff(hearth_session_logits(s), one, V);
  printf("  append_logits: worst |diff| %.3g over sampled positions, last %.3g, session %.3g\n", worst, dl, ds);
  /* equal bits: the reference's pass carries only its last row past the last layer's attention (blocks.c,
   * attention_trim), this one every row, and the CPU kernels do not depend on the rows beside a row */
  CHECK(worst == 0 && dl == 0 && ds == 0);
  CHECK(hearth_session_append_logits(s, toks, 0, all, &err) != 0);
  free(all);
  free(one);
  hearth_session_free(s);
  hearth_model_free(m);
  hearth_model_free(ref);
}

/* A prompt longer than one forward pass: its passes before the last want no output, so their last layer stops
 * after writing the cache (blocks.c, attention_trim), and the last pass carries only its final row on. The logits equal,
 * bit for bit, those of the same position among every position's (append_logits: all rows through every layer). */
TEST_GROUP(trimmed_passes) {
  struct hearth_model *m = load(2048), *ref = load(2048);
  if (!m || !ref) { test_failures++; hearth_model_free(m); hearth_model_free(ref); return; }
  const int V = hearth_model_info(m)->n_vocab, n = 1100; /* 512 + 512 + 76 */
  int32_t *toks = malloc((size_t)n * sizeof *toks);
  float *all = malloc((size_t)n * V * sizeof *all);
  REQUIRE(toks && all);
  prompt(toks, n, 9);
  struct hearth_session *a = NULL, *b = NULL;
  struct hearth_err err = {0};
  CHECK(hearth_session_new(m, NULL, &a, &err) == 0);
  CHECK(hearth_session_sync(a, toks, n, &err) == 0);
  CHECK(hearth_session_new(ref, NULL, &b, &err) == 0);
  CHECK(hearth_session_sync(b, toks, 1, &err) == 0);
  CHECK(hearth_session_append_logits(b, toks + 1, n - 1, all, &err) == 0);
  const float *la = hearth_session_logits(a), *lb = all + (size_t)(n - 2) * V;
  CHECKF(max_diff(la, lb, V) == 0, "|diff| %.3g between the trimmed passes and every row's", max_diff(la, lb, V));
  hearth_session_free(a);
  hearth_session_free(b);
  free(toks);
  free(all);
  hearth_model_free(m);
  hearth_model_free(ref);
}

/* hearth_session_set_abort (a server drops a long embedding or prompt whose client has gone): the
 * hook is polled before every forward batch of 512 tokens; when it says stop the call returns
 * HEARTH_ERR_CANCELLED, the session keeps what it held before the call, and it computes the same
 * logits as a fresh one afterwards. */
struct abort_count { int calls, stop_at; };
static int abort_after(void *arg) {
  struct abort_count *a = arg;
  return ++a->calls >= a->stop_at;
}

TEST_GROUP(abort_hook) {
  struct hearth_model *m = load(2048), *ref = load(2048);
  if (!m || !ref) { test_failures++; hearth_model_free(m); hearth_model_free(ref); return; }
  const int V = hearth_model_info(m)->n_vocab, n = 1100; /* three batches: 512 + 512 + 76 */
  int32_t *toks = malloc((size_t)n * sizeof *toks);
  float *one = malloc((size_t)V * sizeof *one);
  prompt(toks, n, 9);
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  REQUIRE(hearth_session_new(m, NULL, &s, &err) == 0);
  CHECK(hearth_session_sync(s, toks, 10, &err) == 0);
  struct abort_count a = {0, 2};
  hearth_session_set_abort(s, abort_after, &a);
  CHECK(hearth_session_sync(s, toks, n, &err) == HEARTH_ERR_CANCELLED);
  CHECKF(a.calls == 2, "polled %d times", a.calls); /* before batch 1 (go on), before batch 2 (stop) */
  CHECKF(hearth_session_n_tokens(s) == 10, "holds %d", hearth_session_n_tokens(s));
  struct abort_count never = {0, 1 << 30};
  hearth_session_set_abort(s, abort_after, &never);
  CHECK(hearth_session_sync(s, toks, n, &err) == 0);
  CHECKF(never.calls == 3, "polled %d times", never.calls); /* 1090 new tokens: three batches */
  hearth_session_set_abort(s, NULL, NULL);
  CHECK(hearth_session_sync(s, toks, 40, &err) == 0);
  reference_logits(ref, toks, 40, one);
  float d = max_diff(hearth_session_logits(s), one, V);
  CHECKF(d < 1e-4, "|diff| %g after a cancelled sync", d);
  free(toks);
  free(one);
  hearth_session_free(s);
  hearth_model_free(m);
  hearth_model_free(ref);
}

/* hearth_sessions_step_scored: the scores a step brings back are those of the session's own logits, as a
 * brute-force reference computes them from hearth_sessions_step's row (every token sorted by logit, then id);
 * the row_score definition (runtime/row_score.c) is also held to the brute force on rows full of ties. */
static int by_logit(const void *a, const void *b, void *row) {
  const float *r = row;
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  if (r[x] != r[y]) return r[x] > r[y] ? -1 : 1;
  return (x > y) - (x < y);
}

static void brute_scores(const float *lg, int V, struct hearth_row_score *sc) {
  int32_t *ord = malloc((size_t)V * sizeof *ord);
  for (int i = 0; i < V; i++) ord[i] = i;
  qsort_r(ord, (size_t)V, sizeof *ord, by_logit, (void *)lg);
  double mx = lg[ord[0]], s = 0;
  for (int i = 0; i < V; i++) s += exp((double)lg[i] - mx);
  double ls = log(s);
  sc->id = ord[0];
  sc->logprob = -ls;
  sc->n_top = sc->k < V ? sc->k : V;
  for (int j = 0; j < sc->n_top; j++) {
    sc->top_id[j] = ord[j];
    sc->top_lp[j] = (double)lg[ord[j]] - mx - ls;
  }
  for (int j = 0; j < sc->n_ids; j++) sc->id_lp[j] = (double)lg[sc->ids[j]] - mx - ls;
  free(ord);
}

static int same_scores(const struct hearth_row_score *a, const struct hearth_row_score *b, double tol) {
  int ok = a->id == b->id && fabs(a->logprob - b->logprob) <= tol && a->n_top == b->n_top;
  for (int j = 0; ok && j < a->n_top; j++) ok = a->top_id[j] == b->top_id[j] && fabs(a->top_lp[j] - b->top_lp[j]) <= tol;
  for (int j = 0; ok && j < a->n_ids; j++) ok = fabs(a->id_lp[j] - b->id_lp[j]) <= tol;
  return ok;
}

TEST_GROUP(row_score) {
  /* the definition on tie-heavy rows */
  enum { V0 = 3000 };
  float *row = malloc(V0 * sizeof *row);
  int32_t req[HB_SCORE_REQ], out[HB_SCORE_OUT];
  int bad = 0;
  for (int t = 0; t < 20; t++) {
    for (int i = 0; i < V0; i++) row[i] = (float)((i * 7919 + t * 104729) % 23) / 4.0f;
    struct hearth_row_score a = {.k = t % (HEARTH_SCORE_TOPK + 1), .n_ids = t % (HEARTH_SCORE_IDS + 1)}, b;
    for (int j = 0; j < a.n_ids; j++) a.ids[j] = (j * 131 + t) % V0;
    b = a;
    row_score_req(&a, req);
    row_score_host(row, V0, req, out);
    row_score_fill(out, V0, &a);
    brute_scores(row, V0, &b);
    bad += !same_scores(&a, &b, 1e-9);
  }
  row[17] = NAN;
  row_score_host(row, V0, req, out);
  printf("  row_score definition: %d of 20 tie-heavy rows differ from the brute force; NaN row id %d\n", bad, out[0]);
  CHECK(bad == 0 && out[0] == -1);
  free(row);
  /* through a step of three sessions: scored, greedy, scored */
  struct hearth_model *m = load(1024);
  if (!m) { test_failures++; return; }
  const int V = hearth_model_info(m)->n_vocab;
  struct hearth_session *ss[3] = {0}, *plain = NULL;
  struct hearth_err err = {0};
  for (int i = 0; i < 3; i++) CHECK(hearth_session_new(m, NULL, &ss[i], &err) == 0);
  CHECK(hearth_session_new(m, NULL, &plain, &err) == 0);
  int32_t toks[3][40];
  for (int i = 0; i < 3; i++) prompt(toks[i], 40, 20 + i);
  const int32_t *tp[3] = {toks[0], toks[1], toks[2]};
  int cnt[3] = {40, 33, 27};
  struct hearth_row_score sa = {.k = 5, .n_ids = 3, .ids = {1, 2, 500}}, sb = {.k = 0, .n_ids = 1, .ids = {7}};
  struct hearth_row_score *scs[3] = {&sa, NULL, &sb};
  uint8_t greedy[3] = {0, 1, 0};
  int32_t ids[3] = {-5, -5, -5};
  float lps[3] = {0};
  CHECK(hearth_sessions_step_scored(ss, 3, tp, cnt, greedy, scs, ids, lps, &err) == 0);
  float *lg = malloc((size_t)V * sizeof *lg);
  struct hearth_row_score *want[3] = {&sa, NULL, &sb};
  for (int i = 0; i < 3; i += 2) {
    struct hearth_row_score ref = *want[i];
    CHECK(hearth_session_sync(plain, tp[i], cnt[i], &err) == 0);
    memcpy(lg, hearth_session_logits(plain), (size_t)V * sizeof *lg);
    brute_scores(lg, V, &ref);
    int ok = same_scores(want[i], &ref, 1e-5) && ids[i] == ref.id;
    printf("  scored session %d: id %d (ref %d) logprob %.6f (ref %.6f), %d alternatives: %s\n", i, want[i]->id, ref.id,
           want[i]->logprob, ref.logprob, want[i]->n_top, ok ? "same" : "DIFFERENT");
    CHECK(ok);
  }
  CHECK(ids[1] >= 0 && ids[1] < V);
  sa.k = HEARTH_SCORE_TOPK + 1; /* out of range: refused before anything runs */
  int n1 = hearth_session_n_tokens(ss[0]);
  const int32_t *one = toks[0];
  int c1 = 1;
  CHECK(hearth_sessions_step_scored(ss, 1, &one, &c1, greedy, scs, ids, lps, &err) == HEARTH_ERR_ARG);
  CHECK(hearth_session_n_tokens(ss[0]) == n1);
  free(lg);
  for (int i = 0; i < 3; i++) hearth_session_free(ss[i]);
  hearth_session_free(plain);
  hearth_model_free(m);
}

/* The warm-up (run here on the CPU, where hearth_model_warm_up itself skips it) leaves no trace: no prefix-cache
 * entry, every block back in the pool, and the next prompt's logits as on a model that never warmed up. */
TEST_GROUP(warm_up_leaves_no_trace) {
  struct hearth_model *m = load(1024), *ref = load(1024);
  REQUIRE(m && ref);
  const int V = hearth_model_info(m)->n_vocab, free0 = kv_pool_free_blocks(&m->kv);
  struct hearth_err err = {0};
  CHECKF(hearth_model_warm_up(m, &err) == 0, "%s", err.msg); /* the CPU: a no-op */
  REQUIRE(warm_up_run(m, &err) == 0);
  uint64_t h, mi;
  int e;
  kv_prefix_stats(&m->kv, &h, &mi, &e);
  CHECKF(e == 0, "%d prefix-cache entries after the warm-up", e);
  CHECKF(kv_pool_free_blocks(&m->kv) == free0, "free blocks %d, %d before", kv_pool_free_blocks(&m->kv), free0);
  float *want = malloc((size_t)V * sizeof *want);
  int32_t t[40];
  prompt(t, 40, 3);
  struct hearth_session *s = NULL;
  REQUIRE(hearth_session_new(m, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, t, 40, &err) == 0);
  CHECK(hearth_session_n_reused(s) == 0);
  reference_logits(ref, t, 40, want);
  CHECKF(max_diff(hearth_session_logits(s), want, V) == 0.0f, "logits after the warm-up differ");
  hearth_session_free(s);
  free(want);
  hearth_model_free(m);
  hearth_model_free(ref);
}

/* hearth_sessions_step_sampled on the CPU: the session layer's host draw equals the server's old one */
TEST_GROUP(step_sampled) {
  struct hearth_model *m = load(1024);
  REQUIRE(m);
  const int bad = step_sampled_check(m, "cpu");
  CHECKF(bad == 0, "%d steps differ (or a step failed: -1)", bad);
  hearth_model_free(m);
}

TEST_MAIN(T(step_sampled), T(prefix_reuse), T(eviction), T(multi_session_step), T(disk_prefix_cache), T(batch_invariance), T(trimmed_passes),
          T(append_logits), T(abort_hook), T(row_score), T(warm_up_leaves_no_trace))
