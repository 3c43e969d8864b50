/* backend/cuda/norm_rope.cu — RMSNorm (row norms and per-head qk norms) and NeoX rotary embedding.
 * One warp per row; f32 arithmetic whatever the storage type. Positions come from the batch's
 * device copy (b->d_pos), so a captured graph replays with the next step's positions. */
#include "backend/cuda/cuda_common.cuh"

/* out = x / sqrt(mean(x^2) + eps) * (w + w_offset), rows of width d; in place allowed */
template <typename T>
__global__ void rmsnorm_kernel(T *out, const T *x, const void *w, int wdt, int64_t rows, int d, float eps,
                               float w_offset) {
  pdl_trigger();
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T *xr = x + r * d;
  T *o = out + r * d;
  float ss = 0.0f;
  for (int j = lane; j < d; j += 32) {
    float v = ldf(xr + j);
    ss += v * v;
  }
  ss = warp_sum(ss);
  float inv = rsqrtf(ss / (float)d + eps);
  for (int j = lane; j < d; j += 32) stf(o + j, ldf(xr + j) * inv * (ld_any(w, wdt, j) + w_offset));
}

/* the same for wide rows (d >= 1024): one 256-thread block per row, so that a decode batch of a few
 * rows is not one warp walking 2048 elements serially; f16 rows with d % 8 == 0 move 16 bytes a load */
template <typename T>
__global__ __launch_bounds__(256) void rmsnorm_row_kernel(T *out, const T *x, const void *w, int wdt, int d, float eps,
                                                          float w_offset) {
  pdl_trigger();
  __shared__ float s_ss[8];
  const T *xr = x + (int64_t)blockIdx.x * d;
  T *o = out + (int64_t)blockIdx.x * d;
  const bool vec = sizeof(T) == 2 && d % 8 == 0;
  float ss = 0.0f;
  if (vec) {
    for (int j = threadIdx.x * 8; j < d; j += 256 * 8) {
      uint4 u = *(const uint4 *)(xr + j);
      const __half2 *h = (const __half2 *)&u;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        float2 f = __half22float2(h[k]);
        ss += f.x * f.x + f.y * f.y;
      }
    }
  } else {
    for (int j = threadIdx.x; j < d; j += 256) {
      float v = ldf(xr + j);
      ss += v * v;
    }
  }
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) s_ss[threadIdx.x / 32] = ss;
  __syncthreads();
  float tot = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; i++) tot += s_ss[i];
  const float inv = rsqrtf(tot / (float)d + eps);
  if constexpr (sizeof(T) == 2) {
    /* the scaling pass 16 bytes of x a load as well, the weights 16 or 32 bytes: the 2-byte loop was a chain of
     * d / 256 round trips a thread (8 at d = 2,048), the most of this kernel's time in a decode step of 32 rows */
    if (vec && (wdt == HB_F32 || wdt == HB_F16) && ((uintptr_t)w & 15) == 0) {
      for (int j = threadIdx.x * 8; j < d; j += 256 * 8) {
        const uint4 u = *(const uint4 *)(xr + j);
        const __half *h = (const __half *)&u;
        float wv[8];
        if (wdt == HB_F32) {
          const float4 a = *(const float4 *)((const float *)w + j), b = *(const float4 *)((const float *)w + j + 4);
          wv[0] = a.x; wv[1] = a.y; wv[2] = a.z; wv[3] = a.w; wv[4] = b.x; wv[5] = b.y; wv[6] = b.z; wv[7] = b.w;
        } else {
          const uint4 wu = *(const uint4 *)((const __half *)w + j);
          const __half *wh = (const __half *)&wu;
#pragma unroll
          for (int k = 0; k < 8; k++) wv[k] = __half2float(wh[k]);
        }
        uint4 ov;
        __half *oh = (__half *)&ov;
#pragma unroll
        for (int k = 0; k < 8; k++) oh[k] = __float2half_rn(__half2float(h[k]) * inv * (wv[k] + w_offset));
        *(uint4 *)(o + j) = ov;
      }
      return;
    }
  }
  for (int j = threadIdx.x; j < d; j += 256) stf(o + j, ldf(xr + j) * inv * (ld_any(w, wdt, j) + w_offset));
}

void cu_rmsnorm(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
                const struct hb_tensor *w, float eps, float w_offset) {
  int64_t d = w->rows * w->cols;
  if (d <= 0 || (x->rows * x->cols) % d || out->dtype != x->dtype || out->rows * out->cols < x->rows * x->cols ||
      w->dtype == HB_Q4 || w->dtype == HB_I32) {
    CU_ARG(ctx, "rmsnorm: x %lldx%lld, w %lldx%lld", (long long)x->rows, (long long)x->cols, (long long)w->rows,
           (long long)w->cols);
    return;
  }
  int64_t rows = x->rows * x->cols / d;
  if (!rows) return;
  if (d >= 1024 && rows <= 0x7fffffff) {
    if (x->dtype == HB_F16)
      rmsnorm_row_kernel<__half><<<(unsigned)rows, 256, 0, ctx->stream>>>((__half *)out->data, (const __half *)x->data,
                                                                        w->data, (int)w->dtype, (int)d, eps, w_offset);
    else
      rmsnorm_row_kernel<float><<<(unsigned)rows, 256, 0, ctx->stream>>>((float *)out->data, (const float *)x->data,
                                                                       w->data, (int)w->dtype, (int)d, eps, w_offset);
    CU_LAUNCHED(ctx, "rmsnorm");
    return;
  }
  unsigned grid = (unsigned)((rows + 7) / 8);
  if (x->dtype == HB_F16)
    rmsnorm_kernel<__half><<<grid, 256, 0, ctx->stream>>>((__half *)out->data, (const __half *)x->data, w->data,
                                                          (int)w->dtype, rows, (int)d, eps, w_offset);
  else
    rmsnorm_kernel<float><<<grid, 256, 0, ctx->stream>>>((float *)out->data, (const float *)x->data, w->data,
                                                         (int)w->dtype, rows, (int)d, eps, w_offset);
  CU_LAUNCHED(ctx, "rmsnorm");
}

/* NeoX rotary: for i < n_rot/2, (a, b) = (v[i], v[i + n_rot/2]) turns by pos * theta^(-2i/n_rot).
 * One thread per (token, head, i); the angle in f32 as the CPU reference computes it. */
template <typename T>
__global__ void rope_neox_kernel(T *x, const int32_t *pos, int n_tokens, int n_heads, int head_dim, int n_rot,
                                 float theta) {
  pdl_trigger();
  int half = n_rot / 2;
  int64_t total = (int64_t)n_tokens * n_heads * half;
  for (int64_t it = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; it < total; it += (int64_t)gridDim.x * blockDim.x) {
    int i = (int)(it % half);
    int64_t th = it / half; /* token * n_heads + head */
    int t = (int)(th / n_heads);
    float inv_freq = 1.0f / rope_pow(theta, (float)(2 * i) / (float)n_rot);
    float ang = (float)pos[t] * inv_freq;
    float sn, cs;
    sincosf(ang, &sn, &cs);
    T *v = x + th * head_dim;
    float a = ldf(v + i), b = ldf(v + i + half);
    stf(v + i, a * cs - b * sn);
    stf(v + i + half, b * cs + a * sn);
  }
}

void cu_rope_neox(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_batch *b, int n_heads,
                  int head_dim, int n_rot, float theta) {
  if (b->n_tokens <= 0) return;
  if (!b->d_pos.data || n_rot > head_dim || n_rot % 2 || (int64_t)n_heads * head_dim > x->cols) {
    CU_ARG(ctx, "rope_neox: bad shape or batch not uploaded");
    return;
  }
  const unsigned grid = cu_ew_grid(ctx, (int64_t)b->n_tokens * n_heads * (n_rot / 2));
  if (x->cols != (int64_t)n_heads * head_dim) {
    CU_ARG(ctx, "rope_neox: x cols %lld != n_heads*head_dim", (long long)x->cols);
    return;
  }
  if (x->dtype == HB_F16)
    rope_neox_kernel<__half><<<grid, 256, 0, ctx->stream>>>((__half *)x->data, (const int32_t *)b->d_pos.data,
                                                            b->n_tokens, n_heads, head_dim, n_rot, theta);
  else
    rope_neox_kernel<float><<<grid, 256, 0, ctx->stream>>>((float *)x->data, (const int32_t *)b->d_pos.data,
                                                           b->n_tokens, n_heads, head_dim, n_rot, theta);
  CU_LAUNCHED(ctx, "rope_neox");
}
