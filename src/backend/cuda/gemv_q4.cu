/* backend/cuda/gemv_q4.cu — the decode GEMV: y = f(x) · Wᵀ (+ b) (+ y) for n <= 8 rows of f16
 * activations and int4 group-128 weights (layout: matmul_q4.cu), with the fused prologues of
 * hb_cuda_norm_matmul / hb_cuda_silu_matmul (rmsnorm, silu·up) and up to three weights sharing x. */
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ptx.cuh"

/* ---- GEMV: decode -------------------------------------------------------------------------------- */

#define GEMV_WARPS 8
#define GEMV_R 2 /* rows per warp */
#define GEMV_U 4 /* 16-byte loads per row per lane in flight */
#define GEMV_ROWS (GEMV_WARPS * GEMV_R)


/* up to three weights sharing one x, concatenated in row space (each but the last a multiple of
 * GEMV_ROWS rows, so a warp's rows never straddle two); add: out += instead of out = */
struct gemv_args {
  const __half *x, *x2;
  int64_t ldx;
  const void *nw;
  int nwdt;
  float eps, off;
  int n_mm, K, rows_total, add;
  int row0[4];
  const uint8_t *wq[3];
  const __half *ws[3];
  const float *bias[3];
  void *out[3];
  int64_t ldo[3];
};

static size_t gemv_smem(int n, int64_t K) { return (size_t)n * (size_t)K * 4; }

template <int N, typename TO, int PRO>
__global__ __launch_bounds__(256, N == 1 ? 2 : 1) void gemv_q4_kernel(const __grid_constant__ gemv_args a) {
  extern __shared__ uint4 smem[];
  __shared__ float s_inv[8];
  const int K = a.K, nch = K / 32;
  float4 *xs = (float4 *)smem; /* [N][nch][8] f32 x, 16-byte chunks swizzled per run (below) */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rb = K / 2, gpr = K / 128;

  /* The weight stream is software-pipelined over "steps" (row group rg, 32*U-run window c0): the
   * loads of step i+1 are issued before step i is computed, and the very first step's loads before
   * the x prologue, which is also before griddepcontrol.wait: under programmatic dependent launch
   * this kernel's weights start streaming while the previous kernel drains. Nothing that the
   * previous kernel writes (x, out) is touched before the wait. */
  uint4 wa[GEMV_U][GEMV_R];
  float sa[GEMV_U][GEMV_R];
#define GEMV_LOAD(W, SV, RG, C0)                                                                         \
  do {                                                                                                   \
    const int gr_ = (RG) * GEMV_ROWS + warp * GEMV_R;                                                    \
    const int m_ = gr_ >= a.row0[1] ? (gr_ >= a.row0[2] ? 2 : 1) : 0;                                    \
    const int rows_ = m_ < a.n_mm ? a.row0[m_ + 1] - a.row0[m_] : 0, r0_ = gr_ - a.row0[m_];             \
    _Pragma("unroll") for (int u = 0; u < GEMV_U; u++) {                                                 \
      const int c = (C0) + u * 32 + lane;                                                                \
      _Pragma("unroll") for (int r = 0; r < GEMV_R; r++) {                                               \
        if (c < nch && r0_ + r < rows_) {                                                                \
          W[u][r] = ld_nc_v4(a.wq[m_] + (int64_t)(r0_ + r) * rb + (int64_t)c * 16);                      \
          SV[u][r] = __half2float(a.ws[m_][(int64_t)(r0_ + r) * gpr + c / 4]);                           \
        } else {                                                                                         \
          W[u][r] = make_uint4(0, 0, 0, 0);                                                              \
          SV[u][r] = 0.0f;                                                                               \
        }                                                                                                \
      }                                                                                                  \
    }                                                                                                    \
  } while (0)
  GEMV_LOAD(wa, sa, (int)blockIdx.x, 0);
  pdl_wait();
  pdl_trigger();

  if (PRO == PRO_NORM) {
    if (threadIdx.x < N) s_inv[threadIdx.x] = 0.0f;
    __syncthreads();
    for (int n = 0; n < N; n++) {
      const __half2 *xr = (const __half2 *)(a.x + (int64_t)n * a.ldx);
      float ss = 0.0f;
      for (int i = threadIdx.x; i < K / 2; i += blockDim.x) {
        float2 f = __half22float2(xr[i]);
        ss += f.x * f.x + f.y * f.y;
      }
      ss = warp_sum(ss);
      if (threadIdx.x % 32 == 0) atomicAdd(&s_inv[n], ss);
    }
    __syncthreads();
    if (threadIdx.x < N) s_inv[threadIdx.x] = rsqrtf(s_inv[threadIdx.x] / (float)K + a.eps);
    __syncthreads();
  }

  /* x rows -> f32 runs of 32 in shared memory (after the norm / silu prologue). The 8 16-byte
   * chunks of run c sit at chunk q ^ (c & 7): the 8 lanes of one quarter-warp load phase (8
   * consecutive runs) then hit 8 distinct 4-bank groups (no conflicts). */
  for (int c = threadIdx.x; c < N * nch; c += blockDim.x) {
    int n = c / nch, ch = c % nch;
    const uint4 *xp = (const uint4 *)(a.x + (int64_t)n * a.ldx + (int64_t)ch * 32);
    float4 *dst = xs + (size_t)c * 8;
    const int sw = ch & 7;
    float v[32];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      uint4 u = xp[i];
      const __half2 *h = (const __half2 *)&u;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        float2 f = __half22float2(h[j]);
        v[i * 8 + 2 * j] = f.x;
        v[i * 8 + 2 * j + 1] = f.y;
      }
    }
    if (PRO == PRO_NORM) {
      float inv = s_inv[n];
#pragma unroll
      for (int i = 0; i < 32; i++) v[i] *= inv * (ld_any(a.nw, a.nwdt, ch * 32 + i) + a.off);
    } else if (PRO == PRO_SILU) {
      const uint4 *up = (const uint4 *)(a.x2 + (int64_t)n * a.ldx + (int64_t)ch * 32);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        uint4 u = up[i];
        const __half2 *h = (const __half2 *)&u;
#pragma unroll
        for (int j = 0; j < 4; j++) {
          float2 f = __half22float2(h[j]);
          float g0 = v[i * 8 + 2 * j], g1 = v[i * 8 + 2 * j + 1];
          v[i * 8 + 2 * j] = g0 / (1.0f + expf(-g0)) * f.x;
          v[i * 8 + 2 * j + 1] = g1 / (1.0f + expf(-g1)) * f.y;
        }
      }
    }
#pragma unroll
    for (int q = 0; q < 8; q++) dst[q ^ sw] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  }
  __syncthreads();

  /* f32 dot products of the exactly dequantized weights with x: nibble -> float by the exponent trick
   * (bits 0x4B000000 | nib = 2^23 + nib, minus 2^23 + 8 = q exactly) on the integer and FP32 pipes
   * (no f16 <-> f32 conversions), 4 independent FMA chains per (row, run). No activation
   * quantization. */
  float acc[GEMV_R][N];
#pragma unroll
  for (int r = 0; r < GEMV_R; r++)
#pragma unroll
    for (int n = 0; n < N; n++) acc[r][n] = 0.0f;
  int rg = blockIdx.x, c0 = 0;
  while (rg * GEMV_ROWS < a.rows_total) {
    int nrg = rg, nc0 = c0 + 32 * GEMV_U;
    if (nc0 >= nch) { nc0 = 0; nrg += gridDim.x; }
    uint4 wb[GEMV_U][GEMV_R];
    float sb[GEMV_U][GEMV_R];
    GEMV_LOAD(wb, sb, nrg, nc0); /* next step in flight while this one computes */
#pragma unroll
    for (int u = 0; u < GEMV_U; u++) {
      int c = c0 + u * 32 + lane;
      if (c >= nch) break;
      const int sw = c & 7;
#pragma unroll
      for (int n = 0; n < N; n++) {
        const float4 *xr = xs + ((size_t)n * nch + c) * 8;
        float xf[32];
#pragma unroll
        for (int q = 0; q < 8; q++) {
          float4 xv = xr[q ^ sw];
          xf[4 * q] = xv.x;
          xf[4 * q + 1] = xv.y;
          xf[4 * q + 2] = xv.z;
          xf[4 * q + 3] = xv.w;
        }
#pragma unroll
        for (int r = 0; r < GEMV_R; r++) {
          const uint32_t wv[4] = {wa[u][r].x, wa[u][r].y, wa[u][r].z, wa[u][r].w};
          float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
          for (int t = 0; t < 4; t++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
              /* word t: nibble k -> weight 2t + 8k, nibble k + 4 -> weight 2t + 8k + 1 */
              const float f0 = __int_as_float((int)(((wv[t] >> (4 * k)) & 0xFu) | 0x4B000000u)) - 8388616.0f;
              const float f1 = __int_as_float((int)(((wv[t] >> (4 * k + 16)) & 0xFu) | 0x4B000000u)) - 8388616.0f;
              if (k & 1) {
                s2 = fmaf(f0, xf[2 * t + 8 * k], s2);
                s3 = fmaf(f1, xf[2 * t + 8 * k + 1], s3);
              } else {
                s0 = fmaf(f0, xf[2 * t + 8 * k], s0);
                s1 = fmaf(f1, xf[2 * t + 8 * k + 1], s1);
              }
            }
          }
          acc[r][n] = fmaf(sa[u][r], (s0 + s1) + (s2 + s3), acc[r][n]);
        }
      }
    }
    if (nc0 == 0) { /* row group rg done: reduce and store */
      const int gr = rg * GEMV_ROWS + warp * GEMV_R;
      const int m = gr >= a.row0[1] ? (gr >= a.row0[2] ? 2 : 1) : 0;
      const int rows = m < a.n_mm ? a.row0[m + 1] - a.row0[m] : 0, r0 = gr - a.row0[m];
      TO *out = (TO *)a.out[m < 3 ? m : 0];
      const float *bias = a.bias[m < 3 ? m : 0];
      const int64_t ldo = a.ldo[m < 3 ? m : 0];
#pragma unroll
      for (int r = 0; r < GEMV_R; r++) {
#pragma unroll
        for (int n = 0; n < N; n++) {
          float v = warp_sum(acc[r][n]);
          acc[r][n] = 0.0f;
          if (lane == 0 && r0 + r < rows) {
            TO *o = out + (int64_t)n * ldo + r0 + r;
            v += bias ? bias[r0 + r] : 0.0f;
            if (a.add) v += ldf(o);
            stf(o, v);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < GEMV_U; u++)
#pragma unroll
      for (int r = 0; r < GEMV_R; r++) { wa[u][r] = wb[u][r]; sa[u][r] = sb[u][r]; }
    rg = nrg;
    c0 = nc0;
  }
#undef GEMV_LOAD
}

template <typename KERN>
static int smem_attr(struct hb_ctx *ctx, KERN kern) {
  cudaFuncAttributes fa;
  if (CU_OK(ctx, cudaFuncGetAttributes(&fa, kern))) return 1;
  return CU_OK(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)(ctx->smem_optin - fa.sharedSizeBytes)));
}
template <int N, typename TO, int PRO>
static int gemv_attr1(struct hb_ctx *ctx) {
  return smem_attr(ctx, gemv_q4_kernel<N, TO, PRO>);
}
template <int N>
static int gemv_attr(struct hb_ctx *ctx) {
  return gemv_attr1<N, __half, PRO_PLAIN>(ctx) | gemv_attr1<N, __half, PRO_NORM>(ctx) |
         gemv_attr1<N, __half, PRO_SILU>(ctx) | gemv_attr1<N, float, PRO_PLAIN>(ctx) |
         gemv_attr1<N, float, PRO_NORM>(ctx) | gemv_attr1<N, float, PRO_SILU>(ctx);
}

int cu_gemv_init(struct hb_ctx *ctx) {
  return gemv_attr<1>(ctx) | gemv_attr<2>(ctx) | gemv_attr<3>(ctx) | gemv_attr<4>(ctx) | gemv_attr<5>(ctx) |
         gemv_attr<6>(ctx) | gemv_attr<7>(ctx) | gemv_attr<8>(ctx);
}

/* one resident wave (n = 1: <= 128 registers x 256 threads, 2 blocks per SM; n > 1: 1), launched with
 * programmatic stream serialization so that it may start while the previous kernel drains (the
 * kernel waits with griddepcontrol.wait before it reads x or writes out) */
template <typename TO, int PRO>
static void gemv_launch_t(struct hb_ctx *ctx, int n, const gemv_args &a) {
  size_t sm = gemv_smem(n, a.K);
  int groups = (a.rows_total + GEMV_ROWS - 1) / GEMV_ROWS;
  int per_sm = (int)((228 * 1024) / (sm + 1024));
  per_sm = per_sm < 1 ? 1 : (per_sm > 2 ? 2 : per_sm);
  if (n > 1) per_sm = 1; /* ~200 registers per thread for n > 1: one block per SM */
  int grid = groups < ctx->n_sm * per_sm ? groups : ctx->n_sm * per_sm;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid);
  cfg.blockDim = dim3(256);
  cfg.dynamicSmemBytes = sm;
  cfg.stream = ctx->stream;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  cudaError_t e = cudaSuccess;
#define GEMV_CASE(NN) \
  case NN: e = cudaLaunchKernelEx(&cfg, gemv_q4_kernel<NN, TO, PRO>, a); break;
  switch (n) {
    GEMV_CASE(1) GEMV_CASE(2) GEMV_CASE(3) GEMV_CASE(4) GEMV_CASE(5) GEMV_CASE(6) GEMV_CASE(7) GEMV_CASE(8)
  }
#undef GEMV_CASE
  if (!cu_ok_(ctx, e, "cudaLaunchKernelEx(gemv_q4)", __FILE__, __LINE__)) CU_LAUNCHED(ctx, "gemv_q4");
}

/* the fused decode GEMV: returns 0 when it launched, 1 when the shapes need the general path */
int cu_gemv_fused(struct hb_ctx *ctx, int pro, const struct hb_tensor *x, const struct hb_tensor *x2,
                  const struct hb_tensor *nw, float eps, float off, int n_mm, struct hb_tensor *const *outs,
                  const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add) {
  if (ctx->exact || n < 1 || n > 8 || n_mm < 1 || n_mm > 3 || x->dtype != HB_F16 || x->cols % 8) return 1;
  if (gemv_smem(n, ws[0]->cols) + 256 > ctx->smem_optin) return 1;
  if (x2 && (x2->dtype != HB_F16 || x2->cols != x->cols)) return 1;
  gemv_args a;
  memset(&a, 0, sizeof a);
  a.x = (const __half *)x->data;
  a.x2 = x2 ? (const __half *)x2->data : NULL;
  a.ldx = x->cols;
  a.nw = nw ? nw->data : NULL;
  a.nwdt = nw ? (int)nw->dtype : 0;
  a.eps = eps;
  a.off = off;
  a.n_mm = n_mm;
  a.K = (int)ws[0]->cols;
  a.add = add;
  enum hb_dtype odt = outs[0]->dtype;
  int r = 0;
  for (int i = 0; i < n_mm; i++) {
    const struct hb_tensor *w = ws[i];
    if (w->dtype != HB_Q4 || w->cols != a.K || outs[i]->dtype != odt || outs[i]->cols != w->rows ||
        (i < n_mm - 1 && w->rows % GEMV_ROWS) || (biases && biases[i] && biases[i]->dtype != HB_F32))
      return 1;
    a.row0[i] = r;
    r += (int)w->rows;
    a.wq[i] = (const uint8_t *)w->data;
    a.ws[i] = (const __half *)w->aux;
    a.bias[i] = biases && biases[i] ? (const float *)biases[i]->data : NULL;
    a.out[i] = outs[i]->data;
    a.ldo[i] = outs[i]->cols;
  }
  for (int i = n_mm; i < 4; i++) a.row0[i] = r;
  a.rows_total = r;
  if (x->cols < a.K || (nw && nw->rows * nw->cols != a.K)) return 1;
  if (odt == HB_F16) {
    if (pro == PRO_NORM) gemv_launch_t<__half, PRO_NORM>(ctx, n, a);
    else if (pro == PRO_SILU) gemv_launch_t<__half, PRO_SILU>(ctx, n, a);
    else gemv_launch_t<__half, PRO_PLAIN>(ctx, n, a);
  } else if (odt == HB_F32) {
    if (pro == PRO_NORM) gemv_launch_t<float, PRO_NORM>(ctx, n, a);
    else if (pro == PRO_SILU) gemv_launch_t<float, PRO_SILU>(ctx, n, a);
    else gemv_launch_t<float, PRO_PLAIN>(ctx, n, a);
  } else {
    return 1;
  }
  return 0;
}

