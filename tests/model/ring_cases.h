/* ring_cases.h — Gemma 4's sliding-window ring (runtime/kv_ring.h) against keeping every position, on one backend.
 * Included by tests/model/test_gemma4.c (CPU) and tests/cuda/test_cuda_model.c (CUDA, label cuda).
 *
 * ring_scenario runs one fixed script of calls on a model and records everything it returns (logits rows, greedy
 * ids and logprobs, tokens reused from the prefix cache) in a trace; the same script on a model loaded with
 * kv_seqs = -1 (no sliding pool: every position kept in every layer, the layout before the ring) must give a
 * bit-identical trace. The script: prompts longer than the window, a prefix-cache hit, three sessions stepped
 * together past many windows (logits steps, then greedy steps), a peek, a session resuming a cached prefix far
 * past the window, a cut back inside a session's window, that session decoding alone (batch 1) past five more
 * windows, and (recomputed: with `far_cut`) a cut below a session's window. Along the way
 * a ring session holds at most ceil((window - 1) / bs) + 1 sliding blocks. */
#include "runtime/kv_ring.h"

struct ring_trace {
  float *v;
  size_t n, cap;
};

static void rt_push(struct ring_trace *t, const float *x, size_t n) {
  if (t->n + n > t->cap) {
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->n + n) cap *= 2;
    float *p = realloc(t->v, cap * sizeof *p);
    if (!p) return;
    t->v = p;
    t->cap = cap;
  }
  memcpy(t->v + t->n, x, n * sizeof *x);
  t->n += n;
}

static void rt_push1(struct ring_trace *t, double x) {
  float f = (float)x;
  rt_push(t, &f, 1);
}

static struct hearth_model *ring_load(const char *dir, enum hearth_backend_kind be, enum hearth_dtype dt, int kv_tokens,
                                      int kv_seqs, const char *store, struct hearth_err *err) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = dir;
  p.backend = be;
  p.dtype = dt;
  p.n_threads = 2;
  p.kv_tokens = kv_tokens;
  p.kv_seqs = kv_seqs;
  p.kv_cache_dir = store;
  struct hearth_model *m = NULL;
  if (hearth_model_load(&p, &m, err)) return NULL;
  return m;
}

/* the most sliding blocks a session may hold between calls */
static int ring_bound(const struct hearth_model *m) {
  const int w = m->cfg.g4.sliding_window, bs = m->kv.block_size;
  return (w - 1 + bs - 1) / bs + 1;
}

static int32_t rt_argmax(const float *x, int n) {
  int32_t b = 0;
  for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
  return b;
}

/* The script (above) on m; 0, or -1 with a message on stderr. *held_max: the most sliding blocks any session held
 * after a call (0 without a sliding pool). */
static int ring_scenario(struct hearth_model *m, struct ring_trace *t, int far_cut, int *held_max) {
  struct hearth_err err = {0};
  const int V = hearth_model_info(m)->n_vocab;
  struct hearth_session *ss[4] = {0};
  float *buf = malloc((size_t)3 * V * sizeof *buf);
  int32_t pa[40], pb[23], pc[40], *hist = malloc(4096 * sizeof *hist);
  int rc = -1;
  *held_max = 0;
  if (!buf || !hist) goto out;
  for (int i = 0; i < 40; i++) pa[i] = (i * 37 + 11) % V;
  for (int i = 0; i < 23; i++) pb[i] = (i * 53 + 5) % V;
  for (int i = 0; i < 40; i++) pc[i] = i < 35 ? pa[i] : 7 + i;
  for (int i = 0; i < 4; i++)
    if (hearth_session_new(m, NULL, &ss[i], &err)) goto out;
#define HELD()                                                                 \
  for (int k_ = 0; k_ < 4; k_++)                                               \
    if (session_swa_held(ss[k_]) > *held_max) *held_max = session_swa_held(ss[k_]);
#define SYNC(s, ids, n)                                                        \
  do {                                                                         \
    if (hearth_session_sync(s, ids, n, &err)) goto out;                        \
    rt_push(t, hearth_session_logits(s), (size_t)V);                           \
    HELD();                                                                    \
  } while (0)
  SYNC(ss[0], pa, 40);
  rt_push1(t, hearth_session_n_reused(ss[0]));
  SYNC(ss[1], pb, 23);
  SYNC(ss[2], pc, 40); /* two blocks of pa from the prefix cache */
  rt_push1(t, hearth_session_n_reused(ss[2]));
  /* three sessions together, past many windows: logits steps, then greedy steps */
  int32_t tok[3], ids[3];
  float lps[3];
  const int32_t *tp[3] = {&tok[0], &tok[1], &tok[2]};
  const int one[3] = {1, 1, 1};
  for (int i = 0; i < 3; i++) tok[i] = rt_argmax(hearth_session_logits(ss[i]), V);
  for (int step = 0; step < 60; step++) {
    if (hearth_sessions_step(ss, 3, tp, one, &err)) goto out;
    for (int i = 0; i < 3; i++) {
      rt_push(t, hearth_session_logits(ss[i]), (size_t)V);
      tok[i] = rt_argmax(hearth_session_logits(ss[i]), V);
    }
    HELD();
  }
  for (int step = 0; step < 60; step++) {
    if (hearth_sessions_step_greedy(ss, 3, tp, one, ids, lps, &err)) goto out;
    for (int i = 0; i < 3; i++) {
      rt_push1(t, ids[i]);
      rt_push1(t, lps[i]);
      tok[i] = ids[i] < 0 ? 0 : ids[i];
    }
    HELD();
  }
  /* the last greedy ids join the sessions (a logits step), then a peek that leaves no trace */
  if (hearth_sessions_step(ss, 3, tp, one, &err)) goto out;
  int32_t pk[3] = {1, 2, 3};
  if (hearth_session_peek_logits(ss[0], pk, 3, buf, &err)) goto out;
  rt_push(t, buf, (size_t)3 * V);
  HELD();
  /* a fourth session resumes session 0's whole history from the prefix cache, far past the window */
  int n0 = hearth_session_n_tokens(ss[0]);
  memcpy(hist, hearth_session_tokens(ss[0]), (size_t)n0 * sizeof *hist);
  hist[n0] = 5;
  SYNC(ss[3], hist, n0 + 1);
  rt_push1(t, hearth_session_n_reused(ss[3]));
  /* a cut inside session 1's window */
  int n1 = hearth_session_n_tokens(ss[1]);
  memcpy(hist, hearth_session_tokens(ss[1]), (size_t)n1 * sizeof *hist);
  hist[n1 - 2] = 4;
  SYNC(ss[1], hist, n1 - 1);
  /* session 1 alone, one token a call, five windows on */
  for (int step = 0; step < 40; step++) {
    int32_t next = rt_argmax(hearth_session_logits(ss[1]), V);
    if (hearth_session_append(ss[1], &next, 1, &err)) goto out;
    rt_push(t, hearth_session_logits(ss[1]), (size_t)V);
    HELD();
  }
  if (far_cut) { /* below session 0's window: the ring recomputes from the last cached block it can resume */
    memcpy(hist, pa, 20 * sizeof *hist);
    hist[20] = 1, hist[21] = 2, hist[22] = 3;
    SYNC(ss[0], hist, 23);
  }
  rc = 0;
#undef SYNC
#undef HELD
out:
  if (rc) fprintf(stderr, "ring scenario: %s\n", err.msg);
  for (int i = 0; i < 4; i++) hearth_session_free(ss[i]);
  free(buf);
  free(hist);
  return rc;
}

/* the first index where two traces differ, or -1 when they are bit-identical */
static long rt_diff(const struct ring_trace *a, const struct ring_trace *b) {
  if (a->n != b->n) return (long)(a->n < b->n ? a->n : b->n);
  for (size_t i = 0; i < a->n; i++)
    if (memcmp(&a->v[i], &b->v[i], sizeof(float))) return (long)i;
  return -1;
}

/* ring_scenario on a model that keeps everything and on one with the ring (kv_seqs as given), same kernels */
static void ring_vs_keep(const char *dir, enum hearth_backend_kind be, enum hearth_dtype dt, int kv_seqs, int far_cut) {
  struct hearth_err err = {0};
  struct ring_trace ta = {0}, tb = {0};
  int held_a = 0, held_b = 0;
  struct hearth_model *m = ring_load(dir, be, dt, 4096, -1, NULL, &err);
  CHECKF(m != NULL, "load (keep everything): %s", err.msg);
  if (!m) return;
  CHECK(m->kv.swa.n_blocks == 0);
  CHECK(ring_scenario(m, &ta, far_cut, &held_a) == 0);
  hearth_model_free(m);
  m = ring_load(dir, be, dt, 4096, kv_seqs, NULL, &err);
  CHECKF(m != NULL, "load (ring): %s", err.msg);
  if (!m) { free(ta.v); return; }
  CHECK(m->kv.swa.n_blocks > 0);
  const int bound = ring_bound(m);
  CHECK(ring_scenario(m, &tb, far_cut, &held_b) == 0);
  hearth_model_free(m);
  long d = rt_diff(&ta, &tb);
  CHECKF(d < 0, "dtype %d kv_seqs %d: the ring's trace differs from keeping everything at value %ld of %zu (%g vs %g)",
         (int)dt, kv_seqs, d, ta.n, d >= 0 && (size_t)d < ta.n ? ta.v[d] : 0.0, d >= 0 && (size_t)d < tb.n ? tb.v[d] : 0.0);
  CHECKF(held_b >= 1 && held_b <= bound, "a session held %d sliding blocks (bound %d)", held_b, bound);
  CHECK(held_a == 0);
  free(ta.v);
  free(tb.v);
}

/* One long session in a small sliding pool: kv_tokens 4096 (256 blocks) with kv_seqs 1 gives the sliding layers
 * 2·(ceil(7/16) + 2) + 512/16 = 38 blocks, fewer than a 1,000-token session has (63): it completes only because
 * blocks below the window go back and the prefix cache gives up its oldest sliding parts. A second session resumes
 * the whole prefix (its last window's sliding blocks are the cache's newest); a third, a prefix whose sliding
 * blocks were given up, is recomputed. Logits bit-identical to keeping everything. */
__attribute__((unused)) static void ring_small_pool_case(const char *dir, enum hearth_backend_kind be, enum hearth_dtype dt) {
  struct hearth_err err = {0};
  enum { N = 1000 };
  int32_t *t = malloc((N + 1) * sizeof *t), *u = malloc(201 * sizeof *u);
  REQUIRE(t && u);
  float *want[3] = {0}, *got[3] = {0};
  int reused[2][3] = {{0}};
  for (int k = 0; k < 2; k++) {
    struct hearth_model *m = ring_load(dir, be, dt, 4096, k ? 1 : -1, NULL, &err);
    CHECKF(m != NULL, "load: %s", err.msg);
    if (!m) break;
    const int V = hearth_model_info(m)->n_vocab;
    for (int i = 0; i < N + 1; i++) t[i] = (i * 41 + 3 + i / 7) % V;
    for (int i = 0; i < 201; i++) u[i] = i < 200 ? t[i] : 9;
    if (k) CHECKF(m->kv.swa.n_blocks == 38 && m->kv.n_blocks == 256, "pools %d / %d", m->kv.swa.n_blocks, m->kv.n_blocks);
    struct hearth_session *s = NULL;
    float **out = k ? got : want;
    for (int j = 0; j < 3; j++) out[j] = malloc((size_t)V * sizeof(float));
    const int32_t *ids[3] = {t, t, u};
    const int n[3] = {N, N + 1, 201};
    for (int j = 0; j < 3; j++) {
      if (hearth_session_new(m, NULL, &s, &err) || hearth_session_sync(s, ids[j], n[j], &err)) {
        CHECKF(0, "kv_seqs %d, session %d: %s", k ? 1 : -1, j, err.msg);
        hearth_session_free(s);
        break;
      }
      if (k) CHECKF(session_swa_held(s) <= ring_bound(m), "held %d", session_swa_held(s));
      memcpy(out[j], hearth_session_logits(s), (size_t)V * sizeof(float));
      reused[k][j] = hearth_session_n_reused(s);
      hearth_session_free(s);
    }
    if (k) CHECKF(m->kv.swa.peak_used <= m->kv.swa.n_blocks, "peak %lld", (long long)m->kv.swa.peak_used);
    for (int j = 0; j < 3 && k; j++)
      CHECKF(want[j] && !memcmp(want[j], got[j], (size_t)V * sizeof(float)), "session %d: logits differ from keeping everything", j);
    hearth_model_free(m);
  }
  CHECKF(reused[0][1] == 992 && reused[1][1] == 992, "the whole prefix resumed: %d / %d tokens", reused[0][1], reused[1][1]);
  CHECKF(reused[0][2] == 192 && reused[1][2] == 0, "a prefix whose sliding blocks went: %d / %d tokens reused",
         reused[0][2], reused[1][2]);
  for (int j = 0; j < 3; j++) { free(want[j]); free(got[j]); }
  free(t);
  free(u);
}

/* The disk store with sliding blocks (format version 3): a ring model's blocks saved by one load resume a long
 * prompt (144 of 150 tokens, far past the window) in the next, with the logits of keeping everything bit for bit;
 * files of the layout before (version 2, written by a model that keeps everything) are not taken by a ring model,
 * and the reverse. Every run but the restoring one evaluates 144 tokens and then 6, so that the last 6 run through
 * the same kernels as after the restore (a device's kernels may depend on the batch's shape). */
static void ring_disk_case(const char *dir, enum hearth_backend_kind be, enum hearth_dtype dt) {
  char store[300], cmd[700];
  snprintf(store, sizeof store, "/tmp/hearth_test_ring_kv_XXXXXX");
  REQUIRE(mkdtemp(store));
  struct hearth_err err = {0};
  enum { N = 150, P = 144 };
  int32_t t[N];
  for (int i = 0; i < N; i++) t[i] = (i * 29 + 7) % 512;
  float *want = NULL;
  /* rounds: ring writes; ring reads 9 blocks; keep-everything finds version 3 files and ignores them (removing
   * them), writing version 2; ring ignores those in turn */
  const int seqs[4] = {1, 1, -1, 1};
  for (int r = 0; r < 4; r++) {
    struct hearth_model *m = ring_load(dir, be, dt, 4096, seqs[r], store, &err);
    CHECKF(m != NULL, "round %d: %s", r, err.msg);
    if (!m) break;
    const int V = hearth_model_info(m)->n_vocab;
    struct hearth_session *s = NULL;
    CHECK(hearth_session_new(m, NULL, &s, &err) == 0);
    int rc = !s;
    if (!rc && r == 1) rc = hearth_session_sync(s, t, N, &err);
    else if (!rc) rc = hearth_session_sync(s, t, P, &err) || hearth_session_append(s, t + P, N - P, &err);
    CHECKF(rc == 0, "round %d: %s", r, err.msg);
    if (!rc && r != 1) CHECKF(hearth_session_n_reused(s) == 0, "round %d: reused %d tokens", r, hearth_session_n_reused(s));
    if (!rc && r == 1) CHECKF(hearth_session_n_reused(s) == P, "round 1: reused %d tokens, want %d", hearth_session_n_reused(s), P);
    if (!rc && !want && (want = malloc((size_t)V * sizeof *want))) memcpy(want, hearth_session_logits(s), (size_t)V * sizeof *want);
    else if (!rc && want)
      CHECKF(!memcmp(want, hearth_session_logits(s), (size_t)V * sizeof *want), "round %d: logits differ from round 0", r);
    hearth_session_free(s);
    hearth_model_free(m); /* saves what is noted */
  }
  free(want);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", store);
  CHECK(system(cmd) == 0);
}

/* A prompt longer than a forward pass (1,200 tokens; 512 a pass on the CPU): the sliding blocks of its early passes
 * go back before the call keys its blocks, so those are saved without their sliding part; the prompt still resumes
 * from the disk (1,184 tokens), the sliding blocks of its last window being saved whole; logits bit-identical to
 * keeping everything, which evaluates the same 1,184 + 16 tokens. */
static void ring_disk_long_case(const char *dir, enum hearth_backend_kind be, enum hearth_dtype dt) {
  char store[300], cmd[700];
  snprintf(store, sizeof store, "/tmp/hearth_test_ring_kvl_XXXXXX");
  REQUIRE(mkdtemp(store));
  struct hearth_err err = {0};
  enum { N = 1200, P = 1184 };
  int32_t *t = malloc(N * sizeof *t);
  REQUIRE(t);
  for (int i = 0; i < N; i++) t[i] = (i * 31 + 5 + i / 11) % 512;
  float *want = NULL;
  const int seqs[3] = {-1, 1, 1}; /* keep everything (no store); ring writes; ring reads */
  for (int r = 0; r < 3; r++) {
    struct hearth_model *m = ring_load(dir, be, dt, 4096, seqs[r], r ? store : NULL, &err);
    CHECKF(m != NULL, "round %d: %s", r, err.msg);
    if (!m) break;
    const int V = hearth_model_info(m)->n_vocab;
    struct hearth_session *s = NULL;
    CHECK(hearth_session_new(m, NULL, &s, &err) == 0);
    int rc = !s;
    if (!rc && r == 2) rc = hearth_session_sync(s, t, N, &err);
    else if (!rc) rc = hearth_session_sync(s, t, P, &err) || hearth_session_append(s, t + P, N - P, &err);
    CHECKF(rc == 0, "round %d: %s", r, err.msg);
    if (!rc && r == 2) CHECKF(hearth_session_n_reused(s) == P, "reused %d tokens from the disk, want %d", hearth_session_n_reused(s), P);
    if (!rc && r == 1) CHECKF(session_swa_held(s) <= ring_bound(m), "held %d", session_swa_held(s));
    if (!rc && !want && (want = malloc((size_t)V * sizeof *want))) memcpy(want, hearth_session_logits(s), (size_t)V * sizeof *want);
    else if (!rc && want)
      CHECKF(!memcmp(want, hearth_session_logits(s), (size_t)V * sizeof *want), "round %d: logits differ from keeping everything", r);
    hearth_session_free(s);
    hearth_model_free(m);
  }
  free(want);
  free(t);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", store);
  CHECK(system(cmd) == 0);
}
