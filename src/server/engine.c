/* server/engine.c — one engine thread per generative model: queue, slots, continuous batching.
 * See engine.h for the contract. Everything that touches the model runs on the engine thread; the
 * queue and the counters are guarded by e->mu, each request's output by its own q->mu.
 */
#include "server/engine.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/prof.h"

/* ---- requests ---------------------------------------------------------------------- */

struct gen_req *gen_req_new(void) {
  struct gen_req *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  pthread_mutex_init(&q->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&q->cv, &ca);
  pthread_condattr_destroy(&ca);
  q->top_logprobs = -1;
  atomic_init(&q->refs, 1);
  return q;
}

void gen_req_unref(struct gen_req *q) {
  if (!q || atomic_fetch_sub(&q->refs, 1) != 1) return;
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  free(q->prompt);
  free(q->bias_id);
  free(q->bias);
  free(q->pev);
  free(q->ev);
  free(q->lab_tok);
  free(q->lab_off);
  free(q->lab_lp);
  jprog_free(q->prog);
  free(q);
}

static void deadline(struct timespec *ts, int ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) { ts->tv_sec++; ts->tv_nsec -= 1000000000L; }
}

int gen_req_take(struct gen_req *q, int from, struct gen_event *out, int max, int timeout_ms,
                 enum gen_finish *fin) {
  struct timespec ts;
  deadline(&ts, timeout_ms);
  pthread_mutex_lock(&q->mu);
  while (q->n_ev <= from && q->finish == GEN_RUNNING) {
    if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT) break;
  }
  int n = q->n_ev - from;
  if (n < 0) n = 0;
  if (n > max) n = max;
  if (n) memcpy(out, q->ev + from, (size_t)n * sizeof *out);
  /* report the finish only once every event has been taken */
  *fin = (from + n == q->n_ev) ? q->finish : GEN_RUNNING;
  pthread_mutex_unlock(&q->mu);
  return n;
}

int gen_req_ready(struct gen_req *q, int from, int timeout_ms) {
  struct timespec ts;
  deadline(&ts, timeout_ms);
  pthread_mutex_lock(&q->mu);
  while (q->n_ev <= from && q->finish == GEN_RUNNING && timeout_ms > 0) {
    if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT) break;
  }
  int ready = q->n_ev > from || q->finish != GEN_RUNNING;
  pthread_mutex_unlock(&q->mu);
  return ready;
}

/* engine side: append one event and/or finish; wakes the reader */
static int req_push(struct gen_req *q, const struct gen_event *ev, enum gen_finish fin,
                    const char *msg) {
  int rc = 0;
  pthread_mutex_lock(&q->mu);
  if (ev) {
    if (q->n_ev == q->cap_ev) {
      int cap = q->cap_ev ? q->cap_ev * 2 : 64;
      struct gen_event *p = realloc(q->ev, (size_t)cap * sizeof *p);
      if (!p) {
        fin = GEN_FIN_ERROR;
        msg = "out of memory";
        rc = -1;
      } else {
        q->ev = p;
        q->cap_ev = cap;
      }
    }
    if (!rc) q->ev[q->n_ev++] = *ev;
  }
  if (fin != GEN_RUNNING && q->finish == GEN_RUNNING) {
    q->finish = fin;
    if (msg) snprintf(q->errmsg, sizeof q->errmsg, "%s", msg);
  }
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  return rc;
}

/* ---- the engine ---------------------------------------------------------------------- */

enum slot_state { SLOT_FREE = 0, SLOT_PREFILL, SLOT_DECODE };

struct slot {
  struct hearth_session *s;
  enum slot_state state;
  struct gen_req *q;
  struct hearth_sampler *smp;
  int prefilled;        /* prompt tokens synced so far */
  int prepared;         /* the session was matched against the prompt (hearth_session_prepare) */
  int32_t pending;      /* sampled, not yet evaluated */
  int32_t *hist;        /* [max n_ctx] generated tokens, for the penalties */
  int n_gen;
  struct jstate js;     /* constrained requests: where the output is in its program */
  unsigned long last_used;
  struct hearth_row_score sc; /* a scored step's result (scorable) */
  struct hearth_sample_req sr; /* a sampled step's request (select_sampled) */
  struct hearth_spec *spec;    /* prompt-lookup drafting (engine_params.speculate; NULL: off) */
};

struct engine {
  struct hearth_model *m;
  const struct hearth_model_info *info;
  struct engine_params p;
  struct slot *slots;
  float *scratch;       /* [n_vocab] logits + bias */
  float *scored;        /* [SCORED_CHUNK][n_vocab] prompt-scoring logits, allocated on first use */
  float *labrow;        /* [n_vocab] a label request's last prompt logits, allocated on first use */
  int store_left;       /* blocks may wait to be saved to the disk prefix cache (engine_main, guarded by mu) */
  /* queue: ring of waiting requests, guarded by mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct gen_req **queue;
  int q_head, q_n;
  int n_busy;
  int stop;
  unsigned long tick;
  int rr;               /* step: the slot its scan starts from when a step cannot take every slot (engine thread) */
  struct engine_stats st;
  pthread_t thread;
  int started;
};

/* Replaces the slot's session by an empty one. On failure the old session stays (a slot never
 * holds NULL: pick_slot and evict_idle read every free slot's session). */
static int session_fresh(struct engine *e, struct slot *sl, struct hearth_err *err) {
  struct hearth_session_params sp = {.n_ctx = e->p.n_ctx};
  struct hearth_session *s = NULL;
  int rc = hearth_session_new(e->m, &sp, &s, err);
  if (rc) return rc;
  hearth_session_free(sl->s);
  sl->s = s;
  return 0;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
  int i = 0;
  while (i < na && i < nb && a[i] == b[i]) i++;
  return i;
}

/* The free slot whose session shares the longest prefix with the prompt; LRU on ties. */
static struct slot *pick_slot(struct engine *e, const struct gen_req *q, int *common) {
  struct slot *best = NULL;
  int best_c = -1;
  for (int i = 0; i < e->p.n_slots; i++) {
    struct slot *sl = &e->slots[i];
    if (sl->state != SLOT_FREE) continue;
    int c = common_prefix(hearth_session_tokens(sl->s), hearth_session_n_tokens(sl->s), q->prompt,
                          q->n_prompt);
    if (c > best_c || (c == best_c && sl->last_used < best->last_used)) { best = sl; best_c = c; }
  }
  *common = best_c;
  return best;
}

static void slot_release(struct engine *e, struct slot *sl, enum gen_finish fin, const char *msg) {
  struct gen_req *q = sl->q;
  if (q) {
    /* account first, then wake the client: a client that reads /status right after its reply
     * must not still see its slot busy */
    pthread_mutex_lock(&e->mu);
    if (fin == GEN_FIN_CANCELLED) e->st.n_cancelled++;
    else if (fin == GEN_FIN_ERROR) e->st.n_errors++;
    else e->st.n_done++;
    e->st.n_gen_tokens += (unsigned long)sl->n_gen;
    e->n_busy--;
    pthread_mutex_unlock(&e->mu);
    req_push(q, NULL, fin, msg);
    gen_req_unref(q);
  }
  hearth_sampler_free(sl->smp);
  sl->smp = NULL;
  sl->q = NULL;
  sl->state = SLOT_FREE;
  sl->n_gen = 0;
  sl->last_used = ++e->tick;
}

/* Frees the KV of idle sessions (they lose their cached prefix). Returns how many were dropped. */
static int evict_idle(struct engine *e) {
  int n = 0;
  for (int i = 0; i < e->p.n_slots; i++) {
    struct slot *sl = &e->slots[i];
    if (sl->state != SLOT_FREE || hearth_session_n_tokens(sl->s) == 0) continue;
    struct hearth_err err;
    if (session_fresh(e, sl, &err) == 0) n++;
  }
  return n;
}

/* log-softmax pieces over logits[n]: the max and log(sum(exp(x - max))). */
static void lse(const float *x, int n, double *mx, double *lsum) {
  float m = -INFINITY;
  for (int i = 0; i < n; i++)
    if (x[i] > m) m = x[i];
  double s = 0;
  for (int i = 0; i < n; i++) s += exp((double)x[i] - m);
  *mx = m;
  *lsum = log(s);
}

/* The logprob of id under logits[nv] and the k most likely alternatives, into ev. */
static void score(const float *logits, int nv, int32_t id, int k, struct gen_event *ev) {
  double mx, ls;
  lse(logits, nv, &mx, &ls);
  ev->id = id;
  ev->logprob = (float)((double)logits[id] - mx - ls);
  ev->n_top = 0;
  for (int i = 0; i < nv && k > 0; i++) { /* insertion into a sorted top-k (k <= 20) */
    float v = logits[i];
    if (ev->n_top == k && v <= logits[ev->top_id[k - 1]]) continue;
    int j = ev->n_top < k ? ev->n_top++ : k - 1;
    while (j > 0 && logits[ev->top_id[j - 1]] < v) { ev->top_id[j] = ev->top_id[j - 1]; j--; }
    ev->top_id[j] = i;
  }
  for (int i = 0; i < ev->n_top; i++) { /* a masked (-inf) alternative: finite, as JSON needs */
    ev->top_lp[i] = (float)((double)logits[ev->top_id[i]] - mx - ls);
    if (!(ev->top_lp[i] > -9999.0f)) ev->top_lp[i] = -9999.0f;
  }
}

/* NaN or infinite logits mean the model's numbers broke down (overflowing weights or activations):
 * sampling from them would answer with garbage (a NaN beats the -inf of a constraint mask; an
 * argmax over NaNs is token 0), so the request ends with this error instead. */
static const char NONFINITE_MSG[] =
    "the model produced NaN or infinite logits (its weights or activations overflowed); no output "
    "can be sampled from them";

static int all_finite(const float *x, int n) {
  int ok = 1;
  for (int i = 0; i < n; i++) ok &= fabsf(x[i]) <= FLT_MAX; /* false for NaN and +-inf */
  return ok;
}

/* Whether q's next token can be chosen where the logits are (hearth_sessions_step_select: on the GPU only the
 * id and its logprob come back): plain greedy, no logit_bias or constraint applied on the host first, and no
 * alternatives asked for. */
static int select_greedy(const struct gen_req *q) {
  return hearth_sampling_is_plain_greedy(&q->sampling) && q->n_bias == 0 && !q->prog && q->top_logprobs <= 0;
}

/* Whether q's next token can be drawn where the logits are (hearth_sessions_step_sampled: on the GPU only the id
 * comes back, its draw the host sampler's for the same seed): temperature > 0 with nothing the host must do to the
 * row first (logit_bias, a constraint's mask) and no logprobs asked for (they are computed from the host's row). */
static int select_sampled(const struct gen_req *q) {
  return q->sampling.temperature > 0.0f && q->n_bias == 0 && !q->prog && q->top_logprobs < 0 && !q->n_labels;
}

/* Whether what q needs of a row fits a hearth_row_score (computed where the logits are, so the row never
 * crosses to the host): the greedy choice with its alternatives, and the labels' first tokens. A request that
 * samples, biases or constrains needs the whole row; label scores alone (max_tokens 0) need no choice. */
static int scorable(const struct gen_req *q) {
  if (q->n_labels > HEARTH_SCORE_IDS || q->top_logprobs > HEARTH_SCORE_TOPK) return 0;
  if (q->n_labels && q->max_tokens == 0) return 1;
  return hearth_sampling_is_plain_greedy(&q->sampling) && q->n_bias == 0 && !q->prog;
}

/* sl's score request for the row that ends its prompt (or one decode step) */
static struct hearth_row_score *score_request(struct slot *sl, int prompt_ends) {
  const struct gen_req *q = sl->q;
  struct hearth_row_score *sc = &sl->sc;
  sc->k = q->top_logprobs > 0 ? q->top_logprobs : 0;
  sc->n_ids = 0;
  if (prompt_ends)
    for (int l = 0; l < q->n_labels; l++) sc->ids[sc->n_ids++] = q->lab_tok[q->lab_off[l]];
  return sc;
}

/* Samples the next token of sl from logits (or takes the one chosen for it: chosen != NULL, with its
 * logprob lp; see select_greedy), appends it to the request, and decides whether the sequence goes
 * on. Returns 1 if it continues (sl->pending is set), 0 if it was released. */
static int emit(struct engine *e, struct slot *sl, const float *logits, const int32_t *chosen, float lp,
                const struct hearth_row_score *sc) {
  struct gen_req *q = sl->q;
  int nv = e->info->n_vocab;
  /* chosen: -1 (or a non-finite logprob when one was computed) reports a non-finite row */
  if (sc ? sc->id < 0 || sc->id >= nv
         : chosen ? *chosen < 0 || *chosen >= nv || (q->top_logprobs == 0 && !isfinite(lp))
                  : !all_finite(logits, nv)) {
    slot_release(e, sl, GEN_FIN_ERROR, NONFINITE_MSG);
    return 0;
  }
  /* a scored row (sc) or a chosen id carries its decision: bias and constraints apply to a row sampled here
   * (scorable() keeps biased and constrained requests off the scored path) */
  if (!chosen && !sc && logits && (q->n_bias || q->prog)) {
    memcpy(e->scratch, logits, (size_t)nv * sizeof *logits);
    for (int i = 0; i < q->n_bias; i++) e->scratch[q->bias_id[i]] += q->bias[i];
    logits = e->scratch;
  }
  /* constrained (json_object, forced tool call): only tokens that keep the output a prefix of what
   * the program allows (no end-of-sequence token: the answer ends when the program is complete) */
  if (!chosen && !sc && q->prog && !jvocab_mask(q->jv, q->prog, &sl->js, e->scratch, nv)) {
    slot_release(e, sl, GEN_FIN_LENGTH, NULL); /* nothing can follow: cannot happen before done */
    return 0;
  }
  struct gen_event ev = {0};
  if (sc) { /* a scored row: the choice and its alternatives came with it */
    ev.id = sc->id;
    ev.logprob = (float)sc->logprob;
    ev.n_top = q->top_logprobs > 0 ? sc->n_top : 0;
    for (int i = 0; i < ev.n_top; i++) {
      ev.top_id[i] = sc->top_id[i];
      ev.top_lp[i] = (float)sc->top_lp[i];
      if (!(ev.top_lp[i] > -9999.0f)) ev.top_lp[i] = -9999.0f; /* as score(): finite, as JSON needs */
    }
  } else if (chosen) {
    ev.id = *chosen;
    ev.logprob = lp; /* top_logprobs is 0 or off here: no alternatives */
  } else {
    ev.id = hearth_sampler_sample(sl->smp, logits, sl->hist, sl->n_gen);
    if (q->top_logprobs >= 0) score(logits, nv, ev.id, q->top_logprobs, &ev);
  }
  sl->hist[sl->n_gen++] = ev.id;
  enum gen_finish fin = GEN_RUNNING;
  if (!q->ignore_eos)
    for (int i = 0; i < e->info->n_eos; i++)
      if (ev.id == e->info->eos_ids[i]) fin = GEN_FIN_EOS;
  if (q->prog) {
    const char *p;
    size_t len;
    if (jvocab_bytes(q->jv, ev.id, &p, &len) == 0) jstate_feed_all(q->prog, &sl->js, p, len);
    if (jstate_done(q->prog, &sl->js)) fin = GEN_FIN_EOS; /* the object / call is closed: a natural stop */
  }
  if (fin == GEN_RUNNING &&
      (sl->n_gen >= q->max_tokens || hearth_session_n_tokens(sl->s) + 1 > e->p.n_ctx))
    fin = GEN_FIN_LENGTH;
  if (req_push(q, &ev, GEN_RUNNING, NULL)) fin = GEN_FIN_ERROR;
  if (fin != GEN_RUNNING) {
    slot_release(e, sl, fin, fin == GEN_FIN_ERROR ? "out of memory" : NULL);
    return 0;
  }
  sl->pending = ev.id;
  sl->state = SLOT_DECODE;
  return 1;
}

static void admit(struct engine *e) {
  pthread_mutex_lock(&e->mu);
  while (e->q_n > 0) {
    struct gen_req *q = e->queue[e->q_head];
    if (atomic_load(&q->cancel)) {
      e->q_head = (e->q_head + 1) % e->p.max_queue;
      e->q_n--;
      e->st.n_cancelled++;
      pthread_mutex_unlock(&e->mu);
      req_push(q, NULL, GEN_FIN_CANCELLED, NULL);
      gen_req_unref(q);
      pthread_mutex_lock(&e->mu);
      continue;
    }
    int common;
    struct slot *sl = pick_slot(e, q, &common);
    if (!sl) break;
    e->q_head = (e->q_head + 1) % e->p.max_queue;
    e->q_n--;
    e->n_busy++;
    e->st.n_prompt_tokens += (unsigned long)q->n_prompt;
    (void)common; /* reuse is measured by hearth_session_prepare in step(), cached blocks included */
    pthread_mutex_unlock(&e->mu);
    sl->q = q;
    /* label scores are batch-invariant: their forwards run the row-invariant kernels (backend.h) */
    hearth_session_set_row_invariant(sl->s, q->n_labels > 0);
    sl->state = SLOT_PREFILL;
    sl->prefilled = 0;
    sl->prepared = 0;
    q->n_cached = 0;
    sl->n_gen = 0;
    if (q->prog) jstate_init(q->prog, &sl->js);
    if (sl->spec) hearth_spec_reset(sl->spec);
    struct hearth_err err;
    if (hearth_sampler_new(&q->sampling, e->info->n_vocab, &sl->smp, &err))
      slot_release(e, sl, GEN_FIN_ERROR, err.msg);
    else
      hearth_sampler_set_prompt(sl->smp, q->prompt, q->n_prompt); /* repetition penalty as transformers */
    pthread_mutex_lock(&e->mu);
  }
  pthread_mutex_unlock(&e->mu);
}

/* Syncs sl's session to q->prompt[0..target), evicting idle sessions once if the KV pool is full. */
static int sync_to(struct engine *e, struct slot *sl, int target, struct hearth_err *err) {
  int rc = hearth_session_sync(sl->s, sl->q->prompt, target, err);
  if (rc == HEARTH_ERR_CTX_FULL && evict_idle(e) > 0)
    rc = hearth_session_sync(sl->s, sl->q->prompt, target, err);
  return rc;
}

#define SCORED_CHUNK 32 /* positions per prompt-scoring forward (echo + logprobs); label continuations fit one */

/* log p(id) under logits[nv] whose max and log-sum-exp pieces are mx, ls (lse) */
static double logprob_of(const float *logits, double mx, double ls, int32_t id) {
  return (double)logits[id] - mx - ls;
}

/* Adds to *lp the log-probabilities of label tokens t[1..k) given t[0..k-1) after sl's prompt (teacher forcing by
 * peek forwards into e->scored). Returns -1 when sl was released (an error), else 0. */
static int label_tail(struct engine *e, struct slot *sl, const int32_t *t, int k, double *lp) {
  const int nv = e->info->n_vocab;
  struct hearth_err err = {0};
  int rc = hearth_session_peek_logits(sl->s, t, k - 1, e->scored, &err);
  if (rc == HEARTH_ERR_CTX_FULL && evict_idle(e) > 0) rc = hearth_session_peek_logits(sl->s, t, k - 1, e->scored, &err);
  if (rc) { slot_release(e, sl, GEN_FIN_ERROR, err.msg); return -1; }
  if (!all_finite(e->scored, (k - 1) * nv)) { slot_release(e, sl, GEN_FIN_ERROR, NONFINITE_MSG); return -1; }
  for (int j = 1; j < k; j++) {
    const float *row = e->scored + (size_t)(j - 1) * nv;
    double mx, ls;
    lse(row, nv, &mx, &ls);
    *lp += logprob_of(row, mx, ls, t[j]);
  }
  return 0;
}

/* Label scoring, once sl's prompt is evaluated and its last logits are the session's: fills
 * q->lab_lp (see engine.h) and returns those logits, kept in e->labrow (the label forwards replace
 * the session's own), for the first generated token. NULL when sl was released (an error). */
static const float *score_labels_now(struct engine *e, struct slot *sl) {
  struct gen_req *q = sl->q;
  const int nv = e->info->n_vocab;
  const float *last = hearth_session_logits(sl->s);
  if (!e->labrow) e->labrow = malloc((size_t)nv * sizeof *e->labrow);
  if (!e->scored) e->scored = malloc((size_t)SCORED_CHUNK * nv * sizeof *e->scored);
  if (!e->labrow || !e->scored || !last) {
    slot_release(e, sl, GEN_FIN_ERROR, last ? "out of memory" : "label scoring: no logits for the prompt");
    return NULL;
  }
  if (!all_finite(last, nv)) { slot_release(e, sl, GEN_FIN_ERROR, NONFINITE_MSG); return NULL; }
  memcpy(e->labrow, last, (size_t)nv * sizeof *e->labrow);
  double mx0, ls0;
  lse(e->labrow, nv, &mx0, &ls0);
  for (int l = 0; l < q->n_labels; l++) {
    const int32_t *t = q->lab_tok + q->lab_off[l];
    const int k = q->lab_off[l + 1] - q->lab_off[l];
    double lp = logprob_of(e->labrow, mx0, ls0, t[0]);
    if (k > 1 && label_tail(e, sl, t, k, &lp)) return NULL; /* the leading tokens give the following ones' logits */
    q->lab_lp[l] = lp;
  }
  return e->labrow;
}

/* score_labels for a scored row: the labels' first tokens were scored with the row (sc->id_lp, in label order);
 * a label's later tokens come from forwards of its leading ones. Returns 0 when sl was released (an error). */
static int score_labels_scored(struct engine *e, struct slot *sl, const struct hearth_row_score *sc) {
  const double t0 = prof_now();
  struct gen_req *q = sl->q;
  const int nv = e->info->n_vocab;
  int ok = 1;
  if (sc->id < 0) { slot_release(e, sl, GEN_FIN_ERROR, NONFINITE_MSG); ok = 0; }
  for (int l = 0; ok && l < q->n_labels; l++) {
    const int32_t *t = q->lab_tok + q->lab_off[l];
    const int k = q->lab_off[l + 1] - q->lab_off[l];
    double lp = sc->id_lp[l];
    if (k > 1) {
      if (!e->scored && !(e->scored = malloc((size_t)SCORED_CHUNK * nv * sizeof *e->scored))) {
        slot_release(e, sl, GEN_FIN_ERROR, "out of memory");
        ok = 0;
        break;
      }
      if (label_tail(e, sl, t, k, &lp)) { ok = 0; break; }
    }
    q->lab_lp[l] = lp;
  }
  prof_add(PROF_LABELS, t0, 1);
  return ok;
}

static const float *score_labels(struct engine *e, struct slot *sl) {
  const double t0 = prof_now();
  const float *r = score_labels_now(e, sl);
  prof_add(PROF_LABELS, t0, 1);
  return r;
}

/* Whether sl (a new request, not yet prepared) should wait this step for another slot that is still
 * prefilling full blocks sl's prompt shares: they enter the prefix cache as that slot's chunks
 * complete (key_full_blocks after every forward), and sl then attaches them instead of computing
 * them again. Only prepared slots lead, so waits never form a cycle; a leader that ends (done,
 * cancelled, failed) is a free slot and is no longer waited for. */
static int wait_for_leader(struct engine *e, const struct slot *sl) {
  const struct gen_req *q = sl->q;
  const int bs = e->info->kv_block_tokens > 0 ? e->info->kv_block_tokens : 1;
  /* what sl's own session already holds of its prompt needs no one */
  const int own = common_prefix(hearth_session_tokens(sl->s), hearth_session_n_tokens(sl->s), q->prompt, q->n_prompt);
  for (int i = 0; i < e->p.n_slots; i++) {
    const struct slot *L = &e->slots[i];
    if (L == sl || L->state != SLOT_PREFILL || !L->prepared || !L->q) continue;
    int c = common_prefix(L->q->prompt, L->q->n_prompt, q->prompt, q->n_prompt);
    if (c > q->n_prompt - 1) c = q->n_prompt - 1; /* the last position is always evaluated (its logits) */
    const int shared = c / bs * bs;              /* full blocks only: what the prefix cache can hand over */
    if (shared > own && shared > L->prefilled) return 1;
  }
  return 0;
}

/* Prompt logprobs (echo + logprobs): the prompt is evaluated from position 0 (no prefix reuse: every
 * position is scored), then in chunks of SCORED_CHUNK positions per engine step whose logits all come
 * back from one forward pass (hearth_session_append_logits). */
static void prefill_scored(struct engine *e, struct slot *sl) {
  struct gen_req *q = sl->q;
  if (atomic_load(&q->cancel)) { slot_release(e, sl, GEN_FIN_CANCELLED, NULL); return; }
  struct hearth_err err = {0};
  const int nv = e->info->n_vocab, k = q->top_logprobs > 0 ? q->top_logprobs : 0;
  if (sl->prefilled == 0) { /* position 0 alone: the session starts over */
    if (sync_to(e, sl, 1, &err)) { slot_release(e, sl, GEN_FIN_ERROR, err.msg); return; }
    sl->prefilled = 1;
    if (!all_finite(hearth_session_logits(sl->s), nv)) { slot_release(e, sl, GEN_FIN_ERROR, NONFINITE_MSG); return; }
    if (q->n_prompt > 1) score(hearth_session_logits(sl->s), nv, q->prompt[1], k, &q->pev[1]);
  } else if (sl->prefilled < q->n_prompt) {
    if (!e->scored && !(e->scored = malloc((size_t)SCORED_CHUNK * nv * sizeof *e->scored))) {
      slot_release(e, sl, GEN_FIN_ERROR, "out of memory");
      return;
    }
    int c = q->n_prompt - sl->prefilled < SCORED_CHUNK ? q->n_prompt - sl->prefilled : SCORED_CHUNK;
    const int32_t *p = q->prompt + sl->prefilled;
    int rc = hearth_session_append_logits(sl->s, p, c, e->scored, &err);
    if (rc == HEARTH_ERR_CTX_FULL && evict_idle(e) > 0)
      rc = hearth_session_append_logits(sl->s, p, c, e->scored, &err);
    if (rc) { slot_release(e, sl, GEN_FIN_ERROR, err.msg); return; }
    if (!all_finite(e->scored, c * nv)) { slot_release(e, sl, GEN_FIN_ERROR, NONFINITE_MSG); return; }
    for (int i = 0; i < c; i++) { /* position prefilled + i scores the token after it */
      int target = sl->prefilled + i + 1;
      if (target < q->n_prompt) score(e->scored + (size_t)i * nv, nv, q->prompt[target], k, &q->pev[target]);
    }
    sl->prefilled += c;
  }
  if (sl->prefilled < q->n_prompt) return;
  const float *row = hearth_session_logits(sl->s);
  if (q->n_labels && !(row = score_labels(e, sl))) return;
  if (q->max_tokens == 0) slot_release(e, sl, GEN_FIN_LENGTH, NULL);
  else emit(e, sl, row, NULL, 0.0f, NULL);
}

/* Matches a new request's prompt against its session once: the longest common prefix and any
 * full blocks of the model's prefix cache are reused; the rest is left to step(). */
static int prepare(struct engine *e, struct slot *sl) {
  struct gen_req *q = sl->q;
  struct hearth_err err = {0};
  const double t0 = prof_now();
  int held = hearth_session_prepare(sl->s, q->prompt, q->n_prompt, &err);
  if (held == HEARTH_ERR_CTX_FULL && evict_idle(e) > 0)
    held = hearth_session_prepare(sl->s, q->prompt, q->n_prompt, &err);
  prof_add(PROF_PREPARE, t0, held > 0 ? held : 0);
  if (held < 0) {
    slot_release(e, sl, GEN_FIN_ERROR, err.msg);
    return -1;
  }
  sl->prefilled = held;
  sl->prepared = 1;
  q->n_cached = held;
  pthread_mutex_lock(&e->mu);
  e->st.n_cached_tokens += (unsigned long)held;
  pthread_mutex_unlock(&e->mu);
  return 0;
}

/* ---- prompt-lookup speculation (engine_params.speculate) ----
 * A step speculates when every slot it would take decodes a plain greedy request (select_greedy, no labels),
 * none is prefilling and at most speculate_width (default 1) are decoding: then each sequence's pending token and its draft go through one forward
 * (hearth_sessions_step_spec) and the ids it gives are emitted one by one as plain steps would emit them; a
 * sequence that ends (end of sequence, max_tokens, n_ctx) drops the ids after it, and a stop string is cut by the
 * reader as ever. The ids and logprobs are plain greedy decoding's, bit for bit (decisions.md). Any other step
 * (a prefill, a sampled, biased or constrained request in the batch) runs plainly. */
static int spec_step_ok(struct engine *e) {
  int any = 0;
  const int width = e->p.speculate_width > 0 ? e->p.speculate_width : 1;
  for (int i = 0; i < e->p.n_slots; i++) {
    const struct slot *sl = &e->slots[i];
    if (sl->state == SLOT_PREFILL) return 0;
    if (sl->state != SLOT_DECODE) continue;
    if (!sl->spec || !select_greedy(sl->q) || sl->q->n_labels || ++any > width) return 0;
  }
  return any > 0;
}

static void spec_step(struct engine *e) {
  enum { W = HEARTH_SPEC_MAX + 1 };
  int N = e->p.n_slots, n = 0;
  const int cap = e->info->max_seqs > 0 && e->info->max_seqs < N ? e->info->max_seqs : N, rr = e->rr;
  int last = -1;
  struct hearth_session *ss[N];
  struct hearth_spec *sp[N];
  struct slot *which[N];
  int32_t pend[N];
  int want[N], want_lp = 0;
  for (int k = 0; k < N && n < cap; k++) {
    const int i = (rr + k) % N;
    struct slot *sl = &e->slots[i];
    if (sl->state != SLOT_DECODE) continue;
    if (atomic_load(&sl->q->cancel)) { slot_release(e, sl, GEN_FIN_CANCELLED, NULL); continue; }
    ss[n] = sl->s;
    sp[n] = sl->spec;
    pend[n] = sl->pending;
    want[n] = sl->q->max_tokens - sl->n_gen; /* >= 1: emit ended the request otherwise */
    want_lp |= sl->q->top_logprobs == 0;
    which[n++] = sl;
    last = i;
  }
  if (n == cap && cap < N) e->rr = (last + 1) % N;
  if (!n) return;
  int32_t *ids = malloc((size_t)n * W * sizeof *ids);
  float *lps = malloc((size_t)n * W * sizeof *lps);
  int *nid = malloc((size_t)n * sizeof *nid);
  uint64_t d0[N], a0[N];
  for (int i = 0; i < n; i++) hearth_spec_counts(sp[i], NULL, &d0[i], &a0[i]);
  struct hearth_err err = {0};
  int rc = ids && lps && nid ? 0 : err_set(&err, HEARTH_ERR_NOMEM, "out of memory");
  const double t_step = prof_now();
  if (!rc) rc = hearth_sessions_step_spec(ss, n, pend, sp, want, ids, want_lp ? lps : NULL, nid, &err);
  prof_add(PROF_ENGINE_STEP, t_step, n);
  if (rc == HEARTH_ERR_CTX_FULL && evict_idle(e) > 0)
    rc = hearth_sessions_step_spec(ss, n, pend, sp, want, ids, want_lp ? lps : NULL, nid, &err);
  if (rc && ids && lps && nid) { /* find the culprit(s): each alone (sessions are unchanged by a failed step) */
    for (int i = 0; i < n; i++) {
      struct hearth_err e1 = {0};
      int r1 = hearth_sessions_step_spec(&ss[i], 1, &pend[i], &sp[i], &want[i], ids + (size_t)i * W,
                                         want_lp ? lps + (size_t)i * W : NULL, &nid[i], &e1);
      if (r1) {
        slot_release(e, which[i], r1 == HEARTH_ERR_CTX_FULL ? GEN_FIN_LENGTH : GEN_FIN_ERROR, e1.msg);
        which[i] = NULL;
      }
    }
  } else if (rc) {
    for (int i = 0; i < n; i++) {
      slot_release(e, which[i], GEN_FIN_ERROR, err.msg);
      which[i] = NULL;
    }
  }
  unsigned long drafted = 0, accepted = 0;
  for (int i = 0; i < n; i++) {
    uint64_t d, a;
    hearth_spec_counts(sp[i], NULL, &d, &a);
    drafted += (unsigned long)(d - d0[i]);
    accepted += (unsigned long)(a - a0[i]);
  }
  pthread_mutex_lock(&e->mu);
  e->st.n_steps++;
  e->st.n_steps_split += rc != 0 && n > 1;
  e->st.n_spec_steps++;
  e->st.n_spec_drafted += drafted;
  e->st.n_spec_accepted += accepted;
  pthread_mutex_unlock(&e->mu);
  const double t_post = prof_now();
  for (int i = 0; i < n; i++) /* each id as a plain step would emit it, until the request ends */
    for (int j = 0; which[i] && j < nid[i]; j++)
      if (!emit(e, which[i], NULL, &ids[(size_t)i * W + j], want_lp ? lps[(size_t)i * W + j] : 0.0f, NULL)) break;
  prof_add(PROF_ENGINE_POST, t_post, n);
  free(ids);
  free(lps);
  free(nid);
}

/* One forward pass for the whole engine (continuous batching): one token for every decoding
 * sequence plus prompt chunks of sequences in prefill, up to prefill_chunk tokens in all (at least
 * one prompt token per step, so prefill always advances). Sequences whose prompt ends in this step
 * and all decoding ones then sample their next token. */
static void step(struct engine *e) {
  if (spec_step_ok(e)) {
    spec_step(e);
    return;
  }
  int N = e->p.n_slots, n = 0, budget = e->p.prefill_chunk;
  /* a forward holds at most max_seqs sessions: with more slots than that, the slots take turns (the scan starts
   * after the last slot the previous capped step took), rather than a step failing and running its sessions
   * one by one */
  const int cap = e->info->max_seqs > 0 && e->info->max_seqs < N ? e->info->max_seqs : N, rr = e->rr;
  int last = -1;
  struct hearth_session *ss[N];
  const int32_t *toks[N];
  int cnt[N];
  struct slot *which[N];
  for (int k = 0; k < N && n < cap; k++) {
    const int i = (rr + k) % N;
    struct slot *sl = &e->slots[i];
    if (sl->state != SLOT_DECODE) continue;
    if (atomic_load(&sl->q->cancel)) { slot_release(e, sl, GEN_FIN_CANCELLED, NULL); continue; }
    ss[n] = sl->s;
    toks[n] = &sl->pending;
    cnt[n] = 1;
    which[n++] = sl;
    last = i;
    budget--;
  }
  if (budget < 1) budget = 1; /* prefill always advances */
  for (int k = 0; k < N && budget > 0 && n < cap; k++) {
    const int i = (rr + k) % N;
    struct slot *sl = &e->slots[i];
    if (sl->state != SLOT_PREFILL || sl->q->pev) continue;
    if (atomic_load(&sl->q->cancel)) { slot_release(e, sl, GEN_FIN_CANCELLED, NULL); continue; }
    if (!sl->prepared && wait_for_leader(e, sl)) continue;
    if (!sl->prepared && prepare(e, sl)) continue;
    int take = sl->q->n_prompt - sl->prefilled;
    if (take > budget) take = budget;
    ss[n] = sl->s;
    toks[n] = sl->q->prompt + sl->prefilled;
    cnt[n] = take;
    which[n++] = sl;
    last = i;
    budget -= take;
  }
  if (n == cap && cap < N) e->rr = (last + 1) % N;
  if (!n) return;
  /* which sessions need their logits on the host: those that sample there (select_greedy) and finish
   * their prompt or decode in this step; a prompt chunk that does not end the prompt needs nothing */
  uint8_t greedy[N];
  int32_t ids[N];
  float lps[N];
  struct hearth_row_score *scores[N]; /* rows whose logprobs / label scores are computed where the logits are */
  const struct hearth_sample_req *samples[N]; /* rows whose next token is drawn where the logits are */
  int want_lp = 0; /* a greedy token's logprob is asked for (on a CPU it costs a second pass over the row) */
  for (int i = 0; i < n; i++) {
    struct slot *sl = which[i];
    const int ends = sl->state == SLOT_DECODE || sl->prefilled + cnt[i] >= sl->q->n_prompt;
    const int plain = select_greedy(sl->q) && !sl->q->n_labels;
    scores[i] = ends && !plain && scorable(sl->q) ? score_request(sl, sl->state == SLOT_PREFILL) : NULL;
    samples[i] = NULL;
    if (ends && !scores[i] && select_sampled(sl->q)) {
      sl->sr = (struct hearth_sample_req){.smp = sl->smp, .history = sl->hist, .n_history = sl->n_gen};
      samples[i] = &sl->sr;
    }
    greedy[i] = (uint8_t)(!ends || plain || scores[i] || samples[i]); /* otherwise: the whole row, on the host */
    want_lp |= ends && plain && sl->q->top_logprobs == 0;
    lps[i] = 0.0f;
  }
  float *lp = want_lp ? lps : NULL;
  struct hearth_err err = {0};
  const double t_step = prof_now();
  int rc = hearth_sessions_step_sampled(ss, n, toks, cnt, greedy, scores, samples, ids, lp, &err);
  if (prof_on()) {
    long ntok = 0;
    for (int i = 0; i < n; i++) ntok += cnt[i];
    prof_add(PROF_ENGINE_STEP, t_step, ntok);
  }
  if (rc == HEARTH_ERR_CTX_FULL && evict_idle(e) > 0)
    rc = hearth_sessions_step_sampled(ss, n, toks, cnt, greedy, scores, samples, ids, lp, &err);
  pthread_mutex_lock(&e->mu);
  e->st.n_steps++;
  e->st.n_steps_split += rc != 0 && n > 1;
  pthread_mutex_unlock(&e->mu);
  if (rc) { /* find the culprit(s): step each alone (sessions are unchanged by a failed step) */
    for (int i = 0; i < n; i++) {
      struct hearth_err e1 = {0};
      int r1 = hearth_sessions_step_sampled(&ss[i], 1, &toks[i], &cnt[i], &greedy[i], &scores[i], &samples[i],
                                            &ids[i], lp ? &lps[i] : NULL, &e1);
      if (r1) {
        slot_release(e, which[i], r1 == HEARTH_ERR_CTX_FULL ? GEN_FIN_LENGTH : GEN_FIN_ERROR, e1.msg);
        which[i] = NULL;
      }
    }
  }
  const double t_post = prof_now();
  for (int i = 0; i < n; i++) {
    struct slot *sl = which[i];
    if (!sl) continue;
    const float *row = NULL;
    if (sl->state == SLOT_PREFILL) {
      sl->prefilled += cnt[i];
      if (sl->prefilled < sl->q->n_prompt) continue;
      if (sl->q->n_labels && (scores[i] ? !score_labels_scored(e, sl, scores[i]) : !(row = score_labels(e, sl))))
        continue;
      if (sl->q->max_tokens == 0) { slot_release(e, sl, GEN_FIN_LENGTH, NULL); continue; }
    }
    if (scores[i]) emit(e, sl, NULL, NULL, 0.0f, scores[i]);
    else if (greedy[i]) emit(e, sl, NULL, &ids[i], lps[i], NULL);
    else emit(e, sl, row ? row : hearth_session_logits(sl->s), NULL, 0.0f, NULL);
  }
  prof_add(PROF_ENGINE_POST, t_post, n);
}

static void *engine_main(void *arg) {
  struct engine *e = arg;
  for (;;) {
    pthread_mutex_lock(&e->mu);
    /* idle: blocks noted for the disk prefix cache are saved now, a batch at a time (off the request path) */
    while (!e->stop && e->q_n == 0 && e->n_busy == 0 && e->store_left) {
      pthread_mutex_unlock(&e->mu);
      int left = hearth_model_store_flush(e->m, 64);
      pthread_mutex_lock(&e->mu);
      e->store_left = left > 0;
    }
    while (!e->stop && e->q_n == 0 && e->n_busy == 0) pthread_cond_wait(&e->cv, &e->mu);
    e->store_left = 1; /* work arrives: it may note blocks */
    int stop = e->stop;
    pthread_mutex_unlock(&e->mu);
    if (stop) break;
    admit(e);
    for (int i = 0; i < e->p.n_slots; i++)
      if (e->slots[i].state == SLOT_PREFILL && e->slots[i].q->pev) prefill_scored(e, &e->slots[i]);
    step(e);
  }
  /* shutdown: cancel whatever is running or waiting */
  for (int i = 0; i < e->p.n_slots; i++)
    if (e->slots[i].state != SLOT_FREE) slot_release(e, &e->slots[i], GEN_FIN_CANCELLED, NULL);
  pthread_mutex_lock(&e->mu);
  while (e->q_n > 0) {
    struct gen_req *q = e->queue[e->q_head];
    e->q_head = (e->q_head + 1) % e->p.max_queue;
    e->q_n--;
    req_push(q, NULL, GEN_FIN_CANCELLED, "server shutting down");
    gen_req_unref(q);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

int engine_default_prefill_chunk(const struct hearth_model_info *info) {
  return info->backend == HEARTH_BACKEND_CUDA ? 4096 : 512;
}

int engine_new(struct hearth_model *m, const struct engine_params *p, struct engine **out,
               struct hearth_err *err) {
  if (p->n_slots < 1 || p->n_ctx < 2 || p->max_queue < 1)
    return err_set(err, HEARTH_ERR_ARG, "engine: n_slots %d, n_ctx %d, max_queue %d out of range",
                   p->n_slots, p->n_ctx, p->max_queue);
  struct engine *e = calloc(1, sizeof *e);
  if (!e) return err_set(err, HEARTH_ERR_NOMEM, "engine: out of memory");
  e->m = m;
  e->info = hearth_model_info(m);
  e->p = *p;
  if (e->p.prefill_chunk <= 0) e->p.prefill_chunk = engine_default_prefill_chunk(e->info);
  e->slots = calloc((size_t)p->n_slots, sizeof *e->slots);
  e->queue = calloc((size_t)p->max_queue, sizeof *e->queue);
  e->scratch = malloc((size_t)e->info->n_vocab * sizeof *e->scratch);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  int rc = 0;
  if (!e->slots || !e->queue || !e->scratch) rc = err_set(err, HEARTH_ERR_NOMEM, "engine: out of memory");
  for (int i = 0; !rc && i < p->n_slots; i++) {
    e->slots[i].hist = malloc((size_t)p->n_ctx * sizeof(int32_t));
    if (!e->slots[i].hist) rc = err_set(err, HEARTH_ERR_NOMEM, "engine: out of memory");
    else rc = session_fresh(e, &e->slots[i], err);
    if (!rc && p->speculate > 0 && e->info->can_speculate) rc = hearth_spec_new(p->speculate, &e->slots[i].spec, err);
  }
  if (!rc && pthread_create(&e->thread, NULL, engine_main, e))
    rc = err_set(err, HEARTH_ERR_NOMEM, "engine: cannot start the thread");
  if (rc) { engine_free(e); return rc; }
  e->started = 1;
  *out = e;
  return 0;
}

void engine_shutdown(struct engine *e) {
  if (!e || !e->started) return;
  pthread_mutex_lock(&e->mu);
  e->stop = 1;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  pthread_join(e->thread, NULL);
  e->started = 0;
}

void engine_free(struct engine *e) {
  if (!e) return;
  engine_shutdown(e);
  for (int i = 0; e->slots && i < e->p.n_slots; i++) {
    hearth_session_free(e->slots[i].s);
    hearth_sampler_free(e->slots[i].smp);
    hearth_spec_free(e->slots[i].spec);
    free(e->slots[i].hist);
  }
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e->slots);
  free(e->queue);
  free(e->scratch);
  free(e->scored);
  free(e->labrow);
  free(e);
}

int engine_submit_many(struct engine *e, struct gen_req *const *qs, int n, struct hearth_err *err) {
  for (int k = 0; k < n; k++) {
    const struct gen_req *q = qs[k];
    if (q->n_prompt < 1 || q->n_prompt >= e->p.n_ctx)
      return err_set(err, HEARTH_ERR_ARG, "the prompt has %d tokens; this server's context is %d",
                     q->n_prompt, e->p.n_ctx);
    for (int i = 0; i < q->n_bias; i++)
      if (q->bias_id[i] < 0 || q->bias_id[i] >= e->info->n_vocab)
        return err_set(err, HEARTH_ERR_ARG, "logit_bias: token %d is outside the vocabulary",
                       q->bias_id[i]);
  }
  pthread_mutex_lock(&e->mu);
  if (e->q_n + n > e->p.max_queue || e->stop) {
    pthread_mutex_unlock(&e->mu);
    return err_set(err, HEARTH_ERR_CTX_FULL, "the server is busy (%d requests waiting)",
                   e->p.max_queue);
  }
  for (int k = 0; k < n; k++) {
    atomic_fetch_add(&qs[k]->refs, 1);
    e->queue[(e->q_head + e->q_n) % e->p.max_queue] = qs[k];
    e->q_n++;
  }
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return 0;
}

int engine_submit(struct engine *e, struct gen_req *q, struct hearth_err *err) {
  return engine_submit_many(e, &q, 1, err);
}

int engine_max_queue(const struct engine *e) { return e->p.max_queue; }

void engine_stats(struct engine *e, struct engine_stats *st) {
  pthread_mutex_lock(&e->mu);
  *st = e->st;
  st->n_slots = e->p.n_slots;
  st->n_busy = e->n_busy;
  st->n_queued = e->q_n;
  pthread_mutex_unlock(&e->mu);
}
