/* tok/tok_bpe.c — the BPE model on one pre-token: initial symbols (GPT-2 bytes, or characters
 * with byte fallback / unk), then merges lowest rank first (leftmost on ties) with a binary heap,
 * exactly as HF `tokenizers` BPE::merge_word does. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

struct sym { int32_t id, prev, next; };
struct hent { uint32_t rank, pos; int32_t id; };

struct tok_bpe_scratch {
  struct sym *sym;
  size_t scap;
  struct hent *heap;
  size_t hn, hcap;
  char *mapped; /* ignore_merges on a byte-level word: the word in the mapped alphabet */
  size_t mcap;
};

int tok_vec_push(struct tok_vec *v, int32_t x) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    int32_t *p = realloc(v->v, cap * sizeof *p);
    if (!p) return -1;
    v->v = p, v->cap = cap;
  }
  v->v[v->n++] = x;
  return 0;
}

void tok_bpe_scratch_free(struct tok_bpe_scratch *s) {
  if (!s) return;
  free(s->sym), free(s->heap), free(s->mapped);
  free(s);
}

static inline int hless(const struct hent *a, const struct hent *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int hpush(struct tok_bpe_scratch *s, uint32_t rank, uint32_t pos, int32_t id) {
  if (s->hn == s->hcap) {
    size_t cap = s->hcap ? s->hcap * 2 : 64;
    struct hent *h = realloc(s->heap, cap * sizeof *h);
    if (!h) return -1;
    s->heap = h, s->hcap = cap;
  }
  size_t i = s->hn++;
  struct hent e = {rank, pos, id};
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!hless(&e, &s->heap[p])) break;
    s->heap[i] = s->heap[p];
    i = p;
  }
  s->heap[i] = e;
  return 0;
}

static struct hent hpop(struct tok_bpe_scratch *s) {
  struct hent top = s->heap[0], last = s->heap[--s->hn];
  size_t i = 0, n = s->hn;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && hless(&s->heap[c + 1], &s->heap[c])) c++;
    if (!hless(&s->heap[c], &last)) break;
    s->heap[i] = s->heap[c];
    i = c;
  }
  if (n) s->heap[i] = last;
  return top;
}

/* Appends the initial symbol ids of s[0..n) to sym; returns the count, -1 on OOM, -2 for a
 * character with no token, no byte-fallback tokens and no unk_token (HF drops it silently; hearth
 * refuses rather than lose text). The loader has refused byte-level vocabularies without their 256
 * byte symbols and byte_fallback without its <0xXX> tokens, unless an unk_token stands in. */
static long initial_symbols(const struct tok *t, const unsigned char *s, size_t n, struct tok_bpe_scratch *sc) {
  if (sc->scap < n) {
    size_t cap = n < 64 ? 64 : n;
    struct sym *p = realloc(sc->sym, cap * sizeof *p);
    if (!p) return -1;
    sc->sym = p, sc->scap = cap;
  }
  long k = 0;
  int last_unk = 0;
  if (t->byte_level) {
    for (size_t i = 0; i < n; i++) {
      int32_t id = t->byte_id[s[i]];
      if (id < 0) {
        if (t->unk_id < 0) continue; /* HF drops a piece it cannot represent when there is no unk */
        if (t->fuse_unk && last_unk) continue;
        id = t->unk_id, last_unk = 1;
      } else {
        last_unk = 0;
      }
      sc->sym[k++].id = id;
    }
    return k;
  }
  /* characters; every char has >= 1 byte so n symbols is enough even with byte fallback */
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int l = tok_utf8_get(s + i, &cp);
    int32_t id = cp < 0x10000 ? t->char_id[cp] : tok_strmap_get(&t->vocab, (const char *)s + i, (size_t)l);
    if (id >= 0) {
      sc->sym[k++].id = id;
      last_unk = 0;
    } else {
      int all = t->byte_fallback;
      for (int b = 0; all && b < l; b++) all = t->bf_id[s[i + (size_t)b]] >= 0;
      if (all) {
        for (int b = 0; b < l; b++) sc->sym[k++].id = t->bf_id[s[i + (size_t)b]];
        last_unk = 0;
      } else if (t->unk_id < 0) {
        return -2;
      } else if (!(t->fuse_unk && last_unk)) {
        sc->sym[k++].id = t->unk_id;
        last_unk = 1;
      }
    }
    i += (size_t)l;
  }
  return k;
}

static int bpe_word(const struct tok *t, const char *word, size_t n, struct tok_vec *out,
                    struct tok_bpe_scratch **scratch) {
  if (!*scratch && !(*scratch = calloc(1, sizeof **scratch))) return -1;
  struct tok_bpe_scratch *sc = *scratch;
  const unsigned char *s = (const unsigned char *)word;
  if (n == 0) return 0;

  if (t->ignore_merges) { /* a word that is a token is that token */
    int32_t id;
    if (t->byte_level) {
      if (sc->mcap < n * 2) {
        char *m = realloc(sc->mapped, n * 2);
        if (!m) return -1;
        sc->mapped = m, sc->mcap = n * 2;
      }
      size_t k = 0;
      for (size_t i = 0; i < n; i++) k += (size_t)tok_utf8_put(sc->mapped + k, tok_byte_to_cp(s[i]));
      id = tok_strmap_get(&t->vocab, sc->mapped, k);
    } else {
      id = tok_strmap_get(&t->vocab, word, n);
    }
    if (id >= 0) return tok_vec_push(out, id);
  }

  long ns = initial_symbols(t, s, n, sc);
  if (ns < 0) return (int)ns;
  struct sym *sym = sc->sym;
  for (long i = 0; i < ns; i++) sym[i].prev = (int32_t)i - 1, sym[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
  sc->hn = 0;
  uint32_t rank;
  int32_t nid;
  for (long i = 0; i + 1 < ns; i++)
    if (tok_pairmap_get(&t->merges, sym[i].id, sym[i + 1].id, &rank, &nid) && hpush(sc, rank, (uint32_t)i, nid)) return -1;
  while (sc->hn) {
    struct hent e = hpop(sc);
    struct sym *a = &sym[e.pos];
    if (a->id < 0 || a->next < 0) continue;
    struct sym *b = &sym[a->next];
    if (!tok_pairmap_get(&t->merges, a->id, b->id, &rank, &nid) || nid != e.id) continue; /* stale */
    a->id = nid;
    b->id = -1;
    a->next = b->next;
    if (a->next >= 0) sym[a->next].prev = (int32_t)e.pos;
    if (a->prev >= 0 && tok_pairmap_get(&t->merges, sym[a->prev].id, a->id, &rank, &nid) &&
        hpush(sc, rank, (uint32_t)a->prev, nid))
      return -1;
    if (a->next >= 0 && tok_pairmap_get(&t->merges, a->id, sym[a->next].id, &rank, &nid) &&
        hpush(sc, rank, e.pos, nid))
      return -1;
  }
  for (long i = 0; i >= 0 && i < ns; i = sym[i].next)
    if (tok_vec_push(out, sym[i].id)) return -1;
  return 0;
}

/* A pre-token at least this long is a "huge word" (a run of letters or of one character). */
#define BPE_HUGE_WORD ((size_t)256 * 1024)
static pthread_mutex_t huge_mu = PTHREAD_MUTEX_INITIALIZER;

int tok_bpe_word(const struct tok *t, const char *word, size_t n, struct tok_vec *out,
                 struct tok_bpe_scratch **scratch) {
  if (n < BPE_HUGE_WORD) return bpe_word(t, word, n, out, scratch);
  /* BPE keeps ~30 bytes of symbols and heap per byte of a word (~250 MB for an 8 MB one), and
   * exactness forbids cutting the word; so huge words take turns, one per process at a time, each
   * with its own scratch freed before the next: four concurrent 8 MB requests peaked at ~1 GB. */
  pthread_mutex_lock(&huge_mu);
  struct tok_bpe_scratch *own = NULL;
  int rc = bpe_word(t, word, n, out, &own);
  tok_bpe_scratch_free(own);
  pthread_mutex_unlock(&huge_mu);
  return rc;
}
