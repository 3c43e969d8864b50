/* backend/cuda/elementwise.cu — embedding lookup (int4/bf16/f16/f32 tables), SiLU gating, residual
 * add, row gather. Each kernel is templated on the activation type (float or __half) only.
 * These are memory-trivial; their cost in a decode step is the launch, which is why the fused
 * variants listed in bench/NOTES.md matter more than anything here. */
#include "backend/cuda/cuda_common.cuh"

/* ---- embed ------------------------------------------------------------------------------------ */

template <typename TO>
__global__ void embed_q4_kernel(TO *out, const uint8_t *q, const __half *sc, const int32_t *ids, int n,
                                int64_t d, float scale, int64_t rows) {
  pdl_trigger();
  int t = blockIdx.y;
  int64_t r = ids[t];
  if (r < 0 || r >= rows) r = 0; /* an id fed on the device (decoding ahead) never reads past the table */
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < d; i += (int64_t)gridDim.x * blockDim.x) {
    float v = (float)q4_elem(q, d / 128, r, i) * q4_scale(sc, d / 128, r, i);
    stf(out + (int64_t)t * d + i, v * scale);
  }
}

template <typename TO, typename TT>
__global__ void embed_dense_kernel(TO *out, const TT *tab, const int32_t *ids, int64_t d, float scale, int64_t rows) {
  pdl_trigger();
  int t = blockIdx.y;
  int64_t r = ids[t];
  if (r < 0 || r >= rows) r = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < d; i += (int64_t)gridDim.x * blockDim.x)
    stf(out + (int64_t)t * d + i, ldf(tab + r * d + i) * scale);
}

template <typename TO>
static void embed_t(struct hb_ctx *ctx, TO *out, const struct hb_tensor *table, const int32_t *ids, int n,
                    float scale) {
  int64_t d = table->cols;
  dim3 grid((unsigned)((d + 255) / 256 < 8 ? (d + 255) / 256 : 8), (unsigned)n);
  switch (table->dtype) {
  case HB_Q4:
    embed_q4_kernel<TO><<<grid, 256, 0, ctx->stream>>>(out, (const uint8_t *)table->data,
                                                        (const __half *)table->aux, ids, n, d, scale, table->rows);
    break;
  case HB_BF16:
    embed_dense_kernel<TO, __nv_bfloat16><<<grid, 256, 0, ctx->stream>>>(out, (const __nv_bfloat16 *)table->data,
                                                                         ids, d, scale, table->rows);
    break;
  case HB_F16:
    embed_dense_kernel<TO, __half><<<grid, 256, 0, ctx->stream>>>(out, (const __half *)table->data, ids, d, scale, table->rows);
    break;
  case HB_F32:
    embed_dense_kernel<TO, float><<<grid, 256, 0, ctx->stream>>>(out, (const float *)table->data, ids, d, scale, table->rows);
    break;
  default:
    CU_ARG(ctx, "embed: table dtype %d", (int)table->dtype);
    return;
  }
  CU_LAUNCHED(ctx, "embed");
}

void cu_embed(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *table,
              const struct hb_tensor *ids, int n, float scale) {
  if (n <= 0) return;
  if (ids->dtype != HB_I32 || out->cols != table->cols || out->rows < n) {
    CU_ARG(ctx, "embed: shapes (out %lldx%lld, table cols %lld, n %d)", (long long)out->rows,
           (long long)out->cols, (long long)table->cols, n);
    return;
  }
  if (out->dtype == HB_F16) embed_t(ctx, (__half *)out->data, table, (const int32_t *)ids->data, n, scale);
  else if (out->dtype == HB_F32) embed_t(ctx, (float *)out->data, table, (const int32_t *)ids->data, n, scale);
  else CU_ARG(ctx, "embed: out dtype %d", (int)out->dtype);
}

/* ---- silu_mul, add ------------------------------------------------------------------------------ */

template <typename T>
__global__ void silu_mul_kernel(T *out, const T *g, const T *u, int64_t m) {
  pdl_trigger();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m; i += (int64_t)gridDim.x * blockDim.x) {
    float gv = ldf(g + i);
    stf(out + i, gv / (1.0f + expf(-gv)) * ldf(u + i));
  }
}

/* the same on f16 rows, eight elements (16 bytes) a load: the scalar kernel moves 2 bytes a load per thread and
 * streamed ~1.6 TB/s on the embedding model's 7,870 x 3,072 prefill (bench/NOTES.md, session 29); each element is
 * computed by the scalar kernel's expression, so the results are the same bits. m8 = m / 8 */
__global__ void silu_mul_h8_kernel(__half *out, const __half *g, const __half *u, int64_t m8) {
  pdl_trigger();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m8; i += (int64_t)gridDim.x * blockDim.x) {
    const uint4 gv = ((const uint4 *)g)[i], uv = ((const uint4 *)u)[i];
    const __half *gh = (const __half *)&gv, *uh = (const __half *)&uv;
    uint4 ov;
    __half *oh = (__half *)&ov;
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const float x = __half2float(gh[e]);
      oh[e] = __float2half_rn(x / (1.0f + expf(-x)) * __half2float(uh[e]));
    }
    ((uint4 *)out)[i] = ov;
  }
}

template <typename T>
__global__ void add_kernel(T *x, const T *y, int64_t m) {
  pdl_trigger();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m; i += (int64_t)gridDim.x * blockDim.x)
    stf(x + i, ldf(x + i) + ldf(y + i));
}

void cu_silu_mul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate,
                 const struct hb_tensor *up, int n) {
  int64_t m = (int64_t)n * gate->cols;
  if (m <= 0) return;
  if (gate->dtype != up->dtype || gate->dtype != out->dtype || up->cols != gate->cols) {
    CU_ARG(ctx, "silu_mul: dtype/shape mismatch");
    return;
  }
  const int aligned = ((uintptr_t)out->data | (uintptr_t)gate->data | (uintptr_t)up->data) % 16 == 0;
  if (out->dtype == HB_F16 && m % 8 == 0 && aligned)
    silu_mul_h8_kernel<<<cu_ew_grid(ctx, m / 8), 256, 0, ctx->stream>>>((__half *)out->data, (const __half *)gate->data,
                                                                    (const __half *)up->data, m / 8);
  else if (out->dtype == HB_F16)
    silu_mul_kernel<__half><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>((__half *)out->data, (const __half *)gate->data,
                                                                      (const __half *)up->data, m);
  else
    silu_mul_kernel<float><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>((float *)out->data, (const float *)gate->data,
                                                                     (const float *)up->data, m);
  CU_LAUNCHED(ctx, "silu_mul");
}

void cu_add(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *y, int n) {
  int64_t m = (int64_t)n * x->cols;
  if (m <= 0) return;
  if (x->dtype != y->dtype || x->cols != y->cols) {
    CU_ARG(ctx, "add: dtype/shape mismatch");
    return;
  }
  if (x->dtype == HB_F16)
    add_kernel<__half><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>((__half *)x->data, (const __half *)y->data, m);
  else
    add_kernel<float><<<cu_ew_grid(ctx, m), 256, 0, ctx->stream>>>((float *)x->data, (const float *)y->data, m);
  CU_LAUNCHED(ctx, "add");
}

/* ---- gather_rows -------------------------------------------------------------------------------- */

template <typename T>
__global__ void gather_kernel(T *out, const T *x, const int32_t *rows, int64_t cols) {
  pdl_trigger();
  int i = blockIdx.y;
  int64_t r = rows[i];
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols; j += (int64_t)gridDim.x * blockDim.x)
    out[(int64_t)i * cols + j] = x[r * cols + j];
}

void cu_gather_rows(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
                    const struct hb_batch *b) {
  if (b->n_out <= 0) return;
  if (out->dtype != x->dtype || out->cols != x->cols || !b->d_out_rows.data) {
    CU_ARG(ctx, "gather_rows: dtype/shape mismatch or batch not uploaded");
    return;
  }
  dim3 grid((unsigned)((x->cols + 255) / 256 < 8 ? (x->cols + 255) / 256 : 8), (unsigned)b->n_out);
  if (x->dtype == HB_F16)
    gather_kernel<__half><<<grid, 256, 0, ctx->stream>>>((__half *)out->data, (const __half *)x->data,
                                                        (const int32_t *)b->d_out_rows.data, x->cols);
  else
    gather_kernel<float><<<grid, 256, 0, ctx->stream>>>((float *)out->data, (const float *)x->data,
                                                       (const int32_t *)b->d_out_rows.data, x->cols);
  CU_LAUNCHED(ctx, "gather_rows");
}
