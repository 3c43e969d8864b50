/* backend/cuda/matmul_q4.cu — y = x · Wᵀ + b for int4 group-128 and dense weights.
 *
 * Kernels, picked per call by cu_matmul:
 *   gemv_q4    decode (n <= 8 rows): gemv_q4.cu (cu_gemv_fused), tried first.
 *   gemm_q4    prefill/batches (n > 8, f16 activations): BMx128x64 block tiles (BM = 128, or 64/32 for
 *              n <= 64/32), 8 warps of (BM/2)x32, split-K when the tile grid is under a wave,
 *              mma.sync m16n8k16 f16 -> f32; A (activations) by cp.async into padded smem, B (int4)
 *              by cp.async and dequantized straight into mma B fragments (no f16 scratch copy).
 *              One launch covers up to three weights sharing x (QKV, gate/up: cu_gemm_q4) and can
 *              add into its output (o_proj / down_proj + residual).
 *   gemm_wg    the same on Hopper's wgmma (sm90a/gemm_wgmma.cu), where measured faster (GEMM_WG_MIN_ROWS) or
 *              chosen (HEARTH_GEMM=wg, hb_cuda_set_gemm).
 *   gemm_simt  everything else (the exact f32 path, dense bf16/f16/f32 weights): 64x64 tiles of f32
 *              FMA, weights dequantized exactly; it is the reference the fast kernels are held to.
 *
 * The int4 layout on the device (repacked at upload by q4_repack_kernel from quant/q4.h's row-major
 * layout; where each byte goes: q4_off in cuda_common.cuh, blocks of 8 rows, group-major):
 * each run of 32 weights of a row is 16 bytes = 4 words; word t holds weights
 *     nibble:  0     1      2       3       4      5      6       7
 *     weight:  2t    2t+8   2t+16   2t+24   2t+1   2t+9   2t+17   2t+25      (stored as q + 8)
 * so that (w >> 4j) & 0x000F000F, or'ed with 0x6400 per half, is the f16 pair (1024 + q[2t+8j] + 8,
 * 1024 + q[2t+8j+1] + 8): exactly the m16n8k16 B fragment of thread t (j = 0,1 for the first k16
 * step, 2,3 for the second); the GEMV uses the same (w >> 4j) & 0x000F000F pairs, weights (2t+8j, 2t+8j+1).
 * The scales are fp16 in the same block order (q4_soff).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gemm_q4.cuh"

/* ---- repack ------------------------------------------------------------------------------------ */

__global__ void q4_repack_kernel(uint8_t *dst, const uint8_t *src, int64_t nchunks, int64_t G) {
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < nchunks; c += (int64_t)gridDim.x * blockDim.x) {
    uint4 v = ((const uint4 *)src)[c];
    uint32_t b[4] = {v.x, v.y, v.z, v.w};
    uint32_t u[32];
#pragma unroll
    for (int j = 0; j < 16; j++) {
      uint32_t byte = (b[j / 4] >> (8 * (j % 4))) & 255u;
      u[2 * j] = byte & 15u;
      u[2 * j + 1] = byte >> 4;
    }
    uint32_t w[4];
#pragma unroll
    for (int t = 0; t < 4; t++)
      w[t] = u[2 * t] | u[2 * t + 8] << 4 | u[2 * t + 16] << 8 | u[2 * t + 24] << 12 | u[2 * t + 1] << 16 |
             u[2 * t + 9] << 20 | u[2 * t + 17] << 24 | u[2 * t + 25] << 28;
    const int64_t r = c / (4 * G), run = c % (4 * G); /* 4 runs of 32 weights per group */
    *(uint4 *)(dst + q4_off(r, run / 4, G) + (run % 4) * 16) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}
__global__ void q4_scale_repack_kernel(__half *dst, const __half *src, int64_t n, int64_t G) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[q4_soff(i / G, i % G, G)] = src[i];
}

/* src: quant/q4.h's rows x cols/2 bytes and rows x cols/128 fp16 scales (row-major), on the device;
 * dst / dsts: q4_bytes / q4_scale_bytes, zeroed here (the padding rows and the tail stay zero) */
void cu_q4_repack(struct hb_ctx *ctx, uint8_t *dst, __half *dsts, const uint8_t *src, const __half *srcs, int64_t rows,
                  int64_t cols) {
  const int64_t G = cols / 128, n = rows * cols / 32;
  CU_OK(ctx, cudaMemsetAsync(dst, 0, q4_bytes(rows, cols), ctx->stream));
  CU_OK(ctx, cudaMemsetAsync(dsts, 0, q4_scale_bytes(rows, cols), ctx->stream));
  if (!n) return;
  int64_t blocks = (n + 255) / 256;
  q4_repack_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, ctx->stream>>>(dst, src, n, G);
  CU_LAUNCHED(ctx, "q4_repack");
  blocks = (rows * G + 255) / 256;
  q4_scale_repack_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, ctx->stream>>>(dsts, srcs, rows * G, G);
  CU_LAUNCHED(ctx, "q4_scale_repack");
}

/* ---- GEMM: prefill on tensor cores ------------------------------------------------------------------ */

/* block tile BM x 128 x 64 with BM = 32 * MI (MI = 16-row mma tiles per warp: 4, 2 or 1): small M
 * (decode batches of 9..64 rows, short prompts) takes BM = 32 or 64 so that the tensor cores do not
 * multiply 128 - M rows of zero padding */
#define GM_BN 128
#define GM_BK 64
#define GM_ST 3
#define GM_LDA (GM_BK + 8) /* halves per smem A row: 144 bytes, so ldmatrix rows hit distinct banks */

static size_t gemm_smem(int64_t K, int BM) {
  return (size_t)GM_ST * BM * GM_LDA * 2 + (size_t)GM_ST * GM_BN * 32 + (size_t)GM_BN * (K / 128) * 2;
}

template <int MI, typename TO>
__global__ __launch_bounds__(256) void gemm_q4_kernel(const __grid_constant__ gemm_args a) {
  constexpr int BM = 32 * MI;
  extern __shared__ uint4 smem[];
  __half *As = (__half *)smem;                                   /* [ST][BM][LDA] */
  uint8_t *Bs = (uint8_t *)(As + GM_ST * BM * GM_LDA);        /* [ST][BN][32] (two 16-byte runs, swizzled) */
  __half *Ss = (__half *)(Bs + GM_ST * GM_BN * 32);              /* [BN][K/128] scales */
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / 4, wn = warp % 4, gid = lane / 4, tig = lane % 4;
  /* this block's 128 concatenated columns are columns [n0, n0 + 128) of weight wi (rows N) */
  const int wi = gemm_weight(a, blockIdx.x * GM_BN);
  const int N = a.col0[wi + 1] - a.col0[wi], n0 = blockIdx.x * GM_BN - a.col0[wi];
  const int M = a.M, K = a.K, m0 = blockIdx.y * BM;
  const __half *__restrict__ x = a.x;
  const int64_t ldx = a.ldx;
  const uint8_t *__restrict__ wq = a.wq[wi];
  const __half *__restrict__ ws = a.ws[wi];
  const int gpr = K / 128;
  /* split-K: this block takes k-tiles [kt0, kt0 + KT) and, when a.part != NULL, stores its f32 partial
   * tile into slice blockIdx.z of part (every element of a slice is written by exactly one block; gemm_finish sums
   * the slices in order, adds the bias and converts) */
  const int kt0 = blockIdx.z * a.kt_per, KT = min(K / GM_BK - kt0, a.kt_per);

  auto load = [&](int stage, int kt) {
    const int k0 = (kt0 + kt) * GM_BK;
#pragma unroll
    for (int i = 0; i < MI; i++) {
      int idx = tid + i * 256, r = idx / 8, cc = idx % 8, gm = m0 + r;
      cp_async16(As + ((size_t)stage * BM + r) * GM_LDA + cc * 8,
                 x + (int64_t)(gm < M ? gm : 0) * ldx + k0 + cc * 8, gm < M ? 16 : 0);
    }
    int r = tid / 2, kc = tid % 2, gn = n0 + r;
    cp_async16(Bs + ((size_t)stage * GM_BN + r) * 32 + ((kc ^ ((r >> 2) & 1)) * 16),
               wq + q4_off(gn < N ? gn : 0, k0 / 128, gpr) + (k0 % 128) / 2 + kc * 16, gn < N ? 16 : 0);
  };

  float acc[MI][4][4];
#pragma unroll
  for (int i = 0; i < MI; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int c = 0; c < 4; c++) acc[i][j][c] = 0.0f;

#pragma unroll
  for (int s = 0; s < GM_ST - 1; s++) {
    if (s < KT) load(s, s);
    cp_async_commit();
  }
  /* the scales of this split's groups [gs, gs + ng) only, [BN][ng], read while the first stages are in flight */
  const int gs = kt0 * GM_BK / 128, ng = ((kt0 + KT) * GM_BK + 127) / 128 - gs;
  for (int i = tid; i < GM_BN * ng; i += 256) {
    int r = i / ng, g = gs + i % ng;
    Ss[i] = n0 + r < N ? ws[q4_soff(n0 + r, g, gpr)] : __float2half(0.0f);
  }

  for (int kt = 0; kt < KT; kt++) {
    cp_async_wait<GM_ST - 2>();
    __syncthreads();
    if (kt + GM_ST - 1 < KT) load((kt + GM_ST - 1) % GM_ST, kt + GM_ST - 1);
    cp_async_commit();
    const int st = kt % GM_ST;
    const int g = (kt0 + kt) * GM_BK / 128 - gs;
    __half2 s2[4];
#pragma unroll
    for (int ni = 0; ni < 4; ni++) s2[ni] = __half2half2(Ss[(wn * 32 + ni * 8 + gid) * ng + g]);
#pragma unroll
    for (int kc = 0; kc < 2; kc++) {
      uint32_t wb[4];
#pragma unroll
      for (int ni = 0; ni < 4; ni++) {
        int r = wn * 32 + ni * 8 + gid;
        wb[ni] = *(const uint32_t *)(Bs + ((size_t)st * GM_BN + r) * 32 + ((kc ^ ((r >> 2) & 1)) * 16) + tig * 4);
      }
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        const int kk = kc * 2 + hf;
        uint32_t af[MI][4];
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
          ldmatrix_x4(af[mi], As + ((size_t)st * BM + wm * 16 * MI + mi * 16 + (lane % 16)) * GM_LDA + kk * 16 +
                                  (lane / 16) * 8);
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
          uint32_t b[2];
          b[0] = deq2(wb[ni] >> (8 * hf), s2[ni]);
          b[1] = deq2(wb[ni] >> (8 * hf + 4), s2[ni]);
#pragma unroll
          for (int mi = 0; mi < MI; mi++) mma_16816(acc[mi][ni], af[mi], b);
        }
      }
    }
  }
  cp_async_wait<0>();

  TO *out = (TO *)a.out[wi];
  const float *bias = a.bias[wi];
  const int64_t ldo = a.ldo[wi];
  /* this split's slice, at this weight's columns of the partial rows */
  float *part = a.part ? a.part + (size_t)blockIdx.z * (size_t)M * a.n_total + a.col0[wi] : NULL;
  /* with the residual added, a 16-row group's residuals are loaded before any of its stores (a load after a store to
   * the same array cannot move above it: one load-add-store per element was a chain of dependent round trips;
   * sm90a/gemm_wgmma.cu's epilogue says more). The sum is still v + bias + residual, in that order. */
#pragma unroll
  for (int mi = 0; mi < MI; mi++) {
    const int row = m0 + wm * 16 * MI + mi * 16 + gid;
    float res[4][4];
#pragma unroll
    for (int ni = 0; ni < 4; ni++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int cc = n0 + wn * 32 + ni * 8 + tig * 2 + e;
        const bool ld = a.add && !part && cc < N;
        res[ni][e] = ld && row < M ? ldf(out + (int64_t)row * ldo + cc) : 0.0f;
        res[ni][2 + e] = ld && row + 8 < M ? ldf(out + (int64_t)(row + 8) * ldo + cc) : 0.0f;
      }
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
      int col = n0 + wn * 32 + ni * 8 + tig * 2;
#pragma unroll
      for (int e = 0; e < 2; e++) {
        int cc = col + e;
        if (cc >= N) continue;
        if (part) {
          if (row < M) part[(int64_t)row * a.n_total + cc] = acc[mi][ni][e];
          if (row + 8 < M) part[(int64_t)(row + 8) * a.n_total + cc] = acc[mi][ni][2 + e];
          continue;
        }
        float bv = bias ? bias[cc] : 0.0f;
        if (row < M) stf(out + (int64_t)row * ldo + cc, acc[mi][ni][e] + bv + res[ni][e]);
        if (row + 8 < M) stf(out + (int64_t)(row + 8) * ldo + cc, acc[mi][ni][2 + e] + bv + res[ni][2 + e]);
      }
    }
  }
}

/* split-K epilogue: out[m][n] (+)= sum over the splits z, in order, of part[z][m][n], + bias[n], each concatenated column
 * to its weight */
template <typename TO>
__global__ void gemm_finish_kernel(const __grid_constant__ gemm_args a) {
  pdl_trigger();
  const int64_t total = (int64_t)a.M * a.n_total;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int m = (int)(i / a.n_total), c = (int)(i % a.n_total);
    const int wi = gemm_weight(a, c), n = c - a.col0[wi];
    TO *o = (TO *)a.out[wi] + (int64_t)m * a.ldo[wi] + n;
    const float *bias = a.bias[wi];
    float v = 0.0f;
    for (int z = 0; z < a.n_split; z++) v += a.part[(int64_t)z * total + i];
    stf(o, v + (bias ? bias[n] : 0.0f) + (a.add ? ldf(o) : 0.0f));
  }
}

/* ---- SIMT GEMM: the exact path and dense weights ------------------------------------------------ */

template <typename TW>
__device__ __forceinline__ float w_at(const void *w, const __half *ws, int64_t n, int64_t k, int64_t K);
template <>
__device__ __forceinline__ float w_at<float>(const void *w, const __half *, int64_t n, int64_t k, int64_t K) {
  return ((const float *)w)[n * K + k];
}
template <>
__device__ __forceinline__ float w_at<__half>(const void *w, const __half *, int64_t n, int64_t k, int64_t K) {
  return __half2float(((const __half *)w)[n * K + k]);
}
template <>
__device__ __forceinline__ float w_at<__nv_bfloat16>(const void *w, const __half *, int64_t n, int64_t k, int64_t K) {
  return __bfloat162float(((const __nv_bfloat16 *)w)[n * K + k]);
}
struct q4_tag {};
template <>
__device__ __forceinline__ float w_at<q4_tag>(const void *w, const __half *ws, int64_t n, int64_t k, int64_t K) {
  return (float)q4_elem((const uint8_t *)w, K / 128, n, k) * q4_scale(ws, K / 128, n, k);
}

template <typename TW, typename TX, typename TO>
__global__ __launch_bounds__(256) void gemm_simt_kernel(TO *out, int64_t ldo, const TX *x, int64_t ldx, const void *w,
                                                        const __half *ws, const float *bias, int M, int N, int K) {
  __shared__ float As[16][64 + 4], Bs[16][64 + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      int idx = tid + i * 256, r = idx / 16, k = idx % 16;
      int gm = m0 + r, gn = n0 + r, gk = k0 + k;
      As[k][r] = (gm < M && gk < K) ? ldf(x + (int64_t)gm * ldx + gk) : 0.0f;
      Bs[k][r] = (gn < N && gk < K) ? w_at<TW>(w, ws, gn, gk, K) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; k++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) { a[i] = As[k][ty * 4 + i]; b[i] = Bs[k][tx * 4 + i]; }
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int gm = m0 + ty * 4 + i;
    if (gm >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int gn = n0 + tx * 4 + j;
      if (gn < N) stf(out + (int64_t)gm * ldo + gn, acc[i][j] + (bias ? bias[gn] : 0.0f));
    }
  }
}

/* ---- dispatch ------------------------------------------------------------------------------------ */

/* The wgmma kernel serves calls of at least this many rows in the default (auto) mode, and every call in row-invariant
 * mode (its rows are bit-identical whatever n is: bench_gemm's row-invariance check). Measured on the H200 (bench_gemm,
 * bench/RESULTS.md session 25): 1.3-1.4x the mma.sync kernel at 64 rows, 1.9-2.2x from 1,570 on. Session 35 (H100):
 * from 9 rows, every GEMM the decode GEMV does not take, with a 32-token tile of 8 stages for n <= 32: a 3B decode
 * step of 32 sequences had spent 45 us in the mma.sync kernel's gate/up at 0.5 TB/s; x32 7,470 -> 9,320 tok/s,
 * x16 4,400 -> 5,100, and the 32-token tile beat the 64 one by 6-7 % (bench/RESULTS.md "Session 35"). Session 40
 * (H100): from 3 rows, the decode GEMV's row floor for sending wide-x matrices to a GEMM (GEMV_XMAX): those 3-8-row
 * calls on wgmma rather than mma.sync took the 3B's x3 1,680 -> 1,850 tok/s, x8 3,130 -> 3,330; the 0.5B's x8
 * 8,657 -> 9,147 (bench/RESULTS.md "Session 40"). */
#define GEMM_WG_MIN_ROWS 3
#define GEMM_WG_WGS 2 /* and its warpgroups per block there (2 or 4) */

int cu_matmul_init(struct hb_ctx *ctx) {
  const char *e = getenv("HEARTH_GEMM"); /* mma | wg | wg256: one kernel for every prefill GEMM (A/B runs) */
  ctx->gemm_kind = !e                   ? HB_CUDA_GEMM_AUTO
                   : !strcmp(e, "wg")    ? HB_CUDA_GEMM_WG
                   : !strcmp(e, "wg256") ? HB_CUDA_GEMM_WG256
                   : !strcmp(e, "mma")   ? HB_CUDA_GEMM_MMA
                                         : HB_CUDA_GEMM_AUTO;
  ctx->gemm_wg_ok = cu_gemm_wg_init(ctx);
  int bad = cu_gemv_init(ctx);
  bad |= smem_attr(ctx, gemm_q4_kernel<4, __half>) | smem_attr(ctx, gemm_q4_kernel<4, float>) |
         smem_attr(ctx, gemm_q4_kernel<2, __half>) | smem_attr(ctx, gemm_q4_kernel<2, float>) |
         smem_attr(ctx, gemm_q4_kernel<1, __half>) | smem_attr(ctx, gemm_q4_kernel<1, float>);
  return bad;
}

template <typename TX, typename TO>
static void simt_launch(struct hb_ctx *ctx, TO *out, int64_t ldo, const TX *x, int64_t ldx, const struct hb_tensor *w,
                        const float *bias, int n) {
  /* (step twins: every output is one thread's f32 sum in K order whatever n is, so its rows are their one-token
   * launch's; it serves weights the int4 paths do not take, e.g. dense ones whose K is not a multiple of 128) */
  dim3 grid((unsigned)((w->rows + 63) / 64), (unsigned)((n + 63) / 64));
  int N = (int)w->rows, K = (int)w->cols;
  switch (w->dtype) {
  case HB_Q4:
    gemm_simt_kernel<q4_tag, TX, TO><<<grid, 256, 0, ctx->stream>>>(out, ldo, x, ldx, w->data, (const __half *)w->aux,
                                                                    bias, n, N, K);
    break;
  case HB_F32:
    gemm_simt_kernel<float, TX, TO><<<grid, 256, 0, ctx->stream>>>(out, ldo, x, ldx, w->data, NULL, bias, n, N, K);
    break;
  case HB_F16:
    gemm_simt_kernel<__half, TX, TO><<<grid, 256, 0, ctx->stream>>>(out, ldo, x, ldx, w->data, NULL, bias, n, N, K);
    break;
  case HB_BF16:
    gemm_simt_kernel<__nv_bfloat16, TX, TO><<<grid, 256, 0, ctx->stream>>>(out, ldo, x, ldx, w->data, NULL, bias, n,
                                                                           N, K);
    break;
  default:
    CU_ARG(ctx, "matmul: weight dtype %d", (int)w->dtype);
    return;
  }
  CU_LAUNCHED(ctx, "gemm_simt");
}

/* plans the tensor-core GEMM over n_mm (1..3) int4 weights of equal cols sharing x (gemm_args); returns 1 when the
 * shapes need another path (f32 x, dense weights, unequal K, a weight but the last whose rows are not a multiple of
 * GM_BN, an output aliasing x under add, ...). Launches and allocates nothing. */
int cu_gemm_q4_plan(struct hb_ctx *ctx, const struct hb_tensor *x, int n_mm, struct hb_tensor *const *outs,
                    const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add,
                    struct gemm_plan *pl) {
  if (n < 1 || n_mm < 1 || n_mm > 3 || x->dtype != HB_F16 || x->cols % 8 || x->rows < n) return 1;
  const int64_t K = ws[0]->cols;
  if (K <= 0 || K % 128 || x->cols < K || K > INT32_MAX) return 1;
  const int MI = n <= 32 ? 1 : (n <= 64 ? 2 : 4);
  /* the wgmma kernel (wgs: its warpgroups per block, 64 weight rows each; 0 = the mma.sync kernel): forced, or from
   * GEMM_WG_MIN_ROWS rows on in auto mode, and for every n in row-invariant mode (one kernel for every n). 4
   * warpgroups (256 weight rows) only where every weight but the last fills whole 256-row tiles, else 2. Its token
   * tile is 128, 64 for n <= 64, or 32 for n <= 32 (not in row-invariant mode: one tile shape, so one wgmma shape,
   * for every n) */
  int wgs = 0;
  if (ctx->gemm_wg_ok) {
    if (ctx->gemm_kind == HB_CUDA_GEMM_WG) wgs = 2;
    else if (ctx->gemm_kind == HB_CUDA_GEMM_WG256) wgs = 4;
    else if (ctx->gemm_kind == HB_CUDA_GEMM_AUTO && (ctx->row_invariant || n >= GEMM_WG_MIN_ROWS)) wgs = GEMM_WG_WGS;
    for (int i = 0; i < n_mm - 1 && wgs == 4; i++)
      if (ws[i]->rows % 256) wgs = 2;
  }
  /* the 32-token tile has one 16-byte x chunk per thread of 2 warpgroups: not with 4 */
  const int NT = ctx->row_invariant ? 128 : n <= 32 && wgs == 2 ? 32 : n <= 64 ? 64 : 128;
  const int BM = wgs ? NT : 32 * MI;   /* rows of x per block */
  const int BN = wgs ? 64 * wgs : GM_BN; /* weight rows (output columns) per block */
  const size_t sm = wgs ? cu_gemm_wg_smem(K, NT, wgs) : gemm_smem(K, BM);
  if (sm + 256 > ctx->smem_optin) return 1;
  gemm_args &a = pl->a;
  memset(&a, 0, sizeof a);
  a.x = (const __half *)x->data;
  a.ldx = x->cols;
  a.M = n;
  a.K = (int)K;
  a.n_mm = n_mm;
  a.add = add;
  const enum hb_dtype odt = outs[0]->dtype;
  if (odt != HB_F16 && odt != HB_F32) return 1;
  int64_t cols = 0;
  for (int i = 0; i < n_mm; i++) {
    const struct hb_tensor *w = ws[i], *b = biases ? biases[i] : NULL;
    if (w->dtype != HB_Q4 || w->cols != K || w->rows <= 0 || (i < n_mm - 1 && w->rows % GM_BN) ||
        outs[i]->dtype != odt || outs[i]->cols != w->rows || outs[i]->rows < n ||
        (b && (b->dtype != HB_F32 || b->rows * b->cols != w->rows)) || (add && outs[i]->data == x->data))
      return 1;
    a.col0[i] = (int)cols;
    cols += w->rows;
    if (cols > INT32_MAX / 2) return 1;
    a.wq[i] = (const uint8_t *)w->data;
    a.ws[i] = (const __half *)w->aux;
    a.bias[i] = b ? (const float *)b->data : NULL;
    a.out[i] = outs[i]->data;
    a.ldo[i] = outs[i]->cols;
  }
  for (int i = n_mm; i < 4; i++) a.col0[i] = (int)cols;
  a.n_total = (int)cols;
  /* every weight but the last fills whole BN-column tiles, so the tiles of all weights are
   * ceil(n_total / BN) */
  const int KT = (int)(K / GM_BK), gx = (a.n_total + BN - 1) / BN, gy = (n + BM - 1) / BM;
  /* split-K when the tile grid is under one wave (small M, few output columns), so that every
   * GEMM keeps >= 2 blocks per SM streaming weights; at least 4 k-tiles per split. Decided on the
   * largest weight's grid alone: the joined launch then splits as its largest part did on its own
   * (never less parallel than the separate launches, same k-tiles per block), and one weight
   * splits exactly as before */
  int tmax = 0;
  for (int i = 0; i < n_mm; i++) {
    const int t = (int)((ws[i]->rows + BN - 1) / BN) * gy;
    tmax = t > tmax ? t : tmax;
  }
  int S = 1;
  if (tmax < ctx->n_sm && !ctx->row_invariant) { /* row-invariant: one K order for every n */
    S = (2 * ctx->n_sm + tmax - 1) / tmax;
    if (S > KT / 4) S = KT / 4 > 0 ? KT / 4 : 1;
    /* on the wgmma kernel, no more splits than keep the joined launch (all its weights' tiles) to the blocks the
     * GPU holds at once: a second, partial wave of short split blocks costs a whole block's latency again, and
     * every slice is written and summed once more (the 3B's gate/up at 32 rows: 4 splits were 688 blocks for
     * 396 slots; 2 are 344: x32 +5 % on the H200, bench/RESULTS.md "Session 36") */
    if (wgs) {
      const int cap = cu_gemm_wg_resident(NT, wgs, odt == HB_F32, sm) * ctx->n_sm / (gx * gy);
      if (S > cap) S = cap > 1 ? cap : 1;
    }
  }
  a.kt_per = (KT + S - 1) / S;
  S = (KT + a.kt_per - 1) / a.kt_per;
  pl->wgs = wgs;
  pl->NT = NT;
  pl->MI = MI;
  pl->S = S;
  pl->odt = odt;
  pl->sm = sm;
  pl->grid = dim3((unsigned)gx, (unsigned)gy, (unsigned)S);
  if (ctx->twin) ctx->twin_bad++; /* no one-token twin of a tensor-core GEMM's rows (hb_cuda_set_step_twins) */
  return 0;
}

/* runs a plan's GEMM: its split-K slices (when S > 1) into the context's scratch, then nothing more (finish 0: the
 * caller's finish kernel reads pl->a.part) or gemm_finish (finish 1) */
int cu_gemm_q4_run(struct hb_ctx *ctx, struct gemm_plan *pl, int finish) {
  gemm_args &a = pl->a;
  const int S = pl->S, MI = pl->MI;
  const dim3 grid = pl->grid;
  const size_t sm = pl->sm;
  if (S > 1) { /* one slice per split, each written whole by the split's blocks: nothing to zero */
    const size_t np = (size_t)S * (size_t)a.M * (size_t)a.n_total;
    void *pp = ctx->gemm_part;
    if (cu_scratch(ctx, &pp, &ctx->gemm_part_cap, np, sizeof(float), 0)) return 1;
    ctx->gemm_part = (float *)pp;
    a.part = ctx->gemm_part;
    a.n_split = S;
  }
  if (pl->wgs) cu_gemm_wg_launch(ctx, a, pl->NT, pl->wgs, pl->odt == HB_F32, grid, sm);
  else {
#define GQ(MM, TO) gemm_q4_kernel<MM, TO><<<grid, 256, sm, ctx->stream>>>(a)
  if (pl->odt == HB_F16) {
    if (MI == 1) GQ(1, __half);
    else if (MI == 2) GQ(2, __half);
    else GQ(4, __half);
  } else {
    if (MI == 1) GQ(1, float);
    else if (MI == 2) GQ(2, float);
    else GQ(4, float);
  }
#undef GQ
    if (CU_LAUNCHED(ctx, a.part ? "gemm_q4 split-K" : "gemm_q4")) return 1;
  }
  if (ctx->status || !a.part || !finish) return ctx->status != 0;
  const unsigned fg = cu_ew_grid(ctx, (int64_t)a.M * a.n_total);
  if (pl->odt == HB_F16) gemm_finish_kernel<__half><<<fg, 256, 0, ctx->stream>>>(a);
  else gemm_finish_kernel<float><<<fg, 256, 0, ctx->stream>>>(a);
  CU_LAUNCHED(ctx, "gemm_finish");
  return ctx->status != 0;
}

/* the tensor-core GEMM (gemm_q4_plan, gemm_q4_run); returns 1 without doing anything when the shapes need another
 * path, 0 when it ran or failed (the error in the context) */
int cu_gemm_q4(struct hb_ctx *ctx, const struct hb_tensor *x, int n_mm, struct hb_tensor *const *outs,
               const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add) {
  struct gemm_plan pl;
  if (cu_gemm_q4_plan(ctx, x, n_mm, outs, ws, biases, n, add, &pl)) return 1;
  cu_gemm_q4_run(ctx, &pl, 1);
  return 0;
}

/* split-K finish of a joined gate/up GEMM (weights of N rows each, no bias, no add) with silu_mul after it:
 * out[m][j] = silu(g) * u, where g and u are what gemm_finish stores (each column's slices summed in order, + 0, to
 * f16), and the product is silu_mul's expression on those f16 values: the same bits as gemm_finish then silu_mul,
 * one launch fewer and the gate and up rows never written */
__global__ void gemm_finish_swiglu_kernel(const __grid_constant__ gemm_args a, int N) {
  pdl_trigger();
  const int64_t total = (int64_t)a.M * a.n_total, mn = (int64_t)a.M * N;
  __half *out = (__half *)a.out[0];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < mn; i += (int64_t)gridDim.x * blockDim.x) {
    const int m = (int)(i / N), j = (int)(i % N);
    const int64_t ig = (int64_t)m * a.n_total + j, iu = ig + N;
    float g = 0.0f, u = 0.0f;
    for (int z = 0; z < a.n_split; z++) {
      g += a.part[(int64_t)z * total + ig];
      u += a.part[(int64_t)z * total + iu];
    }
    const float gh = __half2float(__float2half_rn(g + 0.0f)), uh = __half2float(__float2half_rn(u + 0.0f));
    out[(int64_t)m * a.ldo[0] + j] = __float2half_rn(gh / (1.0f + expf(-gh)) * uh);
  }
}

/* the gate/up GEMM split over K with gemm_finish_swiglu_kernel as its finish: planned as cu_gemm_q4 would run the
 * joined gate/up GEMM into f16 outputs, and taken only where that plan splits K (else 1: nothing done) */
static int swiglu_split_plan(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *w_gate,
                             const struct hb_tensor *w_up, const struct hb_tensor *out, int n, struct gemm_plan *pl) {
  if (n < 1 || x->dtype != HB_F16 || out->dtype != HB_F16 || out->cols != w_gate->rows || out->rows < n ||
      w_up->rows != w_gate->rows || out->data == x->data)
    return 1;
  struct hb_tensor g = *out, u = *out; /* stand-ins with the outputs' shape: a split GEMM writes only its slices */
  struct hb_tensor *outs[2] = {&g, &u};
  const struct hb_tensor *ws[2] = {w_gate, w_up};
  if (cu_gemm_q4_plan(ctx, x, 2, outs, ws, NULL, n, 0, pl) || pl->S < 2) return 1;
  pl->a.out[0] = out->data;
  pl->a.ldo[0] = out->cols;
  return 0;
}

/* out = silu(x · w_gateᵀ) * (x · w_upᵀ) in one wgmma launch (gemm_wg_kernel's SwiGLU form), where cu_gemm_q4 would run
 * the gate/up GEMM on the wgmma kernel without split-K: then the result is the bits of that GEMM followed by
 * silu_mul, and the gate and up outputs (2 x n x N f16) are never written. 1 (nothing done) elsewhere. */
static int swiglu_plan(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *w_gate,
                       const struct hb_tensor *w_up, const struct hb_tensor *out, int n, int *nt, size_t *smem) {
  if (!ctx->gemm_wg_ok || n < 1 || x->dtype != HB_F16 || x->cols % 8 || x->rows < n) return 1;
  if (!(ctx->gemm_kind == HB_CUDA_GEMM_WG ||
        (ctx->gemm_kind == HB_CUDA_GEMM_AUTO && (ctx->row_invariant || n >= GEMM_WG_MIN_ROWS))))
    return 1;
  const int64_t K = w_gate->cols, N = w_gate->rows;
  if (w_gate->dtype != HB_Q4 || w_up->dtype != HB_Q4 || w_up->cols != K || w_up->rows != N || K <= 0 || K % 128 ||
      K > INT32_MAX || x->cols < K || N <= 0 || N > INT32_MAX / 4 || out->dtype != HB_F16 || out->cols != N ||
      out->rows < n || out->data == x->data)
    return 1;
  /* the 128-token tile only (cu_gemm_q4 takes 64 for n <= 64 outside row-invariant mode, where the gate/up launch
   * is always under a wave), and no split K: cu_gemm_q4 splits when the launch (128-row tiles) is under one wave */
  if (n <= 64 && !ctx->row_invariant) return 1;
  const int NT = 128, gy = (n + NT - 1) / NT;
  if ((int)((N + 127) / 128) * gy < ctx->n_sm && !ctx->row_invariant) return 1;
  const size_t sm = cu_gemm_wg_smem(K, NT, 2);
  if (sm + 256 > ctx->smem_optin) return 1;
  if (ctx->twin) ctx->twin_bad++; /* no one-token twin of a tensor-core GEMM's rows (hb_cuda_set_step_twins) */
  *nt = NT;
  *smem = sm;
  return 0;
}

int cu_gemm_q4_swiglu_covers(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *w_gate,
                             const struct hb_tensor *w_up, const struct hb_tensor *out, int n) {
  int nt;
  size_t sm;
  struct gemm_plan pl;
  return !swiglu_plan(ctx, x, w_gate, w_up, out, n, &nt, &sm) || !swiglu_split_plan(ctx, x, w_gate, w_up, out, n, &pl);
}

int cu_gemm_q4_swiglu(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *w_gate,
                      const struct hb_tensor *w_up, struct hb_tensor *out, int n) {
  int NT;
  size_t sm;
  if (swiglu_plan(ctx, x, w_gate, w_up, out, n, &NT, &sm)) {
    struct gemm_plan pl;
    if (swiglu_split_plan(ctx, x, w_gate, w_up, out, n, &pl)) return 1;
    if (cu_gemm_q4_run(ctx, &pl, 0)) return 0;
    const unsigned fg = cu_ew_grid(ctx, (int64_t)n * w_gate->rows);
    gemm_finish_swiglu_kernel<<<fg, 256, 0, ctx->stream>>>(pl.a, (int)w_gate->rows);
    CU_LAUNCHED(ctx, "gemm_finish_swiglu");
    return 0;
  }
  const int64_t K = w_gate->cols, N = w_gate->rows;
  const int gy = (n + NT - 1) / NT;
  gemm_args a;
  memset(&a, 0, sizeof a);
  a.x = (const __half *)x->data;
  a.ldx = x->cols;
  a.M = n;
  a.K = (int)K;
  a.n_mm = 2;
  a.col0[0] = 0;
  a.col0[1] = (int)N;
  a.col0[2] = a.col0[3] = (int)(2 * N);
  a.n_total = (int)(2 * N);
  a.wq[0] = (const uint8_t *)w_gate->data;
  a.wq[1] = (const uint8_t *)w_up->data;
  a.ws[0] = (const __half *)w_gate->aux;
  a.ws[1] = (const __half *)w_up->aux;
  a.out[0] = out->data;
  a.ldo[0] = out->cols;
  a.kt_per = (int)(K / 64);
  cu_gemm_wg_launch_swiglu(ctx, a, dim3((unsigned)((N + 63) / 64), (unsigned)gy, 1), sm);
  return 0;
}

void cu_matmul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
               const struct hb_tensor *w, const struct hb_tensor *bias, int n) {
  if (n <= 0) return;
  if (x->cols < w->cols || out->cols != w->rows || out->rows < n || x->rows < n ||
      (bias && (bias->dtype != HB_F32 || bias->rows * bias->cols != w->rows)) ||
      (x->dtype != HB_F32 && x->dtype != HB_F16) || (out->dtype != HB_F32 && out->dtype != HB_F16)) {
    CU_ARG(ctx, "matmul: x %lldx%lld (dt %d), w %lldx%lld (dt %d), out %lldx%lld (dt %d), n %d", (long long)x->rows,
           (long long)x->cols, (int)x->dtype, (long long)w->rows, (long long)w->cols, (int)w->dtype,
           (long long)out->rows, (long long)out->cols, (int)out->dtype, n);
    return;
  }
  const float *b = bias ? (const float *)bias->data : NULL;
  int64_t ldo = out->cols, ldx = x->cols;
  struct hb_tensor *o1[1] = {out};
  const struct hb_tensor *w1[1] = {w}, *b1[1] = {bias};
  if (x->dtype == HB_F16 && w->dtype == HB_Q4 && ldx % 8 == 0 && (n <= 8 || ctx->twin) &&
      !cu_gemv_fused(ctx, PRO_PLAIN, x, NULL, NULL, 0.0f, 0.0f, 1, o1, w1, b1, n, 0))
    return;
  if (!cu_gemm_q4(ctx, x, 1, o1, w1, b1, n, 0)) return;
  if (x->dtype == HB_F32) {
    if (out->dtype == HB_F32) simt_launch(ctx, (float *)out->data, ldo, (const float *)x->data, ldx, w, b, n);
    else simt_launch(ctx, (__half *)out->data, ldo, (const float *)x->data, ldx, w, b, n);
  } else {
    if (out->dtype == HB_F32) simt_launch(ctx, (float *)out->data, ldo, (const __half *)x->data, ldx, w, b, n);
    else simt_launch(ctx, (__half *)out->data, ldo, (const __half *)x->data, ldx, w, b, n);
  }
}

/* ---- tests and bench (cuda_backend.h) ---------------------------------------------------------------- */

extern "C" int hb_cuda_set_gemm(struct hb_ctx *ctx, int kind) {
  ctx->gemm_kind = kind;
  return (kind == HB_CUDA_GEMM_WG || kind == HB_CUDA_GEMM_WG256) && !ctx->gemm_wg_ok ? HB_CUDA_GEMM_MMA : kind;
}

extern "C" int hb_cuda_gemm_q4(struct hb_ctx *ctx, const struct hb_tensor *x, int n_mm, struct hb_tensor *const *outs,
                               const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add) {
  if (ctx->status) return 0;
  return cu_gemm_q4(ctx, x, n_mm, outs, ws, biases, n, add);
}

extern "C" void hb_cuda_gemm_simt(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
                                  const struct hb_tensor *w, const struct hb_tensor *bias, int n) {
  if (ctx->status || n <= 0) return;
  const float *b = bias ? (const float *)bias->data : NULL;
  if (x->dtype != HB_F16 || out->dtype != HB_F32) {
    CU_ARG(ctx, "gemm_simt hook: f16 x and f32 out only");
    return;
  }
  simt_launch(ctx, (float *)out->data, out->cols, (const __half *)x->data, x->cols, w, b, n);
}
