/* fuzz/fuzz_chat_jinja.c — libFuzzer target for the Jinja parser and evaluator (chat templates).
 *
 * Input: template source, optionally followed by "\n\x00" and a JSON object of variables (when
 * absent, a small conversation with messages/tools is used, so fuzzed templates reach real data).
 * Every input must parse-or-fail and render-or-fail within the evaluator's limits, without
 * crashing, leaking or hanging (the limits are smaller than the server's so that executions stay
 * fast; they are the same code paths). Build and run: scripts/fuzz.sh (seeds: fuzz/make-seeds.py).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

static const char DEFAULT_VARS[] =
  "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi \\u00e9\"},"
  "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
  "\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true], \"b\": {\"c\": \"d\"}}}}]},"
  "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"r\"}],"
  "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
  "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t tlen = size;
  const char *vars_src = DEFAULT_VARS;
  char *vars_copy = NULL;
  for (size_t i = 0; i + 1 < size; i++)
    if (data[i] == '\n' && data[i + 1] == 0) {
      tlen = i;
      vars_copy = malloc(size - i - 1);
      if (!vars_copy) return 0;
      memcpy(vars_copy, data + i + 2, size - i - 2);
      vars_copy[size - i - 2] = 0;
      vars_src = vars_copy;
      break;
    }
  struct jinja_program *p = NULL;
  struct hearth_err err;
  if (jinja_parse((const char *)data, tlen, &p, &err) == 0) {
    json_t *vars = json_loads(vars_src, 0, NULL);
    if (json_is_object(vars)) {
      struct jinja_limits lim = {.max_output = 1 << 20, .max_memory = 32 << 20, .max_steps = 20000, .max_depth = 32,
                                .max_work = 64 << 20};
      char *out = NULL;
      if (jinja_render(p, vars, &lim, &out, NULL, &err) == 0) free(out);
    }
    json_decref(vars);
    jinja_program_free(p);
  }
  free(vars_copy);
  return 0;
}
