/* backend/cuda/gemma4_ops.cu — the Gemma 4 ops of backend.h (model/gemma4.c): GELU-tanh gating (with the
 * per-layer-input column offset), scaling, logit soft-capping and proportional RoPE. Elementwise kernels
 * templated on the activation type (float or __half), f32 arithmetic, as elementwise.cu and norm_rope.cu;
 * each follows its scalar CPU op (cpu/cpu_ops_gemma4.c) formula for formula, so the exact path agrees. */
#include "backend/cuda/cuda_common.cuh"

/* ---- gelu_mul: out[t][j] = gelu_tanh(gate[t][j]) * up[t][up_col0 + j] ------------------------------------- */

template <typename T>
__global__ void gelu_mul_kernel(T *out, const T *g, const T *u, int64_t w, int64_t up_stride, int64_t up_col0,
                                int64_t m) {
  pdl_trigger();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = i / w, j = i % w;
    stf(out + i, gelu_tanh_f(ldf(g + i)) * ldf(u + t * up_stride + up_col0 + j));
  }
}

void cu_gelu_mul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate, const struct hb_tensor *up,
                 int up_col0, int n) {
  const int64_t w = gate->cols, m = (int64_t)n * w;
  if (m <= 0) return;
  if (gate->dtype != up->dtype || gate->dtype != out->dtype || out->cols != w || up_col0 < 0 ||
      up_col0 + w > up->cols || up->rows < n || out->rows < n || (out->dtype != HB_F16 && out->dtype != HB_F32)) {
    CU_ARG(ctx, "gelu_mul: gate %lldx%lld, up %lldx%lld from col %d, out %lldx%lld, n %d", (long long)gate->rows,
           (long long)w, (long long)up->rows, (long long)up->cols, up_col0, (long long)out->rows,
           (long long)out->cols, n);
    return;
  }
  if (out->dtype == HB_F16)
    gelu_mul_kernel<__half><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>(
        (__half *)out->data, (const __half *)gate->data, (const __half *)up->data, w, up->cols, up_col0, m);
  else
    gelu_mul_kernel<float><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>(
        (float *)out->data, (const float *)gate->data, (const float *)up->data, w, up->cols, up_col0, m);
  CU_LAUNCHED(ctx, "gelu_mul");
}

/* ---- scale, softcap --------------------------------------------------------------------------------- */

template <typename T>
__global__ void scale_kernel(T *x, float s, int64_t m) {
  pdl_trigger();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m; i += (int64_t)gridDim.x * blockDim.x)
    stf(x + i, ldf(x + i) * s);
}

template <typename T>
__global__ void softcap_kernel(T *x, float cap, int64_t m) {
  pdl_trigger();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m; i += (int64_t)gridDim.x * blockDim.x)
    stf(x + i, cap * tanhf(ldf(x + i) / cap));
}

void cu_scale(struct hb_ctx *ctx, struct hb_tensor *x, float s, int n) {
  const int64_t m = (int64_t)n * x->cols;
  if (m <= 0) return;
  if (x->rows < n || (x->dtype != HB_F16 && x->dtype != HB_F32)) {
    CU_ARG(ctx, "scale: x %lldx%lld dtype %d, n %d", (long long)x->rows, (long long)x->cols, (int)x->dtype, n);
    return;
  }
  if (x->dtype == HB_F16) scale_kernel<__half><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>((__half *)x->data, s, m);
  else scale_kernel<float><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>((float *)x->data, s, m);
  CU_LAUNCHED(ctx, "scale");
}

void cu_softcap(struct hb_ctx *ctx, struct hb_tensor *x, float cap, int n) {
  const int64_t m = (int64_t)n * x->cols;
  if (m <= 0) return;
  if (x->rows < n || !(cap > 0.0f) || (x->dtype != HB_F16 && x->dtype != HB_F32)) {
    CU_ARG(ctx, "softcap: x %lldx%lld dtype %d, n %d, cap %g", (long long)x->rows, (long long)x->cols, (int)x->dtype, n,
           (double)cap);
    return;
  }
  if (x->dtype == HB_F16) softcap_kernel<__half><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>((__half *)x->data, cap, m);
  else softcap_kernel<float><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>((float *)x->data, cap, m);
  CU_LAUNCHED(ctx, "softcap");
}

/* ---- rope_prop ----------------------------------------------------------------------------------------
 * The pairs (i, i + head_dim/2), i < n_pairs, turn by pos · inv_freq[i], inv_freq[i] = 1 / theta^(2i/head_dim)
 * / factor as the CPU builds it (rope_pow: the host's correctly rounded powf). One thread per (token, head, pair);
 * positions from the batch's device copy, so a captured graph replays with the next step's positions. */
template <typename T>
__global__ void rope_prop_kernel(T *x, const int32_t *pos, int n_tokens, int n_heads, int head_dim, int n_pairs,
                                 float theta, float factor) {
  pdl_trigger();
  const int half = head_dim / 2;
  const int64_t total = (int64_t)n_tokens * n_heads * n_pairs;
  for (int64_t it = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; it < total; it += (int64_t)gridDim.x * blockDim.x) {
    const int i = (int)(it % n_pairs);
    const int64_t th = it / n_pairs; /* token * n_heads + head */
    const int t = (int)(th / n_heads);
    const float inv_freq = 1.0f / rope_pow(theta, (float)(2 * i) / (float)head_dim) / factor;
    const float ang = (float)pos[t] * inv_freq;
    float sn, cs;
    sincosf(ang, &sn, &cs);
    T *v = x + th * head_dim;
    const float a = ldf(v + i), b = ldf(v + i + half);
    stf(v + i, rope_prop_lo(a, b, cs, sn));
    stf(v + i + half, rope_prop_hi(a, b, cs, sn));
  }
}

void cu_rope_prop(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_batch *b, int n_heads, int head_dim,
                  int n_pairs, float theta, float factor) {
  if (b->n_tokens <= 0) return;
  if (n_pairs > head_dim / 2) n_pairs = head_dim / 2; /* as the CPU op clamps it */
  if (n_pairs <= 0) return;
  if (!b->d_pos.data || head_dim % 2 || x->cols != (int64_t)n_heads * head_dim || x->rows < b->n_tokens ||
      (x->dtype != HB_F16 && x->dtype != HB_F32)) {
    CU_ARG(ctx, "rope_prop: x %lldx%lld, %d heads of %d, or batch not uploaded", (long long)x->rows,
           (long long)x->cols, n_heads, head_dim);
    return;
  }
  const int64_t total = (int64_t)b->n_tokens * n_heads * n_pairs;
  const unsigned grid = cu_ew_grid(ctx, total);
  if (x->dtype == HB_F16)
    rope_prop_kernel<__half><<<grid, 256, 0, ctx->stream>>>((__half *)x->data, (const int32_t *)b->d_pos.data,
                                                            b->n_tokens, n_heads, head_dim, n_pairs, theta, factor);
  else
    rope_prop_kernel<float><<<grid, 256, 0, ctx->stream>>>((float *)x->data, (const int32_t *)b->d_pos.data,
                                                           b->n_tokens, n_heads, head_dim, n_pairs, theta, factor);
  CU_LAUNCHED(ctx, "rope_prop");
}
