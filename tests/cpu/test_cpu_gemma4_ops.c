/* test_cpu_gemma4_ops.c — the CPU backend's Gemma 4 ops against naive double-precision formulas, on random
 * inputs, with poisoned outputs (NaN rows past n must stay NaN; every written value must be finite):
 *   gelu_mul:  GELU-tanh gating, plain (MLP) and reading a column slice of a wider tensor (PLE gate).
 *   scale_softcap: x *= s (exact in f32) and cap * tanh(x / cap).
 *   rope_prop: proportional partial RoPE (pairs (i, i + hd/2), frequencies over the whole head dim,
 *              the other dims untouched); the whole-head case equals rope_neox bit for bit.
 *   attention_wide: the attention op at Gemma 4's widest shapes (head_dim 512, GQA, scale 1, a sliding window
 *              shorter than the sequence) against a naive softmax: the tiled kernels since session 28, the scalar
 *              worker under HEARTH_CPU=scalar. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform [-1, 1) */
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static struct hb_ctx *ctx_new(void) {
  struct hearth_err err = {0};
  struct hb_ctx *c = NULL;
  struct hb_config cf = {.n_threads = 2, .exact = 1};
  if (hb_cpu_ops.init(&cf, &c, &err)) fprintf(stderr, "cpu init: %s\n", err.msg);
  return c;
}

static struct hb_tensor tensor(struct hb_ctx *c, int64_t rows, int64_t cols) {
  struct hb_tensor t = {0};
  struct hearth_err err = {0};
  if (hb_cpu_ops.alloc(c, &t, HB_F32, rows, cols, &err)) fprintf(stderr, "alloc: %s\n", err.msg);
  return t;
}

static void fill(struct hb_tensor *t, float amp) {
  for (int64_t i = 0; i < t->rows * t->cols; i++) ((float *)t->data)[i] = frand() * amp;
}

static void poison(struct hb_tensor *t) {
  for (int64_t i = 0; i < t->rows * t->cols; i++) ((float *)t->data)[i] = NAN;
}

/* rows [n, rows) still NaN */
static int poison_kept(const struct hb_tensor *t, int n) {
  for (int64_t i = (int64_t)n * t->cols; i < t->rows * t->cols; i++)
    if (!isnan(((const float *)t->data)[i])) return 0;
  return 1;
}

static double gelu_tanh(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); }

/* small (one thread) and large (rows spread over the threads) shapes */
static void gelu_case(int rows, int w, int n);
TEST_GROUP(gelu_mul) {
  gelu_case(9, 77, 6);
  gelu_case(70, 600, 67);
}

static void gelu_case(int rows, int w, int n) {
  struct hb_ctx *c = ctx_new();
  REQUIRE(c != NULL);
  const struct hb_ops *be = &hb_cpu_ops;
  struct hb_tensor g = tensor(c, rows, w), u = tensor(c, rows, w), o = tensor(c, rows, w), wide = tensor(c, rows, 3 * w);
  fill(&g, 6.0f); /* covers the tails of tanh */
  fill(&u, 2.0f);
  fill(&wide, 2.0f);
  poison(&o);
  be->gelu_mul(c, &o, &g, &u, 0, n);
  int bad = 0;
  for (int t = 0; t < n; t++)
    for (int j = 0; j < w; j++) {
      double x = ((float *)g.data)[t * w + j], e = gelu_tanh(x) * ((float *)u.data)[t * w + j];
      double got = ((float *)o.data)[t * w + j];
      if (!(fabs(got - e) <= 1e-6 + 1e-5 * fabs(e))) { if (bad++ < 5) fprintf(stderr, "  [%d,%d] %g vs %g\n", t, j, got, e); }
    }
  CHECKF(bad == 0, "%d gelu_mul outputs differ", bad);
  CHECK(poison_kept(&o, n));
  /* the PLE form: up is a [rows × 3w] tensor, columns [w, 2w) of it; out aliases gate */
  struct hb_tensor g2 = tensor(c, rows, w);
  memcpy(g2.data, g.data, (size_t)(rows * w) * sizeof(float));
  be->gelu_mul(c, &g2, &g2, &wide, w, n);
  bad = 0;
  for (int t = 0; t < n; t++)
    for (int j = 0; j < w; j++) {
      double x = ((float *)g.data)[t * w + j], e = gelu_tanh(x) * ((float *)wide.data)[t * 3 * w + w + j];
      double got = ((float *)g2.data)[t * w + j];
      if (!(fabs(got - e) <= 1e-6 + 1e-5 * fabs(e))) bad++;
    }
  CHECKF(bad == 0, "%d sliced gelu_mul outputs differ", bad);
  for (int64_t i = (int64_t)n * w; i < (int64_t)rows * w; i++) /* rows past n untouched */
    if (((float *)g2.data)[i] != ((float *)g.data)[i]) bad++;
  CHECKF(bad == 0, "gelu_mul wrote past n rows");
  be->release(c, &g); be->release(c, &u); be->release(c, &o); be->release(c, &wide); be->release(c, &g2);
  be->free(c);
}

TEST_GROUP(scale_softcap) {
  struct hb_ctx *c = ctx_new();
  REQUIRE(c != NULL);
  const struct hb_ops *be = &hb_cpu_ops;
  int rows = 7, w = 300, n = 5;
  struct hb_tensor x = tensor(c, rows, w), ref = tensor(c, rows, w);
  fill(&x, 80.0f);
  memcpy(ref.data, x.data, (size_t)(rows * w) * sizeof(float));
  for (int64_t i = (int64_t)n * w; i < (int64_t)rows * w; i++) ((float *)x.data)[i] = NAN;
  be->scale(c, &x, 0.8125f, n);
  int bad = 0;
  for (int64_t i = 0; i < (int64_t)n * w; i++)
    if (((float *)x.data)[i] != ((float *)ref.data)[i] * 0.8125f) bad++;
  CHECKF(bad == 0, "%d scaled values are not x * s", bad);
  CHECK(poison_kept(&x, n));
  memcpy(x.data, ref.data, (size_t)(n * w) * sizeof(float));
  ((float *)x.data)[3] = 1e4f; /* saturates at the cap */
  ((float *)x.data)[4] = -1e4f;
  be->softcap(c, &x, 30.0f, n);
  bad = 0;
  for (int64_t i = 0; i < (int64_t)n * w; i++) {
    double in = i == 3 ? 1e4 : i == 4 ? -1e4 : ((float *)ref.data)[i];
    double e = 30.0 * tanh(in / 30.0), got = ((float *)x.data)[i];
    if (!(fabs(got - e) <= 1e-5 * (1.0 + fabs(e))) || fabs(got) > 30.0) { if (bad++ < 5) fprintf(stderr, "  [%lld] %g vs %g\n", (long long)i, got, e); }
  }
  CHECKF(bad == 0, "%d soft-capped values differ", bad);
  CHECK(poison_kept(&x, n));
  be->release(c, &x); be->release(c, &ref);
  be->free(c);
}

TEST_GROUP(rope_prop) {
  struct hb_ctx *c = ctx_new();
  REQUIRE(c != NULL);
  const struct hb_ops *be = &hb_cpu_ops;
  enum { NT = 6, NH = 3, HD = 64, ROWS = 8 };
  int32_t pos[NT] = {0, 1, 7, 63, 200, 311}, seq[NT] = {0};
  struct hb_batch b = {.n_tokens = NT, .n_seqs = 1, .pos = pos, .seq = seq};
  struct hb_tensor x = tensor(c, ROWS, NH * HD), ref = tensor(c, ROWS, NH * HD);
  fill(&x, 1.5f);
  memcpy(ref.data, x.data, sizeof(float) * ROWS * NH * HD);
  for (int64_t i = (int64_t)NT * NH * HD; i < (int64_t)ROWS * NH * HD; i++) ((float *)x.data)[i] = NAN;
  int pairs = 8; /* int(0.25 * 64 // 2) */
  double theta = 1e6, factor = 1.0;
  be->rope_prop(c, &x, &b, NH, HD, pairs, (float)theta, (float)factor);
  int bad = 0, moved = 0;
  for (int t = 0; t < NT; t++)
    for (int h = 0; h < NH; h++) {
      const float *in = (const float *)ref.data + ((int64_t)t * NH + h) * HD, *out = (const float *)x.data + ((int64_t)t * NH + h) * HD;
      for (int i = 0; i < HD / 2; i++) {
        double e0 = in[i], e1 = in[i + HD / 2];
        if (i < pairs) {
          double ang = pos[t] * pow(theta, -2.0 * i / HD) / factor;
          e0 = in[i] * cos(ang) - in[i + HD / 2] * sin(ang);
          e1 = in[i + HD / 2] * cos(ang) + in[i] * sin(ang);
          if (fabs(out[i] - in[i]) > 1e-3) moved++;
          if (!(fabs(out[i] - e0) <= 1e-4 && fabs(out[i + HD / 2] - e1) <= 1e-4)) bad++;
        } else if (out[i] != in[i] || out[i + HD / 2] != in[i + HD / 2]) {
          bad++; /* pass-through dims are exact */
        }
      }
    }
  CHECKF(bad == 0, "%d rotated pairs differ", bad);
  CHECKF(moved > 0, "nothing rotated");
  CHECK(poison_kept(&x, NT));
  /* factor divides the frequencies: position p with factor 2 equals position p/2 with factor 1 */
  int32_t pos2[NT] = {0, 2, 14, 126, 400, 622};
  struct hb_batch b2 = b;
  b2.pos = pos2;
  struct hb_tensor y = tensor(c, ROWS, NH * HD);
  memcpy(y.data, ref.data, sizeof(float) * ROWS * NH * HD);
  be->rope_prop(c, &y, &b2, NH, HD, pairs, (float)theta, 2.0f);
  bad = 0;
  for (int64_t i = 0; i < (int64_t)NT * NH * HD; i++) if (fabsf(((float *)y.data)[i] - ((float *)x.data)[i]) > 1e-4f) bad++;
  CHECKF(bad == 0, "%d values differ between (p, factor 2) and (p/2, factor 1)", bad);
  /* all pairs, factor 1: rope_neox over the whole head, bit for bit */
  memcpy(x.data, ref.data, sizeof(float) * ROWS * NH * HD);
  memcpy(y.data, ref.data, sizeof(float) * ROWS * NH * HD);
  be->rope_prop(c, &x, &b, NH, HD, HD / 2, 10000.0f, 1.0f);
  be->rope_neox(c, &y, &b, NH, HD, HD, 10000.0f);
  CHECK(!memcmp(x.data, y.data, sizeof(float) * NT * NH * HD));
  be->release(c, &x); be->release(c, &ref); be->release(c, &y);
  be->free(c);
}

TEST_GROUP(attention_wide) {
  struct hb_ctx *c = ctx_new();
  REQUIRE(c != NULL);
  const struct hb_ops *be = &hb_cpu_ops;
  enum { T = 21, NH = 4, NKV = 1, HD = 512, BS = 4, WIN = 8 };
  int nblk = (T + BS - 1) / BS;
  int32_t pos[T], seq[T], bt[8], len[1] = {T};
  for (int t = 0; t < T; t++) { pos[t] = t; seq[t] = 0; }
  for (int i = 0; i < nblk; i++) bt[i] = nblk - 1 - i; /* blocks out of order */
  struct hb_batch b = {.n_tokens = T, .n_seqs = 1, .max_blocks = 8, .block_size = BS, .pos = pos, .seq = seq,
                       .block_table = bt, .seq_len = len};
  struct hb_kv_layer kv = {.n_kv_heads = NKV, .head_dim = HD};
  kv.k = tensor(c, (int64_t)nblk * BS, NKV * HD);
  kv.v = tensor(c, (int64_t)nblk * BS, NKV * HD);
  struct hb_tensor k = tensor(c, T, NKV * HD), v = tensor(c, T, NKV * HD), q = tensor(c, T + 2, NH * HD),
                   o = tensor(c, T + 2, NH * HD);
  fill(&k, 0.15f);
  fill(&v, 1.0f);
  fill(&q, 0.15f);
  poison(&o);
  be->kv_write(c, &kv, &k, &v, &b);
  for (int win = 0; win <= WIN; win += WIN) {
    struct hb_attn_params p = {.n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .scale = 1.0f, .window = win, .softcap = 0.0f};
    be->attention(c, &o, &q, &kv, &b, &p);
    int bad = 0;
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const float *qq = (const float *)q.data + ((int64_t)t * NH + h) * HD;
        double sc[T], mx = -1e300, z = 0;
        int lo = win && t - win + 1 > 0 ? t - win + 1 : 0;
        for (int j = lo; j <= t; j++) {
          double s = 0;
          for (int d = 0; d < HD; d++) s += (double)qq[d] * ((const float *)k.data)[(int64_t)j * HD + d];
          sc[j] = s;
          if (s > mx) mx = s;
        }
        for (int j = lo; j <= t; j++) z += exp(sc[j] - mx);
        for (int d = 0; d < HD; d++) {
          double e = 0;
          for (int j = lo; j <= t; j++) e += exp(sc[j] - mx) / z * ((const float *)v.data)[(int64_t)j * HD + d];
          double got = ((const float *)o.data)[((int64_t)t * NH + h) * HD + d];
          if (!(fabs(got - e) <= 2e-5)) bad++;
        }
      }
    CHECKF(bad == 0, "window %d: %d attention outputs differ", win, bad);
    CHECK(poison_kept(&o, T));
  }
  be->release(c, &kv.k); be->release(c, &kv.v); be->release(c, &k); be->release(c, &v);
  be->release(c, &q); be->release(c, &o);
  be->free(c);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmisleading-indentation"
#endif
TEST_MAIN(T(gelu_mul), T(scale_softcap), T(rope_prop), T(attention_wide))
