/* server/gen.h — what chat completions and completions share: the sampling parameters of a
 * request, submitting it to the engine, and reading its tokens back as text.
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

struct gen_opts {
  int stream, include_usage;
  int max_tokens;               /* 0 = until the context is full */
  const char *stop[V_MAX_STOP]; /* point into the request JSON */
  int n_stop;
  int logprobs;                 /* 1: per-token logprobs */
  int top_logprobs;             /* alternatives per token */
  int ignore_eos;
  struct hearth_sampling sampling;
  int n_bias;
  int32_t bias_id[300];
  float bias[300];
};

/* Reads the fields both endpoints share. chat: max_completion_tokens|max_tokens (default:
 * unbounded), logprobs bool + top_logprobs 0..20; otherwise max_tokens (default 16) and logprobs
 * as an integer 0..5. Returns 0 or -1 with *e filled. */
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
  int fd;                  /* client socket (disconnect check); -1 = none */
  int done;
  const char *finish;      /* "stop" | "length" once done; NULL with errmsg on failure */
  char errmsg[600];
  /* tokens taken by the last gen_reader_next */
  struct gen_event ev[64];
  int n_ev;
};

/* Validates the prompt length, submits, and sets up g. On failure queues the error reply (400
 * context_length_exceeded, 503 busy, 500) into *ret and returns -1. Takes ownership of prompt. */
int gen_start(struct http_req *r, struct srv_model *m, int32_t *prompt, int n_prompt,
              const struct gen_opts *o, struct gen_reader *g, enum MHD_Result *ret);
/* Waits up to timeout_ms for tokens; appends released text to text and leaves the consumed tokens
 * in g->ev[0..g->n_ev). Returns 0 while running, 1 when done (g->finish or g->errmsg set), -1 when
 * the client has gone (the engine is told to stop). */
int gen_reader_next(struct gen_reader *g, int timeout_ms, struct sbuf *text);
/* Cancels the request if still running and frees everything. */
void gen_reader_free(struct gen_reader *g);

/* OpenAI logprob entry for one token: {token, logprob, bytes, top_logprobs:[...]} (chat form). */
json_t *gen_logprob_chat(const struct textio *tio, const struct gen_event *ev, int with_top);
/* A fresh id like "chatcmpl-<hex>". */
void gen_id(char *buf, size_t n, const char *prefix);
/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":{cached_tokens}} */
json_t *gen_usage(const struct gen_reader *g);

#endif
