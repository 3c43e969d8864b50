/* backend.h — the one op table every compute backend fills (CPU, CUDA).
 *
 * Family forward passes (src/model/<family>.c) are written only against these ops, so the same
 * code runs on every backend. Conventions:
 *   - Storage is row-major. An activation tensor is [rows × cols]; a batch of n tokens of width d is
 *     [n × d]. A weight W is [out × in] exactly as stored in safetensors (PyTorch nn.Linear), and
 *     matmul computes y = x · Wᵀ (+ b).
 *   - Activations are f32 on the CPU. A backend may keep them in another dtype internally (CUDA's
 *     fast path uses f16); host reads and writes always see f32 (or i32 for index tensors).
 *   - Ops are enqueued in order on the backend's stream; results are visible to the host after
 *     read() (which synchronises).
 *   - The scalar CPU ops (cpu/ops_ref.c) are the specification: every other kernel is tested
 *     against them.
 * What this file does not do: own the model or the KV block tables (runtime/), or quantize
 * (quant/q4.c produces the host-side reference layout that weight_upload repacks).
 */
#ifndef HEARTH_BACKEND_H
#define HEARTH_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct threadpool;

enum hb_dtype {
  HB_F32 = 0,
  HB_F16 = 1,
  HB_BF16 = 2,
  HB_Q4 = 3,  /* int4 group-128 weights, layout private to the backend */
  HB_I32 = 4,
};

/* A tensor lives in backend memory. For HB_Q4 `data`/`aux` are backend-private (packed quants and
 * scales); for the others `data` points at rows*cols elements (device memory on CUDA). */
struct hb_tensor {
  enum hb_dtype dtype;
  int64_t rows, cols;
  void *data;
  void *aux;
  size_t bytes; /* bytes owned (0 for a view) */
};

/* Host-side weight handed to weight_upload. */
struct hb_host_weight {
  enum hb_dtype dtype;     /* HB_Q4 (reference layout below), HB_BF16 or HB_F32 */
  int64_t rows, cols;
  const void *data;        /* HB_Q4: [rows][cols/2] bytes, byte j of a row = (q[2j]+8) | (q[2j+1]+8) << 4 */
  const uint16_t *scales;  /* HB_Q4: [rows][cols/128] fp16 bits; NULL otherwise */
  struct threadpool *pool; /* optional: the loader's idle worker threads, which a backend may use for
                            * its own conversion at upload (the CPU backend's int4 repack); NULL = none */
};

/* Where a batch's tokens sit in the paged KV cache. Token t belongs to sequence seq[t] at position
 * pos[t]; its key/value live in block block_table[seq[t] * max_blocks + pos[t] / block_size], slot
 * pos[t] % block_size. Attention for token t covers keys of seq[t] at positions
 * [max(0, pos[t] - window + 1), pos[t]] (window 0 = no window). Keys of a batch are written before
 * its attention runs, so tokens of one sequence in one batch see each other causally. */
struct hb_batch {
  int n_tokens;
  int n_seqs;
  int max_blocks;    /* columns of block_table */
  int block_size;    /* tokens per KV block */
  const int32_t *pos;          /* host [n_tokens] */
  const int32_t *seq;          /* host [n_tokens] */
  const int32_t *block_table;  /* host [n_seqs × max_blocks] */
  const int32_t *seq_len;      /* host [n_seqs]: tokens of each sequence after this batch */
  const int32_t *out_rows;     /* host [n_out]: token indices whose outputs (logits/hidden) are wanted */
  int n_out;
  /* host [n_seqs × max_blocks] or NULL: the blocks of the sliding-window layers' own pool (runtime/kv_ring.h), for
   * a model that has one; entries below a sequence's window name some block of it that is never read. A family
   * passes a sliding layer a copy of the batch with block_table / d_block_table set to these. */
  const int32_t *block_table_swa;
  /* backend copies, filled by batch_upload */
  struct hb_tensor d_pos, d_seq, d_block_table, d_seq_len, d_out_rows, d_block_table_swa;
};

/* One layer's KV storage: [n_blocks × block_size × n_kv_heads × head_dim] for K and for V. */
struct hb_kv_layer {
  struct hb_tensor k, v;
  int n_kv_heads, head_dim;
};

/* row_score's request and result rows (i32 words; see the op) */
enum { HB_SCORE_K = 20, HB_SCORE_NID = 16, HB_SCORE_REQ = 2 + HB_SCORE_NID, HB_SCORE_TOP = 4,
       HB_SCORE_TOPV = HB_SCORE_TOP + HB_SCORE_K, HB_SCORE_IDV = HB_SCORE_TOPV + HB_SCORE_K, HB_SCORE_OUT = 64 };

/* Bytes of one element of a dense tensor (0 for HB_Q4, whose layout is the backend's). */
static inline size_t hb_elem_size(enum hb_dtype dt) {
  return dt == HB_F32 || dt == HB_I32 ? 4 : dt == HB_F16 || dt == HB_BF16 ? 2 : 0;
}

/* The payload of kv_block_read / kv_block_write for blocks of bs tokens. */
static inline size_t hb_kv_block_bytes(const struct hb_kv_layer *layers, int n_layers, int bs) {
  size_t n = 0;
  for (int l = 0; l < n_layers; l++)
    if (layers[l].k.data)
      n += (size_t)bs * (size_t)(layers[l].k.cols * hb_elem_size(layers[l].k.dtype) + layers[l].v.cols * hb_elem_size(layers[l].v.dtype));
  return n;
}

/* The sample op's request for one row: runtime/sampler.c's parameters, with the penalties that apply already decided
 * by the host (a factor of 1 and terms of 0 change no logit, so they stand for "off") and the request's next uniform
 * draw (its seeded RNG stays on the host). */
struct hb_sample_row {
  double u;             /* in [0, 1): the draw the host sampler would make (sampler.c, next_unit) */
  float temperature;    /* > 0; a row with temperature <= 0 is not sampled (its ids[i] is left as it is) */
  int32_t top_k;        /* 0 = off */
  float top_p, min_p;   /* 1 = off, 0 = off */
  float repetition;     /* divides (logit > 0) or multiplies the logit of every entry of the row's list; 1 = off */
  float presence, frequency; /* logit -= presence + frequency * count, entries with count > 0; 0, 0 = off */
  int32_t pen0, n_pen;  /* the row's entries: pen[pen0 .. pen0 + n_pen) of the op's list */
};
/* a distinct token of a row's history (prompt and generated tokens: sampler.c) and how often it was generated */
struct hb_sample_pen { int32_t id, count; };
/* the sample op's ids[i] for a row holding a NaN or an infinity (nothing is drawn from it) */
#define HB_SAMPLE_NONFINITE (-2)

/* the gate activation of a gated MLP (norm_swiglu) */
enum { HB_ACT_SILU = 0, HB_ACT_GELU_TANH = 1 };

struct hb_attn_params {
  int n_heads, n_kv_heads, head_dim;
  float scale;   /* multiplies q·k */
  int window;    /* sliding window in tokens, 0 = full causal */
  float softcap; /* attention logit soft-cap, 0 = off */
};

struct hb_ctx; /* backend instance */

struct hb_config {
  int n_threads;    /* CPU */
  int device;       /* CUDA device ordinal */
  int exact;        /* 1: f32 activations everywhere (the reference path for tests) */
};

struct hb_ops {
  const char *name;
  int (*init)(const struct hb_config *cfg, struct hb_ctx **out, struct hearth_err *err);
  void (*free)(struct hb_ctx *ctx);

  /* memory */
  int (*alloc)(struct hb_ctx *ctx, struct hb_tensor *t, enum hb_dtype dt, int64_t rows, int64_t cols,
               struct hearth_err *err);
  void (*release)(struct hb_ctx *ctx, struct hb_tensor *t);
  int (*weight_upload)(struct hb_ctx *ctx, struct hb_tensor *dst, const struct hb_host_weight *src,
                       struct hearth_err *err);
  /* host <-> backend copies of whole rows of f32/i32 tensors: rows [row0, row0+n_rows) */
  int (*write)(struct hb_ctx *ctx, struct hb_tensor *t, int64_t row0, int64_t n_rows, const void *host);
  int (*read)(struct hb_ctx *ctx, const struct hb_tensor *t, int64_t row0, int64_t n_rows, void *host);
  int (*batch_upload)(struct hb_ctx *ctx, struct hb_batch *b, struct hearth_err *err);
  /* KV pool blocks blocks[0..n) (block b: rows [b*bs, (b+1)*bs)) of every layer that stores KV (k.data
   * non-NULL) to or from host memory, one block after another, each packed layer by layer, K rows then V rows,
   * in the cache's own element format (no conversion): the prefix store's file payload. bytes must be
   * n × hb_kv_block_bytes(). read returns once the bytes are on the host; write may return before its copy has
   * run (it keeps its own copy). Many blocks in one call are one batch of copies and one wait. */
  int (*kv_block_read)(struct hb_ctx *ctx, const struct hb_kv_layer *layers, int n_layers, const int32_t *blocks,
                       int n, int bs, void *host, size_t bytes);
  int (*kv_block_write)(struct hb_ctx *ctx, struct hb_kv_layer *layers, int n_layers, const int32_t *blocks,
                        int n, int bs, const void *host, size_t bytes);

  /* ops; out and inputs are distinct tensors unless stated */
  /* out[n × d] = table[ids[i]] (table: Q4, BF16 or F32 [vocab × d]), times scale */
  void (*embed)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *table,
                const struct hb_tensor *ids, int n, float scale);
  /* rows of width w->cols: out = x / rms(x) * (w + w_offset); in place allowed (out == x).
   * x is viewed as [x->rows*x->cols / w->cols × w->cols] (per-head norms). */
  void (*rmsnorm)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
                  const struct hb_tensor *w, float eps, float w_offset);
  /* out[n × W.rows] = x[n × W.cols] · Wᵀ + bias (bias F32 [1 × W.rows] or NULL); first n rows of x */
  void (*matmul)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
                 const struct hb_tensor *w, const struct hb_tensor *bias, int n);
  /* NeoX (split-half) rotary on x[n × n_heads*head_dim] in place, first n_rot dims of each head */
  void (*rope_neox)(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_batch *b, int n_heads,
                    int head_dim, int n_rot, float theta);
  /* writes k, v [n × n_kv*hd] into the layer's cache at the batch's slots */
  void (*kv_write)(struct hb_ctx *ctx, struct hb_kv_layer *kv, const struct hb_tensor *k,
                   const struct hb_tensor *v, const struct hb_batch *b);
  /* out[n × n_heads*hd] = softmax(q·kᵀ·scale + mask)·v over the paged cache */
  void (*attention)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                    const struct hb_kv_layer *kv, const struct hb_batch *b,
                    const struct hb_attn_params *p);
  /* out = silu(gate) * up, elementwise over the first n rows */
  void (*silu_mul)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate,
                   const struct hb_tensor *up, int n);
  /* x += y over the first n rows */
  void (*add)(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *y, int n);
  /* out[k × cols] = x[rows[i]] for the batch's out_rows */
  void (*gather_rows)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *x,
                      const struct hb_batch *b);
  /* waits for queued work; returns 0 or a negative status with err filled */
  int (*sync)(struct hb_ctx *ctx, struct hearth_err *err);

  /* ---- optional: NULL when a backend does not provide them; callers then use the plain ops ----
   * Fused ops, each equal to the sequence in its comment (fewer launches per decode step). */
  /* xn = rmsnorm(x, norm_w, eps, w_offset) (skipped when norm_w is NULL); outs[i] = xn·ws[i]ᵀ +
   * biases[i] for i < n_mm (1..3); add (n_mm == 1 only): outs[0] += instead of =. x unchanged. */
  void (*norm_matmul)(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *norm_w, float eps,
                      float w_offset, int n_mm, struct hb_tensor *const *outs, const struct hb_tensor *const *ws,
                      const struct hb_tensor *const *biases, int n, int add);
  /* out (+)= (silu(gate) * up) · wᵀ */
  void (*silu_matmul)(struct hb_ctx *ctx, const struct hb_tensor *gate, const struct hb_tensor *up,
                      struct hb_tensor *out, const struct hb_tensor *w, int n, int add);
  /* rope_neox(q, n_heads); rope_neox(k, kv->n_kv_heads); kv_write(kv, k, v) (k's scratch copy may
   * stay un-rotated). With q_norm and k_norm (Qwen3's per-head norms, head_dim entries each; NULL, NULL: none),
   * rmsnorm(q, q, q_norm, eps, 0) and rmsnorm(k, k, k_norm, eps, 0) before all that, bit-identical to running them
   * (k's scratch copy may stay un-normed too). Returns 0 when it ran; 1, having done nothing, when it does not
   * cover those norms for these shapes (callers then run the two rmsnorms and call it without norms, which it
   * always takes). */
  int (*rope_kv_write)(struct hb_ctx *ctx, struct hb_tensor *q, struct hb_tensor *k, const struct hb_tensor *v,
                       struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads, int n_rot, float theta,
                       const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps);
  /* ids[i] = argmax of logits row i (lowest index on ties); logprobs[i] (or NULL) = its log-softmax.
   * A row holding a NaN or an infinity: ids[i] = 0 (a valid id, for the copy_rows of a greedy graph) and
   * logprobs[i] = NaN, which reports it (runtime/session.c turns it into id -1) */
  void (*argmax)(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, struct hb_tensor *ids,
                 struct hb_tensor *logprobs);
  /* Graph capture of the ops enqueued between begin and end; replayed by graph_launch, which
   * returns HEARTH_ERR_ARG when the graph went stale (capture again). No write/read/batch_upload/
   * sync inside a capture; a shape must have run once uncaptured before it is captured. */
  int (*capture_begin)(struct hb_ctx *ctx, struct hearth_err *err);
  int (*capture_end)(struct hb_ctx *ctx, void **graph, struct hearth_err *err);
  int (*graph_launch)(struct hb_ctx *ctx, void *graph, struct hearth_err *err);
  void (*graph_free)(void *graph);
  /* alloc for a tensor that must stay f32 where alloc(HB_F32) would pick a narrower dtype on a
   * fast path (CUDA: f16); the runtime uses it for logits. NULL: alloc. */
  int (*alloc_f32)(struct hb_ctx *ctx, struct hb_tensor *t, int64_t rows, int64_t cols, struct hearth_err *err);
  /* xn = rmsnorm(x, norm_w, eps); q = rope_neox(xn·ws[0]ᵀ + biases[0], n_heads); the cache gets
   * rope_neox(xn·ws[1]ᵀ + biases[1]) and xn·ws[2]ᵀ + biases[2] at the batch's slots (n = its
   * n_tokens; n_rot = head_dim). Returns 1, having done nothing, when it does not cover the shapes
   * (callers then run norm_matmul + rope_kv_write); 0 when it ran. */
  int (*norm_qkv_rope_kv)(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *norm_w, float eps,
                          const struct hb_tensor *const *ws, const struct hb_tensor *const *biases,
                          struct hb_tensor *q, struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads,
                          float theta, int n);
  /* out = act(xn·w_gateᵀ) * (xn·w_upᵀ), xn = rmsnorm(x, norm_w, eps), act HB_ACT_SILU (SwiGLU) or HB_ACT_GELU_TANH
   * (Gemma 4's GeGLU, the formula of gelu_mul). Returns 1, having done nothing, when it does not cover the shapes
   * (callers then run the plain ops); 0 when it ran. */
  int (*norm_swiglu)(struct hb_ctx *ctx, const struct hb_tensor *x, const struct hb_tensor *norm_w, float eps,
                     const struct hb_tensor *w_gate, const struct hb_tensor *w_up, struct hb_tensor *out, int n,
                     int act);
  /* Decoding one step ahead (runtime/session.c): NULL when a backend does not offer it.
   * read_start enqueues a copy of rows [0, n_rows) of the I32 tensor t into the backend's pinned host slot
   * `slot` (0 or 1) and returns at once; read_finish waits for that copy alone (not for work enqueued after
   * it) and copies its bytes to host. copy_rows enqueues dst rows [0, n_rows) = src rows [0, n_rows) (I32, on
   * the device, in stream order). */
  int (*read_start)(struct hb_ctx *ctx, const struct hb_tensor *t, int64_t n_rows, int slot);
  int (*read_finish)(struct hb_ctx *ctx, int slot, void *host, struct hearth_err *err);
  void (*copy_rows)(struct hb_ctx *ctx, struct hb_tensor *dst, const struct hb_tensor *src, int64_t n_rows);
  /* a decode batch's device positions and sequence lengths (b->d_pos, b->d_seq_len, as batch_upload left them)
   * += 1, in stream order: the next decode step of the same sequences without an upload (capture-safe) */
  void (*decode_advance)(struct hb_ctx *ctx, const struct hb_batch *b);
  /* x += attention(q over the cache, p)·woᵀ for a batch of one token (the attention op, then norm_matmul
   * without a norm and with add, in one launch). Returns 1, having done nothing, when it does not cover the shapes
   * or the sequence is longer than attn_o_max_len; 0 when it ran. */
  int (*attn_o)(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *q, const struct hb_kv_layer *kv,
                const struct hb_batch *b, const struct hb_attn_params *p, const struct hb_tensor *wo);
  /* the longest sequence (its keys after the step) attn_o takes at this head_dim; 0: none. A decode step's graph
   * differs on either side of it, so the runtime keeps graphs of its own for the steps below it (session.c). */
  int (*attn_o_max_len)(struct hb_ctx *ctx, int head_dim);
  /* on = 1: until set back to 0, every op computes each row (token) with the same kernels and the same order
   * of sums whatever the batch holds (how many tokens, how many sequences), so that a token's result is
   * bit-identical alone and in any batch (label scores, embeddings); slower for small batches. Backends whose
   * ops are always row-invariant (the CPU's) leave it NULL. Not inside a capture. */
  void (*set_row_invariant)(struct hb_ctx *ctx, int on);
  /* ---- Gemma 4 (model/gemma4.c). Optional: a backend without them cannot run the family, and loading a Gemma 4
   * checkpoint on it fails with a clear error. ---- */
  /* out[t][j] = gelu_tanh(gate[t][j]) * up[t][up_col0 + j] for t < n, j < gate->cols; up's row stride is up->cols
   * (the PLE gate multiplies one layer's slice of the per-layer inputs). gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi)
   * (x + 0.044715 x^3))), transformers' gelu_pytorch_tanh, in f32. out may be gate. */
  void (*gelu_mul)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate, const struct hb_tensor *up,
                   int up_col0, int n);
  /* x *= s over the first n rows */
  void (*scale)(struct hb_ctx *ctx, struct hb_tensor *x, float s, int n);
  /* x = cap * tanh(x / cap) over the first n rows (final logit soft-capping) */
  void (*softcap)(struct hb_ctx *ctx, struct hb_tensor *x, float cap, int n);
  /* proportional RoPE: in each head of x[n × n_heads*head_dim] (in place), the pairs (i, i + head_dim/2) for
   * i < n_pairs rotate by pos · theta^(-2i/head_dim) / factor; the other dims pass through. n_pairs = head_dim/2
   * with factor 1 is rope_neox over the whole head. */
  void (*rope_prop)(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_batch *b, int n_heads, int head_dim,
                    int n_pairs, float theta, float factor);
  /* ---- memory planning (runtime/model_load.c) ---- */
  /* bytes this backend could still allocate now (a device's free memory); 0 if unknown. NULL: the backend
   * allocates host memory, which the loader checks against MemAvailable itself. */
  uint64_t (*mem_available)(struct hb_ctx *ctx);
  /* Row scores for hearth_row_score (NULL: the session layer computes them on the host). For every row i < n
   * of logits [≥ n × vocab] f32, req row i ([≥ n × HB_SCORE_REQ] i32: k, n_ids, ids[HB_SCORE_IDS]) says what
   * to find and out row i ([≥ n × HB_SCORE_OUT] i32) receives it, in words:
   *   [0] the argmax (lowest index on ties), or -1 when the row holds a NaN or an infinity (nothing else set)
   *   [1] the max (f32 bits)   [2..3] log Σ exp(x − max), a double summed in double
   *   [HB_SCORE_TOP..+k) the k largest logits' indices (value descending, lower index first on ties)
   *   [HB_SCORE_TOPV..+k) their values (f32 bits)   [HB_SCORE_IDV..+n_ids) the values at ids (f32 bits)
   * Each row's result depends on that row only (no reduction across rows or blocks of a row). */
  void (*row_score)(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, const struct hb_tensor *req,
                    struct hb_tensor *out);
  /* the kernel set this context runs (CPU: the cpuid choice, e.g. "avx2"); NULL: the backend's name */
  const char *(*kernels)(struct hb_ctx *ctx);
  /* A pinned (page-locked) host buffer of at least bytes, owned by the context and reused by the next call (its
   * contents are not kept across a call that grows it): kv_block_write from it copies straight to the device, with
   * no staging copy and no page faults. NULL (the op or the result): use ordinary memory. */
  void *(*host_pinned)(struct hb_ctx *ctx, size_t bytes);
  /* Token sampling where the logits are (NULL: the session layer samples on the host, from the row; the CPU backend
   * leaves it NULL because its logits are host memory already and runtime/sampler.c is the definition).
   * For every row i < n of logits (F32 [≥ n × vocab]) with rows[i].temperature > 0: the row's entries of pen get the
   * penalties of rows[i] (on a copy: logits is unchanged), then ids[i] (I32, ≥ n elements) = the token sampler.c's
   * draw with u = rows[i].u picks from the penalised row, bit for bit; -1 where the backend cannot decide it
   * exactly (the host then samples that row with the same u), HB_SAMPLE_NONFINITE where the row (before the
   * penalties) holds a NaN or an infinity. rows and pen are host arrays, read before the call returns. */
  void (*sample)(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, const struct hb_sample_row *rows,
                 const struct hb_sample_pen *pen, int n_pen, struct hb_tensor *ids);
  /* ---- Gemma 4 fusions (model/gemma4.c); NULL: the plain ops. Each is bit-identical to the sequence it names. ---- */
  /* After a layer's QKV projections: q = rope_prop(rmsnorm(q, q_norm) per head) in place; with kv (not NULL) also
   * k = rope_prop(rmsnorm(k, k_norm)), v = rmsnorm(v) without a weight, and kv_write(kv, k, v) (k and v themselves may
   * be left as they were). n = b->n_tokens. Returns 1, having done nothing, when it does not cover the shapes. */
  int (*g4_qkv_post)(struct hb_ctx *ctx, struct hb_tensor *q, const struct hb_tensor *k, const struct hb_tensor *v,
                     const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps, struct hb_kv_layer *kv,
                     const struct hb_batch *b, int n_heads, int n_kv_heads, int head_dim, int n_pairs, float theta,
                     float factor);
  /* g4_qkv_post (kv_w: the layer's own cache, or NULL for a KV-shared layer) and then attention(out, q, kv, b, p) in
   * one step; q may be left as it was. Returns 1, having done nothing, when it does not cover the batch (the caller
   * then runs the two). */
  int (*g4_post_attention)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                           const struct hb_tensor *k, const struct hb_tensor *v, const struct hb_tensor *q_norm,
                           const struct hb_tensor *k_norm, float eps, struct hb_kv_layer *kv_w,
                           const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p,
                           int n_pairs, float theta, float factor);
  /* x = (x + rmsnorm(y, w, eps)) * s over the first n rows (y unchanged): rmsnorm(y, y, w), add(x, y), scale(x, s) */
  void (*norm_add)(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *y, const struct hb_tensor *w,
                   float eps, float s, int n);
  /* out[n × w.rows] = g · wᵀ, g = gelu_mul(gate, up, up_col0) (gelu_mul's formula, rounded to the activation type as
   * its store would be; gate unchanged): the per-layer input's gate and projection. Returns 1, having done nothing,
   * when it does not cover the shapes (callers then run gelu_mul + matmul). */
  int (*gelu_matmul)(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *gate, const struct hb_tensor *up,
                     int up_col0, const struct hb_tensor *w, int n);
  /* A norm_add folded into the projection after it, out of place: xo = (x + rmsnorm(y, aw, eps)) · s (norm_add's
   * result, written to xo; x and y unchanged; xo another buffer than x), then with act < 0
   * norm_matmul(xo, norm_w, eps, 0, n_mm, outs, ws, no biases, n, no add) (norm_w NULL: no norm), with act >= 0
   * norm_swiglu(xo, norm_w, eps, ws[0], ws[1], outs[0], n, act) (n_mm 2). Returns 1, having done nothing, when it
   * does not cover the shapes (callers then run norm_add in place and the plain op). */
  int (*add_norm_matmul)(struct hb_ctx *ctx, struct hb_tensor *xo, const struct hb_tensor *x, const struct hb_tensor *y,
                         const struct hb_tensor *aw, float s, const struct hb_tensor *norm_w, float eps, int n_mm,
                         struct hb_tensor *const *outs, const struct hb_tensor *const *ws, int act, int n);
  /* Optional (NULL: none): the longest sequence (its keys after the step) up to which a decode batch of n_tokens
   * rows, one per sequence, runs other kernels than a longer one (CUDA: attention on the one-head-a-block kernel past
   * 8 rows); 0: no such batches at this width. A decode step's graph differs on either side of it, so the runtime
   * keeps graphs of their own for the batches whose every sequence is at most this long (session.c). */
  int (*batch_short_len)(struct hb_ctx *ctx, int n_tokens);
  /* Optional (NULL: the backend's rows are alike in any batch already, as the CPU's are). Speculative verification:
   * on = 1 asks that, until set back to 0, a batch of consecutive tokens of one sequence computes every row as the
   * one-token decode step of that sequence at that position would (its kernels, launch shapes and order of sums), so
   * that each row is bit-identical to that step. Returns, for on = 1, 0 or 1 when the backend cannot do it in its
   * present mode (nothing changes); for on = 0, how many ops since on = 1 could not (a non-zero count means the rows
   * are not such twins: the caller drops the result). Not inside a capture. */
  int (*set_step_twins)(struct hb_ctx *ctx, int on);
};

/* Backends compiled into this build. hb_cuda_ops is NULL-safe: hb_get returns NULL when absent. */
const struct hb_ops *hb_get(int kind, struct hearth_err *err);
extern const struct hb_ops hb_cpu_ops;

#endif
