/* test_cpu_kernels.c — the CPU hot kernels against their specifications, on random inputs with odd
 * sizes and tails:
 *   repack:    q4x16 repack + row dequantization is bit-identical to quant/q4.c's.
 *   pack_bytes: q4x16_pack alone and over pools of 2 and 3 threads gives exactly the bytes the
 *              layout comment in q4x16.h specifies (a nibble-by-nibble reference written here).
 *   quantize:  every set's activation quantization (16-bit, two int8 planes) is bit-identical
 *              to the generic C one.
 *   matmul:    generic path (both modes) vs the scalar f32 reference within the quantization bound; every
 *              SIMD set vs the generic path within float rounding; any row range / token count.
 *   matmul_exact: every SIMD set bit-identical to the exact integer arithmetic + fixed f32 epilogue.
 *   attention: each set's attn_tile vs a naive double-precision softmax (GQA, windows, tiles).
 *   silu:      fast exp vs expf.
 *   threadpool: barrier and run under 1..4 threads.
 *   backend_ops: the op table with the selected set vs the exact (scalar) op table.
 *   norm_matmul: the fused norm + matmuls (+ add) job equals the separate ops bit for bit.
 *   batch_invariance: a token's matmul output alone and inside batches of 1..37, bit-identical.
 *   kernel_select: the kernel set picked for each feature level (synthetic and this CPU masked).
 * Sets the CPU cannot run are skipped with a note. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"
#include "base/cpu_features.h"
#include "base/half.h"
#include "base/threadpool.h"
#include "quant/q4.h"
#include "test.h"

static uint64_t rng = 0x1234567;
static float frand(void) { /* uniform [-1, 1) */
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static const struct cpu_kernels *sets[5];
static int n_sets;
static void init_sets(void) {
  if (n_sets) return;
  const struct cpu_features *f = cpu_features_get();
  sets[n_sets++] = &cpu_kernels_generic;
#if defined(__x86_64__)
  if (f->avx2 && f->fma && f->f16c) sets[n_sets++] = &cpu_kernels_avx2;
  else printf("  (skipping avx2: not supported here)\n");
  if (f->avx2 && f->fma && f->f16c && f->avxvnni) sets[n_sets++] = &cpu_kernels_avxvnni;
  else printf("  (skipping avx2-vnni: not supported here)\n");
  if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni) sets[n_sets++] = &cpu_kernels_avx512;
  else printf("  (skipping avx512: not supported here)\n");
  if (f->amx && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni) sets[n_sets++] = &cpu_kernels_amx;
  else printf("  (skipping avx512-amx: not supported here)\n");
#else
  (void)f;
#endif
}

/* a random int4 weight in the reference layout (quantized from random f32 rows) */
static struct cpu_q4 make_q4(int64_t rows, int64_t cols) {
  struct cpu_q4 w = {rows, cols, malloc((size_t)(rows * cols / 2)), malloc((size_t)(rows * cols / 128 * 2)), NULL};
  float *row = malloc((size_t)cols * sizeof *row);
  for (int64_t r = 0; r < rows; r++) {
    float amp = 0.01f + (float)(r % 7) * 0.3f;
    for (int64_t c = 0; c < cols; c++) row[c] = frand() * amp;
    if (r == 3) for (int64_t c = 0; c < 128 && c < cols; c++) row[c] = 0.0f; /* a zero group */
    q4_quantize_row(row, cols, w.qs + r * cols / 2, w.d + r * cols / 128);
  }
  free(row);
  return w;
}

static struct cpu_q4 clone_q4(const struct cpu_q4 *s) {
  struct cpu_q4 w = {s->rows, s->cols, malloc((size_t)(s->rows * s->cols / 2)), malloc((size_t)(s->rows * s->cols / 128 * 2)), NULL};
  memcpy(w.qs, s->qs, (size_t)(s->rows * s->cols / 2));
  memcpy(w.d, s->d, (size_t)(s->rows * s->cols / 128 * 2));
  return w;
}

static void free_q4(struct cpu_q4 *w) {
  free(w->qs);
  free(w->d);
  free(w->packed);
}

/* 16-bit activations as two int8 planes and as int16 (cpu_kernels.h) */
static struct cpu_q8 make_q8(int n, int64_t cols) {
  struct cpu_q8 a = {malloc((size_t)(n * cols)), malloc((size_t)(n * cols)), malloc((size_t)(n * cols / 128) * 4),
                     malloc((size_t)(n * cols / 128) * 4), cols, malloc((size_t)(n * cols) * 2),
                     malloc(q8_tiles_bytes(n, cols / 128))};
  return a;
}
static void free_q8(struct cpu_q8 *a) { free(a->q); free(a->lo); free(a->s); free(a->c); free(a->v16); free(a->tiles); }

TEST_GROUP(repack) {
  const int64_t shapes[][2] = {{1, 128}, {16, 128}, {17, 256}, {37, 384}, {64, 896}, {5, 1024}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t rows = shapes[s][0], cols = shapes[s][1];
    struct cpu_q4 ref = make_q4(rows, cols), pk = clone_q4(&ref);
    REQUIRE(q4x16_repack(&pk) == 0);
    CHECK(pk.qs == NULL && pk.d == NULL && pk.packed != NULL);
    float *a = malloc((size_t)cols * 4), *b = malloc((size_t)cols * 4);
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
      q4_dequantize_row(ref.qs + r * cols / 2, ref.d + r * cols / 128, cols, a);
      q4x16_row(&pk, r, b);
      if (memcmp(a, b, (size_t)cols * 4)) bad++;
    }
    CHECKF(bad == 0, "%lldx%lld: %d rows differ", (long long)rows, (long long)cols, bad);
    free(a); free(b);
    free_q4(&ref); free_q4(&pk);
  }
}

/* q4x16.h's layout, one nibble at a time: the bytes any q4x16_pack must produce */
static uint8_t *spec_pack(const struct cpu_q4 *w, size_t *bytes) {
  int64_t nblk = (w->rows + 15) / 16, cols = w->cols, G = cols / 128;
  size_t qb = (size_t)(nblk * cols * 8);
  *bytes = qb + (size_t)(nblk * G * 16 * 2);
  uint8_t *p = calloc(1, *bytes);
  uint16_t *dp = (uint16_t *)(p + qb);
  for (int64_t r = 0; r < nblk * 16; r++) {
    int64_t b = r / 16, l = r % 16;
    for (int64_t k = 0; k < cols; k++) {
      int u = r < w->rows ? (w->qs[r * cols / 2 + k / 2] >> (4 * (k & 1))) & 15 : 8;
      int64_t g = k / 128, c = (k % 128) / 8, j = k % 8;
      p[b * cols * 8 + (g * 16 + c) * 64 + 4 * l + (j & 3)] |= (uint8_t)(u << (j < 4 ? 0 : 4));
    }
    for (int64_t g = 0; g < G; g++) dp[(b * G + g) * 16 + l] = r < w->rows ? w->d[r * G + g] : 0;
  }
  return p;
}

TEST_GROUP(pack_bytes) {
  /* 300 rows: several 128-row chunks a worker claims, and a padded last block */
  const int64_t shapes[][2] = {{1, 128}, {17, 256}, {300, 896}, {129, 2048}};
  struct threadpool *pools[] = {NULL, threadpool_create(2), threadpool_create(3)};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    struct cpu_q4 w = make_q4(shapes[s][0], shapes[s][1]);
    size_t bytes;
    uint8_t *want = spec_pack(&w, &bytes);
    for (int i = 0; i < 3; i++) {
      struct cpu_q4 pk = {.rows = w.rows, .cols = w.cols};
      REQUIRE(q4x16_pack(&pk, w.qs, w.d, pools[i]) == 0);
      CHECKF(!memcmp(pk.packed, want, bytes), "%lldx%lld, pool of %d: packed bytes differ from the layout",
             (long long)w.rows, (long long)w.cols, pools[i] ? threadpool_size(pools[i]) : 0);
      q4x16_free(&pk);
    }
    free(want);
    free_q4(&w);
  }
  for (int i = 1; i < 3; i++) threadpool_free(pools[i]);
}

static void quantize_cases(void);
TEST_GROUP(quantize) {
  init_sets();
  quantize_cases();
}
static void quantize_cases(void) {
  const int64_t colss[] = {128, 896, 4864};
  for (size_t ci = 0; ci < 3; ci++) {
    int64_t cols = colss[ci], ldx = cols + 5;
    int n = 7;
    float *x = malloc((size_t)(n * ldx) * 4);
    for (int64_t i = 0; i < n * ldx; i++) x[i] = frand() * (i % 3 ? 1.0f : 40.0f);
    for (int64_t i = 0; i < 128; i++) x[2 * ldx + i] = 0.0f; /* an all-zero block */
    struct cpu_q8 ref = make_q8(n, cols);
    q4x16_q8_quantize_generic(x, ldx, 0, n, &ref);
    /* bound: |x - s*v| <= s/2, v = 256*hi + lo; hi in [-127, 127]; c = -8 * sum(v) */
    int bad = 0, badsplit = 0, badc = 0, badv16 = 0, badtiles = 0;
    for (int t = 0; t < n; t++)
      for (int64_t k = 0; k < cols; k++) {
        float s = ref.s[t * (cols / 128) + k / 128];
        int v = 256 * ref.q[t * cols + k] + ref.lo[t * cols + k];
        if (ref.v16[t * cols + k] != v) badv16++;
        const int64_t to = q8_tile_off(t, k / 128, (int)(k % 128) / 64, cols / 128) + k % 64;
        if (ref.tiles[to] != ref.q[t * cols + k] || ref.tiles[to + 1024] != ref.lo[t * cols + k]) badtiles++;
        if (fabsf(x[t * ldx + k] - s * (float)v) > s * 0.505f + 1e-30f) bad++; /* 0.5 + rounding of x*id and s*v */
        if (ref.q[t * cols + k] < -127 || v < -Q8_VMAX || v > Q8_VMAX) badsplit++;
      }
    for (int t = 0; t < n; t++)
      for (int64_t g = 0; g < cols / 128; g++) {
        int sum = 0;
        for (int i = 0; i < 128; i++)
          sum += 256 * ref.q[t * cols + g * 128 + i] + ref.lo[t * cols + g * 128 + i];
        if (ref.c[t * (cols / 128) + g] != -8 * sum) badc++;
      }
    CHECKF(bad == 0, "generic quantization error out of bound at %d places", bad);
    CHECKF(badsplit == 0 && badc == 0, "generic split out of range at %d places, c wrong in %d blocks", badsplit, badc);
    CHECKF(badv16 == 0, "generic v16 differs from 256 * hi + lo at %d places", badv16);
    CHECKF(badtiles == 0, "generic tile-order copy differs from the planes at %d places", badtiles);
    for (int si = 1; si < n_sets; si++) {
      struct cpu_q8 a = make_q8(n, cols);
      memset(a.q, 0x55, (size_t)(n * cols));
      memset(a.lo, 0x55, (size_t)(n * cols));
      memset(a.v16, 0x55, (size_t)(n * cols) * 2);
      memset(a.tiles, 0x55, q8_tiles_bytes(n, cols / 128));
      sets[si]->q8_quantize(x, ldx, 0, 3, &a);
      sets[si]->q8_quantize(x, ldx, 3, n, &a);
      CHECKF(!memcmp(a.v16, ref.v16, (size_t)(n * cols) * 2), "%s: v16 differs (cols %lld)", sets[si]->name, (long long)cols);
      int badt = 0; /* the rows of the batch in the tile-order copy (rows past n are never read), where the set fills it */
      for (int t = 0; t < n && sets[si]->q8_tiles > 0; t++)
        for (int64_t g = 0; g < cols / 128; g++)
          for (int st = 0; st < 2; st++) {
            const int64_t o = q8_tile_off(t, g, st, cols / 128);
            badt += memcmp(a.tiles + o, ref.tiles + o, 64) != 0;
            badt += memcmp(a.tiles + o + 1024, ref.tiles + o + 1024, 64) != 0;
          }
      CHECKF(badt == 0, "%s: the tile-order copy differs in %d runs of 64 (cols %lld)", sets[si]->name, badt, (long long)cols);
      CHECKF(!memcmp(a.q, ref.q, (size_t)(n * cols)), "%s: q differs (cols %lld)", sets[si]->name, (long long)cols);
      CHECKF(!memcmp(a.lo, ref.lo, (size_t)(n * cols)), "%s: lo differs (cols %lld)", sets[si]->name, (long long)cols);
      CHECKF(!memcmp(a.s, ref.s, (size_t)(n * cols / 128) * 4), "%s: s differs", sets[si]->name);
      CHECKF(!memcmp(a.c, ref.c, (size_t)(n * cols / 128) * 4), "%s: c differs", sets[si]->name);
      free_q8(&a);
    }
    free_q8(&ref);
    free(x);
  }
}

/* one case: rows x cols weight, n tokens, output rows [r0, r1) */
static void check_matmul(int64_t rows, int64_t cols, int n, int64_t r0, int64_t r1) {
  struct cpu_q4 ref = make_q4(rows, cols), pk = clone_q4(&ref);
  REQUIRE(q4x16_repack(&pk) == 0);
  int64_t ldx = cols + 3, ldo = rows + 2;
  float *x = malloc((size_t)(n * ldx) * 4), *o_ref = malloc((size_t)(n * ldo) * 4),
        *o_gen = malloc((size_t)(n * ldo) * 4), *o = malloc((size_t)(n * ldo) * 4);
  for (int64_t i = 0; i < n * ldx; i++) x[i] = frand();
  for (int64_t i = 0; i < n * ldo; i++) o_ref[i] = o_gen[i] = -7.0f;
  cpu_kernels_ref.matmul_q4(&ref, x, ldx, n, r0, r1, o_ref, ldo);
  struct cpu_q8 a = make_q8(n, cols);
  q4x16_q8_quantize_generic(x, ldx, 0, n, &a);
  q4x16_matmul_generic(&pk, &a, n, r0, r1, o_gen, ldo);
  /* quantization error: |sum w (x - x')| <= sum |w| * s/2 per group; bound with the dequantized row */
  float *wr = malloc((size_t)cols * 4);
  int bad = 0, untouched = 1;
  for (int64_t r = 0; r < rows; r++) {
    q4_dequantize_row(ref.qs + r * cols / 2, ref.d + r * cols / 128, cols, wr);
    for (int t = 0; t < n; t++) {
      float got = o_gen[t * ldo + r], want = o_ref[t * ldo + r];
      if (r < r0 || r >= r1) { if (got != -7.0f) untouched = 0; continue; }
      double bound = 1e-4;
      for (int64_t k = 0; k < cols; k++) bound += fabs(wr[k]) * a.s[t * (cols / 128) + k / 128] * 0.5 + fabs(wr[k] * x[t * ldx + k]) * 1e-6;
      if (fabs(got - want) > bound) {
        if (bad++ < 3) fprintf(stderr, "  generic r %lld t %d: %g vs ref %g (bound %g)\n", (long long)r, t, got, want, bound);
      }
    }
  }
  CHECKF(bad == 0, "generic vs ref: %d outputs out of the quantization bound (%lldx%lld n %d)", bad, (long long)rows, (long long)cols, n);
  CHECK(untouched);
  for (int si = 1; si < n_sets; si++) {
    for (int64_t i = 0; i < n * ldo; i++) o[i] = -7.0f;
    sets[si]->matmul_q4q8(&pk, &a, n, r0, r1, o, ldo);
    int bad2 = 0, wrote_outside = 0;
    for (int t = 0; t < n; t++)
      for (int64_t r = 0; r < ldo; r++) {
        float got = o[t * ldo + r], want = o_gen[t * ldo + r];
        if (r < r0 || r >= r1) { if (got != -7.0f) wrote_outside++; continue; }
        if (fabsf(got - want) > 1e-5f * (1.0f + fabsf(want))) {
          if (bad2++ < 3) fprintf(stderr, "  %s r %lld t %d: %.9g vs generic %.9g\n", sets[si]->name, (long long)r, t, got, want);
        }
      }
    CHECKF(bad2 == 0 && wrote_outside == 0, "%s: %d mismatches, %d writes outside [r0,r1) (%lldx%lld n %d rows %lld..%lld)",
           sets[si]->name, bad2, wrote_outside, (long long)rows, (long long)cols, n, (long long)r0, (long long)r1);
  }
  free(wr); free_q8(&a);
  free(x); free(o_ref); free(o_gen); free(o);
  free_q4(&ref); free_q4(&pk);
}

static void matmul_cases(void);
TEST_GROUP(matmul) {
  init_sets();
  matmul_cases();
}
static void matmul_cases(void) {
  check_matmul(16, 128, 1, 0, 16);
  check_matmul(1, 128, 1, 0, 1);
  check_matmul(37, 256, 1, 0, 37);
  check_matmul(37, 256, 3, 5, 29);
  check_matmul(64, 896, 1, 16, 48);
  for (int n = 1; n <= 13; n++) check_matmul(48, 384, n, n % 3, 48 - n % 5);
  check_matmul(130, 1024, 17, 0, 130);
  check_matmul(96, 4864, 2, 0, 96);
}

/* ---- matmul_exact: every SIMD set bit for bit against the exact arithmetic ----
 * The specification of the quantized-activation path written out here: per output and 128-group
 * the integer dot S = c + sum(u * (256 * hi + lo)) (exact), then acc = fma((float)S, d * s, acc)
 * in group order, starting from 0 (what both SIMD sets do, whatever their tiling). Shapes cover
 * token tails (n = 1..9, 13, 17), odd block counts, row ranges inside blocks and several L2 panels
 * (cols 4864: 6 blocks a panel). */
static void spec_matmul_exact(const struct cpu_q4 *w, const struct cpu_q8 *a, int n, int64_t r0, int64_t r1,
                              float *out, int64_t ldo) {
  int64_t G = w->cols / 128;
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *qp = q4x16_quants(w, r / 16);
    const uint16_t *dp = q4x16_scales(w, r / 16);
    int l = (int)(r % 16);
    for (int t = 0; t < n; t++) {
      const int8_t *qh = a->q + t * a->cols, *ql = a->lo + t * a->cols;
      float acc = 0.0f;
      for (int64_t g = 0; g < G; g++) {
        int64_t S = a->c[t * G + g];
        for (int64_t k = g * 128; k < g * 128 + 128; k++) {
          int64_t c = (k % 128) / 8, j = k % 8;
          uint8_t byte = qp[(g * 16 + c) * 64 + 4 * l + j % 4];
          int u = j < 4 ? byte & 15 : byte >> 4;
          S += (int64_t)u * (256 * qh[k] + ql[k]);
        }
        float sc = f16_to_f32(dp[g * 16 + l]) * a->s[t * G + g];
        acc = fmaf((float)S, sc, acc);
      }
      out[t * ldo + r] = acc;
    }
  }
}

static int exact_no_v16; /* 1: the activations come without cpu_q8.v16 (the planes' path at every batch size) */
static int exact_no_tiles; /* 1: without cpu_q8.tiles (the AMX set makes its own tile-order copy) */
static void check_matmul_exact(int64_t rows, int64_t cols, int n, int64_t r0, int64_t r1) {
  struct cpu_q4 pk = make_q4(rows, cols);
  REQUIRE(q4x16_repack(&pk) == 0);
  int64_t ldx = cols + 5, ldo = rows + 3;
  float *x = malloc((size_t)(n * ldx) * 4), *o_spec = malloc((size_t)(n * ldo) * 4), *o = malloc((size_t)(n * ldo) * 4);
  for (int64_t i = 0; i < n * ldx; i++) x[i] = frand() * (1.0f + (float)(i % 5)); /* uneven block scales */
  struct cpu_q8 a = make_q8(n, cols);
  if (exact_no_v16) { free(a.v16); a.v16 = NULL; }
  if (exact_no_tiles) { free(a.tiles); a.tiles = NULL; }
  q4x16_q8_quantize_generic(x, ldx, 0, n, &a);
  for (int64_t i = 0; i < n * ldo; i++) o_spec[i] = -7.0f;
  spec_matmul_exact(&pk, &a, n, r0, r1, o_spec, ldo);
  for (int si = 1; si < n_sets; si++) {
    for (int64_t i = 0; i < n * ldo; i++) o[i] = -7.0f;
    sets[si]->matmul_q4q8(&pk, &a, n, r0, r1, o, ldo);
    int bad = 0;
    for (int64_t i = 0; i < n * ldo; i++)
      if (memcmp(&o[i], &o_spec[i], 4) && bad++ < 3)
        fprintf(stderr, "  %s t %lld r %lld: %.9g vs %.9g\n", sets[si]->name, (long long)(i / ldo), (long long)(i % ldo), o[i], o_spec[i]);
    CHECKF(bad == 0, "%s: %d outputs not bit-identical to the exact arithmetic (%lldx%lld n %d rows %lld..%lld)",
           sets[si]->name, bad, (long long)rows, (long long)cols, n, (long long)r0, (long long)r1);
  }
  free_q8(&a); free(x); free(o_spec); free(o); free_q4(&pk);
}

TEST_GROUP(matmul_exact) {
  init_sets();
  for (int n = 1; n <= 9; n++) check_matmul_exact(80, 256, n, 0, 80);           /* 5 blocks: a lone last one */
  check_matmul_exact(96, 384, 13, 7, 90);                                        /* ranges inside blocks */
  check_matmul_exact(33, 128, 17, 0, 33);                                        /* a padded last block */
  check_matmul_exact(16 * 13 + 5, 4864, 6, 16, 16 * 13 + 5);                     /* panels of 6 blocks */
  check_matmul_exact(16 * 13 + 5, 4864, 1, 3, 16 * 13 + 5);                      /* decode over panels */
  check_matmul_exact(64, 896, 1, 0, 64);
  /* prefill-sized batches (the AMX set's tiles of 16 tokens, full and tail; odd block pairs) */
  for (int n = 15; n <= 18; n++) check_matmul_exact(80, 256, n, 0, 80);
  check_matmul_exact(16 * 7 + 9, 896, 40, 5, 16 * 7 + 3);
  check_matmul_exact(48, 4864, 33, 0, 48);
  check_matmul_exact(16 * 20 + 5, 896, 20, 9, 16 * 20 + 5); /* the AVX2 int16 path: 3 panels, tail blocks and rows */
  exact_no_v16 = 1; /* without v16 a prefill-sized batch takes the planes (cpu_kernels.h: v16 is optional) */
  check_matmul_exact(80, 256, 13, 0, 80);
  check_matmul_exact(16 * 7 + 9, 896, 40, 5, 16 * 7 + 3);
  exact_no_v16 = 0;
  exact_no_tiles = 1; /* the AMX set packs the tile-order copy itself (a direct caller's activations) */
  for (int n = 15; n <= 17; n++) check_matmul_exact(80, 256, n, 0, 80);
  check_matmul_exact(16 * 7 + 9, 896, 40, 5, 16 * 7 + 3);
  exact_no_tiles = 0;
}

/* ---- attention ---- */

struct attn_case {
  int n_heads, n_kv, hd, window, block_size, n_seqs;
  int n_tok[3];  /* new tokens per sequence in this batch */
  int past[3];   /* positions already in the cache per sequence */
};

static void naive_attn(const struct cpu_attn_job *j, int n_tokens, float *out) {
  int hd = j->head_dim, G = j->n_heads / j->n_kv_heads;
  int64_t ldq = (int64_t)j->n_heads * hd, ldkv = (int64_t)j->n_kv_heads * hd;
  double *sc = malloc(sizeof(double) * 8192);
  for (int t = 0; t < n_tokens; t++)
    for (int h = 0; h < j->n_heads; h++) {
      int pos = j->pos[t], seq = j->seq[t], kvh = h / G;
      int start = j->window > 0 && pos - j->window + 1 > 0 ? pos - j->window + 1 : 0;
      double mx = -1e300, sum = 0;
      for (int p = start; p <= pos; p++) {
        int64_t s = (int64_t)j->block_table[seq * j->max_blocks + p / j->block_size] * j->block_size + p % j->block_size;
        double d = 0;
        for (int e = 0; e < hd; e++) d += (double)j->q[t * ldq + h * hd + e] * j->k[s * ldkv + kvh * hd + e];
        sc[p - start] = d * j->scale;
        if (sc[p - start] > mx) mx = sc[p - start];
      }
      for (int p = start; p <= pos; p++) { sc[p - start] = exp(sc[p - start] - mx); sum += sc[p - start]; }
      for (int e = 0; e < hd; e++) {
        double acc = 0;
        for (int p = start; p <= pos; p++) {
          int64_t s = (int64_t)j->block_table[seq * j->max_blocks + p / j->block_size] * j->block_size + p % j->block_size;
          acc += sc[p - start] * j->v[s * ldkv + kvh * hd + e];
        }
        out[t * ldq + h * hd + e] = (float)(acc / sum);
      }
    }
  free(sc);
}

static void check_attn(const struct attn_case *c) {
  int hd = c->hd, G = c->n_heads / c->n_kv;
  int max_blocks = 0, n_tokens = 0, n_blocks = 0;
  for (int s = 0; s < c->n_seqs; s++) {
    int nb = (c->past[s] + c->n_tok[s] + c->block_size - 1) / c->block_size;
    if (nb > max_blocks) max_blocks = nb;
    n_tokens += c->n_tok[s];
  }
  n_blocks = max_blocks * c->n_seqs;
  int32_t *bt = malloc(sizeof(int32_t) * (size_t)n_blocks), *pos = malloc(sizeof(int32_t) * (size_t)n_tokens),
          *seq = malloc(sizeof(int32_t) * (size_t)n_tokens);
  /* a scrambled block assignment: block i of seq s -> a permutation */
  for (int i = 0; i < n_blocks; i++) bt[i] = (i * 7 + 3) % n_blocks;
  int64_t ldkv = (int64_t)c->n_kv * hd, ldq = (int64_t)c->n_heads * hd;
  float *k = malloc(sizeof(float) * (size_t)(n_blocks * c->block_size * ldkv)),
        *v = malloc(sizeof(float) * (size_t)(n_blocks * c->block_size * ldkv));
  for (int64_t i = 0; i < n_blocks * c->block_size * ldkv; i++) { k[i] = frand(); v[i] = frand(); }
  int t = 0;
  for (int s = 0; s < c->n_seqs; s++)
    for (int i = 0; i < c->n_tok[s]; i++, t++) { seq[t] = s; pos[t] = c->past[s] + i; }
  float *q = malloc(sizeof(float) * (size_t)(n_tokens * ldq)), *o_ref = malloc(sizeof(float) * (size_t)(n_tokens * ldq)),
        *o = malloc(sizeof(float) * (size_t)(n_tokens * ldq));
  for (int64_t i = 0; i < n_tokens * ldq; i++) q[i] = frand() * 2.0f;
  struct cpu_attn_job j = {q, o, k, v, pos, seq, bt, max_blocks, c->block_size, c->n_heads, c->n_kv, hd, c->window,
                           1.0f / sqrtf((float)hd), 0.0f};
  naive_attn(&j, n_tokens, o_ref);
  int tq = 8192 / (G * hd);
  if (tq > 16) tq = 16;
  for (int si = 0; si < n_sets; si++) {
    for (int64_t i = 0; i < n_tokens * ldq; i++) o[i] = NAN;
    for (int kvh = 0; kvh < c->n_kv; kvh++)
      for (int t0 = 0; t0 < n_tokens;) {
        int t1 = t0 + 1;
        while (t1 < n_tokens && t1 - t0 < tq && seq[t1] == seq[t0]) t1++;
        sets[si]->attn_tile(&j, t0, t1, kvh);
        t0 = t1;
      }
    int bad = 0;
    for (int64_t i = 0; i < n_tokens * ldq; i++)
      if (!(fabsf(o[i] - o_ref[i]) <= 2e-5f)) {
        if (bad++ < 3) fprintf(stderr, "  %s [%lld]: %g vs %g\n", sets[si]->name, (long long)i, o[i], o_ref[i]);
      }
    CHECKF(bad == 0, "%s: %d of %d attention outputs differ (heads %d/%d hd %d window %d)", sets[si]->name, bad,
           (int)(n_tokens * ldq), c->n_heads, c->n_kv, hd, c->window);
  }
  free(bt); free(pos); free(seq); free(k); free(v); free(q); free(o_ref); free(o);
}

TEST_GROUP(attention) {
  init_sets();
  const struct attn_case cases[] = {
    {14, 2, 64, 0, 16, 1, {37, 0, 0}, {0, 0, 0}},      /* 0.5B shape, prefill with a tail */
    {14, 2, 64, 0, 16, 1, {1, 0, 0}, {70, 0, 0}},      /* decode */
    {16, 2, 128, 0, 32, 1, {19, 0, 0}, {40, 0, 0}},    /* 3B shape, chunked prefill */
    {4, 4, 16, 5, 4, 3, {3, 1, 9}, {10, 0, 2}},        /* MHA, sliding window, three sequences */
    {8, 1, 32, 0, 8, 2, {1, 1, 0}, {100, 3, 0}},       /* MQA, two decoding sequences */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_attn(&cases[i]);
}

/* A token's attention output must not depend on the tile it is computed in: which tokens share its tile, where in
 * the tile it sits, how the prompt was chunked (batch invariance, docs/decisions.md). One sequence of n new tokens
 * after `past` cached ones, attended with tiles of every length 1..16 and with tiles starting at every offset; every
 * way must give the bits of one-token tiles. Covers rows of different tokens sharing vectors or register tiles (odd
 * and even G, head_dim 64 and 128) and sliding windows whose first key is not on a 16-key boundary. */
static void check_attn_invariance(int n_heads, int n_kv, int hd, int window, float softcap) {
  const int n = 21, past = 45, bs = 16, G = n_heads / n_kv;
  const int max_blocks = (past + n + bs - 1) / bs;
  int32_t *bt = malloc(sizeof(int32_t) * (size_t)max_blocks), pos[21], seq[21];
  for (int i = 0; i < max_blocks; i++) bt[i] = (i * 5 + 2) % max_blocks;
  const int64_t ldkv = (int64_t)n_kv * hd, ldq = (int64_t)n_heads * hd, nkv = (int64_t)max_blocks * bs * ldkv;
  float *k = malloc(sizeof(float) * (size_t)nkv), *v = malloc(sizeof(float) * (size_t)nkv);
  float *q = malloc(sizeof(float) * (size_t)(n * ldq)), *ref = malloc(sizeof(float) * (size_t)(n * ldq)),
        *o = malloc(sizeof(float) * (size_t)(n * ldq));
  for (int64_t i = 0; i < nkv; i++) { k[i] = frand(); v[i] = frand(); }
  for (int64_t i = 0; i < n * ldq; i++) q[i] = frand() * 2.0f;
  for (int t = 0; t < n; t++) { pos[t] = past + t; seq[t] = 0; }
  struct cpu_attn_job j = {q, o, k, v, pos, seq, bt, max_blocks, bs, n_heads, n_kv, hd, window, 1.0f / sqrtf((float)hd),
                           softcap};
  int tq_max = 8192 / (G * hd);
  if (tq_max > 16) tq_max = 16;
  for (int si = 0; si < n_sets; si++) {
    j.out = ref;
    for (int kvh = 0; kvh < n_kv; kvh++)
      for (int t = 0; t < n; t++) sets[si]->attn_tile(&j, t, t + 1, kvh);
    j.out = o;
    int bad_cases = 0;
    for (int tq = 2; tq <= tq_max; tq++)
      for (int first = 0; first < tq && first < n; first++) { /* tiles [0, first), then tq at a time */
        for (int64_t i = 0; i < n * ldq; i++) o[i] = NAN;
        for (int kvh = 0; kvh < n_kv; kvh++)
          for (int t0 = 0; t0 < n;) {
            int t1 = t0 == 0 && first ? first : t0 + tq;
            if (t1 > n) t1 = n;
            sets[si]->attn_tile(&j, t0, t1, kvh);
            t0 = t1;
          }
        if (memcmp(o, ref, sizeof(float) * (size_t)(n * ldq))) {
          if (bad_cases++ < 2) fprintf(stderr, "  %s: tiles of %d after a first of %d differ from one-token tiles\n",
                                       sets[si]->name, tq, first);
        }
      }
    CHECKF(bad_cases == 0, "%s: %d tilings change a token's bits (heads %d/%d hd %d window %d softcap %g)",
           sets[si]->name, bad_cases, n_heads, n_kv, hd, window, softcap);
  }
  free(bt); free(k); free(v); free(q); free(ref); free(o);
}

TEST_GROUP(attention_invariance) {
  init_sets();
  check_attn_invariance(14, 2, 64, 0, 0.0f);   /* Qwen2.5-0.5B: G = 7 */
  check_attn_invariance(16, 2, 128, 0, 0.0f);  /* Qwen2.5-3B: G = 8, head_dim 128 */
  check_attn_invariance(4, 2, 64, 0, 0.0f);    /* G = 2 */
  check_attn_invariance(6, 2, 64, 19, 0.0f);   /* a sliding window not on a key-block boundary */
  check_attn_invariance(8, 1, 256, 37, 0.0f);  /* Gemma 4's sliding layers: head_dim 256, window over 2 key blocks */
  check_attn_invariance(4, 2, 64, 11, 30.0f);  /* soft-capped scores */
}

TEST_GROUP(silu) {
  init_sets();
  int n = 1001;
  float *g = malloc(sizeof(float) * (size_t)n), *u = malloc(sizeof(float) * (size_t)n), *o = malloc(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; i++) { g[i] = frand() * 30.0f; u[i] = frand(); }
  g[0] = -100.0f; g[1] = 100.0f; g[2] = 0.0f;
  for (int si = 0; si < n_sets; si++) {
    sets[si]->silu_mul(o, g, u, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
      float want = g[i] / (1.0f + expf(-g[i])) * u[i];
      if (!(fabsf(o[i] - want) <= 4e-6f * fabsf(want) + 1e-30f)) {
        if (bad++ < 3) fprintf(stderr, "  %s silu(%g)*%g = %g vs %g\n", sets[si]->name, g[i], u[i], o[i], want);
      }
    }
    CHECKF(bad == 0, "%s: %d silu outputs differ", sets[si]->name, bad);
  }
  free(g); free(u); free(o);
}

/* ---- threadpool ---- */

struct tp_job { struct threadpool *p; int *slots; int n; long sum; int rounds; };
static void tp_worker(void *arg, int ith, int nth) {
  struct tp_job *j = arg;
  for (int r = 0; r < j->rounds; r++) {
    j->slots[ith] = r * 100 + ith;
    threadpool_barrier(j->p);
    /* everyone sees every slot of this round */
    long s = 0;
    for (int i = 0; i < nth; i++) s += j->slots[i] - r * 100;
    if (ith == 0) j->sum += s;
    threadpool_barrier(j->p);
  }
}

TEST_GROUP(threadpool) {
  for (int nt = 1; nt <= 4; nt++) {
    struct threadpool *p = threadpool_create(nt);
    REQUIRE(p != NULL);
    CHECK(threadpool_size(p) == nt);
    int slots[4] = {0};
    for (int rep = 0; rep < 50; rep++) {
      struct tp_job j = {p, slots, nt, 0, 20};
      threadpool_run(p, tp_worker, &j);
      CHECKF(j.sum == 20L * nt * (nt - 1) / 2, "threads %d: barrier sum %ld", nt, j.sum);
    }
    threadpool_free(p);
  }
}

/* ---- the op table: selected SIMD set vs the exact scalar path ---- */

TEST_GROUP(backend_ops) {
  struct hearth_err err = {0};
  struct hb_ctx *fast = NULL, *exact = NULL;
  struct hb_config cf = {.n_threads = 3, .exact = 0}, ce = {.n_threads = 2, .exact = 1};
  REQUIRE(hb_cpu_ops.init(&cf, &fast, &err) == 0);
  REQUIRE(hb_cpu_ops.init(&ce, &exact, &err) == 0);
  const struct hb_ops *be = &hb_cpu_ops;
  int64_t rows = 200, cols = 384;
  int n = 11;
  struct cpu_q4 w = make_q4(rows, cols);
  struct hb_host_weight hw = {HB_Q4, rows, cols, w.qs, w.d, NULL};
  struct hb_tensor wf, we, x, of, oe;
  REQUIRE(be->weight_upload(fast, &wf, &hw, &err) == 0);
  REQUIRE(be->weight_upload(exact, &we, &hw, &err) == 0);
  REQUIRE(be->alloc(fast, &x, HB_F32, n, cols, &err) == 0);
  REQUIRE(be->alloc(fast, &of, HB_F32, n, rows, &err) == 0);
  REQUIRE(be->alloc(fast, &oe, HB_F32, n, rows, &err) == 0);
  for (int64_t i = 0; i < n * cols; i++) ((float *)x.data)[i] = frand();
  /* 16-bit activations: the error of one output is at most sum|w| * s/2 with s = max|x| / 32512,
   * ~0.005 here (and its std ~100x smaller); the kernel-level bound is checked exactly in `matmul` */
  for (int nn = 1; nn <= n; nn += 5) {
    be->matmul(fast, &of, &x, &wf, NULL, nn);
    be->matmul(exact, &oe, &x, &we, NULL, nn);
    int bad = 0;
    for (int64_t i = 0; i < nn * rows; i++) {
      float a = ((float *)of.data)[i], b = ((float *)oe.data)[i];
      if (!(fabsf(a - b) <= 0.005f + 1e-4f * fabsf(b))) { if (bad++ < 5) fprintf(stderr, "  [%lld] %g vs %g\n", (long long)i, a, b); }
    }
    CHECKF(bad == 0, "matmul n=%d: %d outputs differ beyond the 16-bit tolerance", nn, bad);
  }
  /* embedding rows from the packed layout equal the reference rows */
  struct hb_tensor ids, ef, ee;
  REQUIRE(be->alloc(fast, &ids, HB_I32, 1, 4, &err) == 0);
  REQUIRE(be->alloc(fast, &ef, HB_F32, 4, cols, &err) == 0);
  REQUIRE(be->alloc(fast, &ee, HB_F32, 4, cols, &err) == 0);
  int32_t idv[4] = {0, 199, 17, 3};
  memcpy(ids.data, idv, sizeof idv);
  be->embed(fast, &ef, &wf, &ids, 4, 1.0f);
  be->embed(exact, &ee, &we, &ids, 4, 1.0f);
  CHECK(!memcmp(ef.data, ee.data, (size_t)(4 * cols) * 4));
  /* silu_mul */
  be->silu_mul(fast, &of, &oe, &of, n); /* out aliases up: allowed elementwise */
  be->release(fast, &wf); be->release(exact, &we);
  be->release(fast, &x); be->release(fast, &of); be->release(fast, &oe);
  be->release(fast, &ids); be->release(fast, &ef); be->release(fast, &ee);
  free(w.qs); free(w.d);
  be->free(fast);
  be->free(exact);
}

/* ---- batch invariance: a token's output does not depend on the rest of its batch ---- */

/* For every set (and through the op table with 3 threads): quantize + matmul of n tokens, n in
 * 1..37 (tails of every token tile), against the same token computed alone; bit-identical. */
/* norm_matmul (one job: RMS norm, one quantization, up to three weights, optional x +=) and
 * silu_matmul (the SwiGLU product as the job's input) equal the separate ops (rmsnorm, matmul per weight with its bias, add) bit for bit: with the selected set on
 * 1 and 3 threads (token counts on both sides of the per-thread quantization: n <= 4) and in the
 * exact set (composed from the separate ops). */
static void check_norm_matmul(const struct hb_config *cfg, int n) {
  struct hearth_err err = {0};
  struct hb_ctx *c = NULL;
  REQUIRE(hb_cpu_ops.init(cfg, &c, &err) == 0);
  const struct hb_ops *be = &hb_cpu_ops;
  const int64_t cols = 256, rows[3] = {96, 48, 40};
  struct hb_tensor w[3], bias[3], o1[3], o2[3], x, nw, xn;
  struct cpu_q4 q[3];
  for (int i = 0; i < 3; i++) {
    q[i] = make_q4(rows[i], cols);
    struct hb_host_weight hw = {HB_Q4, rows[i], cols, q[i].qs, q[i].d, NULL};
    REQUIRE(be->weight_upload(c, &w[i], &hw, &err) == 0);
    REQUIRE(be->alloc(c, &bias[i], HB_F32, 1, rows[i], &err) == 0);
    REQUIRE(be->alloc(c, &o1[i], HB_F32, n, rows[i], &err) == 0);
    REQUIRE(be->alloc(c, &o2[i], HB_F32, n, rows[i], &err) == 0);
    for (int64_t r = 0; r < rows[i]; r++) ((float *)bias[i].data)[r] = frand();
  }
  REQUIRE(be->alloc(c, &x, HB_F32, n, cols, &err) == 0);
  REQUIRE(be->alloc(c, &xn, HB_F32, n, cols, &err) == 0);
  REQUIRE(be->alloc(c, &nw, HB_F32, 1, cols, &err) == 0);
  for (int64_t i = 0; i < n * cols; i++) ((float *)x.data)[i] = frand() * (float)(1 + i % 3);
  for (int64_t i = 0; i < cols; i++) ((float *)nw.data)[i] = 0.5f + frand();
  /* norm + three weights with biases */
  struct hb_tensor *outs[3] = {&o1[0], &o1[1], &o1[2]};
  const struct hb_tensor *ws[3] = {&w[0], &w[1], &w[2]}, *bs[3] = {&bias[0], &bias[1], &bias[2]};
  be->norm_matmul(c, &x, &nw, 1e-6f, 0.0f, 3, outs, ws, bs, n, 0);
  be->rmsnorm(c, &xn, &x, &nw, 1e-6f, 0.0f);
  for (int i = 0; i < 3; i++) be->matmul(c, &o2[i], &xn, &w[i], &bias[i], n);
  for (int i = 0; i < 3; i++)
    CHECKF(!memcmp(o1[i].data, o2[i].data, (size_t)(n * rows[i]) * 4), "%s n=%d: norm_matmul output %d differs",
           be->kernels(c), n, i);
  /* no norm, out += xn·Wᵀ (out: a random residual) */
  for (int64_t i = 0; i < n * rows[0]; i++) ((float *)o1[0].data)[i] = ((float *)o2[0].data)[i] = frand();
  struct hb_tensor *outs1[1] = {&o1[0]};
  const struct hb_tensor *ws1[1] = {&w[0]};
  be->norm_matmul(c, &xn, NULL, 0.0f, 0.0f, 1, outs1, ws1, NULL, n, 1);
  struct hb_tensor tmp;
  REQUIRE(be->alloc(c, &tmp, HB_F32, n, rows[0], &err) == 0);
  be->matmul(c, &tmp, &xn, &w[0], NULL, n);
  be->add(c, &o2[0], &tmp, n);
  CHECKF(!memcmp(o1[0].data, o2[0].data, (size_t)(n * rows[0]) * 4), "%s n=%d: norm_matmul with add differs",
         be->kernels(c), n);
  /* silu_matmul: out (+)= (silu(g) * u)·Wᵀ against silu_mul, matmul, add (g = x, u = xn) */
  for (int add = 0; add <= 1; add++) {
    for (int64_t i = 0; i < n * rows[0]; i++) ((float *)o1[0].data)[i] = ((float *)o2[0].data)[i] = frand();
    be->silu_matmul(c, &x, &xn, &o1[0], &w[0], n, add);
    struct hb_tensor h;
    REQUIRE(be->alloc(c, &h, HB_F32, n, cols, &err) == 0);
    be->silu_mul(c, &h, &x, &xn, n);
    be->matmul(c, add ? &tmp : &o2[0], &h, &w[0], NULL, n);
    if (add) be->add(c, &o2[0], &tmp, n);
    CHECKF(!memcmp(o1[0].data, o2[0].data, (size_t)(n * rows[0]) * 4), "%s n=%d add=%d: silu_matmul differs",
           be->kernels(c), n, add);
    be->release(c, &h);
  }
  for (int i = 0; i < 3; i++) {
    be->release(c, &w[i]); be->release(c, &bias[i]); be->release(c, &o1[i]); be->release(c, &o2[i]);
    free(q[i].qs); free(q[i].d);
  }
  be->release(c, &x); be->release(c, &xn); be->release(c, &nw); be->release(c, &tmp);
  be->free(c);
}

TEST_GROUP(norm_matmul) {
  struct hb_config c1 = {.n_threads = 1}, c3 = {.n_threads = 3}, ce = {.n_threads = 2, .exact = 1};
  const int ns[] = {1, 2, 4, 5, 13};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    check_norm_matmul(&c1, ns[i]);
    check_norm_matmul(&c3, ns[i]);
    check_norm_matmul(&ce, ns[i]);
  }
}

TEST_GROUP(batch_invariance) {
  init_sets();
  const int64_t rows = 53, cols = 384; /* 53: a partial 16-row block and a partial 8-row half */
  const int nmax = 37;
  struct cpu_q4 w = make_q4(rows, cols), pk = clone_q4(&w);
  REQUIRE(q4x16_repack(&pk) == 0);
  float *x = malloc((size_t)(nmax * cols) * 4), *alone = malloc((size_t)(nmax * rows) * 4),
        *o = malloc((size_t)(nmax * rows) * 4);
  for (int64_t i = 0; i < nmax * cols; i++) x[i] = frand() * (i % 7 ? 1.0f : 9.0f);
  for (int si = 0; si < n_sets; si++) {
    const struct cpu_kernels *k = sets[si];
    struct cpu_q8 a1 = make_q8(1, cols), an = make_q8(nmax, cols);
    for (int t = 0; t < nmax; t++) { /* each token alone: a batch of one */
      k->q8_quantize(x + t * cols, cols, 0, 1, &a1);
      k->matmul_q4q8(&pk, &a1, 1, 0, rows, alone + t * rows, rows);
    }
    int bad = 0;
    for (int n = 1; n <= nmax; n++) {
      k->q8_quantize(x, cols, 0, n, &an);
      for (int64_t i = 0; i < n * rows; i++) o[i] = -7.0f;
      /* split the rows the way the backend's threads may: two ranges meeting at a 16-row boundary */
      k->matmul_q4q8(&pk, &an, n, 0, 32, o, rows);
      k->matmul_q4q8(&pk, &an, n, 32, rows, o, rows);
      for (int t = 0; t < n; t++)
        if (memcmp(o + t * rows, alone + t * rows, (size_t)rows * 4)) {
          if (bad++ < 3) fprintf(stderr, "  %s: token %d of a batch of %d differs from it alone\n", k->name, t, n);
        }
    }
    CHECKF(bad == 0, "%s: %d (batch, token) pairs not bit-identical to the token alone", k->name, bad);
    free_q8(&a1); free_q8(&an);
  }
  /* the op table (selected set, 3 threads, dynamic row chunks) */
  struct hearth_err err = {0};
  struct hb_ctx *ctx = NULL;
  struct hb_config cf = {.n_threads = 3, .exact = 0};
  REQUIRE(hb_cpu_ops.init(&cf, &ctx, &err) == 0);
  struct hb_host_weight hw = {HB_Q4, rows, cols, w.qs, w.d, NULL};
  struct hb_tensor wt, xt, x1, ot, o1;
  REQUIRE(hb_cpu_ops.weight_upload(ctx, &wt, &hw, &err) == 0);
  REQUIRE(hb_cpu_ops.alloc(ctx, &xt, HB_F32, nmax, cols, &err) == 0);
  REQUIRE(hb_cpu_ops.alloc(ctx, &x1, HB_F32, 1, cols, &err) == 0);
  REQUIRE(hb_cpu_ops.alloc(ctx, &ot, HB_F32, nmax, rows, &err) == 0);
  REQUIRE(hb_cpu_ops.alloc(ctx, &o1, HB_F32, 1, rows, &err) == 0);
  memcpy(xt.data, x, (size_t)(nmax * cols) * 4);
  for (int t = 0; t < nmax; t++) {
    memcpy(x1.data, x + t * cols, (size_t)cols * 4);
    hb_cpu_ops.matmul(ctx, &o1, &x1, &wt, NULL, 1);
    memcpy(alone + t * rows, o1.data, (size_t)rows * 4);
  }
  int bad = 0;
  for (int n = 1; n <= nmax; n++) {
    hb_cpu_ops.matmul(ctx, &ot, &xt, &wt, NULL, n);
    for (int t = 0; t < n; t++)
      if (memcmp((float *)ot.data + t * rows, alone + t * rows, (size_t)rows * 4)) bad++;
  }
  CHECKF(bad == 0, "op table: %d (batch, token) pairs not bit-identical to the token alone", bad);
  hb_cpu_ops.release(ctx, &wt); hb_cpu_ops.release(ctx, &xt); hb_cpu_ops.release(ctx, &x1);
  hb_cpu_ops.release(ctx, &ot); hb_cpu_ops.release(ctx, &o1);
  hb_cpu_ops.free(ctx);
  free(x); free(alone); free(o);
  free_q4(&w); free_q4(&pk);
}

/* ---- kernel selection: the set picked for each ISA level, emulated by masking features ---- */

TEST_GROUP(kernel_select) {
  const struct cpu_features *real = cpu_features_get();
  struct cpu_features f;
  /* synthetic levels: the logic alone, whatever this CPU is */
  struct cpu_features all = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, none = {0};
  CHECK(cpu_kernels_for(&none) == &cpu_kernels_ref);
#if defined(__x86_64__)
  CHECK(cpu_kernels_for(&all) == &cpu_kernels_amx);
  f = all; f.amx = 0; /* AVX-512 VNNI without AMX (Zen 4/5, Ice Lake) */
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_avx512);
  f = all; cpu_features_cap(&f, "avx512");
  CHECK(!f.amx && f.avx512vnni && cpu_kernels_for(&f) == &cpu_kernels_avx512);
  f = none; f.amx = 1; f.avx2 = f.fma = f.f16c = 1; /* AMX without AVX-512 (not a real CPU): AVX2 */
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_avx2);
  f = all; f.avx512vnni = f.avxvnni = 0; /* AVX-512 without VNNI (Skylake-X): the AVX2 set */
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_avx2);
  f = all; f.avx512bw = 0; /* AVX-512 incomplete, AVX-VNNI there: the AVX2 code on AVX-VNNI */
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_avxvnni);
  f = all; cpu_features_cap(&f, "avx2"); /* plain AVX2 (Zen 3, Haswell): AVX-VNNI cleared too */
  CHECK(f.avx2 && !f.avx512f && !f.avx512vnni && !f.amx && !f.avxvnni && cpu_kernels_for(&f) == &cpu_kernels_avx2);
  f = all; cpu_features_cap(&f, "avx2-vnni"); /* AVX2 with AVX-VNNI, no AVX-512 (Alder Lake and later clients) */
  CHECK(f.avx2 && f.avxvnni && !f.avx512f && !f.amx && cpu_kernels_for(&f) == &cpu_kernels_avxvnni);
  f = none; f.avx2 = f.fma = f.f16c = 1;
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_avx2);
  f = all; cpu_features_cap(&f, "scalar");
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_ref);
  f = all; cpu_features_cap(&f, "bogus"); /* unknown values change nothing */
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_amx);
  f = none; f.avx2 = 1; f.f16c = 1; /* AVX2 without FMA: no SIMD set */
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_ref);
  f = none; f.avx2 = 1; f.fma = 1; /* without F16C (the scales are fp16) */
  CHECK(cpu_kernels_for(&f) == &cpu_kernels_ref);
#endif
  /* this CPU, masked down level by level: each pick is the expected one and it runs (matmul of
   * the picked set against the generic C arithmetic) */
  const char *caps[] = {NULL, "avx512", "avx2-vnni", "avx2", "scalar"};
  for (int i = 0; i < 5; i++) {
    f = *real;
    cpu_features_cap(&f, caps[i]);
    const struct cpu_kernels *k = cpu_kernels_for(&f), *want = &cpu_kernels_ref;
#if defined(__x86_64__)
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.fma && f.f16c)
      want = f.amx ? &cpu_kernels_amx : &cpu_kernels_avx512;
    else if (f.avx2 && f.fma && f.f16c) want = f.avxvnni ? &cpu_kernels_avxvnni : &cpu_kernels_avx2;
#endif
    CHECKF(k == want, "cap %s: picked %s, expected %s", caps[i] ? caps[i] : "(none)", k->name, want->name);
    printf("  this CPU, HEARTH_CPU=%s: %s\n", caps[i] ? caps[i] : "(unset)", k->name);
    if (!k->matmul_q4q8) continue; /* the scalar set is the reference itself */
    struct cpu_q4 w = make_q4(40, 256), pk = clone_q4(&w);
    REQUIRE(q4x16_repack(&pk) == 0);
    enum { NT = 17 }; /* past the AMX set's token threshold, with a one-token tail tile */
    float x[NT * 256], og[NT * 40], ok[NT * 40];
    for (int j = 0; j < NT * 256; j++) x[j] = frand();
    struct cpu_q8 a = make_q8(NT, 256);
    k->q8_quantize(x, 256, 0, NT, &a);
    q4x16_matmul_generic(&pk, &a, NT, 0, 40, og, 40);
    k->matmul_q4q8(&pk, &a, NT, 0, 40, ok, 40);
    int bad = 0;
    for (int j = 0; j < NT * 40; j++) bad += !(fabsf(ok[j] - og[j]) <= 1e-5f * (1.0f + fabsf(og[j])));
    CHECKF(bad == 0, "%s: %d outputs differ from the generic arithmetic", k->name, bad);
    free_q8(&a); free_q4(&w); free_q4(&pk);
  }
  /* the whole backend reports the set it runs */
  struct hearth_err err = {0};
  struct hb_ctx *ctx = NULL;
  struct hb_config cf = {.n_threads = 1, .exact = 0}, ce = {.n_threads = 1, .exact = 1};
  REQUIRE(hb_cpu_ops.init(&cf, &ctx, &err) == 0);
  CHECK(hb_cpu_ops.kernels && !strcmp(hb_cpu_ops.kernels(ctx), cpu_kernels_select()->name));
  hb_cpu_ops.free(ctx);
  REQUIRE(hb_cpu_ops.init(&ce, &ctx, &err) == 0);
  CHECK(!strcmp(hb_cpu_ops.kernels(ctx), "scalar"));
  hb_cpu_ops.free(ctx);
}

TEST_MAIN(T(repack), T(pack_bytes), T(quantize), T(matmul), T(matmul_exact), T(attention), T(attention_invariance), T(silu), T(threadpool), T(backend_ops), T(norm_matmul),
          T(batch_invariance), T(kernel_select))
