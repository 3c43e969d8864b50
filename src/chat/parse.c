/* chat/parse.c — incremental parser for generated text: content, reasoning, tool calls.
 *
 * A three-state machine (content / reasoning / tool call) over a pending buffer. In content and
 * reasoning, text that could still turn into a marker is held back; a tool call is buffered
 * whole until its closing marker, then parsed: JSON for Qwen, Gemma 4's `call:NAME{k:v}` syntax
 * (with `<|"|>` string quotes) for Gemma. Unparseable calls go out verbatim as content.
 * Not here: stop tokens (the sampler stops on them) and the OpenAI response framing (server).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "chat/parse.h"

struct markers { const char *r_open, *r_close, *t_open, *t_close; };
static const struct markers MK[] = {
  [CHAT_FORMAT_NONE] = {"<think>", "</think>", "<tool_call>", "</tool_call>"},
  [CHAT_FORMAT_QWEN] = {"<think>", "</think>", "<tool_call>", "</tool_call>"},
  [CHAT_FORMAT_GEMMA4] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>"},
};

enum { ST_CONTENT, ST_REASON, ST_TOOL };

struct sbuf { char *p; size_t n, cap; int oom; };

static void sb_put(struct sbuf *b, const char *s, size_t n) {
  if (b->oom || !n) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) { b->oom = 1; return; }
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

struct chat_parser {
  struct chat_parser_opts o;
  const struct markers *m;
  int state;
  struct sbuf pend;
  int reason_start;   /* at the start of a reasoning block: drop "\n" / "thought\n" */
  int strip_nl;       /* after a reasoning block: drop leading newlines of content */
  int strip_ws;       /* after a tool call: drop leading whitespace of content */
  uint64_t rng;
  struct sbuf content, reasoning;
  json_t *calls;
};

void chat_parser_opts_for(const struct chat_template *t, const char *prompt, struct chat_parser_opts *o) {
  memset(o, 0, sizeof *o);
  o->format = chat_template_format(t);
  const char *src = chat_template_source(t);
  if (o->format == CHAT_FORMAT_NONE && strstr(src, "<think>")) o->format = CHAT_FORMAT_QWEN;
  if (!prompt) return;
  size_t n = strlen(prompt);
  /* the prompt opened a block that it did not close */
  const char *open = MK[o->format].r_open, *close = MK[o->format].r_close;
  const char *lo = NULL;
  for (const char *p = prompt; (p = strstr(p, open)); p++) lo = p;
  if (lo && !strstr(lo, close)) {
    const char *after = lo + strlen(open);
    if (o->format == CHAT_FORMAT_GEMMA4) o->start_in_reasoning = !strncmp(after, "thought", 7) || !*after;
    else o->start_in_reasoning = (size_t)(after - prompt) <= n;
  }
}

int chat_parser_new(const struct chat_parser_opts *opts, struct chat_parser **out, struct hearth_err *err) {
  struct chat_parser *p = calloc(1, sizeof *p);
  if (!p) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  p->o = *opts;
  if ((unsigned)p->o.format > CHAT_FORMAT_GEMMA4) {
    free(p);
    return err_set(err, HEARTH_ERR_ARG, "unknown chat format %d", (int)opts->format);
  }
  p->m = &MK[p->o.format];
  if (p->o.start_in_reasoning && !p->o.no_reasoning) {
    p->state = ST_REASON;
    p->reason_start = 1;
  }
  p->rng = opts->id_seed ? opts->id_seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)p;
  *out = p;
  return 0;
}

void chat_parser_free(struct chat_parser *p) {
  if (!p) return;
  free(p->pend.p);
  free(p->content.p);
  free(p->reasoning.p);
  json_decref(p->calls);
  free(p);
}

void chat_delta_clear(struct chat_delta *d) {
  if (!d) return;
  free(d->content);
  free(d->reasoning);
  json_decref(d->tool_calls);
  memset(d, 0, sizeof *d);
}

/* ---- tool calls ------------------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static json_t *make_call(struct chat_parser *p, const char *name, size_t nn, json_t *args_obj, const char *args_str) {
  static const char AL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  char id[32] = "call_";
  for (int i = 0; i < 24; i++) id[5 + i] = AL[splitmix(&p->rng) % 62];
  id[29] = 0;
  char *dumped = NULL;
  if (!args_str) {
    dumped = args_obj ? json_dumps(args_obj, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    args_str = dumped ? dumped : "{}";
  }
  json_t *fn = json_object();
  json_object_set_new(fn, "name", json_stringn(name, nn));
  json_object_set_new(fn, "arguments", json_string(args_str));
  free(dumped);
  json_t *c = json_object();
  json_object_set_new(c, "id", json_string(id));
  json_object_set_new(c, "type", json_string("function"));
  json_object_set_new(c, "function", fn);
  return c;
}

static json_t *parse_qwen_call(struct chat_parser *p, const char *s, size_t n) {
  json_error_t je;
  json_t *j = json_loadb(s, n, 0, &je);
  if (!json_is_object(j)) { json_decref(j); return NULL; }
  json_t *name = json_object_get(j, "name");
  json_t *args = json_object_get(j, "arguments");
  if (!args) args = json_object_get(j, "parameters");
  json_t *c = NULL;
  if (json_is_string(name) && (!args || json_is_object(args) || json_is_string(args)))
    c = make_call(p, json_string_value(name), json_string_length(name), json_is_object(args) ? args : NULL,
                  json_is_string(args) ? json_string_value(args) : NULL);
  json_decref(j);
  return c;
}

/* Gemma 4 call syntax: call:NAME{key:value,...}; values: <|"|>str<|"|>, {..}, [..], numbers,
 * true/false/null, bare words (kept as strings). */
#define GQ "<|\"|>"
struct gcur { const char *s, *e; int depth; };

static void gskip(struct gcur *c) { while (c->s < c->e && (*c->s == ' ' || *c->s == '\n' || *c->s == '\t' || *c->s == '\r')) c->s++; }
static int gstarts(struct gcur *c, const char *lit) {
  size_t n = strlen(lit);
  return (size_t)(c->e - c->s) >= n && !memcmp(c->s, lit, n);
}

static json_t *gvalue(struct gcur *c);

static json_t *gstring(struct gcur *c) {
  c->s += 5;
  const char *end = NULL;
  for (const char *q = c->s; q + 5 <= c->e; q++)
    if (!memcmp(q, GQ, 5)) { end = q; break; }
  if (!end) return NULL;
  json_t *v = json_stringn(c->s, (size_t)(end - c->s));
  c->s = end + 5;
  return v;
}

static json_t *gobject(struct gcur *c) {
  c->s++; /* '{' */
  json_t *o = json_object();
  gskip(c);
  if (c->s < c->e && *c->s == '}') { c->s++; return o; }
  for (;;) {
    gskip(c);
    json_t *key = NULL;
    if (gstarts(c, GQ)) key = gstring(c);
    else {
      const char *k0 = c->s;
      while (c->s < c->e && *c->s != ':' && *c->s != '}' && *c->s != ',') c->s++;
      const char *k1 = c->s;
      while (k1 > k0 && (k1[-1] == ' ' || k1[-1] == '\n')) k1--;
      if (k1 > k0) key = json_stringn(k0, (size_t)(k1 - k0));
    }
    gskip(c);
    if (!key || c->s >= c->e || *c->s != ':') { json_decref(key); json_decref(o); return NULL; }
    c->s++;
    json_t *v = gvalue(c);
    if (!v) { json_decref(key); json_decref(o); return NULL; }
    json_object_set_new(o, json_string_value(key), v);
    json_decref(key);
    gskip(c);
    if (c->s < c->e && *c->s == ',') { c->s++; continue; }
    if (c->s < c->e && *c->s == '}') { c->s++; return o; }
    json_decref(o);
    return NULL;
  }
}

static json_t *garray(struct gcur *c) {
  c->s++;
  json_t *a = json_array();
  gskip(c);
  if (c->s < c->e && *c->s == ']') { c->s++; return a; }
  for (;;) {
    json_t *v = gvalue(c);
    if (!v) { json_decref(a); return NULL; }
    json_array_append_new(a, v);
    gskip(c);
    if (c->s < c->e && *c->s == ',') { c->s++; continue; }
    if (c->s < c->e && *c->s == ']') { c->s++; return a; }
    json_decref(a);
    return NULL;
  }
}

static json_t *gvalue(struct gcur *c) {
  if (++c->depth > 64) return NULL;
  gskip(c);
  json_t *v = NULL;
  if (c->s >= c->e) v = NULL;
  else if (gstarts(c, GQ)) v = gstring(c);
  else if (*c->s == '{') v = gobject(c);
  else if (*c->s == '[') v = garray(c);
  else {
    const char *b = c->s;
    while (c->s < c->e && *c->s != ',' && *c->s != '}' && *c->s != ']') c->s++;
    const char *e = c->s;
    while (e > b && (e[-1] == ' ' || e[-1] == '\n')) e--;
    size_t n = (size_t)(e - b);
    char tmp[64];
    /* the template prints Python values bare, so None/True/False can appear as well */
    if ((n == 4 && !memcmp(b, "true", 4)) || (n == 4 && !memcmp(b, "True", 4))) v = json_true();
    else if ((n == 5 && !memcmp(b, "false", 5)) || (n == 5 && !memcmp(b, "False", 5))) v = json_false();
    else if ((n == 4 && !memcmp(b, "null", 4)) || (n == 4 && !memcmp(b, "None", 4))) v = json_null();
    else if (n > 0 && n < sizeof tmp) {
      memcpy(tmp, b, n);
      tmp[n] = 0;
      char *end;
      long long i = strtoll(tmp, &end, 10);
      if (*end == 0) v = json_integer(i);
      else {
        double f = strtod(tmp, &end);
        v = *end == 0 ? json_real(f) : json_stringn(b, n);
      }
    } else if (n > 0) {
      v = json_stringn(b, n);
    }
  }
  c->depth--;
  return v;
}

static json_t *parse_gemma_call(struct chat_parser *p, const char *s, size_t n) {
  struct gcur c = {s, s + n, 0};
  gskip(&c);
  if (!gstarts(&c, "call:")) return NULL;
  c.s += 5;
  const char *nm = c.s;
  while (c.s < c.e && *c.s != '{') c.s++;
  if (c.s >= c.e || c.s == nm) return NULL;
  size_t nn = (size_t)(c.s - nm);
  json_t *args = gobject(&c);
  if (!args) return NULL;
  gskip(&c);
  json_t *call = c.s == c.e ? make_call(p, nm, nn, args, NULL) : NULL;
  json_decref(args);
  return call;
}

/* ---- the state machine ---------------------------------------------------------------------------- */

static size_t prefix_hold(const char *s, size_t n, const char *marker) {
  /* longest proper suffix of s that is a prefix of marker */
  size_t ml = strlen(marker);
  for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
    if (!memcmp(s + n - k, marker, k)) return k;
  return 0;
}

static const char *find(const char *s, size_t n, const char *marker) {
  return memmem(s, n, marker, strlen(marker));
}

static void consume(struct chat_parser *p, size_t k) {
  memmove(p->pend.p, p->pend.p + k, p->pend.n - k);
  p->pend.n -= k;
}

static void process(struct chat_parser *p, int final) {
  const struct markers *m = p->m;
  int want_r = !p->o.no_reasoning, want_t = !p->o.no_tools && p->o.format != CHAT_FORMAT_NONE;
  if (p->o.format == CHAT_FORMAT_NONE) want_r = want_r && 1;
  while (p->pend.n > 0) {
    char *s = p->pend.p;
    size_t n = p->pend.n;
    if (p->state == ST_CONTENT) {
      if (p->strip_nl || p->strip_ws) {
        size_t k = 0;
        while (k < n && (s[k] == '\n' || (p->strip_ws && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')))) k++;
        if (k) { consume(p, k); continue; }
        p->strip_nl = p->strip_ws = 0;
      }
      const char *r = want_r ? find(s, n, m->r_open) : NULL;
      const char *t = want_t ? find(s, n, m->t_open) : NULL;
      if (r && t) { if (r < t) t = NULL; else r = NULL; }
      if (r || t) {
        size_t at = (size_t)((r ? r : t) - s);
        sb_put(&p->content, s, at);
        consume(p, at + strlen(r ? m->r_open : m->t_open));
        p->state = r ? ST_REASON : ST_TOOL;
        p->reason_start = r != NULL;
        continue;
      }
      size_t hold = 0;
      if (!final) {
        size_t h1 = want_r ? prefix_hold(s, n, m->r_open) : 0, h2 = want_t ? prefix_hold(s, n, m->t_open) : 0;
        hold = h1 > h2 ? h1 : h2;
      }
      sb_put(&p->content, s, n - hold);
      consume(p, n - hold);
      break;
    }
    if (p->state == ST_REASON) {
      if (p->reason_start) {
        if (p->o.format == CHAT_FORMAT_GEMMA4) {
          static const char ch[] = "thought\n";
          if (n >= 8 && !memcmp(s, ch, 8)) { consume(p, 8); p->reason_start = 0; continue; }
          if (n < 8 && !memcmp(s, ch, n) && !final) break;
          if (n >= 7 && !memcmp(s, ch, 7) && (n > 7 || final)) { consume(p, 7); p->reason_start = 0; continue; }
          p->reason_start = 0;
        } else {
          size_t k = 0;
          while (k < n && s[k] == '\n') k++;
          if (k) { consume(p, k); continue; }
          p->reason_start = 0;
        }
      }
      const char *c = find(s, n, m->r_close);
      if (c) {
        size_t at = (size_t)(c - s), body = at;
        while (body > 0 && s[body - 1] == '\n') body--;
        sb_put(&p->reasoning, s, body);
        consume(p, at + strlen(m->r_close));
        p->state = ST_CONTENT;
        p->strip_nl = 1;
        continue;
      }
      size_t hold = 0;
      if (!final) {
        hold = prefix_hold(s, n, m->r_close);
        while (hold < n && s[n - hold - 1] == '\n') hold++; /* trailing newlines may precede the close */
      } else {
        while (hold < n && s[n - hold - 1] == '\n') hold++;
        sb_put(&p->reasoning, s, n - hold);
        p->pend.n = 0;
        break;
      }
      sb_put(&p->reasoning, s, n - hold);
      consume(p, n - hold);
      break;
    }
    /* ST_TOOL: buffer until the close marker */
    const char *c = find(s, n, m->t_close);
    if (!c && !final) break;
    size_t at = c ? (size_t)(c - s) : n;
    json_t *call = NULL;
    if (c) call = p->o.format == CHAT_FORMAT_GEMMA4 ? parse_gemma_call(p, s, at) : parse_qwen_call(p, s, at);
    if (call) {
      if (!p->calls) p->calls = json_array();
      json_array_append_new(p->calls, call);
      p->strip_ws = 1;
    } else {
      sb_put(&p->content, m->t_open, strlen(m->t_open));
      sb_put(&p->content, s, at);
      if (c) sb_put(&p->content, m->t_close, strlen(m->t_close));
    }
    consume(p, c ? at + strlen(m->t_close) : n);
    p->state = ST_CONTENT;
  }
  if (final && p->state == ST_TOOL && p->pend.n == 0) { /* "<tool_call>" at the very end */
    sb_put(&p->content, m->t_open, strlen(m->t_open));
    p->state = ST_CONTENT;
  }
}

static int emit(struct chat_parser *p, struct chat_delta *d, struct hearth_err *err) {
  memset(d, 0, sizeof *d);
  if (p->content.oom || p->reasoning.oom || p->pend.oom) return err_set(err, HEARTH_ERR_NOMEM, "out of memory parsing output");
  d->content = p->content.p ? p->content.p : calloc(1, 1);
  d->reasoning = p->reasoning.p ? p->reasoning.p : calloc(1, 1);
  d->tool_calls = p->calls ? p->calls : json_array();
  memset(&p->content, 0, sizeof p->content);
  memset(&p->reasoning, 0, sizeof p->reasoning);
  p->calls = NULL;
  if (!d->content || !d->reasoning || !d->tool_calls) {
    chat_delta_clear(d);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory parsing output");
  }
  return 0;
}

int chat_parser_push(struct chat_parser *p, const char *text, size_t n, struct chat_delta *d, struct hearth_err *err) {
  sb_put(&p->pend, text, n);
  process(p, 0);
  return emit(p, d, err);
}

int chat_parser_finish(struct chat_parser *p, struct chat_delta *d, struct hearth_err *err) {
  process(p, 1);
  return emit(p, d, err);
}

int chat_parse_all(const struct chat_parser_opts *opts, const char *text, size_t n, struct chat_delta *d,
                   struct hearth_err *err) {
  struct chat_parser *p = NULL;
  int rc = chat_parser_new(opts, &p, err);
  if (rc) return rc;
  sb_put(&p->pend, text, n);
  rc = chat_parser_finish(p, d, err);
  chat_parser_free(p);
  return rc;
}
