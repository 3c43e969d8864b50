/* tests/unit/test_spec.c — prompt-lookup speculation (runtime/speculate.c, hearth_sessions_step_spec):
 *   identical: on every generative fixture, greedy ids and logprobs are bit-identical to one
 *     hearth_sessions_step_greedy per token, alone and in a step of 8 sessions (finishing at different lengths),
 *     with drafts both taken and rejected (so the verify forward's rows and the KV rollback are exercised);
 *   prefix_hit: a sequence that attaches blocks keyed by a speculating one (blocks holding generated tokens) and
 *     speculates itself still decodes as plain decoding on a fresh model does — rejected positions never entered
 *     the prefix cache under the wrong tokens;
 *   limits: never more ids than asked for, none past n_ctx; a session without a hearth_spec never drafts;
 *   backoff: a sequence whose drafts keep failing drafts less and less often;
 *   cuda (label cuda): the same on the CUDA backend, whose batches are not row-invariant: a verify computes its rows
 *     as the one-token steps they stand for (set_step_twins), so on the Qwen fixtures ids and logprobs are
 *     bit-identical to plain decoding alone (every draft length), in a step of 8 (drafting once one session is
 *     left) and after prefix-cache hits, with drafts taken and rejected; the qwen3 fixture (head_dim 64) drafts
 *     within the 256 keys of attn_o's one-token steps (a verify's rows then take attn_o's twin), across them (a draft
 *     is cut at the limit: one verify never holds rows of both kinds) and past them; Gemma 4 does not speculate there.
 *     ctest runs it again with other GEMV shapes (HEARTH_TEST_GEMV) and chunked verifies (HEARTH_TEST_TWIN_ROWS). */
#include <string.h>

#include "hearth.h"
#include "test.h"

#define FIX HEARTH_SOURCE_DIR "/tests/fixtures/model/"
enum { W = HEARTH_SPEC_MAX + 1, NB = 8, MAXP = 96, MAXG = 320 };

static struct hearth_model *load(const char *dir, enum hearth_backend_kind be) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = dir;
  p.backend = be;
  p.n_threads = 2;
  p.kv_seqs = -1; /* Gemma 4 keeps every position: its sliding-window pool turns speculation off (decisions.md) */
  p.kv_tokens = 8192;
  struct hearth_model *m = NULL;
  struct hearth_err err = {0};
  if (hearth_model_load(&p, &m, &err)) fprintf(stderr, "load %s: %s\n", dir, err.msg);
  return m;
}

/* prompt i: a repeated phrase (lookups find matches) with a per-prompt head */
static int make_prompt(int i, int V, int32_t *t) {
  int n = 24 + (i * 11) % 40;
  for (int k = 0; k < n; k++) t[k] = k < 4 ? (i * 97 + k * 13 + 5) % V : (k % (3 + i % 4)) * 37 % V + 1;
  return n;
}

struct run {
  int32_t ids[NB][MAXG];
  float lp[NB][MAXG];
  int n[NB];
  uint64_t verifies, drafted, accepted;
};

/* sessions ss[0..n) hold their prompt but its last token; each decodes want[i] tokens greedily, speculating
 * with drafts up to kmax (0: plain steps, one token each) */
static int decode(struct hearth_session **ss, int n, const int32_t *last, const int *want, int kmax, struct run *r) {
  struct hearth_err err = {0};
  struct hearth_spec *sp[NB] = {0};
  int32_t pend[NB];
  int rc = 0;
  for (int i = 0; i < n; i++) {
    pend[i] = last[i];
    r->n[i] = 0;
    if (kmax && !rc) rc = hearth_spec_new(kmax, &sp[i], &err);
  }
  while (!rc) {
    struct hearth_session *as[NB];
    struct hearth_spec *asp[NB];
    int idx[NB], aw[NB], na = 0;
    for (int i = 0; i < n; i++)
      if (r->n[i] < want[i] && (r->n[i] == 0 || r->ids[i][r->n[i] - 1] >= 0)) {
        idx[na] = i;
        as[na] = ss[i];
        asp[na] = sp[i];
        aw[na++] = want[i] - r->n[i];
      }
    if (!na) break;
    int32_t ap[NB], ids[NB * W];
    float lps[NB * W];
    int nid[NB];
    for (int a = 0; a < na; a++) ap[a] = pend[idx[a]];
    if (kmax) {
      rc = hearth_sessions_step_spec(as, na, ap, asp, aw, ids, lps, nid, &err);
    } else {
      const int32_t *tp[NB];
      int one[NB];
      int32_t g[NB];
      float gl[NB];
      for (int a = 0; a < na; a++) { tp[a] = &ap[a]; one[a] = 1; }
      rc = hearth_sessions_step_greedy(as, na, tp, one, g, gl, &err);
      for (int a = 0; a < na; a++) { ids[a * W] = g[a]; lps[a * W] = gl[a]; nid[a] = 1; }
    }
    for (int a = 0; !rc && a < na; a++) {
      const int i = idx[a];
      if (nid[a] < 1 || nid[a] > aw[a]) { fprintf(stderr, "%d ids for %d wanted\n", nid[a], aw[a]); rc = -1; break; }
      for (int j = 0; j < nid[a]; j++) {
        r->ids[i][r->n[i]] = ids[a * W + j];
        r->lp[i][r->n[i]++] = lps[a * W + j];
      }
      pend[i] = ids[a * W + nid[a] - 1];
    }
  }
  if (rc) fprintf(stderr, "decode: %s\n", err.msg);
  r->verifies = r->drafted = r->accepted = 0;
  for (int i = 0; i < n; i++) {
    uint64_t v = 0, d = 0, a = 0;
    if (sp[i]) hearth_spec_counts(sp[i], &v, &d, &a);
    r->verifies += v;
    r->drafted += d;
    r->accepted += a;
    hearth_spec_free(sp[i]);
  }
  return rc;
}

/* n sessions on m with prompts 0..n (first: the prompt index of session 0), decoded with kmax */
static int generate(struct hearth_model *m, int first, int n, const int *want, int kmax, struct run *r) {
  const int V = hearth_model_info(m)->n_vocab;
  struct hearth_session *ss[NB] = {0};
  int32_t p[MAXP], last[NB];
  struct hearth_err err = {0};
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    int np = make_prompt(first + i, V, p);
    rc = hearth_session_new(m, NULL, &ss[i], &err);
    if (!rc) rc = hearth_session_sync(ss[i], p, np - 1, &err);
    last[i] = p[np - 1];
  }
  if (!rc) rc = decode(ss, n, last, want, kmax, r);
  else fprintf(stderr, "generate: %s\n", err.msg);
  for (int i = 0; i < n; i++) hearth_session_free(ss[i]);
  return rc;
}

static void same(const struct run *a, const struct run *b, int n, const char *what) {
  for (int i = 0; i < n; i++) {
    CHECKF(a->n[i] == b->n[i], "%s: seq %d: %d ids, plain %d", what, i, a->n[i], b->n[i]);
    int k = a->n[i] < b->n[i] ? a->n[i] : b->n[i], first = -1;
    for (int j = 0; j < k && first < 0; j++)
      if (a->ids[i][j] != b->ids[i][j] || memcmp(&a->lp[i][j], &b->lp[i][j], sizeof(float))) first = j;
    CHECKF(first < 0, "%s: seq %d differs at %d: id %d lp %.9g, plain id %d lp %.9g", what, i, first,
           a->ids[i][first], (double)a->lp[i][first], b->ids[i][first], (double)b->lp[i][first]);
  }
}

static const char *const FIXTURES[] = {"qwen2", "qwen2_sharded", "qwen3", "gemma4_dense", "gemma4_e"};

/* with its sliding-window pool (the default kv_seqs), a Gemma 4 model does not speculate: a verify pass could give
 * back sliding blocks the cut to the accepted tokens still needs; a step with a hearth_spec then drafts nothing */
TEST_GROUP(off_with_ring) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = FIX "gemma4_e";
  p.n_threads = 2;
  p.kv_tokens = 8192;
  struct hearth_model *m = NULL;
  struct hearth_err err = {0};
  REQUIRE(hearth_model_load(&p, &m, &err) == 0);
  CHECK(hearth_model_info(m)->can_speculate == 0);
  struct hearth_session *s = NULL;
  struct hearth_spec *spec = NULL;
  REQUIRE(hearth_session_new(m, NULL, &s, &err) == 0 && hearth_spec_new(HEARTH_SPEC_MAX, &spec, &err) == 0);
  int32_t ids[HEARTH_SPEC_MAX + 1], pend, cyc[40];
  for (int k = 0; k < 40; k++) cyc[k] = (k % 4) * 5 + 1; /* a cycle: plenty to draft from */
  REQUIRE(hearth_session_sync(s, cyc, 39, &err) == 0);
  pend = cyc[39];
  for (int step = 0; step < 8; step++) {
    int n = 0, want = 8;
    REQUIRE(hearth_sessions_step_spec(&s, 1, &pend, &spec, &want, ids, NULL, &n, &err) == 0);
    CHECK(n == 1);
    pend = ids[0];
  }
  uint64_t v = 0, d = 0, a = 0;
  hearth_spec_counts(spec, &v, &d, &a);
  CHECKF(d == 0, "drafted %llu tokens", (unsigned long long)d);
  hearth_spec_free(spec);
  hearth_session_free(s);
  hearth_model_free(m);
}

TEST_GROUP(identical) {
  static struct run plain, spec;
  uint64_t drafted = 0, accepted = 0;
  for (size_t f = 0; f < sizeof FIXTURES / sizeof FIXTURES[0]; f++) {
    char dir[512];
    snprintf(dir, sizeof dir, FIX "%s", FIXTURES[f]);
    struct hearth_model *m = load(dir, HEARTH_BACKEND_CPU);
    REQUIRE(m);
    CHECK(hearth_model_info(m)->can_speculate == 1);
    int want[NB];
    for (int i = 0; i < NB; i++) want[i] = 40 + 13 * i; /* they finish at different steps */
    for (int k = 1; k <= HEARTH_SPEC_MAX; k *= 2) { /* batch 1, every draft length */
      CHECK(generate(m, 0, 1, want, 0, &plain) == 0);
      CHECK(generate(m, 0, 1, want, k, &spec) == 0);
      char what[64];
      snprintf(what, sizeof what, "%s b1 k%d", FIXTURES[f], k);
      same(&spec, &plain, 1, what);
      drafted += spec.drafted;
      accepted += spec.accepted;
    }
    /* batch 8: plain decoding in a step of 8 as the reference */
    CHECK(generate(m, 0, NB, want, 0, &plain) == 0);
    CHECK(generate(m, 0, NB, want, HEARTH_SPEC_MAX, &spec) == 0);
    char what[64];
    snprintf(what, sizeof what, "%s b8", FIXTURES[f]);
    same(&spec, &plain, NB, what);
    printf("%s b8: %llu verifies, %llu drafted, %llu accepted\n", FIXTURES[f], (unsigned long long)spec.verifies,
           (unsigned long long)spec.drafted, (unsigned long long)spec.accepted);
    drafted += spec.drafted;
    accepted += spec.accepted;
    hearth_model_free(m);
  }
  /* the test means something only if drafts were both taken and rejected */
  CHECKF(accepted > 0 && accepted < drafted, "drafted %llu accepted %llu", (unsigned long long)drafted,
         (unsigned long long)accepted);
}

/* Session a decodes after prompt 0; session b's prompt is prompt 0 and the first 80 tokens a generated, so b's
 * blocks come from the prefix cache, keyed by a's steps; b decodes on. With speculation in both (a's blocks keyed
 * by verify steps after rollbacks) b's ids and logprobs must be those of the same scenario decoded plainly. */
static int hit_scenario(const char *dir, enum hearth_backend_kind be, int kmax, struct run *rb) {
  static struct run ra;
  struct hearth_model *m = load(dir, be);
  if (!m) return -1;
  const int V = hearth_model_info(m)->n_vocab;
  struct hearth_err err = {0};
  int32_t p[MAXP + MAXG];
  int np = make_prompt(0, V, p), rc = 0, want = 100;
  struct hearth_session *a = NULL, *b = NULL;
  if (hearth_session_new(m, NULL, &a, &err) || hearth_session_new(m, NULL, &b, &err) ||
      hearth_session_sync(a, p, np - 1, &err) || decode(&a, 1, &p[np - 1], &want, kmax, &ra))
    rc = -1;
  rb->verifies = ra.verifies; /* a's counts, added to b's below */
  rb->drafted = ra.drafted;
  rb->accepted = ra.accepted;
  memcpy(p + np, ra.ids[0], 80 * sizeof *p);
  const int nb = np + 80;
  if (!rc && hearth_session_sync(b, p, nb - 1, &err)) rc = -1;
  CHECKF(rc || hearth_session_n_reused(b) >= 16 * ((nb - 2) / 16), "%s: reused %d of %d", dir,
         hearth_session_n_reused(b), nb - 1);
  want = 60;
  const uint64_t dv = rb->verifies, dd = rb->drafted, da = rb->accepted;
  if (!rc) rc = decode(&b, 1, &p[nb - 1], &want, kmax, rb);
  rb->verifies += dv;
  rb->drafted += dd;
  rb->accepted += da;
  if (rc) fprintf(stderr, "hit_scenario: %s\n", err.msg);
  hearth_session_free(a);
  hearth_session_free(b);
  hearth_model_free(m);
  return rc;
}

TEST_GROUP(prefix_hit) {
  static struct run plain, spec;
  uint64_t drafted = 0, accepted = 0;
  for (size_t f = 0; f < sizeof FIXTURES / sizeof FIXTURES[0]; f++) {
    char dir[512];
    snprintf(dir, sizeof dir, FIX "%s", FIXTURES[f]);
    REQUIRE(hit_scenario(dir, HEARTH_BACKEND_CPU, 0, &plain) == 0);
    REQUIRE(hit_scenario(dir, HEARTH_BACKEND_CPU, HEARTH_SPEC_MAX, &spec) == 0);
    printf("%s: %llu drafted, %llu accepted\n", FIXTURES[f], (unsigned long long)spec.drafted,
           (unsigned long long)spec.accepted);
    drafted += spec.drafted;
    accepted += spec.accepted;
    char what[64];
    snprintf(what, sizeof what, "%s prefix hit", FIXTURES[f]);
    same(&spec, &plain, 1, what);
  }
  CHECKF(accepted > 0 && accepted < drafted, "drafted %llu accepted %llu", (unsigned long long)drafted,
         (unsigned long long)accepted);
}

TEST_GROUP(limits) {
  struct hearth_model *m = load(FIX "qwen2", HEARTH_BACKEND_CPU);
  REQUIRE(m);
  const int V = hearth_model_info(m)->n_vocab;
  struct hearth_err err = {0};
  struct hearth_session_params sp = {.n_ctx = 64};
  struct hearth_session *s = NULL;
  struct hearth_spec *spec = NULL;
  REQUIRE(hearth_session_new(m, &sp, &s, &err) == 0 && hearth_spec_new(HEARTH_SPEC_MAX, &spec, &err) == 0);
  int32_t p[MAXP];
  for (int k = 0; k < 40; k++) p[k] = (k % 4) * 5 + 1; /* a cycle: drafts everywhere */
  REQUIRE(hearth_session_sync(s, p, 39, &err) == 0);
  int32_t pend = p[39], ids[W];
  int n = 0, total = 0, steps = 0;
  while (hearth_session_n_tokens(s) + 1 < 64 && steps++ < 64) {
    int want = 3;
    REQUIRE(hearth_sessions_step_spec(&s, 1, &pend, &spec, &want, ids, NULL, &n, &err) == 0);
    CHECK(n >= 1 && n <= want);
    total += n;
    pend = ids[n - 1];
  }
  CHECKF(hearth_session_n_tokens(s) == 63, "held %d", hearth_session_n_tokens(s)); /* room for the pending one */
  /* every emitted id but the pending one is held: the prompt's 39, then one per id */
  CHECKF(39 + total == hearth_session_n_tokens(s), "emitted %d ids, held %d", total, hearth_session_n_tokens(s));
  uint64_t v = 0, d = 0, a = 0;
  hearth_spec_counts(spec, &v, &d, &a);
  CHECK(d > 0 && d <= 2 * v); /* want 3: drafts of at most 2 */
  /* without a hearth_spec (or without want) nothing is drafted: one id */
  hearth_session_free(s);
  REQUIRE(hearth_session_new(m, NULL, &s, &err) == 0);
  REQUIRE(hearth_session_sync(s, p, 39, &err) == 0);
  struct hearth_spec *none = NULL;
  int want = 8;
  REQUIRE(hearth_sessions_step_spec(&s, 1, &pend, &none, &want, ids, NULL, &n, &err) == 0);
  CHECK(n == 1 && hearth_session_n_tokens(s) == 40);
  REQUIRE(hearth_sessions_step_spec(&s, 1, &ids[0], &spec, NULL, ids, NULL, &n, &err) == 0);
  CHECK(n == 1 && hearth_session_n_tokens(s) == 41);
  CHECK(hearth_spec_new(0, &none, &err) == HEARTH_ERR_ARG && hearth_spec_new(HEARTH_SPEC_MAX + 1, &none, &err) == HEARTH_ERR_ARG);
  (void)V;
  hearth_spec_free(spec);
  hearth_session_free(s);
  hearth_model_free(m);
}

/* a context whose n-grams always recur with another continuation: every draft fails at its first token. The
 * backoff must make verifies rare (a forward of extra rows is the whole cost of a failed draft). */
TEST_GROUP(backoff) {
  struct hearth_model *m = load(FIX "qwen2", HEARTH_BACKEND_CPU);
  REQUIRE(m);
  struct hearth_err err = {0};
  struct hearth_session *s = NULL;
  struct hearth_spec *spec = NULL;
  REQUIRE(hearth_session_new(m, NULL, &s, &err) == 0 && hearth_spec_new(HEARTH_SPEC_MAX, &spec, &err) == 0);
  int32_t p[4] = {3, 4, 3, 4};
  REQUIRE(hearth_session_sync(s, p, 4, &err) == 0);
  /* feed the pending tokens ourselves (teacher forcing "3 4 3 4 ..." after a different argmax): the lookup of
   * "3 4" always drafts 3 4 ..., and we count verifies over many steps */
  int steps = 0;
  uint64_t v = 0, d = 0, a = 0;
  for (; steps < 400; steps++) {
    int32_t pend = p[steps % 2], ids[W];
    int n, want = 2;
    REQUIRE(hearth_sessions_step_spec(&s, 1, &pend, &spec, &want, ids, NULL, &n, &err) == 0);
    if (n == 2) { /* the draft was taken: fine, but then the context is not what we teach; cut back */
      break;
    }
  }
  hearth_spec_counts(spec, &v, &d, &a);
  if (a == 0) CHECKF(v * 20 <= (uint64_t)steps, "%llu verifies in %d failing steps", (unsigned long long)v, steps);
  hearth_spec_free(spec);
  hearth_session_free(s);
  hearth_model_free(m);
}

/* one session after an n-token cycle, 80 tokens decoded with kmax (n = 270: past attn_o's 256 keys at head_dim 64;
 * 40: within them; 236: across them) */
static int cycle_run(struct hearth_model *m, int n, int kmax, struct run *r) {
  const int V = hearth_model_info(m)->n_vocab;
  int32_t p[270];
  for (int k = 0; k < n; k++) p[k] = (k % 7) * 23 % V + 3;
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  int want = 80, rc = hearth_session_new(m, NULL, &s, &err) || hearth_session_sync(s, p, n - 1, &err);
  if (!rc) rc = decode(&s, 1, &p[n - 1], &want, kmax, r);
  else fprintf(stderr, "cycle_run: %s\n", err.msg);
  hearth_session_free(s);
  return rc;
}

TEST_GROUP(cuda) {
  static struct run plain, spec;
  static const char *const QWEN[] = {"qwen2", "qwen2_sharded", "qwen3"};
  uint64_t drafted = 0, accepted = 0, drafted_long = 0, drafted_short = 0;
  for (size_t f = 0; f < sizeof QWEN / sizeof QWEN[0]; f++) {
    char dir[512];
    snprintf(dir, sizeof dir, FIX "%s", QWEN[f]);
    struct hearth_model *m = load(dir, HEARTH_BACKEND_CUDA);
    REQUIRE(m);
    CHECK(hearth_model_info(m)->can_speculate == 1);
    /* qwen3 (head_dim 64): one-token steps up to 256 keys take attn_o, past them the attention kernels: 300 tokens
     * after a 24-63-token prompt run through both */
    const int lng = !strcmp(QWEN[f], "qwen3");
    int want[NB];
    for (int i = 0; i < NB; i++) want[i] = lng ? 300 - 3 * i : 40 + 13 * i;
    /* CUDA's bits depend on the prefill's shape, and a prompt after a hit is a shorter prefill than a cold one: the
     * first run fills the prefix cache, so that the runs compared start from the same hits */
    CHECK(generate(m, 0, NB, want, 0, &plain) == 0);
    for (int k = 1; k <= HEARTH_SPEC_MAX; k *= 2) {
      CHECK(generate(m, 0, 1, want, 0, &plain) == 0);
      CHECK(generate(m, 0, 1, want, k, &spec) == 0);
      char what[64];
      snprintf(what, sizeof what, "cuda %s b1 k%d", QWEN[f], k);
      same(&spec, &plain, 1, what);
      drafted += spec.drafted;
      accepted += spec.accepted;
      if (lng) drafted_long += spec.drafted;
    }
    CHECK(generate(m, 0, NB, want, 0, &plain) == 0);
    CHECK(generate(m, 0, NB, want, HEARTH_SPEC_MAX, &spec) == 0);
    char what[64];
    snprintf(what, sizeof what, "cuda %s b8", QWEN[f]);
    same(&spec, &plain, NB, what);
    printf("cuda %s b8: %llu verifies, %llu drafted, %llu accepted\n", QWEN[f], (unsigned long long)spec.verifies,
           (unsigned long long)spec.drafted, (unsigned long long)spec.accepted);
    drafted += spec.drafted;
    accepted += spec.accepted;
    /* a cycle the model follows: drafts taken (the fixtures' other prompts rarely are); within attn_o's keys,
     * across them and past them */
    static const int cyc[3] = {40, 236, 270};
    for (int c = 0; lng && c < 3; c++) {
      /* (the first run fills the prefix cache: the two compared start from the same hits, as generate's) */
      CHECK(cycle_run(m, cyc[c], 0, &plain) == 0);
      CHECK(cycle_run(m, cyc[c], 0, &plain) == 0);
      CHECK(cycle_run(m, cyc[c], HEARTH_SPEC_MAX, &spec) == 0);
      snprintf(what, sizeof what, "cuda qwen3 cycle %d", cyc[c]);
      same(&spec, &plain, 1, what);
      printf("%s: %llu verifies, %llu drafted, %llu accepted\n", what, (unsigned long long)spec.verifies,
             (unsigned long long)spec.drafted, (unsigned long long)spec.accepted);
      drafted += spec.drafted;
      accepted += spec.accepted;
      if (c == 0) drafted_short += spec.drafted;
      if (c == 2) drafted_long += spec.drafted;
    }
    CHECK(hearth_model_info(m)->can_speculate == 1); /* no verify found an op without a twin */
    hearth_model_free(m);
    /* prefix hits on blocks keyed by speculative steps */
    REQUIRE(hit_scenario(dir, HEARTH_BACKEND_CUDA, 0, &plain) == 0);
    REQUIRE(hit_scenario(dir, HEARTH_BACKEND_CUDA, HEARTH_SPEC_MAX, &spec) == 0);
    snprintf(what, sizeof what, "cuda %s prefix hit", QWEN[f]);
    same(&spec, &plain, 1, what);
    drafted += spec.drafted;
    accepted += spec.accepted;
  }
  CHECKF(accepted > 0 && accepted < drafted, "drafted %llu accepted %llu", (unsigned long long)drafted,
         (unsigned long long)accepted);
  CHECKF(drafted_long > 0, "qwen3 never drafted past attn_o's keys");
  CHECKF(drafted_short > 0, "qwen3 never drafted within attn_o's keys");
  static const char *const G4[] = {"gemma4_dense", "gemma4_e"};
  for (int f = 0; f < 2; f++) {
    char dir[512];
    snprintf(dir, sizeof dir, FIX "%s", G4[f]);
    struct hearth_model *m = load(dir, HEARTH_BACKEND_CUDA);
    REQUIRE(m);
    CHECKF(hearth_model_info(m)->can_speculate == 0, "%s speculates on CUDA", G4[f]);
    hearth_model_free(m);
  }
}

TEST_MAIN(T(identical), T(off_with_ring), T(prefix_hit), T(limits), T(backoff), T(cuda))
