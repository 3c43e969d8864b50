/* server/engine.h — the engine thread of one generative model: a bounded request queue and
 * continuous batching over a pool of sessions.
 *
 * Connection threads build a struct gen_req (prompt tokens + sampling), submit it, and read the
 * tokens the engine appends to it. The engine thread alone touches the model: each step it admits
 * queued requests into free slots, evaluates a chunk of every new prompt with hearth_session_sync
 * (the slot's session is chosen for the longest common prefix, so a repeated system prompt is not
 * recomputed), then decodes one token for every running sequence in one hearth_sessions_step,
 * samples, and appends the token (with its logprobs when asked) to the request. A request whose
 * cancel flag is set (client gone, or the reader saw a stop string) is dropped at the next step and
 * its slot returns to the pool. A row of logits holding a NaN or an infinity (the model's numbers
 * overflowed) ends its request with GEN_FIN_ERROR and a message saying so, instead of being
 * sampled (a NaN would beat a constraint mask's -inf; an argmax over NaNs is token 0).
 *
 * A request whose prompt shares full KV blocks with a prompt another slot is still prefilling waits
 * (stays unprepared) until that slot has evaluated and keyed those blocks, then attaches them from
 * the prefix cache: requests that arrive together compute their common prefix once. A leader never
 * waits itself, and one released (done, cancelled, failed) stops being waited for, so no wait cycle
 * or orphan wait exists; running decodes keep their token per step meanwhile.
 *
 * Label scoring (q->n_labels): once the prompt is evaluated, each label's log-probability is the sum
 * over its tokens by teacher forcing: the first from the prompt's last logits, the others from one
 * forward pass of the label's leading tokens (hearth_session_peek_logits, dropped again). A token's
 * logits do not depend on what else is in its forward pass (the kernels are row-invariant), so the
 * scores are the same alone, in a batch and beside other traffic.
 *
 * A request may also ask for the logprobs of its prompt tokens (completions with echo): the
 * engine then evaluates the prompt from position 0 (no prefix reuse), 32 positions per forward pass
 * with every position's logits, and fills q->pev before the first generated token is appended. max_tokens 0 ends the request right after
 * the prompt (scoring only).
 *
 * Lifetime: a gen_req is reference counted; the submitter and the engine each hold a reference.
 */
#ifndef HEARTH_SERVER_ENGINE_H
#define HEARTH_SERVER_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hearth.h"
#include "server/json_mask.h"

#define GEN_MAX_TOP 20

struct engine;

struct gen_event {
  int32_t id;
  float logprob;                 /* valid when the request asked for logprobs */
  int n_top;
  int32_t top_id[GEN_MAX_TOP];   /* most likely first */
  float top_lp[GEN_MAX_TOP];
};

enum gen_finish {
  GEN_RUNNING = 0,
  GEN_FIN_EOS,        /* an end-of-sequence token was sampled (it is the last event) */
  GEN_FIN_LENGTH,     /* max_tokens or the context limit */
  GEN_FIN_CANCELLED,  /* the reader set cancel */
  GEN_FIN_ERROR,      /* see errmsg */
};

struct gen_req {
  /* input: set before engine_submit, read-only afterwards */
  int32_t *prompt;               /* owned, malloc'd */
  int n_prompt;                  /* >= 1 */
  struct hearth_sampling sampling;
  int max_tokens;                /* >= 0; 0 = evaluate the prompt only (finishes GEN_FIN_LENGTH) */
  int ignore_eos;
  int top_logprobs;              /* -1: no logprobs; 0..GEN_MAX_TOP: also the top alternatives */
  int n_bias;                    /* logit_bias entries */
  int32_t *bias_id;              /* owned */
  float *bias;                   /* owned */
  const struct jvocab *jv;       /* constrained decoding (json_mask.h): the vocabulary as bytes, not
                                    owned; with prog */
  struct jprog *prog;            /* owned (jprog_free); NULL = free text */
  struct gen_event *pev;         /* owned; NULL or [n_prompt]: prompt-token logprobs. pev[i] scores
                                    prompt[i] given prompt[0..i) (i >= 1; pev[0] is unused), with
                                    top_logprobs alternatives. Written by the engine before it
                                    appends the first event or finishes; read it after that. */
  int n_labels;                  /* label scoring (completions "labels"): 0 = none */
  int32_t *lab_tok;              /* owned: the labels' tokens, one after another */
  int *lab_off;                  /* owned: [n_labels + 1] label i is lab_tok[lab_off[i] .. lab_off[i+1]) */
  double *lab_lp;                /* owned: [n_labels] log p(label i | prompt), the sum over its tokens by
                                    teacher forcing; written by the engine before it appends the first
                                    event or finishes (as pev) */
  /* output: guarded by mu; the engine appends, the reader copies with gen_req_take */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct gen_event *ev;
  int n_ev, cap_ev;
  enum gen_finish finish;
  char errmsg[600];
  int n_cached;                  /* prompt tokens found in the slot's session (prefix reuse) */
  /* control */
  atomic_int cancel;             /* set by the reader: stop generating */
  atomic_int refs;
};

/* A zeroed request with one reference, or NULL on OOM. */
struct gen_req *gen_req_new(void);
void gen_req_unref(struct gen_req *q);
/* Copies up to max events starting at index from into out, waiting up to timeout_ms when there is
 * nothing new and the request is still running. Returns the number copied; *fin gets the finish
 * state (GEN_RUNNING while more may come). Called by the reader's thread only. */
int gen_req_take(struct gen_req *q, int from, struct gen_event *out, int max, int timeout_ms,
                 enum gen_finish *fin);

/* 1 when the request has more than from events or has finished, waiting up to timeout_ms for
 * that (0 = just look); consumes nothing. */
int gen_req_ready(struct gen_req *q, int from, int timeout_ms);

struct engine_params {
  int n_slots;     /* sequences decoded together */
  int n_ctx;       /* tokens per sequence */
  int max_queue;   /* waiting requests before engine_submit refuses */
  int prefill_chunk; /* tokens per engine step (decode tokens + prompt chunks); 0 = by backend
                        (engine_default_prefill_chunk) */
  int speculate;     /* 0: off; K in 1..HEARTH_SPEC_MAX: plain greedy requests draft up to K tokens by prompt
                        lookup (hearth_sessions_step_spec) where the backend can (info->can_speculate); the
                        server's default is HEARTH_SPEC_DEFAULT on every backend (on CUDA a sequence whose drafts
                        all fail costs under 0.5 % since session 41: bench/RESULTS.md) */
  int speculate_width; /* the most decoding sequences a speculative step may hold; 0 = 1: on this CPU a verify
                          beside other sequences cost more than it saved (bench/RESULTS.md, batch 8) */
};

struct engine_stats {
  int n_slots, n_busy, n_queued;
  unsigned long n_done, n_cancelled, n_errors;
  unsigned long n_prompt_tokens, n_cached_tokens, n_gen_tokens;
  unsigned long n_steps;       /* engine steps (one forward of many sessions each) */
  unsigned long n_steps_split; /* steps that failed together and were run again a session at a time */
  unsigned long n_spec_steps, n_spec_drafted, n_spec_accepted; /* speculative steps; draft tokens; taken */
};

/* Longest label, in tokens (its continuation is scored in one forward pass with every position's logits). */
#define GEN_MAX_LABEL_TOKENS 32

/* The prefill budget per engine step when none is given: large where a forward pass of thousands of
 * tokens is one efficient GEMM (CUDA), 512 on a CPU (a step there takes ~seconds per thousand tokens,
 * and the decoding sequences wait for it). */
int engine_default_prefill_chunk(const struct hearth_model_info *info);

/* Creates the sessions and starts the engine thread. The model must outlive the engine. */
int engine_new(struct hearth_model *m, const struct engine_params *p, struct engine **out,
               struct hearth_err *err);
/* Stops the thread; queued and running requests finish as GEN_FIN_CANCELLED and later submits
 * are refused. The engine stays valid for engine_submit/engine_stats until engine_free. */
void engine_shutdown(struct engine *e);
/* engine_shutdown, then frees everything. */
void engine_free(struct engine *e);
/* Queues q (takes a reference). Returns 0, or HEARTH_ERR_CTX_FULL when the queue is full (503),
 * HEARTH_ERR_ARG when the prompt does not fit n_ctx. Thread-safe. */
int engine_submit(struct engine *e, struct gen_req *q, struct hearth_err *err);
/* Queues all n requests or none (the choices of one HTTP request): HEARTH_ERR_CTX_FULL when fewer
 * than n queue places are free, HEARTH_ERR_ARG when one of them is invalid. Thread-safe. */
int engine_submit_many(struct engine *e, struct gen_req *const *qs, int n, struct hearth_err *err);
/* The queue capacity (engine_params.max_queue). */
int engine_max_queue(const struct engine *e);
void engine_stats(struct engine *e, struct engine_stats *st);

#endif
