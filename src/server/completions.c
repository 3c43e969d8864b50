/* server/completions.c — POST /v1/completions (legacy text completion), plain and streamed.
 * prompt: a string, an array of one string, an array of token ids, or an array of one such array.
 * Several prompts in one request (n, best_of > 1, echo, suffix) are refused with 400. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/gen.h"
#include "server/routes.h"
#include "server/sse.h"

struct cmpl {
  struct gen_reader g;
  struct gen_opts o;
  struct sbuf text;        /* whole text (non-streamed) */
  json_t *lp;              /* legacy logprobs object being built */
  size_t offset;           /* text_offset of the next token */
  char id[64];
  char model[256];
  time_t created;
};

static void cmpl_free(void *p) {
  struct cmpl *c = p;
  gen_reader_free(&c->g);
  sbuf_free(&c->text);
  json_decref(c->lp);
  free(c);
}

/* Legacy logprobs of the tokens just taken: {tokens, token_logprobs, top_logprobs, text_offset}. */
static json_t *legacy_logprobs(struct cmpl *c, json_t *into) {
  if (!into) into = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                              "text_offset");
  for (int i = 0; i < c->g.n_ev; i++) {
    const struct gen_event *ev = &c->g.ev[i];
    char *s = NULL;
    size_t n = 0;
    struct hearth_err err;
    if (textio_decode(c->g.tio, &ev->id, 1, 0, &s, &n, &err)) { s = NULL; n = 0; }
    json_array_append_new(json_object_get(into, "tokens"), json_stringn(s ? s : "", n));
    json_array_append_new(json_object_get(into, "token_logprobs"), json_real(ev->logprob));
    json_array_append_new(json_object_get(into, "text_offset"), json_integer((json_int_t)c->offset));
    c->offset += n;
    free(s);
    json_t *top = json_object();
    for (int k = 0; k < ev->n_top; k++) {
      char *t = NULL;
      size_t tn = 0;
      if (textio_decode(c->g.tio, &ev->top_id[k], 1, 0, &t, &tn, &err)) continue;
      if (!json_object_get(top, t)) json_object_set_new(top, t, json_real(ev->top_lp[k]));
      free(t);
    }
    json_array_append_new(json_object_get(into, "top_logprobs"), top);
  }
  return into;
}

static json_t *chunk(struct cmpl *c, const char *text, size_t n, const char *finish, json_t *lp) {
  json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:s%, s:i, s:o, s:o}]}", "id", c->id,
                        "object", "text_completion", "created", (json_int_t)c->created, "model",
                        c->model, "system_fingerprint", "hearth", "choices", "text", text, n,
                        "index", 0, "logprobs", lp ? lp : json_null(), "finish_reason",
                        finish ? json_string(finish) : json_null());
  if (o && c->o.include_usage) json_object_set_new(o, "usage", json_null());
  return o;
}

static int cmpl_produce(void *ctx, struct sbuf *out) {
  struct cmpl *c = ctx;
  struct sbuf text = {0};
  int rc = gen_reader_next(&c->g, 1000, &text);
  if (rc < 0) { sbuf_free(&text); return -1; }
  json_t *lp = c->o.logprobs && c->g.n_ev ? legacy_logprobs(c, NULL) : NULL;
  int fail = 0;
  if (text.n || lp) fail = sse_event(out, chunk(c, text.p ? text.p : "", text.n, NULL, lp));
  sbuf_free(&text);
  if (fail) return -1;
  if (rc == 0) return 0;
  if (!c->g.finish) {
    sse_event(out, json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", c->g.errmsg, "type",
                             "server_error", "param", "code"));
    sse_done(out);
    return 1;
  }
  if (sse_event(out, chunk(c, "", 0, c->g.finish, NULL))) return -1;
  if (c->o.include_usage) {
    json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", c->id, "object",
                          "text_completion", "created", (json_int_t)c->created, "model", c->model,
                          "system_fingerprint", "hearth", "choices", "usage", gen_usage(&c->g));
    if (sse_event(out, u)) return -1;
  }
  return sse_done(out) ? -1 : 1;
}

static enum MHD_Result cmpl_whole(struct http_req *r, struct cmpl *c) {
  for (;;) {
    int rc = gen_reader_next(&c->g, 1000, &c->text);
    if (rc < 0) { cmpl_free(c); return MHD_NO; }
    if (c->o.logprobs && c->g.n_ev) c->lp = legacy_logprobs(c, c->lp);
    if (rc == 1) break;
  }
  if (!c->g.finish) {
    enum MHD_Result ret = http_reply_error(r, 500, NULL, "generation_failed", "%s", c->g.errmsg);
    cmpl_free(c);
    return ret;
  }
  json_t *lp = c->o.logprobs ? (c->lp ? json_incref(c->lp) : legacy_logprobs(c, NULL)) : json_null();
  json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:s%, s:i, s:o, s:s}], s:o}", "id", c->id,
                           "object", "text_completion", "created", (json_int_t)c->created, "model",
                           c->model, "system_fingerprint", "hearth", "choices", "text",
                           c->text.p ? c->text.p : "", c->text.n, "index", 0, "logprobs", lp,
                           "finish_reason", c->g.finish, "usage", gen_usage(&c->g));
  cmpl_free(c);
  return http_reply_json(r, 200, body);
}

/* The prompt as token ids (*ids malloc'd). Returns 0 or -1 with *e filled. */
static int read_prompt(struct srv_model *m, json_t *p, int32_t **ids, int *n, struct verr *e) {
  if (json_is_array(p) && json_array_size(p) == 1 &&
      (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
    p = json_array_get(p, 0);
  if (json_is_string(p)) {
    struct hearth_err err = {0};
    if (textio_encode(m->tio, json_string_value(p), json_string_length(p), 1, ids, n, &err))
      return v_fail(e, "prompt", "cannot tokenize the prompt: %s", err.msg);
    return 0;
  }
  if (json_is_array(p) && json_array_size(p) > 0) {
    size_t k = json_array_size(p), i;
    json_t *v;
    int32_t *out = malloc(k * sizeof *out);
    if (!out) return v_fail(e, "prompt", "out of memory");
    json_array_foreach(p, i, v) {
      if (!json_is_integer(v) || json_integer_value(v) < 0 ||
          json_integer_value(v) >= m->info->n_vocab) {
        free(out);
        if (json_is_string(v))
          return v_fail(e, "prompt", "'prompt' may hold only one string (batched prompts are not supported)");
        return v_fail(e, "prompt", "'prompt[%zu]' must be a token id in [0, %d)", i, m->info->n_vocab);
      }
      out[i] = (int32_t)json_integer_value(v);
    }
    *ids = out;
    *n = (int)k;
    return 0;
  }
  return v_fail(e, "prompt", "'prompt' must be a string, an array of token ids, or an array of one of those");
}

enum MHD_Result ep_completions(struct http_req *r) {
  enum MHD_Result ret;
  struct srv_model *m = ep_pick_model(r, 0, &ret);
  if (!m) return ret;
  struct verr e = {{0}, {0}};
  struct cmpl *c = calloc(1, sizeof *c);
  if (!c) return http_reply_error(r, 500, NULL, NULL, "out of memory");
  if (gen_parse(r->json, 0, &c->o, &e)) { free(c); return http_reply_verr(r, &e); }
  json_t *p = json_object_get(r->json, "prompt");
  if (!p || json_is_null(p)) {
    free(c);
    v_fail(&e, "prompt", "'prompt' is required");
    return http_reply_verr(r, &e);
  }
  int32_t *ids = NULL;
  int n = 0;
  if (read_prompt(m, p, &ids, &n, &e)) { free(c); return http_reply_verr(r, &e); }
  if (gen_start(r, m, ids, n, &c->o, &c->g, &ret)) { free(c); return ret; }
  gen_id(c->id, sizeof c->id, "cmpl");
  snprintf(c->model, sizeof c->model, "%s", m->id);
  c->created = time(NULL);
  if (c->o.stream) return sse_reply(r, cmpl_produce, cmpl_free, c);
  return cmpl_whole(r, c);
}
