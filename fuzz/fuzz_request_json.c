/* fuzz/fuzz_request_json.c — libFuzzer target: a chat request body as the server takes it apart.
 * The bytes are parsed as the server parses a body (jansson, duplicate keys refused), the messages
 * are validated and normalized (chat_messages_normalize: text parts joined, tool-call arguments
 * parsed, null assistant content made empty) and the result is rendered through a real chat
 * template with the request's tools — the path every chat request takes before tokenization.
 * The template: the tokenizer cache's qwen3/chat_template.jinja (scripts/fetch-tokenizers.sh), else
 * $HEARTH_SHARED/data/chat-templates/qwen3.jinja, else a small built-in one touching the same
 * fields. No crash, no leak, bounded time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/template.h"
#include "server/routes.h"

static struct chat_template *g_tmpl;

static const char FALLBACK[] =
  "{% if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}"
  "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if '</think>' in m.content %}{{ m.content.split('</think>')[-1] }}"
  "{% else %}{{ m.content }}{% endif %}{% for c in m.tool_calls or [] %}{{ c.function.name }}"
  "{{ c.function.arguments | tojson }}{% endfor %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n";

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  char path[4096];
  const char *c = getenv("HEARTH_CACHE"), *home = getenv("HOME"), *sh = getenv("HEARTH_SHARED");
  if (c && *c) snprintf(path, sizeof path, "%s/tokenizers/qwen3/chat_template.jinja", c);
  else snprintf(path, sizeof path, "%s/.cache/hearth/tokenizers/qwen3/chat_template.jinja", home ? home : ".");
  struct hearth_err err;
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(path, sizeof path, "%s/data/chat-templates/qwen3.jinja", sh && *sh ? sh : "../shared");
    f = fopen(path, "rb");
  }
  if (f) {
    static char src[1 << 16];
    size_t n = fread(src, 1, sizeof src, f);
    fclose(f);
    if (chat_template_load(src, n, NULL, &g_tmpl, &err) == 0) return 0;
  }
  fprintf(stderr, "fuzz_request_json: %s not found, using the built-in template\n", path);
  if (chat_template_load(FALLBACK, strlen(FALLBACK), NULL, &g_tmpl, &err)) {
    fprintf(stderr, "fuzz_request_json: %s\n", err.msg);
    abort();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t je;
  json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
  if (!body) return 0;
  json_t *msgs = json_object_get(body, "messages"), *tools = json_object_get(body, "tools");
  if (json_is_array(msgs)) {
    struct verr e;
    json_t *norm = chat_messages_normalize(msgs, &e);
    if (norm) {
      char *out = NULL;
      struct hearth_err err;
      if (chat_template_render(g_tmpl, norm, json_is_array(tools) ? tools : NULL, 1, NULL, &out, &err) == 0) free(out);
      json_decref(norm);
    }
  }
  json_decref(body);
  return 0;
}
