/* tests/server/bench_json_mask.c — the cost of one constrained-decoding mask (json_mask.h) over the
 * real Qwen vocabulary (151k tokens), per program state: a benchmark, not a test. The engine runs one
 * mask per constrained sequence per token on its thread, so this is the CPU time a constrained batch
 * adds to every decoding step. usage: bench_json_mask [reps]   (tokenizer: scripts/fetch-tokenizers.sh) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/json_mask.h"
#include "server/json_schema.h"
#include "test.h"
#include "tok/tokenizer.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 50;
  char dir[512];
  test_tokenizer_dir(dir, sizeof dir, "qwen3");
  struct tok *t = NULL;
  struct jvocab *v = NULL;
  struct hearth_err err = {0};
  if (tok_load_dir(dir, &t, &err) || jvocab_new(t, &v, &err)) {
    fprintf(stderr, "bench_json_mask: %s (scripts/fetch-tokenizers.sh)\n", err.msg);
    return 1;
  }
  const int nv = tok_vocab_size(t) + 64;
  float *lg = calloc((size_t)nv, sizeof *lg);
  json_t *sc = json_loads("{\"type\": \"object\", \"properties\": {\"label\": {\"enum\": [\"yes\", \"no\"]}, "
                          "\"why\": {\"type\": \"string\"}, \"n\": {\"type\": \"integer\"}}}", 0, NULL);
  struct jprog *sp = jschema_compile(sc, NULL, 0);
  static const char *const tools[] = {"get_weather", "lookup_user"};
  struct jprog *tp = jprog_tool_call(tools, 2);
  struct { const char *name; const struct jprog *p; const char *pre; } cs[] = {
      {"json_object: start", jprog_json_object(), ""},
      {"json_object: in a key", jprog_json_object(), "{\""},
      {"json_object: a value", jprog_json_object(), "{\"a\": "},
      {"json_object: in a string", jprog_json_object(), "{\"a\": \"x"},
      {"json_schema: a literal", sp, "{\"la"},
      {"json_schema: an enum", sp, "{\"label\": "},
      {"json_schema: in a string", sp, "{\"label\": \"yes\", \"why\": \"ab"},
      {"json_schema: an integer", sp, "{\"label\": \"yes\", \"why\": \"\", \"n\": 1"},
      {"tool call: in an argument string", tp, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"c\": \"x"},
  };
  printf("| state (Qwen vocabulary, %d tokens) | ms per mask | tokens allowed |\n|---|---|---|\n", nv - 64);
  for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
    struct jstate s;
    jstate_init(cs[i].p, &s);
    if (!cs[i].p || !jstate_feed_all(cs[i].p, &s, cs[i].pre, strlen(cs[i].pre))) {
      printf("| %s | (prefix refused) | |\n", cs[i].name);
      continue;
    }
    int left = jvocab_mask(v, cs[i].p, &s, lg, nv);
    const double t0 = now();
    for (int r = 0; r < reps; r++) left = jvocab_mask(v, cs[i].p, &s, lg, nv);
    printf("| %s | %.3f | %d |\n", cs[i].name, (now() - t0) / reps * 1e3, left);
  }
  jprog_free(sp);
  jprog_free(tp);
  json_decref(sc);
  free(lg);
  jvocab_free(v);
  tok_free(t);
  return 0;
}
