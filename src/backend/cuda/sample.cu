/* backend/cuda/sample.cu — token selection on the device: greedy argmax (first index on ties) and
 * the log-probability of the chosen id, one block per logits row, so only ids (and the requested
 * logprobs) cross the bus; and sampling (below).
 * A row holding a NaN or an infinity (the model's numbers broke down: docs/decisions.md) is not chosen
 * from. The argmax then writes id 0 and a NaN logprob: the id stays a valid one because a greedy decode
 * graph copies it into the next step's input on the device (runtime/session.c, greedy_tail) before the
 * host has seen it, and the NaN logprob — never NaN for a finite row, whose log-sum-exp is >= 0 — is
 * what the host turns into the runtime's id -1. The sampler writes HB_CUDA_SAMPLE_NONFINITE. */
#include <math.h>

#include "backend/cuda/cuda_common.cuh"

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

/* ---- sampling: temperature, top-k, top-p, min-p on the device -----------------------------------
 * The same algorithm as runtime/sampler.c (after its penalties): candidates are the finite logits
 * divided by the temperature, ordered by (logit desc, id asc); top-k keeps the first k; top-p keeps
 * the shortest prefix whose probability mass (over the top-k set) reaches top_p; min-p keeps those
 * with logit >= max + log(min_p); the draw is the first candidate whose running sum of
 * exp(logit - max) exceeds u * (sum over the kept), in double, in that order. u in [0,1) comes from
 * the caller's seeded RNG, so host and device draw the same token.
 * The device holds at most SAMPLE_CAP candidates: when top_k is 0 or larger than that and top-p /
 * min-p do not cut inside the first SAMPLE_CAP, ids[i] = -1 and the caller samples on the host. */
#define SAMPLE_CAP 1024

__device__ __forceinline__ uint32_t fkey(float x) { /* monotonic: larger float -> larger key; NaN/-inf -> 0 */
  if (x != x || x == -INFINITY) return 0u;
  uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <typename T>
__global__ __launch_bounds__(1024) void sample_kernel(const T *logits, int64_t vocab, const struct hb_cuda_sample_row *rows,
                                                      int32_t *ids, void *lp, int lp_half) {
  __shared__ unsigned hist[256];
  __shared__ float c_val[SAMPLE_CAP];
  __shared__ int c_id[SAMPLE_CAP];
  __shared__ int s_cnt, s_eq_prefix[1024 / 32 + 1];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  __shared__ float s_red[32];
  __shared__ double s_dred[32];
  const T *row = logits + (int64_t)blockIdx.x * vocab;
  const struct hb_cuda_sample_row P = rows[blockIdx.x];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, nthr = blockDim.x;
  const float temp = P.temperature; /* the host divides each logit by it (float), then subtracts the max */

  /* log-softmax normaliser of the raw logits (for the chosen id's logprob) and the max of the
   * scaled ones; plus the number of finite candidates */
  float mx = -INFINITY;
  int nfin = 0, bad = 0;
  for (int64_t i = tid; i < vocab; i += nthr) {
    float v = ldf(row + i);
    bad |= !isfinite(v);
    if (fkey(v)) { mx = fmaxf(mx, v); nfin++; }
  }
  mx = warp_max(mx);
  for (int o = 16; o > 0; o >>= 1) nfin += __shfl_xor_sync(0xffffffffu, nfin, o);
  if (lane == 0) { s_red[warp] = mx; hist[warp] = (unsigned)nfin; }
  if (__syncthreads_or(bad)) { /* (uniform over the block) nothing is drawn from a broken row */
    if (tid == 0) {
      ids[blockIdx.x] = HB_CUDA_SAMPLE_NONFINITE;
      if (lp && lp_half) ((__half *)lp)[blockIdx.x] = __float2half_rn(nan_f());
      else if (lp) ((float *)lp)[blockIdx.x] = nan_f();
    }
    return;
  }
  if (tid == 0) {
    float m = -INFINITY;
    int c = 0;
    for (int w = 0; w < nthr / 32; w++) { m = fmaxf(m, s_red[w]); c += (int)hist[w]; }
    s_red[0] = m;
    s_cnt = c;
  }
  __syncthreads();
  const float rawmax = s_red[0];
  const int n_fin = s_cnt;
  double se = 0.0, ses = 0.0; /* sum exp(raw - rawmax), sum exp(raw/T - rawmax/T) (double, as the host) */
  for (int64_t i = tid; i < vocab; i += nthr) {
    float v = ldf(row + i);
    if (!fkey(v)) continue;
    se += exp((double)(v - rawmax));
    ses += exp((double)(v / temp - rawmax / temp));
  }
  for (int o = 16; o > 0; o >>= 1) { se += __shfl_xor_sync(0xffffffffu, se, o); ses += __shfl_xor_sync(0xffffffffu, ses, o); }
  __syncthreads();
  if (lane == 0) s_dred[warp] = se;
  __syncthreads();
  double lse_raw = 0.0;
  if (tid == 0) { for (int w = 0; w < nthr / 32; w++) lse_raw += s_dred[w]; s_dred[0] = lse_raw; }
  __syncthreads();
  lse_raw = s_dred[0];
  __syncthreads();
  if (lane == 0) s_dred[warp] = ses;
  __syncthreads();
  if (tid == 0) { double t = 0; for (int w = 0; w < nthr / 32; w++) t += s_dred[w]; s_dred[1] = t; }
  __syncthreads();
  const double sum_all = s_dred[1];

  /* how many candidates the device keeps: C = min(k, cap, finite) */
  const int K = P.top_k > 0 && P.top_k < n_fin ? P.top_k : n_fin;
  const int C = K < SAMPLE_CAP ? K : SAMPLE_CAP;
  if (C <= 0) { if (tid == 0) { ids[blockIdx.x] = 0; } return; }

  /* radix select of the C-th largest key, 8 bits at a time */
  uint32_t prefix = 0, mask = 0;
  int need = C; /* rank (1-based) of the wanted key among those matching prefix */
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += nthr) hist[b] = 0;
    __syncthreads();
    for (int64_t i = tid; i < vocab; i += nthr) {
      uint32_t k = fkey(ldf(row + i));
      if (k && (k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int acc = 0, b = 255;
      for (; b > 0; b--) { if (acc + (int)hist[b] >= need) break; acc += (int)hist[b]; }
      s_prefix = prefix | ((uint32_t)b << shift);
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
    float v = ldf(row + i);
    uint32_t k = fkey(v);
    if (k > kth) { int p = atomicAdd(&s_cnt, 1); c_val[p] = v / temp; c_id[p] = (int)i; }
    else if (k == kth && k) my_eq++;
  }
  /* exclusive prefix of my_eq over threads (warp scan + warp totals) */
  int x = my_eq;
  for (int o = 1; o < 32; o <<= 1) { int y = __shfl_up_sync(0xffffffffu, x, o); if (lane >= o) x += y; }
  if (lane == 31) s_eq_prefix[warp] = x;
  __syncthreads();
  if (tid == 0) { int a = 0; for (int w = 0; w < nthr / 32; w++) { int t = s_eq_prefix[w]; s_eq_prefix[w] = a; a += t; } }
  __syncthreads();
  int before = s_eq_prefix[warp] + x - my_eq;
  const int n_gt = s_cnt; /* final after the barrier above */
  for (int64_t i = i0; i < i1 && before < need; i++) {
    float v = ldf(row + i);
    if (fkey(v) == kth) { c_val[n_gt + before] = v / temp; c_id[n_gt + before] = (int)i; before++; }
  }
  __syncthreads();
  /* pad to 1024 and bitonic-sort by (value desc, id asc) */
  for (int i = tid; i < SAMPLE_CAP; i += nthr) if (i >= C) { c_val[i] = -INFINITY; c_id[i] = 0x7fffffff; }
  __syncthreads();
  for (int size = 2; size <= SAMPLE_CAP; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < SAMPLE_CAP; i += nthr) {
        int j = i ^ stride;
        if (j > i) {
          bool desc = (i & size) == 0; /* this pair's run sorts "first = best" */
          float vi = c_val[i], vj = c_val[j];
          int ii = c_id[i], ij = c_id[j];
          bool j_better = vj > vi || (vj == vi && ij < ii);
          if (j_better == desc) { c_val[i] = vj; c_val[j] = vi; c_id[i] = ij; c_id[j] = ii; }
        }
      }
      __syncthreads();
    }
  }
  if (tid != 0) return;
  /* the host's arithmetic, in its order; -1 where the device's C candidates cannot decide */
  const int plain = K == n_fin && !(P.top_p < 1.0f) && !(P.min_p > 0.0f);
  int n = C, fallback = plain; /* plain sampling walks all candidates in id order on the host */
  double sum = 0.0;
  if (!fallback && P.top_p < 1.0f) {
    if (K == n_fin) sum = sum_all; /* mass over every finite candidate */
    else if (C == K) for (int i = 0; i < n; i++) sum += exp((double)(c_val[i] - c_val[0]));
    else fallback = 1;             /* top_k above the cap: its mass is not here */
    double cum = 0;
    int keep = -1;
    for (int i = 0; !fallback && i < n; i++) {
      cum += exp((double)(c_val[i] - c_val[0])) / sum;
      if (cum >= P.top_p) { keep = i + 1; break; }
    }
    if (!fallback) {
      if (keep < 0 && C < K) fallback = 1;
      else n = keep < 0 ? n : keep;
    }
  }
  if (!fallback && P.min_p > 0.0f) {
    double thr = log((double)P.min_p);
    int keep = 1;
    while (keep < n && (double)(c_val[keep] - c_val[0]) >= thr) keep++;
    if (keep == n && n == C && C < K && !(P.top_p < 1.0f)) fallback = 1; /* the cut may lie past the cap */
    n = keep;
  }
  if (!fallback && C < K && !(P.top_p < 1.0f) && !(P.min_p > 0.0f)) fallback = 1; /* top-k above the cap */
  if (fallback) { ids[blockIdx.x] = -1; return; }
  sum = 0;
  for (int i = 0; i < n; i++) sum += exp((double)(c_val[i] - c_val[0]));
  double u = (double)P.u * sum, acc = 0;
  int pick = c_id[n - 1];
  for (int i = 0; i < n; i++) {
    acc += exp((double)(c_val[i] - c_val[0]));
    if (u < acc) { pick = c_id[i]; break; }
  }
  ids[blockIdx.x] = pick;
  if (lp) {
    float v = (float)((double)ldf(row + pick) - rawmax - log(lse_raw));
    if (lp_half) ((__half *)lp)[blockIdx.x] = __float2half_rn(v);
    else ((float *)lp)[blockIdx.x] = v;
  }
}

void cu_sample(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, const struct hb_cuda_sample_row *rows,
               struct hb_tensor *ids, struct hb_tensor *logprobs) {
  if (n <= 0) return;
  if (ids->dtype != HB_I32 || ids->rows * ids->cols < n || logits->rows < n ||
      (logprobs && ((logprobs->dtype != HB_F32 && logprobs->dtype != HB_F16) || logprobs->rows * logprobs->cols < n))) {
    CU_ARG(ctx, "sample: ids must be I32 and logprobs F32/F16 with >= %d elements", n);
    return;
  }
  for (int i = 0; i < n; i++)
    if (!(rows[i].temperature > 0.0f) || !(rows[i].u >= 0.0f && rows[i].u < 1.0f)) {
      CU_ARG(ctx, "sample: row %d: temperature must be > 0 (use argmax for greedy) and u in [0, 1)", i);
      return;
    }
  void *pp = ctx->sample_rows;
  if (cu_scratch(ctx, &pp, &ctx->sample_rows_cap, (size_t)n, sizeof(struct hb_cuda_sample_row), 0)) return;
  ctx->sample_rows = (struct hb_cuda_sample_row *)pp;
  if (CU_OK(ctx, cudaMemcpyAsync(ctx->sample_rows, rows, (size_t)n * sizeof *rows, cudaMemcpyHostToDevice, ctx->stream)))
    return;
  void *lp = logprobs ? logprobs->data : NULL;
  int lph = logprobs && logprobs->dtype == HB_F16;
  if (logits->dtype == HB_F16)
    sample_kernel<__half><<<n, 1024, 0, ctx->stream>>>((const __half *)logits->data, logits->cols, ctx->sample_rows,
                                                       (int32_t *)ids->data, lp, lph);
  else if (logits->dtype == HB_F32)
    sample_kernel<float><<<n, 1024, 0, ctx->stream>>>((const float *)logits->data, logits->cols, ctx->sample_rows,
                                                      (int32_t *)ids->data, lp, lph);
  else { CU_ARG(ctx, "sample: logits dtype %d", (int)logits->dtype); return; }
  CU_LAUNCHED(ctx, "sample");
}

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
