/* server/embed_queue.h — concurrent /v1/embeddings requests share forward passes.
 *
 * Each request submits its tokenized inputs and waits. No thread of its own: the first waiting
 * request thread that finds no round running becomes the leader, gathers pending inputs of every
 * request (longest first within each, requests taken in turn) up to a round of EMBQ_ROUND_TOKENS,
 * runs them through one hearth_embed_batch call (packed passes), hands out the results and steps
 * down; the next round is led by whichever waiter wakes first. A request's embeddings do not
 * depend on the company it had (hearth_embed_batch is batch-invariant).
 *
 * Isolation: a request whose client is gone (its `gone` hook) loses its inputs not yet run; a
 * round is cancelled only when every request in it is gone. A round that fails for another reason
 * is run again request by request, so one request's failure is not another's. */
#ifndef HEARTH_SERVER_EMBED_QUEUE_H
#define HEARTH_SERVER_EMBED_QUEUE_H

#include <pthread.h>
#include <stdint.h>

#include "hearth.h"

/* Tokens one round takes at most (at least one input): large enough to fill several passes with
 * like-length inputs, small enough that a new request waits for at most one round; and never less
 * than one whole pass of the model (16,384 tokens on CUDA: rounds of 8,192 made W6's passes half
 * full, ~7,870 tokens, bench/RESULTS.md session 29). */
enum { EMBQ_ROUND_TOKENS = 8192 };

struct embq_req {
  /* set by the submitter; read-only while queued */
  int n;                        /* inputs */
  const int32_t *const *tokens; /* [n] */
  const int *lens;              /* [n] */
  float *out;                   /* [n * n_embd]: input i's vector at out[i * n_embd] */
  int (*gone)(void *arg);       /* non-zero: drop this request (polled by the leader); may be NULL */
  void *gone_arg;
  /* the queue's */
  int *order;                   /* inputs longest first (like lengths share passes across rounds) */
  int next;                     /* inputs of order[] handed to rounds */
  int n_done;
  int finished;
  int rc;                       /* 0, HEARTH_ERR_CANCELLED (gone), or the failing call's status */
  struct hearth_err err;
  struct embq_req *link;
};

struct embed_queue;

int embq_new(struct hearth_model *m, struct embed_queue **out, struct hearth_err *err);
/* No request may be in flight. */
void embq_free(struct embed_queue *q);

/* Computes r's embeddings with whatever else is queued; blocks until r is finished and returns
 * r->rc (r->err holds the message). Safe to call from any number of threads at once. */
int embq_run(struct embed_queue *q, struct embq_req *r);

/* Rounds and forward passes run since creation (for /v1/models and tests). */
void embq_counts(struct embed_queue *q, unsigned long *rounds, unsigned long *passes, unsigned long *shared);

#endif
