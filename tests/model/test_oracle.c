/* test_oracle.c — whole-model checks against the transformers 5.17 references of
 * tests/fixtures/model/<fixture>/reference.json (made by tests/oracle/make_model_fixtures.py).
 *
 * Public API only. Criteria (issue 2):
 *   f32 / bf16: greedy tokens (argmax, lowest id on ties) equal the reference's up to the first
 *     step whose reference top-1/top-2 margin is below 1e-3; the top-k logits of the last prompt
 *     position satisfy |hearth - ref| <= 1e-4 * max(1, |ref|).
 *   int4 (default dtype): teacher-forced on the int4 reference's tokens, argmax equals the next
 *     reference token on >= 90 % of the steps before the first step whose int4 reference margin
 *     is below 1e-2 (all cases of a fixture pooled); 100 % when HEARTH_Q4_EXACT=1. The same
 *     bar free-running (the parity rule: hearth's own greedy tokens fed back).
 *   embeddings: cosine with the reference >= 0.9999 (f32, bf16) and >= 0.999 (int4).
 * bf16 weights are the stored values and are computed in f32, so the bf16 path is held to the
 * f32 reference and criteria.
 */
#include <jansson.h>
#include <stdint.h>

#include "hearth.h"
#include "test.h"

#define F32_MARGIN 1e-3
#define INT4_MARGIN 1e-2
#define TOPK_REL 1e-4
#define INT4_RATE 0.90
#define MAXTOK 256

static json_t *load_ref(const char *fixture) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/model/%s/reference.json", HEARTH_SOURCE_DIR, fixture);
  json_error_t je;
  json_t *r = json_load_file(path, 0, &je);
  if (!r) fprintf(stderr, "%s: %s (line %d)\n", path, je.text, je.line);
  return r;
}

static struct hearth_model *load_model(const char *fixture, enum hearth_dtype dtype) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/model/%s", HEARTH_SOURCE_DIR, fixture);
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = path;
  p.dtype = dtype;
  /* HEARTH_TEST_BACKEND=cuda runs the same checks on the GPU (CTest label `cuda`) */
  const char *be = getenv("HEARTH_TEST_BACKEND");
  p.backend = be && !strcmp(be, "cuda") ? HEARTH_BACKEND_CUDA : HEARTH_BACKEND_CPU;
  p.n_threads = 2;
  /* HEARTH_Q4_EXACT=1: the f32-activation int4 path (hearth run --exact), held to 100 % */
  const char *ex = getenv("HEARTH_Q4_EXACT");
  p.exact = ex && !strcmp(ex, "1");
  struct hearth_model *m = NULL;
  struct hearth_err err = {0};
  int rc = hearth_model_load(&p, &m, &err);
  if (rc != 0) {
    fprintf(stderr, "hearth_model_load(%s): %s: %s\n", path, hearth_status_name(rc), err.msg);
    return NULL;
  }
  return m;
}

static struct hearth_session *new_session(struct hearth_model *m) {
  struct hearth_session_params sp = {0};
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  int rc = hearth_session_new(m, &sp, &s, &err);
  if (rc != 0) fprintf(stderr, "hearth_session_new: %s: %s\n", hearth_status_name(rc), err.msg);
  return s;
}

static int read_ints(const json_t *a, int32_t *out, int max) {
  if (!json_is_array(a)) return -1;
  int n = (int)json_array_size(a);
  if (n > max) return -1;
  for (int i = 0; i < n; i++) out[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
  return n;
}

static int read_reals(const json_t *a, double *out, int max) {
  if (!json_is_array(a)) return -1;
  int n = (int)json_array_size(a);
  if (n > max) return -1;
  for (int i = 0; i < n; i++) out[i] = json_number_value(json_array_get(a, (size_t)i));
  return n;
}

static int argmax_lowest(const float *l, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (l[i] > l[best]) best = i; /* strict: the lowest id wins ties */
  return best;
}

static int cfg_int(const json_t *ref, const char *key) {
  return (int)json_integer_value(json_object_get(json_object_get(ref, "config"), key));
}

/* dims of hearth_model_info against the fixture's config */
static void check_info(const struct hearth_model *m, const json_t *ref) {
  const struct hearth_model_info *mi = hearth_model_info(m);
  REQUIRE(mi != NULL);
  CHECKF(mi->n_vocab == cfg_int(ref, "n_vocab"), "n_vocab %d", mi->n_vocab);
  CHECKF(mi->n_embd == cfg_int(ref, "n_embd"), "n_embd %d", mi->n_embd);
  CHECKF(mi->n_layer == cfg_int(ref, "n_layer"), "n_layer %d", mi->n_layer);
  CHECKF(mi->n_head == cfg_int(ref, "n_head"), "n_head %d", mi->n_head);
  CHECKF(mi->n_head_kv == cfg_int(ref, "n_head_kv"), "n_head_kv %d", mi->n_head_kv);
  CHECKF(mi->head_dim == cfg_int(ref, "head_dim"), "head_dim %d", mi->head_dim);
  CHECKF(mi->n_ff == cfg_int(ref, "n_ff"), "n_ff %d", mi->n_ff);
  CHECKF(mi->n_ctx_train == cfg_int(ref, "n_ctx_train"), "n_ctx_train %d", mi->n_ctx_train);
  int emb = json_is_true(json_object_get(json_object_get(ref, "config"), "is_embedding"));
  CHECKF(mi->is_embedding == emb, "is_embedding %d", mi->is_embedding);
}

static int first_below(const double *margins, int n, double thr) {
  for (int i = 0; i < n; i++)
    if (margins[i] < thr) return i;
  return n;
}

/* f32 / bf16: free-running greedy must reproduce the f32 reference; top-k logits at the last
 * prompt position within TOPK_REL relative. */
static void run_lm_exact(const char *fixture, enum hearth_dtype dtype) {
  json_t *ref = load_ref(fixture);
  REQUIRE(ref != NULL);
  struct hearth_model *m = load_model(fixture, dtype);
  if (!m) { json_decref(ref); REQUIRE(m != NULL); }
  check_info(m, ref);
  struct hearth_session *s = new_session(m);
  if (!s) { hearth_model_free(m); json_decref(ref); REQUIRE(s != NULL); }
  int n_vocab = hearth_model_info(m)->n_vocab;
  struct hearth_err err = {0};
  double worst_rel = 0;
  int steps = 0, steps_total = 0;
  const json_t *cases = json_object_get(ref, "cases");
  for (size_t c = 0; c < json_array_size(cases); c++) {
    const json_t *cs = json_array_get(cases, c);
    const json_t *r = json_object_get(cs, "f32");
    int32_t prompt[MAXTOK], toks[MAXTOK], ids[64];
    double margins[MAXTOK], vals[64];
    int np = read_ints(json_object_get(cs, "prompt"), prompt, MAXTOK);
    int nt = read_ints(json_object_get(r, "tokens"), toks, MAXTOK);
    int nm = read_reals(json_object_get(r, "margins"), margins, MAXTOK);
    int nk = read_ints(json_object_get(r, "topk_ids"), ids, 64);
    int nv = read_reals(json_object_get(r, "topk_logits"), vals, 64);
    CHECK(np >= 1 && nt >= 1 && nm == nt && nk >= 1 && nv == nk);
    if (!(np >= 1 && nt >= 1 && nm == nt && nk >= 1 && nv == nk)) continue;
    int rc = hearth_session_sync(s, prompt, np, &err);
    CHECKF(rc == 0, "case %zu sync: %s", c, err.msg);
    if (rc != 0) continue;
    const float *lg = hearth_session_logits(s);
    CHECK(lg != NULL);
    if (!lg) continue;
    for (int j = 0; j < nk; j++) {
      double a = lg[ids[j]], b = vals[j];
      double tol = TOPK_REL * (fabs(b) > 1 ? fabs(b) : 1);
      double rel = fabs(a - b) / (fabs(b) > 1 ? fabs(b) : 1);
      if (rel > worst_rel || a != a) worst_rel = a != a ? INFINITY : rel;
      CHECKF(fabs(a - b) <= tol, "%s case %zu (prompt len %d) top-%d id %d: hearth %.7g ref %.7g",
             fixture, c, np, j + 1, ids[j], a, b);
    }
    int limit = first_below(margins, nt, F32_MARGIN);
    steps_total += nt;
    for (int i = 0; i < limit; i++) {
      lg = hearth_session_logits(s);
      if (!lg) { CHECK(lg != NULL); break; }
      int t = argmax_lowest(lg, n_vocab);
      CHECKF(t == toks[i], "%s case %zu (prompt len %d) step %d: hearth %d (%.7g) ref %d (%.7g), ref margin %.4g",
             fixture, c, np, i, t, lg[t], toks[i], lg[toks[i]], margins[i]);
      if (t != toks[i]) break;
      steps++;
      if (i + 1 < limit) {
        rc = hearth_session_append(s, &toks[i], 1, &err);
        CHECKF(rc == 0, "case %zu append: %s", c, err.msg);
        if (rc != 0) break;
      }
    }
  }
  printf("  %s dtype %d: %d/%d greedy steps equal, worst top-k rel err %.3g\n", fixture, (int)dtype,
         steps, steps_total, worst_rel);
  hearth_session_free(s);
  hearth_model_free(m);
  json_decref(ref);
}

/* int4, the parity rule (design.md "Numerics", issue 35): free-running greedy (hearth's own tokens
 * fed back) reproduces the int4 reference's tokens on >= INT4_RATE of the positions before the
 * first int4 reference margin < INT4_MARGIN, pooled over a fixture's prompts; 100 % with
 * HEARTH_Q4_EXACT=1. After a divergence the contexts differ, so later positions count as they come
 * (they rarely match): the figure is close to the mean length of the agreeing prefix. */
static void run_lm_int4_free(const char *fixture, const json_t *ref, struct hearth_model *m) {
  struct hearth_session *s = new_session(m);
  REQUIRE(s != NULL);
  int n_vocab = hearth_model_info(m)->n_vocab;
  struct hearth_err err = {0};
  int match = 0, total = 0;
  const json_t *cases = json_object_get(ref, "cases");
  for (size_t c = 0; c < json_array_size(cases); c++) {
    const json_t *cs = json_object_get(json_array_get(cases, c), "int4");
    int32_t prompt[MAXTOK], toks[MAXTOK];
    double margins[MAXTOK];
    int np = read_ints(json_object_get(json_array_get(cases, c), "prompt"), prompt, MAXTOK);
    int nt = read_ints(json_object_get(cs, "tokens"), toks, MAXTOK);
    int nm = read_reals(json_object_get(cs, "margins"), margins, MAXTOK);
    CHECK(np >= 1 && nt >= 1 && nm == nt);
    if (!(np >= 1 && nt >= 1 && nm == nt)) continue;
    int rc = hearth_session_sync(s, prompt, np, &err);
    CHECKF(rc == 0, "case %zu sync: %s", c, err.msg);
    if (rc != 0) continue;
    int limit = first_below(margins, nt, INT4_MARGIN), first_diff = -1;
    for (int i = 0; i < limit; i++) {
      const float *lg = hearth_session_logits(s);
      if (!lg) { CHECK(lg != NULL); break; }
      int32_t t = argmax_lowest(lg, n_vocab);
      total++;
      if (t == toks[i]) match++;
      else if (first_diff < 0) first_diff = i;
      if (i + 1 < limit) {
        rc = hearth_session_append(s, &t, 1, &err);
        CHECKF(rc == 0, "case %zu append: %s", c, err.msg);
        if (rc != 0) break;
      }
    }
    if (first_diff >= 0)
      fprintf(stderr, "  %s case %zu (prompt len %d): free-running diverges at step %d of %d (ref margin %.4g)\n",
              fixture, c, np, first_diff, limit, margins[first_diff]);
  }
  const char *ex = getenv("HEARTH_Q4_EXACT");
  int exact = ex && !strcmp(ex, "1");
  double rate = total ? (double)match / total : 1.0;
  printf("  %s int4: %d/%d free-running positions match (%.1f%%)%s\n", fixture, match, total, 100 * rate,
         exact ? " [HEARTH_Q4_EXACT=1]" : "");
  CHECK(total > 0);
  if (exact) CHECKF(match == total, "free-running %d/%d", match, total);
  else CHECKF(rate >= INT4_RATE, "free-running %d/%d = %.3f < %.2f", match, total, rate, INT4_RATE);
  hearth_session_free(s);
}

/* int4: teacher forcing on the int4 reference's tokens. */
static void run_lm_int4(const char *fixture) {
  json_t *ref = load_ref(fixture);
  REQUIRE(ref != NULL);
  struct hearth_model *m = load_model(fixture, HEARTH_DTYPE_INT4);
  if (!m) { json_decref(ref); REQUIRE(m != NULL); }
  check_info(m, ref);
  struct hearth_session *s = new_session(m);
  if (!s) { hearth_model_free(m); json_decref(ref); REQUIRE(s != NULL); }
  int n_vocab = hearth_model_info(m)->n_vocab;
  struct hearth_err err = {0};
  int match = 0, total = 0;
  double worst_topk = 0;
  const json_t *cases = json_object_get(ref, "cases");
  for (size_t c = 0; c < json_array_size(cases); c++) {
    const json_t *cs = json_object_get(json_array_get(cases, c), "int4");
    int32_t prompt[MAXTOK], toks[MAXTOK], ids[64];
    double margins[MAXTOK], vals[64];
    int np = read_ints(json_object_get(json_array_get(cases, c), "prompt"), prompt, MAXTOK);
    int nt = read_ints(json_object_get(cs, "tokens"), toks, MAXTOK);
    int nm = read_reals(json_object_get(cs, "margins"), margins, MAXTOK);
    int nk = read_ints(json_object_get(cs, "topk_ids"), ids, 64);
    int nv = read_reals(json_object_get(cs, "topk_logits"), vals, 64);
    CHECK(np >= 1 && nt >= 1 && nm == nt && nv == nk);
    if (!(np >= 1 && nt >= 1 && nm == nt && nv == nk)) continue;
    int rc = hearth_session_sync(s, prompt, np, &err);
    CHECKF(rc == 0, "case %zu sync: %s", c, err.msg);
    if (rc != 0) continue;
    const float *lg = hearth_session_logits(s);
    CHECK(lg != NULL);
    if (!lg) continue;
    for (int j = 0; j < nk; j++) { /* information only */
      double d = fabs(lg[ids[j]] - vals[j]) / (fabs(vals[j]) > 1 ? fabs(vals[j]) : 1);
      if (d > worst_topk || d != d) worst_topk = d;
    }
    int limit = first_below(margins, nt, INT4_MARGIN);
    for (int i = 0; i < limit; i++) {
      lg = hearth_session_logits(s);
      if (!lg) { CHECK(lg != NULL); break; }
      int t = argmax_lowest(lg, n_vocab);
      total++;
      if (t == toks[i]) match++;
      else fprintf(stderr, "  %s case %zu step %d: hearth %d ref %d (ref margin %.4g)\n", fixture, c, i, t,
                   toks[i], margins[i]);
      if (i + 1 < limit) {
        rc = hearth_session_append(s, &toks[i], 1, &err);
        CHECKF(rc == 0, "case %zu append: %s", c, err.msg);
        if (rc != 0) break;
      }
    }
  }
  const char *ex = getenv("HEARTH_Q4_EXACT");
  int exact = ex && !strcmp(ex, "1");
  double rate = total ? (double)match / total : 1.0;
  printf("  %s int4: %d/%d teacher-forced steps match (%.1f%%), worst top-k rel diff %.3g%s\n", fixture, match,
         total, 100 * rate, worst_topk, exact ? " [HEARTH_Q4_EXACT=1]" : "");
  CHECK(total > 0);
  if (exact) CHECKF(match == total, "%d/%d", match, total);
  else CHECKF(rate >= INT4_RATE, "%d/%d = %.3f < %.2f", match, total, rate, INT4_RATE);
  hearth_session_free(s);
  run_lm_int4_free(fixture, ref, m);
  hearth_model_free(m);
  json_decref(ref);
}

static void run_embed(const char *fixture, enum hearth_dtype dtype, const char *kind, double min_cos) {
  json_t *ref = load_ref(fixture);
  REQUIRE(ref != NULL);
  struct hearth_model *m = load_model(fixture, dtype);
  if (!m) { json_decref(ref); REQUIRE(m != NULL); }
  check_info(m, ref);
  struct hearth_session *s = new_session(m);
  if (!s) { hearth_model_free(m); json_decref(ref); REQUIRE(s != NULL); }
  int n_embd = hearth_model_info(m)->n_embd;
  float *out = calloc((size_t)n_embd, sizeof *out);
  double *e = calloc((size_t)n_embd, sizeof *e);
  struct hearth_err err = {0};
  double worst = 1;
  const json_t *cases = json_object_get(ref, "cases");
  for (size_t c = 0; out && e && c < json_array_size(cases); c++) {
    int32_t prompt[MAXTOK];
    int np = read_ints(json_object_get(json_array_get(cases, c), "prompt"), prompt, MAXTOK);
    int ne = read_reals(json_object_get(json_object_get(json_array_get(cases, c), kind), "embedding"), e, n_embd);
    CHECK(np >= 1 && ne == n_embd);
    if (!(np >= 1 && ne == n_embd)) continue;
    int rc = hearth_session_embed(s, prompt, np, out, &err);
    CHECKF(rc == 0, "case %zu embed: %s", c, err.msg);
    if (rc != 0) continue;
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < n_embd; i++) {
      dot += out[i] * e[i];
      na += (double)out[i] * out[i];
      nb += e[i] * e[i];
    }
    double cs = dot / (sqrt(na) * sqrt(nb) + 1e-300);
    if (!(cs >= worst)) worst = cs;
    CHECKF(cs >= min_cos, "%s %s case %zu (prompt len %d): cosine %.7f < %g", fixture, kind, c, np, cs, min_cos);
    CHECKF(fabs(sqrt(na) - 1) < 1e-3, "case %zu: hearth embedding norm %.6f, expected L2-normalised", c,
           sqrt(na));
  }
  printf("  %s dtype %d vs %s reference: worst cosine %.7f\n", fixture, (int)dtype, kind, worst);
  free(out);
  free(e);
  hearth_session_free(s);
  hearth_model_free(m);
  json_decref(ref);
}

/* qwen2: generation_config.json lists [999, 998], config.json 999 */
static void check_eos(const char *fixture) {
  struct hearth_model *m = load_model(fixture, HEARTH_DTYPE_F32);
  REQUIRE(m != NULL);
  const struct hearth_model_info *mi = hearth_model_info(m);
  int has999 = 0, has998 = 0;
  for (int i = 0; i < mi->n_eos && i < 8; i++) {
    has999 |= mi->eos_ids[i] == 999;
    has998 |= mi->eos_ids[i] == 998;
  }
  CHECKF(has999 && has998, "%s: eos ids from config.json (999) and generation_config.json (999, 998)", fixture);
  hearth_model_free(m);
}

/* Gemma 4 -it style: generation_config.json's eos [1, 106] on top of config.json's 1 */
static void check_eos_gemma4(const char *fixture) {
  struct hearth_model *m = load_model(fixture, HEARTH_DTYPE_F32);
  REQUIRE(m != NULL);
  const struct hearth_model_info *mi = hearth_model_info(m);
  int has1 = 0, has106 = 0;
  for (int i = 0; i < mi->n_eos && i < 8; i++) {
    has1 |= mi->eos_ids[i] == 1;
    has106 |= mi->eos_ids[i] == 106;
  }
  CHECKF(has1 && has106, "%s: eos ids 1 and 106", fixture);
  CHECKF(mi->family == HEARTH_FAMILY_GEMMA4, "%s: family %d", fixture, (int)mi->family);
  hearth_model_free(m);
}

TEST_GROUP(qwen2_f32) { run_lm_exact("qwen2", HEARTH_DTYPE_F32); check_eos("qwen2"); }
TEST_GROUP(qwen2_bf16) { run_lm_exact("qwen2", HEARTH_DTYPE_BF16); }
TEST_GROUP(qwen2_int4) { run_lm_int4("qwen2"); }
TEST_GROUP(qwen2_sharded_f32) { run_lm_exact("qwen2_sharded", HEARTH_DTYPE_F32); check_eos("qwen2_sharded"); }
TEST_GROUP(qwen2_sharded_int4) { run_lm_int4("qwen2_sharded"); }
TEST_GROUP(qwen3_f32) { run_lm_exact("qwen3", HEARTH_DTYPE_F32); }
TEST_GROUP(qwen3_bf16) { run_lm_exact("qwen3", HEARTH_DTYPE_BF16); }
TEST_GROUP(qwen3_int4) { run_lm_int4("qwen3"); }
TEST_GROUP(qwen3emb_f32) { run_embed("qwen3emb", HEARTH_DTYPE_F32, "f32", 0.9999); }
TEST_GROUP(qwen3emb_bf16) { run_embed("qwen3emb", HEARTH_DTYPE_BF16, "f32", 0.9999); }
TEST_GROUP(qwen3emb_int4) { run_embed("qwen3emb", HEARTH_DTYPE_INT4, "int4", 0.999); }
/* Gemma 4 (tests/oracle/make_gemma4_fixtures.py): registered in CMake once the fixtures are in the tree */
TEST_GROUP(gemma4_e_f32) { run_lm_exact("gemma4_e", HEARTH_DTYPE_F32); check_eos_gemma4("gemma4_e"); }
TEST_GROUP(gemma4_e_bf16) { run_lm_exact("gemma4_e", HEARTH_DTYPE_BF16); }
TEST_GROUP(gemma4_e_int4) { run_lm_int4("gemma4_e"); }
TEST_GROUP(gemma4_dense_f32) { run_lm_exact("gemma4_dense", HEARTH_DTYPE_F32); check_eos_gemma4("gemma4_dense"); }
TEST_GROUP(gemma4_dense_bf16) { run_lm_exact("gemma4_dense", HEARTH_DTYPE_BF16); }
TEST_GROUP(gemma4_dense_int4) { run_lm_int4("gemma4_dense"); }

/* tests/test.h's TEST_MAIN puts "for (...) printf(...); return 0;" on one line, which gcc's
 * -Wmisleading-indentation rejects under -Werror; keep it quiet here until the harness braces it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmisleading-indentation"
#endif
TEST_MAIN(T(qwen2_f32), T(qwen2_bf16), T(qwen2_int4), T(qwen2_sharded_f32), T(qwen2_sharded_int4),
          T(qwen3_f32), T(qwen3_bf16), T(qwen3_int4), T(qwen3emb_f32), T(qwen3emb_bf16),
          T(qwen3emb_int4), T(gemma4_e_f32), T(gemma4_e_bf16), T(gemma4_e_int4), T(gemma4_dense_f32),
          T(gemma4_dense_bf16), T(gemma4_dense_int4))
