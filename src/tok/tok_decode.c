/* tok/tok_decode.c — ids → text (HF decoder semantics) and the streaming detokenizer.
 *
 * Two decoder shapes, precomputed per id at load (tok_load.c, build_decoder):
 *   byte-level  each token's bytes are concatenated, then the whole is made valid UTF-8 with the
 *               maximal-subpart rule (Rust String::from_utf8_lossy);
 *   pieces      Replace-d token strings are concatenated; a run of <0xXX> byte-fallback tokens
 *               becomes its bytes when the whole run is valid UTF-8, else one U+FFFD per byte
 *               (HF ByteFallback). With no decoder at all, tokens are joined with " ".
 * The stream produces the same text incrementally and never emits a partial character. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"
#include "base/err.h"

struct sbuf { char *p; size_t n, cap; };

static int sb_add(struct sbuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

static const char REPL[] = "\xEF\xBF\xBD";

/* Appends the valid-UTF-8 rendering of s[0..n) to out. With hold, an unfinished character at the
 * end is not consumed; returns the number of bytes consumed, or -1 on OOM. */
static long lossy(struct sbuf *out, const unsigned char *s, size_t n, int hold) {
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && s[j] < 0x80) j++;
    if (j > i && sb_add(out, (const char *)s + i, j - i)) return -1;
    i = j;
    if (i >= n) break;
    int l = tok_utf8_valid_len(s + i, n - i);
    if (l) {
      if (sb_add(out, (const char *)s + i, (size_t)l)) return -1;
      i += (size_t)l;
      continue;
    }
    if (hold && tok_utf8_incomplete(s + i, n - i)) break;
    if (sb_add(out, REPL, 3)) return -1;
    i += (size_t)tok_utf8_invalid_len(s + i, n - i);
  }
  return (long)i;
}

/* A finished byte-fallback run: its bytes if valid UTF-8 as a whole, else U+FFFD per byte. */
static int flush_run(struct sbuf *out, struct sbuf *run) {
  const unsigned char *s = (const unsigned char *)run->p;
  size_t i = 0;
  while (i < run->n) {
    int l = tok_utf8_valid_len(s + i, run->n - i);
    if (!l) break;
    i += (size_t)l;
  }
  int rc = 0;
  if (i == run->n) rc = run->n ? sb_add(out, run->p, run->n) : 0;
  else for (size_t k = 0; k < run->n && !rc; k++) rc = sb_add(out, REPL, 3);
  run->n = 0;
  return rc;
}

struct tok_stream {
  const struct tok *t;
  int skip_special;
  int any;          /* a token was emitted (no-decoder join) */
  struct sbuf pend; /* byte-level: unfinished character; pieces: byte-fallback run */
  struct sbuf out;
};

/* Feeds one id into st; appends finished text to st->out. */
static int feed(struct tok_stream *st, int32_t id, struct hearth_err *err) {
  const struct tok *t = st->t;
  if (id < 0 || id >= t->n_vocab || t->len[id] == UINT32_MAX)
    return err_set(err, HEARTH_ERR_ARG, "tokenizer: id %d is not in the vocabulary", id);
  if (st->skip_special && t->special[id]) return 0;
  const char *piece = t->dblob + t->doff[id];
  size_t pn = t->dlen[id];
  if (t->dec_bytelevel) {
    if (sb_add(&st->pend, piece, pn)) goto nomem;
    long used = lossy(&st->out, (const unsigned char *)st->pend.p, st->pend.n, 1);
    if (used < 0) goto nomem;
    memmove(st->pend.p, st->pend.p + used, st->pend.n - (size_t)used);
    st->pend.n -= (size_t)used;
    return 0;
  }
  if (t->byte_val[id] >= 0) {
    char c = (char)t->byte_val[id];
    return sb_add(&st->pend, &c, 1) ? err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory") : 0;
  }
  if (flush_run(&st->out, &st->pend)) goto nomem;
  if (t->dec_none && st->any++ && sb_add(&st->out, " ", 1)) goto nomem;
  if (sb_add(&st->out, piece, pn)) goto nomem;
  return 0;
nomem:
  return err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
}

static int finish(struct tok_stream *st, struct hearth_err *err) {
  int rc = 0;
  if (st->t->dec_bytelevel) rc = lossy(&st->out, (const unsigned char *)st->pend.p, st->pend.n, 0) < 0;
  else {
    if (st->pend.n && st->t->dec_none && st->any++) rc = sb_add(&st->out, " ", 1);
    if (!rc) rc = flush_run(&st->out, &st->pend);
  }
  st->pend.n = 0;
  return rc ? err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory") : 0;
}

int tok_decode(const struct tok *t, const int32_t *ids, int n, int skip_special, char **text, size_t *len,
               struct hearth_err *err) {
  *text = NULL;
  if (len) *len = 0;
  struct tok_stream st = {.t = t, .skip_special = skip_special};
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) rc = feed(&st, ids[i], err);
  if (!rc) rc = finish(&st, err);
  if (!rc && !st.out.p && sb_add(&st.out, "", 0)) rc = err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
  free(st.pend.p);
  if (rc) { free(st.out.p); return rc; }
  *text = st.out.p;
  if (len) *len = st.out.n;
  return 0;
}

int tok_stream_new(const struct tok *t, int skip_special, struct tok_stream **out, struct hearth_err *err) {
  *out = calloc(1, sizeof **out);
  if (!*out) return err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
  (*out)->t = t, (*out)->skip_special = skip_special;
  return 0;
}

void tok_stream_free(struct tok_stream *s) {
  if (!s) return;
  free(s->pend.p), free(s->out.p);
  free(s);
}

int tok_stream_push(struct tok_stream *s, int32_t id, const char **text, size_t *len, struct hearth_err *err) {
  s->out.n = 0;
  if (s->out.p) s->out.p[0] = 0;
  size_t pend = s->pend.n;
  int any = s->any;
  int rc = feed(s, id, err);
  if (rc) { s->pend.n = pend, s->any = any, s->out.n = 0; } /* an unknown id leaves the stream as it was */
  *text = s->out.p ? s->out.p : "";
  *len = rc ? 0 : s->out.n;
  return rc;
}

int tok_stream_flush(struct tok_stream *s, const char **text, size_t *len, struct hearth_err *err) {
  s->out.n = 0;
  int rc = finish(s, err);
  s->any = 0;
  *text = s->out.p ? s->out.p : "";
  *len = rc ? 0 : s->out.n;
  return rc;
}

int tok_token_bytes(const struct tok *t, int32_t id, const char **p, size_t *len, char *byte) {
  if (id < 0 || id >= t->n_vocab || t->len[id] == UINT32_MAX || t->special[id]) return -1;
  if (!t->dec_bytelevel && t->byte_val[id] >= 0) {
    *byte = (char)t->byte_val[id];
    *p = byte;
    *len = 1;
    return 0;
  }
  *p = t->dblob + t->doff[id];
  *len = t->dlen[id];
  return 0;
}
