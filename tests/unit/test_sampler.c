/* tests/unit/test_sampler.c — the sampler split for the backends' sample op (runtime/sampler.h):
 *   same_draws:   hearth_sampler_sample draws exactly what the sampler drew before the split (sampler_ref.c, the
 *                 old file kept verbatim) for fixed seeds, over random rows and parameter sets, step after step
 *                 with a growing history;
 *   draw_given_u: sampler_sample_u with the peeked draw answers what hearth_sampler_sample answers next, without
 *                 moving the RNG; sampler_skip_unit moves it by exactly one draw;
 *   penalty_list: sampler_device_row's row and list, applied as backend.h states the op applies them, give the row
 *                 the sampler itself penalises (same draw for every u tried), and list the right tokens and counts;
 *                 a list over its cap says so and leaves the sampler's scratch clean;
 *   large_rows:   the same on full-size rows (151,936 and 262,144 entries) that are flat, flat with many exact ties,
 *                 or flat with a peaked head, under top-p 0.5-0.99, min-p, top-k above 1,024 with top-p,
 *                 temperatures 0.3-2 and penalties: the sets to sort hold most of the row, which the sampler sorts
 *                 with its radix sort instead of qsort (sort_cands), and the draws must not change;
 *   large_math:   the arithmetic of the CUDA op's path for sets past SAMPLE_CAP (backend/cuda/sample_large.cuh)
 *                 restated on the CPU, its radix selects replaced by walks over the sorted candidates: masses as
 *                 integers round(exp(c) * 2^52) summed exactly, the host's top-p / min-p / draw decided with its
 *                 margins; on flat full-size rows every id it decides is the sampler's, and deferrals are rare;
 *   large_select: that path's select restated on the CPU (per digit a histogram of counts and integer masses, the
 *                 256 buckets scanned as warp 0 does, 8 a lane from the top): the position it finds by mass and by
 *                 rank, its running mass and its id (the j-th of its key by id) are the sorted walk's;
 *   decide:       backend/sample_decide.h (the CUDA sample op's last step, shared source) on the first
 *                 min(k, SAMPLE_CAP) candidates sorted here: every id it returns is the sampler's draw, and it
 *                 returns one (not -1, "the host's") wherever the candidates held decide, e.g. top-k <= 40. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hearth.h"
#include "backend/sample_decide.h"
#include "runtime/sampler.h"
#include "test.h"
#include "unit/sampler_ref.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 32); }
static float frnd(void) { return (float)(rnd() >> 8) / 16777216.0f; } /* [0, 1) */

/* a random row of one of several shapes: a peaked head over noise, flat noise, masked (-inf) entries, ties,
 * large magnitudes, all one value */
static void fill_row(float *r, int V, int kind) {
  for (int i = 0; i < V; i++) r[i] = frnd() * 4.0f - 2.0f;
  switch (kind % 6) {
  case 0: for (int j = 0; j < 30; j++) r[rnd() % V] += 8.0f + 6.0f * frnd(); break;
  case 1: break;
  case 2: for (int i = 0; i < V; i++) if (rnd() % 3 == 0) r[i] = -INFINITY; r[rnd() % V] = 5.0f; break;
  case 3: for (int j = 0; j < 20; j++) r[rnd() % V] = 7.5f; for (int j = 0; j < 50; j++) r[rnd() % V] = 3.25f; break;
  case 4: for (int i = 0; i < V; i++) r[i] *= 1e4f; break;
  case 5: for (int i = 0; i < V; i++) r[i] = 1.0f; break;
  }
}

struct params_set { float t; int k; float p, minp, rep, pres, freq; };
static const struct params_set SETS[] = {
  {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},    {0.8f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
  {1.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f},    {1.3f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f},
  {0.7f, 40, 0.95f, 0.1f, 1.0f, 0.0f, 0.0f},  {1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
  {1.0f, 2000, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f}, {0.5f, 0, 0.5f, 0.0f, 1.3f, 0.0f, 0.0f},
  {0.9f, 0, 1.0f, 0.0f, 0.8f, 0.5f, 0.2f},    {1.1f, 50, 0.8f, 0.02f, 1.2f, -0.3f, 0.4f},
  {0.0f, 0, 1.0f, 0.0f, 1.5f, 0.7f, 0.1f},    {1e-3f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
  {2.0f, 0, 1.0f, 0.0f, 1.0f, 1.0f, 1.0f},
};
#define N_SETS ((int)(sizeof SETS / sizeof SETS[0]))

static void set_params(struct hearth_sampling *p, const struct params_set *q, uint64_t seed) {
  hearth_sampling_default(p);
  p->temperature = q->t;
  p->top_k = q->k;
  p->top_p = q->p;
  p->min_p = q->minp;
  p->repetition_penalty = q->rep;
  p->presence_penalty = q->pres;
  p->frequency_penalty = q->freq;
  p->seed = seed;
}

TEST_GROUP(same_draws) {
  const int Vs[] = {300, 5000};
  int compared = 0, differ = 0;
  for (int vi = 0; vi < 2; vi++) {
    const int V = Vs[vi];
    float *row = malloc((size_t)V * sizeof *row);
    int32_t prompt[64], hist[40];
    for (int si = 0; si < N_SETS; si++)
      for (uint64_t seed = 1; seed <= 3; seed++) {
        struct hearth_sampling p;
        set_params(&p, &SETS[si], seed * 7919);
        struct hearth_sampler *s = NULL;
        struct ref_sampler *r = NULL;
        struct hearth_err err = {0};
        REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0 && ref_sampler_new(&p, V, &r, &err) == 0);
        const int np = (int)(seed * 20);
        for (int i = 0; i < np; i++) prompt[i] = (int32_t)(rnd() % (uint32_t)V);
        hearth_sampler_set_prompt(s, prompt, np);
        ref_sampler_set_prompt(r, prompt, np);
        int nh = 0;
        for (int step = 0; step < 40; step++) {
          fill_row(row, V, step + si);
          /* the history's tokens carry weight in the row, so the penalties change what is drawn */
          for (int j = 0; j < nh; j += 3) row[hist[j]] += 6.0f;
          int32_t a = hearth_sampler_sample(s, row, hist, nh), b = ref_sampler_sample(r, row, hist, nh);
          compared++;
          if (a != b) {
            differ++;
            fprintf(stderr, "V %d set %d seed %d step %d: split sampler %d, old sampler %d\n", V, si, (int)seed, step, a, b);
          }
          hist[nh++] = b >= 0 && b < V ? b : 0;
        }
        hearth_sampler_free(s);
        ref_sampler_free(r);
      }
    free(row);
  }
  printf("  same_draws: %d draws compared, %d differ\n", compared, differ);
  CHECK(differ == 0 && compared == 2 * N_SETS * 3 * 40);
}

TEST_GROUP(large_rows) {
  static const struct params_set L[] = {
    {0.8f, 0, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f}, {1.0f, 0, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f},
    {2.0f, 0, 0.99f, 0.0f, 1.0f, 0.0f, 0.0f}, {0.3f, 0, 0.9f, 0.0f, 1.3f, 0.4f, 0.2f},
    {1.0f, 0, 1.0f, 0.01f, 1.0f, 0.0f, 0.0f}, {1.2f, 0, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f},
    {0.9f, 5000, 0.9f, 0.0f, 1.1f, 0.0f, 0.0f}, {1.5f, 50000, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},
  };
  const int nl = (int)(sizeof L / sizeof L[0]), Vs[] = {151936, 262144};
  int compared = 0, differ = 0;
  for (int vi = 0; vi < 2; vi++) {
    const int V = Vs[vi];
    float *row = malloc((size_t)V * sizeof *row);
    int32_t hist[8];
    for (int si = 0; si < nl; si++) {
      struct hearth_sampling p;
      set_params(&p, &L[si], 31 + si);
      struct hearth_sampler *s = NULL;
      struct ref_sampler *r = NULL;
      struct hearth_err err = {0};
      REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0 && ref_sampler_new(&p, V, &r, &err) == 0);
      int nh = 0;
      for (int step = 0; step < 6; step++) {
        for (int i = 0; i < V; i++) row[i] = frnd() * 4.0f - 2.0f;
        if (step % 3 == 1) for (int i = 0; i < V; i++) row[i] = floorf(row[i] * 16.0f) / 16.0f; /* ties everywhere */
        if (step % 3 == 2) for (int j = 0; j < 50; j++) row[rnd() % V] += 6.0f;
        for (int j = 0; j < nh; j++) row[hist[j]] += 1.0f;
        const int32_t a = hearth_sampler_sample(s, row, hist, nh), b = ref_sampler_sample(r, row, hist, nh);
        compared++;
        if (a != b) {
          differ++;
          fprintf(stderr, "V %d set %d step %d: sampler %d, old sampler %d\n", V, si, step, a, b);
        }
        hist[nh++] = b >= 0 && b < V ? b : 0;
      }
      hearth_sampler_free(s);
      ref_sampler_free(r);
    }
    free(row);
  }
  printf("  large_rows: %d draws compared, %d differ\n", compared, differ);
  CHECK(differ == 0 && compared == 2 * nl * 6);
}

TEST_GROUP(draw_given_u) {
  const int V = 2000;
  float *row = malloc((size_t)V * sizeof *row);
  int32_t hist[30];
  int checked = 0;
  for (int si = 0; si < N_SETS; si++) {
    if (SETS[si].t == 0.0f) continue; /* greedy makes no draw */
    struct hearth_sampling p;
    set_params(&p, &SETS[si], 1234 + si);
    struct hearth_sampler *s = NULL, *twin = NULL;
    struct hearth_err err = {0};
    REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0 && hearth_sampler_new(&p, V, &twin, &err) == 0);
    int nh = 0;
    for (int step = 0; step < 30; step++) {
      fill_row(row, V, step);
      const double u = sampler_peek_unit(s);
      CHECK(u >= 0.0 && u < 1.0);
      const int32_t a = sampler_sample_u(s, row, hist, nh, u);
      CHECK(sampler_peek_unit(s) == u); /* a given draw leaves the RNG alone */
      const int32_t b = hearth_sampler_sample(s, row, hist, nh);
      CHECKF(a == b, "set %d step %d: with the peeked u %d, drawn %d", si, step, a, b);
      CHECK(sampler_peek_unit(s) != u); /* the draw moved it (equal by chance: 2^-53) */
      sampler_skip_unit(twin);             /* the twin takes the same draw without sampling */
      CHECK(sampler_peek_unit(twin) == sampler_peek_unit(s));
      hist[nh++] = b;
      checked++;
    }
    hearth_sampler_free(s);
    hearth_sampler_free(twin);
  }
  printf("  draw_given_u: %d steps\n", checked);
  free(row);
}

/* the op's penalties as backend.h states them, on the host: l = l > 0 ? l / rep : l * rep, then
 * l -= presence + frequency * count for count > 0 (separate float operations) */
static void apply_list(float *w, const struct hb_sample_row *row, const struct hb_sample_pen *pen) {
  for (int e = 0; e < row->n_pen; e++) {
    float l = w[pen[e].id];
    l = l > 0 ? l / row->repetition : l * row->repetition;
    if (pen[e].count > 0) {
      volatile float f = row->frequency * (float)pen[e].count; /* no contraction into an FMA */
      volatile float t = row->presence + f;
      l -= t;
    }
    w[pen[e].id] = l;
  }
}

TEST_GROUP(penalty_list) {
  const int V = 3000;
  float *row = malloc((size_t)V * sizeof *row), *w = malloc((size_t)V * sizeof *w);
  struct hb_sample_pen *pen = malloc((size_t)V * sizeof *pen);
  int32_t prompt[80], hist[60];
  int checked = 0;
  for (int si = 0; si < N_SETS; si++) {
    struct hearth_sampling p, plain;
    set_params(&p, &SETS[si], 77 + si);
    plain = p; /* the same filters without penalties: what the op selects from after it penalised */
    plain.repetition_penalty = 1.0f;
    plain.presence_penalty = plain.frequency_penalty = 0.0f;
    struct hearth_sampler *s = NULL, *q = NULL;
    struct hearth_err err = {0};
    REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0 && hearth_sampler_new(&plain, V, &q, &err) == 0);
    for (int i = 0; i < 80; i++) prompt[i] = (int32_t)(rnd() % 200); /* repeats: distinct tokens listed once */
    hearth_sampler_set_prompt(s, prompt, 80);
    for (int nh = 0; nh <= 60; nh += 12) {
      for (int i = 0; i < nh; i++) hist[i] = (int32_t)(100 + rnd() % 300);
      struct hb_sample_row r;
      const int n = sampler_device_row(s, hist, nh, &r, pen, V);
      if (SETS[si].t == 0.0f) { CHECK(n == -2); continue; }
      REQUIRE(n >= 0);
      CHECK(r.temperature == p.temperature && r.top_k == p.top_k && r.top_p == p.top_p && r.min_p == p.min_p);
      CHECK(r.u == sampler_peek_unit(s) && r.pen0 == 0);
      r.n_pen = n;
      /* the list: each token once; counts = occurrences among the generated; the prompt's tokens only with a
       * repetition penalty in force */
      const int rep = p.repetition_penalty != 1.0f, pf = (p.presence_penalty != 0 || p.frequency_penalty != 0) && nh > 0;
      int ok = 1, want_n = 0;
      for (int t = 0; t < V; t++) {
        int inp = 0, cnt = 0, listed = -1;
        for (int i = 0; i < 80; i++) inp |= prompt[i] == t;
        for (int i = 0; i < nh; i++) cnt += hist[i] == t;
        for (int e = 0; e < n; e++) if (pen[e].id == t) { ok &= listed < 0; listed = e; }
        const int want = (rep && (inp || cnt)) || (pf && cnt);
        want_n += want;
        ok &= want ? listed >= 0 && pen[listed].count == cnt : listed < 0;
      }
      CHECKF(ok && n == want_n, "set %d nh %d: list of %d entries, %d wanted", si, nh, n, want_n);
      for (int trial = 0; trial < 4; trial++) {
        fill_row(row, V, trial + si);
        for (int i = 0; i < nh; i += 2) row[hist[i]] += 5.0f;
        memcpy(w, row, (size_t)V * sizeof *w);
        apply_list(w, &r, pen);
        const double u = trial ? (double)frnd() : r.u;
        const int32_t a = sampler_sample_u(q, w, NULL, 0, u), b = sampler_sample_u(s, row, hist, nh, u);
        CHECKF(a == b, "set %d nh %d trial %d: the listed penalties give %d, the sampler's %d", si, nh, trial, a, b);
        checked++;
      }
    }
    /* over the cap: -1, and the scratch is clean (the next call lists the same as a fresh sampler) */
    if (SETS[si].t > 0.0f && p.repetition_penalty != 1.0f) {
      struct hb_sample_row r;
      CHECK(sampler_device_row(s, hist, 60, &r, pen, 3) == -1);
      const int n1 = sampler_device_row(s, hist, 60, &r, pen, V);
      struct hearth_sampler *fresh = NULL;
      REQUIRE(hearth_sampler_new(&p, V, &fresh, &err) == 0);
      hearth_sampler_set_prompt(fresh, prompt, 80);
      struct hb_sample_pen *pen2 = malloc((size_t)V * sizeof *pen2);
      const int n2 = sampler_device_row(fresh, hist, 60, &r, pen2, V);
      CHECK(n1 == n2 && n1 > 3 && !memcmp(pen, pen2, (size_t)n1 * sizeof *pen));
      free(pen2);
      hearth_sampler_free(fresh);
    }
    hearth_sampler_free(s);
    hearth_sampler_free(q);
  }
  printf("  penalty_list: %d draws from listed penalties\n", checked);
  CHECK(checked > 100);
  free(row); free(w); free(pen);
}

struct dcand { float c; int id; };
static int dcand_cmp(const void *a, const void *b) { /* (c descending, id ascending): the host's order */
  const struct dcand *x = a, *y = b;
  if (x->c != y->c) return x->c > y->c ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

typedef unsigned __int128 u128;
/* sample_large's steps (sample_large.cuh) with its selects as walks: pos(by mass, tgt) = the first position whose
 * running integer mass exceeds tgt; mass(n) = the integer mass of the first n */
static int large_emulate(const struct dcand *c, int nc, int K, float top_p, float min_p, double u, u128 *pre) {
  const double one = 4503599627370496.0, mg = SAMPLE_MARGIN + 4.0 * (double)nc / one;
  pre[0] = 0;
  for (int i = 0; i < nc; i++) pre[i + 1] = pre[i] + (u128)llrint(exp((double)c[i].c) * one);
  int n = K;
  u128 mass_n = pre[K];
  if (top_p < 1.0f) {
    const double s = (double)mass_n;
    const u128 tgt = (u128)(s * (double)top_p);
    int i = 0;
    while (i < nc && !(pre[i + 1] > tgt)) i++;
    if (i == nc) return -1;
    const double d = (double)pre[i + 1] / s, dp = (double)pre[i] / s;
    if (!(d >= (double)top_p + mg && dp < (double)top_p - mg)) return -1;
    n = i + 1;
    mass_n = pre[n];
  }
  if (min_p > 0.0f) {
    const double thr = log((double)min_p), m = SAMPLE_MARGIN * (1.0 + fabs(thr));
    int gt = 0, ge = 0;
    for (int i = 0; i < nc; i++) { const double d = (double)c[i].c - thr; gt += d > m; ge += d >= -m; }
    const int lo = n < (gt > 1 ? gt : 1) ? n : (gt > 1 ? gt : 1), hi = n < (ge > 1 ? ge : 1) ? n : (ge > 1 ? ge : 1);
    if (lo != hi) return -1;
    n = lo;
    mass_n = pre[n];
  }
  const double s = (double)mass_n;
  const u128 tgt = (u128)(u * s);
  int i = 0;
  while (i < nc && !(pre[i + 1] > tgt)) i++;
  if (i >= n) return -1;
  const double d = (double)pre[i + 1] / s, dp = (double)pre[i] / s;
  if (!(d - u >= mg && u - dp >= mg)) return -1;
  return c[i].id;
}

TEST_GROUP(large_math) {
  static const struct { float t; int k; float p, minp; } cases[] = {
    {0.8f, 0, 0.95f, 0.0f}, {1.0f, 0, 0.5f, 0.0f}, {0.3f, 0, 0.9f, 0.0f}, {2.0f, 0, 0.99f, 0.0f},
    {1.2f, 0, 0.95f, 0.05f}, {1.0f, 0, 1.0f, 0.01f}, {0.7f, 0, 1.0f, 0.3f}, {0.9f, 5000, 0.9f, 0.0f},
    {1.5f, 20000, 1.0f, 0.0f}, {1.0f, 0, 0.99f, 0.001f},
  };
  const int n_cases = (int)(sizeof cases / sizeof cases[0]), V = 151936;
  float *row = malloc((size_t)V * sizeof *row);
  struct dcand *c = malloc((size_t)V * sizeof *c);
  u128 *pre = malloc((size_t)(V + 1) * sizeof *pre);
  int decided = 0, deferred = 0, wrong = 0;
  for (int r = 0; r < 8; r++) {
    for (int i = 0; i < V; i++) row[i] = frnd() * 4.0f - 2.0f;
    if (r % 4 == 1) for (int i = 0; i < V; i++) row[i] = floorf(row[i] * 16.0f) / 16.0f;
    if (r % 4 == 2) for (int j = 0; j < 50; j++) row[rnd() % V] += 6.0f;
    if (r % 4 == 3) for (int i = 0; i < V; i++) if (rnd() % 3 == 0) row[i] = -3e38f;
    for (int ks = 0; ks < n_cases; ks++) {
      struct hearth_sampling p;
      hearth_sampling_default(&p);
      p.temperature = cases[ks].t; p.top_k = cases[ks].k; p.top_p = cases[ks].p; p.min_p = cases[ks].minp;
      struct hearth_sampler *s = NULL;
      struct hearth_err err = {0};
      REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
      float top = -INFINITY;
      for (int i = 0; i < V; i++) if (row[i] > top) top = row[i];
      for (int i = 0; i < V; i++) { c[i].c = (row[i] - top) / p.temperature; c[i].id = i; }
      qsort(c, (size_t)V, sizeof *c, dcand_cmp);
      const int K = p.top_k > 0 && p.top_k < V ? p.top_k : V;
      for (int t = 0; t < 25; t++) {
        const double u = (double)(rnd() >> 5) / 134217728.0;
        const int got = large_emulate(c, V, K, p.top_p, p.min_p, u, pre);
        const int32_t want = sampler_sample_u(s, row, NULL, 0, u);
        if (got < 0) deferred++;
        else decided++;
        if (got >= 0 && got != want) {
          wrong++;
          fprintf(stderr, "row %d case %d u %.17g: decided %d, the sampler draws %d\n", r, ks, u, got, want);
        }
      }
      hearth_sampler_free(s);
    }
  }
  printf("  large_math: %d decided (each the sampler's draw), %d deferred to the host\n", decided, deferred);
  CHECK(wrong == 0 && decided + deferred == 8 * n_cases * 25 && deferred * 100 <= decided + deferred);
  free(row); free(c); free(pre);
}

/* sample_large.cuh's sl_select on the CPU: the same digits, buckets and lane-of-8 scan (the warp's shuffles as a
 * running sum over the lanes) */
struct lhist { unsigned cnt[256]; uint64_t hi[256], lo[256]; };
static uint32_t lkey(float c) {
  uint32_t u;
  if (c == 0.0f) c = 0.0f;
  memcpy(&u, &c, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static float lkey_c(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint64_t lfx(float c) { return (uint64_t)llrint(exp((double)c) * 4503599627370496.0); }
static u128 lmass(const struct lhist *h, int b) { return ((u128)h->hi[b] << 26) + h->lo[b]; }
static int lselect(const float *c, int n, int by_mass, u128 tgt, int rank, struct lhist *h, uint32_t *key, u128 *above,
                   int *above_n, int *pick, uint64_t *eq_fx) {
  uint32_t prefix = 0, mask = 0;
  u128 a = 0;
  int an = 0, eq = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    memset(h, 0, sizeof *h);
    for (int i = 0; i < n; i++) {
      const uint32_t k = lkey(c[i]);
      if ((k & mask) != prefix) continue;
      const uint64_t f = lfx(c[i]);
      const int b = (int)((k >> shift) & 255u);
      h->cnt[b]++;
      h->hi[b] += f >> 26;
      h->lo[b] += f & ((1ull << 26) - 1);
    }
    u128 x = 0, m8 = 0;
    int xn = 0, n8 = 0, lane = 0;
    for (; lane < 32; lane++) {
      m8 = 0;
      n8 = 0;
      for (int t = 0; t < 8; t++) { const int b = 255 - 8 * lane - t; m8 += lmass(h, b); n8 += (int)h->cnt[b]; }
      x += m8;
      xn += n8;
      if (by_mass ? a + x > tgt : an + xn >= rank) break;
    }
    if (lane == 32) return 0;
    u128 acc = a + (x - m8);
    int acc_n = an + (xn - n8), b = 255 - 8 * lane;
    for (int t = 0; t < 7; t++, b--) {
      if (by_mass ? acc + lmass(h, b) > tgt : acc_n + (int)h->cnt[b] >= rank) break;
      acc += lmass(h, b);
      acc_n += (int)h->cnt[b];
    }
    prefix |= (uint32_t)b << shift;
    mask |= 255u << shift;
    a = acc;
    an = acc_n;
    eq = (int)h->cnt[b];
  }
  const uint64_t f = lfx(lkey_c(prefix));
  const int j = by_mass ? (f ? (int)((tgt - a) / f) + 1 : 0) : rank - an;
  if (j < 1 || j > eq) return 0;
  *key = prefix; *above = a; *above_n = an; *pick = j; *eq_fx = f;
  return 1;
}

TEST_GROUP(large_select) {
  struct lhist *h = malloc(sizeof *h);
  int checks = 0, bad = 0;
  for (int trial = 0; trial < 16; trial++) {
    const int n = 2000 + (int)(rnd() % 200000u);
    float *c = malloc((size_t)n * sizeof *c);
    struct dcand *d = malloc((size_t)n * sizeof *d);
    u128 *pre = malloc((size_t)(n + 1) * sizeof *pre);
    float top = -INFINITY;
    for (int i = 0; i < n; i++) {
      float v = frnd() * 4.0f - 2.0f;
      if (trial % 3 == 1) v = floorf(v * 16.0f) / 16.0f; /* ties */
      if (trial % 3 == 2 && rnd() % 1000 == 0) v += 8.0f;
      c[i] = v;
      if (v > top) top = v;
    }
    const float T = 0.3f + 1.7f * frnd();
    for (int i = 0; i < n; i++) {
      c[i] = (c[i] - top) / T;
      if (trial % 4 == 3 && rnd() % 3 == 0) c[i] = -INFINITY; /* (l - top) / T overflowed */
      d[i].c = c[i];
      d[i].id = i;
    }
    qsort(d, (size_t)n, sizeof *d, dcand_cmp);
    pre[0] = 0;
    for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + lfx(d[i].c);
    for (int q = 0; q < 12; q++) {
      uint32_t key = 0;
      u128 a = 0;
      int an = 0, pick = 0;
      uint64_t f = 0;
      const u128 tgt = (u128)((double)pre[n] * (double)frnd());
      int want = 0;
      while (want < n && !(pre[want + 1] > tgt)) want++;
      int ok = lselect(c, n, 1, tgt, 0, h, &key, &a, &an, &pick, &f), id = -1;
      for (int i = 0, seen = 0; ok && i < n; i++) if (lkey(c[i]) == key && ++seen == pick) { id = i; break; }
      checks++;
      if (!ok || an + pick - 1 != want || a + (u128)pick * f != pre[want + 1] || id != d[want].id) {
        bad++;
        fprintf(stderr, "trial %d (n %d) by mass: ok %d, position %d id %d; the walk: %d id %d\n", trial, n, ok,
                an + pick - 1, id, want, d[want].id);
      }
      const int rank = 1 + (int)(rnd() % (uint32_t)n);
      ok = lselect(c, n, 0, 0, rank, h, &key, &a, &an, &pick, &f);
      checks++;
      if (!ok || an + pick != rank || a + (u128)pick * f != pre[rank]) {
        bad++;
        fprintf(stderr, "trial %d (n %d) rank %d: ok %d, found %d\n", trial, n, rank, ok, an + pick);
      }
    }
    free(c); free(d); free(pre);
  }
  printf("  large_select: %d selects, %d differ from the sorted walk\n", checks, bad);
  CHECK(bad == 0 && checks == 16 * 24);
  free(h);
}

TEST_GROUP(decide) {
  struct { float t; int k; float p, minp; int must; } cases[] = {
    {0.8f, 40, 1.0f, 0.0f, 1}, {1.0f, 1, 1.0f, 0.0f, 1},  {0.7f, 40, 0.95f, 0.1f, 1}, {1.1f, 40, 0.8f, 0.02f, 1},
    {1.0f, 0, 0.9f, 0.0f, 0},  {1.3f, 0, 1.0f, 0.05f, 0}, {1.0f, 2000, 1.0f, 0.0f, 0}, {1.0f, 2000, 0.9f, 0.1f, 0},
    {2.0f, 0, 0.5f, 0.0f, 0},  {1.0f, 1024, 0.9f, 0.0f, 1}, {0.5f, 0, 1.0f, 0.2f, 0}, {1e-3f, 0, 0.9f, 0.0f, 0},
    {1.0f, 0, 1.0f, 0.0f, 0},  {0.6f, 0, 1.0f, 0.0f, 0} /* plain */,
  };
  const int n_cases = (int)(sizeof cases / sizeof cases[0]);
  const int Vs[] = {700, 5000, 151936};
  int decided = 0, deferred = 0;
  for (int vi = 0; vi < 3; vi++) {
    const int V = Vs[vi], rows = vi == 2 ? 4 : 60;
    float *row = malloc((size_t)V * sizeof *row);
    struct dcand *c = malloc((size_t)V * sizeof *c);
    float cv[SAMPLE_CAP];
    int ci[SAMPLE_CAP];
    for (int r = 0; r < rows; r++) {
      fill_row(row, V, r);
      for (int ks = 0; ks < n_cases; ks++) {
        struct hearth_sampling p;
        hearth_sampling_default(&p);
        p.temperature = cases[ks].t; p.top_k = cases[ks].k; p.top_p = cases[ks].p; p.min_p = cases[ks].minp;
        struct hearth_sampler *s = NULL;
        struct hearth_err err = {0};
        REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
        /* the kernel's inputs, computed as it does: c = (l - top) / T over the entries > -inf */
        float top = -INFINITY;
        for (int i = 0; i < V; i++) if (row[i] > top) top = row[i];
        int nc = 0;
        double total = 0.0;
        for (int i = 0; i < V; i++) {
          if (!(row[i] > -INFINITY)) continue;
          c[nc].c = (row[i] - top) / p.temperature;
          c[nc].id = i;
          if (c[nc].c > -60.0f) total += exp((double)c[nc].c);
          nc++;
        }
        const int K = p.top_k > 0 && p.top_k < nc ? p.top_k : nc, C = K < SAMPLE_CAP ? K : SAMPLE_CAP;
        if (K == nc && !(p.top_p < 1.0f) && !(p.min_p > 0.0f)) {
          /* plain sampling, the kernel's other path (sample_plain): its walking order restated here, ids ascending
           * with the first maximum's weight at the first candidate's place and the first candidate's at the
           * maximum's, must give the sampler's draw (the kernel adds margins around the crossing) */
          int z = -1, b = -1;
          for (int i = 0; i < V; i++)
            if (row[i] > -INFINITY) {
              if (z < 0) z = i;
              if (b < 0 && (row[i] - top) / p.temperature == 0.0f) b = i;
            }
          const double wb = exp((double)((row[b] - top) / p.temperature)), wz = exp((double)((row[z] - top) / p.temperature));
          double sum = 0.0;
          for (int i = 0; i < V; i++)
            sum += i == z ? wb : i == b ? wz : row[i] > -INFINITY ? exp((double)((row[i] - top) / p.temperature)) : 0.0;
          const double u = (double)(rnd() >> 5) / 134217728.0, target = u * sum;
          double acc = 0.0;
          int got = -1;
          for (int i = 0; i < V && got < 0; i++) {
            acc += i == z ? wb : i == b ? wz : row[i] > -INFINITY ? exp((double)((row[i] - top) / p.temperature)) : 0.0;
            if (target < acc) got = i == z ? b : i == b ? z : i;
          }
          const int32_t want = sampler_sample_u(s, row, NULL, 0, u);
          CHECKF(got == want, "V %d row %d case %d (plain) u %.17g: the kernel's order gives %d, the sampler %d", V, r, ks,
                 u, got, want);
          hearth_sampler_free(s);
          continue;
        }
        qsort(c, (size_t)nc, sizeof *c, dcand_cmp);
        for (int i = 0; i < C; i++) { cv[i] = c[i].c; ci[i] = c[i].id; }
        for (int t = 0; t < 3; t++) {
          const double u = (double)(rnd() >> 5) / 134217728.0;
          const int got = sample_decide(cv, ci, C, K, nc, total, p.top_p, p.min_p, u);
          const int32_t want = sampler_sample_u(s, row, NULL, 0, u);
          if (got < 0) deferred++;
          else decided++;
          CHECKF(got == -1 || got == want, "V %d row %d case %d u %.17g: decided %d, the sampler draws %d", V, r, ks, u, got, want);
          CHECKF(got >= 0 || !cases[ks].must, "V %d row %d case %d (kind %d) u %.17g: deferred a case the candidates decide",
                 V, r, ks, r % 6, u);
        }
        hearth_sampler_free(s);
      }
    }
    free(row);
    free(c);
  }
  printf("  decide: %d decided (each the sampler's draw), %d deferred to the host\n", decided, deferred);
  CHECK(decided > deferred);
}

TEST_MAIN(T(same_draws), T(large_rows), T(draw_given_u), T(penalty_list), T(large_math), T(large_select), T(decide))
