/* tok/tok_map.c — hash tables for vocabulary and merges (see tok_map.h). */
#include "tok/tok_map.h"

#include <stdlib.h>
#include <string.h>

uint64_t tok_hash(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0x9E3779B97F4A7C15ull);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    s += 8, n -= 8;
  }
  uint64_t w = 0;
  memcpy(&w, s, n);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 32);
}

static uint32_t cap_for(size_t n) {
  uint32_t c = 16;
  while (c < n * 2) c <<= 1;
  return c;
}

int tok_strmap_init(struct tok_strmap *m, size_t n, const char *blob, const uint32_t *off,
                    const uint32_t *len) {
  uint32_t cap = cap_for(n);
  m->slots = malloc(cap * sizeof *m->slots);
  if (!m->slots) return -1;
  memset(m->slots, 0xFF, cap * sizeof *m->slots);
  m->mask = cap - 1, m->blob = blob, m->off = off, m->len = len;
  return 0;
}

int32_t tok_strmap_put(struct tok_strmap *m, int32_t id) {
  const char *s = m->blob + m->off[id];
  size_t n = m->len[id];
  for (uint32_t i = (uint32_t)tok_hash(s, n) & m->mask;; i = (i + 1) & m->mask) {
    int32_t o = m->slots[i];
    if (o < 0) { m->slots[i] = id; return -1; }
    if (m->len[o] == n && !memcmp(m->blob + m->off[o], s, n)) return o;
  }
}

int32_t tok_strmap_get(const struct tok_strmap *m, const char *s, size_t n) {
  if (!m->slots) return -1;
  for (uint32_t i = (uint32_t)tok_hash(s, n) & m->mask;; i = (i + 1) & m->mask) {
    int32_t o = m->slots[i];
    if (o < 0) return -1;
    if (m->len[o] == n && !memcmp(m->blob + m->off[o], s, n)) return o;
  }
}

void tok_strmap_free(struct tok_strmap *m) { free(m->slots); m->slots = NULL; }

int tok_pairmap_init(struct tok_pairmap *m, size_t n) {
  uint32_t cap = cap_for(n);
  m->keys = calloc(cap, sizeof *m->keys);
  m->vals = malloc(cap * sizeof *m->vals);
  if (!m->keys || !m->vals) { tok_pairmap_free(m); return -1; }
  m->mask = cap - 1;
  return 0;
}

int tok_pairmap_put(struct tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  uint64_t h = k * 0x9E3779B97F4A7C15ull;
  for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
    if (m->keys[i] == k) { m->vals[i] = (uint64_t)rank << 32 | (uint32_t)id; return 1; }
    if (!m->keys[i]) { m->keys[i] = k; m->vals[i] = (uint64_t)rank << 32 | (uint32_t)id; return 0; }
  }
}

void tok_pairmap_free(struct tok_pairmap *m) {
  free(m->keys); free(m->vals);
  m->keys = NULL, m->vals = NULL;
}
