/* fuzz/fuzz_tok_load.c — libFuzzer target: tokenizer.json (and tokenizer_config.json) loading.
 * The input is split at the first NUL byte: before = tokenizer.json, after = tokenizer_config.json.
 * A successful load is exercised with a short encode/decode. No crash, no leak, bounded time. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 20) return 0;
  const char *json = (const char *)data;
  const uint8_t *nul = memchr(data, 0, size);
  size_t jn = nul ? (size_t)(nul - data) : size;
  const char *cfg = nul ? (const char *)nul + 1 : NULL;
  size_t cn = nul ? size - jn - 1 : 0;
  struct hearth_err err = {0};
  struct tok *t = NULL;
  if (tok_load_mem(json, jn, cfg, cn, &t, &err) == 0) {
    int32_t *ids = NULL;
    int n = 0;
    static const char text[] = "Hello <|im_end|> wörld \xF0\x9F\xA6\x99 \xFF 123\n\n";
    if (tok_encode(t, text, sizeof text - 1, 1, 1, &ids, &n, &err) == 0) {
      char *s = NULL;
      size_t l;
      if (tok_decode(t, ids, n, 0, &s, &l, &err) == 0) free(s);
      free(ids);
    }
    tok_free(t);
  }
  return 0;
}
