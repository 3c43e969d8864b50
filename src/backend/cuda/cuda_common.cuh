/* backend/cuda/cuda_common.cuh — what every CUDA op file shares: the context struct, the
 * checked-call macros that turn a cudaError_t into a sticky hearth status (never abort), dtype
 * load/store helpers, warp reductions and the host wrappers each op file exports to cuda_backend.cu.
 *
 * Error model: ops in backend.h return void, so a failing launch or a bad shape records the first
 * error in ctx->status/ctx->msg ("sticky"); sync() reports it (and later ops become no-ops).
 */
#ifndef HEARTH_BACKEND_CUDA_COMMON_CUH
#define HEARTH_BACKEND_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
}

/* ---- the context ---------------------------------------------------------------------------- */

/* ---- the in-graph timeline of a trace build (-DHEARTH_TRACE=1: bench only, never a product build) ----
 * The decode GEMV and attention kernels of the latest captured graph stamp %globaltimer (ns) at the stages
 * listed below (the first or the last over their blocks); trace.cu resets the stamps before each replay of
 * that graph, adds them up after it and prints the mean timeline when the context is freed.
 * The default build compiles none of it: the macros below expand to nothing. */
#ifndef HEARTH_TRACE
#define HEARTH_TRACE 0
#endif
#define CU_TRACE_MAX 512
/* stamp kinds: 0 first entry, 1 first wait release (min); 2 last end, 3 last wait release, 4 last prologue
 * done (x in shared memory), 5 last first-step ready (the first ring slot landed), 6 last entry, 7 last unit's
 * last step multiplied, 8 partial tiles reduced in shared memory, 9 outputs emitted (max) */
#define CU_TRACE_KINDS 10
#define CU_TRACE_NMIN 2

struct hb_ctx {
  int device, exact, n_sm, cc_major;
  int row_invariant;      /* set_row_invariant: every row's numerics independent of the batch (one GEMM path,
                             no split-K, the prefill attention, no fused decode kernels) */
  size_t gemv_xmax;       /* gemv_q4.cu: the most bytes of x (n rows × K f16) the decode GEMV takes from 3 rows on (GEMV_XMAX) */
  int gemm_kind;          /* the prefill GEMM: HB_CUDA_GEMM_AUTO / _MMA / _WG / _WG256 (HEARTH_GEMM, hb_cuda_set_gemm) */
  int gemm_wg_ok;         /* the wgmma GEMM (sm_90a) runs on this device */
  int attn_o_max;         /* attn_o.cu: the longest sequence the fused attention + o_proj takes: -1 the default (one
                           * chunk where it measured faster: head dim 64), -2 one chunk at every head dim, 0 off */
  long ads_wide_n;        /* attention.cu: its launches past 8 rows (tests: hb_cuda_attn_wide_launches) */
  int gemv_last_full;     /* gemv_q4.cu: the latest GEMV launch put two 8-warp blocks on most SMs (attention.cu
                           * then takes its 48-register attn_decode_smem, which fits beside them) */
  int twin;               /* set_step_twins: every row of the batch (one sequence's tokens) as its one-token step */
  int twin_bad;           /* ops since set_step_twins(1) that could not compute their rows that way */
  int twin_rows;          /* the most rows of one step-twin GEMV launch (8; HEARTH_TEST_TWIN_ROWS in tests) */
  int attn_o_off;         /* attn_o.cu: not available in this binary on this device (init), whatever attn_o_max says */
  size_t smem_optin;      /* largest dynamic shared memory a block may opt in to */
  size_t smem_sm;         /* shared memory per multiprocessor, and what the system keeps per block */
  size_t smem_reserved;
  cudaStream_t stream;
  int status;             /* first error (sticky), 0 when fine */
  char msg[400];
  size_t bytes_alloc;     /* device bytes held through alloc/weight_upload */
  size_t bytes_scratch;   /* device bytes of the backend's own scratch */
  /* batch arrays (batch_upload): one buffer, b_in, holding pos, seq, out_rows, seq_len and the block table one
   * after the other (each region 128-byte aligned). The offsets depend only on the batch's counts, so a graph
   * captured for a decode shape finds its arrays at the same addresses on every replay; b_in moving (it grew)
   * bumps gen like any scratch buffer */
  int32_t *b_in;
  size_t b_in_cap;        /* int32 elements */
  /* pinned host staging of small uploads (batch_upload, write) and reads: bump-allocated, and reset only right
   * after the stream has been synchronized, so a copy's source bytes stay put until the copy has run. One copy
   * per step instead of six, and no stream sync before the step (round 14, bench/NOTES.md) */
  char *stage;
  size_t stage_cap, stage_off;
  char *pin;              /* host_pinned: the buffer kv_block_write copies from directly */
  size_t pin_cap;
  void *kv_io;            /* kv_block_write from pin: the packed bytes on the device, then the chunk table */
  size_t kv_io_cap;
  int stage_n;            /* copies staged since the last reset */
  int stage_on;           /* 0 after a pinned allocation failed: pageable copies from then on */
  /* read_start / read_finish (decoding one step ahead): two pinned slots, each with the event after its copy */
  struct { void *buf; size_t cap, bytes; cudaEvent_t ev; } rd[2];
  /* attention split-K scratch: partial (m, l, acc[hd]) per (token, head, split), and counters */
  float *attn_part;
  size_t attn_part_cap;   /* floats */
  unsigned *attn_cnt;
  size_t attn_cnt_cap;    /* counters */
  float *gemm_part;       /* split-K partial sums of the tensor-core GEMM [M × N] f32 */
  float *am_part;         /* argmax: (max, sum of exp, index) per (row, vocab chunk) */
  size_t am_part_cap;     /* floats */
  unsigned *am_cnt;       /* argmax: finished chunks per row (the last one merges and resets it) */
  size_t am_cnt_cap;
  size_t gemm_part_cap;   /* floats */
  void *tmp[2];           /* activation temporaries of the fused ops' fallback paths */
  size_t tmp_cap[2];      /* bytes */
  struct hb_sample_row *sample_rows; /* the sample op's device copies of its rows and penalty list */
  size_t sample_rows_cap;
  struct hb_sample_pen *sample_pen;
  size_t sample_pen_cap;
  float *sample_work;     /* [n × vocab] penalised rows of the sample op */
  size_t sample_work_cap; /* floats */
  void *sample_split;      /* the sample op's many-block path: row states, histograms, keys, masses (sample_split.cuh) */
  size_t sample_split_cap; /* bytes */
  int sample_one_block;    /* tests only: every launch one block a row (hb_cuda_set_sample_one_block) */
  cudaEvent_t *marks;     /* [1024] timing marks (hb_cuda_mark), created on first use */
  unsigned gen;           /* bumped whenever a scratch buffer moves: captured graphs go stale */
  int capturing;
#if HEARTH_TRACE
  unsigned long long *tr_dev;  /* [CU_TRACE_KINDS][CU_TRACE_MAX] stamps (kinds: above) */
  int tr_captures, tr_seq;     /* captures begun; ids given out in the latest one */
  int tr_steps;                /* replays of the traced graph added up */
  char tr_label[CU_TRACE_MAX][48];
  double tr_sum[CU_TRACE_KINDS][CU_TRACE_MAX];
  unsigned tr_cnt[CU_TRACE_MAX];
#endif
};

void cu_fail(struct hb_ctx *ctx, int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* a CUDA runtime call whose failure is recorded in ctx; evaluates to 1 on failure */
#define CU_OK(ctx, call) cu_ok_((ctx), (call), #call, __FILE__, __LINE__)
static inline int cu_ok_(struct hb_ctx *ctx, cudaError_t e, const char *what, const char *file, int line) {
  if (e == cudaSuccess) return 0;
  cu_fail(ctx, e == cudaErrorMemoryAllocation ? HEARTH_ERR_NOMEM : HEARTH_ERR_BACKEND, file, line, "%s: %s",
          what, cudaGetErrorString(e));
  return 1;
}
/* after every launch */
#define CU_LAUNCHED(ctx, name) cu_ok_((ctx), cudaGetLastError(), name, __FILE__, __LINE__)
/* shape/argument errors inside an op */
#define CU_ARG(ctx, ...) cu_fail((ctx), HEARTH_ERR_ARG, __FILE__, __LINE__, __VA_ARGS__)

/* the grid of a kernel over m elements, 256 threads a block, one element a thread a step: a block per 256 elements, up
 * to 8 a multiprocessor (at least one) */
static inline unsigned cu_ew_grid(const struct hb_ctx *ctx, int64_t m) {
  const int64_t b = (m + 255) / 256, cap = (int64_t)ctx->n_sm * 8;
  return (unsigned)(b < cap ? (b > 0 ? b : 1) : cap);
}

/* grows a scratch buffer (never shrinks); bumps ctx->gen when it moves; returns 0 or 1 (failed) */
int cu_scratch(struct hb_ctx *ctx, void **buf, size_t *cap, size_t need, size_t elem, int zero);
/* n bytes of the pinned host stage for an asynchronous upload (valid until the stream is next synchronized by the
 * backend), or NULL (too large, capturing, no pinned memory): copy from pageable memory then */
void *cu_stage(struct hb_ctx *ctx, size_t n);

/* ---- dtype helpers -------------------------------------------------------------------------- */

__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(__half *p, float v) { *p = __float2half_rn(v); }

/* v rounded to the storage type T and back, as a store by one plain kernel and a load by the next would do (the
 * fused kernels' way of keeping the plain sequence's roundings: gemma4_fused.cu, attention.cu's rope_kv_norm) */
template <typename T>
__device__ __forceinline__ float rnd(float v) {
  T t;
  stf(&t, v);
  return ldf(&t);
}

/* a small tensor (norm weights, biases) whose dtype is known only at run time */
__device__ __forceinline__ float ld_any(const void *p, int dt, int64_t i) {
  if (dt == HB_F32) return ((const float *)p)[i];
  if (dt == HB_F16) return __half2float(((const __half *)p)[i]);
  return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

/* programmatic dependent launch: let the next kernel (if launched with programmatic stream
 * serialization: the GEMVs) start its prologue now; it still waits for this grid's completion before
 * touching anything this grid writes */
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* raises a kernel's dynamic shared memory limit to what the device allows beside its static part */
template <typename KERN>
static inline int smem_attr(struct hb_ctx *ctx, KERN kern) {
  cudaFuncAttributes fa;
  if (CU_OK(ctx, cudaFuncGetAttributes(&fa, kern))) return 1;
  return CU_OK(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)(ctx->smem_optin - fa.sharedSizeBytes)));
}

/* launches kern with programmatic stream serialization (it must pdl_wait() before it reads what
 * the kernel before it writes); a failure is recorded in ctx under name */
template <typename... P, typename... A>
static inline void cu_launch_pdl(struct hb_ctx *ctx, const char *name, void (*kern)(P...), dim3 grid, dim3 block,
                                 size_t smem, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = ctx->stream;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  cu_ok_(ctx, cudaLaunchKernelEx(&cfg, kern, ((P)args)...), name, __FILE__, __LINE__);
}

#if HEARTH_TRACE
__device__ __forceinline__ void cu_trace(unsigned long long *tr, int id, int k) {
  if (id < 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (k >= CU_TRACE_NMIN) atomicMax(tr + k * CU_TRACE_MAX + id, t);
  else atomicMin(tr + k * CU_TRACE_MAX + id, t);
}
/* kernel parameters, launch arguments and stamps (k: a stamp kind, above) */
#define CU_TRACE_PARAMS , unsigned long long *cu_tr, int cu_tr_id
#define CU_TRACE_ARGS(ctx, id) , (ctx)->tr_dev, (id)
#define CU_TRACE(k) cu_trace(cu_tr, cu_tr_id, (k))
#else
#define CU_TRACE_PARAMS
#define CU_TRACE_ARGS(ctx, id)
#define CU_TRACE(k) ((void)0)
#endif
/* trace.cu: the next kernel's id while the traced graph is captured, else -1 (always -1 in a default build) */
int cu_trace_id(struct hb_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cu_trace_capture_begin(struct hb_ctx *ctx);
int cu_trace_graph_traced(struct hb_ctx *ctx); /* at capture end: the capture's number if traced, else 0 */
int cu_trace_captures(struct hb_ctx *ctx);      /* captures begun so far */
void cu_trace_replay_begin(struct hb_ctx *ctx);
void cu_trace_replay_end(struct hb_ctx *ctx);
void cu_trace_print(struct hb_ctx *ctx);

/* the gate activations of a gated MLP (backend.h HB_ACT_*): gelu_tanh is transformers' gelu_pytorch_tanh in f32, the
 * formula of the CPU's scalar op (cpu/cpu_ops_gemma4.c); silu(x) = x / (1 + e^-x) */
__device__ __forceinline__ float gelu_tanh_f(float x) {
  const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float glu_act(float x, int act) {
  return act == HB_ACT_GELU_TANH ? gelu_tanh_f(x) : x / (1.0f + expf(-x));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Gemma 4's rotation of a pair (a, b) by an angle with cosine cs and sine sn, each rounding spelled out: written as
 * a·cs − b·sn it leaves NVVM as two products and a difference, and ptxas chooses per kernel whether to fuse one of the
 * products into an FFMA, so rope_prop_kernel and g4_qkv_post (which must agree bit for bit) could round it apart
 * (bench/NOTES.md, session 31: 1 value in 8,192). The second is NVVM's own form. */
__device__ __forceinline__ float rope_prop_lo(float a, float b, float cs, float sn) {
  return __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
}
__device__ __forceinline__ float rope_prop_hi(float a, float b, float cs, float sn) {
  return __fmaf_rn(b, cs, __fmul_rn(a, sn));
}
/* powf(b, e) rounded as the host's correctly rounded powf: computed in double, then rounded, so
 * rotary frequencies match the CPU reference bit for bit (CUDA's powf is within 2 ulp) */
__device__ __forceinline__ float rope_pow(float b, float e) { return (float)pow((double)b, (double)e); }
/* the host's table of inverse rope frequencies 1 / theta^(2i/hd), i < hd/2, by rope_pow's formula (pow in double,
 * rounded to float), so the decode kernels have no double pow. glibc's and the device's double pow are each within
 * 2 ulp of the exact value, so the floats agree with rope_kv_kernel's except where the exact value lies that close to
 * a float rounding boundary */
static inline void cu_rope_rinv(float *rinv, int hd, float theta) {
  for (int i = 0; i < hd / 2; i++) rinv[i] = 1.0f / (float)pow((double)theta, (double)((float)(2 * i) / (float)hd));
}

/* ---- the int4 device layout (see matmul_q4.cu for the picture) ------------------------------
 * Blocks of 8 rows, group-major: group g (128 columns) of the rows 8b..8b+7 is 512 contiguous bytes,
 * row r % 8 at 64 (r % 8), and block b's G groups follow each other (so a block is 8 rows x K/2 bytes,
 * contiguous). Within a row's 64 bytes of a group, each run of 32 weights (16 bytes) is permuted so that
 * 32-bit word t (t = 0..3) holds weights {2t, 2t+1, 2t+8, 2t+9, 2t+16, 2t+17, 2t+24, 2t+25} at nibbles
 * {0, 4, 1, 5, 2, 6, 3, 7}; each nibble is q + 8. Element i of a 32-run sits in word (i/2)%4 at nibble
 * i/8 + 4*(i%2). aux: the fp16 scales in the same order, [rows/8][G][8] (16 bytes per block and group).
 * Rows are padded to a multiple of 8 with zero weights and scales; both buffers carry one more group of
 * blocks' worth of zeros at the end (Q4_TAIL), so a copy of a step past the last group stays inside.
 * Why: one GEMV step (two groups of a 16-row tile) reads two runs of 1 KB instead of 16 pieces of 64 bytes
 * 1 KB apart (bench/probe_read.cu: 4.2 TB/s against 3.4-3.6), and its copies need one running pointer per
 * 8-row block instead of one per row. */
#define Q4_TAIL 1024
__host__ __device__ __forceinline__ int64_t q4_off(int64_t r, int64_t g, int64_t G) {
  return ((r >> 3) * G + g) * 512 + (r & 7) * 64;
}
__host__ __device__ __forceinline__ int64_t q4_soff(int64_t r, int64_t g, int64_t G) {
  return ((r >> 3) * G + g) * 8 + (r & 7);
}
__device__ __forceinline__ int q4_elem(const uint8_t *q, int64_t G, int64_t r, int64_t i) {
  const uint32_t *w = (const uint32_t *)(q + q4_off(r, i / 128, G) + ((i % 128) / 32) * 16);
  int e = (int)(i % 32);
  uint32_t word = w[(e / 2) % 4];
  int nib = e / 8 + 4 * (e % 2);
  return (int)((word >> (4 * nib)) & 15u) - 8;
}
__device__ __forceinline__ float q4_scale(const __half *s, int64_t G, int64_t r, int64_t i) {
  return __half2float(s[q4_soff(r, i / 128, G)]);
}

/* ---- host wrappers (one per op family file) ------------------------------------------------- */

/* matmul_q4.cu */
/* the device buffers of an int4 weight: rows padded to 8, plus the tail (see q4_off) */
static inline size_t q4_bytes(int64_t rows, int64_t cols) { return (size_t)((rows + 7) / 8 * 8) * (size_t)cols / 2 + Q4_TAIL; }
static inline size_t q4_scale_bytes(int64_t rows, int64_t cols) {
  return (size_t)((rows + 7) / 8 * 8) * (size_t)(cols / 128) * 2 + Q4_TAIL / 32;
}
void cu_q4_repack(struct hb_ctx *ctx, uint8_t *dst, __half *dsts, const uint8_t *src, const __half *srcs, int64_t rows,
                  int64_t cols);
void cu_matmul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
               const struct hb_tensor *w, const struct hb_tensor *bias, int n);
int cu_matmul_init(struct hb_ctx *ctx);
/* the tensor-core GEMM (n > 8 rows, f16 x): outs[i] (+= when add) x · ws[i]ᵀ + biases[i] for n_mm = 1..3
 * int4 weights of equal cols in one launch (plus a split-K finish); returns 0 when it launched or
 * recorded an error, 1 when the shapes need another path (then it did nothing) */
int cu_gemm_q4(struct hb_ctx *ctx, const struct hb_tensor *x, int n_mm, struct hb_tensor *const *outs,
               const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add);
/* out = silu(x · w_gateᵀ) * (x · w_upᵀ) (f16), the bits of the gate/up GEMM + silu_mul: in one launch where that GEMM
 * would run on the wgmma kernel without split-K, or as the split GEMM and one finish that sums the slices and
 * applies silu_mul where it would split K; 0 launched, 1 not covered (nothing done). _covers: the same question,
 * nothing launched (1 = covered) */
int cu_gemm_q4_swiglu(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *w_gate,
                      const struct hb_tensor *w_up, struct hb_tensor *out, int n);
int cu_gemm_q4_swiglu_covers(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *w_gate,
                             const struct hb_tensor *w_up, const struct hb_tensor *out, int n);
/* attention.cu: the QKV GEMM (rows 0..2: q, k, v of n_heads / n_kv heads of the cache's head dim, optional biases)
 * over xn, where it splits K, with rope (all dims) and the cache write in its split-K finish: q rotated into q, k and
 * v into the cache; the bits of norm_matmul + rope_kv_write. 0 launched (dry: would launch), 1 not covered (nothing
 * done) */
int cu_qkv_rope_split(struct hb_ctx *ctx, const struct hb_tensor *xn, const struct hb_tensor *const *ws,
                      const struct hb_tensor *const *biases, struct hb_tensor *q, struct hb_kv_layer *kv,
                      const struct hb_batch *b, int n_heads, float theta, int n, int dry);
/* gemv_q4.cu: the decode GEMV (n <= 8 rows) with its fused prologues; returns 0 when it launched,
 * 1 when the shapes need the general path */
int cu_gemv_init(struct hb_ctx *ctx);
#define PRO_PLAIN 0 /* x */
#define PRO_NORM 1  /* rmsnorm(x) * (nw + off) */
#define PRO_SILU 2  /* silu(x) * x2 */
#define PRO_GELU 3  /* gelu_tanh(x) * x2, x2 with its own row stride (gelu_mul's formula) */
#define PRO_ANORM 4 /* x' = norm_add(x, y), then PRO_NORM's rmsnorm(x') (gemv_add_pass) */
#define PRO_APLAIN 5 /* x' = norm_add(x, y), then x' itself */
int cu_gemv_fused(struct hb_ctx *ctx, int pro, const struct hb_tensor *x, const struct hb_tensor *x2,
                  const struct hb_tensor *nw, float eps, float off, int n_mm, struct hb_tensor *const *outs,
                  const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add);
int cu_gemv_gelu_matmul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate,
                        const struct hb_tensor *up, int up_col0, const struct hb_tensor *w, int n);
int cu_gemv_add_norm_matmul(struct hb_ctx *ctx, struct hb_tensor *xo, const struct hb_tensor *x,
                            const struct hb_tensor *y, const struct hb_tensor *aw, float s, const struct hb_tensor *nw,
                            float eps, int n_mm, struct hb_tensor *const *outs, const struct hb_tensor *const *ws,
                            int act, int n);
int cu_gemv_norm_swiglu(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *nw, float eps,
                        const struct hb_tensor *w_gate, const struct hb_tensor *w_up, struct hb_tensor *out, int n,
                        int act);
/* gemma4_fused.cu */
int cu_g4_qkv_post(struct hb_ctx *ctx, struct hb_tensor *q, const struct hb_tensor *k, const struct hb_tensor *v,
                   const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps, struct hb_kv_layer *kv,
                   const struct hb_batch *b, int n_heads, int n_kv, int hd, int n_pairs, float theta, float factor);
void cu_norm_add(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *y, const struct hb_tensor *w,
                 float eps, float s, int n);
int cu_gemv_qkv_rope_kv(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *nw, float eps,
                        const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, struct hb_tensor *q,
                        struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads, float theta, int n);
/* elementwise.cu */
void cu_embed(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *table,
              const struct hb_tensor *ids, int n, float scale);
void cu_silu_mul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate,
                 const struct hb_tensor *up, int n);
void cu_add(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *y, int n);
void cu_gather_rows(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
                    const struct hb_batch *b);
/* norm_rope.cu */
void cu_rmsnorm(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
                const struct hb_tensor *w, float eps, float w_offset);
void cu_rope_neox(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_batch *b, int n_heads,
                  int head_dim, int n_rot, float theta);
/* attention.cu */
void cu_kv_write(struct hb_ctx *ctx, struct hb_kv_layer *kv, const struct hb_tensor *k,
                 const struct hb_tensor *v, const struct hb_batch *b);
/* rope_kv_write (backend.h), with Qwen3's per-head q/k norms folded in when q_norm and k_norm are given; 1 = those
 * norms not covered (nothing done) */
int cu_rope_kv_write(struct hb_ctx *ctx, struct hb_tensor *q, struct hb_tensor *k, const struct hb_tensor *v,
                     struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads, int n_rot, float theta,
                     const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps);
int cu_g4_post_attention(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q, const struct hb_tensor *k,
                         const struct hb_tensor *v, const struct hb_tensor *q_norm, const struct hb_tensor *k_norm,
                         float eps, struct hb_kv_layer *kv_w, const struct hb_kv_layer *kv, const struct hb_batch *b,
                         const struct hb_attn_params *p, int n_pairs, float theta, float factor);
void cu_attention(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                  const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p);
/* attn_wide.cu: attention at the head dims the kernels above are not built for (multiples of 32 up to 1024) */
void cu_attention_wide(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                       const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p);
int cu_attention_wide_covers(int head_dim);
/* gemma4_ops.cu: the Gemma 4 ops of backend.h */
void cu_gelu_mul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate, const struct hb_tensor *up,
                 int up_col0, int n);
void cu_scale(struct hb_ctx *ctx, struct hb_tensor *x, float s, int n);
void cu_softcap(struct hb_ctx *ctx, struct hb_tensor *x, float cap, int n);
void cu_rope_prop(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_batch *b, int n_heads, int head_dim,
                  int n_pairs, float theta, float factor);
/* attn_o.cu: the one-token decode step's attention and o_proj in one launch (x += attention · Woᵀ); returns 0 when
 * it launched (or recorded an error), 1 when the shapes or the sequence length need attention + the GEMV */
int cu_attn_o(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *q, const struct hb_kv_layer *kv,
              const struct hb_batch *b, const struct hb_attn_params *p, const struct hb_tensor *wo);
int cu_attn_o_max_len(struct hb_ctx *ctx, int head_dim);
int cu_attn_o_chunk(int head_dim); /* keys per chunk (0: a head dim attn_o does not cover) */
void cu_attn_o_init(struct hb_ctx *ctx);
int cu_attn_batch_short_len(struct hb_ctx *ctx, int n_tokens);
long cu_attn_wide_launches(const struct hb_ctx *ctx);
/* sample.cu */
void cu_argmax(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, struct hb_tensor *ids,
               struct hb_tensor *logprobs);
void cu_sample(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, const struct hb_sample_row *rows,
               const struct hb_sample_pen *pen, int n_pen, struct hb_tensor *ids);
void cu_row_score(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, const struct hb_tensor *req,
                  struct hb_tensor *out);

#endif
