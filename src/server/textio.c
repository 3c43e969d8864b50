/* server/textio.c — tokenizer, chat template and output parser behind one interface (textio.h).
 *
 * The chat modules (chat/template.h, chat/parse.h) are picked up when their headers exist; until
 * then a plain ChatML renderer and a pass-through parser stand in, which is enough for Qwen models
 * without tools. (A debt: remove the stand-ins once the chat module has landed everywhere.)
 */
#include "server/textio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/prof.h"
#include "tok/tokenizer.h"

#if defined(__has_include)
#if __has_include("chat/template.h")
#define TEXTIO_HAVE_TEMPLATE 1
#include "chat/template.h"
#endif
#if __has_include("chat/parse.h")
#define TEXTIO_HAVE_PARSE 1
#include "chat/parse.h"
#endif
#endif

struct textio {
  struct tok *tok;
#ifdef TEXTIO_HAVE_TEMPLATE
  struct chat_template *tmpl;
  char *tmpl_error; /* why the model's template did not load (NULL: loaded, or there is none) */
  int knows_developer; /* the template names the "developer" role (textio_render_chat) */
#endif
};

int textio_load(const char *dir, struct textio **out, struct hearth_err *err) {
  struct textio *t = calloc(1, sizeof *t);
  if (!t) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  int rc = tok_load_dir(dir, &t->tok, err);
#ifdef TEXTIO_HAVE_TEMPLATE
  if (!rc) {
    struct hearth_err e2 = {0};
    if (chat_template_load_dir(dir, NULL, &t->tmpl, &e2)) {
      t->tmpl = NULL; /* embedding models have none; a broken one is remembered and reported */
      if (chat_template_dir_has(dir)) {
        if (!(t->tmpl_error = strdup(e2.msg))) rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory");
        else /* loud, not fatal (docs/decisions.md): completions and tokenization still work */
          fprintf(stderr, "hearth serve: warning: model %s: the chat template failed to load; chat requests "
                  "will answer with this error: %s\n", dir, e2.msg);
      }
    }
  }
  if (!rc && t->tmpl) {
    const char *src = chat_template_source(t->tmpl);
    t->knows_developer = src && strstr(src, "developer");
  }
#endif
  if (rc) { textio_free(t); return rc; }
  *out = t;
  return 0;
}

void textio_free(struct textio *t) {
  if (!t) return;
  tok_free(t->tok);
#ifdef TEXTIO_HAVE_TEMPLATE
  chat_template_free(t->tmpl);
  free(t->tmpl_error);
#endif
  free(t);
}

const struct tok *textio_tok(const struct textio *t) { return t->tok; }

int textio_qwen_tool_calls(const struct textio *t) {
#ifdef TEXTIO_HAVE_TEMPLATE
  return t->tmpl && chat_template_format(t->tmpl) == CHAT_FORMAT_QWEN;
#else
  (void)t;
  return 0;
#endif
}

const char *textio_template_error(const struct textio *t) {
#ifdef TEXTIO_HAVE_TEMPLATE
  return t->tmpl_error;
#else
  (void)t;
  return NULL;
#endif
}

int textio_has_template(const struct textio *t) {
#ifdef TEXTIO_HAVE_TEMPLATE
  return t->tmpl != NULL;
#else
  (void)t;
  return 1;
#endif
}

int textio_encode(const struct textio *t, const char *text, size_t len, int add_special,
                  int32_t **ids, int *n, struct hearth_err *err) {
  const double t0 = prof_now();
  int rc = tok_encode(t->tok, text, len, add_special, 1, ids, n, err);
  prof_add(PROF_TOKENIZE, t0, rc ? 0 : *n);
  return rc;
}

int textio_decode(const struct textio *t, const int32_t *ids, int n, int skip_special, char **text,
                  size_t *len, struct hearth_err *err) {
  /* padding ids (rows the checkpoint has past the tokenizer's vocabulary) have no text, as in
   * textio_detok_push: drop them rather than fail the whole decode */
  int n_vocab = tok_vocab_size(t->tok), k = 0;
  for (int i = 0; i < n; i++) k += ids[i] >= 0 && ids[i] < n_vocab;
  if (k == n) return tok_decode(t->tok, ids, n, skip_special, text, len, err);
  int32_t *kept = malloc((size_t)(k ? k : 1) * sizeof *kept);
  if (!kept) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  k = 0;
  for (int i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < n_vocab) kept[k++] = ids[i];
  int rc = tok_decode(t->tok, kept, k, skip_special, text, len, err);
  free(kept);
  return rc;
}

/* ---- chat rendering -------------------------------------------------------------------- */

#ifndef TEXTIO_HAVE_TEMPLATE
/* Stand-in: ChatML with string contents only. */
static int render_chatml(json_t *messages, char **out, struct hearth_err *err) {
  struct sbuf b = {0};
  size_t i;
  json_t *m;
  json_array_foreach(messages, i, m) {
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *c = json_object_get(m, "content");
    const char *content = json_is_string(c) ? json_string_value(c) : "";
    if (!role) { sbuf_free(&b); return err_set(err, HEARTH_ERR_ARG, "messages[%zu].role", i); }
    sbuf_addf(&b, "<|im_start|>%s\n%s<|im_end|>\n", role, content);
  }
  if (sbuf_adds(&b, "<|im_start|>assistant\n")) {
    sbuf_free(&b);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  }
  *out = b.p;
  return 0;
}
#endif

int textio_render_chat(const struct textio *t, json_t *messages, json_t *tools, json_t *kwargs,
                       char **out, struct hearth_err *err) {
#ifdef TEXTIO_HAVE_TEMPLATE
  if (!t->tmpl && t->tmpl_error)
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "the model's chat template failed to load at start: %s", t->tmpl_error);
  if (!t->tmpl) return err_set(err, HEARTH_ERR_UNSUPPORTED, "this model has no chat template");
  /* OpenAI's "developer" role is its newer name for "system". A template that knows it (Gemma 4's)
   * gets it as sent; to one that does not (Qwen's test only for "system") it is passed as "system",
   * as llama.cpp and vLLM do, instead of being dropped from the prompt without a word. */
  json_t *mapped = NULL;
  if (!t->knows_developer) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
      const char *role = json_string_value(json_object_get(m, "role"));
      if (!role || strcmp(role, "developer")) continue;
      if (!mapped && !(mapped = json_deep_copy(messages))) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
      json_object_set_new(json_array_get(mapped, i), "role", json_string("system"));
    }
  }
  int rc = chat_template_render(t->tmpl, mapped ? mapped : messages, tools, 1, kwargs, out, err);
  json_decref(mapped);
  return rc;
#else
  (void)t; (void)tools; (void)kwargs;
  return render_chatml(messages, out, err);
#endif
}

/* ---- streaming detokenization ------------------------------------------------------------ */

struct textio_detok {
  struct tok_stream *s;
  int n_vocab;
};

int textio_detok_new(const struct textio *t, struct textio_detok **out, struct hearth_err *err) {
  struct textio_detok *d = calloc(1, sizeof *d);
  if (!d) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  d->n_vocab = tok_vocab_size(t->tok);
  int rc = tok_stream_new(t->tok, 1, &d->s, err);
  if (rc) { free(d); return rc; }
  *out = d;
  return 0;
}

void textio_detok_free(struct textio_detok *d) {
  if (!d) return;
  tok_stream_free(d->s);
  free(d);
}

int textio_detok_push(struct textio_detok *d, int32_t id, struct sbuf *out, struct hearth_err *err) {
  const char *p;
  size_t n;
  /* checkpoints pad the embedding table past the tokenizer's vocabulary (Qwen: 151936 rows for
   * 151665 tokens); a padding id has no text */
  if (id < 0 || id >= d->n_vocab) return 0;
  int rc = tok_stream_push(d->s, id, &p, &n, err);
  if (rc) return rc;
  return sbuf_add(out, p, n) ? err_set(err, HEARTH_ERR_NOMEM, "out of memory") : 0;
}

int textio_detok_flush(struct textio_detok *d, struct sbuf *out, struct hearth_err *err) {
  const char *p;
  size_t n;
  int rc = tok_stream_flush(d->s, &p, &n, err);
  if (rc) return rc;
  return sbuf_add(out, p, n) ? err_set(err, HEARTH_ERR_NOMEM, "out of memory") : 0;
}

/* ---- output parsing ---------------------------------------------------------------------- */

#ifdef TEXTIO_HAVE_PARSE
struct textio_parser {
  struct chat_parser *p;
};

int textio_parser_new(const struct textio *t, int tools, int constrained, const char *prompt,
                      struct textio_parser **out, struct hearth_err *err) {
  struct textio_parser *p = calloc(1, sizeof *p);
  if (!p) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  struct chat_parser_opts o;
  memset(&o, 0, sizeof o);
  if (t->tmpl) chat_parser_opts_for(t->tmpl, prompt ? prompt : "", &o);
  o.no_tools = !tools;
  if (constrained) {
    o.no_reasoning = 1;
    o.start_in_reasoning = 0;
  }
  int rc = chat_parser_new(&o, &p->p, err);
  if (rc) { free(p); return rc; }
  *out = p;
  return 0;
}

void textio_parser_free(struct textio_parser *p) {
  if (!p) return;
  chat_parser_free(p->p);
  free(p);
}

int textio_parser_feed(struct textio_parser *p, const char *text, size_t len, int final,
                       struct textio_delta *d, struct hearth_err *err) {
  struct chat_delta cd = {0}, fd = {0};
  int rc = chat_parser_push(p->p, text, len, &cd, err);
  if (!rc && final) rc = chat_parser_finish(p->p, &fd, err);
  if (!rc) {
    if (sbuf_adds(&d->content, cd.content ? cd.content : "") ||
        sbuf_adds(&d->content, fd.content ? fd.content : "") ||
        sbuf_adds(&d->reasoning, cd.reasoning ? cd.reasoning : "") ||
        sbuf_adds(&d->reasoning, fd.reasoning ? fd.reasoning : ""))
      rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory");
    size_t n = json_array_size(cd.tool_calls) + json_array_size(fd.tool_calls);
    if (!rc && n) {
      if (!d->tool_calls) d->tool_calls = json_array();
      json_array_extend(d->tool_calls, cd.tool_calls);
      if (fd.tool_calls) json_array_extend(d->tool_calls, fd.tool_calls);
    }
  }
  chat_delta_clear(&cd);
  chat_delta_clear(&fd);
  return rc;
}
#else
struct textio_parser {
  int tools;
};

int textio_parser_new(const struct textio *t, int tools, int constrained, const char *prompt,
                      struct textio_parser **out, struct hearth_err *err) {
  (void)t; (void)prompt; (void)constrained;
  struct textio_parser *p = calloc(1, sizeof *p);
  if (!p) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  p->tools = tools;
  *out = p;
  return 0;
}

void textio_parser_free(struct textio_parser *p) { free(p); }

int textio_parser_feed(struct textio_parser *p, const char *text, size_t len, int final,
                       struct textio_delta *d, struct hearth_err *err) {
  (void)p; (void)final;
  if (sbuf_add(&d->content, text, len)) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  return 0;
}
#endif

void textio_delta_reset(struct textio_delta *d) {
  sbuf_reset(&d->content);
  sbuf_reset(&d->reasoning);
  json_decref(d->tool_calls);
  d->tool_calls = NULL;
}

void textio_delta_free(struct textio_delta *d) {
  sbuf_free(&d->content);
  sbuf_free(&d->reasoning);
  json_decref(d->tool_calls);
  d->tool_calls = NULL;
}
