/* server/chat_completions.c — POST /v1/chat/completions, plain and streamed.
 *
 * Request → validated messages (text parts joined into strings; images refused) → chat template
 * → tokens → engine. Output text goes through the chat output parser (tool calls, reasoning)
 * before it reaches the client. tool_choice "none" hides the tools from the template; "auto" offers
 * them; "required" or a named function forces one call (check_tool_choice).
 *
 * n > 1: n independent choices (engine requests) of the same prompt, streamed interleaved, each
 * chunk naming its choice's index. response_format: "text", or "json_object", which OpenAI accepts
 * only when a message mentions JSON (checked the same way, 400 otherwise); decoding is then
 * constrained to a JSON object (json_mask.h): the answer parses unless it is cut by max_tokens
 * (finish_reason "length"). "json_schema": decoding follows the schema compiled into a program
 * (json_schema.h: a subset of JSON Schema, one canonical layout); a schema outside the subset is a
 * 400 naming response_format.json_schema.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/err.h"
#include "server/errors.h"
#include "server/json_schema.h"
#include "server/gen.h"
#include "server/json_mask.h"
#include "server/routes.h"
#include "server/sse.h"
#include "server/srv.h"
#include "server/stream_load.h"
#include "server/textio.h"

static const char *const ROLES[] = {"system", "developer", "user", "assistant", "tool", NULL};

json_t *chat_messages_normalize(json_t *msgs, struct verr *e) {
  if (!msgs) { v_fail(e, "messages", "'messages' is required"); return NULL; }
  if (!json_array_size(msgs)) { v_fail(e, "messages", "'messages' must not be empty"); return NULL; }
  json_t *out = json_array();
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    char name[64];
    snprintf(name, sizeof name, "messages[%zu]", i);
    if (!json_is_object(m)) { v_fail(e, name, "'%s' must be an object", name); goto fail; }
    const char *role;
    struct verr e2;
    if (v_enum(m, "role", ROLES, NULL, &role, &e2) || !role) {
      v_fail(e, name, "'%s.role' must be one of system, developer, user, assistant, tool", name);
      goto fail;
    }
    json_t *c = json_object_get(m, "content");
    json_t *copy = json_deep_copy(m);
    if (!copy) { v_fail(e, name, "out of memory"); goto fail; }
    if (json_is_array(c)) {
      struct sbuf text = {0};
      size_t j;
      json_t *part;
      json_array_foreach(c, j, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(t)) {
          v_fail(e, name, "'%s.content[%zu]' must be a text part ({\"type\":\"text\",\"text\":...})",
                 name, j);
          sbuf_free(&text);
          json_decref(copy);
          goto fail;
        }
        sbuf_add(&text, json_string_value(t), json_string_length(t));
      }
      json_object_set_new(copy, "content", json_stringn(text.p ? text.p : "", text.n));
      sbuf_free(&text);
    } else if (!json_is_string(c) && !(c == NULL || json_is_null(c))) {
      v_fail(e, name, "'%s.content' must be a string or an array of text parts", name);
      json_decref(copy);
      goto fail;
    } else if ((!c || json_is_null(c)) && strcmp(role, "assistant")) {
      v_fail(e, name, "'%s.content' is required for role '%s'", name, role);
      json_decref(copy);
      goto fail;
    } else if (!c || json_is_null(c)) {
      /* an assistant turn that only called tools, as OpenAI sends it back (content null, or left
       * out): rendered as empty text, as transformers users pass it; the templates test
       * '</think>' in message.content or concatenate it, both errors on None or undefined */
      json_object_set_new(copy, "content", json_string(""));
    }
    json_t *tc = json_object_get(m, "tool_calls");
    if (tc && !json_is_null(tc)) {
      if (!json_is_array(tc)) {
        v_fail(e, name, "'%s.tool_calls' must be an array", name);
        json_decref(copy);
        goto fail;
      }
      /* templates want arguments as an object; OpenAI sends a JSON string */
      json_t *tcc = json_object_get(copy, "tool_calls");
      size_t k;
      json_t *call;
      json_array_foreach(tcc, k, call) {
        json_t *fn = json_object_get(call, "function");
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
          v_fail(e, name, "'%s.tool_calls[%zu].function.name' is required", name, k);
          json_decref(copy);
          goto fail;
        }
        json_t *args = json_object_get(fn, "arguments");
        if (json_is_string(args)) {
          json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
          if (parsed) json_object_set_new(fn, "arguments", parsed);
        }
      }
    }
    json_array_append_new(out, copy);
  }
  return out;
fail:
  json_decref(out);
  return NULL;
}

static int check_tools(json_t *tools, struct verr *e) {
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *type = json_string_value(json_object_get(t, "type"));
    json_t *fn = json_object_get(t, "function");
    if (!json_is_object(t) || !type || strcmp(type, "function") || !json_is_object(fn) ||
        !json_is_string(json_object_get(fn, "name")))
      return v_fail(e, "tools", "'tools[%zu]' must be {\"type\":\"function\",\"function\":{\"name\":...}}", i);
    json_t *params = json_object_get(fn, "parameters");
    if (params && !json_is_object(params))
      return v_fail(e, "tools", "'tools[%zu].function.parameters' must be an object", i);
  }
  return 0;
}

/* tool_choice "required" or {"type":"function","function":{"name":N}} with tools offered: decoding is
 * forced into one tool call (json_mask.h) when the template speaks Qwen's <tool_call> syntax, so the
 * answer is a call of one of the tools (of N). A named function must be among the tools (400).
 * Other templates keep the call optional. Names must be OpenAI's [A-Za-z0-9_-] (dots allowed).
 * This part needs no model: it validates, and notes the call asked for in *want_out (a named
 * function, else NULL) and *n_out (the tools it may call; 0: none), which force_tool_call acts on. */
static int check_tool_choice(json_t *tc, json_t *tools, struct gen_opts *o, const char **want_out,
                             int *n_out, struct verr *e) {
  const char *want = NULL;
  *want_out = NULL;
  *n_out = 0;
  if (json_is_object(tc)) {
    json_t *fn = json_object_get(tc, "function");
    const char *type = json_string_value(json_object_get(tc, "type"));
    want = json_string_value(json_object_get(fn, "name"));
    if (!type || strcmp(type, "function") || !want)
      return v_fail(e, "tool_choice", "'tool_choice' must be {\"type\":\"function\",\"function\":{\"name\":...}}");
  } else if (!json_is_string(tc) || strcmp(json_string_value(tc), "required")) {
    return 0;
  }
  if (!tools) return v_fail(e, "tool_choice", "'tool_choice' %s needs 'tools'", want ? "names a function: it" : "\"required\"");
  size_t i;
  json_t *t;
  int found = 0, n = 0;
  json_array_foreach(tools, i, t) {
    const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
    if (want && !strcmp(name, want)) found = 1;
    if (n < JPROG_MAX_NAMES) o->tool_names[n] = name;
    n++;
  }
  if (want && !found) return v_fail(e, "tool_choice", "'tool_choice' names '%s', which is not among the tools", want);
  *want_out = want;
  *n_out = n;
  return 0;
}

/* The model's part of check_tool_choice: forces the call when m's template speaks Qwen's syntax.
 * want/n: what check_tool_choice noted (n 0: no call asked for). */
static int force_tool_call(struct srv_model *m, json_t *tools, const char *want, int n, struct gen_opts *o,
                           struct verr *e) {
  if (!n || !textio_qwen_tool_calls(m->tio)) return 0; /* not forced: see above */
  /* the forcing program holds at most JPROG_MAX_NAMES names: refuse rather than not enforce */
  if (!want && n > JPROG_MAX_NAMES)
    return v_fail(e, "tool_choice",
                  "'tool_choice' \"required\" can be enforced with at most %d tools, got %d "
                  "(name one function or use \"auto\")", JPROG_MAX_NAMES, n);
  if (want) { o->tool_names[0] = want; n = 1; }
  for (int k = 0; k < n; k++)
    if (!jprog_name_ok(o->tool_names[k]))
      return v_fail(e, "tools", "function names must be 1 to 64 letters, digits, '_', '-' or '.'");
  o->n_tool_names = n;
  o->constrain = GEN_TOOL_CALL;
  o->jv = m->jv;
  /* One function: its arguments follow its "parameters" where json_schema.h can compile them (as vLLM does
   * for a forced call); a schema it refuses ($ref, anyOf, ...), and a choice among several functions (one
   * linear program cannot switch schemas on the name), leave the arguments any JSON object. */
  o->schema = NULL;
  if (n == 1) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
      json_t *fn = json_object_get(t, "function");
      const char *name = json_string_value(json_object_get(fn, "name"));
      json_t *params = json_object_get(fn, "parameters");
      if (!name || strcmp(name, o->tool_names[0]) || !json_is_object(params)) continue;
      struct jprog *args = jschema_compile(params, NULL, 0);
      struct jprog *call = args ? jprog_tool_call_args(name, args) : NULL;
      if (call) o->schema = params;
      jprog_free(call);
      jprog_free(args);
      break;
    }
  }
  return 0;
}

/* ---- one request's state ----------------------------------------------------------------- */

struct chat_choice {
  struct textio_parser *parser;
  struct textio_delta d;
  struct sbuf text;          /* whole visible text (non-streamed) */
  struct sbuf reasoning;
  json_t *tool_calls;        /* accumulated (non-streamed) */
  json_t *logprobs;          /* accumulated (non-streamed): array of entries */
  int n_tool_calls;
};

struct chat {
  struct gen_opts o;
  /* the request as chat_parse read it (pointing into the request JSON, except norm) */
  json_t *norm;              /* the messages, normalized (owned) */
  json_t *tools, *kwargs;    /* NULL when absent (tools also when empty or tool_choice "none") */
  enum gen_constrain json_mode;
  json_t *schema;
  const char *tool_want;     /* tool_choice names this function */
  int n_tools_named;         /* tool_choice asks for a call among this many tools (0: none) */
  int n;                     /* choices */
  struct gen_reader *g;      /* [n] */
  struct chat_choice *ch;    /* [n] */
  char id[64];
  char model[256];
  time_t created;
  int sent_role;
};

static void chat_free(void *p) {
  struct chat *c = p;
  for (int k = 0; k < c->n; k++) {
    struct chat_choice *ch = &c->ch[k];
    gen_reader_free(&c->g[k]);
    textio_parser_free(ch->parser);
    textio_delta_free(&ch->d);
    sbuf_free(&ch->text);
    sbuf_free(&ch->reasoning);
    json_decref(ch->tool_calls);
    json_decref(ch->logprobs);
  }
  free(c->g);
  free(c->ch);
  json_decref(c->norm);
  free(c);
}

static json_t *chunk(struct chat *c, int index, json_t *delta, const char *finish, json_t *logprobs) {
  json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "delta", delta, "logprobs",
                             logprobs ? logprobs : json_null(), "finish_reason",
                             finish ? json_string(finish) : json_null());
  json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", c->id, "object",
                        "chat.completion.chunk", "created", (json_int_t)c->created, "model",
                        c->model, "system_fingerprint", "hearth", "choices", choice);
  if (o && c->o.include_usage) json_object_set_new(o, "usage", json_null());
  return o;
}

/* Feeds newly released text (final: the end) through the choice's parser into ch->d. */
static int parse_text(struct chat_choice *ch, struct sbuf *text, int final) {
  struct hearth_err err = {0};
  textio_delta_reset(&ch->d);
  return textio_parser_feed(ch->parser, text->p ? text->p : "", text->n, final, &ch->d, &err);
}

static json_t *events_logprobs(struct chat *c, const struct gen_reader *g) {
  json_t *a = json_array();
  for (int i = 0; i < g->n_ev; i++)
    json_array_append_new(a, gen_logprob_chat(g->tio, &g->ev[i], c->o.top_logprobs > 0));
  return a;
}

static const char *finish_reason(const struct chat_choice *ch, const struct gen_reader *g) {
  return ch->n_tool_calls && !strcmp(g->finish, "stop") ? "tool_calls" : g->finish;
}

static json_t *usage(struct chat *c) { return gen_usage(c->g, c->n, c->n); }

/* Streams whatever choice k has; on its end, the finish chunk. Returns 0, 1 (an error event and
 * [DONE] were written: the stream ends) or -1 (client gone / OOM). */
static int produce_choice(struct chat *c, int k, struct sbuf *out) {
  struct gen_reader *g = &c->g[k];
  struct chat_choice *ch = &c->ch[k];
  struct sbuf text = {0};
  int rc = gen_reader_next(g, 0, &text);
  if (rc < 0) { sbuf_free(&text); return -1; }
  int prc = parse_text(ch, &text, rc == 1);
  sbuf_free(&text);
  if (prc) return -1;
  json_t *delta = json_object();
  if (ch->d.reasoning.n)
    json_object_set_new(delta, "reasoning_content", json_stringn(ch->d.reasoning.p, ch->d.reasoning.n));
  if (ch->d.content.n)
    json_object_set_new(delta, "content", json_stringn(ch->d.content.p, ch->d.content.n));
  if (ch->d.tool_calls) { /* streamed tool calls carry their index */
    size_t i;
    json_t *call;
    json_array_foreach(ch->d.tool_calls, i, call)
      json_object_set_new(call, "index", json_integer(ch->n_tool_calls++));
    json_object_set(delta, "tool_calls", ch->d.tool_calls);
  }
  json_t *lp = c->o.logprobs && g->n_ev ? json_pack("{s:o}", "content", events_logprobs(c, g)) : NULL;
  if (json_object_size(delta) || lp) {
    if (sse_event(out, chunk(c, k, delta, NULL, lp))) return -1;
  } else {
    json_decref(delta);
  }
  if (rc == 0) return 0;
  g->reported = 1;
  if (!g->finish) { /* failed mid-stream: an error event, then the end */
    sse_event(out, json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", g->errmsg, "type",
                             "server_error", "param", "code", g->err_code ? g->err_code : "generation_failed"));
    sse_done(out);
    return 1;
  }
  return sse_event(out, chunk(c, k, json_object(), finish_reason(ch, g), NULL)) ? -1 : 0;
}

static int chat_produce(void *ctx, struct sbuf *out, int timeout_ms) {
  struct chat *c = ctx;
  if (!c->sent_role) {
    c->sent_role = 1;
    for (int k = 0; k < c->n; k++)
      if (sse_event(out, chunk(c, k, json_pack("{s:s, s:s}", "role", "assistant", "content", ""),
                               NULL, NULL)))
        return -1;
    return 0;
  }
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
                          "chat.completion.chunk", "created", (json_int_t)c->created, "model",
                          c->model, "system_fingerprint", "hearth", "choices", "usage", usage(c));
    if (sse_event(out, u)) return -1;
  }
  return sse_done(out) ? -1 : 1;
}

/* Reads choice k to its end. Returns 0, or -1 when the client has gone. */
static int read_choice(struct chat *c, int k) {
  struct gen_reader *g = &c->g[k];
  struct chat_choice *ch = &c->ch[k];
  for (;;) {
    struct sbuf text = {0};
    int rc = gen_reader_next(g, 1000, &text);
    if (rc < 0) { sbuf_free(&text); return -1; }
    int prc = parse_text(ch, &text, rc == 1);
    sbuf_free(&text);
    if (prc) break;
    sbuf_add(&ch->text, ch->d.content.p ? ch->d.content.p : "", ch->d.content.n);
    sbuf_add(&ch->reasoning, ch->d.reasoning.p ? ch->d.reasoning.p : "", ch->d.reasoning.n);
    if (ch->d.tool_calls) {
      if (!ch->tool_calls) ch->tool_calls = json_array();
      json_array_extend(ch->tool_calls, ch->d.tool_calls);
    }
    if (c->o.logprobs) {
      if (!ch->logprobs) ch->logprobs = json_array();
      json_t *a = events_logprobs(c, g);
      json_array_extend(ch->logprobs, a);
      json_decref(a);
    }
    if (rc == 1) break;
  }
  ch->n_tool_calls = ch->tool_calls ? (int)json_array_size(ch->tool_calls) : 0;
  return 0;
}

static json_t *choice_json(struct chat *c, int k) {
  struct chat_choice *ch = &c->ch[k];
  json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                          ch->text.n || !ch->n_tool_calls
                              ? json_stringn(ch->text.p ? ch->text.p : "", ch->text.n)
                              : json_null());
  if (ch->reasoning.n)
    json_object_set_new(msg, "reasoning_content", json_stringn(ch->reasoning.p, ch->reasoning.n));
  if (ch->n_tool_calls) json_object_set(msg, "tool_calls", ch->tool_calls);
  json_t *lp = c->o.logprobs
                   ? json_pack("{s:O}", "content", ch->logprobs ? ch->logprobs : json_array())
                   : json_null();
  return json_pack("{s:i, s:o, s:o, s:s}", "index", k, "message", msg, "logprobs", lp,
                   "finish_reason", finish_reason(ch, &c->g[k]));
}

static enum MHD_Result chat_whole(struct http_req *r, struct chat *c) {
  for (int k = 0; k < c->n; k++) {
    if (read_choice(c, k)) { chat_free(c); return MHD_NO; } /* client gone: drop it */
    if (!c->g[k].finish) {
      const struct gen_reader *g = &c->g[k];
      enum MHD_Result ret = http_reply_error(r, g->err_status ? g->err_status : 500, NULL,
                                             g->err_code ? g->err_code : "generation_failed", "%s",
                                             g->errmsg[0] ? g->errmsg : "generation failed");
      chat_free(c);
      return ret;
    }
  }
  json_t *choices = json_array();
  for (int k = 0; k < c->n; k++) json_array_append_new(choices, choice_json(c, k));
  json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", c->id, "object",
                           "chat.completion", "created", (json_int_t)c->created, "model", c->model,
                           "system_fingerprint", "hearth", "choices", choices, "usage", usage(c));
  chat_free(c);
  return http_reply_json(r, 200, body);
}

/* 1 if some message's text mentions "json" (any case): OpenAI's condition for json_object mode. */
static int mentions_json(json_t *msgs) {
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    const char *t = json_string_value(json_object_get(m, "content"));
    for (; t && *t; t++)
      if (!strncasecmp(t, "json", 4)) return 1;
  }
  return 0;
}

/* response_format: absent, {"type":"text"}, {"type":"json_object"} or {"type":"json_schema",
 * "json_schema": {"name": ..., "schema": {...}}}. *json_mode: GEN_JSON_OBJECT or GEN_JSON_SCHEMA
 * (*schema set, and known to compile). Returns 0 or -1 with *e filled. */
static int check_response_format(json_t *rf, enum gen_constrain *json_mode, json_t **schema, struct verr *e) {
  static const char *const TYPES[] = {"text", "json_object", "json_schema", NULL};
  const char *type;
  *json_mode = GEN_FREE;
  *schema = NULL;
  if (!rf) return 0;
  if (v_enum(rf, "type", TYPES, NULL, &type, e) || !type) {
    return v_fail(e, "response_format",
                  "'response_format.type' must be one of 'text', 'json_object', 'json_schema'");
  }
  if (!strcmp(type, "json_schema")) {
    json_t *js = json_object_get(rf, "json_schema");
    json_t *sc = json_is_object(js) ? json_object_get(js, "schema") : NULL;
    if (!json_is_object(sc))
      return v_fail(e, "response_format.json_schema",
                    "'response_format.json_schema' must be an object with a 'schema' object");
    char msg[300];
    struct jprog *p = jschema_compile(sc, msg, sizeof msg);
    if (!p) return v_fail(e, "response_format.json_schema", "%s", msg);
    jprog_free(p);
    *json_mode = GEN_JSON_SCHEMA;
    *schema = sc;
    return 0;
  }
  *json_mode = !strcmp(type, "json_object") ? GEN_JSON_OBJECT : GEN_FREE;
  return 0;
}

/* Everything of a chat request that needs no model, into c (see struct chat). Returns 0, or -1
 * with *e filled (a 400). */
static int chat_parse(json_t *body, struct chat *c, struct verr *e) {
  json_t *rf;
  const char *tool_choice = NULL;
  json_t *tc = json_object_get(body, "tool_choice");
  if (gen_parse(body, 1, &c->o, e)) return -1;
  if (v_arr(body, "tools", &c->tools, e) || v_obj(body, "chat_template_kwargs", &c->kwargs, e) ||
      v_obj(body, "response_format", &rf, e) || (c->tools && check_tools(c->tools, e)) ||
      check_response_format(rf, &c->json_mode, &c->schema, e))
    return -1;
  if (json_is_string(tc)) tool_choice = json_string_value(tc);
  else if (tc && !json_is_null(tc) && !json_is_object(tc))
    return v_fail(e, "tool_choice", "'tool_choice' must be a string or an object");
  if (tool_choice && strcmp(tool_choice, "none") && strcmp(tool_choice, "auto") && strcmp(tool_choice, "required"))
    return v_fail(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function");
  if (c->tools && (!json_array_size(c->tools) || (tool_choice && !strcmp(tool_choice, "none"))))
    c->tools = NULL;
  if (check_tool_choice(tc, c->tools, &c->o, &c->tool_want, &c->n_tools_named, e)) return -1;
  json_t *msgs = json_object_get(body, "messages");
  if (msgs && !json_is_array(msgs)) return v_fail(e, "messages", "'messages' must be an array");
  if (!(c->norm = chat_messages_normalize(msgs, e))) return -1;
  if (c->json_mode == GEN_JSON_OBJECT && !mentions_json(c->norm))
    return v_fail(e, "messages", "'messages' must contain the word 'json' in some form, to use "
                                 "'response_format' of type 'json_object'");
  return 0;
}

/* With the model: the prompt rendered and tokenized, the choices submitted. Returns 0, or -1 with
 * *f filled; c stays safe to chat_free. watch: the client, as gen_start takes it. */
static int chat_start(void *ctx, struct srv_model *m, const struct http_watch *watch,
                      struct gen_fail *f) {
  struct chat *c = ctx;
  struct verr e = {{0}, {0}};
  if (force_tool_call(m, c->tools, c->tool_want, c->n_tools_named, &c->o, &e)) return gen_fail_verr(f, &e);
  if (c->json_mode && !c->o.constrain) { /* a forced tool call takes precedence over content format */
    c->o.constrain = c->json_mode;
    c->o.schema = c->schema;
    c->o.jv = m->jv;
  }
  char *prompt_text = NULL;
  struct hearth_err err = {0};
  int rc = textio_render_chat(m->tio, c->norm, c->tools, c->kwargs, &prompt_text, &err);
  if (rc) return gen_fail_set(f, 400, "messages", "template_error", "%s", errors_scrub(err.msg));
  struct gen_prompt gp = {NULL, 0};
  rc = textio_encode(m->tio, prompt_text, strlen(prompt_text), 0, &gp.ids, &gp.n, &err);
  c->g = calloc((size_t)c->o.n, sizeof *c->g);
  c->ch = calloc((size_t)c->o.n, sizeof *c->ch);
  if (!rc && (!c->g || !c->ch)) rc = err_set(&err, HEARTH_ERR_NOMEM, "out of memory");
  if (!rc) c->n = c->o.n; /* from here on chat_free frees n choices */
  for (int k = 0; !rc && k < c->n; k++)
    rc = textio_parser_new(m->tio, c->tools != NULL && (c->o.constrain == GEN_FREE || c->o.constrain == GEN_TOOL_CALL),
                           c->o.constrain != GEN_FREE, prompt_text,
                           &c->ch[k].parser, &err);
  free(prompt_text);
  if (rc) {
    free(gp.ids);
    return gen_fail_set(f, 500, NULL, NULL, "%s", errors_scrub(err.msg));
  }
  rc = gen_start(m, &gp, 1, &c->o, watch, c->g, f);
  free(gp.ids);
  if (rc) return -1;
  gen_id(c->id, sizeof c->id, "chatcmpl");
  snprintf(c->model, sizeof c->model, "%s", m->id);
  c->created = time(NULL);
  return 0;
}

static const struct stream_load_ops CHAT_STREAM = {chat_start, chat_produce, chat_free};

enum MHD_Result ep_chat_completions(struct http_req *r) {
  enum MHD_Result ret;
  struct srv_model *m = NULL;
  /* a stream whose model must be loaded first starts its response now (stream_load.h) */
  int pending = ep_pick_model_or_pending(r, 0, &m, &ret);
  if (pending < 0) return ret;
  struct verr e = {{0}, {0}};
  struct chat *c = calloc(1, sizeof *c);
  if (!c) return http_reply_error(r, 500, NULL, NULL, "out of memory");
  if (chat_parse(r->json, c, &e)) {
    chat_free(c);
    return http_reply_verr(r, &e);
  }
  if (pending) return stream_load_reply(r, 0, &CHAT_STREAM, c);
  struct http_watch w;
  struct gen_fail f;
  http_watch_init(r, c->o.stream, &w);
  if (chat_start(c, m, &w, &f)) {
    chat_free(c);
    return gen_fail_reply(r, &f);
  }
  if (c->o.stream) return sse_reply(r, chat_produce, chat_free, c);
  return chat_whole(r, c);
}
