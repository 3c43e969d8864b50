/* tok/tok_load.c — tokenizer.json (+ tokenizer_config.json) → struct tok.
 *
 * Owns: validating every pipeline component against the supported list in tokenizer.h (refusing
 * the rest by name), building the vocabulary / merge hash tables, the added-token tries, the
 * compiled split regexes (PCRE2, UTF + UCP, JIT) and the per-id decoded pieces.
 * Does not own: running the pipeline (tok_encode.c, tok_bpe.c, tok_decode.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"
#include "base/err.h"
#include "tok/tok_json.h"
#include "base/file.h"

#define NOMEM(err) err_set(err, HEARTH_ERR_NOMEM, "tokenizer: out of memory")

/* ---- small helpers ---------------------------------------------------------------------- */

struct blob { char *p; size_t n, cap; };

static int blob_add(struct blob *b, const char *s, size_t n, uint32_t *off) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p, b->cap = cap;
  }
  if (b->n + n > UINT32_MAX) return -1;
  memcpy(b->p + b->n, s, n);
  *off = (uint32_t)b->n;
  b->n += n;
  b->p[b->n] = 0; /* keeps every piece readable as a C string when it is the last one */
  return 0;
}

static int get_bool(const struct tj *o, const char *key, int dflt) {
  const struct tj *v = tj_get(o, key);
  if (!v || v->type == TJ_NULL) return dflt;
  return v->type == TJ_TRUE;
}

static const char *type_of(const struct tj *o) {
  const struct tj *t = tj_get(o, "type");
  return t && t->type == TJ_STR ? t->u.s : "(no type)";
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) { memcpy(d, s, n); d[n] = 0; }
  return d;
}

/* Pattern of a Split/Replace: {"String": s} or {"Regex": r}. */
static int get_pattern(const struct tj *o, const char *what, const struct tj **str, const struct tj **re,
                       struct hearth_err *err) {
  const struct tj *p = tj_get(o, "pattern");
  *str = tj_get(p, "String"), *re = tj_get(p, "Regex");
  if ((*str && (*str)->type == TJ_STR) || (*re && (*re)->type == TJ_STR)) return 0;
  return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: %s without a String or Regex pattern", what);
}

/* HF's tokenizers run their regexes on Oniguruma, whose \s is Unicode's White_Space property. PCRE2's \s (UCP)
 * also takes U+180E MONGOLIAN VOWEL SEPARATOR (a format character since Unicode 6.3), so a pattern such as
 * Qwen's split "x\u180e's" differently. The pattern is rewritten so that U+180E is never \s and always \S:
 * outside a class \s -> (?:(?!\x{180E})\s) and \S -> (?:\x{180E}|\S); a class naming \s (or \S) becomes the
 * class with U+180E taken out (or added) by the same two forms around it. Other class members are assumed not to
 * hold U+180E (true of \p{L}, \p{N} and literal characters). Returns a malloc'd NUL-terminated pattern (*m bytes),
 * or NULL on OOM. Measured over every code point from U+0080 to U+323FF and the tags block against HF tokenizers
 * 0.23.2 (bench/RESULTS.md, session 37): U+180E was the one whitespace difference. */
static char *ws_rewrite(const char *p, size_t n, size_t *m) {
  static const char NOT_S[] = "(?:(?!\\x{180E})", OR_S[] = "(?:\\x{180E}|";
  size_t grow = 0; /* each \\s, \\S or class gains at most 17 bytes (a form above and its ')') */
  for (size_t i = 0; i < n; i++) grow += p[i] == '\\' || p[i] == '[';
  char *o = malloc(n + 17 * grow + 1);
  if (!o) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    if (p[i] == '\\' && i + 1 < n && (p[i + 1] == 's' || p[i + 1] == 'S')) {
      const char *pre = p[i + 1] == 's' ? NOT_S : OR_S;
      memcpy(o + k, pre, strlen(pre)), k += strlen(pre);
      o[k++] = '\\', o[k++] = p[i + 1], o[k++] = ')';
      i += 2;
    } else if (p[i] == '\\' && i + 1 < n) {
      o[k++] = p[i], o[k++] = p[i + 1];
      i += 2;
    } else if (p[i] == '[') { /* a class: up to its unescaped ']' (a ']' right after '[' or '[^' is literal) */
      size_t j = i + 1, has_s = 0, has_S = 0;
      const int neg = j < n && p[j] == '^';
      if (neg) j++;
      if (j < n && p[j] == ']') j++;
      for (; j < n && p[j] != ']'; j++) {
        if (p[j] == '\\' && j + 1 < n) {
          has_s |= p[j + 1] == 's', has_S |= p[j + 1] == 'S';
          j++;
        } else if (p[j] == '[' && j + 1 < n && p[j + 1] == ':') { /* [:alpha:] */
          const char *e = memchr(p + j + 2, ']', n - j - 2);
          if (e) j = (size_t)(e - p);
        }
      }
      if (j >= n) { /* unterminated: PCRE2 reports it */
        memcpy(o + k, p + i, n - i), k += n - i;
        break;
      }
      const size_t len = j + 1 - i;
      /* in the class, U+180E is in the set PCRE2 builds iff (\s named) != neg; HF's set has it iff (\S named) != neg */
      const int pcre_has = (has_s && !has_S) ? !neg : (has_S && !has_s) ? neg : -1;
      if (pcre_has < 0) { /* neither, or both (then both agree that U+180E is in) */
        memcpy(o + k, p + i, len), k += len;
      } else {
        const char *pre = pcre_has ? NOT_S : OR_S;
        memcpy(o + k, pre, strlen(pre)), k += strlen(pre);
        memcpy(o + k, p + i, len), k += len;
        o[k++] = ')';
      }
      i = j + 1;
    } else {
      o[k++] = p[i++];
    }
  }
  o[k] = 0;
  *m = k;
  return o;
}

/* real split patterns are under 1 KiB; the rewrites below grow each \p{..} by up to ~1 KiB of ranges, so a cap on
 * the source keeps a hostile tokenizer.json from asking for gigabytes (PCRE2 would refuse the result anyway: its
 * compiled patterns stop at 64 KiB) */
#define TOK_RE_MAX (64 * 1024)

static pcre2_code *compile_re(const char *pat0, size_t n0, struct hearth_err *err) {
  if (n0 > TOK_RE_MAX) {
    err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: split regex of %zu bytes, over the limit of %d", n0, TOK_RE_MAX);
    return NULL;
  }
  int ec;
  PCRE2_SIZE eo;
  size_t n, n1;
  char *pat1 = tok_gc_rewrite(pat0, n0, &n1); /* \p{L} etc. as Unicode 16.0 has them */
  char *pat = pat1 ? ws_rewrite(pat1, n1, &n) : NULL;
  free(pat1);
  if (!pat) {
    err_set(err, HEARTH_ERR_NOMEM, "out of memory");
    return NULL;
  }
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, n, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
  free(pat);
  if (!re) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(ec, msg, sizeof msg);
    err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: split regex not accepted by PCRE2 at %zu: %s",
            (size_t)eo, (const char *)msg);
    return NULL;
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* on failure the interpreter is used */
  return re;
}

/* ---- normalizer --------------------------------------------------------------------------- */

/* Real tokenizers use one Sequence level and a handful of steps; the caps keep a hostile file
 * from building a pipeline whose every step runs on every tokenization. */
enum { NORM_MAX_DEPTH = 4, NORM_MAX_STEPS = 32 };

static int add_norm(struct tok *t, const struct tj *n, int depth, struct hearth_err *err) {
  if (!n || n->type == TJ_NULL) return 0;
  if (n->type != TJ_OBJ) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: normalizer is not an object");
  const char *ty = type_of(n);
  if (!strcmp(ty, "Sequence")) {
    if (depth >= NORM_MAX_DEPTH)
      return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: normalizer Sequences nested more than %d deep", NORM_MAX_DEPTH);
    const struct tj *l = tj_get(n, "normalizers");
    if (!l || l->type != TJ_ARR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Sequence normalizer without normalizers");
    for (uint32_t i = 0; i < l->n; i++) {
      int rc = add_norm(t, &l->u.kids[i], depth + 1, err);
      if (rc) return rc;
    }
    return 0;
  }
  if (t->n_norm >= NORM_MAX_STEPS)
    return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: normalizer has more than %d steps", NORM_MAX_STEPS);
  struct tok_norm_step s = {0};
  if (!strcmp(ty, "NFC")) s.kind = TN_NFC;
  else if (!strcmp(ty, "NFD")) s.kind = TN_NFD;
  else if (!strcmp(ty, "NFKC")) s.kind = TN_NFKC;
  else if (!strcmp(ty, "NFKD")) s.kind = TN_NFKD;
  else if (!strcmp(ty, "Replace")) {
    const struct tj *str, *re, *c = tj_get(n, "content");
    int rc = get_pattern(n, "Replace normalizer", &str, &re, err);
    if (rc) return rc;
    if (!str || str->type != TJ_STR)
      return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: normalizer Replace with a Regex pattern is not supported");
    if (!c || c->type != TJ_STR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Replace normalizer without content");
    if (str->n == 0) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Replace normalizer with an empty pattern");
    s.kind = TN_REPLACE;
    s.pat = dup_n(str->u.s, str->n), s.patlen = str->n;
    s.rep = dup_n(c->u.s, c->n), s.replen = c->n;
  } else if (!strcmp(ty, "Prepend")) {
    const struct tj *c = tj_get(n, "prepend");
    if (!c || c->type != TJ_STR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Prepend normalizer without prepend");
    s.kind = TN_PREPEND;
    s.rep = dup_n(c->u.s, c->n), s.replen = c->n;
  } else {
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: normalizer type '%s' is not supported", ty);
  }
  struct tok_norm_step *ns = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *ns);
  if (!ns || ((s.kind == TN_REPLACE || s.kind == TN_PREPEND) && (!s.rep || (s.kind == TN_REPLACE && !s.pat)))) {
    if (ns) t->norm = ns;
    free(s.pat), free(s.rep);
    return NOMEM(err);
  }
  t->norm = ns;
  t->norm[t->n_norm++] = s;
  return 0;
}

/* The Replace steps' combined worst-case growth (each replaces patlen bytes by replen). */
static int check_norm_growth(const struct tok *t, struct hearth_err *err) {
  double g = 1;
  for (int i = 0; i < t->n_norm; i++)
    if (t->norm[i].kind == TN_REPLACE && t->norm[i].replen > t->norm[i].patlen)
      g *= (double)t->norm[i].replen / (double)t->norm[i].patlen;
  if (g > TOK_NORM_GROWTH)
    return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: the normalizer's Replace steps can expand text %.3g-fold "
                   "(limit %d)", g, TOK_NORM_GROWTH);
  return 0;
}

/* ---- pre-tokenizer ------------------------------------------------------------------------ */

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int push_pre(struct tok *t, struct tok_pre_step *s, struct hearth_err *err) {
  struct tok_pre_step *ps = realloc(t->pre, (size_t)(t->n_pre + 1) * sizeof *ps);
  if (!ps) {
    if (s->re) pcre2_code_free(s->re);
    free(s->pat);
    return NOMEM(err);
  }
  t->pre = ps;
  t->pre[t->n_pre++] = *s;
  return 0;
}

static int add_pre(struct tok *t, const struct tj *n, struct hearth_err *err) {
  if (!n || n->type == TJ_NULL) return 0;
  if (n->type != TJ_OBJ) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: pre_tokenizer is not an object");
  const char *ty = type_of(n);
  if (t->byte_level)
    return err_set(err, HEARTH_ERR_UNSUPPORTED,
                   "tokenizer.json: pre_tokenizer '%s' after ByteLevel is not supported", ty);
  if (!strcmp(ty, "Sequence")) {
    const struct tj *l = tj_get(n, "pretokenizers");
    if (!l || l->type != TJ_ARR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Sequence pre_tokenizer without pretokenizers");
    for (uint32_t i = 0; i < l->n; i++) {
      int rc = add_pre(t, &l->u.kids[i], err);
      if (rc) return rc;
    }
    return 0;
  }
  struct tok_pre_step s = {0};
  if (!strcmp(ty, "Split")) {
    const struct tj *str, *re, *b = tj_get(n, "behavior");
    int rc = get_pattern(n, "Split pre_tokenizer", &str, &re, err);
    if (rc) return rc;
    if (get_bool(n, "invert", 0))
      return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: Split pre_tokenizer with invert=true is not supported");
    if (tj_is_str(b, "Isolated")) s.behavior = SB_ISOLATED;
    else if (tj_is_str(b, "MergedWithPrevious")) s.behavior = SB_MERGED_PREV;
    else if (tj_is_str(b, "MergedWithNext")) s.behavior = SB_MERGED_NEXT;
    else if (tj_is_str(b, "Removed")) s.behavior = SB_REMOVED;
    else return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: Split behavior '%s' is not supported",
                        b && b->type == TJ_STR ? b->u.s : "(missing)");
    if (str && str->type == TJ_STR) {
      if (str->n == 0) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Split with an empty String pattern");
      if (!(s.pat = dup_n(str->u.s, str->n))) return NOMEM(err);
      s.patlen = str->n;
    } else if (!(s.re = compile_re(re->u.s, re->n, err))) {
      return err->code;
    }
    return push_pre(t, &s, err);
  }
  if (!strcmp(ty, "ByteLevel")) {
    if (get_bool(n, "add_prefix_space", 1))
      return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: ByteLevel pre_tokenizer with add_prefix_space=true is not supported");
    if (get_bool(n, "use_regex", 1)) {
      s.behavior = SB_ISOLATED;
      if (!(s.re = compile_re(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, err))) return err->code;
      int rc = push_pre(t, &s, err);
      if (rc) return rc;
    }
    t->byte_level = 1;
    return 0;
  }
  return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer type '%s' is not supported", ty);
}

/* ---- post-processor ------------------------------------------------------------------------ */

static int add_post(struct tok *t, const struct tj *n, int *seen_template, struct hearth_err *err) {
  if (!n || n->type == TJ_NULL) return 0;
  const char *ty = type_of(n);
  if (!strcmp(ty, "Sequence")) {
    const struct tj *l = tj_get(n, "processors");
    if (!l || l->type != TJ_ARR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Sequence post_processor without processors");
    for (uint32_t i = 0; i < l->n; i++) {
      int rc = add_post(t, &l->u.kids[i], seen_template, err);
      if (rc) return rc;
    }
    return 0;
  }
  if (!strcmp(ty, "ByteLevel")) return 0; /* offsets only */
  if (strcmp(ty, "TemplateProcessing"))
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: post_processor type '%s' is not supported", ty);
  if ((*seen_template)++)
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: more than one TemplateProcessing post_processor");
  const struct tj *single = tj_get(n, "single"), *sp = tj_get(n, "special_tokens");
  if (!single || single->type != TJ_ARR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: TemplateProcessing without single");
  int seen_a = 0;
  for (uint32_t i = 0; i < single->n; i++) {
    const struct tj *it = &single->u.kids[i], *st = tj_get(it, "SpecialToken"), *sq = tj_get(it, "Sequence");
    if (sq) {
      if (!tj_is_str(tj_get(sq, "id"), "A") || seen_a++)
        return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: TemplateProcessing single must hold sequence A once");
      continue;
    }
    const struct tj *name = tj_get(st, "id");
    if (!name || name->type != TJ_STR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: TemplateProcessing item without id");
    const struct tj *ids = tj_get(tj_get(sp, name->u.s), "ids");
    if (!ids || ids->type != TJ_ARR)
      return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: TemplateProcessing special token '%s' has no ids", name->u.s);
    for (uint32_t k = 0; k < ids->n; k++) {
      const struct tj *v = &ids->u.kids[k];
      if (v->type != TJ_NUM || v->u.num < 0 || v->u.num >= t->n_vocab || v->u.num != (int32_t)v->u.num)
        return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: TemplateProcessing id of '%s' out of range", name->u.s);
      int32_t **arr = seen_a ? &t->pp_suffix : &t->pp_prefix;
      int *cnt = seen_a ? &t->n_pp_suffix : &t->n_pp_prefix;
      int32_t *a = realloc(*arr, (size_t)(*cnt + 1) * sizeof *a);
      if (!a) return NOMEM(err);
      a[(*cnt)++] = (int32_t)v->u.num;
      *arr = a;
    }
  }
  if (!seen_a) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: TemplateProcessing single without sequence A");
  return 0;
}

/* ---- decoder ---------------------------------------------------------------------------------- */

struct dec_plan { const struct tj *replace[8]; int n_replace; };

static int add_dec(struct tok *t, const struct tj *n, struct dec_plan *plan, int depth, struct hearth_err *err) {
  const char *ty = type_of(n);
  if (!strcmp(ty, "Sequence") && depth == 0) {
    const struct tj *l = tj_get(n, "decoders");
    if (!l || l->type != TJ_ARR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Sequence decoder without decoders");
    for (uint32_t i = 0; i < l->n; i++) {
      int rc = add_dec(t, &l->u.kids[i], plan, 1, err);
      if (rc) return rc;
    }
    if (t->dec_bytelevel && (plan->n_replace || t->dec_bytefallback))
      return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: ByteLevel decoder combined with other decoders is not supported");
    return 0;
  }
  if (!strcmp(ty, "ByteLevel")) { t->dec_bytelevel = 1; return 0; }
  if (!strcmp(ty, "ByteFallback")) { t->dec_bytefallback = 1; return 0; }
  if (!strcmp(ty, "Fuse")) return 0; /* HF joins decoder output with "" anyway */
  if (!strcmp(ty, "Replace")) {
    const struct tj *str, *re;
    int rc = get_pattern(n, "Replace decoder", &str, &re, err);
    if (rc) return rc;
    if (!str || str->type != TJ_STR || str->n == 0)
      return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: decoder Replace needs a non-empty String pattern");
    const struct tj *c = tj_get(n, "content");
    if (!c || c->type != TJ_STR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: Replace decoder without content");
    if (plan->n_replace == 8) return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: too many Replace decoders");
    plan->replace[plan->n_replace++] = n;
    return 0;
  }
  return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: decoder type '%s' is not supported", ty);
}

/* Replaces every occurrence of pat in s[0..n) by rep into out (a blob). Returns 0, -1 (out of
 * memory) or -2 when the result would pass cap bytes (checked before each append). */
static int replace_into(struct blob *out, const char *s, size_t n, const struct tj *pat, const struct tj *rep,
                        size_t cap, char **res, size_t *rn) {
  size_t start = out->n;
  uint32_t dummy;
  for (size_t i = 0; i < n;) {
    int match = n - i >= pat->n && !memcmp(s + i, pat->u.s, pat->n);
    if (out->n - start + (match ? rep->n : 1) > cap) return -2;
    if (match) {
      if (blob_add(out, rep->u.s, rep->n, &dummy)) return -1;
      i += pat->n;
    } else {
      if (blob_add(out, s + i, 1, &dummy)) return -1;
      i++;
    }
  }
  *res = out->p + start; /* valid until the next blob_add */
  *rn = out->n - start;
  return 0;
}

static int hexv(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int build_decoder(struct tok *t, const struct tj *dec, struct hearth_err *err) {
  struct dec_plan plan = {{0}, 0};
  if (!dec || dec->type == TJ_NULL) t->dec_none = 1;
  else {
    int rc = add_dec(t, dec, &plan, 0, err);
    if (rc) return rc;
  }
  size_t nv = (size_t)t->n_vocab;
  t->doff = calloc(nv, sizeof *t->doff);
  t->dlen = calloc(nv, sizeof *t->dlen);
  t->byte_val = malloc(nv * sizeof *t->byte_val);
  if (!t->doff || !t->dlen || !t->byte_val) return NOMEM(err);
  struct blob out = {0}, tmp[2] = {{0}, {0}};
  int16_t inv[0x144]; /* GPT-2 code point -> byte */
  for (int i = 0; i < 0x144; i++) inv[i] = -1;
  for (int c = 0; c < 256; c++) inv[tok_byte_to_cp((uint8_t)c)] = (int16_t)c;
  for (size_t id = 0; id < nv; id++) {
    t->byte_val[id] = -1;
    if (t->len[id] == UINT32_MAX) continue;
    const char *s = t->blob + t->off[id];
    size_t n = t->len[id];
    if (t->dec_bytefallback && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hexv(s[3]) >= 0 && hexv(s[4]) >= 0)
      t->byte_val[id] = (int16_t)(hexv(s[3]) * 16 + hexv(s[4]));
    uint32_t off;
    if (t->dec_bytelevel) {
      /* unmap the GPT-2 alphabet; a token with a char outside it decodes to its own bytes (HF) */
      char buf[256];
      size_t k = 0;
      int ok = n <= sizeof buf;
      for (size_t i = 0; ok && i < n;) {
        int l = tok_utf8_valid_len((const unsigned char *)s + i, n - i);
        uint32_t cp;
        if (!l) { ok = 0; break; }
        tok_utf8_get((const unsigned char *)s + i, &cp);
        int b = cp < 0x144 ? inv[cp] : -1;
        if (b < 0) { ok = 0; break; }
        buf[k++] = (char)b;
        i += (size_t)l;
      }
      if (blob_add(&out, ok ? buf : s, ok ? k : n, &off)) goto nomem;
      t->doff[id] = off, t->dlen[id] = (uint32_t)(out.n - off);
      continue;
    }
    const char *cur = s;
    size_t cn = n;
    const size_t cap = n * TOK_DEC_GROWTH + TOK_DEC_SLACK; /* n < 2^32 */
    for (int r = 0; r < plan.n_replace; r++) {
      const struct tj *str, *re;
      get_pattern(plan.replace[r], "", &str, &re, NULL);
      struct blob *b = &tmp[r & 1];
      b->n = 0;
      char *res;
      int rr = replace_into(b, cur, cn, str, tj_get(plan.replace[r], "content"), cap, &res, &cn);
      if (rr == -1) goto nomem;
      if (rr == -2) {
        free(tmp[0].p), free(tmp[1].p), free(out.p);
        return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: the Replace decoders expand token %zu (%zu bytes) past "
                       "%zu bytes (limit %d x + %d)", id, n, cap, TOK_DEC_GROWTH, TOK_DEC_SLACK);
      }
      cur = res;
    }
    if (blob_add(&out, cur, cn, &off)) goto nomem;
    t->doff[id] = off, t->dlen[id] = (uint32_t)cn;
  }
  free(tmp[0].p), free(tmp[1].p);
  t->dblob = out.p;
  if (!t->dblob && !(t->dblob = calloc(1, 1))) return NOMEM(err);
  return 0;
nomem:
  free(tmp[0].p), free(tmp[1].p), free(out.p);
  return NOMEM(err);
}

/* ---- model, vocab, added tokens ----------------------------------------------------------------- */

static int get_id(const struct tj *v, int32_t *id) {
  if (!v || v->type != TJ_NUM || v->u.num < 0 || v->u.num > 16777216.0 || v->u.num != (int32_t)v->u.num) return -1;
  *id = (int32_t)v->u.num;
  return 0;
}

static int merge_side(const struct tok *t, const char *s, size_t n, int32_t *id, struct hearth_err *err) {
  *id = tok_strmap_get(&t->vocab, s, n);
  if (*id < 0)
    return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: merge token '%.*s' is not in the vocabulary",
                   (int)(n > 64 ? 64 : n), s);
  return 0;
}

static int build_model(struct tok *t, const struct tj *root, struct hearth_err *err) {
  const struct tj *m = tj_get(root, "model");
  if (!m || m->type != TJ_OBJ) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: no model");
  const char *ty = type_of(m);
  const struct tj *merges = tj_get(m, "merges"), *vocab = tj_get(m, "vocab");
  if (strcmp(ty, "BPE") && !(tj_get(m, "type") == NULL && merges))
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: model type '%s' is not supported (only BPE)", ty);
  const struct tj *dr = tj_get(m, "dropout");
  if (dr && dr->type != TJ_NULL && !(dr->type == TJ_NUM && dr->u.num == 0))
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: BPE dropout is not supported");
  const char *empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const struct tj *v = tj_get(m, empty_keys[i]);
    if (v && v->type != TJ_NULL && !(v->type == TJ_STR && v->n == 0))
      return err_set(err, HEARTH_ERR_UNSUPPORTED, "tokenizer.json: BPE %s is not supported", empty_keys[i]);
  }
  if (!vocab || vocab->type != TJ_OBJ) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
  if (!merges || merges->type != TJ_ARR) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: model.merges is not an array");
  const struct tj *added = tj_get(root, "added_tokens");
  if (added && added->type != TJ_ARR && added->type != TJ_NULL)
    return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: added_tokens is not an array");
  uint32_t n_added = added && added->type == TJ_ARR ? added->n : 0;

  /* vocabulary size = largest id + 1 */
  int32_t maxid = -1, id = 0;
  for (uint32_t i = 0; i < vocab->n; i++) {
    if (get_id(&vocab->u.kids[i], &id)) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: bad id for vocab entry '%.64s'", vocab->u.kids[i].key);
    if (id > maxid) maxid = id;
  }
  for (uint32_t i = 0; i < n_added; i++) {
    const struct tj *a = &added->u.kids[i], *c = tj_get(a, "content");
    if (get_id(tj_get(a, "id"), &id) || !c || c->type != TJ_STR)
      return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: added_tokens[%u] needs an id and a content", i);
    if (id > maxid) maxid = id;
  }
  t->n_vocab = maxid + 1;
  size_t nv = (size_t)t->n_vocab;
  t->off = malloc((nv ? nv : 1) * sizeof *t->off);
  t->len = malloc((nv ? nv : 1) * sizeof *t->len);
  t->special = calloc(nv ? nv : 1, 1);
  if (!t->off || !t->len || !t->special) return NOMEM(err);
  memset(t->len, 0xFF, nv * sizeof *t->len);
  struct blob b = {0};
  for (uint32_t i = 0; i < vocab->n; i++) {
    const struct tj *k = &vocab->u.kids[i];
    get_id(k, &id);
    if (t->len[id] != UINT32_MAX) { free(b.p); return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: vocab id %d used twice", id); }
    if (blob_add(&b, k->key, k->keylen, &t->off[id])) { free(b.p); return NOMEM(err); }
    t->len[id] = k->keylen;
  }
  if (n_added && !(t->added = calloc(n_added, sizeof *t->added))) { free(b.p); return NOMEM(err); }
  for (uint32_t i = 0; i < n_added; i++) {
    const struct tj *a = &added->u.kids[i], *c = tj_get(a, "content");
    get_id(tj_get(a, "id"), &id);
    if (t->len[id] == UINT32_MAX || t->len[id] != c->n || memcmp(b.p + t->off[id], c->u.s, c->n)) {
      if (blob_add(&b, c->u.s, c->n, &t->off[id])) { free(b.p); return NOMEM(err); }
      t->len[id] = c->n;
    }
    struct tok_added *ad = &t->added[t->n_added++];
    ad->id = id;
    ad->special = (uint8_t)get_bool(a, "special", 0);
    ad->lstrip = (uint8_t)get_bool(a, "lstrip", 0);
    ad->rstrip = (uint8_t)get_bool(a, "rstrip", 0);
    ad->single_word = (uint8_t)get_bool(a, "single_word", 0);
    ad->normalized = (uint8_t)get_bool(a, "normalized", !ad->special);
    if (ad->special) t->special[id] = 1;
  }
  t->blob = b.p ? b.p : calloc(1, 1);
  if (!t->blob) return NOMEM(err);
  if (tok_strmap_init(&t->vocab, nv, t->blob, t->off, t->len)) return NOMEM(err);
  for (size_t i = 0; i < nv; i++)
    if (t->len[i] != UINT32_MAX) tok_strmap_put(&t->vocab, (int32_t)i);
  for (int32_t i = 0; i < t->n_added; i++) {
    const struct tok_added *ad = &t->added[i];
    if (!t->len[ad->id]) continue; /* an empty added token never matches */
    struct tok_trie *tr = ad->normalized ? &t->trie_norm : &t->trie_raw;
    if (tok_trie_add(tr, t->blob + t->off[ad->id], t->len[ad->id], i)) return NOMEM(err);
  }

  /* merges: "a b" strings or [a, b] pairs; a, b and a+b must be tokens (HF refuses otherwise) */
  if (tok_pairmap_init(&t->merges, merges->n)) return NOMEM(err);
  char *cat = NULL;
  size_t catcap = 0;
  for (uint32_t r = 0; r < merges->n; r++) {
    const struct tj *e = &merges->u.kids[r];
    const char *as, *bs;
    size_t an, bn;
    if (e->type == TJ_STR) {
      const char *sp = memchr(e->u.s, ' ', e->n);
      if (!sp || memchr(sp + 1, ' ', e->n - (size_t)(sp + 1 - e->u.s))) {
        free(cat);
        return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: merge %u is not two space-separated tokens", r);
      }
      as = e->u.s, an = (size_t)(sp - e->u.s), bs = sp + 1, bn = e->n - an - 1;
    } else if (e->type == TJ_ARR && e->n == 2 && e->u.kids[0].type == TJ_STR && e->u.kids[1].type == TJ_STR) {
      as = e->u.kids[0].u.s, an = e->u.kids[0].n, bs = e->u.kids[1].u.s, bn = e->u.kids[1].n;
    } else {
      free(cat);
      return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: merge %u is malformed", r);
    }
    int32_t ia, ib, ic;
    if (an + bn > catcap) {
      catcap = (an + bn) * 2 + 64;
      char *c2 = realloc(cat, catcap);
      if (!c2) { free(cat); return NOMEM(err); }
      cat = c2;
    }
    memcpy(cat, as, an);
    memcpy(cat + an, bs, bn);
    if (merge_side(t, as, an, &ia, err) || merge_side(t, bs, bn, &ib, err) || merge_side(t, cat, an + bn, &ic, err)) {
      free(cat);
      return err->code;
    }
    tok_pairmap_put(&t->merges, ia, ib, r, ic);
  }
  free(cat);

  t->byte_fallback = get_bool(m, "byte_fallback", 0);
  t->fuse_unk = get_bool(m, "fuse_unk", 0);
  t->ignore_merges = get_bool(m, "ignore_merges", 0);
  t->unk_id = -1;
  const struct tj *unk = tj_get(m, "unk_token");
  if (unk && unk->type == TJ_STR) {
    t->unk_id = tok_strmap_get(&t->vocab, unk->u.s, unk->n);
    if (t->unk_id < 0) return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: unk_token '%.64s' is not in the vocabulary", unk->u.s);
  } else if (unk && unk->type != TJ_NULL) {
    return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: model.unk_token is not a string");
  }
  for (int c = 0; c < 256; c++) {
    char buf[8];
    snprintf(buf, sizeof buf, "<0x%02X>", c);
    t->bf_id[c] = tok_strmap_get(&t->vocab, buf, 6);
  }
  return 0;
}

static int build_char_tables(struct tok *t, struct hearth_err *err) {
  for (int c = 0; c < 256; c++) {
    char buf[4];
    int l = tok_utf8_put(buf, tok_byte_to_cp((uint8_t)c));
    t->byte_id[c] = tok_strmap_get(&t->vocab, buf, (size_t)l);
  }
  /* Without its byte symbols (and no unk_token to stand in) a tokenizer turns text into no
   * tokens at all, silently: refuse it here, naming the first missing symbol. */
  for (int c = 0; c < 256 && t->unk_id < 0; c++) {
    if (t->byte_level && t->byte_id[c] < 0)
      return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: byte-level BPE vocabulary lacks the symbol for byte 0x%02X "
                     "(U+%04X) and there is no unk_token: text with that byte would vanish", c,
                     (unsigned)tok_byte_to_cp((uint8_t)c));
    if (!t->byte_level && t->byte_fallback && t->bf_id[c] < 0)
      return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: byte_fallback is set but the vocabulary lacks <0x%02X> and "
                     "there is no unk_token: text with that byte would vanish", c);
  }
  if (t->byte_level) return 0;
  t->char_id = malloc(0x10000 * sizeof *t->char_id);
  if (!t->char_id) return NOMEM(err);
  for (uint32_t c = 0; c < 0x10000; c++) {
    char buf[4];
    if (c >= 0xD800 && c <= 0xDFFF) { t->char_id[c] = -1; continue; }
    int l = tok_utf8_put(buf, c);
    t->char_id[c] = tok_strmap_get(&t->vocab, buf, (size_t)l);
  }
  return 0;
}

/* ---- tokenizer_config.json ------------------------------------------------------------------- */

static int32_t config_token(const struct tok *t, const struct tj *v) {
  if (v && v->type == TJ_OBJ) v = tj_get(v, "content");
  if (!v || v->type != TJ_STR) return -1;
  return tok_strmap_get(&t->vocab, v->u.s, v->n);
}

static int apply_config(struct tok *t, const char *cfg, size_t n, struct hearth_err *err) {
  struct tj_doc *doc;
  const struct tj *root;
  int rc = tj_parse(cfg, n, &doc, &root, err);
  if (rc) return err_prefix(err, "tokenizer_config.json");
  if (root->type != TJ_OBJ) {
    tj_free(doc);
    return err_set(err, HEARTH_ERR_FORMAT, "tokenizer_config.json: not an object");
  }
  t->bos_id = config_token(t, tj_get(root, "bos_token"));
  t->eos_id = config_token(t, tj_get(root, "eos_token"));
  t->add_bos = get_bool(root, "add_bos_token", 0);
  t->add_eos = get_bool(root, "add_eos_token", 0);
  tj_free(doc);
  return 0;
}

/* ---- entry points ------------------------------------------------------------------------------- */

int tok_load_mem(const char *json, size_t len, const char *config, size_t config_len, struct tok **out,
                 struct hearth_err *err) {
  *out = NULL;
  struct tok *t = calloc(1, sizeof *t);
  if (!t) return NOMEM(err);
  t->bos_id = t->eos_id = t->unk_id = -1;
  struct tj_doc *doc = NULL;
  const struct tj *root;
  int rc = tj_parse(json, len, &doc, &root, err);
  if (rc) { err_prefix(err, "tokenizer.json"); goto fail; }
  if (root->type != TJ_OBJ) { rc = err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: not an object"); goto fail; }
  const struct tj *trunc = tj_get(root, "truncation"), *pad = tj_get(root, "padding");
  (void)trunc, (void)pad; /* batch-level options: hearth never truncates or pads */
  int seen_template = 0;
  if ((rc = build_model(t, root, err)) || (rc = add_norm(t, tj_get(root, "normalizer"), 0, err)) || (rc = check_norm_growth(t, err)) ||
      (rc = add_pre(t, tj_get(root, "pre_tokenizer"), err)) ||
      (rc = add_post(t, tj_get(root, "post_processor"), &seen_template, err)) ||
      (rc = build_decoder(t, tj_get(root, "decoder"), err)) || (rc = build_char_tables(t, err)))
    goto fail;
  tj_free(doc);
  doc = NULL;
  if (config && (rc = apply_config(t, config, config_len, err))) goto fail;
  *out = t;
  return 0;
fail:
  tj_free(doc);
  tok_free(t);
  return rc;
}

int tok_load(const char *json_path, const char *config_path, struct tok **out, struct hearth_err *err) {
  char *j = NULL, *c = NULL;
  size_t jn = 0, cn = 0;
  *out = NULL;
  int rc = file_read_all(json_path, FILE_CAP_TOKENIZER_JSON, &j, &jn, err);
  if (!rc && config_path) rc = file_read_all(config_path, FILE_CAP_JSON, &c, &cn, err);
  if (!rc) {
    rc = tok_load_mem(j, jn, c, cn, out, err);
    if (rc) err_prefix(err, "%s", json_path);
  }
  free(j), free(c);
  return rc;
}

int tok_load_dir(const char *dir, struct tok **out, struct hearth_err *err) {
  char a[4096], b[4096];
  if ((size_t)snprintf(a, sizeof a, "%s/tokenizer.json", dir) >= sizeof a ||
      (size_t)snprintf(b, sizeof b, "%s/tokenizer_config.json", dir) >= sizeof b)
    return err_set(err, HEARTH_ERR_ARG, "tokenizer: path too long");
  return tok_load(a, file_exists(b) ? b : NULL, out, err);
}

void tok_free(struct tok *t) {
  if (!t) return;
  free(t->blob), free(t->off), free(t->len), free(t->special);
  tok_strmap_free(&t->vocab);
  free(t->added);
  tok_trie_free(&t->trie_raw), tok_trie_free(&t->trie_norm);
  for (int i = 0; i < t->n_norm; i++) free(t->norm[i].pat), free(t->norm[i].rep);
  free(t->norm);
  for (int i = 0; i < t->n_pre; i++) {
    if (t->pre[i].re) pcre2_code_free(t->pre[i].re);
    free(t->pre[i].pat);
  }
  free(t->pre);
  tok_pairmap_free(&t->merges);
  free(t->char_id);
  free(t->pp_prefix), free(t->pp_suffix);
  free(t->dblob), free(t->doff), free(t->dlen), free(t->byte_val);
  free(t);
}

int tok_check_model_vocab(const struct tok *t, int n_model_rows, struct hearth_err *err) {
  if (t->n_vocab <= n_model_rows) return 0;
  int32_t first = n_model_rows; /* the first id past the model's rows that names a token */
  while (first < t->n_vocab && t->len[first] == UINT32_MAX) first++;
  if (first >= t->n_vocab) return 0;
  size_t l = t->len[first];
  return err_set(err, HEARTH_ERR_FORMAT, "tokenizer.json: token id %d ('%.*s') is past the model's %d embedding rows "
                 "(config.json vocab_size); the tokenizer does not belong to this model",
                 first, (int)(l > 40 ? 40 : l), t->blob + t->off[first], n_model_rows);
}

/* ---- accessors ---------------------------------------------------------------------------------- */

int tok_vocab_size(const struct tok *t) { return t->n_vocab; }

const char *tok_token_text(const struct tok *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_vocab || t->len[id] == UINT32_MAX) return NULL;
  if (len) *len = t->len[id];
  return t->blob + t->off[id];
}

int32_t tok_find_token(const struct tok *t, const char *s, size_t len) { return tok_strmap_get(&t->vocab, s, len); }
int tok_is_special(const struct tok *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->special[id]; }
int32_t tok_bos_id(const struct tok *t) { return t->bos_id; }
int32_t tok_eos_id(const struct tok *t) { return t->eos_id; }
int tok_add_bos(const struct tok *t) { return t->add_bos; }
int tok_add_eos(const struct tok *t) { return t->add_eos; }
