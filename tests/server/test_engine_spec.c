/* tests/server/test_engine_spec.c — prompt-lookup speculation in the server engine (engine_params.speculate):
 * on every generative fixture, greedy requests with logprobs give the same events (ids and logprob bits) and the
 * same finish as with speculation off — 8 at once (batch width 8) and one at a time (width 1), then again with
 * prompts that continue the first round's prompt and output (prefix-cache hits on blocks keyed by speculative
 * steps), with max_tokens and n_ctx ending requests mid-draft and a logit_bias request in the batch (which turns
 * speculation off for those steps). The speculative engine must have drafted and taken tokens.
 * Group cuda (label cuda): the same on the CUDA backend (Qwen fixtures), where a step speculates only when it holds
 * one sequence (its verify's rows computed as one-token steps): one request at a time speculates, 8 at once run
 * plainly until one is left, and the events are those of speculation off either way. */
#include <string.h>

#include "hearth.h"
#include "server/engine.h"
#include "test.h"

#define FIX HEARTH_SOURCE_DIR "/tests/fixtures/model/"
enum { NQ = 8, NCTX = 160, MAXEV = 200 };

struct out {
  struct gen_event ev[2][NQ][MAXEV];
  int n[2][NQ];
  enum gen_finish fin[2][NQ];
  struct engine_stats st;
};

static int make_prompt(int i, int V, int32_t *t) {
  int n = 20 + (i * 7) % 30;
  for (int k = 0; k < n; k++) t[k] = k < 3 ? (i * 131 + k * 17 + 9) % V : (k % (2 + i % 5)) * 41 % V + 2;
  return n;
}

static struct gen_req *request(const int32_t *p, int n, int i) {
  struct gen_req *q = gen_req_new();
  if (!q) return NULL;
  q->prompt = malloc((size_t)n * sizeof *q->prompt);
  memcpy(q->prompt, p, (size_t)n * sizeof *p);
  q->n_prompt = n;
  hearth_sampling_default(&q->sampling);
  q->sampling.temperature = 0.0f;
  q->max_tokens = i == 1 ? 1 : i == 2 ? 2 : 40 + 11 * i; /* some end after one or two tokens */
  q->top_logprobs = i == 3 ? -1 : 0;                     /* logprobs but for one */
  q->ignore_eos = i % 2;
  if (i == 5) { /* logit_bias: the steps it is in run plainly (it ends early, so the others speculate after) */
    q->max_tokens = 6;
    q->n_bias = 1;
    q->bias_id = malloc(sizeof *q->bias_id);
    q->bias = malloc(sizeof *q->bias);
    q->bias_id[0] = 7;
    q->bias[0] = 3.0f;
  }
  return q;
}

/* one round: NQ requests (prompt i, or prompt i + the first round's output when cont) through engine e, all at
 * once (width 8) or one after another (width 1) */
static int round_(struct engine *e, int V, int at_once, int r, struct out *o) {
  struct gen_req *qs[NQ];
  int32_t p[NCTX + MAXEV];
  for (int i = 0; i < NQ; i++) {
    int n = make_prompt(i, V, p);
    if (r == 1) /* continue round 0: its prompt and up to 60 of its ids (blocks keyed while speculating) */
      for (int j = 0; j < o->n[0][i] && j < 60 && n < NCTX - 4; j++) p[n++] = o->ev[0][i][j].id;
    if (i == 7) n = NCTX - 20; /* the context ends this one (GEN_FIN_LENGTH mid-draft) */
    if (i == 7) for (int k = 0; k < n; k++) p[k] = (k % 3) * 5 + 1;
    qs[i] = request(p, n, i);
    if (!qs[i]) return -1;
  }
  struct hearth_err err = {0};
  for (int i = 0; i < NQ; i++) {
    if (at_once ? i == 0 && engine_submit_many(e, qs, NQ, &err) : engine_submit(e, qs[i], &err)) {
      fprintf(stderr, "submit: %s\n", err.msg);
      return -1;
    }
    for (int j = at_once ? 0 : i; j <= i || (at_once && j < NQ); j++) { /* width 1: wait for it */
      if (at_once && i < NQ - 1) break;
      enum gen_finish fin = GEN_RUNNING;
      int got = 0;
      while (fin == GEN_RUNNING) {
        int k = gen_req_take(qs[j], got, o->ev[r][j] + got, MAXEV - got, 1000, &fin);
        got += k;
        if (got >= MAXEV) return -1;
      }
      o->n[r][j] = got;
      o->fin[r][j] = fin;
    }
  }
  for (int i = 0; i < NQ; i++) gen_req_unref(qs[i]);
  return 0;
}

static int serve_w(struct hearth_model *m, int slots, int speculate, int width, struct out *o) {
  struct engine_params ep = {.n_slots = slots, .n_ctx = NCTX, .max_queue = 64, .speculate = speculate,
                             .speculate_width = width};
  struct engine *e = NULL;
  struct hearth_err err = {0};
  if (engine_new(m, &ep, &e, &err)) {
    fprintf(stderr, "engine_new: %s\n", err.msg);
    return -1;
  }
  const int V = hearth_model_info(m)->n_vocab;
  int rc = round_(e, V, slots > 1, 0, o);
  if (!rc) rc = round_(e, V, slots > 1, 1, o);
  engine_stats(e, &o->st);
  engine_free(e);
  return rc;
}

/* speculate_width 8: the batch of 8 speculates too (the server's default is 1, by measurement) */
static int serve(struct hearth_model *m, int slots, int speculate, struct out *o) {
  return serve_w(m, slots, speculate, NQ, o);
}

static struct hearth_model *load(const char *dir, enum hearth_backend_kind be) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = dir;
  p.backend = be;
  p.n_threads = 2;
  p.kv_seqs = -1; /* Gemma 4 keeps every position: its sliding-window pool turns speculation off (decisions.md) */
  p.kv_tokens = 8 * NCTX * 2;
  struct hearth_model *m = NULL;
  struct hearth_err err = {0};
  if (hearth_model_load(&p, &m, &err)) fprintf(stderr, "load %s: %s\n", dir, err.msg);
  return m;
}

static void same(const struct out *a, const struct out *b, const char *what) {
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < NQ; i++) {
      CHECKF(a->n[r][i] == b->n[r][i] && a->fin[r][i] == b->fin[r][i], "%s round %d req %d: %d events fin %d, plain %d fin %d",
             what, r, i, a->n[r][i], (int)a->fin[r][i], b->n[r][i], (int)b->fin[r][i]);
      for (int j = 0; j < a->n[r][i] && j < b->n[r][i]; j++)
        if (a->ev[r][i][j].id != b->ev[r][i][j].id || memcmp(&a->ev[r][i][j].logprob, &b->ev[r][i][j].logprob, sizeof(float))) {
          CHECKF(0, "%s round %d req %d event %d: id %d lp %.9g, plain id %d lp %.9g", what, r, i, j, a->ev[r][i][j].id,
                 (double)a->ev[r][i][j].logprob, b->ev[r][i][j].id, (double)b->ev[r][i][j].logprob);
          break;
        }
    }
}

static const char *const FIXTURES[] = {"qwen2", "qwen2_sharded", "qwen3", "gemma4_dense", "gemma4_e"};

TEST_GROUP(identical) {
  static struct out plain, spec;
  unsigned long drafted = 0, accepted = 0;
  for (size_t f = 0; f < sizeof FIXTURES / sizeof FIXTURES[0]; f++) {
    char dir[512];
    snprintf(dir, sizeof dir, FIX "%s", FIXTURES[f]);
    for (int slots = 1; slots <= NQ; slots += NQ - 1) {
      /* a fresh model each: the prefix cache starts empty for both */
      struct hearth_model *m = load(dir, HEARTH_BACKEND_CPU);
      REQUIRE(m);
      REQUIRE(serve(m, slots, 0, &plain) == 0);
      hearth_model_free(m);
      m = load(dir, HEARTH_BACKEND_CPU);
      REQUIRE(m);
      REQUIRE(serve(m, slots, HEARTH_SPEC_MAX, &spec) == 0);
      hearth_model_free(m);
      char what[64];
      snprintf(what, sizeof what, "%s width %d", FIXTURES[f], slots);
      same(&spec, &plain, what);
      CHECK(plain.st.n_spec_steps == 0);
      CHECKF(spec.st.n_cached_tokens > 0, "%s: no prefix hit", what);
      printf("%s: %lu spec steps of %lu, %lu drafted, %lu accepted\n", what, spec.st.n_spec_steps, spec.st.n_steps,
             spec.st.n_spec_drafted, spec.st.n_spec_accepted);
      drafted += spec.st.n_spec_drafted;
      accepted += spec.st.n_spec_accepted;
    }
  }
  CHECKF(accepted > 0 && accepted < drafted, "drafted %lu accepted %lu", drafted, accepted);
}

/* the default width (1): a step with several decoding sequences runs plainly, so far fewer steps speculate than at
 * width 8 — and the events are the same either way */
TEST_GROUP(default_width) {
  static struct out w1, w8;
  struct hearth_model *m = load(FIX "gemma4_dense", HEARTH_BACKEND_CPU);
  REQUIRE(m);
  REQUIRE(serve_w(m, NQ, HEARTH_SPEC_MAX, 0, &w1) == 0);
  hearth_model_free(m);
  m = load(FIX "gemma4_dense", HEARTH_BACKEND_CPU);
  REQUIRE(m);
  REQUIRE(serve_w(m, NQ, HEARTH_SPEC_MAX, NQ, &w8) == 0);
  hearth_model_free(m);
  same(&w1, &w8, "default width");
  CHECKF(w1.st.n_spec_steps * 2 < w8.st.n_spec_steps, "width 1: %lu spec steps, width 8: %lu", w1.st.n_spec_steps,
         w8.st.n_spec_steps);
}

/* one request of a 270-token cycle to the qwen3 fixture on CUDA (head_dim 64: its one-token steps up to 256 keys take
 * attn_o, which no verify can twin, so it drafts only past them), 80 tokens with logprobs, one slot */
static int long_one(int speculate, struct gen_event *ev, int *n, struct engine_stats *st) {
  struct hearth_model *m = load(FIX "qwen3", HEARTH_BACKEND_CUDA);
  if (!m) return -1;
  struct engine_params ep = {.n_slots = 1, .n_ctx = 512, .max_queue = 4, .speculate = speculate, .speculate_width = 1};
  struct engine *e = NULL;
  struct hearth_err err = {0};
  int32_t p[270];
  for (int k = 0; k < 270; k++) p[k] = (k % 7) * 23 % hearth_model_info(m)->n_vocab + 3;
  struct gen_req *q = request(p, 270, 0);
  int rc = !q || engine_new(m, &ep, &e, &err);
  if (!rc) {
    q->max_tokens = 80;
    q->ignore_eos = 1;
    rc = engine_submit(e, q, &err);
  }
  enum gen_finish fin = GEN_RUNNING;
  *n = 0;
  while (!rc && fin == GEN_RUNNING && *n < MAXEV) *n += gen_req_take(q, *n, ev + *n, MAXEV - *n, 1000, &fin);
  if (rc) fprintf(stderr, "long_one: %s\n", err.msg);
  if (e) engine_stats(e, st);
  engine_free(e);
  if (q) gen_req_unref(q);
  hearth_model_free(m);
  return rc;
}

TEST_GROUP(cuda) {
  static struct out plain, spec;
  static const char *const QWEN[] = {"qwen2", "qwen2_sharded"}; /* (qwen3's contexts here are all attn_o's) */
  unsigned long drafted = 0, accepted = 0;
  for (int f = 0; f < 2; f++) {
    char dir[512];
    snprintf(dir, sizeof dir, FIX "%s", QWEN[f]);
    for (int slots = 1; slots <= NQ; slots += NQ - 1) {
      struct hearth_model *m = load(dir, HEARTH_BACKEND_CUDA);
      REQUIRE(m);
      REQUIRE(serve(m, slots, 0, &plain) == 0);
      hearth_model_free(m);
      m = load(dir, HEARTH_BACKEND_CUDA);
      REQUIRE(m);
      REQUIRE(serve(m, slots, HEARTH_SPEC_MAX, &spec) == 0);
      CHECK(hearth_model_info(m)->can_speculate == 1);
      hearth_model_free(m);
      char what[64];
      snprintf(what, sizeof what, "cuda %s width %d", QWEN[f], slots);
      same(&spec, &plain, what);
      printf("%s: %lu spec steps of %lu, %lu drafted, %lu accepted\n", what, spec.st.n_spec_steps, spec.st.n_steps,
             spec.st.n_spec_drafted, spec.st.n_spec_accepted);
      if (slots == 1) CHECKF(spec.st.n_spec_drafted > 0, "%s: nothing drafted", what);
      drafted += spec.st.n_spec_drafted;
      accepted += spec.st.n_spec_accepted;
    }
  }
  static struct gen_event lp[MAXEV], ls[MAXEV];
  struct engine_stats st0, st1;
  int n0 = 0, n1 = 0;
  REQUIRE(long_one(0, lp, &n0, &st0) == 0 && long_one(HEARTH_SPEC_MAX, ls, &n1, &st1) == 0);
  CHECKF(n0 == n1 && n0 > 0, "cuda qwen3 long: %d events, plain %d", n1, n0);
  for (int j = 0; j < n0 && j < n1; j++)
    if (lp[j].id != ls[j].id || memcmp(&lp[j].logprob, &ls[j].logprob, sizeof(float))) {
      CHECKF(0, "cuda qwen3 long: event %d id %d lp %.9g, plain id %d lp %.9g", j, ls[j].id, (double)ls[j].logprob,
             lp[j].id, (double)lp[j].logprob);
      break;
    }
  printf("cuda qwen3 long: %lu spec steps, %lu drafted, %lu accepted\n", st1.n_spec_steps, st1.n_spec_drafted,
         st1.n_spec_accepted);
  drafted += st1.n_spec_drafted;
  accepted += st1.n_spec_accepted;
  CHECKF(accepted > 0 && accepted < drafted, "drafted %lu accepted %lu", drafted, accepted);
}

TEST_MAIN(T(identical), T(default_width), T(cuda))
