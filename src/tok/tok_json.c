/* tok/tok_json.c — the JSON DOM behind tok_json.h (recursive descent, arena of nodes). */
#include "tok/tok_json.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define TJ_MAX_DEPTH 128

struct tj_chunk { struct tj_chunk *next; size_t used, cap; struct tj nodes[]; };

struct tj_doc {
  char *buf;               /* copy of the text; strings are unescaped in place */
  struct tj_chunk *chunks; /* node arena */
  struct tj root;
};

struct tj_parser {
  struct tj_doc *doc;
  char *p, *end, *base;
  struct tj *stack; /* children being collected, for every open container */
  size_t sn, scap;
  struct hearth_err *err;
};

static int perr(struct tj_parser *ps, const char *what) {
  return err_set(ps->err, HEARTH_ERR_FORMAT, "JSON: %s at byte %zu", what, (size_t)(ps->p - ps->base));
}

static struct tj *arena_alloc(struct tj_doc *d, size_t n) {
  struct tj_chunk *c = d->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    c = malloc(sizeof *c + cap * sizeof(struct tj));
    if (!c) return NULL;
    c->next = d->chunks, c->used = 0, c->cap = cap;
    d->chunks = c;
  }
  struct tj *r = c->nodes + c->used;
  c->used += n;
  return r;
}

static void skip_ws(struct tj_parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(struct tj_parser *ps, const char *q, unsigned *out) {
  if (ps->end - q < 4) return -1;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval((unsigned char)q[i]);
    if (h < 0) return -1;
    v = v * 16 + (unsigned)h;
  }
  *out = v;
  return 0;
}

/* Parses a string starting at the opening quote; unescapes in place. */
static int parse_string(struct tj_parser *ps, const char **s, uint32_t *n) {
  char *r = ++ps->p, *w = r;
  for (;;) {
    if (r >= ps->end) { ps->p = r; return perr(ps, "unterminated string"); }
    unsigned char c = (unsigned char)*r;
    if (c == '"') break;
    if (c < 0x20) { ps->p = r; return perr(ps, "control character in string"); }
    if (c != '\\') { *w++ = *r++; continue; }
    if (r + 1 >= ps->end) { ps->p = r; return perr(ps, "bad escape"); }
    char e = r[1];
    r += 2;
    switch (e) {
    case '"': *w++ = '"'; break;
    case '\\': *w++ = '\\'; break;
    case '/': *w++ = '/'; break;
    case 'b': *w++ = '\b'; break;
    case 'f': *w++ = '\f'; break;
    case 'n': *w++ = '\n'; break;
    case 'r': *w++ = '\r'; break;
    case 't': *w++ = '\t'; break;
    case 'u': {
      unsigned cp;
      if (read_hex4(ps, r, &cp)) { ps->p = r; return perr(ps, "bad \\u escape"); }
      r += 4;
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        unsigned lo;
        if (ps->end - r < 6 || r[0] != '\\' || r[1] != 'u' || read_hex4(ps, r + 2, &lo) || lo < 0xDC00 ||
            lo > 0xDFFF) { ps->p = r; return perr(ps, "lone surrogate in \\u escape"); }
        r += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        ps->p = r; return perr(ps, "lone surrogate in \\u escape");
      }
      /* the escape is >= 6 bytes, the UTF-8 output <= 4: writing in place is safe */
      if (cp < 0x80) *w++ = (char)cp;
      else if (cp < 0x800) { *w++ = (char)(0xC0 | cp >> 6); *w++ = (char)(0x80 | (cp & 0x3F)); }
      else if (cp < 0x10000) {
        *w++ = (char)(0xE0 | cp >> 12); *w++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *w++ = (char)(0x80 | (cp & 0x3F));
      } else {
        *w++ = (char)(0xF0 | cp >> 18); *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *w++ = (char)(0x80 | (cp & 0x3F));
      }
      break;
    }
    default: ps->p = r - 2; return perr(ps, "bad escape");
    }
  }
  *w = 0; /* w <= r, and r points at the closing quote: terminating in place is safe */
  *s = ps->p;
  *n = (uint32_t)(w - ps->p);
  ps->p = r + 1;
  return 0;
}

static int push(struct tj_parser *ps, struct tj *v) {
  if (ps->sn == ps->scap) {
    size_t cap = ps->scap ? ps->scap * 2 : 1024;
    struct tj *s = realloc(ps->stack, cap * sizeof *s);
    if (!s) return err_set(ps->err, HEARTH_ERR_NOMEM, "JSON: out of memory");
    ps->stack = s, ps->scap = cap;
  }
  ps->stack[ps->sn++] = *v;
  return 0;
}

static int parse_value(struct tj_parser *ps, struct tj *v, int depth);

static int parse_container(struct tj_parser *ps, struct tj *v, int depth, int is_obj) {
  if (depth >= TJ_MAX_DEPTH) return perr(ps, "nesting too deep");
  char close = is_obj ? '}' : ']';
  size_t base = ps->sn;
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) { ps->p++; goto done; }
  for (;;) {
    struct tj kid = {0};
    skip_ws(ps);
    if (is_obj) {
      if (ps->p >= ps->end || *ps->p != '"') return perr(ps, "expected a key");
      int rc = parse_string(ps, &kid.key, &kid.keylen);
      if (rc) return rc;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') return perr(ps, "expected ':'");
      ps->p++;
    }
    const char *key = kid.key;
    uint32_t keylen = kid.keylen;
    int rc = parse_value(ps, &kid, depth + 1);
    if (rc) return rc;
    kid.key = key, kid.keylen = keylen;
    if ((rc = push(ps, &kid))) return rc;
    skip_ws(ps);
    if (ps->p >= ps->end) return perr(ps, "unterminated container");
    if (*ps->p == ',') { ps->p++; continue; }
    if (*ps->p == close) { ps->p++; break; }
    return perr(ps, "expected ',' or a closing bracket");
  }
done:
  v->type = is_obj ? TJ_OBJ : TJ_ARR;
  v->n = (uint32_t)(ps->sn - base);
  v->u.kids = NULL;
  if (v->n) {
    v->u.kids = arena_alloc(ps->doc, v->n);
    if (!v->u.kids) return err_set(ps->err, HEARTH_ERR_NOMEM, "JSON: out of memory");
    memcpy(v->u.kids, ps->stack + base, v->n * sizeof(struct tj));
  }
  ps->sn = base;
  return 0;
}

static int parse_number(struct tj_parser *ps, struct tj *v) {
  char *q = ps->p;
  if (q < ps->end && *q == '-') q++;
  if (q >= ps->end || *q < '0' || *q > '9') return perr(ps, "bad value");
  if (*q == '0') q++;
  else while (q < ps->end && *q >= '0' && *q <= '9') q++;
  if (q < ps->end && *q == '.') {
    q++;
    if (q >= ps->end || *q < '0' || *q > '9') return perr(ps, "bad number");
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  if (q < ps->end && (*q == 'e' || *q == 'E')) {
    q++;
    if (q < ps->end && (*q == '+' || *q == '-')) q++;
    if (q >= ps->end || *q < '0' || *q > '9') return perr(ps, "bad number");
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  /* fast path for small integers (ids, ranks) */
  const char *s = ps->p;
  int neg = *s == '-';
  if (neg) s++;
  if (q - s <= 15 && memchr(s, '.', (size_t)(q - s)) == NULL && memchr(s, 'e', (size_t)(q - s)) == NULL &&
      memchr(s, 'E', (size_t)(q - s)) == NULL) {
    double x = 0;
    for (; s < q; s++) x = x * 10 + (*s - '0');
    v->u.num = neg ? -x : x;
  } else {
    char tmp[64];
    size_t l = (size_t)(q - ps->p);
    if (l >= sizeof tmp) l = sizeof tmp - 1;
    memcpy(tmp, ps->p, l);
    tmp[l] = 0;
    v->u.num = strtod(tmp, NULL);
  }
  v->type = TJ_NUM;
  ps->p = q;
  return 0;
}

static int lit(struct tj_parser *ps, const char *w, size_t n) {
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n)) return perr(ps, "bad literal");
  ps->p += n;
  return 0;
}

static int parse_value(struct tj_parser *ps, struct tj *v, int depth) {
  skip_ws(ps);
  if (ps->p >= ps->end) return perr(ps, "unexpected end");
  switch (*ps->p) {
  case '{': return parse_container(ps, v, depth, 1);
  case '[': return parse_container(ps, v, depth, 0);
  case '"': v->type = TJ_STR; return parse_string(ps, &v->u.s, &v->n);
  case 't': v->type = TJ_TRUE; return lit(ps, "true", 4);
  case 'f': v->type = TJ_FALSE; return lit(ps, "false", 5);
  case 'n': v->type = TJ_NULL; return lit(ps, "null", 4);
  default: return parse_number(ps, v);
  }
}

int tj_parse(const char *text, size_t len, struct tj_doc **doc, const struct tj **root,
             struct hearth_err *err) {
  *doc = NULL, *root = NULL;
  struct tj_doc *d = calloc(1, sizeof *d);
  if (!d || !(d->buf = malloc(len + 1))) {
    free(d);
    return err_set(err, HEARTH_ERR_NOMEM, "JSON: out of memory (%zu bytes)", len);
  }
  memcpy(d->buf, text, len);
  d->buf[len] = 0;
  struct tj_parser ps = {.doc = d, .p = d->buf, .end = d->buf + len, .base = d->buf, .err = err};
  int rc = parse_value(&ps, &d->root, 0);
  if (!rc) {
    skip_ws(&ps);
    if (ps.p != ps.end) rc = perr(&ps, "trailing characters");
  }
  free(ps.stack);
  if (rc) { tj_free(d); return rc; }
  *doc = d, *root = &d->root;
  return 0;
}

void tj_free(struct tj_doc *d) {
  if (!d) return;
  for (struct tj_chunk *c = d->chunks, *n; c; c = n) { n = c->next; free(c); }
  free(d->buf);
  free(d);
}

const struct tj *tj_get(const struct tj *o, const char *key) {
  if (!o || o->type != TJ_OBJ) return NULL;
  size_t kl = strlen(key);
  for (uint32_t i = 0; i < o->n; i++)
    if (o->u.kids[i].keylen == kl && !memcmp(o->u.kids[i].key, key, kl)) return &o->u.kids[i];
  return NULL;
}

int tj_is_str(const struct tj *v, const char *s) {
  return v && v->type == TJ_STR && v->n == strlen(s) && !memcmp(v->u.s, s, v->n);
}
