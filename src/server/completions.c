/* server/completions.c — POST /v1/completions (legacy text completion), plain and streamed.
 *
 * prompt: a string, an array of token ids, or an array of either (several prompts). Every prompt
 * gets n choices; choice index = prompt index * n + j, as OpenAI orders them. echo: the prompt's
 * text comes before the completion (streamed: as the choice's first chunk); with logprobs the
 * prompt tokens are scored too, the first one null (the legacy shape), and max_tokens may be 0 to
 * score a text without generating. best_of > 1 and suffix are refused with 400.
 *
 * labels (a hearth extension, README "Label scoring"): an array of strings; each choice also gets
 * label_scores, every label's log-probability of its whole token sequence after the prompt (teacher
 * forcing, engine.h) and its probability normalised over the label set. A label is tokenized on its
 * own, without special tokens, as the continuation of the prompt (" yes" and "yes" differ). With
 * labels, max_tokens may be 0 (score only); streaming is refused.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "server/errors.h"
#include "server/gen.h"
#include "server/routes.h"
#include "server/sse.h"
#include "server/stream_load.h"

struct cmpl_choice {
  struct sbuf text;        /* whole text (non-streamed) */
  json_t *lp;              /* legacy logprobs object being built */
  size_t offset;           /* text_offset of the next token, in characters */
  int echoed;              /* the echo (streamed) has been sent */
};

#define CMPL_MAX_LABELS 64

struct cmpl {
  struct gen_opts o;
  json_t *body;            /* the request (borrowed: the reply or the stream keeps it alive) */
  json_t *labels;          /* the request's "labels" (borrowed from the body) or NULL */
  int32_t *lab_tok;        /* their tokens (o.lab_tok points here) */
  int lab_off[CMPL_MAX_LABELS + 1];
  int n;                   /* choices = prompts x o.n */
  struct gen_reader *g;    /* [n] */
  struct cmpl_choice *ch;  /* [n] */
  char id[64];
  char model[256];
  time_t created;
};

static void cmpl_free(void *p) {
  struct cmpl *c = p;
  for (int k = 0; k < c->n; k++) {
    gen_reader_free(&c->g[k]);
    sbuf_free(&c->ch[k].text);
    json_decref(c->ch[k].lp);
  }
  free(c->g);
  free(c->ch);
  free(c->lab_tok);
  free(c);
}

/* choice k's label_scores: [{label, logprob, prob, tokens}] in the request's order; prob is the
 * softmax of the logprobs over the label set */
static json_t *label_scores(const struct cmpl *c, int k) {
  const struct gen_req *q = c->g[k].q;
  double mx = -INFINITY, sum = 0;
  for (int l = 0; l < q->n_labels; l++)
    if (q->lab_lp[l] > mx) mx = q->lab_lp[l];
  for (int l = 0; l < q->n_labels; l++) sum += exp(q->lab_lp[l] - mx);
  json_t *a = json_array();
  for (int l = 0; l < q->n_labels; l++)
    json_array_append_new(a, json_pack("{s:O, s:f, s:f, s:i}", "label", json_array_get(c->labels, (size_t)l),
                                       "logprob", q->lab_lp[l], "prob", exp(q->lab_lp[l] - mx) / sum,
                                       "tokens", q->lab_off[l + 1] - q->lab_off[l]));
  return a;
}

/* The request's "labels" into c (tokens, offsets, o.n_labels). 0, or -1 with *e filled. */
static int read_labels(struct srv_model *m, json_t *body, struct cmpl *c, struct verr *e) {
  json_t *a = json_object_get(body, "labels");
  if (!a || json_is_null(a)) return 0;
  if (!json_is_array(a) || !json_array_size(a) || json_array_size(a) > CMPL_MAX_LABELS)
    return v_fail(e, "labels", "'labels' must be an array of 1 to %d strings", CMPL_MAX_LABELS);
  c->labels = a;
  size_t i;
  json_t *v;
  json_array_foreach(a, i, v) {
    if (!json_is_string(v) || !json_string_length(v))
      return v_fail(e, "labels", "'labels[%zu]' must be a non-empty string", i);
    int32_t *ids = NULL;
    int n = 0;
    struct hearth_err err = {0};
    if (textio_encode(m->tio, json_string_value(v), json_string_length(v), 0, &ids, &n, &err))
      return v_fail(e, "labels", "cannot tokenize 'labels[%zu]': %s", i, errors_scrub(err.msg));
    if (n < 1 || n > GEN_MAX_LABEL_TOKENS) {
      free(ids);
      return v_fail(e, "labels", "'labels[%zu]' is %d tokens; a label is 1 to %d", i, n, GEN_MAX_LABEL_TOKENS);
    }
    int32_t *t = realloc(c->lab_tok, (size_t)(c->lab_off[i] + n) * sizeof *t);
    if (!t) { free(ids); return v_fail(e, "labels", "out of memory"); }
    c->lab_tok = t;
    memcpy(t + c->lab_off[i], ids, (size_t)n * sizeof *ids);
    free(ids);
    c->lab_off[i + 1] = c->lab_off[i] + n;
  }
  c->o.n_labels = (int)json_array_size(a);
  c->o.lab_tok = c->lab_tok;
  c->o.lab_off = c->lab_off;
  return 0;
}

static json_t *lp_new(void) {
  return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                   "text_offset");
}

/* Characters (code points) in UTF-8 text: text_offset counts characters, as Python clients index. */
static size_t u8len(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
  return k;
}

/* Appends one token to a legacy logprobs object; ev NULL = the unscored first prompt token. */
static void lp_add(const struct textio *tio, json_t *into, int32_t id, const struct gen_event *ev,
                   size_t *offset) {
  char *s = NULL;
  size_t n = 0;
  struct hearth_err err;
  if (textio_decode(tio, &id, 1, 0, &s, &n, &err)) { s = NULL; n = 0; }
  json_array_append_new(json_object_get(into, "tokens"), json_stringn(s ? s : "", n));
  json_array_append_new(json_object_get(into, "token_logprobs"),
                        ev ? json_real(ev->logprob) : json_null());
  json_array_append_new(json_object_get(into, "text_offset"), json_integer((json_int_t)*offset));
  *offset += u8len(s ? s : "", n);
  json_t *top = ev ? json_object() : json_null();
  for (int k = 0; ev && k < ev->n_top; k++) {
    char *t = NULL;
    size_t tn = 0;
    if (textio_decode(tio, &ev->top_id[k], 1, 0, &t, &tn, &err)) continue;
    if (!json_object_get(top, t)) json_object_set_new(top, t, json_real(ev->top_lp[k]));
    free(t);
  }
  /* the legacy API always lists the token taken, so the dict holds up to logprobs + 1 entries (a sampled
   * token need not be among the most likely ones) */
  if (ev && ev->n_top > 0 && s && !json_object_get(top, s)) json_object_set_new(top, s, json_real(ev->logprob));
  free(s);
  json_array_append_new(json_object_get(into, "top_logprobs"), top);
}

/* Legacy logprobs of the tokens just taken by choice k: {tokens, token_logprobs, top_logprobs,
 * text_offset}, appended to into (a new object when NULL). */
static json_t *legacy_logprobs(struct cmpl *c, int k, json_t *into) {
  if (!into) into = lp_new();
  for (int i = 0; i < c->g[k].n_ev; i++)
    lp_add(c->g[k].tio, into, c->g[k].ev[i].id, &c->g[k].ev[i], &c->ch[k].offset);
  return into;
}

/* The echo of choice k's prompt: its text into text and, with logprobs, its scored tokens into
 * *lp (created). Moves the choice's text_offset past the prompt. */
static void echo_prompt(struct cmpl *c, int k, struct sbuf *text, json_t **lp) {
  const struct gen_reader *g = &c->g[k];
  const int32_t *ids = gen_reader_prompt(g);
  char *s = NULL;
  size_t n = 0;
  struct hearth_err err;
  if (textio_decode(g->tio, ids, g->n_prompt, 0, &s, &n, &err)) { s = NULL; n = 0; }
  sbuf_add(text, s ? s : "", n);
  c->ch[k].offset = u8len(s ? s : "", n);
  free(s);
  if (c->o.logprobs) {
    const struct gen_event *pev = gen_reader_prompt_logprobs(g);
    size_t off = 0;
    if (!*lp) *lp = lp_new();
    for (int i = 0; i < g->n_prompt; i++)
      lp_add(g->tio, *lp, ids[i], i && pev ? &pev[i] : NULL, &off);
  }
}

static json_t *chunk(struct cmpl *c, int index, const char *text, size_t n, const char *finish,
                     json_t *lp) {
  json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:s%, s:i, s:o, s:o}]}", "id", c->id,
                        "object", "text_completion", "created", (json_int_t)c->created, "model",
                        c->model, "system_fingerprint", "hearth", "choices", "text", text, n,
                        "index", index, "logprobs", lp ? lp : json_null(), "finish_reason",
                        finish ? json_string(finish) : json_null());
  if (o && c->o.include_usage) json_object_set_new(o, "usage", json_null());
  return o;
}

static json_t *usage(struct cmpl *c) { return gen_usage(c->g, c->n, c->o.n); }

/* Streams whatever choice k has (its echo first). Returns 0, 1 (the stream ended with an error
 * event) or -1 (client gone / OOM). */
static int produce_choice(struct cmpl *c, int k, struct sbuf *out) {
  struct gen_reader *g = &c->g[k];
  struct cmpl_choice *ch = &c->ch[k];
  struct sbuf text = {0};
  int rc = gen_reader_next(g, 0, &text);
  if (rc < 0) { sbuf_free(&text); return -1; }
  int fail = 0;
  if (c->o.echo && !ch->echoed && (rc == 0 || g->finish) &&
      (!c->o.logprobs || gen_reader_prompt_logprobs(g))) {
    struct sbuf et = {0};
    json_t *elp = NULL;
    echo_prompt(c, k, &et, &elp);
    ch->echoed = 1;
    fail = sse_event(out, chunk(c, k, et.p ? et.p : "", et.n, NULL, elp));
    sbuf_free(&et);
  }
  json_t *lp = !fail && c->o.logprobs && g->n_ev ? legacy_logprobs(c, k, NULL) : NULL;
  if (!fail && (text.n || lp)) fail = sse_event(out, chunk(c, k, text.p ? text.p : "", text.n, NULL, lp));
  sbuf_free(&text);
  if (fail) return -1;
  if (rc == 0) return 0;
  g->reported = 1;
  if (!g->finish) {
    sse_event(out, json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", g->errmsg, "type",
                             "server_error", "param", "code", g->err_code ? g->err_code : "generation_failed"));
    sse_done(out);
    return 1;
  }
  return sse_event(out, chunk(c, k, "", 0, g->finish, NULL)) ? -1 : 0;
}

static int cmpl_produce(void *ctx, struct sbuf *out, int timeout_ms) {
  struct cmpl *c = ctx;
  int w = gen_wait_any(c->g, c->n, timeout_ms);
  if (w < 0) return -1;
  if (w == 2) return sbuf_adds(out, ": probe\n\n") ? -1 : 0; /* the client's input ended: still there? */
  int live = 0;
  for (int k = 0; k < c->n; k++) {
    if (c->g[k].reported) continue;
    int rc = produce_choice(c, k, out);
    if (rc) return rc;
    live += !c->g[k].reported;
  }
  if (live) return 0;
  if (c->o.include_usage) {
    json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", c->id, "object",
                          "text_completion", "created", (json_int_t)c->created, "model", c->model,
                          "system_fingerprint", "hearth", "choices", "usage", usage(c));
    if (sse_event(out, u)) return -1;
  }
  return sse_done(out) ? -1 : 1;
}

static enum MHD_Result cmpl_whole(struct http_req *r, struct cmpl *c) {
  json_t *choices = json_array();
  for (int k = 0; k < c->n; k++) {
    struct gen_reader *g = &c->g[k];
    struct cmpl_choice *ch = &c->ch[k];
    struct sbuf gen = {0};
    json_t *glp = NULL;
    for (;;) {
      int rc = gen_reader_next(g, 1000, &gen);
      if (rc < 0) { sbuf_free(&gen); json_decref(glp); json_decref(choices); cmpl_free(c); return MHD_NO; }
      if (c->o.logprobs && g->n_ev) glp = legacy_logprobs(c, k, glp);
      if (rc == 1) break;
    }
    if (!g->finish) {
      enum MHD_Result ret = http_reply_error(r, g->err_status ? g->err_status : 500, NULL,
                                             g->err_code ? g->err_code : "generation_failed", "%s", g->errmsg);
      sbuf_free(&gen);
      json_decref(glp);
      json_decref(choices);
      cmpl_free(c);
      return ret;
    }
    /* echo: the prompt first; the generated tokens' offsets move past it */
    if (c->o.echo) {
      echo_prompt(c, k, &ch->text, &ch->lp);
      if (glp) {
        static const char *const KEYS[] = {"tokens", "token_logprobs", "top_logprobs"};
        for (int i = 0; i < 3; i++)
          json_array_extend(json_object_get(ch->lp, KEYS[i]), json_object_get(glp, KEYS[i]));
        size_t j;
        json_t *v;
        json_array_foreach(json_object_get(glp, "text_offset"), j, v)
          json_array_append_new(json_object_get(ch->lp, "text_offset"),
                                json_integer(json_integer_value(v) + (json_int_t)ch->offset));
      }
    } else {
      ch->lp = glp ? json_incref(glp) : NULL;
    }
    json_decref(glp);
    sbuf_add(&ch->text, gen.p ? gen.p : "", gen.n);
    sbuf_free(&gen);
    json_t *lp = c->o.logprobs ? (ch->lp ? json_incref(ch->lp) : lp_new()) : json_null();
    json_t *cj = json_pack("{s:s%, s:i, s:o, s:s}", "text", ch->text.p ? ch->text.p : "", ch->text.n, "index", k,
                           "logprobs", lp, "finish_reason", g->finish);
    if (cj && c->o.n_labels) json_object_set_new(cj, "label_scores", label_scores(c, k));
    json_array_append_new(choices, cj);
  }
  json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", c->id, "object",
                           "text_completion", "created", (json_int_t)c->created, "model", c->model,
                           "system_fingerprint", "hearth", "choices", choices, "usage", usage(c));
  cmpl_free(c);
  return http_reply_json(r, 200, body);
}

/* One prompt (a string or an array of token ids) as ids (*ids malloc'd). name: for messages. */
static int one_prompt(struct srv_model *m, json_t *p, const char *name, struct gen_prompt *out,
                      struct verr *e) {
  if (json_is_string(p)) {
    struct hearth_err err = {0};
    if (textio_encode(m->tio, json_string_value(p), json_string_length(p), 1, &out->ids, &out->n, &err))
      return v_fail(e, "prompt", "cannot tokenize '%s': %s", name, errors_scrub(err.msg));
    return 0;
  }
  if (!json_is_array(p) || !json_array_size(p))
    return v_fail(e, "prompt", "'%s' must be a string or a non-empty array of token ids", name);
  size_t k = json_array_size(p), i;
  json_t *v;
  out->ids = malloc(k * sizeof *out->ids);
  if (!out->ids) return v_fail(e, "prompt", "out of memory");
  json_array_foreach(p, i, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= m->info->n_vocab) {
      free(out->ids);
      out->ids = NULL;
      return v_fail(e, "prompt", "'%s[%zu]' must be a token id in [0, %d)", name, i, m->info->n_vocab);
    }
    out->ids[i] = (int32_t)json_integer_value(v);
  }
  out->n = (int)k;
  return 0;
}

/* Many string prompts of one request are tokenized by a few threads at once: a label-scoring request of 1,024
 * records would otherwise spend tens of milliseconds here, on one core, before the engine sees any of them. */
enum { TOK_PAR_MIN = 32, TOK_THREADS = 8 };

struct tok_par {
  struct srv_model *m;
  json_t *p;
  struct gen_prompt *ps;
  int n;
  int *rc;                 /* [n] 0, or the failure of prompt i (its message in err[i]) */
  struct hearth_err *err;  /* [n] */
  atomic_int next;
};

static void *tok_worker(void *arg) {
  struct tok_par *t = arg;
  for (int i; (i = atomic_fetch_add(&t->next, 1)) < t->n;) {
    json_t *v = json_array_get(t->p, (size_t)i);
    if (json_is_string(v))
      t->rc[i] = textio_encode(t->m->tio, json_string_value(v), json_string_length(v), 1, &t->ps[i].ids, &t->ps[i].n,
                               &t->err[i]);
  }
  return NULL;
}

/* tokenizes the string prompts of array p into ps in parallel; rc/err as in tok_par. 0, or -1 (no memory:
 * the caller tokenizes them itself) */
static int tokenize_parallel(struct srv_model *m, json_t *p, struct gen_prompt *ps, int n, int *rc,
                             struct hearth_err *err) {
  struct tok_par t = {.m = m, .p = p, .ps = ps, .n = n, .rc = rc, .err = err};
  atomic_init(&t.next, 0);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int nth = cpus > TOK_THREADS ? TOK_THREADS : cpus < 1 ? 1 : (int)cpus;
  pthread_t th[TOK_THREADS];
  int started = 0;
  for (int k = 1; k < nth; k++)
    if (pthread_create(&th[started], NULL, tok_worker, &t) == 0) started++;
  tok_worker(&t);
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
  return 0;
}

/* The request's prompts into ps[0..*n) (each .ids malloc'd; the caller frees them, also after a
 * failure). A string or a flat token array is one prompt; an array of those is several. */
static int read_prompts(struct srv_model *m, json_t *p, struct gen_prompt *ps, int *n, struct verr *e) {
  *n = 0;
  if (!p || json_is_null(p)) return v_fail(e, "prompt", "'prompt' is required");
  if (json_is_string(p) || (json_is_array(p) && json_is_integer(json_array_get(p, 0)))) {
    *n = 1;
    return one_prompt(m, p, "prompt", &ps[0], e);
  }
  if (!json_is_array(p) || !json_array_size(p))
    return v_fail(e, "prompt", "'prompt' must be a string, an array of token ids, or a non-empty "
                               "array of those");
  if (json_array_size(p) > GEN_MAX_CHOICES)
    return v_fail(e, "prompt", "'prompt' may hold at most %d prompts", GEN_MAX_CHOICES);
  size_t i;
  json_t *v;
  const int np = (int)json_array_size(p);
  int *rc = NULL;
  struct hearth_err *err = NULL;
  if (np >= TOK_PAR_MIN && (rc = calloc((size_t)np, sizeof *rc)) && (err = calloc((size_t)np, sizeof *err)))
    tokenize_parallel(m, p, ps, np, rc, err);
  int ret = 0;
  json_array_foreach(p, i, v) {
    char name[32];
    snprintf(name, sizeof name, "prompt[%zu]", i);
    *n = (int)i + 1;
    if (err && json_is_string(v)) { /* tokenized above: the first failure in order is the one reported */
      if (rc[i]) { ret = v_fail(e, "prompt", "cannot tokenize '%s': %s", name, errors_scrub(err[i].msg)); break; }
      continue;
    }
    if (one_prompt(m, v, name, &ps[i], e)) { ret = -1; break; }
  }
  if (err) *n = np; /* every prompt may hold ids: the caller frees them all */
  free(rc);
  free(err);
  return ret;
}

/* With the model: the prompts and labels tokenized and checked, the choices submitted. Returns 0,
 * or -1 with *f filled; c stays safe to cmpl_free. watch: the client, as gen_start takes it. */
static int cmpl_start(void *ctx, struct srv_model *m, const struct http_watch *watch,
                      struct gen_fail *f) {
  struct cmpl *c = ctx;
  struct verr e = {{0}, {0}};
  struct gen_prompt *ps = calloc(GEN_MAX_CHOICES, sizeof *ps);
  if (!ps) return gen_fail_set(f, 500, NULL, NULL, "out of memory");
  int np = 0;
  int rc = read_labels(m, c->body, c, &e);
  if (!rc) rc = read_prompts(m, json_object_get(c->body, "prompt"), ps, &np, &e);
  if (!rc && np * c->o.n > GEN_MAX_CHOICES)
    rc = v_fail(&e, "n", "%d prompts x n = %d choices; at most %d per request", np, np * c->o.n,
                GEN_MAX_CHOICES);
  if (rc) gen_fail_verr(f, &e);
  int longest = 0; /* a label's leading tokens are evaluated after the prompt: they must fit too */
  for (int l = 0; l < c->o.n_labels; l++)
    if (c->lab_off[l + 1] - c->lab_off[l] > longest) longest = c->lab_off[l + 1] - c->lab_off[l];
  for (int i = 0; !rc && longest > 1 && i < np; i++)
    if (ps[i].n + longest - 1 >= m->n_ctx)
      rc = gen_fail_set(f, 400, "prompt", "context_length_exceeded",
                        "prompt %d has %d tokens and its longest label %d; this server's context is %d tokens",
                        i, ps[i].n, longest, m->n_ctx);
  if (!rc) {
    c->g = calloc((size_t)(np * c->o.n), sizeof *c->g);
    c->ch = calloc((size_t)(np * c->o.n), sizeof *c->ch);
    if (!c->g || !c->ch) rc = gen_fail_set(f, 500, NULL, NULL, "out of memory");
  }
  if (!rc) {
    c->n = np * c->o.n; /* from here on cmpl_free frees n choices */
    rc = gen_start(m, ps, np, &c->o, watch, c->g, f);
  }
  for (int i = 0; i < np; i++) free(ps[i].ids);
  free(ps);
  if (rc) return -1;
  gen_id(c->id, sizeof c->id, "cmpl");
  snprintf(c->model, sizeof c->model, "%s", m->id);
  c->created = time(NULL);
  return 0;
}

static const struct stream_load_ops CMPL_STREAM = {cmpl_start, cmpl_produce, cmpl_free};

enum MHD_Result ep_completions(struct http_req *r) {
  enum MHD_Result ret;
  struct srv_model *m = NULL;
  /* a stream whose model must be loaded first starts its response now (stream_load.h) */
  int pending = ep_pick_model_or_pending(r, 0, &m, &ret);
  if (pending < 0) return ret;
  struct verr e = {{0}, {0}};
  struct cmpl *c = calloc(1, sizeof *c);
  if (!c) return http_reply_error(r, 500, NULL, NULL, "out of memory");
  c->body = r->json;
  json_t *labels = json_object_get(r->json, "labels");
  if (gen_parse(r->json, 0, &c->o, &e) ||
      (c->o.stream && labels && !json_is_null(labels) &&
       v_fail(&e, "labels", "'labels' cannot be streamed; send it with stream false"))) {
    cmpl_free(c);
    return http_reply_verr(r, &e);
  }
  if (pending) return stream_load_reply(r, 0, &CMPL_STREAM, c);
  struct http_watch w;
  struct gen_fail f;
  http_watch_init(r, c->o.stream, &w);
  if (cmpl_start(c, m, &w, &f)) {
    cmpl_free(c);
    return gen_fail_reply(r, &f);
  }
  if (c->o.stream) return sse_reply(r, cmpl_produce, cmpl_free, c);
  return cmpl_whole(r, c);
}
