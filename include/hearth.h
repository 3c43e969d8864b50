/* hearth.h — the one public header of the hearth inference library.
 *
 * Two objects:
 *   hearth_model    a loaded, quantized checkpoint plus its backend. Weights are immutable after
 *                   load; the model also owns the pool of KV blocks its sessions draw from (the pool
 *                   is internally locked, so several sessions may live on one model).
 *   hearth_session  one timeline: the tokens it has seen, the KV blocks that hold them, and the
 *                   logits of its last position. The primitive is "sync to this full token prefix":
 *                   the session keeps the longest common prefix it already has and evaluates the rest,
 *                   so prefix reuse is a property of the API, not a server trick.
 *
 * Errors: every fallible function returns 0 or a negative HEARTH_ERR_* code and fills the
 * caller's struct hearth_err with a message naming the file, tensor, field or argument.
 * The library never exits the process. Unless stated otherwise an object is left unchanged by a
 * failing call. A session is used from one thread at a time; distinct sessions of one model may be
 * used from distinct threads only through hearth_sessions_step (one forward pass at a time per model).
 */
#ifndef HEARTH_H
#define HEARTH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum hearth_status {
  HEARTH_OK = 0,
  HEARTH_ERR_IO = -1,          /* a file could not be opened, read or mapped */
  HEARTH_ERR_FORMAT = -2,      /* malformed checkpoint, JSON or tokenizer data */
  HEARTH_ERR_UNSUPPORTED = -3, /* well-formed but not something hearth implements */
  HEARTH_ERR_NOMEM = -4,       /* host or device allocation failed */
  HEARTH_ERR_ARG = -5,         /* a caller-supplied argument is out of range */
  HEARTH_ERR_BACKEND = -6,     /* the compute backend failed (e.g. CUDA error, no GPU) */
  HEARTH_ERR_CTX_FULL = -7,    /* the session or KV pool has no room for more tokens */
  HEARTH_ERR_CANCELLED = -8,   /* the operation was cancelled by the caller */
};

struct hearth_model;   /* opaque */
struct hearth_session; /* opaque */

struct hearth_err {
  int code;
  char msg[512];
};

/* ---- models ----------------------------------------------------------------------- */

enum hearth_dtype {
  HEARTH_DTYPE_INT4 = 0, /* symmetric int4, group 128, fp16 scale per group (the default) */
  HEARTH_DTYPE_BF16 = 1, /* weights as stored (bf16), computed in f32 */
  HEARTH_DTYPE_F32 = 2,  /* weights widened to f32, computed in f32: the exact reference path */
};

enum hearth_backend_kind {
  HEARTH_BACKEND_CPU = 0,
  HEARTH_BACKEND_CUDA = 1,
};

struct hearth_model_params {
  const char *path;              /* Hugging Face model directory */
  enum hearth_dtype dtype;       /* default HEARTH_DTYPE_INT4 */
  enum hearth_backend_kind backend;
  int n_threads;                 /* CPU threads; 0 = all online cores */
  int kv_tokens;                 /* KV pool capacity in tokens over all sessions; 0 = 8192 */
  int kv_seqs;                   /* sessions expected to hold KV at once; sizes a model's sliding-window pool
                                    (Gemma 4: window-bounded KV per session, docs/decisions.md); 0 = unknown:
                                    that pool gets as many blocks as the main one; < 0: no such pool, every
                                    position kept in every layer (the layout of before, for comparisons) */
  int verbose;                   /* print the memory plan on load */
  const char *kv_cache_dir;      /* persist shared KV prefixes here across runs; NULL = memory only */
  int exact;                     /* 1: reference kernels only (int4 with f32 activations, no
                                    activation quantization): the path tested for exact parity */
  int embedding;                 /* 1: load as an embedding model whatever config.json's architecture
                                    says (no LM head is bound); also implied by a sentence-transformers
                                    modules.json with a Pooling module, which sets the pooling */
};

/* How an embedding model turns hidden states into one vector (always L2-normalised after). */
enum hearth_pooling {
  HEARTH_POOL_LAST = 0, /* the last token's (Qwen3-Embedding; the default) */
  HEARTH_POOL_MEAN = 1, /* the mean over every token */
  HEARTH_POOL_CLS = 2,  /* the first token's */
};

enum hearth_family {
  HEARTH_FAMILY_QWEN2 = 0,
  HEARTH_FAMILY_QWEN3 = 1,
  HEARTH_FAMILY_GEMMA4 = 2,
};

struct hearth_model_info {
  enum hearth_family family;
  const char *family_name;  /* "qwen2", "qwen3", ... */
  const char *arch;         /* architectures[0] from config.json */
  int is_embedding;         /* 1: no LM head; use hearth_session_embed */
  int n_vocab;              /* rows of the LM head / embedding table */
  int n_embd;               /* hidden size */
  int n_layer;
  int n_head, n_head_kv, head_dim;
  int n_ff;
  int n_ctx_train;          /* max_position_embeddings */
  int bos_id;               /* -1 when none */
  int n_eos;                /* stop ids from config.json and generation_config.json */
  int eos_ids[8];
  enum hearth_dtype dtype;
  enum hearth_backend_kind backend;
  const char *kernels;      /* the kernel set that runs: CPU "avx512-vnni", "avx2" or "scalar"; "cuda" */
  uint64_t n_params;        /* parameters of the text model */
  uint64_t weight_bytes;    /* bytes of weights held by the backend */
  uint64_t weight_bytes_per_token; /* bytes a decode step must read (tied table counted once) */
  uint64_t kv_bytes;        /* bytes of the KV pool */
  int kv_block_tokens;      /* tokens per KV block */
  int kv_blocks;            /* blocks in the pool */
  int max_seqs;             /* sessions one hearth_sessions_step* call (one forward) may hold */
  int max_batch_tokens;     /* tokens one forward may hold (hearth_embed_batch's pass) */
  int can_speculate;        /* 1: a forward of several tokens gives each row the bits of one-token steps, so
                               hearth_sessions_step_spec drafts (CPU; CUDA for the Qwen families, one session a
                               step); 0: it decodes plainly */
  enum hearth_pooling pooling; /* embedding models: how hearth_session_embed pools */
};

void hearth_model_params_default(struct hearth_model_params *p);

/* Loads the checkpoint at p->path: validates config.json and every safetensors header, binds the
 * family's tensors, quantizes as p->dtype asks and uploads to the backend. On success *out owns
 * everything; the safetensors mappings are released before return. */
int hearth_model_load(const struct hearth_model_params *p, struct hearth_model **out,
                      struct hearth_err *err);
void hearth_model_free(struct hearth_model *m);
/* With kv_cache_dir: blocks new to the prefix cache are saved off the request path. This reads up to about
 * max_blocks of those still waiting back from the backend and hands them to the writer thread (a server calls it
 * when it is idle; hearth_model_free saves the rest). Returns how many still wait; 0 without kv_cache_dir. */
int hearth_model_store_flush(struct hearth_model *m, int max_blocks);
const struct hearth_model_info *hearth_model_info(const struct hearth_model *m);
/* Runs the request path's kernels once on synthetic tokens (prefill, decode, scored and row-invariant steps;
 * embeddings) so that a GPU backend's lazy module loading, scratch allocations and graph captures happen now
 * rather than in the first request; nothing of it enters the prefix cache. A no-op on the CPU backend. */
int hearth_model_warm_up(struct hearth_model *m, struct hearth_err *err);

/* ---- sessions ---------------------------------------------------------------------- */

struct hearth_session_params {
  int n_ctx; /* the most tokens this session may hold; 0 = min(kv pool, n_ctx_train) */
};

int hearth_session_new(struct hearth_model *m, const struct hearth_session_params *p,
                       struct hearth_session **out, struct hearth_err *err);
void hearth_session_free(struct hearth_session *s);

/* Makes the session hold exactly tokens[0..n): keeps the longest common prefix with what it holds,
 * drops the rest, evaluates the remainder in batched prefill and leaves the logits of position n-1
 * in hearth_session_logits. n must be >= 1. If nothing new is evaluated (tokens equal the held
 * prefix) the last position is re-evaluated so that logits are always current.
 * On error the session holds some prefix of tokens (possibly empty). */
int hearth_session_sync(struct hearth_session *s, const int32_t *tokens, int n,
                        struct hearth_err *err);
/* The first half of hearth_session_sync, for batching prefill with other sessions' work: keeps
 * the longest common prefix with tokens[0..n), takes further full blocks from the model's prefix
 * cache, evaluates nothing, and returns how many leading tokens the session now holds (< n, so at
 * least the last token is left to evaluate) or a negative status. Pass the rest, in chunks if
 * wanted, to hearth_sessions_step. */
int hearth_session_prepare(struct hearth_session *s, const int32_t *tokens, int n,
                           struct hearth_err *err);
/* Tokens the last prepare/sync did not have to evaluate (held prefix plus cached blocks): the
 * `cached_tokens` of an OpenAI usage report. */
int hearth_session_n_reused(const struct hearth_session *s);
/* on = 1: every forward pass this session takes part in runs the backend's row-invariant kernels, so that
 * its tokens' logits and hidden states are bit-identical whatever else shares the pass (label scores,
 * embeddings; the CPU backend always is; on CUDA the forward is slower for small batches). Its full blocks are
 * cached under keys of their own. Changing the mode empties the session. */
void hearth_session_set_row_invariant(struct hearth_session *s, int on);
/* Appends tokens and evaluates them (= sync to held + tokens). */
int hearth_session_append(struct hearth_session *s, const int32_t *tokens, int n,
                          struct hearth_err *err);
/* Like hearth_session_append, and writes the logits of every appended position to
 * logits[i * n_vocab] (i < n; position i's distribution over the token after it): prompt scoring
 * in batched forward passes instead of one position at a time. */
int hearth_session_append_logits(struct hearth_session *s, const int32_t *tokens, int n, float *logits,
                                 struct hearth_err *err);
/* Teacher forcing without keeping the tokens: evaluates tokens[0..n) after what the session holds,
 * writes every position's logits to logits[i * n_vocab] as hearth_session_append_logits does, then
 * drops them again (the session holds what it held before; they never enter the prefix cache).
 * hearth_session_logits is NULL afterwards. Label scoring: log p(label | prompt), token by token. */
int hearth_session_peek_logits(struct hearth_session *s, const int32_t *tokens, int n, float *logits,
                               struct hearth_err *err);
int hearth_session_n_tokens(const struct hearth_session *s);
const int32_t *hearth_session_tokens(const struct hearth_session *s);
/* Logits [n_vocab] f32 of the last evaluated position; NULL before the first evaluation or for
 * embedding models. Valid until the next call on this session. */
const float *hearth_session_logits(const struct hearth_session *s);

/* One forward pass over several sessions: appends tokens[i][0..n_tokens[i]) to sessions[i] for every
 * i and computes each session's last-position logits. This is the continuous-batching primitive. */
int hearth_sessions_step(struct hearth_session **sessions, int n_sessions,
                         const int32_t *const *tokens, const int *n_tokens, struct hearth_err *err);

/* Like hearth_sessions_step, for greedy decoding: writes each session's argmax (lowest id on ties)
 * to ids[i] and its log-probability to logprobs[i] (either may be NULL); ids[i] is -1 when that
 * row of logits holds a NaN or an infinity (on the host and on the device alike). Backends that select on
 * the device bring back only these; hearth_session_logits is then NULL until the next step. */
int hearth_sessions_step_greedy(struct hearth_session **sessions, int n_sessions,
                                const int32_t *const *tokens, const int *n_tokens, int32_t *ids,
                                float *logprobs, struct hearth_err *err);

/* ---- prompt-lookup speculation (runtime/speculate.c) ----
 * Greedy decoding that drafts up to k tokens by matching the last n-gram of a session's tokens against its earlier
 * tokens (prompt and output), evaluates the pending token and the draft in one forward and keeps the longest
 * prefix on which the draft agrees with the argmax. The ids and logprobs are bit-identical to one
 * hearth_sessions_step_greedy per token; only on backends with info->can_speculate (otherwise nothing is drafted).
 * A sequence whose drafts keep failing waits longer and longer before it drafts again. */
#define HEARTH_SPEC_MAX 8
#define HEARTH_SPEC_DEFAULT 8 /* the CLI's and server's draft length unless told (bench/RESULTS.md) */
struct hearth_spec; /* one sequence's drafting state */
/* max_draft in 1..HEARTH_SPEC_MAX: the longest draft */
int hearth_spec_new(int max_draft, struct hearth_spec **out, struct hearth_err *err);
void hearth_spec_free(struct hearth_spec *sp);
/* Forgets the backoff and any draft carried to the next step (a new request in the same sequence slot); the counters
 * stay. */
void hearth_spec_reset(struct hearth_spec *sp);
/* verify forwards run, tokens drafted, drafted tokens accepted (on CUDA a draft whose first token a plain step
 * rejected first, speculate.c, is in none of them) */
void hearth_spec_counts(const struct hearth_spec *sp, uint64_t *verifies, uint64_t *drafted, uint64_t *accepted);
/* One greedy step of n sessions: session i evaluates pending[i] (plus a draft) and gives n_ids[i] >= 1 tokens in
 * ids[i * (HEARTH_SPEC_MAX + 1) + j] (logprobs likewise, may be NULL); the session then holds pending[i] and the
 * accepted draft, n_ids[i] tokens more than before, and ids[..n_ids[i] - 1] is its next pending token. At most
 * want[i] >= 1 ids are given (want NULL: 1, no draft), and none past the session's n_ctx. An id of -1 (a row with
 * a NaN or an infinity) ends the session's ids. sp[i] NULL: no draft for session i. */
int hearth_sessions_step_spec(struct hearth_session **sessions, int n_sessions, const int32_t *pending,
                              struct hearth_spec *const *sp, const int *want, int32_t *ids, float *logprobs,
                              int *n_ids, struct hearth_err *err);

/* hearth_sessions_step with the choice made per session: greedy[i] != 0 selects as
 * hearth_sessions_step_greedy does (ids[i], logprobs[i]; no logits), greedy[i] == 0 leaves session i's
 * logits for hearth_session_logits (ids[i] / logprobs[i] untouched). When every session is greedy only the
 * ids and logprobs leave the device. greedy == NULL: all greedy. */
int hearth_sessions_step_select(struct hearth_session **sessions, int n_sessions,
                                const int32_t *const *tokens, const int *n_tokens, const uint8_t *greedy,
                                int32_t *ids, float *logprobs, struct hearth_err *err);

/* What a step brings back of one session's row of logits when the caller needs more than its argmax but
 * not the whole row (hearth_sessions_step_scored): logprobs (log-softmax, computed with a double log-sum-exp)
 * of the argmax, of the k most likely tokens and of up to HEARTH_SCORE_IDS given ids. A backend that holds
 * its logits on a device computes them there, so that a few hundred bytes cross the bus instead of the row. */
#define HEARTH_SCORE_TOPK 20
#define HEARTH_SCORE_IDS 16
struct hearth_row_score {
  int k;                          /* in: alternatives wanted, 0..HEARTH_SCORE_TOPK */
  int n_ids;                      /* in: entries of ids, 0..HEARTH_SCORE_IDS */
  int32_t ids[HEARTH_SCORE_IDS];  /* in: ids in [0, n_vocab) */
  int32_t id;                     /* out: the argmax (lowest id on ties); -1 when the row holds a NaN or an
                                   * infinity, and then nothing below is set */
  double logprob;                 /* out: id's */
  int n_top;                      /* out: min(k, n_vocab) */
  int32_t top_id[HEARTH_SCORE_TOPK]; /* out: by logit descending, lower id first on ties */
  double top_lp[HEARTH_SCORE_TOPK];
  double id_lp[HEARTH_SCORE_IDS]; /* out: the logprob of ids[j] */
};

/* hearth_sessions_step_select, where session i with scores[i] != NULL (scores itself may be NULL) is scored:
 * *scores[i] is filled (its in-fields read), ids[i] / logprobs[i] get its argmax as for a greedy session, and
 * hearth_session_logits is NULL until the next step. Scores are per row: a session's scores do not depend on
 * the other sessions of the step beyond what its logits do. */
int hearth_sessions_step_scored(struct hearth_session **sessions, int n_sessions, const int32_t *const *tokens,
                                const int *n_tokens, const uint8_t *greedy, struct hearth_row_score *const *scores,
                                int32_t *ids, float *logprobs, struct hearth_err *err);

/* A sampled session's next token, drawn where its logits are (hearth_sessions_step_sampled). */
struct hearth_sample_req {
  struct hearth_sampler *smp; /* the request's sampler: its parameters, seeded RNG and prompt */
  const int32_t *history;     /* the tokens generated so far, for the penalties (as hearth_sampler_sample) */
  int n_history;
};

/* hearth_sessions_step_scored, where session i with samples[i] != NULL (samples itself may be NULL; not together
 * with scores[i]) has its next token drawn for it: ids[i] = what hearth_sampler_sample(samples[i]->smp, its
 * logits, history, n_history) returns, the sampler's RNG left as that call leaves it; -1 (nothing drawn) when the
 * row holds a NaN or an infinity. On a backend that samples (CUDA) only the id leaves the device, except for rows
 * it cannot decide exactly, which are read back and sampled on the host; the session's logits are then not
 * available (hearth_session_logits). logprobs[i] is left as it is for such a session. */
int hearth_sessions_step_sampled(struct hearth_session **sessions, int n_sessions, const int32_t *const *tokens,
                                 const int *n_tokens, const uint8_t *greedy, struct hearth_row_score *const *scores,
                                 const struct hearth_sample_req *const *samples, int32_t *ids, float *logprobs,
                                 struct hearth_err *err);

/* Decode steps enqueued one call ahead (greedy loops on a GPU: docs/decisions.md) that a later call claimed, and
 * that were dropped unused, since the model was loaded. */
void hearth_model_ahead_counts(struct hearth_model *m, uint64_t *claimed, uint64_t *dropped);

/* Registers fn(arg), polled before every forward batch (512 tokens at most) of a call on this one
 * session (embed, sync, append): when it returns non-zero the call stops with HEARTH_ERR_CANCELLED
 * and the session keeps what it held before the call. fn NULL: never. A long embedding input is
 * cancellable this way, so a server can drop work whose client has gone. */
void hearth_session_set_abort(struct hearth_session *s, int (*fn)(void *arg), void *arg);

/* Embedding models: evaluates tokens[0..n) from position 0 (the session is reset), pools the final
 * hidden states as the model's info->pooling says (the last token's by default) and L2-normalises
 * the result into out[0..n_embd). */
int hearth_session_embed(struct hearth_session *s, const int32_t *tokens, int n, float *out,
                         struct hearth_err *err);

/* What hearth_embed_batch did: forward passes run and tokens evaluated. */
struct hearth_embed_stats {
  int n_forwards;
  long long n_tokens;
};

/* Embedding models: embeds n independent inputs tokens[i][0..n_tokens[i]) and writes input i's pooled,
 * L2-normalised vector to out[i * n_embd], bit-identical to hearth_session_embed on that input alone
 * (on the CPU backend; docs/decisions.md, "Batch-invariant embeddings"). Inputs are packed into as few
 * forward passes as fit: longest first, ragged (no padding), none split across passes unless longer
 * than one pass. Needs no session: each pass borrows KV blocks for its sequences only and returns
 * them (a pass is also bounded by the pool's size; the pool must hold the longest input). abort_fn (may be NULL) is polled
 * before every pass; non-zero stops with HEARTH_ERR_CANCELLED. Mean pooling embeds one input at a
 * time. Thread-safe against other calls on the model (passes take the model's forward lock).
 * stats may be NULL. On failure out is partly written and must not be used. */
int hearth_embed_batch(struct hearth_model *m, const int32_t *const *tokens, const int *n_tokens, int n,
                       float *out, int (*abort_fn)(void *arg), void *abort_arg, struct hearth_embed_stats *stats,
                       struct hearth_err *err);

/* ---- sampling ---------------------------------------------------------------------- */

struct hearth_sampling {
  float temperature;        /* 0 = greedy (argmax, lowest id on ties) */
  int top_k;                /* 0 = off */
  float top_p;              /* 1 = off */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off (HF semantics: divide positive logits, multiply negative) */
  float presence_penalty;   /* 0 = off (OpenAI semantics) */
  float frequency_penalty;  /* 0 = off */
  uint64_t seed;
};

void hearth_sampling_default(struct hearth_sampling *p);
/* Whether p picks the argmax of the raw logits: temperature 0 and no penalty that changes them first. Such a
 * token can be chosen where the logits are (hearth_sessions_step_select), and the sampler's greedy path draws
 * nothing from its RNG, so choosing it elsewhere changes no later draw. */
int hearth_sampling_is_plain_greedy(const struct hearth_sampling *p);

struct hearth_sampler; /* seeded RNG + scratch for one request */
int hearth_sampler_new(const struct hearth_sampling *p, int n_vocab, struct hearth_sampler **out,
                       struct hearth_err *err);
void hearth_sampler_free(struct hearth_sampler *s);
/* Chooses the next token from logits[n_vocab]. history (may be NULL) is the tokens generated so far.
 * The repetition penalty applies to the prompt (see hearth_sampler_set_prompt) and history, as in
 * transformers; presence and frequency penalties to history only, as in OpenAI. logits is not
 * modified. */
int32_t hearth_sampler_sample(struct hearth_sampler *s, const float *logits, const int32_t *history,
                              int n_history);

/* The prompt tokens the repetition penalty also covers; the array must outlive the sampler's use. */
void hearth_sampler_set_prompt(struct hearth_sampler *s, const int32_t *prompt, int n_prompt);

/* log-softmax of logits at id (natural log), in f64 accumulation. */
float hearth_logprob(const float *logits, int n_vocab, int32_t id);

/* ---- misc -------------------------------------------------------------------------- */

/* A model directory as given, or a Hugging Face repo id ("Org/Name") found in the local Hub cache
 * ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub; snapshot of refs/main). No downloads. */
int hearth_resolve_model_dir(const char *path_or_repo, char *out, size_t cap, struct hearth_err *err);

const char *hearth_status_name(int code);
const char *hearth_version(void);

#ifdef __cplusplus
}
#endif
#endif
