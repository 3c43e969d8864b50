/* fuzz/fuzz_tok_encode.c — libFuzzer target: encode / decode / stream on a real tokenizer.
 * Loads ${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers/${HEARTH_FUZZ_TOK:-qwen3} once (run
 * scripts/fetch-tokenizers.sh first; gemma3 is the other useful choice). Each input: the first byte
 * picks add_special / parse_special / skip_special, the rest is the text. Checks that decode of
 * the ids equals the streamed text, and that arbitrary ids (the input bytes read as int32) decode
 * or fail cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer.h"

static struct tok *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  char dir[4096];
  const char *c = getenv("HEARTH_CACHE"), *name = getenv("HEARTH_FUZZ_TOK");
  if (!name || !*name) name = "qwen3";
  if (c && *c) snprintf(dir, sizeof dir, "%s/tokenizers/%s", c, name);
  else snprintf(dir, sizeof dir, "%s/.cache/hearth/tokenizers/%s", getenv("HOME") ? getenv("HOME") : ".", name);
  struct hearth_err err = {0};
  if (tok_load_dir(dir, &g_tok, &err)) {
    fprintf(stderr, "fuzz_tok_encode: %s (run scripts/fetch-tokenizers.sh)\n", err.msg);
    abort();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 1 << 16) return 0;
  int flags = data[0];
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  struct hearth_err err = {0};
  int32_t *ids = NULL;
  int n = 0;
  if (tok_encode(g_tok, text, len, flags & 1, (flags >> 1) & 1, &ids, &n, &err)) abort();
  char *dec = NULL;
  size_t dl = 0;
  int skip = (flags >> 2) & 1;
  if (tok_decode(g_tok, ids, n, skip, &dec, &dl, &err)) abort();
  struct tok_stream *st;
  if (tok_stream_new(g_tok, skip, &st, &err)) abort();
  size_t at = 0;
  for (int k = 0; k <= n; k++) {
    const char *p;
    size_t pl;
    if ((k < n ? tok_stream_push(st, ids[k], &p, &pl, &err) : tok_stream_flush(st, &p, &pl, &err))) abort();
    if (at + pl > dl || memcmp(dec + at, p, pl)) abort(); /* stream == decode */
    at += pl;
  }
  if (at != dl) abort();
  tok_stream_free(st);
  free(dec);
  free(ids);
  /* raw ids: out-of-range ids must fail cleanly */
  int m = (int)(len / 4);
  if (m) {
    int32_t *raw = malloc((size_t)m * sizeof *raw);
    memcpy(raw, text, (size_t)m * sizeof *raw);
    for (int k = 0; k < m; k++) if (flags & 8) raw[k] = (int32_t)((uint32_t)raw[k] % (uint32_t)tok_vocab_size(g_tok));
    if (tok_decode(g_tok, raw, m, skip, &dec, &dl, &err) == 0) free(dec);
    free(raw);
  }
  return 0;
}
