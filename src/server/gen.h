/* server/gen.h — what chat completions and completions share: the sampling parameters of a
 * request, submitting it to the engine, and reading its tokens back as text.
 *
 * One HTTP request becomes n_prompts x n engine requests ("choices"), submitted all or none.
 * Choice k = p * n + j generates for prompt p with seed + j * 0x9E3779B97F4A7C15, so choice 0 of a
 * request with n > 1 is the same as the request with n = 1 and the same seed. Usage counts each
 * prompt once and every choice's completion tokens (as OpenAI does).
 *
 * The reader runs on the connection's thread: it detokenizes incrementally (complete UTF-8 only),
 * holds back text that could be the start of a stop string so a stop string split across tokens is
 * never leaked, stops the engine when a stop string appears, and notices a vanished client.
 */
#ifndef HEARTH_SERVER_GEN_H
#define HEARTH_SERVER_GEN_H

#include <jansson.h>

#include "server/engine.h"
#include "server/http.h"
#include "server/sbuf.h"
#include "server/textio.h"
#include "server/validate.h"

#define GEN_MAX_N 16        /* "n": choices per prompt */
#define GEN_MAX_CHOICES 1024 /* prompts x n in one request (label scoring of many records; see README) */

struct gen_opts {
  int stream, include_usage;
  int max_tokens;               /* -1 = until the context is full; 0 = score the prompt only */
  int n;                        /* choices per prompt, 1..GEN_MAX_N */
  int echo;                     /* completions: prepend the prompt (and its logprobs) */
  const char *prompt_param;     /* "messages" or "prompt": the field a too-long prompt names */
  const char *stop[V_MAX_STOP]; /* point into the request JSON */
  int n_stop;
  int logprobs;                 /* 1: per-token logprobs */
  int top_logprobs;             /* alternatives per token */
  int ignore_eos;
  struct hearth_sampling sampling;
  int n_bias;
  int32_t bias_id[300];
  float bias[300];
  /* constrained decoding (chat): GEN_JSON_OBJECT, GEN_TOOL_CALL naming one of tool_names (pointing
   * into the request JSON; with schema set, the one function whose arguments follow it), GEN_JSON_SCHEMA
   * following schema (pointing into the request JSON, known to compile: json_schema.h); GEN_FREE = none */
  enum gen_constrain { GEN_FREE, GEN_JSON_OBJECT, GEN_TOOL_CALL, GEN_JSON_SCHEMA } constrain;
  json_t *schema;
  const struct jvocab *jv;
  const char *tool_names[JPROG_MAX_NAMES];
  int n_tool_names;
  /* completions "labels": every choice also scores these token sequences after its prompt
   * (engine.h: gen_req.n_labels); owned by the caller, 0 = none */
  int n_labels;
  const int32_t *lab_tok;
  const int *lab_off;      /* [n_labels + 1] */
};

/* Reads the fields both endpoints share. chat: max_completion_tokens|max_tokens (default:
 * unbounded), logprobs bool + top_logprobs 0..20; otherwise max_tokens (default 16; 0 only with
 * echo), logprobs as an integer 0..5 and echo. n: 1..GEN_MAX_N. Returns 0 or -1 with *e filled. */
int gen_parse(json_t *body, int chat, struct gen_opts *o, struct verr *e);

struct gen_reader {
  struct gen_req *q;
  const struct textio *tio;
  struct textio_detok *dt;
  const char *stop[V_MAX_STOP];
  int n_stop;
  size_t max_stop;
  struct sbuf pending;     /* decoded text held back (may begin a stop string) */
  int n_taken;             /* tokens consumed = completion_tokens */
  int n_prompt, n_cached;
  struct http_watch watch; /* the client (disconnect check, from the connection's thread) */
  int index;               /* the choice's index in the response */
  int reported;            /* the endpoint's flag: this choice's end has been sent */
  int done;
  const char *finish;      /* "stop" | "length" once done; NULL with errmsg on failure */
  char errmsg[600];
  unsigned err_status;     /* on failure: the HTTP status (500; 503 when the server shuts down) */
  const char *err_code;    /* on failure: the error object's code */
  /* tokens taken by the last gen_reader_next */
  struct gen_event ev[64];
  int n_ev;
};

/* A prompt as token ids; the caller keeps ownership. */
struct gen_prompt {
  int32_t *ids;
  int n;
};

/* Why a request failed before its first token, as an HTTP error reply before a response has
 * started, or as an error event ending a stream that has (server/stream_load.h). */
struct gen_fail {
  unsigned status;
  char param[64];            /* "" = none (JSON null) */
  const char *code;          /* NULL or a static string */
  char msg[600];
};
/* Fills f (msg printf-style). Returns -1. */
int gen_fail_set(struct gen_fail *f, unsigned status, const char *param, const char *code,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* 400 naming e->param, as http_reply_verr answers. Returns -1. */
int gen_fail_verr(struct gen_fail *f, const struct verr *e);
/* Queues f as the reply. */
enum MHD_Result gen_fail_reply(struct http_req *r, const struct gen_fail *f);
/* Appends f as an OpenAI error event, then [DONE]. Returns 0 or -1 on OOM. */
int gen_fail_event(struct sbuf *out, const struct gen_fail *f);

/* Validates the prompt lengths and the choice count, submits n_prompts x o->n requests (all or
 * none) and sets up g[0 .. n_prompts * o->n), which the caller allocated, each watching the client
 * as watch says (http_watch_init of the request, with o->stream). With o->echo and o->logprobs the
 * engine also scores the prompt tokens. On failure fills f (400 context_length_exceeded or naming
 * "n", 503 busy, 500), leaves every g[k] safe to gen_reader_free, and returns -1. */
int gen_start(struct srv_model *m, const struct gen_prompt *prompts, int n_prompts,
              const struct gen_opts *o, const struct http_watch *watch, struct gen_reader *g,
              struct gen_fail *f);
/* Streams: waits up to timeout_ms until one of g[0..n) not yet reported has tokens or has
 * finished, watching the client every 20 ms. Returns 1 when one has, 0 on timeout, -1 when the
 * client has gone (all are told to stop), 2 when the caller should write a probe now (an SSE
 * comment: the client's input ended, see http_watch). */
int gen_wait_any(struct gen_reader *g, int n, int timeout_ms);
/* Waits up to timeout_ms for tokens; appends released text to text and leaves the consumed tokens
 * in g->ev[0..g->n_ev). timeout_ms 0 polls. Returns 0 while running, 1 when done (g->finish or
 * g->errmsg set), -1 when the client has gone (the engine is told to stop). A non-streamed
 * reader watches the client on every call and every 20 ms of waiting, so a vanished client's
 * work stops at the engine's next step however fast tokens arrive. */
int gen_reader_next(struct gen_reader *g, int timeout_ms, struct sbuf *text);
/* The prompt-token logprobs of a finished or producing choice: NULL when not asked for or not
 * (yet) available. Entry i >= 1 scores prompt token i; entry 0 is unused. */
const struct gen_event *gen_reader_prompt_logprobs(const struct gen_reader *g);
/* The prompt token ids of g's request. */
const int32_t *gen_reader_prompt(const struct gen_reader *g);
/* Cancels the request if still running and frees everything. */
void gen_reader_free(struct gen_reader *g);

/* OpenAI logprob entry for one token: {token, logprob, bytes, top_logprobs:[...]} (chat form). */
json_t *gen_logprob_chat(const struct textio *tio, const struct gen_event *ev, int with_top);
/* A fresh id like "chatcmpl-<hex>". */
void gen_id(char *buf, size_t n, const char *prefix);
/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":{cached_tokens}}
 * over the choices g[0..n), n_per choices per prompt (each prompt counted once). */
json_t *gen_usage(const struct gen_reader *g, int n, int n_per);

#endif
