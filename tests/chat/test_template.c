/* tests/chat/test_template.c — reference renders: every conversation in
 * tests/fixtures/chat/conversations.json rendered with each real template must be byte-identical
 * to transformers' apply_chat_template(..., tokenize=False) (the *.expected.jsonl files), and
 * where transformers raised, hearth must fail too (with the template's message for
 * raise_exception). The constructs group does the same for small templates exercising the
 * interpreter beyond the real templates. */
#include <string.h>
#include <jansson.h>

#include "test.h"
#include "chat_fixtures.h"
#include "chat/jinja.h"
#include "chat/template.h"

static void show_diff(const char *id, const char *want, const char *got) {
  size_t i = 0;
  while (want[i] && want[i] == got[i]) i++;
  size_t from = i > 40 ? i - 40 : 0;
  fprintf(stderr, "  %s: first difference at byte %zu\n    want: ", id, i);
  for (size_t k = from; want[k] && k < i + 40; k++) fputc(want[k] == '\n' ? '|' : want[k], stderr);
  fprintf(stderr, "\n    got : ");
  for (size_t k = from; got[k] && k < i + 40; k++) fputc(got[k] == '\n' ? '|' : got[k], stderr);
  fputc('\n', stderr);
}

static json_t *load_jsonl(const char *path) {
  size_t len;
  char *s = chat_slurp(path, &len);
  if (!s) return NULL;
  json_t *arr = json_array();
  char *p = s;
  while (*p) {
    char *e = strchr(p, '\n');
    if (e) *e = 0;
    if (*p) {
      json_error_t je;
      json_t *j = json_loads(p, 0, &je);
      if (!j) { fprintf(stderr, "%s: bad line: %s\n", path, je.text); json_decref(arr); free(s); return NULL; }
      json_array_append_new(arr, j);
    }
    if (!e) break;
    p = e + 1;
  }
  free(s);
  return arr;
}

/* compares one outcome with its record; returns 1 on match */
static int check_outcome(json_t *rec, int rc, const char *out, const struct hearth_err *err) {
  const char *id = json_string_value(json_object_get(rec, "id"));
  json_t *exp = json_object_get(rec, "expected");
  if (exp) {
    if (rc) { fprintf(stderr, "  %s: render failed: %s\n", id, err->msg); return 0; }
    if (strcmp(json_string_value(exp), out)) { show_diff(id, json_string_value(exp), out); return 0; }
    return 1;
  }
  const char *etype = json_string_value(json_object_get(rec, "error_type"));
  const char *emsg = json_string_value(json_object_get(rec, "error"));
  if (!rc) { fprintf(stderr, "  %s: rendered, but transformers raised %s: %s\n", id, etype, emsg); return 0; }
  if (etype && !strcmp(etype, "TemplateError") && strcmp(err->msg, emsg)) {
    fprintf(stderr, "  %s: raise_exception message differs:\n    want: %s\n    got : %s\n", id, emsg, err->msg);
    return 0;
  }
  return 1;
}

static void run_template(const char *name, const char *file, const struct chat_template_opts *opts) {
  char path[4096];
  chat_template_path(path, sizeof path, file);
  size_t len;
  char *src = chat_slurp(path, &len);
  CHECKF(src != NULL, "template %s missing (scripts/fetch-tokenizers.sh, or set HEARTH_SHARED)", path);
  if (!src) return;
  struct chat_template *t = NULL;
  struct hearth_err err = {0};
  int rc = chat_template_load(src, len, opts, &t, &err);
  free(src);
  CHECKF(rc == 0, "load %s: %s", file, err.msg);
  if (rc) return;
  json_error_t je;
  json_t *convs = json_load_file(HEARTH_SOURCE_DIR "/tests/fixtures/chat/conversations.json", 0, &je);
  snprintf(path, sizeof path, HEARTH_SOURCE_DIR "/tests/fixtures/chat/%s.expected.jsonl", name);
  json_t *exp = load_jsonl(path);
  CHECKF(convs && exp, "fixtures missing for %s", name);
  if (convs && exp) {
    CHECKF(json_array_size(convs) == json_array_size(exp) && json_array_size(exp) >= 60,
           "%zu conversations, %zu expected", json_array_size(convs), json_array_size(exp));
    int ok = 0, n = 0;
    for (size_t i = 0; i < json_array_size(exp) && i < json_array_size(convs); i++) {
      json_t *c = json_array_get(convs, i), *rec = json_array_get(exp, i);
      CHECK(json_equal(json_object_get(c, "id"), json_object_get(rec, "id")));
      json_t *tools = json_object_get(c, "tools");
      json_t *kw = json_object_get(c, "kwargs");
      char *out = NULL;
      memset(&err, 0, sizeof err);
      rc = chat_template_render(t, json_object_get(c, "messages"), json_is_null(tools) ? NULL : tools,
                                json_is_true(json_object_get(c, "add_generation_prompt")), kw, &out, &err);
      int good = check_outcome(rec, rc, out, &err);
      ok += good;
      n++;
      if (!good) test_failures++;
      free(out);
    }
    printf("  %s: %d/%d reference renders match\n", name, ok, n);
  }
  json_decref(convs);
  json_decref(exp);
  chat_template_free(t);
}

static const struct chat_template_opts QWEN = {.eos_token = "<|im_end|>", .pad_token = "<|endoftext|>"};
static const struct chat_template_opts GEMMA = {.bos_token = "<bos>", .eos_token = "<eos>", .pad_token = "<pad>", .unk_token = "<unk>"};

TEST_GROUP(qwen25) { run_template("qwen2.5-instruct", "qwen2.5-instruct.jinja", &QWEN); }
/* Qwen3's template as the npm tokenizer package ships it (byte-identical to ../shared's qwen3.jinja) */
TEST_GROUP(qwen3) { run_template("qwen3", "cache:qwen3", &QWEN); }
TEST_GROUP(gemma4) { run_template("gemma-4-it", "gemma-4-it.jinja", &GEMMA); }
TEST_GROUP(gemma4_interleaved) { run_template("gemma-4-it-interleaved", "gemma-4-it-interleaved.jinja", &GEMMA); }

TEST_GROUP(constructs) {
  json_error_t je;
  json_t *ks = json_load_file(HEARTH_SOURCE_DIR "/tests/fixtures/chat/constructs.json", 0, &je);
  json_t *exp = load_jsonl(HEARTH_SOURCE_DIR "/tests/fixtures/chat/constructs.expected.jsonl");
  REQUIRE(ks && exp && json_array_size(ks) == json_array_size(exp));
  int ok = 0;
  for (size_t i = 0; i < json_array_size(ks); i++) {
    json_t *k = json_array_get(ks, i), *rec = json_array_get(exp, i);
    CHECK(json_equal(json_object_get(k, "id"), json_object_get(rec, "id")));
    const char *src = json_string_value(json_object_get(k, "template"));
    struct jinja_program *p = NULL;
    struct hearth_err err = {0};
    char *out = NULL;
    int rc = jinja_parse(src, strlen(src), &p, &err);
    if (!rc) rc = jinja_render(p, json_object_get(k, "vars"), NULL, &out, NULL, &err);
    int good = check_outcome(rec, rc, out, &err);
    if (!good) test_failures++;
    ok += good;
    free(out);
    jinja_program_free(p);
  }
  printf("  constructs: %d/%zu match\n", ok, json_array_size(ks));
  json_decref(ks);
  json_decref(exp);
}

TEST_MAIN(T(qwen25), T(qwen3), T(gemma4), T(gemma4_interleaved), T(constructs))
