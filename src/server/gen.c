/* server/gen.c — shared generation plumbing for chat completions and completions (see gen.h). */
#include "server/gen.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/engine.h"
#include "server/errors.h"
#include "server/json_schema.h"
#include "server/sse.h"

/* ---- request parameters ------------------------------------------------------------------ */

int gen_parse(json_t *b, int chat, struct gen_opts *o, struct verr *e) {
  memset(o, 0, sizeof *o);
  hearth_sampling_default(&o->sampling);
  long long ll;
  json_t *so, *lb;
  if (v_bool(b, "stream", 0, &o->stream, e)) return -1;
  if (v_obj(b, "stream_options", &so, e)) return -1;
  if (so && !o->stream) /* as OpenAI and vLLM answer it: the options would silently do nothing */
    return v_fail(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
  if (so && v_bool(so, "include_usage", 0, &o->include_usage, e)) {
    snprintf(e->param, sizeof e->param, "stream_options.include_usage");
    return -1;
  }
  o->prompt_param = chat ? "messages" : "prompt";
  if (chat) {
    long long a, c;
    if (v_int(b, "max_tokens", 1, INT_MAX, -1, &a, e)) return -1;
    if (v_int(b, "max_completion_tokens", 1, INT_MAX, -1, &c, e)) return -1;
    o->max_tokens = (int)(c > 0 ? c : a);
  } else {
    if (v_bool(b, "echo", 0, &o->echo, e)) return -1;
    /* max_tokens 0 with echo: score the prompt only (the classic use of echo + logprobs); with
     * "labels" (completions.c): score the labels only */
    json_t *labels = json_object_get(b, "labels");
    const int scoring = o->echo || (labels && !json_is_null(labels));
    if (v_int(b, "max_tokens", scoring ? 0 : 1, INT_MAX, 16, &ll, e)) return -1;
    o->max_tokens = (int)ll;
  }
  struct hearth_sampling *sp = &o->sampling;
  if (v_float(b, "temperature", 0, 2, 0, 1.0f, &sp->temperature, e)) return -1;
  if (v_float(b, "top_p", 0, 1, 1, 1.0f, &sp->top_p, e)) return -1;
  if (v_int(b, "top_k", 0, 1 << 20, 0, &ll, e)) return -1;
  sp->top_k = (int)ll;
  if (v_float(b, "min_p", 0, 1, 0, 0, &sp->min_p, e)) return -1;
  if (v_float(b, "repetition_penalty", 0.01f, 10, 0, 1, &sp->repetition_penalty, e)) return -1;
  if (v_float(b, "presence_penalty", -2, 2, 0, 0, &sp->presence_penalty, e)) return -1;
  if (v_float(b, "frequency_penalty", -2, 2, 0, 0, &sp->frequency_penalty, e)) return -1;
  if (v_int(b, "seed", LLONG_MIN, LLONG_MAX, 0, &ll, e)) return -1;
  if (json_object_get(b, "seed") && !json_is_null(json_object_get(b, "seed")))
    o->sampling.seed = (uint64_t)ll;
  else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    o->sampling.seed = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
  }
  if (v_int(b, "n", 1, GEN_MAX_N, 1, &ll, e)) return -1;
  o->n = (int)ll;
  if (v_bool(b, "ignore_eos", 0, &o->ignore_eos, e)) return -1;
  if (v_stop(b, "stop", o->stop, &o->n_stop, e)) return -1;
  if (v_obj(b, "logit_bias", &lb, e)) return -1;
  if (lb) {
    const char *k;
    json_t *v;
    json_object_foreach(lb, k, v) {
      if (o->n_bias >= (int)(sizeof o->bias / sizeof o->bias[0]))
        return v_fail(e, "logit_bias", "'logit_bias' may hold at most 300 entries");
      char *end;
      errno = 0;
      long id = strtol(k, &end, 10);
      if (errno || !*k || *end || id < 0 || id > INT_MAX)
        return v_fail(e, "logit_bias", "'logit_bias' keys must be token ids");
      if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
        return v_fail(e, "logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
      o->bias_id[o->n_bias] = (int32_t)id;
      o->bias[o->n_bias++] = (float)json_number_value(v);
    }
  }
  if (chat) {
    if (v_bool(b, "logprobs", 0, &o->logprobs, e)) return -1;
    if (v_int(b, "top_logprobs", 0, GEN_MAX_TOP, 0, &ll, e)) return -1;
    o->top_logprobs = (int)ll;
    if (o->top_logprobs && !o->logprobs)
      return v_fail(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
  } else {
    json_t *lp = json_object_get(b, "logprobs");
    if (lp && !json_is_null(lp)) {
      if (v_int(b, "logprobs", 0, 5, 0, &ll, e)) return -1;
      o->logprobs = 1;
      o->top_logprobs = (int)ll;
    }
    if (v_int(b, "best_of", 1, 1, 1, &ll, e)) return -1;
    const char *suffix;
    if (v_str(b, "suffix", 0, NULL, &suffix, e)) return -1;
    if (suffix && *suffix) return v_fail(e, "suffix", "'suffix' is not supported");
  }
  return 0;
}

/* ---- failing before the first token ------------------------------------------------------ */

int gen_fail_set(struct gen_fail *f, unsigned status, const char *param, const char *code,
                 const char *fmt, ...) {
  f->status = status;
  snprintf(f->param, sizeof f->param, "%s", param ? param : "");
  f->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->msg, sizeof f->msg, fmt, ap);
  va_end(ap);
  return -1;
}

int gen_fail_verr(struct gen_fail *f, const struct verr *e) {
  return gen_fail_set(f, 400, e->param[0] ? e->param : NULL, "invalid_value", "%s", e->msg);
}

enum MHD_Result gen_fail_reply(struct http_req *r, const struct gen_fail *f) {
  return http_reply_error(r, f->status, f->param[0] ? f->param : NULL, f->code, "%s", f->msg);
}

int gen_fail_event(struct sbuf *out, const struct gen_fail *f) {
  json_t *e = errors_json(f->status, f->param[0] ? f->param : NULL, f->code, f->msg);
  return sse_event(out, e) || sse_done(out) ? -1 : 0;
}

/* ---- starting a generation ------------------------------------------------------------------ */

/* One engine request for prompt p, choice j. NULL on OOM. */
static struct gen_req *make_req(const struct gen_prompt *p, int j, const struct gen_opts *o,
                                int n_ctx) {
  struct gen_req *q = gen_req_new();
  if (!q) return NULL;
  q->prompt = malloc((size_t)p->n * sizeof *q->prompt);
  q->n_prompt = p->n;
  q->sampling = o->sampling;
  q->sampling.seed = o->sampling.seed + (uint64_t)j * 0x9E3779B97F4A7C15ull;
  q->max_tokens = o->max_tokens >= 0 ? o->max_tokens : n_ctx;
  q->ignore_eos = o->ignore_eos;
  q->top_logprobs = o->logprobs ? o->top_logprobs : -1;
  if (o->constrain) {
    q->jv = o->jv;
    if (o->constrain == GEN_TOOL_CALL && o->schema) { /* one function, its parameters followed */
      struct jprog *args = jschema_compile(o->schema, NULL, 0);
      q->prog = args ? jprog_tool_call_args(o->tool_names[0], args) : NULL;
      jprog_free(args);
    } else {
      q->prog = o->constrain == GEN_JSON_OBJECT   ? (struct jprog *)jprog_json_object()
                : o->constrain == GEN_JSON_SCHEMA ? jschema_compile(o->schema, NULL, 0)
                                                  : jprog_tool_call(o->tool_names, o->n_tool_names);
    }
    if (!q->prog) {
      gen_req_unref(q);
      return NULL;
    }
  }
  if (o->echo && o->logprobs) q->pev = calloc((size_t)p->n, sizeof *q->pev);
  if (o->n_labels) {
    size_t nt = (size_t)o->lab_off[o->n_labels];
    q->lab_tok = malloc(nt * sizeof *q->lab_tok);
    q->lab_off = malloc((size_t)(o->n_labels + 1) * sizeof *q->lab_off);
    q->lab_lp = calloc((size_t)o->n_labels, sizeof *q->lab_lp);
    if (!q->lab_tok || !q->lab_off || !q->lab_lp) {
      gen_req_unref(q);
      return NULL;
    }
    memcpy(q->lab_tok, o->lab_tok, nt * sizeof *q->lab_tok);
    memcpy(q->lab_off, o->lab_off, (size_t)(o->n_labels + 1) * sizeof *q->lab_off);
    q->n_labels = o->n_labels;
  }
  if (o->n_bias) {
    q->bias_id = malloc((size_t)o->n_bias * sizeof *q->bias_id);
    q->bias = malloc((size_t)o->n_bias * sizeof *q->bias);
  }
  if (!q->prompt || (o->echo && o->logprobs && !q->pev) ||
      (o->n_bias && (!q->bias_id || !q->bias))) {
    gen_req_unref(q);
    return NULL;
  }
  memcpy(q->prompt, p->ids, (size_t)p->n * sizeof *q->prompt);
  if (o->n_bias) {
    memcpy(q->bias_id, o->bias_id, (size_t)o->n_bias * sizeof *q->bias_id);
    memcpy(q->bias, o->bias, (size_t)o->n_bias * sizeof *q->bias);
    q->n_bias = o->n_bias;
  }
  return q;
}

int gen_start(struct srv_model *m, const struct gen_prompt *prompts, int n_prompts,
              const struct gen_opts *o, const struct http_watch *watch, struct gen_reader *g,
              struct gen_fail *f) {
  int per = o->n > 0 ? o->n : 1, total = n_prompts * per;
  for (int k = 0; k < total; k++) {
    memset(&g[k], 0, sizeof g[k]);
    http_watch_init(NULL, 0, &g[k].watch);
  }
  for (int p = 0; p < n_prompts; p++) {
    if (prompts[p].n < 1) {
      return gen_fail_set(f, 400, o->prompt_param, "invalid_value", "the prompt is empty");
    }
    if (prompts[p].n >= m->n_ctx) {
      return gen_fail_set(f, 400, o->prompt_param, "context_length_exceeded",
                          "the prompt has %d tokens but this server's context is %d tokens",
                          prompts[p].n, m->n_ctx);
    }
  }
  if (total > GEN_MAX_CHOICES || total > engine_max_queue(m->engine)) {
    return gen_fail_set(f, 400, "n", "invalid_value",
                        "this request asks for %d choices; the most this server takes at once is %d",
                        total, GEN_MAX_CHOICES < engine_max_queue(m->engine)
                                   ? GEN_MAX_CHOICES : engine_max_queue(m->engine));
  }
  struct gen_req **qs = calloc((size_t)total, sizeof *qs);
  if (!qs) return gen_fail_set(f, 500, NULL, NULL, "out of memory");
  struct hearth_err err = {0};
  int rc = 0;
  for (int k = 0; k < total; k++) {
    qs[k] = NULL;
    g[k].index = k;
    if (!rc && !(qs[k] = make_req(&prompts[k / per], k % per, o, m->n_ctx)))
      rc = err_set(&err, HEARTH_ERR_NOMEM, "out of memory");
    if (!rc) rc = textio_detok_new(m->tio, &g[k].dt, &err);
  }
  if (!rc) rc = engine_submit_many(m->engine, qs, total, &err);
  if (rc) {
    for (int k = 0; k < total; k++) {
      gen_req_unref(qs[k]);
      textio_detok_free(g[k].dt);
      g[k].dt = NULL;
    }
    if (rc == HEARTH_ERR_CTX_FULL)
      gen_fail_set(f, 503, NULL, "server_busy", "%s", err.msg);
    else if (rc == HEARTH_ERR_ARG)
      gen_fail_set(f, 400, "logit_bias", "invalid_value", "%s", err.msg);
    else
      gen_fail_set(f, 500, NULL, NULL, "%s", errors_scrub(err.msg));
    free(qs);
    return -1;
  }
  for (int k = 0; k < total; k++) {
    struct gen_reader *gk = &g[k];
    gk->q = qs[k];
    gk->tio = m->tio;
    gk->n_stop = o->n_stop;
    for (int i = 0; i < o->n_stop; i++) {
      gk->stop[i] = o->stop[i];
      size_t l = strlen(o->stop[i]);
      if (l > gk->max_stop) gk->max_stop = l;
    }
    gk->n_prompt = qs[k]->n_prompt;
    gk->watch = *watch;
  }
  free(qs);
  return 0;
}

/* ---- reading tokens back --------------------------------------------------------------------- */

/* Earliest stop-string match in s[0..n): its offset, or -1. */
static long find_stop(const struct gen_reader *g, const char *s, size_t n) {
  long best = -1;
  for (int i = 0; i < g->n_stop; i++) {
    const char *p = memmem(s, n, g->stop[i], strlen(g->stop[i]));
    if (p && (best < 0 || p - s < best)) best = p - s;
  }
  return best;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of some stop string. */
static size_t stop_holdback(const struct gen_reader *g, const char *s, size_t n) {
  size_t best = 0;
  for (int i = 0; i < g->n_stop; i++) {
    size_t l = strlen(g->stop[i]);
    for (size_t k = (l - 1 < n ? l - 1 : n); k > best; k--)
      if (!memcmp(s + n - k, g->stop[i], k)) { best = k; break; }
  }
  return best;
}

static void finish_with(struct gen_reader *g, const char *reason, const char *msg) {
  g->done = 1;
  g->finish = reason;
  if (!reason && !g->err_status) {
    g->err_status = 500;
    g->err_code = "generation_failed";
  }
  if (msg) {
    snprintf(g->errmsg, sizeof g->errmsg, "%s", msg);
    errors_scrub(g->errmsg);
  }
  if (!reason) atomic_store(&g->q->cancel, 1);
}

int gen_reader_next(struct gen_reader *g, int timeout_ms, struct sbuf *text) {
  g->n_ev = 0;
  if (g->done) return 1;
  enum gen_finish fin = GEN_RUNNING;
  int n = 0;
  for (int waited = 0;;) {
    /* streams are watched by gen_wait_any, which can ask for a probe to be written */
    if (!g->watch.stream && http_watch_check(&g->watch) == HTTP_PEER_GONE) {
      atomic_store(&g->q->cancel, 1);
      return -1;
    }
    int slice = timeout_ms - waited < 20 ? timeout_ms - waited : 20;
    if (slice < 0) slice = 0;
    n = gen_req_take(g->q, g->n_taken, g->ev, (int)(sizeof g->ev / sizeof g->ev[0]), slice, &fin);
    if (n || fin != GEN_RUNNING) break;
    waited += slice;
    if (waited >= timeout_ms) return 0;
  }
  struct hearth_err err = {0};
  for (int i = 0; i < n; i++) {
    g->n_taken++;
    g->n_ev = i + 1;
    if (textio_detok_push(g->dt, g->ev[i].id, &g->pending, &err)) {
      finish_with(g, NULL, err.msg);
      return 1;
    }
    long at = g->n_stop ? find_stop(g, g->pending.p ? g->pending.p : "", g->pending.n) : -1;
    if (at >= 0) {
      sbuf_add(text, g->pending.p, (size_t)at);
      sbuf_reset(&g->pending);
      atomic_store(&g->q->cancel, 1); /* no more tokens needed */
      g->n_cached = g->q->n_cached;
      g->done = 1;
      g->finish = "stop";
      return 1;
    }
  }
  if (fin == GEN_RUNNING) { /* release all but a possible stop-string start */
    size_t hold = g->n_stop ? stop_holdback(g, g->pending.p ? g->pending.p : "", g->pending.n) : 0;
    sbuf_add(text, g->pending.p ? g->pending.p : "", g->pending.n - hold);
    sbuf_consume(&g->pending, g->pending.n - hold);
    return 0;
  }
  /* finished: flush the detokenizer, check the stops once more, release the rest */
  if (textio_detok_flush(g->dt, &g->pending, &err)) { finish_with(g, NULL, err.msg); return 1; }
  long at = g->n_stop ? find_stop(g, g->pending.p ? g->pending.p : "", g->pending.n) : -1;
  sbuf_add(text, g->pending.p ? g->pending.p : "", at >= 0 ? (size_t)at : g->pending.n);
  sbuf_reset(&g->pending);
  g->n_cached = g->q->n_cached;
  switch (fin) {
  case GEN_FIN_EOS: finish_with(g, "stop", NULL); break;
  case GEN_FIN_LENGTH: finish_with(g, at >= 0 ? "stop" : "length", NULL); break;
  case GEN_FIN_CANCELLED: /* not by this reader (it returned already): the server is stopping */
    g->err_status = 503;
    g->err_code = "shutting_down";
    finish_with(g, NULL, "the server is shutting down; the request was cancelled");
    break;
  default: finish_with(g, NULL, g->q->errmsg[0] ? g->q->errmsg : "generation failed"); break;
  }
  return 1;
}

int gen_wait_any(struct gen_reader *g, int n, int timeout_ms) {
  double t0 = http_now();
  for (;;) {
    int live = 0, first = -1;
    for (int k = 0; k < n; k++) {
      if (g[k].reported) continue;
      live++;
      if (g[k].done || gen_req_ready(g[k].q, g[k].n_taken, 0)) return 1;
      if (first < 0) first = k;
    }
    if (!live) return 1;
    int pc = http_watch_check(&g[0].watch);
    if (pc == HTTP_PEER_GONE) {
      for (int k = 0; k < n; k++)
        if (g[k].q) atomic_store(&g[k].q->cancel, 1);
      return -1;
    }
    if (pc == HTTP_PEER_PROBE) return 2;
    int left = timeout_ms - (int)((http_now() - t0) * 1e3);
    if (left <= 0) return 0;
    /* a short slice on the first, then look at all (and the client) again */
    gen_req_ready(g[first].q, g[first].n_taken, left < 20 ? left : 20);
  }
}

const struct gen_event *gen_reader_prompt_logprobs(const struct gen_reader *g) {
  /* the engine fills pev before the first event or the finish; both pass through q->mu */
  if (!g->q || !g->q->pev || !(g->n_taken > 0 || (g->done && g->finish))) return NULL;
  return g->q->pev;
}

const int32_t *gen_reader_prompt(const struct gen_reader *g) { return g->q ? g->q->prompt : NULL; }

void gen_reader_free(struct gen_reader *g) {
  if (g->q) {
    atomic_store(&g->q->cancel, 1);
    gen_req_unref(g->q);
  }
  textio_detok_free(g->dt);
  sbuf_free(&g->pending);
  memset(g, 0, sizeof *g);
}

/* ---- response pieces ------------------------------------------------------------------------- */

static json_t *bytes_array(const char *s, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
  return a;
}

static json_t *token_entry(const struct textio *tio, int32_t id, float lp) {
  char *s = NULL;
  size_t n = 0;
  struct hearth_err err;
  if (textio_decode(tio, &id, 1, 0, &s, &n, &err)) { s = NULL; n = 0; }
  json_t *o = json_pack("{s:s%, s:f, s:o}", "token", s ? s : "", n, "logprob", (double)lp, "bytes",
                        bytes_array(s ? s : "", n));
  free(s);
  return o;
}

json_t *gen_logprob_chat(const struct textio *tio, const struct gen_event *ev, int with_top) {
  json_t *o = token_entry(tio, ev->id, ev->logprob);
  json_t *top = json_array();
  for (int i = 0; with_top && i < ev->n_top; i++)
    json_array_append_new(top, token_entry(tio, ev->top_id[i], ev->top_lp[i]));
  json_object_set_new(o, "top_logprobs", top);
  return o;
}

void gen_id(char *buf, size_t n, const char *prefix) {
  static atomic_ulong counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  unsigned long c = atomic_fetch_add(&counter, 1);
  snprintf(buf, n, "%s-%lx%05lx%04lx", prefix, (unsigned long)ts.tv_sec,
           (unsigned long)(ts.tv_nsec / 10000) & 0xfffff, c & 0xffff);
}

json_t *gen_usage(const struct gen_reader *g, int n, int n_per) {
  long long prompt = 0, completion = 0, cached = 0, best = 0;
  for (int k = 0; k < n; k++) {
    if (k % n_per == 0) {
      prompt += g[k].n_prompt;
      cached += best;
      best = 0;
    }
    completion += g[k].n_taken;
    if (g[k].n_cached > best) best = g[k].n_cached;
  }
  cached += best;
  return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt,
                   "completion_tokens", (json_int_t)completion, "total_tokens",
                   (json_int_t)(prompt + completion), "prompt_tokens_details", "cached_tokens",
                   (json_int_t)cached);
}
