/* tok/tok_encode.c — the encode pipeline of HF `tokenizers`, in its order:
 *   repair invalid UTF-8 → split out added tokens (raw trie) → normalize each remaining span →
 *   split out normalized added tokens → pre-tokenize (Split / ByteLevel regexes, PCRE2) →
 *   BPE per pre-token → post-processor (TemplateProcessing) when add_special.
 * Everything per call lives in a struct enc (no shared mutable state: concurrent encodes on one
 * struct tok are safe). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok/tok_internal.h"
#include "base/err.h"

/* A piece of a span: 32-bit offsets (encode_normalized_span refuses longer spans), since an 8 MB
 * text has millions of pieces. */
struct range { uint32_t a, b; int is_match; };
struct ranges { struct range *v; size_t n, cap; };

struct enc {
  const struct tok *t;
  int parse_special;
  struct tok_vec ids;
  struct tok_bpe_scratch *bpe;
  struct ranges r[2];
  pcre2_match_data *md;
  struct hearth_err *err;
};

static int rpush(struct ranges *r, size_t a, size_t b, int is_match) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 64;
    struct range *p = realloc(r->v, cap * sizeof *p);
    if (!p) return -1;
    r->v = p, r->cap = cap;
  }
  r->v[r->n++] = (struct range){(uint32_t)a, (uint32_t)b, is_match};
  return 0;
}

/* ---- Unicode predicates used by added-token options ---- */

static int is_ws(uint32_t c) { /* Rust char::is_whitespace (White_Space) */
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int is_word_char(uint32_t c) { /* alphanumeric or '_' */
  if (c == '_') return 1;
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

static uint32_t last_cp(const unsigned char *s, size_t n, size_t *start) {
  size_t i = n - 1;
  while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
  uint32_t cp;
  tok_utf8_get(s + i, &cp);
  *start = i;
  return cp;
}

/* ---- normalization ---- */

static int too_long(struct enc *e, size_t n, size_t got, size_t cap) {
  return err_set(e->err, HEARTH_ERR_ARG,
                 "tokenizer: the normalizer expands a %zu-byte span to %zu bytes, over the limit of %zu "
                 "(%d x + %d; tokenizer.json's normalizer is hostile or broken)",
                 n, got, cap, TOK_NORM_GROWTH, TOK_NORM_SLACK);
}

static int normalize(struct enc *e, const char *s, size_t n, char **out, size_t *on, char **owned) {
  const struct tok *t = e->t;
  *out = (char *)s, *on = n, *owned = NULL;
  const size_t cap = n * TOK_NORM_GROWTH + TOK_NORM_SLACK; /* n <= INT32_MAX / 4: no overflow */
  for (int k = 0; k < t->n_norm; k++) {
    const struct tok_norm_step *st = &t->norm[k];
    char *res = NULL;
    size_t rn = 0;
    if (st->kind <= TN_NFKD) {
      size_t i = 0;
      while (i < *on && (unsigned char)(*out)[i] < 0x80) i++;
      if (i == *on) continue; /* ASCII is invariant under every normalization form */
      int opt = UTF8PROC_STABLE;
      if (st->kind == TN_NFC || st->kind == TN_NFKC) opt |= UTF8PROC_COMPOSE;
      else opt |= UTF8PROC_DECOMPOSE;
      if (st->kind == TN_NFKC || st->kind == TN_NFKD) opt |= UTF8PROC_COMPAT;
      char *dst = NULL;
      const ssize_t r = tok_norm_map(*out, *on, opt, &dst); /* as HF's Unicode 9.0 tables have it */
      if (r < 0) return err_set(e->err, r == UTF8PROC_ERROR_NOMEM ? HEARTH_ERR_NOMEM : HEARTH_ERR_ARG,
                                "tokenizer: normalization failed: %s", utf8proc_errmsg(r));
      res = dst, rn = (size_t)r;
      if (rn > cap) { free(res); return too_long(e, n, rn, cap); }
    } else if (st->kind == TN_REPLACE) {
      size_t cnt = 0;
      for (const char *p = *out; (p = memmem(p, *on - (size_t)(p - *out), st->pat, st->patlen)); p += st->patlen) cnt++;
      if (!cnt) continue;
      rn = *on + cnt * st->replen - cnt * st->patlen; /* cnt <= *on <= cap: no overflow */
      if (rn > cap) return too_long(e, n, rn, cap);
      if (!(res = malloc(rn + 1))) return err_set(e->err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
      size_t w = 0;
      for (size_t i = 0; i < *on;) {
        if (*on - i >= st->patlen && !memcmp(*out + i, st->pat, st->patlen)) {
          memcpy(res + w, st->rep, st->replen), w += st->replen, i += st->patlen;
        } else {
          res[w++] = (*out)[i++];
        }
      }
    } else { /* TN_PREPEND: only a non-empty string */
      if (!*on) continue;
      rn = *on + st->replen;
      if (rn > cap) return too_long(e, n, rn, cap);
      if (!(res = malloc(rn + 1))) return err_set(e->err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
      memcpy(res, st->rep, st->replen);
      memcpy(res + st->replen, *out, *on);
    }
    free(*owned);
    *owned = res, *out = res, *on = rn;
  }
  return 0;
}

/* ---- pre-tokenization + model ---- */

/* The last split step hands its pieces to BPE in batches of this many, so the pieces of a long
 * text are never all held at once (an 8 MB text is ~2.5 M pieces). */
#define BPE_BATCH 4096

/* BPE over the pieces r holds, in order; empties r. */
static int bpe_ranges(struct enc *e, const char *s, struct ranges *r) {
  for (size_t i = 0; i < r->n; i++) {
    int rc = tok_bpe_word(e->t, s + r->v[i].a, r->v[i].b - r->v[i].a, &e->ids, &e->bpe);
    if (rc == -2)
      return err_set(e->err, HEARTH_ERR_ARG, "tokenizer: the text has a character with no token, and tokenizer.json "
                     "has neither byte-fallback tokens nor an unk_token to stand for it");
    if (rc) return err_set(e->err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
  }
  r->n = 0;
  return 0;
}

/* Isolated and Removed pieces need no neighbours: they go to out as they are found (and to BPE
 * in batches when stream is set); the merging behaviours collect a range's pieces first. */
static int direct(const struct tok_pre_step *st) { return st->behavior == SB_ISOLATED || st->behavior == SB_REMOVED; }

static int piece(struct enc *e, const struct tok_pre_step *st, const char *s, struct ranges *m,
                 struct ranges *out, int stream, size_t a, size_t b, int is_match) {
  if (!direct(st)) return rpush(m, a, b, is_match) ? err_set(e->err, HEARTH_ERR_NOMEM, "tokenizer: out of memory") : 0;
  if (st->behavior == SB_REMOVED && is_match) return 0;
  if (rpush(out, a, b, 0)) return err_set(e->err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
  return stream && out->n >= BPE_BATCH ? bpe_ranges(e, s, out) : 0;
}

/* One pre-tokenizer step over the pieces in: its pieces into out, or (stream: the last step, and
 * a direct behaviour) through out into BPE, leaving the last batch in out. */
static int split_step(struct enc *e, const struct tok_pre_step *st, const char *s, struct ranges *in,
                      struct ranges *out, int stream) {
  out->n = 0;
  struct ranges m = {0};
  int rc = 0;
  for (size_t k = 0; k < in->n; k++) {
    size_t a = in->v[k].a, b = in->v[k].b;
    m.n = 0;
    /* pieces of [a, b): gaps (0) and matches (1) in order */
    size_t pos = a;
    if (st->re) {
      PCRE2_SIZE off = 0, len = b - a;
      while (off < len) {
        int r = pcre2_match(st->re, (PCRE2_SPTR)(s + a), len, off, PCRE2_NO_UTF_CHECK, e->md, NULL);
        /* the JIT's default 32 KiB stack runs out on some long runs of bytes that are not UTF-8 (fuzz_tok_encode:
         * the pattern's alternatives backtrack over each byte); the interpreter keeps its backtracking on the heap */
        if (r == PCRE2_ERROR_JIT_STACKLIMIT)
          r = pcre2_match(st->re, (PCRE2_SPTR)(s + a), len, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) { rc = err_set(e->err, HEARTH_ERR_ARG, "tokenizer: split regex failed (%d)", r); goto out; }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        if (ov[1] == ov[0]) { /* empty match: step one character */
          off = ov[1] + 1;
          while (off < len && ((unsigned char)s[a + off] & 0xC0) == 0x80) off++;
          continue;
        }
        if (a + ov[0] > pos && (rc = piece(e, st, s, &m, out, stream, pos, a + ov[0], 0))) goto out;
        if ((rc = piece(e, st, s, &m, out, stream, a + ov[0], a + ov[1], 1))) goto out;
        pos = a + ov[1];
        off = ov[1];
      }
    } else {
      for (const char *p = s + a; (p = memmem(p, b - (size_t)(p - s), st->pat, st->patlen)); p += st->patlen) {
        size_t ms = (size_t)(p - s);
        if (ms > pos && (rc = piece(e, st, s, &m, out, stream, pos, ms, 0))) goto out;
        if ((rc = piece(e, st, s, &m, out, stream, ms, ms + st->patlen, 1))) goto out;
        pos = ms + st->patlen;
      }
    }
    if (b > pos && (rc = piece(e, st, s, &m, out, stream, pos, b, 0))) goto out;
    /* behaviours, as HF SplitDelimiterBehavior (Isolated and Removed: done by piece) */
    switch (st->behavior) {
    case SB_ISOLATED:
    case SB_REMOVED:
      break;
    case SB_MERGED_PREV: {
      int prev_match = 0;
      size_t first = out->n;
      for (size_t i = 0; i < m.n; i++) {
        if (m.v[i].is_match && !prev_match && out->n > first) out->v[out->n - 1].b = m.v[i].b;
        else if (rpush(out, m.v[i].a, m.v[i].b, 0)) goto nomem;
        prev_match = m.v[i].is_match;
      }
      break;
    }
    case SB_MERGED_NEXT: {
      int prev_match = 0;
      size_t first = out->n;
      for (size_t i = m.n; i-- > 0;) {
        if (m.v[i].is_match && !prev_match && out->n > first) out->v[out->n - 1].a = m.v[i].a;
        else if (rpush(out, m.v[i].a, m.v[i].b, 0)) goto nomem;
        prev_match = m.v[i].is_match;
      }
      for (size_t i = first, j = out->n; i + 1 < j; i++, j--) { /* back to text order */
        struct range tmp = out->v[i];
        out->v[i] = out->v[j - 1], out->v[j - 1] = tmp;
      }
      break;
    }
    }
  }
out:
  free(m.v);
  return rc;
nomem:
  free(m.v);
  return err_set(e->err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
}

static int encode_normalized_span(struct enc *e, const char *s, size_t n) {
  const struct tok *t = e->t;
  struct ranges *in = &e->r[0], *out = &e->r[1];
  if (n > UINT32_MAX) return err_set(e->err, HEARTH_ERR_ARG, "tokenizer: a normalized span over 4 GiB");
  in->n = 0;
  if (rpush(in, 0, n, 0)) return err_set(e->err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
  for (int k = 0; k < t->n_pre; k++) {
    int rc = split_step(e, &t->pre[k], s, in, out, k == t->n_pre - 1 && direct(&t->pre[k]));
    if (rc) return rc;
    struct ranges *tmp = in;
    in = out, out = tmp;
  }
  return bpe_ranges(e, s, in);
}

/* Splits s[0..n) on the added tokens of trie tr; calls span() on text spans and pushes ids. */
typedef int (*span_fn)(struct enc *e, const char *s, size_t n);

static int split_added(struct enc *e, const struct tok_trie *tr, const char *s, size_t n, span_fn span) {
  const struct tok *t = e->t;
  const unsigned char *u = (const unsigned char *)s;
  if (!tr->nodes) return span(e, s, n);
  size_t start_offset = 0; /* end of the last accepted added token */
  size_t i = 0;
  while (i < n) {
    int32_t nd = tr->root_child[u[i]];
    if (nd < 0) { i++; continue; }
    int32_t best = -1;
    size_t best_end = 0, j = i + 1;
    for (;;) {
      if (tr->nodes[nd].added >= 0) best = tr->nodes[nd].added, best_end = j;
      if (j >= n) break;
      int32_t c = tr->nodes[nd].first_child;
      while (c >= 0 && tr->nodes[c].byte != u[j]) c = tr->nodes[c].next_sibling;
      if (c < 0) break;
      nd = c, j++;
    }
    if (best < 0) { i++; continue; }
    const struct tok_added *ad = &t->added[best];
    size_t ms = i, me = best_end;
    i = best_end; /* the automaton resumes after the match, accepted or not */
    if (!e->parse_special && ad->special) continue;
    if (ad->single_word) {
      size_t st;
      int start_space = ms == 0 || !is_word_char(last_cp(u, ms, &st));
      uint32_t nc = 0;
      int stop_space = me == n || (tok_utf8_get(u + me, &nc), !is_word_char(nc));
      if (!start_space || !stop_space) continue;
    }
    if (ad->lstrip) {
      size_t ns = ms;
      while (ns > 0) {
        size_t st;
        if (!is_ws(last_cp(u, ns, &st))) break;
        ns = st;
      }
      ms = ns > start_offset ? ns : start_offset;
    }
    if (ad->rstrip) {
      while (me < n) {
        uint32_t c;
        int l = tok_utf8_get(u + me, &c);
        if (!is_ws(c)) break;
        me += (size_t)l;
      }
    }
    if (ms > start_offset) {
      int rc = span(e, s + start_offset, ms - start_offset);
      if (rc) return rc;
    }
    if (tok_vec_push(&e->ids, ad->id)) return err_set(e->err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
    start_offset = me;
  }
  if (start_offset < n) return span(e, s + start_offset, n - start_offset);
  return 0;
}

static int span_normalized(struct enc *e, const char *s, size_t n) { return encode_normalized_span(e, s, n); }

static int span_raw(struct enc *e, const char *s, size_t n) {
  char *ns, *owned;
  size_t nn;
  int rc = normalize(e, s, n, &ns, &nn, &owned);
  if (!rc) rc = split_added(e, &e->t->trie_norm, ns, nn, span_normalized);
  free(owned);
  return rc;
}

/* Copy of s with every maximal invalid UTF-8 subpart replaced by U+FFFD; NULL if s is valid. */
static char *repair_utf8(const char *s, size_t n, size_t *on, int *nomem) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  *nomem = 0;
  while (i < n) {
    if (u[i] < 0x80) { i++; continue; }
    int l = tok_utf8_valid_len(u + i, n - i);
    if (!l) break;
    i += (size_t)l;
  }
  if (i == n) return NULL;
  char *o = malloc(n * 3 + 1);
  if (!o) { *nomem = 1; return NULL; }
  memcpy(o, s, i);
  size_t w = i;
  while (i < n) {
    int l = tok_utf8_valid_len(u + i, n - i);
    if (l) { memcpy(o + w, s + i, (size_t)l); w += (size_t)l; i += (size_t)l; continue; }
    i += (size_t)tok_utf8_invalid_len(u + i, n - i);
    memcpy(o + w, "\xEF\xBF\xBD", 3), w += 3;
  }
  *on = w;
  return o;
}

int tok_encode(const struct tok *t, const char *text, size_t len, int add_special, int parse_special,
               int32_t **ids, int *n, struct hearth_err *err) {
  *ids = NULL, *n = 0;
  if (!text && len) return err_set(err, HEARTH_ERR_ARG, "tok_encode: NULL text");
  if (len > (size_t)INT32_MAX / 4) return err_set(err, HEARTH_ERR_ARG, "tok_encode: text too long (%zu bytes)", len);
  struct enc e = {.t = t, .parse_special = parse_special, .err = err};
  int nomem, rc = 0;
  size_t fixed_len = 0;
  char *fixed = repair_utf8(text ? text : "", len, &fixed_len, &nomem);
  if (nomem) return err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory");
  const char *s = fixed ? fixed : (text ? text : "");
  size_t sn = fixed ? fixed_len : len;
  if (t->n_pre && !(e.md = pcre2_match_data_create(4, NULL))) { rc = err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
  if (add_special)
    for (int i = 0; i < t->n_pp_prefix; i++)
      if (tok_vec_push(&e.ids, t->pp_prefix[i])) { rc = err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
  if ((rc = split_added(&e, &t->trie_raw, s, sn, span_raw))) goto done;
  if (add_special)
    for (int i = 0; i < t->n_pp_suffix; i++)
      if (tok_vec_push(&e.ids, t->pp_suffix[i])) { rc = err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
  if (e.ids.n > INT32_MAX) { rc = err_set(err, HEARTH_ERR_ARG, "tok_encode: too many tokens"); goto done; }
  if (!e.ids.v && !(e.ids.v = malloc(sizeof(int32_t)))) { rc = err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
  *ids = e.ids.v, *n = (int)e.ids.n;
  e.ids.v = NULL;
done:
  free(e.ids.v);
  free(fixed);
  free(e.r[0].v), free(e.r[1].v);
  if (e.md) pcre2_match_data_free(e.md);
  tok_bpe_scratch_free(e.bpe);
  return rc;
}
