/* tools/cmd_template.c — `hearth template`: render a conversation with a model's chat template.
 *
 *   hearth template (--model DIR | --template FILE.jinja) --messages FILE.json [--tools FILE.json]
 *                   [--no-generation-prompt] [--kwargs JSON] [--bos TOKEN] [--eos TOKEN]
 *
 * Prints the rendered prompt to stdout and nothing else (no trailing newline is added). With
 * --model, DIR needs only its tokenizer/template files. --bos/--eos set the special tokens when
 * rendering a bare --template file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/template.h"
#include "commands.h"

static void usage(void) {
  fprintf(stderr,
          "usage: hearth template (--model DIR | --template FILE.jinja) --messages FILE.json\n"
          "                       [--tools FILE.json] [--no-generation-prompt] [--kwargs JSON]\n"
          "                       [--bos TOKEN] [--eos TOKEN]\n");
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 65536, n = 0;
  char *b = malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n, f);
    if (n < cap) break;
    char *nb = realloc(b, cap *= 2);
    if (!nb) { free(b); b = NULL; }
    else b = nb;
  }
  fclose(f);
  if (b) *len = n;
  return b;
}

int cmd_template(int argc, char **argv) {
  const char *model = NULL, *tpl = NULL, *msgs = NULL, *tools_path = NULL, *kwargs_s = NULL;
  const char *bos = NULL, *eos = NULL;
  int agp = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = !strcmp(a, "--model") ? &model : !strcmp(a, "--template") ? &tpl
                     : !strcmp(a, "--messages") ? &msgs : !strcmp(a, "--tools") ? &tools_path
                     : !strcmp(a, "--kwargs") ? &kwargs_s : !strcmp(a, "--bos") ? &bos
                     : !strcmp(a, "--eos") ? &eos : NULL;
    if (dst) {
      if (i + 1 >= argc) { fprintf(stderr, "hearth template: %s needs a value\n", a); return 2; }
      *dst = argv[++i];
    } else if (!strcmp(a, "--no-generation-prompt")) {
      agp = 0;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage();
      return 0;
    } else {
      fprintf(stderr, "hearth template: unknown argument '%s'\n", a);
      usage();
      return 2;
    }
  }
  if ((!model == !tpl) || !msgs) {
    usage();
    return 2;
  }
  struct hearth_err err = {0};
  struct chat_template *t = NULL;
  int rc;
  char dir[4096]; /* a repo id: its Hub-cache snapshot */
  if (model) {
    rc = hearth_resolve_model_dir(model, dir, sizeof dir, &err);
    if (!rc) rc = chat_template_load_dir(dir, NULL, &t, &err);
  } else {
    size_t len;
    char *src = slurp(tpl, &len);
    if (!src) { fprintf(stderr, "hearth template: cannot read %s\n", tpl); return 1; }
    struct chat_template_opts o = {.bos_token = bos, .eos_token = eos};
    rc = chat_template_load(src, len, &o, &t, &err);
    free(src);
  }
  if (rc) {
    fprintf(stderr, "hearth template: %s\n", err.msg);
    return 1;
  }
  json_error_t je;
  json_t *m = json_load_file(msgs, 0, &je);
  json_t *tools = NULL, *kw = NULL;
  int status = 1;
  if (!m) { fprintf(stderr, "hearth template: %s: line %d: %s\n", msgs, je.line, je.text); goto done; }
  /* accept a bare array or {"messages": [...], "tools": [...]} */
  if (json_is_object(m)) {
    json_t *inner = json_incref(json_object_get(m, "messages"));
    if (!tools_path && json_object_get(m, "tools")) tools = json_incref(json_object_get(m, "tools"));
    json_decref(m);
    m = inner;
  }
  if (tools_path) {
    tools = json_load_file(tools_path, 0, &je);
    if (!tools) { fprintf(stderr, "hearth template: %s: line %d: %s\n", tools_path, je.line, je.text); goto done; }
  }
  if (kwargs_s) {
    kw = json_loads(kwargs_s, 0, &je);
    if (!json_is_object(kw)) { fprintf(stderr, "hearth template: --kwargs must be a JSON object\n"); goto done; }
  }
  char *out = NULL;
  rc = chat_template_render(t, m, json_is_null(tools) ? NULL : tools, agp, kw, &out, &err);
  if (rc) {
    fprintf(stderr, "hearth template: %s\n", err.msg);
    goto done;
  }
  fwrite(out, 1, strlen(out), stdout);
  free(out);
  status = fflush(stdout) ? 1 : 0;
done:
  json_decref(m);
  json_decref(tools);
  json_decref(kw);
  chat_template_free(t);
  return status;
}
