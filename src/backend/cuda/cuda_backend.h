/* backend/cuda/cuda_backend.h — CUDA-only entry points beside the op table (C linkage).
 *
 * The op table (hb_cuda_ops) is all the model code needs. These extras are for the runtime:
 *   - decode-step graphs: capture the ops of one forward pass once, replay it every step;
 *   - token selection on the device, so only ids (and requested logprobs) cross the bus;
 *   - the memory plan print-out.
 * Activations: with hb_config.exact = 0 an alloc(HB_F32) tensor is held as f16 on the device and
 * its dtype field reads HB_F16 (write/read still take f32 host data); exact = 1 keeps f32.
 */
#ifndef HEARTH_BACKEND_CUDA_BACKEND_H
#define HEARTH_BACKEND_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const struct hb_ops hb_cuda_ops;

/* ---- graphs ------------------------------------------------------------------------------------
 * Usage per decode shape (same n_tokens, n_seqs, max_blocks, block_size, n_out):
 *   batch_upload(b); capture_begin(); <the forward's ops>; capture_end(&g);  then each later step:
 *   batch_upload(b); graph_launch(g);  (read/argmax after it as usual)
 * Rules: run a shape once uncaptured before capturing it (scratch buffers size themselves then);
 * no write/read/batch_upload/sync between begin and end; graph_launch returns HEARTH_ERR_ARG
 * ("stale") when a scratch or batch buffer moved since capture: free it and capture again.
 * Kernels read positions, sequence ids and block tables from the device copies batch_upload made (or that a
 * greedy graph's last node, decode_advance, moved one step on), and size their grids from shapes only, so one
 * graph serves every step of that shape. */
struct hb_cuda_graph;
int hb_cuda_capture_begin(struct hb_ctx *ctx, struct hearth_err *err);
int hb_cuda_capture_end(struct hb_ctx *ctx, struct hb_cuda_graph **out, struct hearth_err *err);
int hb_cuda_graph_launch(struct hb_ctx *ctx, struct hb_cuda_graph *g, struct hearth_err *err);
void hb_cuda_graph_free(struct hb_cuda_graph *g);

/* ---- token selection --------------------------------------------------------------------------
 * ids[i] (I32 device tensor, >= n rows × 1) = argmax of logits row i (first index on ties);
 * logprobs (F32 [n × 1] or NULL) = log_softmax of that row at the chosen id. Enqueued; read()
 * the small tensors afterwards. A row holding a NaN or an infinity gets ids[i] = 0 (still a valid
 * id: a greedy graph feeds it to the next step on the device) and logprobs[i] = NaN, which is how
 * it is reported (a finite row's logprob is never NaN): pass logprobs to learn of it. */
void hb_cuda_argmax(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, struct hb_tensor *ids,
                    struct hb_tensor *logprobs);

/* ---- fused decode ops ----------------------------------------------------------------------------
 * Each equals a short sequence of table ops (the comment gives it) and is one launch on the fast
 * path for n <= 8 int4 rows. For n > 8 int4 rows of f16 activations it is the rmsnorm (silu_mul)
 * kernel, then one tensor-core GEMM over all n_mm weights with the add in its epilogue (every weight
 * but the last needs rows % 128 == 0; else one GEMM per weight). Other cases (exact, dense weights)
 * run the sequence.
 * norm_matmul: xn = rmsnorm(x, norm_w, eps, w_offset) (skipped when norm_w is NULL); then for
 *   i < n_mm (1..3 weights of equal cols): outs[i] = xn · ws[i]ᵀ + biases[i] (biases or entries
 *   may be NULL); add != 0 (n_mm == 1 only): outs[0] += instead of =. x is not modified.
 *   Decode use: norm+QKV in one launch; norm+gate+up in one; o_proj+residual (norm_w NULL, add).
 * silu_matmul: out (+)= (silu(gate) * up) · wᵀ — SwiGLU + down_proj (+ residual).
 * rope_kv_write: rope_neox(q, n_heads), rope_neox(k, kv->n_kv_heads), kv_write(kv, k, v); k itself
 *   is left un-rotated (only its cache copy is); with q_norm and k_norm, Qwen3's rmsnorm(q, q_norm) and
 *   rmsnorm(k, k_norm) first (k itself then left un-normed too). */
void hb_cuda_norm_matmul(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *norm_w, float eps,
                         float w_offset, int n_mm, struct hb_tensor *const *outs, const struct hb_tensor *const *ws,
                         const struct hb_tensor *const *biases, int n, int add);
void hb_cuda_silu_matmul(struct hb_ctx *ctx, const struct hb_tensor *gate, const struct hb_tensor *up,
                         struct hb_tensor *out, const struct hb_tensor *w, int n, int add);
/* norm_qkv_rope_kv (backend.h): one launch for n <= 8 int4 rows with an f16 cache; 1 = not covered */
int hb_cuda_norm_qkv_rope_kv(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *norm_w, float eps,
                             const struct hb_tensor *const *ws, const struct hb_tensor *const *biases,
                             struct hb_tensor *q, struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads,
                             float theta, int n);
/* g4_qkv_post, norm_add (backend.h): Gemma 4's decode fusions (gemma4_fused.cu) */
int hb_cuda_g4_qkv_post(struct hb_ctx *ctx, struct hb_tensor *q, const struct hb_tensor *k, const struct hb_tensor *v,
                        const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps,
                        struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads, int n_kv_heads, int head_dim,
                        int n_pairs, float theta, float factor);
/* g4_post_attention (backend.h): g4_qkv_post folded into the decode attention (attention.cu) */
int hb_cuda_g4_post_attention(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                              const struct hb_tensor *k, const struct hb_tensor *v, const struct hb_tensor *q_norm,
                              const struct hb_tensor *k_norm, float eps, struct hb_kv_layer *kv_w,
                              const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p,
                              int n_pairs, float theta, float factor);
void hb_cuda_norm_add(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *y, const struct hb_tensor *w,
                      float eps, float s, int n);
/* add_norm_matmul (backend.h): one launch for n <= 8 f16 rows and int4 weights (gemv_q4.cu, PRO_ANORM / PRO_APLAIN);
 * 1 = not covered */
int hb_cuda_add_norm_matmul(struct hb_ctx *ctx, struct hb_tensor *xo, const struct hb_tensor *x,
                            const struct hb_tensor *y, const struct hb_tensor *aw, float s, const struct hb_tensor *norm_w,
                            float eps, int n_mm, struct hb_tensor *const *outs, const struct hb_tensor *const *ws,
                            int act, int n);
/* gelu_matmul (backend.h): one launch for n <= 8 f16 rows and an int4 weight (gemv_q4.cu, PRO_GELU); 1 = not covered */
int hb_cuda_gelu_matmul(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate,
                        const struct hb_tensor *up, int up_col0, const struct hb_tensor *w, int n);
/* norm_swiglu (backend.h): one launch for n <= 8 int4 rows (gate/up rows a multiple of 16); 1 = not covered */
int hb_cuda_norm_swiglu(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *norm_w, float eps,
                        const struct hb_tensor *w_gate, const struct hb_tensor *w_up, struct hb_tensor *out, int n,
                        int act);
/* rope_kv_write (backend.h); with q_norm and k_norm one launch for head dims 64, 128 and 256 with n_rot = head_dim
 * (attention.cu, rope_kv_norm_kernel); 1 = those norms not covered */
int hb_cuda_rope_kv_write(struct hb_ctx *ctx, struct hb_tensor *q, struct hb_tensor *k, const struct hb_tensor *v,
                          struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads, int n_rot, float theta,
                          const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps);
/* attn_o (backend.h): one launch for a one-token step (f16, int4 wo, sm_90); 1 = not covered */
int hb_cuda_attn_o(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *q, const struct hb_kv_layer *kv,
                   const struct hb_batch *b, const struct hb_attn_params *p, const struct hb_tensor *wo);
int hb_cuda_attn_o_max_len(struct hb_ctx *ctx, int head_dim);
/* batch_short_len (backend.h): past 8 rows, the longest row a decode batch's attention takes on attn_decode_smem */
int hb_cuda_batch_short_len(struct hb_ctx *ctx, int n_tokens);
/* set_step_twins (backend.h): a verify batch's rows computed as one-token steps (gemv_q4.cu, attention.cu) */
int hb_cuda_set_step_twins(struct hb_ctx *ctx, int on);
/* tests only: decode attention launches past 8 rows on attn_decode_smem on this context so far */
long hb_cuda_attn_wide_launches(struct hb_ctx *ctx);
/* tests and bench only: the longest sequence attn_o takes: 0 off, -1 the default (one chunk where it measured faster:
 * head dim 64), -2 one chunk at every head dim it covers, N > 0 N keys (above one chunk it walks the keys in chunks,
 * which the tests cover this way). hb_cuda_attn_o_chunk: keys per chunk at a head dim (0: not covered). */
void hb_cuda_set_attn_o_max(struct hb_ctx *ctx, int max_len);
int hb_cuda_attn_o_chunk(int head_dim);
/* tests and bench only: the prefill GEMM's kernel, as HEARTH_GEMM=mma|wg|wg256 sets it at init: AUTO the dispatch's
 * measured choice, MMA the mma.sync kernel, WG the wgmma kernel (sm_90a) for every GEMM call (in row-invariant mode
 * too), 128 weight rows per block, WG256 the same with 256 (where the weights allow: else 128). Returns the kind in
 * force: MMA when WG / WG256 was asked for and this device or build does not run it.
 * hb_cuda_gemm_q4: the int4 tensor-core GEMM of norm_matmul / silu_matmul itself, for any n >= 1 (no GEMV), as
 * cu_gemm_q4 (1 = shapes it does not cover). hb_cuda_gemm_simt: the exact SIMT kernel on the same operands, the
 * reference (f16 x, f32 out): out = x · wᵀ + bias. */
#define HB_CUDA_GEMM_AUTO 0
#define HB_CUDA_GEMM_MMA 1
#define HB_CUDA_GEMM_WG 2
#define HB_CUDA_GEMM_WG256 3
int hb_cuda_set_gemm(struct hb_ctx *ctx, int kind);
/* tests only: on != 0 keeps every sample launch on one block a row (no many-block path for few rows: sample_split.cuh),
 * so test_cuda_ops.sample_split can compare the two paths on the same rows */
void hb_cuda_set_sample_one_block(struct hb_ctx *ctx, int on);
int hb_cuda_gemm_q4(struct hb_ctx *ctx, const struct hb_tensor *x, int n_mm, struct hb_tensor *const *outs,
                    const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n, int add);
void hb_cuda_gemm_simt(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x, const struct hb_tensor *w,
                       const struct hb_tensor *bias, int n);
/* a measurement hook (bench_cuda replay*): the profiler's collection range (cudaProfilerStart / Stop), so that
 * `ncu --profile-from-start off --graph-profiling graph` takes exactly the replayed decode graphs */
void hb_cuda_profiler_range(int on);

/* ---- memory -------------------------------------------------------------------------------- */
/* device name, total/free memory and what this context holds (weights+activations, scratch) */
void hb_cuda_mem_report(struct hb_ctx *ctx, char *buf, size_t len);
/* bytes free on the device right now (for planning the KV pool); 0 on error */
size_t hb_cuda_mem_free(struct hb_ctx *ctx);

/* ---- timing (benchmarks only) -----------------------------------------------------------------
 * mark(i) enqueues a timestamp into slot i (0..1023; allowed inside a capture, so a replayed graph
 * re-records it); after sync, mark_ms(i, j) is the device time from mark i to mark j in ms
 * (negative when either was never recorded). */
void hb_cuda_mark(struct hb_ctx *ctx, int i);
float hb_cuda_mark_ms(struct hb_ctx *ctx, int i, int j);

#ifdef __cplusplus
}
#endif
#endif
