/* chat/template.c — loading a model's chat template and rendering conversations with it.
 *
 * Owns: finding the template in a model directory (chat_template.jinja, tokenizer_config.json,
 * chat_template.json), the special tokens transformers hands to the template, and the variable
 * set of one render (messages, tools, documents, add_generation_prompt, special tokens, kwargs).
 * The Jinja work itself is jinja_*.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/file.h"
#include "chat/jinja.h"
#include "chat/template.h"

struct chat_template {
  struct jinja_program *prog;
  char *source;
  json_t *tokens;  /* special-token variables: {"bos_token": "<bos>", ...} */
  enum chat_format format;
};

enum chat_format chat_format_detect(const char *s, size_t n) {
  if (memmem(s, n, "<|tool_call>", 12)) return CHAT_FORMAT_GEMMA4;
  if (memmem(s, n, "<tool_call>", 11)) return CHAT_FORMAT_QWEN;
  return CHAT_FORMAT_NONE;
}

static int load_common(const char *source, size_t len, json_t *tokens, struct chat_template **out,
                       struct hearth_err *err) {
  struct chat_template *t = calloc(1, sizeof *t);
  if (!t) {
    json_decref(tokens);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory loading a chat template");
  }
  t->tokens = tokens;
  t->source = malloc(len + 1);
  if (!t->source) {
    chat_template_free(t);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory loading a chat template");
  }
  if (len) memcpy(t->source, source, len);
  t->source[len] = 0;
  int rc = jinja_parse(source, len, &t->prog, err);
  if (rc) {
    chat_template_free(t);
    return rc;
  }
  t->format = chat_format_detect(source, len);
  *out = t;
  return 0;
}

int chat_template_load(const char *source, size_t len, const struct chat_template_opts *opts,
                       struct chat_template **out, struct hearth_err *err) {
  json_t *tok = json_object();
  if (!tok) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  if (opts) {
    const char *names[] = {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"};
    const char *vals[] = {opts->bos_token, opts->eos_token, opts->unk_token, opts->pad_token,
                          opts->sep_token, opts->cls_token, opts->mask_token};
    for (int i = 0; i < 7; i++)
      if (vals[i]) json_object_set_new(tok, names[i], json_string(vals[i]));
  }
  return load_common(source, len, tok, out, err);
}

static json_t *load_json(const char *dir, const char *name, struct hearth_err *err, int *rc) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (!file_exists(path)) return NULL; /* optional */
  char *text;
  size_t len;
  if ((*rc = file_read_all(path, FILE_CAP_JSON, &text, &len, err))) return NULL;
  json_error_t je;
  json_t *j = json_loadb(text, len, 0, &je);
  free(text);
  if (!j) *rc = err_set(err, HEARTH_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
  return j;
}

/* a special token in tokenizer_config.json is a string or an AddedToken dict */
static const char *token_str(json_t *v) {
  if (json_is_string(v)) return json_string_value(v);
  if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
  return NULL;
}

int chat_template_load_dir(const char *dir, const char *name, struct chat_template **out, struct hearth_err *err) {
  int rc = 0;
  json_t *cfg = load_json(dir, "tokenizer_config.json", err, &rc);
  if (rc) return rc;
  json_t *stm = load_json(dir, "special_tokens_map.json", err, &rc);
  if (rc) {
    json_decref(cfg);
    return rc;
  }
  json_t *tok = json_object();
  const char *names[] = {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"};
  for (int i = 0; i < 7; i++) {
    const char *v = cfg ? token_str(json_object_get(cfg, names[i])) : NULL;
    if (!v && stm) v = token_str(json_object_get(stm, names[i]));
    if (v) json_object_set_new(tok, names[i], json_string(v));
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
  size_t len = 0;
  char *src = NULL;
  /* a template is a few KB; a FIFO, a device or a huge file there is an error, not a hang */
  if (file_exists(path) && (rc = file_read_all(path, FILE_CAP_TEMPLATE, &src, &len, err))) {
    json_decref(tok);
    json_decref(cfg);
    json_decref(stm);
    return rc;
  }
  if (src) {
    rc = load_common(src, len, tok, out, err);
    free(src);
    if (rc) err_prefix(err, "%s", path);
    json_decref(cfg);
    json_decref(stm);
    return rc;
  }
  json_t *ct = cfg ? json_object_get(cfg, "chat_template") : NULL;
  json_t *ctj = NULL;
  if (!ct) {
    ctj = load_json(dir, "chat_template.json", err, &rc);
    if (rc) goto fail;
    if (ctj) ct = json_object_get(ctj, "chat_template");
  }
  if (!ct) {
    rc = err_set(err, HEARTH_ERR_FORMAT, "%s: no chat template (no chat_template.jinja, no \"chat_template\" in "
                 "tokenizer_config.json or chat_template.json)", dir);
    goto fail;
  }
  if (json_is_array(ct)) {
    const char *want = name ? name : "default";
    json_t *found = NULL, *it;
    size_t i;
    json_array_foreach(ct, i, it) {
      const char *nm = json_string_value(json_object_get(it, "name"));
      if (nm && !strcmp(nm, want)) found = json_object_get(it, "template");
    }
    if (!json_is_string(found)) {
      rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tokenizer_config.json has no chat template named '%s'", dir, want);
      goto fail;
    }
    ct = found;
  } else if (name && strcmp(name, "default")) {
    rc = err_set(err, HEARTH_ERR_ARG, "%s: the chat template is not a named list; no template '%s'", dir, name);
    goto fail;
  }
  if (!json_is_string(ct)) {
    rc = err_set(err, HEARTH_ERR_FORMAT, "%s: \"chat_template\" must be a string or a list of {name, template}", dir);
    goto fail;
  }
  rc = load_common(json_string_value(ct), json_string_length(ct), tok, out, err);
  tok = NULL;
  if (rc) err_prefix(err, "%s/tokenizer_config.json", dir);
fail:
  json_decref(tok);
  json_decref(cfg);
  json_decref(stm);
  json_decref(ctj);
  return rc;
}

int chat_template_dir_has(const char *dir) {
  static const char *const files[] = {"chat_template.jinja", "chat_template.json"};
  char path[4096];
  struct stat st;
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (stat(path, &st) == 0) return 1;
  }
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  if (!file_exists(path)) return 0;
  /* through base/file.c: a FIFO or device there is an error (say "has one, broken"), never a hang */
  char *text = NULL;
  size_t len = 0;
  struct hearth_err e = {0};
  if (file_read_all(path, FILE_CAP_JSON, &text, &len, &e)) return 1;
  json_t *cfg = json_loadb(text, len, 0, NULL);
  free(text);
  int has = !cfg || json_object_get(cfg, "chat_template") != NULL; /* unreadable: cannot tell, say so */
  json_decref(cfg);
  return has;
}

int chat_template_render(const struct chat_template *t, json_t *messages, json_t *tools, int add_generation_prompt,
                         json_t *kwargs, char **out, struct hearth_err *err) {
  if (!json_is_array(messages)) return err_set(err, HEARTH_ERR_ARG, "messages must be a JSON array");
  if (tools && !json_is_array(tools) && !json_is_null(tools))
    return err_set(err, HEARTH_ERR_ARG, "tools must be a JSON array");
  if (kwargs && !json_is_object(kwargs)) return err_set(err, HEARTH_ERR_ARG, "template kwargs must be a JSON object");
  if (json_array_size(messages) == 0) /* transformers refuses before rendering */
    return err_set(err, HEARTH_ERR_ARG, "Cannot apply chat template to an empty conversation. Provide at least one message.");
  json_t *vars = json_object();
  if (!vars) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  /* order as transformers: special tokens, then kwargs (which override them), then the fixed ones */
  json_object_update(vars, t->tokens);
  if (kwargs) {
    static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt"};
    for (int i = 0; i < 4; i++)
      if (json_object_get(kwargs, reserved[i])) {
        json_decref(vars);
        return err_set(err, HEARTH_ERR_ARG, "template kwargs may not set '%s'", reserved[i]);
      }
    json_object_update(vars, kwargs);
  }
  json_object_set(vars, "messages", messages);
  json_object_set_new(vars, "tools", tools ? json_incref(tools) : json_null());
  json_object_set_new(vars, "documents", json_null());
  json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt));
  int rc = jinja_render(t->prog, vars, NULL, out, NULL, err);
  json_decref(vars);
  return rc;
}

enum chat_format chat_template_format(const struct chat_template *t) { return t->format; }
const char *chat_template_source(const struct chat_template *t) { return t->source; }

void chat_template_free(struct chat_template *t) {
  if (!t) return;
  jinja_program_free(t->prog);
  free(t->source);
  json_decref(t->tokens);
  free(t);
}
