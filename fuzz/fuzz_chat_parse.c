/* fuzz/chat_parse_fuzz.c — libFuzzer target for the output parser (tool calls, reasoning).
 * The first byte picks the format and options; the rest is fed in chunks whose sizes come from
 * the data, so streaming boundaries are fuzzed too. */
#include <stddef.h>
#include <stdint.h>

#include "chat/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  struct chat_parser_opts o = {.format = (enum chat_format)(data[0] % 3), .start_in_reasoning = (data[0] >> 2) & 1,
                               .id_seed = 1};
  struct chat_parser *p;
  struct hearth_err err;
  if (chat_parser_new(&o, &p, &err)) return 0;
  size_t i = 1, step = 1 + (data[0] >> 3);
  while (i < size) {
    size_t n = size - i < step ? size - i : step;
    struct chat_delta d;
    if (chat_parser_push(p, (const char *)data + i, n, &d, &err) == 0) chat_delta_clear(&d);
    i += n;
  }
  struct chat_delta d;
  if (chat_parser_finish(p, &d, &err) == 0) chat_delta_clear(&d);
  chat_parser_free(p);
  return 0;
}
