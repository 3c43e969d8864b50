/* backend/cuda/sample.cu — token selection on the device: greedy argmax (first index on ties) and
 * the log-probability of the chosen id, one block per logits row, so only ids (and the requested
 * logprobs) cross the bus; and sampling (below).
 * A row holding a NaN or an infinity (the model's numbers broke down: docs/decisions.md) is not chosen
 * from. The argmax then writes id 0 and a NaN logprob: the id stays a valid one because a greedy decode
 * graph copies it into the next step's input on the device (runtime/session.c, greedy_tail) before the
 * host has seen it, and the NaN logprob — never NaN for a finite row, whose log-sum-exp is >= 0 — is
 * what the host turns into the runtime's id -1. The sampler writes HB_SAMPLE_NONFINITE. */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/sample_decide.h"

__device__ __forceinline__ float nan_f(void) { return __int_as_float(0x7fc00000); }

template <typename T>
__global__ __launch_bounds__(1024) void argmax_kernel(const T *logits, int64_t vocab, int32_t *ids, void *lp, int lp_half) {
  pdl_trigger();
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  __shared__ float s_sum[32];
  const T *row = logits + (int64_t)blockIdx.x * vocab;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float best = -INFINITY;
  int bi = 0x7fffffff, bad = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    float v = ldf(row + i);
    bad |= !isfinite(v);
    if (v > best) { best = v; bi = (int)i; } /* i increases: the first max stays */
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, best, o);
    int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
  }
  if (lane == 0) { s_v[warp] = best; s_i[warp] = bi; }
  const int row_bad = __syncthreads_or(bad);
  if (warp == 0) {
    int nw = blockDim.x / 32;
    best = lane < nw ? s_v[lane] : -INFINITY;
    bi = lane < nw ? s_i[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, best, o);
      int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
    }
    if (lane == 0) { s_v[0] = best; s_i[0] = bi == 0x7fffffff ? 0 : bi; }
  }
  __syncthreads();
  if (row_bad) { /* (uniform over the block) id 0 and a NaN logprob: the file's comment */
    if (threadIdx.x == 0) {
      ids[blockIdx.x] = 0;
      if (lp && lp_half) ((__half *)lp)[blockIdx.x] = __float2half_rn(nan_f());
      else if (lp) ((float *)lp)[blockIdx.x] = nan_f();
    }
    return;
  }
  const float mx = s_v[0];
  if (!lp) {
    if (threadIdx.x == 0) ids[blockIdx.x] = s_i[0];
    return;
  }
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(ldf(row + i) - mx);
  sum = warp_sum(sum);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float tot = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) tot += s_sum[w];
    ids[blockIdx.x] = s_i[0];
    float v = -logf(tot); /* log_softmax at the max: (mx - mx) - log(sum) */
    if (lp_half) ((__half *)lp)[blockIdx.x] = __float2half_rn(v);
    else ((float *)lp)[blockIdx.x] = v;
  }
}

/* ---- argmax over many blocks: one row is split into AM_C chunks (one block each), every block
 * keeps an online (max, sum of exp relative to it, first index of the max) and the last block of the
 * row to finish merges the AM_C partials; a 151,936-entry row then takes a few microseconds
 * instead of one block walking it alone */
#define AM_C 32

struct am_acc { float m, s; int i; };
__device__ __forceinline__ am_acc am_merge(am_acc a, am_acc b) {
  if (b.m > a.m || (b.m == a.m && b.i < a.i)) { am_acc t = a; a = b; b = t; } /* a holds the winner */
  if (b.m > -INFINITY) a.s += b.s * expf(b.m - a.m);
  return a;
}
__device__ __forceinline__ am_acc am_warp(am_acc a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    am_acc b;
    b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
    b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
    b.i = __shfl_xor_sync(0xffffffffu, a.i, o);
    a = am_merge(a, b);
  }
  return a;
}

template <typename T>
__global__ __launch_bounds__(1024) void argmax_split_kernel(const T *logits, int64_t vocab, int32_t *ids, void *lp,
                                                            int lp_half, float *part, unsigned *cnt) {
  pdl_trigger();
  __shared__ am_acc s_a[32];
  __shared__ int s_last;
  const T *row = logits + (int64_t)blockIdx.x * vocab;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t chunk = (vocab + AM_C - 1) / AM_C, lo = blockIdx.y * chunk, hi = min(vocab, lo + chunk);
  am_acc a = {-INFINITY, 0.0f, 0x7fffffff};
  int bad = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float v = ldf(row + i);
    bad |= !isfinite(v);
    if (!(v > -INFINITY)) continue; /* -inf (and NaN) never win and add nothing */
    if (v > a.m) { a.s = a.s * expf(a.m - v) + 1.0f; a.m = v; a.i = (int)i; } /* i increases: the first max stays */
    else a.s += expf(v - a.m);
  }
  a = am_warp(a);
  if (lane == 0) s_a[warp] = a;
  const int chunk_bad = __syncthreads_or(bad);
  if (warp == 0) {
    a = lane < (int)blockDim.x / 32 ? s_a[lane] : am_acc{-INFINITY, 0.0f, 0x7fffffff};
    a = am_warp(a);
    if (lane == 0) {
      float *pp = part + ((int64_t)blockIdx.x * AM_C + blockIdx.y) * 3;
      pp[0] = a.m;
      pp[1] = chunk_bad ? nan_f() : a.s; /* a NaN sum marks a chunk with a NaN or an infinity (finite: >= 0) */
      pp[2] = __int_as_float(a.i);
      __threadfence();
      s_last = atomicAdd(cnt + blockIdx.x, 1u) == AM_C - 1;
    }
  }
  __syncthreads();
  if (!s_last || warp != 0) return;
  __threadfence();
  const float *pp = part + ((int64_t)blockIdx.x * AM_C + lane) * 3; /* AM_C == 32: one lane per chunk */
  a.m = __ldcg(pp);
  a.s = __ldcg(pp + 1);
  a.i = __float_as_int(__ldcg(pp + 2));
  const bool row_bad = __any_sync(0xffffffffu, a.s != a.s);
  a = am_warp(a);
  if (lane == 0) {
    ids[blockIdx.x] = row_bad || a.i == 0x7fffffff ? 0 : a.i; /* row_bad: id 0 and a NaN logprob (the file's comment) */
    if (lp) {
      float v = row_bad ? nan_f() : a.s > 0.0f ? -logf(a.s) : 0.0f; /* log_softmax at the max: (mx - mx) - log(sum) */
      if (lp_half) ((__half *)lp)[blockIdx.x] = __float2half_rn(v);
      else ((float *)lp)[blockIdx.x] = v;
    }
    cnt[blockIdx.x] = 0;
  }
}

void cu_argmax(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, struct hb_tensor *ids,
               struct hb_tensor *logprobs) {
  if (n <= 0) return;
  if (ids->dtype != HB_I32 || ids->rows * ids->cols < n || logits->rows < n ||
      (logprobs && ((logprobs->dtype != HB_F32 && logprobs->dtype != HB_F16) || logprobs->rows * logprobs->cols < n))) {
    CU_ARG(ctx, "argmax: ids must be I32 and logprobs F32 with >= %d elements", n);
    return;
  }
  void *lp = logprobs ? logprobs->data : NULL;
  int lph = logprobs && logprobs->dtype == HB_F16;
  if (logits->cols >= 4096 * AM_C && n <= 65535 && (logits->dtype == HB_F16 || logits->dtype == HB_F32)) {
    void *pp = ctx->am_part, *cp = ctx->am_cnt;
    if (cu_scratch(ctx, &pp, &ctx->am_part_cap, (size_t)n * AM_C * 3, sizeof(float), 0)) return;
    ctx->am_part = (float *)pp;
    if (cu_scratch(ctx, &cp, &ctx->am_cnt_cap, (size_t)n, sizeof(unsigned), 1)) return;
    ctx->am_cnt = (unsigned *)cp;
    dim3 grid((unsigned)n, AM_C);
    if (logits->dtype == HB_F16)
      argmax_split_kernel<__half><<<grid, 1024, 0, ctx->stream>>>((const __half *)logits->data, logits->cols,
                                                                  (int32_t *)ids->data, lp, lph, ctx->am_part, ctx->am_cnt);
    else
      argmax_split_kernel<float><<<grid, 1024, 0, ctx->stream>>>((const float *)logits->data, logits->cols,
                                                                 (int32_t *)ids->data, lp, lph, ctx->am_part, ctx->am_cnt);
    CU_LAUNCHED(ctx, "argmax");
    return;
  }
  if (logits->dtype == HB_F16)
    argmax_kernel<__half><<<n, 1024, 0, ctx->stream>>>((const __half *)logits->data, logits->cols,
                                                       (int32_t *)ids->data, lp, lph);
  else if (logits->dtype == HB_F32)
    argmax_kernel<float><<<n, 1024, 0, ctx->stream>>>((const float *)logits->data, logits->cols, (int32_t *)ids->data,
                                                      lp, lph);
  else { CU_ARG(ctx, "argmax: logits dtype %d", (int)logits->dtype); return; }
  CU_LAUNCHED(ctx, "argmax");
}

/* ---- sampling: runtime/sampler.c's draw on the device (backend.h, sample) --------------------------------------
 * One block per row; a row with temperature <= 0 is not this op's (its block returns at once). The steps are the
 * host's, with its float operations in its order (explicit _rn intrinsics: no contraction into an FMA):
 *   1. a raw row holding a NaN or an infinity: HB_SAMPLE_NONFINITE (the runtime ends the request);
 *   2. the penalties, on this row's copy in work: l = l > 0 ? l / rep : l * rep, then l -= presence + frequency *
 *      count (entries with count > 0); rep = 1 and zero terms leave a logit unchanged;
 *   3. top = the max; candidates are the entries > -inf, each with c = (l - top) / T (<= 0, the top one 0);
 *   4. plain sampling (no top-k, top-p < 1 nor min-p > 0): the host walks the candidates in id order with the
 *      first maximum swapped to the front, weights exp(c) in double; here every thread sums a contiguous id chunk
 *      (with the swap folded into the weights of the two ids concerned), the chunk sums are scanned, and the chunk
 *      whose interval holds u * sum walks to the crossing;
 *   5. top-k <= SAMPLE_CAP: the first k candidates by (c descending, id ascending) by a radix select of the k-th
 *      key and a bitonic sort in shared memory; then thread 0 runs the host's top-p / min-p / draw loops on
 *      them (backend/sample_decide.h, shared with a CPU test). Top-p without top-k divides by the mass of every
 *      candidate above -60 (host: `total`), a block sum;
 *   5b. otherwise (no top-k, or one above the cap, with top-p or min-p; top-k above the cap alone): nothing is
 *      sorted: every position the host's loops reach (the k-th, the top-p cut, the min-p cut, the drawn one) is
 *      found by radix selects that carry each bucket's exact probability mass (sample_large.cuh), for any
 *      number of candidates. A flat 152k row under top-p 0.95 used to land here on the host (issue 36 item 4).
 *      A launch of at most SL_SPLIT_ROWS rows does this step over many blocks a row (sample_split.cuh).
 * Where the host's result is not decided (a near tie under the margin rule below; a +inf after the penalties; no
 * candidate) the row gets -1 and the host samples it.
 * Sums in double differ from the host's in their last bits (another order; the device's exp is within 1 ulp of
 * glibc's, not equal to it): every comparison that decides (cum >= top_p, c >= log(min_p), u * sum < acc) is made
 * only when the two sides are further apart than SAMPLE_MARGIN relative to the scale, far above the ~1e-11 those
 * differences can reach over 262k terms; closer calls go to the host as well (about one draw in 10^9). */
#define SAMPLE_THREADS 1024

__device__ __forceinline__ float sample_c(float l, float top, float temp) { return __fdiv_rn(__fsub_rn(l, top), temp); }

/* monotonic key of a candidate's c (larger c -> larger key, never 0); -0 keyed as +0 since the host's order sees
 * them equal (and then orders by id) */
__device__ __forceinline__ uint32_t sample_key(float c) {
  uint32_t u = __float_as_uint(c == 0.0f ? 0.0f : c);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* block reductions; every thread gets the result (s: 33 slots, reused call after call) */
__device__ double blk_sum_d(double v, double *s) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int w = 0; w < (int)blockDim.x / 32; w++) t += s[w];
    s[32] = t;
  }
  __syncthreads();
  return s[32];
}
__device__ int blk_sum_i(int v, int *s) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    int t = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++) t += s[w];
    s[32] = t;
  }
  __syncthreads();
  return s[32];
}
__device__ int blk_min_i(int v, int *s) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    int t = s[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++) t = min(t, s[w]);
    s[32] = t;
  }
  __syncthreads();
  return s[32];
}
__device__ float blk_max_f(float v, float *s) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = s[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++) t = fmaxf(t, s[w]);
    s[32] = t;
  }
  __syncthreads();
  return s[32];
}

#include "backend/cuda/sample_large.cuh"
#include "backend/cuda/sample_split.cuh"

/* step 4: plain sampling; returns the id or -1 (undecided), in thread 0 */
__device__ int sample_plain(const float *lg, int64_t vocab, float top, float temp, double u, double *s_d, int *s_i,
                            int *s_pick) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, nthr = blockDim.x;
  /* z: the first candidate (the host's position 0); b: the first id whose c is the max, 0 (its bi) */
  int z = 0x7fffffff, b = 0x7fffffff;
  for (int64_t i = tid; i < vocab; i += nthr) {
    const float l = lg[i];
    if (!(l > -INFINITY)) continue;
    if ((int)i < z) z = (int)i;
    if ((int)i < b && sample_c(l, top, temp) == 0.0f) b = (int)i;
  }
  z = blk_min_i(z, s_i);
  b = blk_min_i(b, s_i);
  /* after the host's swap, position 0 (id z's place in the walk) holds b and b's place holds z */
  const double wb = exp((double)sample_c(lg[b], top, temp)), wz = exp((double)sample_c(lg[z], top, temp));
  const int64_t chunk = (vocab + nthr - 1) / nthr, i0 = tid * chunk, i1 = i0 + chunk < vocab ? i0 + chunk : vocab;
  double sum = 0.0;
  for (int64_t i = i0; i < i1; i++) {
    const float l = lg[i];
    sum += i == z ? wb : i == b ? wz : l > -INFINITY ? exp((double)sample_c(l, top, temp)) : 0.0;
  }
  /* inclusive scan over the threads: within the warp, then the warps' totals (thread 0, in order); each thread's
   * interval [lo, hi) ends where the next one starts, bit for bit */
  double x = sum;
  for (int o = 1; o < 32; o <<= 1) {
    double y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  double prev = __shfl_up_sync(0xffffffffu, x, 1);
  if (lane == 0) prev = 0.0;
  __syncthreads();
  if (lane == 31) s_d[warp] = x;
  if (tid == 0) *s_pick = -1;
  __syncthreads();
  if (tid == 0) {
    double a = 0.0;
    for (int w = 0; w < nthr / 32; w++) { double t = s_d[w]; s_d[w] = a; a += t; }
    s_d[32] = a;
  }
  __syncthreads();
  const double lo = s_d[warp] + prev, hi = s_d[warp] + x, total = s_d[32];
  const double target = u * total, margin = SAMPLE_MARGIN * total;
  if (lo <= target && target < hi) { /* one thread at most: the intervals tile [0, total) */
    double acc = lo;
    int pick = -1;
    for (int64_t i = i0; i < i1; i++) {
      const float l = lg[i];
      const double w = i == z ? wb : i == b ? wz : l > -INFINITY ? exp((double)sample_c(l, top, temp)) : 0.0;
      const double before = acc;
      acc += w;
      if (target < acc) {
        if (target - before >= margin && acc - target >= margin) pick = i == z ? b : i == b ? z : (int)i;
        break;
      }
    }
    *s_pick = pick;
  }
  __syncthreads();
  return *s_pick;
}

__global__ __launch_bounds__(SAMPLE_THREADS) void sample_kernel(const float *logits, int64_t vocab,
                                                                 const struct hb_sample_row *rows,
                                                                 const struct hb_sample_pen *pen, float *work,
                                                                 int32_t *ids, unsigned char *sp) {
  __shared__ unsigned hist[256];
  __shared__ float c_val[SAMPLE_CAP];
  __shared__ int c_id[SAMPLE_CAP];
  __shared__ int s_cnt, s_eq_prefix[SAMPLE_THREADS / 32];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need, s_pick;
  __shared__ float s_f[33];
  __shared__ int s_i[33];
  __shared__ double s_d[33];
  __shared__ struct sl_state s_large;
  const struct hb_sample_row P = rows[blockIdx.x];
  /* split launch: a row is the later kernels' only once step 5b marks it (below) */
  if (sp && threadIdx.x == 0) sl_split_rows(sp, gridDim.x)[blockIdx.x].active = 0;
  if (!(P.temperature > 0.0f)) return; /* not a sampled row (uniform over the block) */
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, nthr = blockDim.x;
  const float *raw = logits + (int64_t)blockIdx.x * vocab;

  /* 1. the raw row */
  int bad = 0;
  for (int64_t i = tid; i < vocab; i += nthr) bad |= !isfinite(raw[i]);
  if (__syncthreads_or(bad)) {
    if (tid == 0) ids[blockIdx.x] = HB_SAMPLE_NONFINITE;
    return;
  }
  /* 2. the penalties, on a copy (plain loads from here on: the copy is written by this block) */
  const float *lg = raw;
  if (P.n_pen > 0) {
    float *w = work + (int64_t)blockIdx.x * vocab;
    for (int64_t i = tid; i < vocab; i += nthr) w[i] = raw[i];
    __syncthreads();
    for (int e = tid; e < P.n_pen; e += nthr) { /* distinct ids: no two threads touch one logit */
      const struct hb_sample_pen q = pen[P.pen0 + e];
      if (q.id < 0 || q.id >= vocab) continue;
      float l = w[q.id];
      l = l > 0.0f ? __fdiv_rn(l, P.repetition) : __fmul_rn(l, P.repetition);
      if (q.count > 0) l = __fsub_rn(l, __fadd_rn(P.presence, __fmul_rn(P.frequency, (float)q.count)));
      w[q.id] = l;
    }
    __syncthreads();
    lg = w;
  }
  /* 3. the max and the candidates */
  float top = -INFINITY;
  int nc = 0;
  for (int64_t i = tid; i < vocab; i += nthr) {
    const float l = lg[i];
    if (l > -INFINITY) { nc++; top = fmaxf(top, l); }
  }
  top = blk_max_f(top, s_f);
  nc = blk_sum_i(nc, s_i);
  if (top == INFINITY || nc == 0) { /* the host: the first +inf id, or id 0, without a draw */
    if (tid == 0) ids[blockIdx.x] = -1;
    return;
  }
  const float temp = P.temperature;
  const int K = P.top_k > 0 && P.top_k < nc ? P.top_k : nc;
  if (K == nc && !(P.top_p < 1.0f) && !(P.min_p > 0.0f)) { /* 4. plain sampling */
    const int pick = sample_plain(lg, vocab, top, temp, P.u, s_d, s_i, &s_pick);
    if (tid == 0) ids[blockIdx.x] = pick;
    return;
  }
  if (K > SAMPLE_CAP) { /* 5b. more candidates than the sort below holds: sample_large.cuh */
    if (sp) { /* split: the row's state for sl_keys_kernel and sl_finish_kernel (cu_sample zeroed its histogram) */
      struct sl_split_row *st = sl_split_rows(sp, gridDim.x) + blockIdx.x;
      if (tid == 0) { st->top = top; st->nc = nc; st->K = K; st->active = 1; }
      return;
    }
    const struct sl_src_row src = {lg, top, temp};
    const int pick = sample_large(src, vocab, K, nc, P.top_p, P.min_p, P.u, &s_large, s_i);
    if (tid == 0) ids[blockIdx.x] = pick;
    return;
  }
  /* 5. the host's `total` (top-p without top-k): Σ exp(c) over the candidates with c > -60 */
  double total = 0.0;
  if (K == nc && P.top_p < 1.0f) {
    for (int64_t i = tid; i < vocab; i += nthr) {
      const float l = lg[i];
      if (!(l > -INFINITY)) continue;
      const float c = sample_c(l, top, temp);
      if (c > -60.0f) total += exp((double)c);
    }
    total = blk_sum_d(total, s_d);
  }
  const int C = K < SAMPLE_CAP ? K : SAMPLE_CAP;
  /* radix select of the C-th largest key, 8 bits at a time */
  uint32_t prefix = 0, mask = 0;
  int need = C; /* rank (1-based) of the wanted key among those matching prefix */
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int bk = tid; bk < 256; bk += nthr) hist[bk] = 0;
    __syncthreads();
    for (int64_t base = 0; base < vocab; base += nthr) { /* whole warps: the lanes in one bucket add once (a row's
                                                          * keys share their first digits: 32-way conflicts) */
      const int64_t i = base + tid;
      unsigned b = 0xffffffffu;
      if (i < vocab) {
        const float l = lg[i];
        if (l > -INFINITY) {
          const uint32_t k = sample_key(sample_c(l, top, temp));
          if ((k & mask) == prefix) b = (k >> shift) & 255u;
        }
      }
      const unsigned peers = __match_any_sync(0xffffffffu, b);
      if (b != 0xffffffffu && lane == __ffs(peers) - 1) atomicAdd(&hist[b], (unsigned)__popc(peers));
    }
    __syncthreads();
    if (tid == 0) {
      int acc = 0, bk = 255;
      for (; bk > 0; bk--) { if (acc + (int)hist[bk] >= need) break; acc += (int)hist[bk]; }
      s_prefix = prefix | ((uint32_t)bk << shift);
      s_need = need - acc;
    }
    __syncthreads();
    prefix = s_prefix;
    need = s_need;
    mask |= 255u << shift;
    __syncthreads();
  }
  const uint32_t kth = prefix; /* keys > kth: all in; keys == kth: the lowest ids, `need` of them */
  /* collect: greater ones anywhere, equal ones in id order (contiguous id chunks per thread) */
  if (tid == 0) s_cnt = 0;
  __syncthreads();
  const int64_t chunk = (vocab + nthr - 1) / nthr, i0 = tid * chunk, i1 = i0 + chunk < vocab ? i0 + chunk : vocab;
  int my_eq = 0;
  for (int64_t i = i0; i < i1; i++) {
    const float l = lg[i];
    if (!(l > -INFINITY)) continue;
    const float c = sample_c(l, top, temp);
    const uint32_t k = sample_key(c);
    if (k > kth) { int p = atomicAdd(&s_cnt, 1); c_val[p] = c; c_id[p] = (int)i; }
    else if (k == kth) my_eq++;
  }
  int x = my_eq; /* exclusive prefix of my_eq over the threads */
  for (int o = 1; o < 32; o <<= 1) { int y = __shfl_up_sync(0xffffffffu, x, o); if (lane >= o) x += y; }
  if (lane == 31) s_eq_prefix[warp] = x;
  __syncthreads();
  if (tid == 0) { int a = 0; for (int w = 0; w < nthr / 32; w++) { int t = s_eq_prefix[w]; s_eq_prefix[w] = a; a += t; } }
  __syncthreads();
  int before = s_eq_prefix[warp] + x - my_eq;
  const int n_gt = s_cnt;
  for (int64_t i = i0; i < i1 && before < need; i++) {
    const float l = lg[i];
    if (!(l > -INFINITY)) continue;
    const float c = sample_c(l, top, temp);
    if (sample_key(c) == kth) { c_val[n_gt + before] = c; c_id[n_gt + before] = (int)i; before++; }
  }
  __syncthreads();
  /* pad and bitonic-sort by (c descending, id ascending): the host's qsort order */
  for (int i = tid; i < SAMPLE_CAP; i += nthr) if (i >= C) { c_val[i] = -INFINITY; c_id[i] = 0x7fffffff; }
  __syncthreads();
  for (int size = 2; size <= SAMPLE_CAP; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < SAMPLE_CAP; i += nthr) {
        int j = i ^ stride;
        if (j > i) {
          bool desc = (i & size) == 0;
          float vi = c_val[i], vj = c_val[j];
          int ii = c_id[i], ij = c_id[j];
          bool j_better = vj > vi || (vj == vi && ij < ii);
          if (j_better == desc) { c_val[i] = vj; c_val[j] = vi; c_id[i] = ij; c_id[j] = ii; }
        }
      }
      __syncthreads();
    }
  }
  if (tid == 0) ids[blockIdx.x] = sample_decide(c_val, c_id, C, K, nc, total, P.top_p, P.min_p, P.u);
}

void cu_sample(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, const struct hb_sample_row *rows,
               const struct hb_sample_pen *pen, int n_pen, struct hb_tensor *ids) {
  if (n <= 0) return;
  if (logits->dtype != HB_F32 || logits->rows < n || ids->dtype != HB_I32 || ids->rows * ids->cols < n || n > 65535 ||
      n_pen < 0 || (n_pen > 0 && !pen)) {
    CU_ARG(ctx, "sample: logits F32 [>= %d rows], ids I32 with >= %d elements", n, n);
    return;
  }
  int any_pen = 0;
  for (int i = 0; i < n; i++) {
    if (!(rows[i].temperature > 0.0f)) continue;
    if (!(rows[i].u >= 0.0 && rows[i].u < 1.0) || rows[i].pen0 < 0 || rows[i].n_pen < 0 || rows[i].pen0 + rows[i].n_pen > n_pen) {
      CU_ARG(ctx, "sample: row %d: u must lie in [0, 1) and its penalty entries inside the list", i);
      return;
    }
    any_pen |= rows[i].n_pen > 0;
  }
  void *rp = ctx->sample_rows, *pp = ctx->sample_pen, *wp = ctx->sample_work;
  if (cu_scratch(ctx, &rp, &ctx->sample_rows_cap, (size_t)n, sizeof(struct hb_sample_row), 0)) return;
  ctx->sample_rows = (struct hb_sample_row *)rp;
  if (n_pen > 0) {
    if (cu_scratch(ctx, &pp, &ctx->sample_pen_cap, (size_t)n_pen, sizeof(struct hb_sample_pen), 0)) return;
    ctx->sample_pen = (struct hb_sample_pen *)pp;
  }
  if (any_pen) {
    if (cu_scratch(ctx, &wp, &ctx->sample_work_cap, (size_t)n * (size_t)logits->cols, sizeof(float), 0)) return;
    ctx->sample_work = (float *)wp;
  }
  /* through the pinned stage: a copy from pageable memory would first wait for the forward pass to finish */
  const size_t rb = (size_t)n * sizeof *rows, pb = (size_t)n_pen * sizeof *pen;
  char *st = (char *)cu_stage(ctx, rb + pb);
  const void *src_rows = rows, *src_pen = pen;
  if (st) {
    memcpy(st, rows, rb);
    if (pb) memcpy(st + rb, pen, pb);
    src_rows = st;
    src_pen = st + rb;
  }
  if (CU_OK(ctx, cudaMemcpyAsync(ctx->sample_rows, src_rows, rb, cudaMemcpyHostToDevice, ctx->stream))) return;
  if (pb && CU_OK(ctx, cudaMemcpyAsync(ctx->sample_pen, src_pen, pb, cudaMemcpyHostToDevice, ctx->stream))) return;
  /* few rows, one of which may reach step 5b: its passes over many blocks (sample_split.cuh) */
  const int split_rows = ctx->sample_one_block ? 0 : SL_SPLIT_ROWS;
  int split = 0;
  for (int i = 0; n <= split_rows && i < n; i++)
    split |= rows[i].temperature > 0.0f && !(rows[i].top_k > 0 && rows[i].top_k <= SAMPLE_CAP) &&
             (rows[i].top_p < 1.0f || rows[i].min_p > 0.0f || rows[i].top_k > 0);
  if (split) { /* sized for SL_SPLIT_ROWS rows at once: a later launch of more rows does not move it */
    void *sp = ctx->sample_split;
    if (cu_scratch(ctx, &sp, &ctx->sample_split_cap, sl_split_bytes(SL_SPLIT_ROWS, logits->cols), 1, 0)) return;
    ctx->sample_split = sp;
  }
  unsigned char *sp = split ? (unsigned char *)ctx->sample_split : NULL;
  if (sp && CU_OK(ctx, cudaMemsetAsync(sl_split_hist(sp, n), 0, (size_t)n * sizeof(struct sl_hist16), ctx->stream)))
    return;
  sample_kernel<<<n, SAMPLE_THREADS, 0, ctx->stream>>>((const float *)logits->data, logits->cols, ctx->sample_rows,
                                                       ctx->sample_pen, ctx->sample_work, (int32_t *)ids->data, sp);
  if (CU_LAUNCHED(ctx, "sample") || !split) return;
  sl_keys_kernel<<<dim3((unsigned)n, SL_G), SL_KT, 0, ctx->stream>>>((const float *)logits->data, logits->cols,
                                                                    ctx->sample_rows, ctx->sample_work, sp);
  if (CU_LAUNCHED(ctx, "sample keys")) return;
  sl_finish_kernel<<<n, SAMPLE_THREADS, 0, ctx->stream>>>(logits->cols, ctx->sample_rows, sp, (int32_t *)ids->data);
  CU_LAUNCHED(ctx, "sample finish");
}

extern "C" void hb_cuda_set_sample_one_block(struct hb_ctx *ctx, int on) { ctx->sample_one_block = on; }

/* ---- row scores (backend.h, row_score): one block per row, every pass over the row in a fixed order, so a
 * row's result depends on that row alone (batch-invariant scores). Passes: the max and its first index with a
 * finiteness check; Σ exp(x − max) in double (per-thread strided sums, then a fixed tree); then one pass per
 * wanted alternative, each the best (value, index) strictly after the previous one in the order (value
 * descending, index ascending). k passes read the row k times, from L2 (a 152k-entry row is 600 KB): for the
 * k ≤ 20 the API allows this costs microseconds, and it needs no sort and no per-thread candidate lists. */
#define RS_THREADS 1024

__device__ __forceinline__ bool rs_before(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

/* (v, i) of every thread -> the block's first in rs_before's order, in every thread */
__device__ __forceinline__ void rs_best(float &v, int &i, float *s_v, int *s_i) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (rs_before(ov, oi, v, i)) { v = ov; i = oi; }
  }
  __syncthreads(); /* the previous call's readers are done with s_v / s_i */
  if (lane == 0) { s_v[warp] = v; s_i[warp] = i; }
  __syncthreads();
  v = lane < RS_THREADS / 32 ? s_v[lane] : -INFINITY;
  i = lane < RS_THREADS / 32 ? s_i[lane] : 0x7fffffff;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) { /* every warp reduces the same 32 values the same way */
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (rs_before(ov, oi, v, i)) { v = ov; i = oi; }
  }
}

__global__ __launch_bounds__(RS_THREADS) void row_score_kernel(const float *logits, int64_t vocab, const int32_t *req,
                                                               int32_t *out) {
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  __shared__ double s_d[32];
  const float *row = logits + (int64_t)blockIdx.x * vocab;
  const int32_t *rq = req + (int64_t)blockIdx.x * HB_SCORE_REQ;
  int32_t *o = out + (int64_t)blockIdx.x * HB_SCORE_OUT;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float best = -INFINITY;
  int bi = 0x7fffffff, bad = 0;
  for (int64_t i = tid; i < vocab; i += RS_THREADS) {
    float v = row[i];
    bad |= !isfinite(v);
    if (v > best) { best = v; bi = (int)i; } /* i increases: the first max stays */
  }
  if (__syncthreads_or(bad)) { /* uniform over the block */
    if (tid == 0) o[0] = -1;
    return;
  }
  rs_best(best, bi, s_v, s_i);
  const float mx = best;
  double s = 0.0;
  for (int64_t i = tid; i < vocab; i += RS_THREADS) s += exp((double)row[i] - (double)mx);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) s_d[warp] = s;
  __syncthreads();
  if (tid == 0) {
    double tot = 0.0;
    for (int w = 0; w < RS_THREADS / 32; w++) tot += s_d[w];
    double ls = log(tot);
    o[0] = bi;
    o[1] = __float_as_int(mx);
    o[2] = __double2loint(ls); /* little-endian: the host reads words 2..3 as one double */
    o[3] = __double2hiint(ls);
  }
  const int nid = min(max(rq[1], 0), (int)HB_SCORE_NID);
  if (tid < nid) {
    const int id = rq[2 + tid];
    o[HB_SCORE_IDV + tid] = id >= 0 && id < vocab ? __float_as_int(row[id]) : __float_as_int(nan_f());
  }
  const int k = (int)min((int64_t)min(max(rq[0], 0), (int)HB_SCORE_K), vocab);
  float pv = INFINITY;
  int pi = -1;
  for (int r = 0; r < k; r++) {
    float b = -INFINITY;
    int ii = 0x7fffffff;
    for (int64_t i = tid; i < vocab; i += RS_THREADS) {
      float v = row[i];
      if ((v < pv || (v == pv && (int)i > pi)) && rs_before(v, (int)i, b, ii)) { b = v; ii = (int)i; }
    }
    rs_best(b, ii, s_v, s_i);
    if (tid == 0) {
      o[HB_SCORE_TOP + r] = ii;
      o[HB_SCORE_TOPV + r] = __float_as_int(b);
    }
    pv = b;
    pi = ii;
  }
}

void cu_row_score(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, const struct hb_tensor *req,
                  struct hb_tensor *out) {
  if (n <= 0) return;
  if (logits->dtype != HB_F32 || logits->rows < n || req->dtype != HB_I32 || req->rows * req->cols < (int64_t)n * HB_SCORE_REQ ||
      out->dtype != HB_I32 || out->rows * out->cols < (int64_t)n * HB_SCORE_OUT || n > 65535) {
    CU_ARG(ctx, "row_score: logits F32 [%d × vocab], req and out I32 of %d and %d words a row", n, (int)HB_SCORE_REQ,
           (int)HB_SCORE_OUT);
    return;
  }
  row_score_kernel<<<n, RS_THREADS, 0, ctx->stream>>>((const float *)logits->data, logits->cols,
                                                       (const int32_t *)req->data, (int32_t *)out->data);
  CU_LAUNCHED(ctx, "row_score");
}
