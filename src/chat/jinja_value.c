/* chat/jinja_value.c — the values a Jinja template computes with, and how they print.
 *
 * Owns: the render arena, growable strings, lists/dicts/tuples (dicts keep insertion order as
 * Python's do), truthiness and equality with Python semantics, and the three ways a value turns
 * into text: str() (what {{ x }} prints: None, True, ['a', 1]), repr(), and json.dumps() with the
 * arguments transformers' tojson filter passes. Not here: operators and filters (jinja_eval.c,
 * jinja_builtins.c).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "chat/jinja.h"

/* ---- arena ------------------------------------------------------------------------------ */

struct jarena_chunk { struct jarena_chunk *next; size_t size, used; _Alignas(16) char data[]; };

void jarena_fail(struct jarena *a, const char *fmt, ...) {
  if (!a->fail) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->fail_msg, 512, fmt, ap);
  va_end(ap);
  longjmp(*a->fail, 1);
}

void jarena_charge(struct jarena *a, size_t n) {
  if (!a->max_work) return;
  a->work += n;
  if (a->work > a->max_work)
    jarena_fail(a, "template evaluation exceeded its work budget (%zu bytes touched)", a->max_work);
}

void *jarena_alloc(struct jarena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  jarena_charge(a, 2 * n); /* zeroing, and the page faults of fresh memory */
  if (a->cap && (a->used + n > a->cap || n > a->cap)) {
    if (a->fail) {
      snprintf(a->fail_msg, 512, "template evaluation exceeded its memory limit (%zu bytes)", a->cap);
      longjmp(*a->fail, 1);
    }
    return NULL;
  }
  struct jarena_chunk *c = a->head;
  if (!c || c->size - c->used < n) {
    size_t sz = n > 65536 - sizeof *c ? n : 65536 - sizeof *c;
    c = malloc(sizeof *c + sz);
    if (!c) {
      if (a->fail) {
        snprintf(a->fail_msg, 512, "out of memory during template evaluation");
        longjmp(*a->fail, 1);
      }
      return NULL;
    }
    c->size = sz;
    c->used = 0;
    /* keep a partly used head chunk in front when the new one is a one-off big block */
    if (a->head && n > 32768) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = c->data + c->used;
  c->used += n;
  a->used += n;
  memset(p, 0, n);
  return p;
}

void jarena_free(struct jarena *a) {
  struct jarena_chunk *c = a->head;
  while (c) {
    struct jarena_chunk *n = c->next;
    free(c);
    c = n;
  }
  a->head = NULL;
  a->used = 0;
}

/* ---- buffers ----------------------------------------------------------------------------- */

void jbuf_put(struct jbuf *b, const char *s, size_t n) {
  if (n == 0) return;
  jarena_charge(b->a, n + 16); /* a call costs about as much as copying 16 bytes */
  if (b->limit && b->n + n > b->limit) {
    if (b->a->fail) {
      snprintf(b->a->fail_msg, 512, "template output exceeded its limit (%zu bytes)", b->limit);
      longjmp(*b->a->fail, 1);
    }
    return;
  }
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + n) cap *= 2;
    char *p = jarena_alloc(b->a, cap);
    if (!p) return;
    if (b->n) memcpy(p, b->p, b->n);
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}
void jbuf_puts(struct jbuf *b, const char *s) { jbuf_put(b, s, strlen(s)); }
void jbuf_putc(struct jbuf *b, char c) { jbuf_put(b, &c, 1); }
struct jv jbuf_value(struct jbuf *b) { return jv_strn(b->p ? b->p : "", b->n); }

/* ---- constructors ------------------------------------------------------------------------ */

struct jv jv_str_copy(struct jarena *a, const char *p, size_t n) {
  char *d = jarena_alloc(a, n + 1);
  if (n) memcpy(d, p, n);
  return jv_strn(d, n);
}

struct jv jv_list_new(struct jarena *a, size_t cap) {
  struct jv v = {0};
  v.kind = JV_LIST;
  v.u.l = jarena_alloc(a, sizeof *v.u.l);
  if (cap) {
    v.u.l->v = jarena_alloc(a, cap * sizeof(struct jv));
    v.u.l->cap = cap;
  }
  return v;
}

void jv_list_push(struct jarena *a, struct jv list, struct jv item) {
  struct jlist *l = list.u.l;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    struct jv *nv = jarena_alloc(a, cap * sizeof *nv);
    if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = item;
}

struct jv jv_dict_new(struct jarena *a, size_t cap) {
  struct jv v = {0};
  v.kind = JV_DICT;
  v.u.d = jarena_alloc(a, sizeof *v.u.d);
  if (cap) {
    v.u.d->e = jarena_alloc(a, cap * sizeof(struct jdict_entry));
    v.u.d->cap = cap;
  }
  return v;
}

struct jv *jv_dict_get(struct jarena *a, struct jv dict, struct jv key) {
  struct jdict *d = dict.u.d;
  for (size_t i = 0; i < d->n; i++)
    if (jv_equal(a, d->e[i].k, key)) return &d->e[i].v;
  return NULL;
}

struct jv *jv_dict_gets(struct jarena *a, struct jv dict, const char *key, size_t n) {
  struct jdict *d = dict.u.d;
  jarena_charge(a, d->n * sizeof(struct jdict_entry));
  for (size_t i = 0; i < d->n; i++)
    if (d->e[i].k.kind == JV_STR && d->e[i].k.u.s.n == n && !memcmp(d->e[i].k.u.s.p, key, n))
      return &d->e[i].v;
  return NULL;
}

void jv_dict_set(struct jarena *a, struct jv dict, struct jv key, struct jv val) {
  struct jv *slot = jv_dict_get(a, dict, key);
  if (slot) {
    *slot = val;
    return;
  }
  struct jdict *d = dict.u.d;
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 4;
    struct jdict_entry *ne = jarena_alloc(a, cap * sizeof *ne);
    if (d->n) memcpy(ne, d->e, d->n * sizeof *ne);
    d->e = ne;
    d->cap = cap;
  }
  d->e[d->n].k = key;
  d->e[d->n].v = val;
  d->n++;
}

/* ---- semantics ------------------------------------------------------------------------------ */

int jv_truthy(struct jv v) {
  switch (v.kind) {
  case JV_UNDEF: case JV_NONE: return 0;
  case JV_BOOL: return v.u.b;
  case JV_INT: return v.u.i != 0;
  case JV_FLOAT: return v.u.f != 0.0;
  case JV_STR: return v.u.s.n != 0;
  case JV_LIST: return v.u.l->n != 0;
  case JV_DICT: return v.u.d->n != 0;
  default: return 1;
  }
}

static int is_num(struct jv v) { return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT; }
static double num_f(struct jv v) {
  return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b;
}

static int equal_rec(struct jarena *ar, struct jv a, struct jv b, int depth) {
  if (depth > JINJA_VALUE_DEPTH) {
    jarena_fail(ar, "values nested deeper than %d levels cannot be compared", JINJA_VALUE_DEPTH);
    return 0;
  }
  jarena_charge(ar, 2 * sizeof(struct jv)); /* a node visited costs about 64 bytes of memcmp */
  if (is_num(a) && is_num(b)) {
    if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
      int64_t x = a.kind == JV_INT ? a.u.i : a.u.b, y = b.kind == JV_INT ? b.u.i : b.u.b;
      return x == y;
    }
    return num_f(a) == num_f(b);
  }
  if (a.kind != b.kind) return 0;
  switch (a.kind) {
  case JV_UNDEF: case JV_NONE: return 1;
  case JV_STR:
    if (a.u.s.n != b.u.s.n) return 0;
    jarena_charge(ar, a.u.s.n);
    return !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
  case JV_LIST:
    if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return 0;
    for (size_t i = 0; i < a.u.l->n; i++)
      if (!equal_rec(ar, a.u.l->v[i], b.u.l->v[i], depth + 1)) return 0;
    return 1;
  case JV_DICT:
    if (a.u.d->n != b.u.d->n) return 0;
    for (size_t i = 0; i < a.u.d->n; i++) {
      struct jv *o = NULL;
      for (size_t j = 0; j < b.u.d->n && !o; j++)
        if (equal_rec(ar, b.u.d->e[j].k, a.u.d->e[i].k, depth + 1)) o = &b.u.d->e[j].v;
      if (!o || !equal_rec(ar, a.u.d->e[i].v, *o, depth + 1)) return 0;
    }
    return 1;
  case JV_NS: return a.u.d == b.u.d;
  case JV_FUNC: return a.u.fn == b.u.fn;
  case JV_LOOP: return a.u.loop == b.u.loop;
  default: return 0;
  }
}

int jv_equal(struct jarena *a, struct jv x, struct jv y) { return equal_rec(a, x, y, 0); }

const char *jv_type_name(struct jv v) {
  switch (v.kind) {
  case JV_UNDEF: return "Undefined";
  case JV_NONE: return "NoneType";
  case JV_BOOL: return "bool";
  case JV_INT: return "int";
  case JV_FLOAT: return "float";
  case JV_STR: return "str";
  case JV_LIST: return v.u.l->tuple ? "tuple" : "list";
  case JV_DICT: return "dict";
  case JV_NS: return "Namespace";
  case JV_FUNC: return "function";
  case JV_LOOP: return "LoopContext";
  }
  return "object";
}

size_t utf8_len(const char *p, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (((unsigned char)p[i] & 0xC0) != 0x80) k++;
  return k;
}

/* ---- printing ------------------------------------------------------------------------------ */

void jv_float_repr(char *buf, size_t cap, double f) {
  if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
  if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
  if (f == 0) { snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0"); return; }
  /* shortest digits that round-trip, then Python's layout: exponent form when exp < -4 or >= 16 */
  char tmp[64];
  int prec;
  for (prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
    if (strtod(tmp, NULL) == f) break;
  }
  /* tmp = [-]d.ddde[+-]XX */
  char digits[32];
  int nd = 0, neg = 0;
  const char *p = tmp;
  if (*p == '-') { neg = 1; p++; }
  for (; *p && *p != 'e'; p++)
    if (*p >= '0' && *p <= '9') digits[nd++] = *p;
  int exp = atoi(p + 1);
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;
  char *o = buf;
  size_t left = cap;
#define EMIT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
  if (neg) EMIT("-");
  if (exp < -4 || exp >= 16) {
    EMIT("%c", digits[0]);
    if (nd > 1) EMIT(".%s", digits + 1);
    EMIT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  } else if (exp < 0) {
    EMIT("0.");
    for (int i = 0; i < -exp - 1; i++) EMIT("0");
    EMIT("%s", digits);
  } else {
    for (int i = 0; i <= exp; i++) EMIT("%c", i < nd ? digits[i] : '0');
    EMIT(".");
    if (nd > exp + 1) EMIT("%s", digits + exp + 1);
    else EMIT("0");
  }
#undef EMIT
}

static void put_num(struct jbuf *out, struct jv v) {
  char tmp[64];
  if (v.kind == JV_INT) snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
  else jv_float_repr(tmp, sizeof tmp, v.u.f);
  jbuf_puts(out, tmp);
}

static unsigned utf8_decode(const unsigned char *p, size_t n, size_t *len) {
  unsigned c = p[0];
  if (c < 0x80 || n < 2) { *len = 1; return c; }
  if ((c & 0xE0) == 0xC0) { *len = 2; return ((c & 0x1F) << 6) | (p[1] & 0x3F); }
  if ((c & 0xF0) == 0xE0 && n >= 3) {
    *len = 3; return ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  if (n >= 4) {
    *len = 4;
    return ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
  *len = 1;
  return c;
}

/* Python repr of a str: quote choice and escapes as CPython's unicode_repr (printable non-ASCII kept). */
static void repr_str(struct jbuf *out, struct jstr s) {
  int has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  jbuf_putc(out, q);
  for (size_t i = 0; i < s.n;) {
    unsigned char c = (unsigned char)s.p[i];
    char tmp[16];
    if (c == (unsigned char)q || c == '\\') { jbuf_putc(out, '\\'); jbuf_putc(out, (char)c); i++; }
    else if (c == '\n') { jbuf_puts(out, "\\n"); i++; }
    else if (c == '\r') { jbuf_puts(out, "\\r"); i++; }
    else if (c == '\t') { jbuf_puts(out, "\\t"); i++; }
    else if (c < 0x20 || c == 0x7f) { snprintf(tmp, sizeof tmp, "\\x%02x", c); jbuf_puts(out, tmp); i++; }
    else if (c < 0x80) { jbuf_putc(out, (char)c); i++; }
    else {
      size_t len;
      unsigned cp = utf8_decode((const unsigned char *)s.p + i, s.n - i, &len);
      /* escaped where Python's str.isprintable() is false: the categories Other (Cc, Cf, Cs, Co,
       * Cn: unassigned) and Separator (Zs, Zl, Zp; the ASCII space is handled above) */
      const utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
      if (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CS ||
          cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZS ||
          cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP) {
        if (cp <= 0xFF) snprintf(tmp, sizeof tmp, "\\x%02x", cp);
        else if (cp <= 0xFFFF) snprintf(tmp, sizeof tmp, "\\u%04x", cp);
        else snprintf(tmp, sizeof tmp, "\\U%08x", cp);
        jbuf_puts(out, tmp);
      } else {
        jbuf_put(out, s.p + i, len);
      }
      i += len;
    }
  }
  jbuf_putc(out, q);
}

static void repr_rec(struct jbuf *out, struct jv v, int depth) {
  if (depth > JINJA_VALUE_DEPTH) { /* returns only without a fail target (never during a render) */
    jarena_fail(out->a, "a value nested deeper than %d levels cannot be printed (does a namespace contain itself?)",
                JINJA_VALUE_DEPTH);
    return;
  }
  switch (v.kind) {
  case JV_UNDEF: jbuf_puts(out, "Undefined"); return;
  case JV_NONE: jbuf_puts(out, "None"); return;
  case JV_BOOL: jbuf_puts(out, v.u.b ? "True" : "False"); return;
  case JV_INT: case JV_FLOAT: put_num(out, v); return;
  case JV_STR: repr_str(out, v.u.s); return;
  case JV_LIST: {
    jbuf_putc(out, v.u.l->tuple ? '(' : '[');
    for (size_t i = 0; i < v.u.l->n; i++) {
      if (i) jbuf_puts(out, ", ");
      repr_rec(out, v.u.l->v[i], depth + 1);
    }
    if (v.u.l->tuple && v.u.l->n == 1) jbuf_putc(out, ',');
    jbuf_putc(out, v.u.l->tuple ? ')' : ']');
    return;
  }
  case JV_DICT: case JV_NS: {
    if (v.kind == JV_NS) jbuf_puts(out, "<Namespace ");
    jbuf_putc(out, '{');
    for (size_t i = 0; i < v.u.d->n; i++) {
      if (i) jbuf_puts(out, ", ");
      repr_rec(out, v.u.d->e[i].k, depth + 1);
      jbuf_puts(out, ": ");
      repr_rec(out, v.u.d->e[i].v, depth + 1);
    }
    jbuf_putc(out, '}');
    if (v.kind == JV_NS) jbuf_putc(out, '>');
    return;
  }
  case JV_FUNC: jbuf_puts(out, "<function>"); return;
  case JV_LOOP: jbuf_puts(out, "<LoopContext>"); return;
  }
}

void jv_repr(struct jbuf *out, struct jv v) { repr_rec(out, v, 0); }

void jv_print(struct jbuf *out, struct jv v) {
  if (v.kind == JV_UNDEF) return;
  if (v.kind == JV_STR) { jbuf_put(out, v.u.s.p, v.u.s.n); return; }
  jv_repr(out, v);
}

/* ---- json.dumps ------------------------------------------------------------------------------ */

static void json_str(struct jbuf *out, struct jstr s, int ensure_ascii) {
  jbuf_putc(out, '"');
  for (size_t i = 0; i < s.n;) {
    unsigned char c = (unsigned char)s.p[i];
    char tmp[16];
    switch (c) {
    case '"': jbuf_puts(out, "\\\""); i++; continue;
    case '\\': jbuf_puts(out, "\\\\"); i++; continue;
    case '\n': jbuf_puts(out, "\\n"); i++; continue;
    case '\r': jbuf_puts(out, "\\r"); i++; continue;
    case '\t': jbuf_puts(out, "\\t"); i++; continue;
    case '\b': jbuf_puts(out, "\\b"); i++; continue;
    case '\f': jbuf_puts(out, "\\f"); i++; continue;
    default: break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      snprintf(tmp, sizeof tmp, "\\u%04x", c);
      jbuf_puts(out, tmp);
      i++;
    } else if (c < 0x80 || !ensure_ascii) {
      jbuf_putc(out, (char)c);
      i++;
    } else {
      size_t len;
      unsigned cp = utf8_decode((const unsigned char *)s.p + i, s.n - i, &len);
      if (cp >= 0x10000) {
        unsigned x = cp - 0x10000;
        snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (x >> 10), 0xDC00 + (x & 0x3FF));
      } else {
        snprintf(tmp, sizeof tmp, "\\u%04x", cp);
      }
      jbuf_puts(out, tmp);
      i += len;
    }
  }
  jbuf_putc(out, '"');
}

static void json_indent(struct jbuf *out, int indent, int level) {
  jbuf_putc(out, '\n');
  for (int i = 0; i < indent * level; i++) jbuf_putc(out, ' ');
}

static int key_cmp(const void *x, const void *y) {
  const struct jdict_entry *a = x, *b = y;
  if (a->k.kind == JV_STR && b->k.kind == JV_STR) {
    size_t n = a->k.u.s.n < b->k.u.s.n ? a->k.u.s.n : b->k.u.s.n;
    int c = memcmp(a->k.u.s.p, b->k.u.s.p, n);
    if (c) return c;
    return a->k.u.s.n < b->k.u.s.n ? -1 : a->k.u.s.n > b->k.u.s.n;
  }
  return 0;
}

static int tojson_rec(struct jbuf *out, struct jv v, int ea, int indent, const char *isep,
                      const char *ksep, int sort, int level, struct jv *bad) {
  if (level > JINJA_VALUE_DEPTH) {
    jarena_fail(out->a, "a value nested deeper than %d levels cannot be serialized (does a namespace contain itself?)",
                JINJA_VALUE_DEPTH);
    *bad = v;
    return -1;
  }
  switch (v.kind) {
  case JV_NONE: jbuf_puts(out, "null"); return 0;
  case JV_BOOL: jbuf_puts(out, v.u.b ? "true" : "false"); return 0;
  case JV_INT: put_num(out, v); return 0;
  case JV_FLOAT:
    if (isnan(v.u.f)) jbuf_puts(out, "NaN");
    else if (isinf(v.u.f)) jbuf_puts(out, v.u.f < 0 ? "-Infinity" : "Infinity");
    else put_num(out, v);
    return 0;
  case JV_STR: json_str(out, v.u.s, ea); return 0;
  case JV_LIST:
    if (!v.u.l->n) { jbuf_puts(out, "[]"); return 0; }
    jbuf_putc(out, '[');
    for (size_t i = 0; i < v.u.l->n; i++) {
      if (i) jbuf_puts(out, isep);
      if (indent >= 0) json_indent(out, indent, level + 1);
      if (tojson_rec(out, v.u.l->v[i], ea, indent, isep, ksep, sort, level + 1, bad)) return -1;
    }
    if (indent >= 0) json_indent(out, indent, level);
    jbuf_putc(out, ']');
    return 0;
  case JV_DICT: {
    if (!v.u.d->n) { jbuf_puts(out, "{}"); return 0; }
    struct jdict_entry *e = v.u.d->e;
    struct jdict_entry *sorted = NULL;
    if (sort) {
      sorted = jarena_alloc(out->a, v.u.d->n * sizeof *sorted);
      memcpy(sorted, e, v.u.d->n * sizeof *sorted);
      qsort(sorted, v.u.d->n, sizeof *sorted, key_cmp);
      e = sorted;
    }
    jbuf_putc(out, '{');
    for (size_t i = 0; i < v.u.d->n; i++) {
      if (i) jbuf_puts(out, isep);
      if (indent >= 0) json_indent(out, indent, level + 1);
      struct jv k = e[i].k;
      char tmp[64];
      /* json.dumps converts non-string keys the Python way */
      if (k.kind == JV_STR) json_str(out, k.u.s, ea);
      else if (k.kind == JV_INT || k.kind == JV_FLOAT) {
        if (k.kind == JV_INT) snprintf(tmp, sizeof tmp, "\"%lld\"", (long long)k.u.i);
        else { char f[48]; jv_float_repr(f, sizeof f, k.u.f); snprintf(tmp, sizeof tmp, "\"%s\"", f); }
        jbuf_puts(out, tmp);
      } else if (k.kind == JV_BOOL) jbuf_puts(out, k.u.b ? "\"true\"" : "\"false\"");
      else if (k.kind == JV_NONE) jbuf_puts(out, "\"null\"");
      else { *bad = k; return -1; }
      jbuf_puts(out, ksep);
      if (tojson_rec(out, e[i].v, ea, indent, isep, ksep, sort, level + 1, bad)) return -1;
    }
    if (indent >= 0) json_indent(out, indent, level);
    jbuf_putc(out, '}');
    return 0;
  }
  default: *bad = v; return -1;
  }
}

int jv_tojson(struct jbuf *out, struct jv v, int ensure_ascii, int indent, const char *item_sep,
              const char *key_sep, int sort_keys, struct jv *bad) {
  if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
  if (!key_sep) key_sep = ": ";
  return tojson_rec(out, v, ensure_ascii, indent, item_sep, key_sep, sort_keys, 0, bad);
}

/* ---- JSON input ------------------------------------------------------------------------------ */

static struct jv from_json_rec(struct jarena *a, json_t *j, int depth) {
  if (!j) return jv_none();
  if (depth > JINJA_VALUE_DEPTH) {
    jarena_fail(a, "template variables nested deeper than %d levels", JINJA_VALUE_DEPTH);
    return jv_none();
  }
  switch (json_typeof(j)) {
  case JSON_NULL: return jv_none();
  case JSON_TRUE: return jv_bool(1);
  case JSON_FALSE: return jv_bool(0);
  case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
  case JSON_REAL: return jv_float(json_real_value(j));
  case JSON_STRING: return jv_strn(json_string_value(j), json_string_length(j));
  case JSON_ARRAY: {
    size_t n = json_array_size(j);
    struct jv l = jv_list_new(a, n);
    for (size_t i = 0; i < n; i++) l.u.l->v[i] = from_json_rec(a, json_array_get(j, i), depth + 1);
    l.u.l->n = n;
    return l;
  }
  case JSON_OBJECT: {
    struct jv d = jv_dict_new(a, json_object_size(j));
    const char *k;
    json_t *val;
    json_object_foreach(j, k, val) {
      /* keys are unique in a jansson object: append without the lookup */
      struct jdict *dd = d.u.d;
      dd->e[dd->n].k = jv_strn(k, strlen(k));
      dd->e[dd->n].v = from_json_rec(a, val, depth + 1);
      dd->n++;
    }
    return d;
  }
  }
  return jv_none();
}

struct jv jv_from_json(struct jarena *a, json_t *j) { return from_json_rec(a, j, 0); }
