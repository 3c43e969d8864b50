/* tests/cuda/bench_gemm.c — the self-checking probe of the int4 prefill GEMMs: the mma.sync kernel (gemm_q4) and
 * the wgmma kernel (gemm_wg, sm_90a; "wg" 128 weight rows per block, "wg256" 256), A/B in one process
 * (hb_cuda_set_gemm), on the real shapes of Qwen2.5-3B and
 * Qwen3-Embedding-0.6B with random int4 weights, at M = 1 .. 4096 tokens. Written to be judged from its log alone:
 *   (a) correctness of both kernels against the exact SIMT kernel (hb_cuda_gemm_simt: f32 FMA, weights dequantized
 *       exactly) on the same f16 x: relative L2 error, max abs error, NaN count, the outputs poisoned with NaN first
 *       (an unwritten element shows as NaN), with the bias, the add-into-output (residual) and 3-weight modes the
 *       model uses, f32 and f16 outputs; the wgmma kernel must also be as accurate as the mma one (its rel ≤ the
 *       mma kernel's × 1.25 + 1e-5) and close to it;
 *   (b) row invariance of the kernel the backend's row-invariant mode uses (rows of M = 1 and M = 17 calls bit-identical
 *       to the same rows inside an M = 566 call), and the same question asked of the wgmma kernel, forced (INFO: it
 *       says whether it could serve that mode);
 *   (c) timings: cudaEvent marks around each call, median of REPS after 3 warm-up calls, ms and TFLOP/s per kernel.
 * The first bad element of a failing check is printed (token, column, value, reference).
 * usage: bench_gemm [quick]   (quick: M = 17, 566, 1570 only). Exits 1 on any correctness failure, 2 when the wgmma
 * kernel does not run on this device (it is built for sm_90a: H100 / H200). Not a ctest: needs a Hopper GPU and
 * ~1 minute. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

static const struct hb_ops *G = &hb_cuda_ops;
static struct hb_ctx *gc;
static struct hearth_err err;
static int failures;

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fprintf(stderr, " [%s]\n", err.msg); exit(1); } while (0)
#define REPS 15

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t r32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }
static float frand(void) { return (float)(r32() & 0xffffff) / 8388608.0f - 1.0f; } /* [-1, 1) */

/* a random int4 weight in quant/q4.h's host layout: random nibbles, scales 2^-7 (1 + u), u in [0, 1) */
static void weight_rand(struct hb_tensor *w, int64_t rows, int64_t cols) {
  uint8_t *q = malloc((size_t)(rows * cols / 2));
  uint16_t *s = malloc((size_t)(rows * cols / 128) * 2);
  for (int64_t i = 0; i < rows * cols / 2; i++) q[i] = (uint8_t)r32();
  for (int64_t i = 0; i < rows * cols / 128; i++) s[i] = (uint16_t)(0x2000 | (r32() & 0x3ff));
  struct hb_host_weight hw = {HB_Q4, rows, cols, q, s, NULL};
  if (G->weight_upload(gc, w, &hw, &err)) DIE("weight_upload %lldx%lld", (long long)rows, (long long)cols);
  free(q);
  free(s);
}
/* f32: alloc_f32 (f32 on the device); else alloc(HB_F32), which the fast path holds as f16 */
static void act(struct hb_tensor *t, int64_t rows, int64_t cols, int f32) {
  if ((f32 ? G->alloc_f32(gc, t, rows, cols, &err) : G->alloc(gc, t, HB_F32, rows, cols, &err)))
    DIE("alloc %lldx%lld", (long long)rows, (long long)cols);
}
static void fill(struct hb_tensor *t, int64_t rows, float amp, float *keep) {
  float *h = keep ? keep : malloc((size_t)(rows * t->cols) * sizeof *h);
  for (int64_t i = 0; i < rows * t->cols; i++) h[i] = keep ? keep[i] : frand() * amp;
  if (G->write(gc, t, 0, rows, h)) DIE("write");
  if (!keep) free(h);
}
static void poison(struct hb_tensor *t, int64_t rows) {
  float *h = malloc((size_t)(rows * t->cols) * sizeof *h);
  for (int64_t i = 0; i < rows * t->cols; i++) h[i] = NAN;
  if (G->write(gc, t, 0, rows, h)) DIE("write");
  free(h);
}
static float *readback(const struct hb_tensor *t, int64_t rows) {
  float *h = malloc((size_t)(rows * t->cols) * sizeof *h);
  if (G->read(gc, t, 0, rows, h) || G->sync(gc, &err)) DIE("read / sync");
  return h;
}

struct shape {
  const char *name;
  int K, n_mm, rows[3], bias, add;
};
static const struct shape SHAPES[] = {
    {"3B qkv", 2048, 3, {2048, 256, 256}, 1, 0},
    {"3B o_proj", 2048, 1, {2048, 0, 0}, 0, 1},
    {"3B gate_up", 2048, 2, {11008, 11008, 0}, 0, 0},
    {"3B down", 11008, 1, {2048, 0, 0}, 0, 1},
    {"emb qkv", 1024, 3, {2048, 1024, 1024}, 0, 0},
    {"emb gate_up", 1024, 2, {3072, 3072, 0}, 0, 0},
    {"emb o_proj", 2048, 1, {1024, 0, 0}, 0, 1},
    {"emb down", 3072, 1, {1024, 0, 0}, 0, 1},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))
static const int MS_FULL[] = {1, 17, 64, 128, 566, 1570, 3150, 4096};
static const int MS_QUICK[] = {17, 566, 1570};
/* the kernels compared: [0] is the mma.sync one, the reference of speed and of the accuracy rule */
static const int KINDS[] = {HB_CUDA_GEMM_MMA, HB_CUDA_GEMM_WG, HB_CUDA_GEMM_WG256};
static const char *KNAME[] = {"mma", "wg", "wg256"};
#define NK 3
#define MMAX 4096

/* one shape's device tensors, sized for MMAX tokens */
struct bufs {
  struct hb_tensor x, w[3], b[3], o32[3], o16[3], ref[3];
  float *res[3]; /* the residual the add mode starts from (host) */
};

static void run_gemm(const struct shape *s, struct bufs *B, struct hb_tensor *outs, const struct hb_tensor *x, int n) {
  struct hb_tensor *o[3] = {&outs[0], &outs[1], &outs[2]};
  const struct hb_tensor *w[3] = {&B->w[0], &B->w[1], &B->w[2]}, *b[3] = {&B->b[0], &B->b[1], &B->b[2]};
  if (hb_cuda_gemm_q4(gc, x, s->n_mm, o, w, s->bias ? b : NULL, n, s->add)) DIE("%s: hb_cuda_gemm_q4 declined", s->name);
}

/* prepares the outputs of a call: poisoned, or the residual for the add mode */
static void prep_out(const struct shape *s, struct bufs *B, struct hb_tensor *outs, int n) {
  for (int i = 0; i < s->n_mm; i++) {
    if (s->add) fill(&outs[i], n, 0.0f, B->res[i]);
    else poison(&outs[i], n);
  }
}

/* compares got (n x N) with want; returns the relative L2 error (INFINITY on a non-finite element) and the max abs
 * error; prints the first element off by more than 1 % of the reference's max magnitude */
static int corner_dumps;
static double compare(const char *what, const float *got, const float *want, int n, int N, double *max_abs) {
  double num = 0, den = 0, mx = 0, wmax = 0;
  int64_t nonfin = 0, first = -1, firstbig = -1;
  for (int64_t i = 0; i < (int64_t)n * N; i++) wmax = fmax(wmax, fabs(want[i]));
  for (int64_t i = 0; i < (int64_t)n * N; i++) {
    if (!isfinite(got[i])) {
      if (first < 0) first = i;
      nonfin++;
      continue;
    }
    double d = (double)got[i] - want[i];
    num += d * d;
    den += (double)want[i] * want[i];
    if (fabs(d) > mx) mx = fabs(d);
    if (firstbig < 0 && fabs(d) > 0.01 * wmax) firstbig = i;
  }
  *max_abs = mx;
  const double rel = nonfin ? INFINITY : sqrt(num / (den > 0 ? den : 1e-30));
  if ((nonfin || firstbig >= 0) && corner_dumps < 4) { /* the top-left corner, to read a layout error from */
    corner_dumps++;
    printf("    %s: got / want, tokens 0..%d x cols 0..15:\n", what, n < 4 ? n - 1 : 3);
    for (int r = 0; r < n && r < 4; r++) {
      printf("     t%d got ", r);
      for (int c = 0; c < 16 && c < N; c++) printf(" %8.3f", got[(int64_t)r * N + c]);
      printf("\n     t%d want", r);
      for (int c = 0; c < 16 && c < N; c++) printf(" %8.3f", want[(int64_t)r * N + c]);
      printf("\n");
    }
  }
  if (nonfin)
    printf("    %s: %lld non-finite; first at token %lld col %lld: %g (want %g)\n", what, (long long)nonfin,
           (long long)(first / N), (long long)(first % N), got[first], want[first]);
  if (firstbig >= 0)
    printf("    %s: first element off by > 1%% of max|ref| (%.3g): token %lld col %lld: %.6g want %.6g\n", what, wmax,
           (long long)(firstbig / N), (long long)(firstbig % N), got[firstbig], want[firstbig]);
  return rel;
}

/* (a): every kernel against the SIMT reference at n tokens; f16: the f16 outputs (else f32) */
static void check_shape(const struct shape *s, struct bufs *B, int n, int nk, int f16) {
  float *want[3];
  for (int i = 0; i < s->n_mm; i++) { /* reference: x·Wᵀ + b by SIMT, + residual on the host */
    hb_cuda_gemm_simt(gc, &B->ref[i], &B->x, &B->w[i], s->bias ? &B->b[i] : NULL, n);
    want[i] = readback(&B->ref[i], n);
    if (s->add)
      for (int64_t j = 0; j < (int64_t)n * s->rows[i]; j++) want[i][j] += B->res[i][j];
  }
  struct hb_tensor *outs = f16 ? B->o16 : B->o32;
  const double tol = f16 ? 3e-3 : 2e-3; /* rel L2; the fast ctest group holds the mma kernel to 4e-3 */
  double rel_k[NK][3] = {{0}};
  float *got_k[NK][3] = {{0}};
  for (int k = 0; k < nk; k++) {
    hb_cuda_set_gemm(gc, KINDS[k]);
    prep_out(s, B, outs, n);
    run_gemm(s, B, outs, &B->x, n);
    for (int i = 0; i < s->n_mm; i++) {
      char what[128];
      snprintf(what, sizeof what, "%s w%d M=%d %-5s %s", s->name, i, n, KNAME[k], f16 ? "f16" : "f32");
      got_k[k][i] = readback(&outs[i], n);
      double mx;
      rel_k[k][i] = compare(what, got_k[k][i], want[i], n, s->rows[i], &mx);
      const int ok = rel_k[k][i] <= tol;
      printf("  %-38s rel %.2e  max|err| %.3e  %s\n", what, rel_k[k][i], mx, ok ? "ok" : "FAIL");
      if (!ok) failures++;
    }
  }
  for (int k = 1; k < nk; k++) /* wgmma as accurate as mma, and close to it */
    for (int i = 0; i < s->n_mm; i++) {
      double mx;
      char what[128];
      snprintf(what, sizeof what, "%s w%d M=%d %s vs mma %s", s->name, i, n, KNAME[k], f16 ? "f16" : "f32");
      const double d = compare(what, got_k[k][i], got_k[0][i], n, s->rows[i], &mx);
      const int ok = rel_k[k][i] <= rel_k[0][i] * 1.25 + 1e-5 && d <= tol;
      printf("  %-38s rel %.2e  max|diff| %.3e  (error ratio to mma %.3f) %s\n", what, d, mx,
             rel_k[0][i] > 0 ? rel_k[k][i] / rel_k[0][i] : 0.0, ok ? "ok" : "FAIL");
      if (!ok) failures++;
    }
  for (int i = 0; i < s->n_mm; i++) {
    free(want[i]);
    for (int k = 0; k < nk; k++) free(got_k[k][i]);
  }
}

/* (b): rows of M = 1 and M = 17 calls against the same rows of an M = 566 call, bit for bit, in row-invariant mode
 * with the gemm kind given. Returns the number of rows that differ. */
static int invariance(const struct shape *s, struct bufs *B, int kind, const char *label) {
  G->set_row_invariant(gc, 1);
  hb_cuda_set_gemm(gc, kind);
  const int big = 566;
  prep_out(s, B, B->o32, big);
  run_gemm(s, B, B->o32, &B->x, big);
  float *full[3];
  for (int i = 0; i < s->n_mm; i++) full[i] = readback(&B->o32[i], big);
  int bad = 0, checked = 0;
  static const int at1[] = {0, 255, 300, 565}, at17[] = {0, 129, 300, 549};
  for (int c = 0; c < 8; c++) {
    const int len = c < 4 ? 1 : 17, r0 = c < 4 ? at1[c] : at17[c - 4];
    struct hb_tensor xv = B->x;
    xv.data = (char *)B->x.data + (size_t)r0 * (size_t)B->x.cols * 2; /* f16 rows */
    xv.rows = B->x.rows - r0;
    /* the add mode reads the residual rows r0.. : put them at rows 0.. of the output */
    for (int i = 0; i < s->n_mm; i++) {
      if (s->add) fill(&B->o32[i], len, 0.0f, B->res[i] + (size_t)r0 * s->rows[i]);
      else poison(&B->o32[i], len);
    }
    run_gemm(s, B, B->o32, &xv, len);
    for (int i = 0; i < s->n_mm; i++) {
      float *part = readback(&B->o32[i], len);
      for (int r = 0; r < len; r++) {
        checked++;
        const float *a = part + (size_t)r * s->rows[i], *b = full[i] + (size_t)(r0 + r) * s->rows[i];
        if (memcmp(a, b, (size_t)s->rows[i] * sizeof(float))) {
          int j = 0;
          while (j < s->rows[i] - 1 && !memcmp(a + j, b + j, sizeof(float))) j++;
          if (bad < 4)
            printf("    %s %s w%d: row %d of an M=%d call at %d differs from row %d of M=%d: col %d %.9g vs %.9g\n",
                   label, s->name, i, r, len, r0, r0 + r, big, j, a[j], b[j]);
          bad++;
        }
      }
      free(part);
    }
  }
  for (int i = 0; i < s->n_mm; i++) free(full[i]);
  G->set_row_invariant(gc, 0);
  printf("  row invariance %-8s %-12s %d of %d rows bit-identical\n", label, s->name, checked - bad, checked);
  return bad;
}

/* a layout probe, for reading a wrong fragment map or swizzle from the log: K = 128, 128 weight rows with q[n][k] =
 * (k % 16) - 8 and scale s_n = 2^-7 (1 + n / 128) (distinct per row), x = the identity (token m has a 1 at k = m), so
 * out[m][n] = ((m % 16) - 8) s_n exactly. Prints, where a kernel misses it, out / s_n + 8 for tokens 0..31 at rows
 * 0..3 (the k % 16 it took for that token), and out / ((m % 16) - 8) / 2^-7 for rows 0..15 (1 + the row / 128 it
 * took). Returns the number of wrong elements. */
static int layout_probe(int kind, const char *label) {
  const int K = 128, N = 128, M = 128;
  struct hb_tensor w, x, o;
  uint8_t q[128 * 64];
  uint16_t sc[128];
  for (int n = 0; n < N; n++) {
    for (int j = 0; j < K / 2; j++) q[n * 64 + j] = (uint8_t)(((2 * j) % 16) | (((2 * j + 1) % 16) << 4));
    sc[n] = (uint16_t)(0x2000 | (n * 8)); /* 2^-7 (1 + n / 128) */
  }
  struct hb_host_weight hw = {HB_Q4, N, K, q, sc, NULL};
  if (G->weight_upload(gc, &w, &hw, &err)) DIE("layout probe: weight_upload");
  act(&x, M, K, 0);
  act(&o, M, N, 1);
  float *h = calloc((size_t)M * K, sizeof *h);
  for (int m = 0; m < M; m++) h[m * K + m] = 1.0f;
  if (G->write(gc, &x, 0, M, h)) DIE("write");
  free(h);
  poison(&o, M);
  hb_cuda_set_gemm(gc, kind);
  struct hb_tensor *o1[1] = {&o};
  const struct hb_tensor *w1[1] = {&w};
  if (hb_cuda_gemm_q4(gc, &x, 1, o1, w1, NULL, M, 0)) DIE("layout probe: declined");
  float *got = readback(&o, M);
  int bad = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      const float want = (float)((m % 16) - 8) * (1.0f + n / 128.0f) / 128.0f;
      if (got[m * N + n] != want) bad++;
    }
  printf("layout probe %-6s: %d of %d elements wrong\n", label, bad, M * N);
  if (bad) {
    printf("  k %% 16 taken (out / s_n + 8), tokens 0..31 (rows of this table) x weight rows 0..3 (want: token %% 16):\n");
    for (int m = 0; m < 32; m++) {
      printf("   t%-3d", m);
      for (int n = 0; n < 4; n++) printf(" %7.2f", got[m * N + n] / ((1.0f + n / 128.0f) / 128.0f) + 8.0f);
      printf("\n");
    }
    printf("  weight row taken (128 (out / (q 2^-7) - 1)), token 1 (q = -7) and 3 (q = -5), rows 0..15 (want: the row):\n");
    for (int t = 1; t <= 3; t += 2) {
      printf("   t%d  ", t);
      for (int n = 0; n < 16; n++) printf(" %6.1f", 128.0f * (got[t * N + n] / ((float)((t % 16) - 8) / 128.0f) - 1.0f));
      printf("\n");
    }
  }
  free(got);
  G->release(gc, &w);
  G->release(gc, &x);
  G->release(gc, &o);
  return bad;
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}
/* (c): median ms of REPS calls after 3 warm-up calls, f16 outputs (the model's), the shape's add mode */
static double time_gemm(const struct shape *s, struct bufs *B, int kind, int n) {
  hb_cuda_set_gemm(gc, kind);
  for (int i = 0; i < s->n_mm; i++) fill(&B->o16[i], n, 1.0f, NULL);
  for (int r = 0; r < 3; r++) run_gemm(s, B, B->o16, &B->x, n);
  for (int r = 0; r < REPS; r++) {
    hb_cuda_mark(gc, 2 * r);
    run_gemm(s, B, B->o16, &B->x, n);
    hb_cuda_mark(gc, 2 * r + 1);
  }
  if (G->sync(gc, &err)) DIE("sync after timing %s", s->name);
  float ms[REPS];
  for (int r = 0; r < REPS; r++) ms[r] = hb_cuda_mark_ms(gc, 2 * r, 2 * r + 1);
  qsort(ms, REPS, sizeof ms[0], cmp_f);
  return ms[REPS / 2];
}

int main(int argc, char **argv) {
  const int quick = argc > 1 && !strcmp(argv[1], "quick");
  const int *Ms = quick ? MS_QUICK : MS_FULL;
  const int nM = quick ? 3 : 8;
  setvbuf(stdout, NULL, _IOLBF, 0); /* a device fault ends the run: the log keeps every line before it */
  struct hb_config cfg = {1, 0, 0};
  if (G->init(&cfg, &gc, &err)) DIE("cuda init");
  char info[512];
  hb_cuda_mem_report(gc, info, sizeof info);
  printf("%s\n", info);
  const int wg_on = hb_cuda_set_gemm(gc, HB_CUDA_GEMM_WG) == HB_CUDA_GEMM_WG;
  const int nk = wg_on ? NK : 1;
  printf("wgmma kernel: %s\n", wg_on ? "runs on this device" : "NOT available (not sm_90 or no sm_90a code): mma only");

  for (int k = 0; k < nk; k++) failures += layout_probe(KINDS[k], KNAME[k]) ? 1 : 0;
  static double t[16][8][NK];
  int inv_bad = 0;
  for (int si = 0; si < NSHAPES; si++) {
    const struct shape *s = &SHAPES[si];
    struct bufs B;
    memset(&B, 0, sizeof B);
    act(&B.x, MMAX, s->K, 0);
    fill(&B.x, MMAX, 2.0f, NULL);
    for (int i = 0; i < s->n_mm; i++) {
      weight_rand(&B.w[i], s->rows[i], s->K);
      act(&B.b[i], 1, s->rows[i], 1);
      fill(&B.b[i], 1, 0.5f, NULL);
      act(&B.o32[i], MMAX, s->rows[i], 1);
      act(&B.o16[i], MMAX, s->rows[i], 0);
      act(&B.ref[i], MMAX, s->rows[i], 1);
      if (!s->add) continue;
      B.res[i] = malloc((size_t)MMAX * s->rows[i] * sizeof(float));
      for (int64_t j = 0; j < (int64_t)MMAX * s->rows[i]; j++) B.res[i][j] = frand() * 3.0f;
    }
    printf("\n## %s: K=%d, rows", s->name, s->K);
    for (int i = 0; i < s->n_mm; i++) printf(" %d", s->rows[i]);
    printf("%s%s\n", s->bias ? ", bias" : "", s->add ? ", add into the output" : "");
    for (int mi = 0; mi < nM; mi++) {
      check_shape(s, &B, Ms[mi], nk, 0);
      if (Ms[mi] == 17 || Ms[mi] == 566) check_shape(s, &B, Ms[mi], nk, 1);
    }
    if (si == 0 || si == 3 || si == 7) {
      inv_bad += invariance(s, &B, HB_CUDA_GEMM_AUTO, "(mode)");
      for (int k = 1; k < nk; k++) invariance(s, &B, KINDS[k], k == 1 ? "(wg INFO)" : "(wg256 INFO)");
    }
    for (int mi = 0; mi < nM; mi++) {
      for (int k = 0; k < nk; k++) t[si][mi][k] = time_gemm(s, &B, KINDS[k], Ms[mi]);
    }
    for (int i = 0; i < s->n_mm; i++) {
      G->release(gc, &B.w[i]);
      G->release(gc, &B.b[i]);
      G->release(gc, &B.o32[i]);
      G->release(gc, &B.o16[i]);
      G->release(gc, &B.ref[i]);
      free(B.res[i]);
    }
    G->release(gc, &B.x);
    fflush(stdout);
  }
  failures += inv_bad;

  printf("\n## timings (median of %d, f16 out; TFLOP/s = 2 M N K / t; speed-up = mma ms / best wg ms)\n\n", REPS);
  printf("| shape | M | mma ms | wg ms | wg256 ms | mma TFLOP/s | wg TFLOP/s | wg256 TFLOP/s | speed-up |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
  for (int si = 0; si < NSHAPES; si++) {
    const struct shape *s = &SHAPES[si];
    int64_t N = 0;
    for (int i = 0; i < s->n_mm; i++) N += s->rows[i];
    for (int mi = 0; mi < nM; mi++) {
      const double fl = 2.0 * Ms[mi] * (double)N * s->K, *tk = t[si][mi];
      double best = 0;
      for (int k = 1; k < nk; k++) best = best == 0 || tk[k] < best ? tk[k] : best;
      printf("| %s | %d | %.4f | %.4f | %.4f | %.1f | %.1f | %.1f | %.2f |\n", s->name, Ms[mi], tk[0], tk[1], tk[2],
             fl / (tk[0] * 1e9), tk[1] > 0 ? fl / (tk[1] * 1e9) : 0.0, tk[2] > 0 ? fl / (tk[2] * 1e9) : 0.0,
             best > 0 ? tk[0] / best : 0.0);
    }
  }
  /* one 3B layer's four GEMMs (shapes 0-3) x 36 layers at each M: the prefill's GEMM time */
  printf("\n| 3B GEMMs x 36 layers | M | mma ms | wg ms | wg256 ms | best per shape ms |\n|---|---|---|---|---|---|\n");
  for (int mi = 0; mi < nM; mi++) {
    double sum[NK] = {0}, best = 0;
    for (int si = 0; si < 4; si++) {
      double b = t[si][mi][0];
      for (int k = 0; k < nk; k++) {
        sum[k] += t[si][mi][k];
        if (t[si][mi][k] < b) b = t[si][mi][k];
      }
      best += b;
    }
    printf("| 3B | %d | %.3f | %.3f | %.3f | %.3f |\n", Ms[mi], 36 * sum[0], 36 * sum[1], 36 * sum[2], 36 * best);
  }
  printf("\nrow-invariant mode: %s\n", inv_bad ? "FAILED" : "ok");
  printf("correctness failures: %d\n", failures);
  G->free(gc);
  if (failures) return 1;
  return wg_on ? 0 : 2;
}
