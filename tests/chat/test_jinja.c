/* tests/chat/test_jinja.c — the interpreter's contract beyond reference renders: unsupported
 * constructs fail at load naming the line, raise_exception carries the template's message,
 * hostile templates hit limits instead of hanging, and model directories load their template
 * from chat_template.jinja or tokenizer_config.json (string or named list) with its special tokens. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "chat_fixtures.h"
#include "chat/jinja.h"
#include "chat/template.h"

static int load_fails(const char *src, int line, const char *needle) {
  struct jinja_program *p = NULL;
  struct hearth_err err = {0};
  int rc = jinja_parse(src, strlen(src), &p, &err);
  jinja_program_free(p);
  char want[64];
  snprintf(want, sizeof want, "template line %d:", line);
  int ok = rc == HEARTH_ERR_UNSUPPORTED && strstr(err.msg, want) && strstr(err.msg, needle);
  if (!ok) fprintf(stderr, "  '%s' -> rc %d '%s' (want line %d, '%s')\n", src, rc, err.msg, line, needle);
  return ok;
}

TEST_GROUP(load_errors) {
  CHECK(load_fails("a\n{% extends 'base.html' %}", 2, "extends"));
  CHECK(load_fails("{% include 'x' %}", 1, "include"));
  CHECK(load_fails("x\n\n{{ y | frobnicate }}", 3, "unsupported filter 'frobnicate'"));
  CHECK(load_fails("{{ y is prime }}", 1, "unsupported test 'prime'"));
  CHECK(load_fails("{% for x in xs recursive %}{% endfor %}", 1, "recursive"));
  CHECK(load_fails("{% if x %}never closed", 1, "endif"));
  CHECK(load_fails("{{ 'unterminated }}", 1, "unterminated string"));
  CHECK(load_fails("{{ x", 1, "unclosed"));
  CHECK(load_fails("ok\n{% endfor %}", 2, "endfor"));
  CHECK(load_fails("{{ f(*args) }}", 1, "*args"));
  CHECK(load_fails("{{ a ; b }}", 1, "unexpected character"));
  char deep[1024] = "{{ ";
  for (int i = 0; i < 300; i++) strcat(deep, "(");
  strcat(deep, "1");
  for (int i = 0; i < 300; i++) strcat(deep, ")");
  strcat(deep, " }}");
  CHECK(load_fails(deep, 1, "nesting"));
  /* transformers' environment has no `split` filter (jinja2 3.1): a template using it fails to load there too */
  CHECK(load_fails("{{ s | split(',') }}", 1, "unsupported filter 'split'"));
}

static int render(const char *src, const char *vars_json, const struct jinja_limits *lim, char **out, struct hearth_err *err) {
  struct jinja_program *p = NULL;
  int rc = jinja_parse(src, strlen(src), &p, err);
  if (rc) return rc;
  json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : NULL;
  rc = jinja_render(p, vars, lim, out, NULL, err);
  json_decref(vars);
  jinja_program_free(p);
  return rc;
}

TEST_GROUP(raise_exception) {
  char *out = NULL;
  struct hearth_err err = {0};
  int rc = render("{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}",
                  "{\"messages\": [{\"role\": \"assistant\"}]}", NULL, &out, &err);
  CHECK(rc == HEARTH_ERR_ARG);
  CHECKF(!strcmp(err.msg, "Conversation roles must alternate user/assistant/user/assistant/..."), "%s", err.msg);
  CHECK(out == NULL);
  rc = render("{{ missing.attr }}", NULL, NULL, &out, &err);
  CHECKF(rc == HEARTH_ERR_ARG && strstr(err.msg, "'missing' is undefined") && strstr(err.msg, "line 1"), "%s", err.msg);
}

TEST_GROUP(limits) {
  char *out = NULL;
  struct hearth_err err = {0};
  struct jinja_limits lim = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 100000, .max_depth = 32};
  /* loops: 10^12 iterations would never end */
  int rc = render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", NULL, &lim, &out, &err);
  CHECKF(rc == HEARTH_ERR_ARG && strstr(err.msg, "steps"), "rc %d %s", rc, err.msg);
  /* unbounded recursion */
  rc = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &lim, &out, &err);
  CHECKF(rc == HEARTH_ERR_ARG && strstr(err.msg, "nested deeper"), "rc %d %s", rc, err.msg);
  /* output size */
  rc = render("{% for i in range(50000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", NULL, &lim, &out, &err);
  CHECKF(rc != 0 && strstr(err.msg, "output"), "rc %d %s", rc, err.msg);
  /* memory: a string doubling in a namespace */
  rc = render("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}", NULL, &lim, &out, &err);
  CHECKF(rc != 0 && (strstr(err.msg, "memory") || strstr(err.msg, "output")), "rc %d %s", rc, err.msg);
  /* repetition */
  rc = render("{{ 'x' * 1000000000 }}", NULL, &lim, &out, &err);
  CHECKF(rc != 0, "rc %d", rc);
  /* after all that, a normal render still works */
  rc = render("{{ 'ok' }}", NULL, &lim, &out, &err);
  CHECK(rc == 0 && out && !strcmp(out, "ok"));
  free(out);
}

static void write_file(const char *path, const char *s) {
  FILE *f = fopen(path, "w");
  if (f) { fputs(s, f); fclose(f); }
}

TEST_GROUP(load_dir) {
  char dir[] = "/tmp/hearth_chat_XXXXXX";
  REQUIRE(mkdtemp(dir));
  char p1[256], p2[256];
  snprintf(p1, sizeof p1, "%s/tokenizer_config.json", dir);
  snprintf(p2, sizeof p2, "%s/chat_template.jinja", dir);
  json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
  struct chat_template *t = NULL;
  struct hearth_err err = {0};
  char *out = NULL;
  /* 1: string template in tokenizer_config.json, AddedToken-style bos */
  write_file(p1, "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\","
                 "\"chat_template\": \"{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}\"}");
  CHECKF(chat_template_load_dir(dir, NULL, &t, &err) == 0, "%s", err.msg);
  if (t) {
    CHECK(chat_template_render(t, msgs, NULL, 1, NULL, &out, &err) == 0);
    CHECKF(out && !strcmp(out, "<s>[user]hi</s>"), "%s", out ? out : err.msg);
    free(out);
    out = NULL;
    CHECK(chat_template_format(t) == CHAT_FORMAT_NONE);
    chat_template_free(t);
    t = NULL;
  }
  /* 2: named list */
  write_file(p1, "{\"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ tools is none }}\"},"
                 "{\"name\": \"tool_use\", \"template\": \"T<tool_call>\"}]}");
  CHECK(chat_template_load_dir(dir, NULL, &t, &err) == 0);
  if (t) {
    CHECK(chat_template_render(t, msgs, NULL, 1, NULL, &out, &err) == 0 && out && !strcmp(out, "DTrue"));
    free(out);
    out = NULL;
    chat_template_free(t);
    t = NULL;
  }
  CHECK(chat_template_load_dir(dir, "tool_use", &t, &err) == 0 && t && chat_template_format(t) == CHAT_FORMAT_QWEN);
  chat_template_free(t);
  t = NULL;
  CHECK(chat_template_load_dir(dir, "nope", &t, &err) == HEARTH_ERR_FORMAT && strstr(err.msg, "nope"));
  /* 3: chat_template.jinja wins; a trailing newline in the file is dropped as jinja2 does */
  write_file(p2, "{{ messages[0].content | upper }}|{{ add_generation_prompt }}\n");
  CHECK(chat_template_load_dir(dir, NULL, &t, &err) == 0);
  if (t) {
    json_t *kw = json_loads("{\"enable_thinking\": false}", 0, NULL);
    CHECK(chat_template_render(t, msgs, NULL, 0, kw, &out, &err) == 0 && out && !strcmp(out, "HI|False"));
    free(out);
    out = NULL;
    json_t *bad = json_loads("{\"messages\": []}", 0, NULL);
    CHECK(chat_template_render(t, msgs, NULL, 0, bad, &out, &err) == HEARTH_ERR_ARG);
    json_t *empty = json_array();
    CHECK(chat_template_render(t, empty, NULL, 0, NULL, &out, &err) == HEARTH_ERR_ARG && strstr(err.msg, "empty conversation"));
    json_decref(empty);
    json_decref(bad);
    json_decref(kw);
    chat_template_free(t);
    t = NULL;
  }
  /* 4: a broken template names the file and line */
  write_file(p2, "ok\n{% include 'x' %}");
  CHECK(chat_template_load_dir(dir, NULL, &t, &err) == HEARTH_ERR_UNSUPPORTED && strstr(err.msg, "chat_template.jinja") &&
        strstr(err.msg, "line 2"));
  CHECK(chat_template_dir_has(dir) == 1); /* broken, but there: the server warns at start */
  unlink(p1);
  unlink(p2);
  /* 5: nothing there */
  CHECK(chat_template_load_dir(dir, NULL, &t, &err) == HEARTH_ERR_FORMAT);
  CHECK(chat_template_dir_has(dir) == 0); /* an embedding model's directory: no warning */
  write_file(p1, "{\"bos_token\": \"<s>\"}");
  CHECK(chat_template_dir_has(dir) == 0);
  write_file(p1, "{\"chat_template\": 7}");
  CHECK(chat_template_dir_has(dir) == 1);
  unlink(p1);
  rmdir(dir);
  json_decref(msgs);
}

/* The real templates load, and the parser options follow from template + prompt. */
static void detect(const char *const *files, const enum chat_format *fmts, int n) {
  for (int i = 0; i < n; i++) {
    char path[4096];
    chat_template_path(path, sizeof path, files[i]);
    size_t len;
    char *src = chat_slurp(path, &len);
    CHECKF(src != NULL, "missing %s (scripts/fetch-tokenizers.sh, or set HEARTH_SHARED)", path);
    if (!src) continue;
    struct chat_template *t = NULL;
    struct hearth_err err = {0};
    CHECKF(chat_template_load(src, len, NULL, &t, &err) == 0, "%s: %s", files[i], err.msg);
    if (t) CHECK(chat_template_format(t) == fmts[i]);
    chat_template_free(t);
    free(src);
  }
}

/* the templates of the npm tokenizer packages (Gemma 3's has no tool-call syntax) */
TEST_GROUP(real_templates_detect) {
  const char *files[] = {"cache:qwen3", "cache:gemma3"};
  const enum chat_format fmts[] = {CHAT_FORMAT_QWEN, CHAT_FORMAT_NONE};
  detect(files, fmts, 2);
}

/* the templates only ../shared holds (CTest label `shared`) */
TEST_GROUP(shared_templates_detect) {
  const char *files[] = {"qwen2.5-instruct.jinja", "gemma-4-it.jinja", "gemma-4-it-interleaved.jinja"};
  const enum chat_format fmts[] = {CHAT_FORMAT_QWEN, CHAT_FORMAT_GEMMA4, CHAT_FORMAT_GEMMA4};
  detect(files, fmts, 3);
}

TEST_MAIN(T(load_errors), T(raise_exception), T(limits), T(load_dir), T(real_templates_detect), T(shared_templates_detect))
