/* model/model.h — the loaded model: config, bound weights, backend, KV pool, scratch.
 *
 * Storage is row-major everywhere; a weight W[out][in] is as in safetensors and matmul computes
 * y = x · Wᵀ (backend/backend.h). Weights live in backend memory (struct hb_tensor); after
 * binding, forward passes touch fields like layer->wq, never tensor names. */
#ifndef HEARTH_MODEL_MODEL_H
#define HEARTH_MODEL_MODEL_H
#include <pthread.h>

#include "backend/backend.h"
#include "hearth.h"
#include "load/hf_config.h"
#include "load/safetensors.h"
#include "runtime/prefix_cache.h"

struct layer_weights {
  struct hb_tensor attn_norm;            /* [1, d] f32 */
  struct hb_tensor wq, wk, wv, wo;       /* [H*hd, d], [KV*hd, d], [KV*hd, d], [d, H*hd]: q4 or dense */
  struct hb_tensor bq, bk, bv;           /* [1, H*hd], [1, KV*hd] f32 (Qwen2 only) */
  struct hb_tensor q_norm, k_norm;       /* [1, hd] f32 (Qwen3 only) */
  struct hb_tensor ffn_norm;             /* [1, d] f32 */
  struct hb_tensor w_gate, w_up, w_down; /* [ff, d], [ff, d], [d, ff] */
  /* Gemma 4 (model/gemma4.c): attn_norm = input_layernorm, ffn_norm = pre_feedforward_layernorm */
  struct hb_tensor post_attn_norm, post_ffn_norm; /* [1, d] f32: the sandwich norms */
  struct hb_tensor ple_gate, ple_proj;   /* per_layer_input_gate [S, d], per_layer_projection [d, S] */
  struct hb_tensor ple_norm;             /* post_per_layer_input_norm [1, d] f32 */
  float layer_scalar;                    /* the layer's output scale, read from the file (1 elsewhere) */
};
/* Every backend tensor of a layer, for release and byte counts (model_load.c). */
#define LAYER_TENSORS(L) \
  {&(L)->attn_norm, &(L)->wq, &(L)->wk, &(L)->wv, &(L)->wo, &(L)->bq, &(L)->bk, &(L)->bv, &(L)->q_norm, &(L)->k_norm, \
   &(L)->ffn_norm, &(L)->w_gate, &(L)->w_up, &(L)->w_down, &(L)->post_attn_norm, &(L)->post_ffn_norm, &(L)->ple_gate, \
   &(L)->ple_proj, &(L)->ple_norm}

struct model_weights {
  struct hb_tensor tok_embd;   /* [vocab, d] */
  struct hb_tensor out_norm;   /* [1, d] f32 */
  struct hb_tensor lm_head;    /* [vocab, d]; when tied, a copy of tok_embd's descriptor (not owned) */
  int lm_head_tied;
  struct layer_weights *layers;
  /* Gemma 4 per-layer embeddings (E2B/E4B; NULL data otherwise) */
  struct hb_tensor ple_embd;   /* embed_tokens_per_layer [ple_vocab, L*S] */
  struct hb_tensor ple_model_proj; /* per_layer_model_projection [L*S, d] */
  struct hb_tensor ple_proj_norm;  /* per_layer_projection_norm [1, S] f32 */
  struct hb_tensor ones[2];    /* [1, head_dim] of ones: the weight of the scale-free V norm (sliding, full) */
};

/* Activation scratch for one forward pass of up to max_tokens tokens. */
struct model_scratch {
  int max_tokens, max_out;
  struct hb_tensor ids;                  /* [max_tokens, 1] i32 */
  struct hb_tensor x, xn;                /* [T, d] residual stream and normed input */
  struct hb_tensor x2;                   /* [T, d] Gemma 4's second residual buffer on a backend with add_norm_matmul
                                          * (model/gemma4.c: the stream alternates between x and x2), else unallocated */
  struct hb_tensor q, k, v, attn;        /* [T, H*hd], [T, KV*hd], [T, KV*hd], [T, H*hd] */
  struct hb_tensor o;                    /* [T, d] */
  struct hb_tensor gate, up;             /* [T, ff] */
  struct hb_tensor sel;                  /* [max_out, d] rows picked for the head */
  struct hb_tensor logits;               /* [max_out, vocab] */
  struct hb_tensor gsel;                 /* [2 max_out, 1] i32: a batch of n's greedy ids, then their f32 logprobs
                                          * (rows n..2n): one read brings both back */
  struct hb_tensor ple, ple_tok;         /* [T, L*S] Gemma 4 per-layer inputs and their token part (else unallocated) */
  struct hb_tensor score_req, score_out; /* [max_out, HB_SCORE_REQ / HB_SCORE_OUT] i32: the row_score op's rows
                                          * (backends with the op, generative models only) */
};

#define MODEL_MAX_GRAPHS 65 /* decode graphs by batch width 1..64 */
#define MODEL_MAX_SEQS 256  /* sessions one step may hold on any backend (m->max_seqs is the backend's own, <= this) */

/* A captured decode step of one batch width (backends with graphs). */
struct model_graph {
  int seen;    /* this shape ran once uncaptured (scratch sized), so it may be captured */
  void *graph; /* backend graph handle or NULL */
};

/* The sliding-window layers' own block pool (Gemma 4; runtime/kv_ring.h): block ids index only those layers'
 * storage. A sequence maps logical block b (positions [b·bs, (b+1)·bs)) to one of these for as long as a query at
 * or after its next position can see the block; below the window it holds none (-1). */
struct kv_swa_pool {
  int n_blocks;         /* 0: the model has no sliding pool (every layer uses the main block ids) */
  int window;           /* the sliding window in tokens (a query at p sees keys p - window + 1 .. p) */
  int32_t *free_list;
  int n_free;
  int32_t *refs;        /* [n_blocks]: sessions and prefix-cache entries holding the block */
  int64_t peak_used;    /* the most blocks in use at once since load (tests, bench) */
};

/* KV blocks shared by all sessions of a model. */
struct kv_pool {
  struct kv_swa_pool swa;
  int block_size;       /* tokens per block */
  int n_blocks;
  struct hb_kv_layer *layers; /* [n_layer] */
  int32_t *free_list;   /* stack of free block ids */
  int n_free;
  int32_t *refs;        /* [n_blocks] reference counts (prefix sharing) */
  struct prefix_cache pc; /* full blocks shared between sessions */
  pthread_mutex_t mu;
};

struct family_ops;

#define AHEAD_MAX 64
/* A decode step enqueued before the call that will most likely ask for it (runtime/session.c, "decoding one
 * step ahead"): the sessions it advances, each one's position and session epoch then, and the token it feeds
 * on the device (known on the host once the step before it has been read back). */
struct model_ahead {
  int live;     /* a step is in flight that no call has claimed */
  int n, slot;  /* its sessions; the backend read slot of its ids and logprobs */
  int next_slot;
  int streak;   /* calls in a row with the same all-greedy one-token batch */
  int need;     /* the streak from which a step is enqueued ahead: 2 at load, x4 after a dropped step (at most
                 * 1024), halved after every 32 claimed ones (never below 2) */
  int claims;   /* claimed steps since need last changed */
  uint64_t n_claimed, n_dropped; /* since load (hearth_model_ahead_counts) */
  struct hearth_session *ss[AHEAD_MAX];
  uint64_t epoch[AHEAD_MAX];
  int32_t pos[AHEAD_MAX], tok[AHEAD_MAX];
  struct hearth_session *prev[AHEAD_MAX];
  int prev_n;
};

struct hearth_model {
  struct hf_config cfg;
  struct hearth_model_info info;
  const struct family_ops *fam;
  const struct hb_ops *be;
  struct hb_ctx *bctx;
  struct model_weights w;
  struct kv_pool kv;
  struct model_scratch scratch;
  pthread_mutex_t forward_mu; /* one forward pass at a time */
  /* host staging for a batch */
  int32_t *b_pos, *b_seq, *b_bt, *b_len, *b_out;
  int32_t *b_bt_swa; /* [max_seqs × max_blocks]: the sliding pool's block tables (NULL without one) */
  int32_t *b_ids;   /* [max_tokens] token ids of the batch */
  float *b_outbuf;  /* [max_seqs × max(vocab, d)] host copy of the batch's outputs */
  int32_t *b_gid;   /* [max_seqs] greedy ids of the last batch */
  float *b_glp;     /* [max_seqs] their logprobs */
  int32_t *b_gsel;  /* [2 max_seqs] gsel as read back */
  int32_t *b_score_req, *b_score_out; /* [max_seqs × HB_SCORE_REQ / HB_SCORE_OUT] row scores' staging */
  struct hb_sample_pen *b_pen; /* [b_pen_cap] the sample op's penalty lists of a batch (session.c; grown on demand) */
  int b_pen_cap;
  struct model_graph graphs[MODEL_MAX_GRAPHS];
  struct model_graph graphs_greedy[MODEL_MAX_GRAPHS]; /* the same step ending in its greedy tail (session.c) */
  /* one-token steps short enough for the backend's fused attention + o_proj (attn_o_max_len): their kernels
   * differ, so they have graphs of their own: [0] plain, [1] with the greedy tail */
  struct model_graph graphs_short[2];
  /* decode steps of several sequences, each at most the backend's batch_short_len long: their kernels differ, so
   * they have graphs of their own, by width: [0] plain, [1] with the greedy tail */
  struct model_graph graphs_bshort[2][MODEL_MAX_GRAPHS];
  struct model_ahead ahead;
  uint64_t epochs;      /* the last session epoch given out (runtime/session.c) */
  int max_seqs, max_blocks_per_seq;
  char family_name[16];
  uint64_t fingerprint; /* what the KV contents depend on (runtime/prefix_store.h) */
  int row_invariant;    /* the forwards under way run the backend's row-invariant kernels (no graphs) */
  char *store_dir;      /* on-disk prefix cache directory, or NULL */
  struct prefix_store *store; /* its saving state (runtime/prefix_store.c), or NULL */
  struct threadpool *load_pool; /* while binding only: the workers converting and quantizing rows */
  void *load_buf;               /* while binding only: one conversion buffer reused for every tensor */
  size_t load_buf_bytes;        /* (model/bind.c; freed by model_load.c with load_pool) */
};

/* What a family file provides (model/qwen2.c, model/qwen3.c). */
struct family_ops {
  const char *name;
  /* Binds and uploads every tensor (quantizing per dtype). */
  int (*bind)(struct hearth_model *m, const struct st_set *st, enum hearth_dtype dtype,
              struct hearth_err *err);
  /* Enqueues the forward pass of a batch whose ids are in scratch.ids and whose batch tables are
   * uploaded; leaves n_out rows of logits in scratch.logits (or final hidden states in
   * scratch.sel when want_hidden). Only enqueues device work, so it can be graph-captured. */
  void (*forward)(struct hearth_model *m, struct hb_batch *b, int want_hidden);
};

extern const struct family_ops family_qwen2, family_qwen3, family_gemma4;
#endif
