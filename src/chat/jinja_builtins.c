/* chat/jinja_builtins.c — jinja2's filters and tests, and the Python methods templates call.
 *
 * Owns the name tables (parse time rejects anything not listed here, as jinja2 rejects unknown
 * filters at compile time) and their behaviour: tojson as transformers overrides it
 * (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)), jinja2's
 * own filters (trim, dictsort, map, selectattr, indent, ...), attribute lookup as the sandbox
 * does it (Python attribute first — dict.get/items/keys/values, str methods, loop.* — then item),
 * and the str/dict methods (startswith, split, strip, replace, get, items, ...).
 * Case mapping uses utf8proc's simple mappings (Python's full mappings differ for a handful of
 * characters such as 'ß'.upper()).
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/jinja.h"

struct jv jinja_iterable_list(struct jctx *c, int line, struct jv v);
int jinja_order(struct jctx *c, int line, struct jv a, struct jv b);
int jinja_contains(struct jctx *c, int line, struct jv container, struct jv item);

enum {
  F_TOJSON, F_TRIM, F_UPPER, F_LOWER, F_TITLE, F_CAPITALIZE, F_LENGTH, F_JOIN, F_DEFAULT, F_ITEMS,
  F_DICTSORT, F_FIRST, F_LAST, F_MAP, F_SELECT, F_REJECT, F_SELECTATTR, F_REJECTATTR, F_REPLACE,
  F_STRING, F_INT, F_FLOAT, F_LIST, F_UNIQUE, F_INDENT, F_SAFE, F_ESCAPE, F_ABS, F_ROUND, F_SORT,
  F_REVERSE, F_SUM, F_MIN, F_MAX, F_WORDCOUNT, F_ATTR, F_CENTER, F_BATCH, F_TRUNCATE
};
static const struct { const char *name; int id; } FILTERS[] = {
  {"tojson", F_TOJSON}, {"trim", F_TRIM}, {"upper", F_UPPER}, {"lower", F_LOWER}, {"title", F_TITLE},
  {"capitalize", F_CAPITALIZE}, {"length", F_LENGTH}, {"count", F_LENGTH}, {"join", F_JOIN},
  {"default", F_DEFAULT}, {"d", F_DEFAULT}, {"items", F_ITEMS}, {"dictsort", F_DICTSORT},
  {"first", F_FIRST}, {"last", F_LAST}, {"map", F_MAP}, {"select", F_SELECT}, {"reject", F_REJECT},
  {"selectattr", F_SELECTATTR}, {"rejectattr", F_REJECTATTR}, {"replace", F_REPLACE},
  {"string", F_STRING}, {"int", F_INT}, {"float", F_FLOAT}, {"list", F_LIST}, {"unique", F_UNIQUE},
  {"indent", F_INDENT}, {"safe", F_SAFE}, {"escape", F_ESCAPE}, {"e", F_ESCAPE}, {"forceescape", F_ESCAPE},
  {"abs", F_ABS}, {"round", F_ROUND}, {"sort", F_SORT}, {"reverse", F_REVERSE}, {"sum", F_SUM},
  {"min", F_MIN}, {"max", F_MAX}, {"wordcount", F_WORDCOUNT}, {"attr", F_ATTR}, {"center", F_CENTER},
  {"batch", F_BATCH}, {"truncate", F_TRUNCATE},
};

enum {
  T_DEFINED, T_UNDEFINED, T_NONE, T_STRING, T_NUMBER, T_INTEGER, T_FLOAT, T_MAPPING, T_ITERABLE,
  T_SEQUENCE, T_BOOLEAN, T_TRUE, T_FALSE, T_CALLABLE, T_ODD, T_EVEN, T_DIVISIBLEBY, T_EQ, T_NE, T_LT,
  T_LE, T_GT, T_GE, T_IN, T_SAMEAS, T_LOWER, T_UPPER, T_ESCAPED
};
static const struct { const char *name; int id; } TESTS[] = {
  {"defined", T_DEFINED}, {"undefined", T_UNDEFINED}, {"none", T_NONE}, {"string", T_STRING},
  {"number", T_NUMBER}, {"integer", T_INTEGER}, {"float", T_FLOAT}, {"mapping", T_MAPPING},
  {"iterable", T_ITERABLE}, {"sequence", T_SEQUENCE}, {"boolean", T_BOOLEAN}, {"true", T_TRUE},
  {"false", T_FALSE}, {"callable", T_CALLABLE}, {"odd", T_ODD}, {"even", T_EVEN},
  {"divisibleby", T_DIVISIBLEBY}, {"eq", T_EQ}, {"equalto", T_EQ}, {"ne", T_NE}, {"lt", T_LT},
  {"lessthan", T_LT}, {"le", T_LE}, {"gt", T_GT}, {"greaterthan", T_GT}, {"ge", T_GE}, {"in", T_IN},
  {"sameas", T_SAMEAS}, {"lower", T_LOWER}, {"upper", T_UPPER}, {"escaped", T_ESCAPED},
};

int jinja_filter_id(const char *name, size_t n) {
  for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
    if (strlen(FILTERS[i].name) == n && !memcmp(FILTERS[i].name, name, n)) return FILTERS[i].id;
  return -1;
}
int jinja_test_id(const char *name, size_t n) {
  for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++)
    if (strlen(TESTS[i].name) == n && !memcmp(TESTS[i].name, name, n)) return TESTS[i].id;
  return -1;
}
static int test_id_of(struct jv v) { return v.kind == JV_STR ? jinja_test_id(v.u.s.p, v.u.s.n) : -1; }
static int filter_id_of(struct jv v) { return v.kind == JV_STR ? jinja_filter_id(v.u.s.p, v.u.s.n) : -1; }

/* ---- helpers ---------------------------------------------------------------------------------------- */

struct args {
  struct jv *pos;
  int np;
  struct jstr *kwn;
  struct jv *kwv;
  int nkw;
};

/* positional index i or keyword `name`; NULL when absent */
static struct jv *arg(struct args *a, int i, const char *name) {
  if (i >= 0 && i < a->np) return &a->pos[i];
  for (int k = 0; k < a->nkw; k++)
    if (a->kwn[k].n == strlen(name) && !memcmp(a->kwn[k].p, name, a->kwn[k].n)) return &a->kwv[k];
  return NULL;
}

static int64_t intval(struct jctx *c, int line, struct jv *v, int64_t dflt) {
  if (!v) return dflt;
  if (v->kind == JV_INT) return v->u.i;
  if (v->kind == JV_BOOL) return v->u.b;
  jctx_fail(c, line, "expected an integer argument, got '%s'", jv_type_name(*v));
}

static int py_isspace(unsigned cp) {
  return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

static unsigned dec(const char *p, size_t n, size_t *len) {
  utf8proc_int32_t cp;
  utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &cp);
  if (k <= 0) { *len = 1; return (unsigned char)p[0]; }
  *len = (size_t)k;
  return (unsigned)cp;
}
/* length of the code point ending at p[n-1] */
static size_t last_cp(const char *p, size_t n) {
  size_t k = 1;
  while (k < n && k < 4 && ((unsigned char)p[n - k] & 0xC0) == 0x80) k++;
  return k;
}

static int in_chars(unsigned cp, struct jstr chars) {
  for (size_t i = 0; i < chars.n;) {
    size_t l;
    if (dec(chars.p + i, chars.n - i, &l) == cp) return 1;
    i += l;
  }
  return 0;
}

/* strip: which 1 = left, 2 = right, 3 = both; chars NULL = whitespace. Charges its worst case
 * (every code point decoded and looked up in chars) before it starts. */
static struct jv strip(struct jarena *a, struct jstr s, int which, const struct jstr *chars) {
  jarena_charge(a, s.n * JWORK_DECODE * (chars && chars->n ? chars->n : 1));
  size_t b = 0, e = s.n;
  if (which & 1)
    while (b < e) {
      size_t l;
      unsigned cp = dec(s.p + b, e - b, &l);
      if (chars ? !in_chars(cp, *chars) : !py_isspace(cp)) break;
      b += l;
    }
  if (which & 2)
    while (e > b) {
      size_t l = last_cp(s.p + b, e - b), l2;
      unsigned cp = dec(s.p + e - l, l, &l2);
      if (chars ? !in_chars(cp, *chars) : !py_isspace(cp)) break;
      e -= l;
    }
  return jv_strn(s.p + b, e - b);
}

static struct jbuf buf(struct jctx *c) {
  struct jbuf b = {.a = jctx_arena(c), .limit = 0};
  return b;
}

static void put_cp(struct jbuf *b, unsigned cp) {
  utf8proc_uint8_t tmp[4];
  utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, tmp);
  jbuf_put(b, (const char *)tmp, (size_t)k);
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };
static struct jv recase(struct jctx *c, struct jstr s, int mode) {
  jarena_charge(jctx_arena(c), s.n * JWORK_DECODE);
  struct jbuf b = buf(c);
  int word_start = 1, first = 1;
  for (size_t i = 0; i < s.n;) {
    size_t l;
    unsigned cp = dec(s.p + i, s.n - i, &l);
    unsigned o;
    if (mode == CASE_UPPER) o = (unsigned)utf8proc_toupper((utf8proc_int32_t)cp);
    else if (mode == CASE_LOWER) o = (unsigned)utf8proc_tolower((utf8proc_int32_t)cp);
    else if (mode == CASE_CAPITALIZE)
      o = (unsigned)(first ? utf8proc_totitle((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp));
    else { /* jinja2 do_title: words start after whitespace, '-', '(', '{', '[', '<' */
      o = (unsigned)(word_start ? utf8proc_totitle((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp));
      word_start = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    }
    first = 0;
    put_cp(&b, o);
    i += l;
  }
  return jbuf_value(&b);
}

static struct jv replace(struct jctx *c, struct jstr s, struct jstr old, struct jstr new, int64_t count) {
  struct jbuf b = buf(c);
  if (old.n == 0) { /* Python inserts `new` between every code point */
    int64_t done = 0;
    for (size_t i = 0; i <= s.n;) {
      if (count < 0 || done < count) { jbuf_put(&b, new.p, new.n); done++; }
      if (i == s.n) break;
      size_t l = 1;
      while (i + l < s.n && ((unsigned char)s.p[i + l] & 0xC0) == 0x80) l++;
      jbuf_put(&b, s.p + i, l);
      i += l;
    }
    return jbuf_value(&b);
  }
  size_t i = 0;
  int64_t done = 0;
  while (i < s.n) {
    const char *hit = (count < 0 || done < count) ? memmem(s.p + i, s.n - i, old.p, old.n) : NULL;
    if (!hit) { jbuf_put(&b, s.p + i, s.n - i); break; }
    jbuf_put(&b, s.p + i, (size_t)(hit - (s.p + i)));
    jbuf_put(&b, new.p, new.n);
    i = (size_t)(hit - s.p) + old.n;
    done++;
  }
  return jbuf_value(&b);
}

static struct jv split(struct jctx *c, int line, struct jstr s, struct jv *sep, int64_t maxsplit, int right) {
  struct jarena *a = jctx_arena(c);
  struct jv l = jv_list_new(a, 0);
  if (!sep || sep->kind == JV_NONE) {
    /* runs of whitespace, no empty strings */
    jarena_charge(a, s.n * JWORK_DECODE * 2);
    struct jv parts = jv_list_new(a, 0);
    size_t i = 0;
    while (i < s.n) {
      size_t len;
      while (i < s.n && py_isspace(dec(s.p + i, s.n - i, &len))) i += len;
      if (i >= s.n) break;
      size_t st = i;
      while (i < s.n && !py_isspace(dec(s.p + i, s.n - i, &len))) i += len;
      jv_list_push(a, parts, jv_strn(s.p + st, i - st));
    }
    if (maxsplit < 0 || (int64_t)parts.u.l->n <= maxsplit + 1) return parts;
    /* rare: maxsplit with whitespace; rebuild by scanning (left only) */
    size_t nparts = 0;
    i = 0;
    while (i < s.n) {
      size_t len;
      while (i < s.n && py_isspace(dec(s.p + i, s.n - i, &len))) i += len;
      if (i >= s.n) break;
      if ((int64_t)nparts == maxsplit) { jv_list_push(a, l, strip(a, jv_strn(s.p + i, s.n - i).u.s, 2, NULL)); break; }
      size_t st = i;
      while (i < s.n && !py_isspace(dec(s.p + i, s.n - i, &len))) i += len;
      jv_list_push(a, l, jv_strn(s.p + st, i - st));
      nparts++;
    }
    (void)right;
    return l;
  }
  if (sep->kind != JV_STR) jctx_fail(c, line, "must be str or None, not %s", jv_type_name(*sep));
  struct jstr d = sep->u.s;
  if (d.n == 0) jctx_fail(c, line, "empty separator");
  if (!right) {
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
      const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(s.p + i, s.n - i, d.p, d.n) : NULL;
      if (!hit) { jv_list_push(a, l, jv_strn(s.p + i, s.n - i)); break; }
      jv_list_push(a, l, jv_strn(s.p + i, (size_t)(hit - (s.p + i))));
      i = (size_t)(hit - s.p) + d.n;
      done++;
    }
    return l;
  }
  /* rsplit: collect from the right, then reverse */
  jarena_charge(a, s.n * (d.n + 8)); /* a memcmp call at every position */
  struct jv rev = jv_list_new(a, 0);
  size_t e = s.n;
  int64_t done = 0;
  for (;;) {
    const char *hit = NULL;
    if (maxsplit < 0 || done < maxsplit)
      for (size_t k = e >= d.n ? e - d.n + 1 : 0; k-- > 0;)
        if (!memcmp(s.p + k, d.p, d.n)) { hit = s.p + k; break; }
    if (!hit) { jv_list_push(a, rev, jv_strn(s.p, e)); break; }
    size_t hp = (size_t)(hit - s.p);
    jv_list_push(a, rev, jv_strn(s.p + hp + d.n, e - hp - d.n));
    e = hp;
    done++;
  }
  for (size_t k = rev.u.l->n; k-- > 0;) jv_list_push(a, l, rev.u.l->v[k]);
  return l;
}

static struct jv mktuple2(struct jctx *c, struct jv a, struct jv b) {
  struct jv t = jv_list_new(jctx_arena(c), 2);
  t.u.l->tuple = 1;
  t.u.l->v[0] = a;
  t.u.l->v[1] = b;
  t.u.l->n = 2;
  return t;
}

static struct jv len_of(struct jctx *c, int line, struct jv v) {
  switch (v.kind) {
  case JV_UNDEF: return jv_int(0);
  case JV_STR: jarena_charge(jctx_arena(c), JWORK_WALK * v.u.s.n); return jv_int((int64_t)utf8_len(v.u.s.p, v.u.s.n));
  case JV_LIST: return jv_int((int64_t)v.u.l->n);
  case JV_DICT: return jv_int((int64_t)v.u.d->n);
  case JV_LOOP: return jv_int(v.u.loop->length);
  default: jctx_fail(c, line, "object of type '%s' has no len()", jv_type_name(v));
  }
}

/* attribute path "a.b.0" as jinja2's make_attrgetter does */
static struct jv attr_path(struct jctx *c, int line, struct jv v, struct jv attr) {
  if (attr.kind == JV_INT) {
    struct jv d = v;
    if (d.kind == JV_LIST && attr.u.i >= 0 && (size_t)attr.u.i < d.u.l->n) return d.u.l->v[attr.u.i];
    return jv_undef();
  }
  if (attr.kind != JV_STR) jctx_fail(c, line, "attribute name must be a string");
  size_t i = 0;
  struct jstr s = attr.u.s;
  while (i <= s.n) {
    size_t j = i;
    while (j < s.n && s.p[j] != '.') j++;
    struct jstr part = {s.p + i, j - i};
    int isnum = part.n > 0;
    for (size_t k = 0; k < part.n; k++) isnum &= part.p[k] >= '0' && part.p[k] <= '9';
    if (isnum && v.kind == JV_LIST) {
      long idx = strtol(part.p, NULL, 10);
      v = idx >= 0 && (size_t)idx < v.u.l->n ? v.u.l->v[idx] : jv_undef();
    } else {
      /* environment.getitem: item first, then attribute */
      struct jv *d = v.kind == JV_DICT ? jv_dict_gets(jctx_arena(c), v, part.p, part.n) : NULL;
      v = d ? *d : jinja_getattr(c, line, v, part);
    }
    i = j + 1;
  }
  return v;
}

static int sort_key_cmp(struct jctx *c, int line, struct jv a, struct jv b, int case_sensitive) {
  if (!case_sensitive && a.kind == JV_STR && b.kind == JV_STR) {
    struct jv la = recase(c, a.u.s, CASE_LOWER), lb = recase(c, b.u.s, CASE_LOWER);
    return jinja_order(c, line, la, lb);
  }
  return jinja_order(c, line, a, b);
}

/* stable merge sort of values by key (keys[i] parallel to vals[i]) */
static void msort(struct jctx *c, int line, struct jv *keys, struct jv *vals, size_t n, int cs, int rev,
                  struct jv *tk, struct jv *tv) {
  if (n < 2) return;
  size_t h = n / 2;
  msort(c, line, keys, vals, h, cs, rev, tk, tv);
  msort(c, line, keys + h, vals + h, n - h, cs, rev, tk, tv);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    int r = sort_key_cmp(c, line, keys[j], keys[i], cs);
    int take_right = rev ? r > 0 : r < 0;
    if (take_right) { tk[k] = keys[j]; tv[k++] = vals[j++]; }
    else { tk[k] = keys[i]; tv[k++] = vals[i++]; }
  }
  while (i < h) { tk[k] = keys[i]; tv[k++] = vals[i++]; }
  while (j < n) { tk[k] = keys[j]; tv[k++] = vals[j++]; }
  memcpy(keys, tk, n * sizeof *keys);
  memcpy(vals, tv, n * sizeof *vals);
}

static struct jv sorted(struct jctx *c, int line, struct jv list, struct jv *keys, int cs, int rev) {
  struct jarena *a = jctx_arena(c);
  size_t n = list.u.l->n;
  struct jv out = jv_list_new(a, n);
  if (n == 0) return out;
  memcpy(out.u.l->v, list.u.l->v, n * sizeof(struct jv));
  out.u.l->n = n;
  struct jv *k = jarena_alloc(a, (n + 1) * sizeof *k);
  memcpy(k, keys, n * sizeof *k);
  struct jv *tk = jarena_alloc(a, (n + 1) * sizeof *tk), *tv = jarena_alloc(a, (n + 1) * sizeof *tv);
  msort(c, line, k, out.u.l->v, n, cs, rev, tk, tv);
  return out;
}

static struct jv sub_args_test(struct jctx *c, int line, int id, struct jv v, struct jv *rest, int nrest) {
  return jv_bool(jinja_apply_test(c, line, id, v, rest, nrest));
}

/* ---- filters -------------------------------------------------------------------------------------- */

struct jv jinja_apply_filter(struct jctx *c, int line, int id, struct jv v, struct jv *pos, int np,
                             struct jstr *kwn, struct jv *kwv, int nkw) {
  struct args A = {pos, np, kwn, kwv, nkw};
  struct jarena *a = jctx_arena(c);
  switch (id) {
  case F_TOJSON: {
    struct jv *ea = arg(&A, 0, "ensure_ascii"), *ind = arg(&A, 1, "indent"), *sep = arg(&A, 2, "separators"),
              *sk = arg(&A, 3, "sort_keys");
    int indent = -1;
    if (ind && ind->kind != JV_NONE) {
      if (ind->kind == JV_STR) jctx_fail(c, line, "tojson: string indent is not supported");
      indent = (int)intval(c, line, ind, 0);
      if (indent < 0) indent = 0;
      if (indent > 64) jctx_fail(c, line, "tojson: indent too large");
    }
    char isep_buf[64], ksep_buf[64];
    const char *isep = NULL, *ksep = NULL;
    if (sep && sep->kind != JV_NONE) {
      if (sep->kind != JV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].kind != JV_STR || sep->u.l->v[1].kind != JV_STR)
        jctx_fail(c, line, "tojson: separators must be a pair of strings");
      snprintf(isep_buf, sizeof isep_buf, "%.*s", (int)sep->u.l->v[0].u.s.n, sep->u.l->v[0].u.s.p);
      snprintf(ksep_buf, sizeof ksep_buf, "%.*s", (int)sep->u.l->v[1].u.s.n, sep->u.l->v[1].u.s.p);
      isep = isep_buf;
      ksep = ksep_buf;
    }
    struct jbuf b = buf(c);
    struct jv bad;
    if (jv_tojson(&b, v, ea ? jv_truthy(*ea) : 0, indent, isep, ksep, sk ? jv_truthy(*sk) : 0, &bad)) {
      if (bad.kind == JV_UNDEF) jctx_fail(c, line, "Object of type Undefined is not JSON serializable");
      jctx_fail(c, line, "Object of type %s is not JSON serializable", jv_type_name(bad));
    }
    return jbuf_value(&b);
  }
  case F_TRIM: {
    struct jv *ch = arg(&A, 0, "chars");
    struct jv s = jctx_str(c, v);
    if (ch && ch->kind == JV_STR) return strip(a, s.u.s, 3, &ch->u.s);
    return strip(a, s.u.s, 3, NULL);
  }
  case F_UPPER: return recase(c, jctx_str(c, v).u.s, CASE_UPPER);
  case F_LOWER: return recase(c, jctx_str(c, v).u.s, CASE_LOWER);
  case F_TITLE: return recase(c, jctx_str(c, v).u.s, CASE_TITLE);
  case F_CAPITALIZE: return recase(c, jctx_str(c, v).u.s, CASE_CAPITALIZE);
  case F_LENGTH: return len_of(c, line, v);
  case F_JOIN: {
    struct jv *d = arg(&A, 0, "d"), *at = arg(&A, 1, "attribute");
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv sep = d ? jctx_str(c, *d) : jv_strn("", 0);
    struct jbuf b = buf(c);
    for (size_t i = 0; i < l.u.l->n; i++) {
      if (i) jbuf_put(&b, sep.u.s.p, sep.u.s.n);
      struct jv it = l.u.l->v[i];
      if (at && at->kind != JV_NONE) it = attr_path(c, line, it, *at);
      jv_print(&b, it);
    }
    return jbuf_value(&b);
  }
  case F_DEFAULT: {
    struct jv *dv = arg(&A, 0, "default_value"), *bo = arg(&A, 1, "boolean");
    int boolean = bo ? jv_truthy(*bo) : 0;
    if (v.kind == JV_UNDEF || (boolean && !jv_truthy(v))) return dv ? *dv : jv_strn("", 0);
    return v;
  }
  case F_ITEMS: {
    if (v.kind == JV_UNDEF) return jv_list_new(a, 0);
    if (v.kind != JV_DICT) jctx_fail(c, line, "Can only get item pairs from a mapping.");
    struct jv l = jv_list_new(a, v.u.d->n);
    for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(a, l, mktuple2(c, v.u.d->e[i].k, v.u.d->e[i].v));
    return l;
  }
  case F_DICTSORT: {
    struct jv *cs = arg(&A, 0, "case_sensitive"), *by = arg(&A, 1, "by"), *rv = arg(&A, 2, "reverse");
    if (v.kind != JV_DICT) {
      if (v.kind == JV_UNDEF) jctx_fail(c, line, "dictsort of an undefined value");
      jctx_fail(c, line, "'%s' object has no attribute 'items'", jv_type_name(v));
    }
    int byval = 0;
    if (by && by->kind == JV_STR) {
      if (by->u.s.n == 5 && !memcmp(by->u.s.p, "value", 5)) byval = 1;
      else if (!(by->u.s.n == 3 && !memcmp(by->u.s.p, "key", 3)))
        jctx_fail(c, line, "You can only sort by either \"key\" or \"value\"");
    }
    struct jv items = jv_list_new(a, v.u.d->n);
    struct jv *keys = jarena_alloc(a, (v.u.d->n + 1) * sizeof *keys);
    for (size_t i = 0; i < v.u.d->n; i++) {
      jv_list_push(a, items, mktuple2(c, v.u.d->e[i].k, v.u.d->e[i].v));
      keys[i] = byval ? v.u.d->e[i].v : v.u.d->e[i].k;
    }
    return sorted(c, line, items, keys, cs ? jv_truthy(*cs) : 0, rv ? jv_truthy(*rv) : 0);
  }
  case F_FIRST: case F_LAST: {
    struct jv l = jinja_iterable_list(c, line, v);
    if (!l.u.l->n) { struct jv u = jv_undef(); u.undef_hint = "'first/last of an empty sequence'"; return u; }
    return l.u.l->v[id == F_FIRST ? 0 : l.u.l->n - 1];
  }
  case F_MAP: {
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv out = jv_list_new(a, l.u.l->n);
    struct jv *at = NULL, *dflt = NULL;
    for (int k = 0; k < nkw; k++) {
      if (kwn[k].n == 9 && !memcmp(kwn[k].p, "attribute", 9)) at = &kwv[k];
      else if (kwn[k].n == 7 && !memcmp(kwn[k].p, "default", 7)) dflt = &kwv[k];
    }
    if (at) {
      for (size_t i = 0; i < l.u.l->n; i++) {
        struct jv x = attr_path(c, line, l.u.l->v[i], *at);
        if (x.kind == JV_UNDEF && dflt) x = *dflt;
        jv_list_push(a, out, x);
      }
      return out;
    }
    if (np < 1) jctx_fail(c, line, "map requires a filter argument");
    int fid = filter_id_of(pos[0]);
    if (fid < 0) jctx_fail(c, line, "No filter named '%.*s'.", pos[0].kind == JV_STR ? (int)pos[0].u.s.n : 1,
                           pos[0].kind == JV_STR ? pos[0].u.s.p : "?");
    for (size_t i = 0; i < l.u.l->n; i++)
      jv_list_push(a, out, jinja_apply_filter(c, line, fid, l.u.l->v[i], pos + 1, np - 1, kwn, kwv, nkw));
    return out;
  }
  case F_SELECT: case F_REJECT: case F_SELECTATTR: case F_REJECTATTR: {
    int attr = id == F_SELECTATTR || id == F_REJECTATTR;
    int want = id == F_SELECT || id == F_SELECTATTR;
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv out = jv_list_new(a, 0);
    if (attr && np < 1) jctx_fail(c, line, "Missing parameter for attribute name");
    int off = attr ? 1 : 0;
    int tid = -2;
    if (np > off) {
      tid = test_id_of(pos[off]);
      if (tid < 0) jctx_fail(c, line, "No test named %s.", pos[off].kind == JV_STR ? "given" : "(not a string)");
    }
    for (size_t i = 0; i < l.u.l->n; i++) {
      struct jv x = attr ? attr_path(c, line, l.u.l->v[i], pos[0]) : l.u.l->v[i];
      int r = tid == -2 ? jv_truthy(x) : jv_truthy(sub_args_test(c, line, tid, x, pos + off + 1, np - off - 1));
      if (r == want) jv_list_push(a, out, l.u.l->v[i]);
    }
    return out;
  }
  case F_REPLACE: {
    struct jv *o = arg(&A, 0, "old"), *nw = arg(&A, 1, "new"), *cnt = arg(&A, 2, "count");
    if (!o || !nw) jctx_fail(c, line, "replace needs old and new");
    struct jv s = jctx_str(c, v), os = jctx_str(c, *o), ns = jctx_str(c, *nw);
    jarena_charge(a, s.u.s.n);
    int64_t count = cnt && cnt->kind != JV_NONE ? intval(c, line, cnt, -1) : -1;
    return replace(c, s.u.s, os.u.s, ns.u.s, count);
  }
  case F_STRING: case F_SAFE:
    return id == F_SAFE && v.kind != JV_STR ? v : jctx_str(c, v);
  case F_ESCAPE: {
    struct jv s = jctx_str(c, v);
    struct jbuf b = buf(c);
    for (size_t i = 0; i < s.u.s.n; i++) {
      char ch = s.u.s.p[i];
      if (ch == '&') jbuf_puts(&b, "&amp;");
      else if (ch == '<') jbuf_puts(&b, "&lt;");
      else if (ch == '>') jbuf_puts(&b, "&gt;");
      else if (ch == '"') jbuf_puts(&b, "&#34;");
      else if (ch == '\'') jbuf_puts(&b, "&#39;");
      else jbuf_putc(&b, ch);
    }
    return jbuf_value(&b);
  }
  case F_INT: case F_FLOAT: {
    struct jv *dv = arg(&A, 0, "default");
    struct jv dflt = dv ? *dv : (id == F_INT ? jv_int(0) : jv_float(0.0));
    double f;
    if (v.kind == JV_INT || v.kind == JV_BOOL) f = (double)(v.kind == JV_INT ? v.u.i : v.u.b);
    else if (v.kind == JV_FLOAT) f = v.u.f;
    else if (v.kind == JV_STR) {
      char tmp[128];
      struct jv t = strip(a, v.u.s, 3, NULL);
      if (t.u.s.n == 0 || t.u.s.n >= sizeof tmp) return dflt;
      memcpy(tmp, t.u.s.p, t.u.s.n);
      tmp[t.u.s.n] = 0;
      char *end;
      if (id == F_INT) {
        long long x = strtoll(tmp, &end, 10);
        if (*end == 0) return jv_int(x);
      }
      f = strtod(tmp, &end);
      if (*end != 0) return dflt;
    } else {
      return dflt;
    }
    if (id == F_FLOAT) return jv_float(f);
    if (!isfinite(f) || fabs(f) > 9.2e18) return dflt;
    return jv_int((int64_t)f);
  }
  case F_LIST: {
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv out = jv_list_new(a, l.u.l->n);
    for (size_t i = 0; i < l.u.l->n; i++) jv_list_push(a, out, l.u.l->v[i]);
    return out;
  }
  case F_UNIQUE: {
    struct jv *cs = arg(&A, 0, "case_sensitive"), *at = arg(&A, 1, "attribute");
    int sens = cs ? jv_truthy(*cs) : 0;
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv out = jv_list_new(a, 0), seen = jv_list_new(a, 0);
    for (size_t i = 0; i < l.u.l->n; i++) {
      struct jv k = at && at->kind != JV_NONE ? attr_path(c, line, l.u.l->v[i], *at) : l.u.l->v[i];
      if (!sens && k.kind == JV_STR) k = recase(c, k.u.s, CASE_LOWER);
      if (jinja_contains(c, line, seen, k)) continue;
      jv_list_push(a, seen, k);
      jv_list_push(a, out, l.u.l->v[i]);
    }
    return out;
  }
  case F_INDENT: {
    struct jv *w = arg(&A, 0, "width"), *fi = arg(&A, 1, "first"), *bl = arg(&A, 2, "blank");
    struct jv ind;
    if (w && w->kind == JV_STR) ind = *w;
    else {
      int64_t n = intval(c, line, w, 4);
      if (n < 0) n = 0;
      if (n > 4096) jctx_fail(c, line, "indent width too large");
      char *sp = jarena_alloc(a, (size_t)n + 1);
      memset(sp, ' ', (size_t)n);
      ind = jv_strn(sp, (size_t)n);
    }
    int first = fi ? jv_truthy(*fi) : 0, blank = bl ? jv_truthy(*bl) : 0;
    struct jv s = jctx_str(c, v);
    jarena_charge(a, s.u.s.n);
    /* jinja2: s += "\n"; lines = s.splitlines() */
    struct jv lines = jv_list_new(a, 0);
    size_t st = 0;
    for (size_t i = 0; i < s.u.s.n; i++) {
      if (s.u.s.p[i] == '\n' || s.u.s.p[i] == '\r') {
        jv_list_push(a, lines, jv_strn(s.u.s.p + st, i - st));
        if (s.u.s.p[i] == '\r' && i + 1 < s.u.s.n && s.u.s.p[i + 1] == '\n') i++;
        st = i + 1;
      }
    }
    jv_list_push(a, lines, jv_strn(s.u.s.p + st, s.u.s.n - st)); /* the appended "\n" ends this one */
    struct jbuf b = buf(c);
    if (first) jbuf_put(&b, ind.u.s.p, ind.u.s.n);
    for (size_t i = 0; i < lines.u.l->n; i++) {
      struct jstr ln = lines.u.l->v[i].u.s;
      if (i) {
        jbuf_putc(&b, '\n');
        if (blank || ln.n) jbuf_put(&b, ind.u.s.p, ind.u.s.n);
      }
      jbuf_put(&b, ln.p, ln.n);
    }
    return jbuf_value(&b);
  }
  case F_ABS:
    if (v.kind == JV_INT) return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    if (v.kind == JV_FLOAT) return jv_float(fabs(v.u.f));
    if (v.kind == JV_BOOL) return jv_int(v.u.b);
    jctx_fail(c, line, "bad operand type for abs(): '%s'", jv_type_name(v));
  case F_ROUND: {
    struct jv *pr = arg(&A, 0, "precision"), *me = arg(&A, 1, "method");
    int64_t p = intval(c, line, pr, 0);
    if (v.kind != JV_INT && v.kind != JV_FLOAT && v.kind != JV_BOOL)
      jctx_fail(c, line, "type %s doesn't define __round__", jv_type_name(v));
    double x = v.kind == JV_FLOAT ? v.u.f : (double)(v.kind == JV_INT ? v.u.i : v.u.b);
    double m = pow(10.0, (double)p);
    const char *meth = me && me->kind == JV_STR ? me->u.s.p : "common";
    if (!strncmp(meth, "ceil", 4)) return jv_float(ceil(x * m) / m);
    if (!strncmp(meth, "floor", 5)) return jv_float(floor(x * m) / m);
    /* 'common' is Python's round(value, precision) */
    if (v.kind != JV_FLOAT) { /* an int stays an int: to a multiple of 10^-p, ties to even */
      int64_t i = v.kind == JV_INT ? v.u.i : v.u.b;
      if (p >= 0) return jv_int(i);
      if (p < -18) return jv_int(0);
      int64_t u = 1;
      for (int64_t k = 0; k < -p; k++) u *= 10;
      int64_t q = i / u, rem = i % u;
      if (rem < 0) { q--; rem += u; } /* floor division */
      if (2 * rem > u || (2 * rem == u && (q & 1))) q++; /* rem < u <= 1e18: 2 * rem fits */
      if (q > INT64_MAX / u || q < INT64_MIN / u) jctx_fail(c, line, "integer overflow in round()");
      return jv_int(q * u);
    }
    if (!isfinite(x) || p > 340) return jv_float(x);
    if (p >= 0) { /* the decimal nearest to the exact binary value, ties to even (Python: 2.675 -> 2.67) */
      char buf[400];
      snprintf(buf, sizeof buf, "%.*f", (int)p, x);
      return jv_float(strtod(buf, NULL));
    }
    return jv_float(p < -308 ? 0.0 * x : nearbyint(x * m) / m);
  }
  case F_SORT: {
    struct jv *rv = arg(&A, 0, "reverse"), *cs = arg(&A, 1, "case_sensitive"), *at = arg(&A, 2, "attribute");
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv *keys = jarena_alloc(a, (l.u.l->n + 1) * sizeof *keys);
    for (size_t i = 0; i < l.u.l->n; i++)
      keys[i] = at && at->kind != JV_NONE ? attr_path(c, line, l.u.l->v[i], *at) : l.u.l->v[i];
    return sorted(c, line, l, keys, cs ? jv_truthy(*cs) : 0, rv ? jv_truthy(*rv) : 0);
  }
  case F_REVERSE: {
    if (v.kind == JV_STR) {
      struct jbuf b = buf(c);
      for (size_t e = v.u.s.n; e > 0;) {
        size_t l = last_cp(v.u.s.p, e);
        jbuf_put(&b, v.u.s.p + e - l, l);
        e -= l;
      }
      return jbuf_value(&b);
    }
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv out = jv_list_new(a, l.u.l->n);
    for (size_t i = l.u.l->n; i-- > 0;) jv_list_push(a, out, l.u.l->v[i]);
    return out;
  }
  case F_SUM: {
    struct jv *at = arg(&A, 0, "attribute"), *st = arg(&A, 1, "start");
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv acc = st ? *st : jv_int(0);
    for (size_t i = 0; i < l.u.l->n; i++) {
      struct jv x = at && at->kind != JV_NONE ? attr_path(c, line, l.u.l->v[i], *at) : l.u.l->v[i];
      if (!((acc.kind == JV_INT || acc.kind == JV_FLOAT || acc.kind == JV_BOOL) &&
            (x.kind == JV_INT || x.kind == JV_FLOAT || x.kind == JV_BOOL)))
        jctx_fail(c, line, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(acc), jv_type_name(x));
      if (acc.kind != JV_FLOAT && x.kind != JV_FLOAT) {
        int64_t r;
        if (__builtin_add_overflow(acc.kind == JV_INT ? acc.u.i : acc.u.b, x.kind == JV_INT ? x.u.i : x.u.b, &r))
          jctx_fail(c, line, "integer overflow in sum");
        acc = jv_int(r);
      } else {
        double p = acc.kind == JV_FLOAT ? acc.u.f : (double)(acc.kind == JV_INT ? acc.u.i : acc.u.b);
        double q = x.kind == JV_FLOAT ? x.u.f : (double)(x.kind == JV_INT ? x.u.i : x.u.b);
        acc = jv_float(p + q);
      }
    }
    return acc;
  }
  case F_MIN: case F_MAX: {
    struct jv *cs = arg(&A, 0, "case_sensitive"), *at = arg(&A, 1, "attribute");
    struct jv l = jinja_iterable_list(c, line, v);
    if (!l.u.l->n) { struct jv u = jv_undef(); u.undef_hint = "'No aggregated item, sequence was empty.'"; return u; }
    size_t best = 0;
    for (size_t i = 1; i < l.u.l->n; i++) {
      struct jv x = at ? attr_path(c, line, l.u.l->v[i], *at) : l.u.l->v[i];
      struct jv y = at ? attr_path(c, line, l.u.l->v[best], *at) : l.u.l->v[best];
      int r = sort_key_cmp(c, line, x, y, cs ? jv_truthy(*cs) : 0);
      if (id == F_MIN ? r < 0 : r > 0) best = i;
    }
    return l.u.l->v[best];
  }
  case F_WORDCOUNT: {
    struct jv s = jctx_str(c, v);
    jarena_charge(a, JWORK_WALK * s.u.s.n); /* a byte-by-byte classifying loop */
    int64_t n = 0;
    int in = 0;
    for (size_t i = 0; i < s.u.s.n; i++) {
      unsigned char ch = (unsigned char)s.u.s.p[i];
      int w = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch >= 0x80;
      if (w && !in) n++;
      in = w;
    }
    return jv_int(n);
  }
  case F_ATTR: {
    if (np < 1 || pos[0].kind != JV_STR) jctx_fail(c, line, "attr needs a name");
    return jinja_getattr(c, line, v, pos[0].u.s);
  }
  case F_CENTER: {
    int64_t w = intval(c, line, arg(&A, 0, "width"), 80);
    struct jv s = jctx_str(c, v);
    jarena_charge(a, JWORK_WALK * s.u.s.n);
    int64_t len = (int64_t)utf8_len(s.u.s.p, s.u.s.n);
    if (w > 100000) jctx_fail(c, line, "center width too large");
    if (len >= w) return s;
    int64_t total = w - len, left = total / 2 + (total & w & 1);
    struct jbuf b = buf(c);
    for (int64_t i = 0; i < left; i++) jbuf_putc(&b, ' ');
    jbuf_put(&b, s.u.s.p, s.u.s.n);
    for (int64_t i = 0; i < total - left; i++) jbuf_putc(&b, ' ');
    return jbuf_value(&b);
  }
  case F_BATCH: {
    int64_t n = intval(c, line, arg(&A, 0, "linecount"), 1);
    struct jv *fill = arg(&A, 1, "fill_with");
    if (n <= 0) jctx_fail(c, line, "batch size must be positive");
    struct jv l = jinja_iterable_list(c, line, v);
    struct jv out = jv_list_new(a, 0), cur = jv_list_new(a, 0);
    for (size_t i = 0; i < l.u.l->n; i++) {
      jv_list_push(a, cur, l.u.l->v[i]);
      if ((int64_t)cur.u.l->n == n) { jv_list_push(a, out, cur); cur = jv_list_new(a, 0); }
    }
    if (cur.u.l->n) {
      if (fill && fill->kind != JV_NONE)
        while ((int64_t)cur.u.l->n < n) jv_list_push(a, cur, *fill);
      jv_list_push(a, out, cur);
    }
    return out;
  }
  case F_TRUNCATE: {
    int64_t len = intval(c, line, arg(&A, 0, "length"), 255);
    struct jv *kw = arg(&A, 1, "killwords"), *en = arg(&A, 2, "end"), *lv = arg(&A, 3, "leeway");
    int64_t leeway = intval(c, line, lv, 5);
    struct jv s = jctx_str(c, v);
    struct jv end = en ? jctx_str(c, *en) : jv_strn("...", 3);
    jarena_charge(a, 2 * JWORK_WALK * s.u.s.n);
    int64_t n = (int64_t)utf8_len(s.u.s.p, s.u.s.n), ne = (int64_t)utf8_len(end.u.s.p, end.u.s.n);
    if (n <= len + leeway) return s;
    int64_t keep = len - ne;
    if (keep < 0) keep = 0;
    size_t off = 0;
    for (int64_t k = 0; k < keep && off < s.u.s.n; k++) {
      off++;
      while (off < s.u.s.n && ((unsigned char)s.u.s.p[off] & 0xC0) == 0x80) off++;
    }
    struct jv head = jv_strn(s.u.s.p, off);
    if (!(kw && jv_truthy(*kw))) {
      const char *sp = NULL;
      for (size_t k = off; k-- > 0;)
        if (s.u.s.p[k] == ' ') { sp = s.u.s.p + k; break; }
      if (sp) head = jv_strn(s.u.s.p, (size_t)(sp - s.u.s.p));
    }
    struct jbuf b = buf(c);
    jbuf_put(&b, head.u.s.p, head.u.s.n);
    jbuf_put(&b, end.u.s.p, end.u.s.n);
    return jbuf_value(&b);
  }
  }
  jctx_fail(c, line, "unknown filter");
}

/* ---- tests ----------------------------------------------------------------------------------------- */

int jinja_apply_test(struct jctx *c, int line, int id, struct jv v, struct jv *args, int nargs) {
  struct jv *o = nargs ? &args[0] : NULL;
  switch (id) {
  case T_DEFINED: return v.kind != JV_UNDEF;
  case T_UNDEFINED: return v.kind == JV_UNDEF;
  case T_NONE: return v.kind == JV_NONE;
  case T_STRING: return v.kind == JV_STR;
  case T_NUMBER: return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
  case T_INTEGER: return v.kind == JV_INT;
  case T_FLOAT: return v.kind == JV_FLOAT;
  case T_MAPPING: return v.kind == JV_DICT;
  case T_ITERABLE: return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
  case T_SEQUENCE: return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
  case T_BOOLEAN: return v.kind == JV_BOOL;
  case T_TRUE: return v.kind == JV_BOOL && v.u.b;
  case T_FALSE: return v.kind == JV_BOOL && !v.u.b;
  case T_CALLABLE: return v.kind == JV_FUNC;
  case T_ODD: case T_EVEN: case T_DIVISIBLEBY: {
    if (v.kind != JV_INT && v.kind != JV_BOOL) {
      if (v.kind == JV_UNDEF) jctx_fail(c, line, "value is undefined");
      jctx_fail(c, line, "unsupported operand type(s) for %%: '%s' and 'int'", jv_type_name(v));
    }
    int64_t x = v.kind == JV_INT ? v.u.i : v.u.b;
    if (id == T_ODD) return x % 2 != 0;
    if (id == T_EVEN) return x % 2 == 0;
    int64_t d = intval(c, line, o, 1);
    if (d == 0) jctx_fail(c, line, "integer division or modulo by zero");
    return d == -1 ? 1 : x % d == 0;
  }
  case T_EQ: case T_NE: case T_LT: case T_LE: case T_GT: case T_GE: case T_IN: case T_SAMEAS: {
    if (!o) jctx_fail(c, line, "test needs an argument");
    switch (id) {
    case T_EQ: return jv_equal(jctx_arena(c), v, *o);
    case T_NE: return !jv_equal(jctx_arena(c), v, *o);
    case T_LT: return jinja_order(c, line, v, *o) < 0;
    case T_LE: return jinja_order(c, line, v, *o) <= 0;
    case T_GT: return jinja_order(c, line, v, *o) > 0;
    case T_GE: return jinja_order(c, line, v, *o) >= 0;
    case T_IN: return jinja_contains(c, line, *o, v);
    default:
      /* identity: singletons compare by value, containers by object */
      if (v.kind != o->kind) return 0;
      switch (v.kind) {
      case JV_NONE: case JV_UNDEF: return 1;
      case JV_BOOL: return v.u.b == o->u.b;
      case JV_INT: return v.u.i == o->u.i && v.u.i >= -5 && v.u.i <= 256;
      case JV_STR: return v.u.s.p == o->u.s.p && v.u.s.n == o->u.s.n;
      case JV_LIST: return v.u.l == o->u.l;
      case JV_DICT: case JV_NS: return v.u.d == o->u.d;
      default: return jv_equal(jctx_arena(c), v, *o);
      }
    }
  }
  case T_LOWER: case T_UPPER: {
    if (v.kind != JV_STR) return 0;
    jarena_charge(jctx_arena(c), v.u.s.n * JWORK_DECODE);
    int cased = 0;
    for (size_t i = 0; i < v.u.s.n;) {
      size_t l;
      unsigned cp = dec(v.u.s.p + i, v.u.s.n - i, &l);
      int up = utf8proc_tolower((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp;
      int lo = utf8proc_toupper((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp;
      if (id == T_LOWER && up) return 0;
      if (id == T_UPPER && lo) return 0;
      cased |= up || lo;
      i += l;
    }
    return cased;
  }
  case T_ESCAPED: return 0;
  }
  jctx_fail(c, line, "unknown test");
}

/* ---- attributes and methods ------------------------------------------------------------------------------ */

static int is(struct jstr s, const char *lit) { return s.n == strlen(lit) && !memcmp(s.p, lit, s.n); }

static struct jv method(struct jctx *c, struct jv self, struct jstr name) {
  struct jv f = {0};
  f.kind = JV_FUNC;
  f.u.fn = jarena_alloc(jctx_arena(c), sizeof *f.u.fn);
  f.u.fn->kind = JF_METHOD;
  f.u.fn->self = self;
  f.u.fn->name = name;
  return f;
}

static const char *const STR_METHODS[] = {
  "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "replace", "upper", "lower",
  "title", "capitalize", "find", "rfind", "count", "join", "isdigit", "isalpha", "isspace", "isupper",
  "islower", "splitlines", "index", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", NULL};

struct jv jinja_getattr(struct jctx *c, int line, struct jv obj, struct jstr name) {
  switch (obj.kind) {
  case JV_UNDEF:
    if (obj.undef_hint) jctx_fail(c, line, "%s is undefined (reading attribute '%.*s')", obj.undef_hint, (int)name.n, name.p);
    jctx_fail(c, line, "undefined value has no attribute '%.*s'", (int)name.n, name.p);
  case JV_DICT: {
    for (int i = 0; DICT_METHODS[i]; i++)
      if (is(name, DICT_METHODS[i])) return method(c, obj, name);
    struct jv *v = jv_dict_gets(jctx_arena(c), obj, name.p, name.n);
    if (v) return *v;
    break;
  }
  case JV_NS: {
    struct jv *v = jv_dict_gets(jctx_arena(c), obj, name.p, name.n);
    if (v) return *v;
    break;
  }
  case JV_STR:
    for (int i = 0; STR_METHODS[i]; i++)
      if (is(name, STR_METHODS[i])) return method(c, obj, name);
    break;
  case JV_LOOP: {
    struct jloop *L = obj.u.loop;
    if (is(name, "index")) return jv_int(L->index0 + 1);
    if (is(name, "index0")) return jv_int(L->index0);
    if (is(name, "revindex")) return jv_int(L->length - L->index0);
    if (is(name, "revindex0")) return jv_int(L->length - L->index0 - 1);
    if (is(name, "first")) return jv_bool(L->index0 == 0);
    if (is(name, "last")) return jv_bool(L->index0 == L->length - 1);
    if (is(name, "length")) return jv_int(L->length);
    if (is(name, "depth")) return jv_int(L->depth0 + 1);
    if (is(name, "depth0")) return jv_int(L->depth0);
    if (is(name, "previtem")) {
      if (L->index0 > 0) return L->items.u.l->v[L->index0 - 1];
      struct jv u = jv_undef(); u.undef_hint = "'there is no previous item'"; return u;
    }
    if (is(name, "nextitem")) {
      if (L->index0 + 1 < L->length) return L->items.u.l->v[L->index0 + 1];
      struct jv u = jv_undef(); u.undef_hint = "'there is no next item'"; return u;
    }
    if (is(name, "cycle")) return method(c, obj, name);
    break;
  }
  default: break;
  }
  struct jv u = jv_undef();
  char *hint = jarena_alloc(jctx_arena(c), name.n + 64);
  snprintf(hint, name.n + 64, "'%s object' has no attribute '%.*s'",
           obj.kind == JV_DICT ? "dict" : jv_type_name(obj), (int)name.n, name.p);
  u.undef_hint = hint;
  return u;
}

static struct jstr need_str(struct jctx *c, int line, struct jv *v, const char *what) {
  if (!v || v->kind != JV_STR) jctx_fail(c, line, "%s must be a string", what);
  return v->u.s;
}

static int affix(struct jstr s, struct jstr p, int end) {
  if (p.n > s.n) return 0;
  return !memcmp(end ? s.p + s.n - p.n : s.p, p.p, p.n);
}

struct jv jinja_call_method(struct jctx *c, int line, struct jfunc *fn, struct jv *pos, int np, struct jstr *kwn,
                            struct jv *kwv, int nkw) {
  struct args A = {pos, np, kwn, kwv, nkw};
  struct jv self = fn->self;
  struct jstr m = fn->name;
  struct jarena *a = jctx_arena(c);
  if (self.kind == JV_LOOP) { /* loop.cycle(a, b, ...) */
    if (np == 0) jctx_fail(c, line, "no items for cycling given");
    return pos[self.u.loop->index0 % np];
  }
  if (self.kind == JV_DICT) {
    if (is(m, "get")) {
      struct jv *k = arg(&A, 0, "key"), *d = arg(&A, 1, "default");
      if (!k) jctx_fail(c, line, "get expected at least 1 argument, got 0");
      struct jv *v = jv_dict_get(a, self, *k);
      return v ? *v : d ? *d : jv_none();
    }
    struct jv l = jv_list_new(a, self.u.d->n);
    for (size_t i = 0; i < self.u.d->n; i++) {
      struct jdict_entry *e = &self.u.d->e[i];
      jv_list_push(a, l, is(m, "items") ? mktuple2(c, e->k, e->v) : is(m, "keys") ? e->k : e->v);
    }
    return l;
  }
  /* str methods: each charges the bytes it may scan (startswith/endswith only the affix) */
  struct jstr s = self.u.s;
  if (!is(m, "startswith") && !is(m, "endswith")) jarena_charge(a, JWORK_WALK * s.n); /* a scan, a utf8 count */
  if (is(m, "startswith") || is(m, "endswith")) {
    int end = m.p[0] == 'e';
    struct jv *p = arg(&A, 0, "prefix");
    if (!p) jctx_fail(c, line, "%.*s takes at least 1 argument", (int)m.n, m.p);
    if (p->kind == JV_LIST && p->u.l->tuple) {
      for (size_t i = 0; i < p->u.l->n; i++) {
        struct jstr x = need_str(c, line, &p->u.l->v[i], "prefix");
        jarena_charge(a, x.n + sizeof(struct jv));
        if (affix(s, x, end)) return jv_bool(1);
      }
      return jv_bool(0);
    }
    if (p->kind != JV_STR)
      jctx_fail(c, line, "%.*s first arg must be str or a tuple of str, not %s", (int)m.n, m.p, jv_type_name(*p));
    jarena_charge(a, p->u.s.n);
    return jv_bool(affix(s, p->u.s, end));
  }
  if (is(m, "strip") || is(m, "lstrip") || is(m, "rstrip")) {
    struct jv *ch = arg(&A, 0, "chars");
    int which = m.p[0] == 'l' ? 1 : m.p[0] == 'r' ? 2 : 3;
    if (ch && ch->kind == JV_STR) return strip(a, s, which, &ch->u.s);
    if (ch && ch->kind != JV_NONE) jctx_fail(c, line, "strip arg must be None or str");
    return strip(a, s, which, NULL);
  }
  if (is(m, "split") || is(m, "rsplit")) {
    struct jv *sep = arg(&A, 0, "sep"), *mx = arg(&A, 1, "maxsplit");
    return split(c, line, s, sep, intval(c, line, mx, -1), m.p[0] == 'r');
  }
  if (is(m, "replace")) {
    struct jv *cnt = arg(&A, 2, "count");
    return replace(c, s, need_str(c, line, arg(&A, 0, "old"), "replace() argument 1"),
                   need_str(c, line, arg(&A, 1, "new"), "replace() argument 2"), intval(c, line, cnt, -1));
  }
  if (is(m, "upper")) return recase(c, s, CASE_UPPER);
  if (is(m, "lower")) return recase(c, s, CASE_LOWER);
  if (is(m, "title")) return recase(c, s, CASE_TITLE);
  if (is(m, "capitalize")) return recase(c, s, CASE_CAPITALIZE);
  if (is(m, "find") || is(m, "rfind") || is(m, "index")) {
    struct jstr sub = need_str(c, line, arg(&A, 0, "sub"), "find() argument");
    const char *hit = NULL;
    if (m.p[0] == 'r') {
      jarena_charge(a, s.n * (sub.n + 8)); /* a memcmp call at every position */
      for (size_t k = s.n >= sub.n ? s.n - sub.n + 1 : 0; k-- > 0;)
        if (!memcmp(s.p + k, sub.p, sub.n)) { hit = s.p + k; break; }
    } else {
      hit = sub.n ? memmem(s.p, s.n, sub.p, sub.n) : s.p;
    }
    if (!hit) {
      if (m.p[0] == 'i') jctx_fail(c, line, "substring not found");
      return jv_int(-1);
    }
    return jv_int((int64_t)utf8_len(s.p, (size_t)(hit - s.p)));
  }
  if (is(m, "count")) {
    struct jstr sub = need_str(c, line, arg(&A, 0, "sub"), "count() argument");
    if (!sub.n) return jv_int((int64_t)utf8_len(s.p, s.n) + 1);
    int64_t k = 0;
    for (const char *p = s.p; (p = memmem(p, (size_t)(s.p + s.n - p), sub.p, sub.n)); p += sub.n) k++;
    return jv_int(k);
  }
  if (is(m, "join")) {
    struct jv *it = arg(&A, 0, "iterable");
    if (!it) jctx_fail(c, line, "join() takes exactly one argument");
    struct jv l = jinja_iterable_list(c, line, *it);
    struct jbuf b = buf(c);
    for (size_t i = 0; i < l.u.l->n; i++) {
      if (i) jbuf_put(&b, s.p, s.n);
      if (l.u.l->v[i].kind != JV_STR)
        jctx_fail(c, line, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l.u.l->v[i]));
      jbuf_put(&b, l.u.l->v[i].u.s.p, l.u.l->v[i].u.s.n);
    }
    return jbuf_value(&b);
  }
  if (is(m, "splitlines")) {
    struct jv l = jv_list_new(a, 0);
    size_t st = 0;
    for (size_t i = 0; i < s.n; i++)
      if (s.p[i] == '\n' || s.p[i] == '\r') {
        jv_list_push(a, l, jv_strn(s.p + st, i - st));
        if (s.p[i] == '\r' && i + 1 < s.n && s.p[i + 1] == '\n') i++;
        st = i + 1;
      }
    if (st < s.n) jv_list_push(a, l, jv_strn(s.p + st, s.n - st));
    return l;
  }
  if (is(m, "isdigit") || is(m, "isalpha") || is(m, "isspace")) {
    if (!s.n) return jv_bool(0);
    jarena_charge(a, s.n * JWORK_DECODE);
    for (size_t i = 0; i < s.n;) {
      size_t l;
      unsigned cp = dec(s.p + i, s.n - i, &l);
      const utf8proc_property_t *pr = utf8proc_get_property((utf8proc_int32_t)cp);
      int ok = m.p[2] == 'd' ? pr->category == UTF8PROC_CATEGORY_ND
             : m.p[2] == 'a' ? (pr->category >= UTF8PROC_CATEGORY_LU && pr->category <= UTF8PROC_CATEGORY_LO)
                             : py_isspace(cp);
      if (!ok) return jv_bool(0);
      i += l;
    }
    return jv_bool(1);
  }
  if (is(m, "isupper") || is(m, "islower"))
    return jv_bool(jinja_apply_test(c, line, m.p[2] == 'u' ? T_UPPER : T_LOWER, self, NULL, 0));
  jctx_fail(c, line, "unsupported method '%.*s'", (int)m.n, m.p);
}
