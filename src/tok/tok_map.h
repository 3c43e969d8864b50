/* tok/tok_map.h — the two hash tables of the tokenizer: token string -> id, and
 * (left id, right id) -> (merge rank, merged id). Open addressing, linear probing, built once at
 * load and read-only afterwards (so concurrent lookups need no lock). */
#ifndef HEARTH_TOK_MAP_H
#define HEARTH_TOK_MAP_H
#include <stddef.h>
#include <stdint.h>

uint64_t tok_hash(const void *p, size_t n);

/* Strings live in the caller's blob: the map stores offsets into it. */
struct tok_strmap {
  uint32_t mask;     /* capacity - 1 (power of two) */
  int32_t *slots;    /* id or -1 */
  const char *blob;  /* token bytes of id i at blob + off[i], length len[i] */
  const uint32_t *off, *len;
};

/* Sizes the table for n entries. Returns 0 or -1 on allocation failure. */
int tok_strmap_init(struct tok_strmap *m, size_t n, const char *blob, const uint32_t *off,
                    const uint32_t *len);
/* Inserts id (whose string is already in the blob); returns the id already present for the same
 * string, or -1 when it was inserted. */
int32_t tok_strmap_put(struct tok_strmap *m, int32_t id);
int32_t tok_strmap_get(const struct tok_strmap *m, const char *s, size_t n);
void tok_strmap_free(struct tok_strmap *m);

struct tok_pairmap {
  uint32_t mask;
  uint64_t *keys;  /* (a << 32 | b) + 1; 0 = empty */
  uint64_t *vals;  /* rank << 32 | merged id */
};
int tok_pairmap_init(struct tok_pairmap *m, size_t n);
/* Returns 1 if the key was already present (the value is overwritten: like HF, the last
 * duplicate merge wins), 0 if inserted. */
int tok_pairmap_put(struct tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
/* Returns 1 and fills rank/id when (a, b) is a merge. */
static inline int tok_pairmap_get(const struct tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank,
                                  int32_t *id) {
  uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  uint64_t h = k * 0x9E3779B97F4A7C15ull;
  for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
    if (m->keys[i] == k) { *rank = (uint32_t)(m->vals[i] >> 32); *id = (int32_t)(uint32_t)m->vals[i]; return 1; }
    if (!m->keys[i]) return 0;
  }
}
void tok_pairmap_free(struct tok_pairmap *m);
#endif
