/* backend/cuda/gemm_q4.cuh — what the two int4 prefill GEMM kernels share: the launch arguments (up to three
 * weights sharing x, bias, add-into-output, split-K slices), the weight lookup of a concatenated column, the
 * nibble-pair dequantization, and the entry points of the wgmma kernel (sm90a/gemm_wgmma.cu) that
 * matmul_q4.cu's dispatch calls. */
#ifndef HEARTH_BACKEND_CUDA_GEMM_Q4_CUH
#define HEARTH_BACKEND_CUDA_GEMM_Q4_CUH

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ptx.cuh"

/* One launch for up to three int4 weights of equal K that share the activations x (norm+QKV,
 * norm+gate/up): their output columns are concatenated, weight i owning columns [col0[i], col0[i+1])
 * (col0[i] = n_total for i >= n_mm). Every weight but the last has rows % 128 == 0, so a block's
 * 128-column tile lies inside one weight; each weight keeps its own output tensor, bias and ldo.
 * add: out += x·Wᵀ + b (read-modify-write of each output element by the one thread that owns it; in
 * the split-K finish likewise) — the residual add of o_proj / down_proj without a temp. out must not
 * alias x. */
struct gemm_args {
  const __half *x;
  int64_t ldx;
  int M, K, n_mm, n_total, kt_per, add;
  int col0[4];
  const uint8_t *wq[3];
  const __half *ws[3];
  const float *bias[3];
  void *out[3];
  int64_t ldo[3];
  float *part; /* split-K: f32 partial sums, one slice [M][n_total] per split; NULL: no split */
  int n_split;  /* split-K: the slices gemm_finish adds, in order (a fixed order: the sum is the same on every run) */
};

/* which weight owns concatenated column c */
__device__ __forceinline__ int gemm_weight(const gemm_args &a, int c) {
  return c >= a.col0[1] ? (c >= a.col0[2] ? 2 : 1) : 0;
}

/* nibble pair (bits 0-3, 16-19 of v) -> f16 pair (q * scale) */
__device__ __forceinline__ uint32_t deq2(uint32_t v, __half2 s2) {
  uint32_t q = q4_pair(v);
  __half2 x = __hmul2(*(__half2 *)&q, s2);
  return *(uint32_t *)&x;
}

/* a planned tensor-core GEMM launch (matmul_q4.cu): its arguments (a.part set by the run), kernel (wgs warpgroups of
 * the wgmma kernel, or 0: the mma.sync kernel of MI 32-row groups), token tile, splits of K, grid */
struct gemm_plan {
  gemm_args a;
  int wgs, NT, MI, S;
  enum hb_dtype odt;
  size_t sm;
  dim3 grid;
};
/* cu_gemm_q4_plan: plans cu_gemm_q4's GEMM, launching and allocating nothing; 1 when the shapes need another path.
 * cu_gemm_q4_run: runs a plan: the GEMM, writing its split-K slices (S > 1) to the context's scratch (pl->a.part),
 * then gemm_finish (finish 1) or nothing (finish 0: the caller's kernel reads the slices); 1 on an error (recorded) */
int cu_gemm_q4_plan(struct hb_ctx *ctx, const struct hb_tensor *x, int n_mm, struct hb_tensor *const *outs,
                    const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add,
                    struct gemm_plan *pl);
int cu_gemm_q4_run(struct hb_ctx *ctx, struct gemm_plan *pl, int finish);

/* ---- sm90a/gemm_wgmma.cu: the wgmma kernel (Hopper, sm_90a) ----
 * 64 wgs weight rows (wgs = 2 or 4 warpgroups) x nt tokens (32 with wgs 2, 64 or 128) x 64 k per block, 128 wgs threads,
 * grid (ceil(n_total / (64 wgs)), ceil(M / nt), splits); every weight but the last has rows % (64 wgs) == 0.
 * cu_gemm_wg_init: sets the shared-memory limits; returns 1 when the sm_90a code runs on this device, 0 when not
 * (another GPU, or a build without it), and then the dispatch never calls the launcher. */
int cu_gemm_wg_init(struct hb_ctx *ctx);
size_t cu_gemm_wg_smem(int64_t K, int nt, int wgs);
void cu_gemm_wg_launch(struct hb_ctx *ctx, const gemm_args &a, int nt, int wgs, int out_f32, dim3 grid, size_t smem);
/* blocks of that launch an SM holds at once (1 when the runtime cannot say) */
int cu_gemm_wg_resident(int nt, int wgs, int out_f32, size_t smem);
/* the SwiGLU form (gemm_wg_kernel's SWI): weights 0 (gate) and 1 (up) of equal rows N, out[m][r] = silu(g) * u, f16;
 * token tile 128, grid (ceil(N / 64), ceil(M / 128)), no split-K, no bias, no add; smem cu_gemm_wg_smem(K, 128, 2) */
void cu_gemm_wg_launch_swiglu(struct hb_ctx *ctx, const gemm_args &a, dim3 grid, size_t smem);

#endif
