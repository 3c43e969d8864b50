/* server/embed_queue.c — rounds of hearth_embed_batch over concurrent requests (see the header). */
#include "server/embed_queue.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/prof.h"

struct embed_queue {
  struct hearth_model *m;
  int d;
  long round_tokens;            /* EMBQ_ROUND_TOKENS, or the model's pass when larger */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int leading;                  /* a round is being gathered or run */
  struct embq_req *head, *tail; /* unfinished requests, in turn order */
  unsigned long rounds, passes, shared;
  /* the round's staging, owned by the leader: [cap] */
  int cap;
  const int32_t **tok;
  int *len;
  float *out;
  struct embq_req **owner;
  int *which;                   /* the input's index in its request */
};

int embq_new(struct hearth_model *m, struct embed_queue **out, struct hearth_err *err) {
  struct embed_queue *q = calloc(1, sizeof *q);
  if (!q) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  q->m = m;
  q->d = hearth_model_info(m)->n_embd;
  const int pass = hearth_model_info(m)->max_batch_tokens;
  q->round_tokens = pass > EMBQ_ROUND_TOKENS ? pass : EMBQ_ROUND_TOKENS;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  *out = q;
  return 0;
}

void embq_free(struct embed_queue *q) {
  if (!q) return;
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  free(q->tok);
  free(q->len);
  free(q->out);
  free(q->owner);
  free(q->which);
  free(q);
}

void embq_counts(struct embed_queue *q, unsigned long *rounds, unsigned long *passes, unsigned long *shared) {
  pthread_mutex_lock(&q->mu);
  if (rounds) *rounds = q->rounds;
  if (passes) *passes = q->passes;
  if (shared) *shared = q->shared;
  pthread_mutex_unlock(&q->mu);
}

static int grow(struct embed_queue *q, int n) {
  if (n <= q->cap) return 0;
  int cap = n > 2 * q->cap ? n : 2 * q->cap;
  const int32_t **tok = realloc(q->tok, (size_t)cap * sizeof *tok);
  if (tok) q->tok = tok;
  int *len = realloc(q->len, (size_t)cap * sizeof *len);
  if (len) q->len = len;
  float *out = realloc(q->out, (size_t)cap * q->d * sizeof *out);
  if (out) q->out = out;
  struct embq_req **owner = realloc(q->owner, (size_t)cap * sizeof *owner);
  if (owner) q->owner = owner;
  int *which = realloc(q->which, (size_t)cap * sizeof *which);
  if (which) q->which = which;
  if (!tok || !len || !out || !owner || !which) return -1;
  q->cap = cap;
  return 0;
}

/* with mu held: r leaves the list, finished with rc */
static void finish(struct embed_queue *q, struct embq_req *r, int rc) {
  struct embq_req **pp = &q->head, *prev = NULL;
  while (*pp && *pp != r) { prev = *pp; pp = &(*pp)->link; }
  if (*pp) {
    *pp = r->link;
    if (q->tail == r) q->tail = prev;
  }
  r->rc = rc;
  r->finished = 1;
}

/* the requests of the round being run (for the abort hook, which runs without mu) */
struct round {
  struct embq_req *req[64];
  int n;
};

/* every request of the round is gone: nobody wants its result */
static int round_gone(void *arg) {
  struct round *rd = arg;
  for (int i = 0; i < rd->n; i++)
    if (!rd->req[i]->gone || !rd->req[i]->gone(rd->req[i]->gone_arg)) return 0;
  return 1;
}

/* with mu held: takes inputs of the queued requests, in turn, up to q->round_tokens (and at most 64
 * requests); drops the inputs of gone requests. Returns the inputs staged (0: nothing to do). */
static int gather(struct embed_queue *q, struct round *rd) {
  rd->n = 0;
  int n = 0;
  long tokens = 0;
  for (struct embq_req *r = q->head, *nx; r; r = nx) {
    nx = r->link;
    if (r->gone && r->gone(r->gone_arg)) { /* (no round is running: none of its inputs is in flight) */
      finish(q, r, HEARTH_ERR_CANCELLED);
      continue;
    }
    if (r->next >= r->n || rd->n == 64 || tokens >= q->round_tokens) continue;
    const int had = n;
    while (r->next < r->n && (n == 0 || tokens + r->lens[r->order[r->next]] <= q->round_tokens)) {
      if (grow(q, n + 1)) break;
      int i = r->order[r->next++];
      q->tok[n] = r->tokens[i];
      q->len[n] = r->lens[i];
      q->owner[n] = r;
      q->which[n] = i;
      tokens += q->len[n];
      n++;
    }
    if (n > had) rd->req[rd->n++] = r;
  }
  /* the next round starts with the request after this round's first: requests take turns, so a small
   * request waits for one round of a 2,048-input one, not for all of it */
  if (rd->n > 0 && q->head == rd->req[0] && q->head != q->tail) {
    struct embq_req *h = q->head;
    q->head = h->link;
    h->link = NULL;
    q->tail->link = h;
    q->tail = h;
  }
  return n;
}

/* without mu: runs the staged inputs [0, n); on a failure of a shared round, runs each request's part
 * alone so that the failure stays with the request that causes it. rcs[k] = the status of rd->req[k]. */
static void run_round(struct embed_queue *q, struct round *rd, int n, int *rcs, struct hearth_err *errs) {
  struct hearth_embed_stats st;
  struct hearth_err err = {0};
  const double t0 = prof_now();
  int rc = hearth_embed_batch(q->m, q->tok, q->len, n, q->out, round_gone, rd, &st, &err);
  prof_add(PROF_EMBED_ROUND, t0, n);
  unsigned long passes = rc ? 0 : (unsigned long)st.n_forwards;
  if (rc && rc != HEARTH_ERR_CANCELLED && rd->n > 1) {
    for (int k = 0; k < rd->n; k++) { /* this request's inputs are contiguous in the staging */
      int lo = 0;
      while (q->owner[lo] != rd->req[k]) lo++;
      int hi = lo;
      while (hi < n && q->owner[hi] == rd->req[k]) hi++;
      struct round one = {.req = {rd->req[k]}, .n = 1};
      errs[k].code = 0;
      rcs[k] = hearth_embed_batch(q->m, q->tok + lo, q->len + lo, hi - lo, q->out + (size_t)lo * q->d, round_gone,
                                  &one, &st, &errs[k]);
      if (!rcs[k]) passes += (unsigned long)st.n_forwards;
    }
  } else {
    for (int k = 0; k < rd->n; k++) {
      rcs[k] = rc;
      errs[k] = err;
    }
  }
  pthread_mutex_lock(&q->mu);
  q->rounds++;
  q->passes += passes;
  q->shared += rd->n > 1;
  pthread_mutex_unlock(&q->mu);
}

int embq_run(struct embed_queue *q, struct embq_req *r) {
  r->next = r->n_done = r->finished = r->rc = 0;
  r->err.code = 0;
  r->err.msg[0] = 0;
  r->link = NULL;
  r->order = malloc((size_t)(r->n ? r->n : 1) * sizeof *r->order);
  if (!r->order) {
    r->rc = err_set(&r->err, HEARTH_ERR_NOMEM, "out of memory");
    return r->rc;
  }
  /* longest first (insertion into a stable order would be O(n^2) for 2,048: sort pairs) */
  for (int i = 0; i < r->n; i++) r->order[i] = i;
  for (int gap = r->n / 2; gap > 0; gap /= 2) /* shell sort by (length desc, index asc) */
    for (int i = gap; i < r->n; i++)
      for (int j = i; j >= gap; j -= gap) {
        int a = r->order[j - gap], b = r->order[j];
        if (r->lens[a] > r->lens[b] || (r->lens[a] == r->lens[b] && a < b)) break;
        r->order[j - gap] = b;
        r->order[j] = a;
      }
  pthread_mutex_lock(&q->mu);
  if (r->n == 0) finish(q, r, 0);
  else if (q->tail) q->tail = q->tail->link = r;
  else q->head = q->tail = r;
  while (!r->finished) {
    if (q->leading) {
      pthread_cond_wait(&q->cv, &q->mu);
      continue;
    }
    q->leading = 1;
    struct round rd;
    int n = gather(q, &rd);
    if (n > 0) {
      pthread_mutex_unlock(&q->mu);
      int rcs[64];
      struct hearth_err errs[64];
      run_round(q, &rd, n, rcs, errs);
      pthread_mutex_lock(&q->mu);
      for (int k = 0; k < n; k++) /* results to their requests (a failed request's are never read) */
        memcpy(q->owner[k]->out + (size_t)q->which[k] * q->d, q->out + (size_t)k * q->d, (size_t)q->d * sizeof *q->out);
      for (int k = 0; k < rd.n; k++) {
        struct embq_req *x = rd.req[k];
        int took = 0;
        for (int i = 0; i < n; i++) took += q->owner[i] == x;
        if (rcs[k] == HEARTH_ERR_CANCELLED && !(x->gone && x->gone(x->gone_arg))) {
          x->next -= took; /* cancelled with a round whose others were gone, but still wanted: again */
        } else if (rcs[k]) {
          x->err = errs[k];
          finish(q, x, rcs[k]);
        } else if ((x->n_done += took) == x->n) {
          finish(q, x, 0);
        }
      }
    } else if (!r->finished) { /* nothing could be staged: no memory for the round */
      err_set(&r->err, HEARTH_ERR_NOMEM, "out of memory");
      finish(q, r, HEARTH_ERR_NOMEM);
    }
    q->leading = 0;
    pthread_cond_broadcast(&q->cv);
  }
  pthread_mutex_unlock(&q->mu);
  free(r->order);
  r->order = NULL;
  return r->rc;
}
