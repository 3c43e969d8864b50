/* tests/unit/test_base.c — half-precision conversions, the int4 quantizer, the thread pool and
 * the sampler, each against an independent statement of what it must do. */
#include <math.h>
#include <stdint.h>

#include "base/cpu_features.h"
#include "base/half.h"
#include "base/threadpool.h"
#include "hearth.h"
#include "quant/q4.h"
#include "test.h"

TEST_GROUP(half) {
  /* every finite fp16 value survives f16 -> f32 -> f16 */
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    if (((h >> 10) & 31) == 31) continue;
    if (f32_to_f16(f16_to_f32((uint16_t)h)) != h) bad++;
  }
  CHECKF(bad == 0, "%d fp16 values do not round-trip", bad);
  CHECK(f16_to_f32(0x3c00) == 1.0f && f16_to_f32(0xc000) == -2.0f && f16_to_f32(0x0001) == ldexpf(1, -24));
  /* round to nearest even at the midpoint between 1 and 1+2^-10 */
  CHECK(f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00);
  CHECK(f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3c02);
  CHECK(f32_to_f16(70000.0f) == 0x7c00 && f32_to_f16(-70000.0f) == 0xfc00);
  CHECK(f32_to_f16(ldexpf(1, -26)) == 0); /* below half the smallest subnormal */
  CHECK(f32_to_f16(ldexpf(3, -26)) == 1);
  /* bf16 */
  CHECK(f32_to_bf16(1.0f) == 0x3f80 && bf16_to_f32(0x3f80) == 1.0f);
  CHECK(f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80);      /* tie -> even */
  CHECK(f32_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3f82);  /* tie -> even (up) */
  CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST_GROUP(q4) {
  float w[256], back[256];
  uint8_t qs[128];
  uint16_t d[2];
  uint64_t s = 12345;
  for (int i = 0; i < 256; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; w[i] = (float)((int64_t)(s % 20001) - 10000) / 7919.0f; }
  w[37] = 3.5f;   /* group 0 extreme, positive */
  w[200] = -2.25f; w[201] = 2.25f; /* group 1: tie in magnitude, first (negative) wins */
  q4_quantize_row(w, 256, qs, d);
  CHECK(d[0] == f32_to_f16(3.5f / -8.0f));
  CHECK(d[1] == f32_to_f16(-2.25f / -8.0f));
  q4_dequantize_row(qs, d, 256, back);
  /* extreme weight maps to q = -8 exactly */
  CHECK((qs[37 / 2] >> 4) == 0);  /* odd index: high nibble, stored q+8 = 0 */
  CHECK((qs[200 / 2] & 15) == 0);
  for (int i = 0; i < 256; i++) {
    float df = fabsf(f16_to_f32(d[i / 128]));
    int q = (int)lrintf(back[i] / -df * -1.0f);
    (void)q;
    CHECKF(fabsf(back[i] - w[i]) <= df * 0.5f + 1e-6f || (w[i] / (f16_to_f32(d[i / 128])) > 7.5f),
           "w[%d]=%g back=%g d=%g", i, w[i], back[i], df);
  }
  /* round half away from zero: w/d = 2.5 -> 3, -2.5 -> -3 */
  float g[128] = {0};
  g[0] = -8.0f; g[1] = 2.5f; g[2] = -2.5f; g[3] = 0.5f;
  q4_quantize_row(g, 128, qs, d);
  CHECK(f16_to_f32(d[0]) == 1.0f);
  q4_dequantize_row(qs, d, 128, back);
  CHECK(back[0] == -8.0f && back[1] == 3.0f && back[2] == -3.0f && back[3] == 1.0f);
  /* positive extreme: values above 7*d clamp to 7 (d negative flips signs) */
  g[0] = 8.0f; g[1] = -8.0f; g[2] = 0.0f; g[3] = 0.0f;
  q4_quantize_row(g, 128, qs, d);
  q4_dequantize_row(qs, d, 128, back);
  CHECK(f16_to_f32(d[0]) == -1.0f && back[0] == 8.0f && back[1] == -7.0f);
  /* against a direct statement of the format (roundf, per element) on many random groups,
   * including values near the .5 boundaries */
  {
    enum { G = 2000 };
    static float wr[G * 128];
    static uint8_t qr[G * 64];
    static uint16_t dr[G];
    uint64_t r = 99;
    for (int i = 0; i < G * 128; i++) {
      r ^= r << 13; r ^= r >> 7; r ^= r << 17;
      float u = (float)(int64_t)(r % 2000001 - 1000000) / 1000000.0f;
      wr[i] = (i % 128 == 5) ? u * 3.0f : u * (float)(1 + (int)(r >> 40) % 7) * 0.37f;
      if (r % 11 == 0) wr[i] = (float)((int)(r >> 33) % 15 - 7) * 0.5f; /* exact halves */
    }
    q4_quantize_row(wr, G * 128, qr, dr);
    int mism = 0;
    for (int g = 0; g < G; g++) {
      const float *x = wr + g * 128;
      float m = 0, am = 0;
      for (int i = 0; i < 128; i++) if (fabsf(x[i]) > am) { am = fabsf(x[i]); m = x[i]; }
      uint16_t dh = f32_to_f16(m / -8.0f);
      float df = f16_to_f32(dh);
      if (dh != dr[g]) mism++;
      for (int i = 0; i < 128; i++) {
        int q = 0;
        if (df != 0.0f) { float rr = roundf(x[i] / df); q = rr < -8 ? -8 : rr > 7 ? 7 : (int)rr; }
        int got = (int)((qr[g * 64 + i / 2] >> (4 * (i & 1))) & 15) - 8;
        if (got != q) mism++;
      }
    }
    CHECKF(mism == 0, "%d quantized values differ from the roundf statement of the format", mism);
  }
  /* all-zero group: d = 0, q = 0 */
  float z[128] = {0};
  q4_quantize_row(z, 128, qs, d);
  q4_dequantize_row(qs, d, 128, back);
  CHECK(f16_to_f32(d[0]) == 0.0f && back[5] == 0.0f && qs[0] == 0x88);
}

/* The AVX2 kernel against the scalar reference: identical bytes (scales and nibbles) on random rows
 * at many scales and on the edge values: all ±0, ±FLT_MAX (the scale overflows f16), magnitudes
 * whose scale underflows f16 to 0 or to a subnormal, f32 subnormals, exact halves of the step,
 * magnitude ties of either sign (first wins), constant groups. NaN/Inf never reach the quantizer:
 * the loader refuses them (test_hostile_files model_limits). */
TEST_GROUP(q4_avx2) {
  if (!cpu_features_get()->avx2) {
    CHECKF(0, "this CPU has no AVX2 (or HEARTH_CPU caps it): the AVX2 quantizer cannot be compared");
    return;
  }
  enum { G = 4096, C = G * 128 };
  static float w[C];
  static uint8_t qa[C / 2], qb[C / 2];
  static uint16_t da[G], db[G];
  uint64_t s = 2463534242u;
  const float scales[] = {1.0f, 1e-3f, 3e4f, 5e5f, 1e-7f, 1e-9f, 6e-8f, 1e-30f, 1e30f, 65504.0f * 8.0f};
  for (int g = 0; g < G; g++) {
    float sc = scales[g % (int)(sizeof scales / sizeof scales[0])];
    for (int i = 0; i < 128; i++) {
      s ^= s << 13; s ^= s >> 7; s ^= s << 17;
      w[g * 128 + i] = sc * (float)((int64_t)(s % 2000001) - 1000000) / 1000000.0f;
    }
    float *x = w + g * 128;
    switch (g % 16) {
    case 0: memset(x, 0, 128 * sizeof *x); break;                             /* all zero */
    case 1: for (int i = 0; i < 128; i++) x[i] = -0.0f; break;                /* all -0 */
    case 2: x[7] = 3.4028235e38f; break;                                      /* +FLT_MAX */
    case 3: x[100] = -3.4028235e38f; x[101] = 3.4028235e38f; break;           /* tie, negative first */
    case 4: x[3] = 2.0f; x[90] = -2.0f; break;                               /* tie, positive first */
    case 5: for (int i = 0; i < 128; i++) x[i] = 0.75f; break;                /* constant */
    case 6: x[0] = -8.0f; for (int i = 1; i < 128; i++) x[i] = (float)(i % 17 - 8) * 0.5f; break; /* exact halves */
    case 7: for (int i = 0; i < 128; i++) x[i] = (float)(i - 64) * 1e-40f; break; /* f32 subnormals */
    case 8: x[64] = 65504.0f * 8.0f + 4096.0f; break;                          /* scale rounds to f16 inf */
    case 9: for (int i = 0; i < 128; i++) x[i] *= 1e-4f; x[5] = 2.0f * 5.96e-8f * 8.0f; break; /* subnormal scale */
    default: break;
    }
  }
  for (int r = 0; r < 8; r++) { /* as rows of C/8 columns, as the loader calls it */
    int64_t cols = C / 8, off = r * cols;
    q4_quantize_row_ref(w + off, cols, qa + off / 2, da + off / 128);
    q4_quantize_row_avx2(w + off, cols, qb + off / 2, db + off / 128);
  }
  int bad_d = 0, bad_q = 0, first = -1;
  for (int g = 0; g < G; g++) if (da[g] != db[g]) { bad_d++; if (first < 0) first = g; }
  for (int i = 0; i < C / 2; i++) if (qa[i] != qb[i]) { bad_q++; if (first < 0) first = i / 64; }
  CHECKF(bad_d == 0 && bad_q == 0, "%d scales and %d bytes differ (first in group %d)", bad_d, bad_q, first);
  /* the dispatcher gives the same bytes as well (whichever kernel it picks) */
  q4_quantize_row(w, C, qb, db);
  CHECK(!memcmp(qa, qb, sizeof qa) && !memcmp(da, db, sizeof da));
}

struct sum_job { long n; double part[64]; };
static void sum_worker(void *arg, int ith, int nth) {
  struct sum_job *j = arg;
  long lo, hi;
  threadpool_split(j->n, ith, nth, 4, &lo, &hi);
  double s = 0;
  for (long i = lo; i < hi; i++) s += (double)i;
  j->part[ith] = s;
}

/* Dynamic then static jobs back to back: each static call must run exactly once per thread, and
 * never with another job's argument (a worker late for a dynamic job used to read the next job's
 * description half-written and run the static job twice). */
struct once_job { int magic; int hits[16]; };
struct dyn_job { int magic; int next, total, done; };
static void once_worker(void *arg, int ith, int nth) {
  struct once_job *j = arg;
  (void)nth;
  if (j->magic == 0x5151 && ith < 16) __atomic_add_fetch(&j->hits[ith], 1, __ATOMIC_RELAXED);
}
static void dyn_worker(void *arg, int ith, int nth) {
  struct dyn_job *j = arg;
  (void)ith;
  (void)nth;
  if (j->magic != 0xd0d0) return;
  while (__atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED) < j->total) __atomic_add_fetch(&j->done, 1, __ATOMIC_RELAXED);
}

static void threadpool_mixed_jobs(void) {
  const int nt = 8; /* more threads than cores: workers are late for dynamic jobs */
  struct threadpool *p = threadpool_create(nt);
  REQUIRE(p);
  int bad = 0;
  for (int it = 0; it < 20000 && !bad; it++) {
    struct dyn_job d = {0xd0d0, 0, 4, 0};
    threadpool_run_dynamic(p, dyn_worker, &d);
    if (d.done != 4) bad = 1;
    memset(&d, 0xee, sizeof d);
    struct once_job s;
    memset(&s, 0, sizeof s);
    s.magic = 0x5151;
    threadpool_run(p, once_worker, &s);
    for (int i = 0; i < nt; i++)
      if (__atomic_load_n(&s.hits[i], __ATOMIC_RELAXED) != 1) { bad = 2; CHECKF(0, "iteration %d: thread %d ran %d times", it, i, s.hits[i]); }
    memset(&s, 0xee, sizeof s);
  }
  CHECK(!bad);
  threadpool_free(p);
}

TEST_GROUP(threadpool) {
  threadpool_mixed_jobs();
  for (int nt = 1; nt <= 5; nt++) {
    struct threadpool *p = threadpool_create(nt);
    REQUIRE(p);
    CHECK(threadpool_size(p) == nt);
    for (int rep = 0; rep < 200; rep++) {
      struct sum_job j = {.n = 1000 + rep};
      threadpool_run(p, sum_worker, &j);
      double s = 0;
      for (int i = 0; i < nt; i++) s += j.part[i];
      CHECKF(s == (double)j.n * (double)(j.n - 1) / 2, "threads %d rep %d", nt, rep);
    }
    threadpool_free(p);
  }
  long lo, hi, covered = 0;
  for (int i = 0; i < 3; i++) { threadpool_split(10, i, 3, 4, &lo, &hi); covered += hi - lo; CHECK(lo % 4 == 0); }
  CHECK(covered == 10);
}

TEST_GROUP(sampler) {
  enum { V = 50 };
  float lg[V];
  for (int i = 0; i < V; i++) lg[i] = (float)(i % 7) * 0.5f;
  lg[13] = 9.0f; lg[27] = 9.0f; /* tie: greedy must pick 13 */
  struct hearth_sampling p;
  hearth_sampling_default(&p);
  p.temperature = 0;
  struct hearth_sampler *s = NULL;
  struct hearth_err err = {0};
  REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
  CHECK(hearth_sampler_sample(s, lg, NULL, 0) == 13);
  /* repetition penalty (HF): 13 seen -> 9/2 = 4.5 < 9 -> 27 wins */
  hearth_sampler_free(s);
  p.repetition_penalty = 2.0f;
  REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
  int32_t hist[] = {13, 13};
  CHECK(hearth_sampler_sample(s, lg, hist, 2) == 27);
  hearth_sampler_free(s);
  /* repetition penalty over the prompt too (transformers): 13 only in the prompt -> 27 wins */
  hearth_sampling_default(&p);
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
  int32_t prompt_toks[] = {13, 5, 13};
  hearth_sampler_set_prompt(s, prompt_toks, 3);
  CHECK(hearth_sampler_sample(s, lg, NULL, 0) == 27);
  /* ...prompt + history penalise each distinct token once: 13 (twice in the prompt) and 27 (in
   * the history) both drop to 4.5, still above 3.0, and the tie goes to the lower id */
  int32_t hist3[] = {27};
  int32_t got = hearth_sampler_sample(s, lg, hist3, 1);
  CHECK(got == 13);
  hearth_sampler_free(s);
  /* presence penalty applies to generated tokens only, not the prompt */
  hearth_sampling_default(&p);
  p.temperature = 0;
  p.presence_penalty = 10.0f;
  REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
  hearth_sampler_set_prompt(s, prompt_toks, 3);
  CHECK(hearth_sampler_sample(s, lg, NULL, 0) == 13);
  hearth_sampler_free(s);
  /* presence penalty 10 on both -> something else (value 3.0 at i%7==6, first i=6) */
  hearth_sampling_default(&p);
  p.temperature = 0;
  p.presence_penalty = 10.0f;
  REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
  int32_t hist2[] = {13, 27};
  CHECK(hearth_sampler_sample(s, lg, hist2, 2) == 6);
  hearth_sampler_free(s);
  /* a tiny temperature is nearly greedy: logit / 1e-38 overflowed to inf and the draw fell
   * through to the last candidate */
  hearth_sampling_default(&p);
  p.temperature = 1e-38f;
  float lg2[V];
  for (int i = 0; i < V; i++) lg2[i] = (float)(i % 7) * 0.5f;
  lg2[13] = 9.0f;
  REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
  for (int i = 0; i < 20; i++) CHECK(hearth_sampler_sample(s, lg2, NULL, 0) == 13);
  hearth_sampler_free(s);
  /* a NaN never wins (issue 33): it compares false, so a greedy scan that started at a NaN in
   * position 0 kept it and answered token 0; sampling skips NaNs */
  float lg3[V];
  for (int i = 0; i < V; i++) lg3[i] = (float)(i % 7) * 0.5f;
  lg3[0] = NAN; lg3[5] = NAN; lg3[31] = 7.0f;
  hearth_sampling_default(&p);
  p.temperature = 0;
  REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
  CHECK(hearth_sampler_sample(s, lg3, NULL, 0) == 31);
  hearth_sampler_free(s);
  hearth_sampling_default(&p);
  p.seed = 3;
  REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
  for (int i = 0; i < 200; i++) {
    int32_t id = hearth_sampler_sample(s, lg3, NULL, 0);
    CHECKF(id >= 0 && id < V && !isnan(lg3[id]), "drew %d", id);
  }
  hearth_sampler_free(s);
  /* seeded: same seed, same stream; top_k=2 only draws 13 or 27; distribution close to 50/50 */
  hearth_sampling_default(&p);
  p.top_k = 2;
  p.seed = 7;
  struct hearth_sampler *a = NULL, *b = NULL;
  REQUIRE(hearth_sampler_new(&p, V, &a, &err) == 0);
  REQUIRE(hearth_sampler_new(&p, V, &b, &err) == 0);
  int n13 = 0, same = 1, others = 0;
  for (int i = 0; i < 4000; i++) {
    int32_t x = hearth_sampler_sample(a, lg, NULL, 0), y = hearth_sampler_sample(b, lg, NULL, 0);
    same &= x == y;
    n13 += x == 13;
    others += x != 13 && x != 27;
  }
  CHECK(same && others == 0);
  CHECKF(n13 > 1800 && n13 < 2200, "n13 = %d", n13);
  hearth_sampler_free(a);
  hearth_sampler_free(b);
  /* temperature 1 over two tokens with logit gap ln(3): frequencies 3:1 */
  float two[V];
  for (int i = 0; i < V; i++) two[i] = -INFINITY;
  two[3] = logf(3.0f); two[4] = 0.0f;
  hearth_sampling_default(&p);
  p.seed = 99;
  REQUIRE(hearth_sampler_new(&p, V, &a, &err) == 0);
  int n3 = 0;
  for (int i = 0; i < 8000; i++) n3 += hearth_sampler_sample(a, two, NULL, 0) == 3;
  CHECKF(fabs(n3 / 8000.0 - 0.75) < 0.02, "p(3) = %g", n3 / 8000.0);
  hearth_sampler_free(a);
  /* min_p 0.5 removes token 4 (p4/p3 = 1/3) */
  p.min_p = 0.5f;
  REQUIRE(hearth_sampler_new(&p, V, &a, &err) == 0);
  n3 = 0;
  for (int i = 0; i < 500; i++) n3 += hearth_sampler_sample(a, two, NULL, 0) == 3;
  CHECK(n3 == 500);
  hearth_sampler_free(a);
  /* top_p 0.7 keeps only the first token (0.75 >= 0.7) */
  hearth_sampling_default(&p);
  p.top_p = 0.7f;
  REQUIRE(hearth_sampler_new(&p, V, &a, &err) == 0);
  n3 = 0;
  for (int i = 0; i < 500; i++) n3 += hearth_sampler_sample(a, two, NULL, 0) == 3;
  CHECK(n3 == 500);
  hearth_sampler_free(a);
  /* bad parameters are refused */
  p.top_p = 0.0f;
  CHECK(hearth_sampler_new(&p, V, &a, &err) == HEARTH_ERR_ARG && a == NULL);
  /* logprob */
  CHECK(fabsf(hearth_logprob(two, V, 3) - logf(0.75f)) < 1e-5f);
}

/* The filtered draw against a direct statement: draws stay inside the top-k / top-p / min-p set
 * computed by a full sort here, and the top token's frequency matches its renormalised probability. */
static int cmp_desc_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x > y ? -1 : x < y;
}

TEST_GROUP(sampler_filters) {
  enum { V = 3000, DRAWS = 20000 };
  static float lg[V], sorted[V];
  uint64_t r = 5;
  for (int i = 0; i < V; i++) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; lg[i] = (float)(r % 100000) / 100000.0f * 12.0f; }
  const struct { int top_k; float top_p, min_p, temp; } cases[] = {
    {0, 0.8f, 0.0f, 0.7f}, {40, 1.0f, 0.0f, 1.0f}, {0, 1.0f, 0.3f, 1.0f}, {200, 0.5f, 0.0f, 1.3f}, {0, 0.95f, 0.05f, 0.5f}, {1000, 1.0f, 0.0f, 0.2f}, {0, 0.999f, 0.0f, 0.2f}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    for (int i = 0; i < V; i++) sorted[i] = lg[i] / cases[ci].temp;
    qsort(sorted, V, sizeof *sorted, cmp_desc_f);
    int n = cases[ci].top_k ? cases[ci].top_k : V;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(sorted[i] - sorted[0]));
    if (cases[ci].top_p < 1.0f) {
      double cum = 0;
      for (int i = 0; i < n; i++) { cum += exp((double)(sorted[i] - sorted[0])) / sum; if (cum >= cases[ci].top_p) { n = i + 1; break; } }
    }
    if (cases[ci].min_p > 0.0f) {
      int keep = 1;
      while (keep < n && (double)(sorted[keep] - sorted[0]) >= log((double)cases[ci].min_p)) keep++;
      n = keep;
    }
    float cut = sorted[n - 1];
    double z = 0;
    for (int i = 0; i < n; i++) z += exp((double)(sorted[i] - sorted[0]));
    struct hearth_sampling p;
    hearth_sampling_default(&p);
    p.top_k = cases[ci].top_k; p.top_p = cases[ci].top_p; p.min_p = cases[ci].min_p; p.temperature = cases[ci].temp;
    p.seed = 11 + ci;
    struct hearth_sampler *s = NULL;
    struct hearth_err err = {0};
    REQUIRE(hearth_sampler_new(&p, V, &s, &err) == 0);
    int outside = 0, top_hits = 0;
    for (int d = 0; d < DRAWS; d++) {
      int32_t id = hearth_sampler_sample(s, lg, NULL, 0);
      if (lg[id] / cases[ci].temp < cut) outside++;
      if (lg[id] / cases[ci].temp == sorted[0]) top_hits++;
    }
    double expect = 1.0 / z;
    CHECKF(outside == 0, "case %zu: %d draws outside the filtered set", ci, outside);
    CHECKF(fabs((double)top_hits / DRAWS - expect) < 4 * sqrt(expect * (1 - expect) / DRAWS) + 1e-3,
           "case %zu: top token drawn %.4f, expected %.4f", ci, (double)top_hits / DRAWS, expect);
    hearth_sampler_free(s);
  }
}

TEST_MAIN(T(half), T(q4), T(q4_avx2), T(threadpool), T(sampler), T(sampler_filters))
