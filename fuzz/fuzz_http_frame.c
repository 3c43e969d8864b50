/* fuzz/fuzz_http_frame.c — libFuzzer target: the strict request framer (server/http_frame.h) on a
 * connection's raw bytes. The first byte picks how the rest arrives (pieces of 1 to 256 bytes, as a
 * relay reads them); the framer must judge the same whatever the pieces: the same status, the same
 * number of heads, the same passed prefix as when it sees everything at once; never pass more than
 * it was given; and, when it refuses, name why. No crash, no overread (ASan), bounded time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t step = (size_t)data[0] + 1;
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  /* every piece in its own heap copy, so ASan sees a read past what has arrived */
  struct http_framer whole = {0};
  char *all = malloc(n ? n : 1);
  if (!all) return 0;
  memcpy(all, p, n);
  size_t passed_whole = http_frame_feed(&whole, all, n);
  free(all);
  if (passed_whole > n) abort();
  struct http_framer fr = {0};
  size_t ok = 0, have = 0;
  while (!fr.status && have < n) {
    have = have + step < n ? have + step : n;
    char *buf = malloc(have - ok ? have - ok : 1);
    if (!buf) return 0;
    memcpy(buf, p + ok, have - ok);
    size_t k = http_frame_feed(&fr, buf, have - ok);
    free(buf);
    if (k > have - ok) abort();
    ok += k;
  }
  if (fr.status != whole.status || fr.heads != whole.heads || ok != passed_whole) abort();
  if (fr.status && !fr.why[0]) abort();
  return 0;
}
