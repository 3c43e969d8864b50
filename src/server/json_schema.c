/* server/json_schema.c — JSON Schema (a subset, json_schema.h) to an output program. */
#include "server/json_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JS_MAX_DEPTH 32
#define JS_MAX_SEG 2048
#define JS_MAX_NAMES 4096
#define JS_MAX_LIT 4096 /* bytes in one literal segment or enum value (jstate.pos is 16 bits) */
#define JS_MAX_BYTES (256 * 1024) /* literal and enum bytes in all */
#define JS_MAX_MSG 200 /* error text, cut at a character boundary (v_fail keeps 255 bytes) */

struct jb {
  struct jseg *seg;
  int n, cap;
  char **names;
  int nn, ncap;
  char *pend; /* the literal being accumulated */
  size_t np, pcap;
  char *msg;
  size_t mcap;
  int failed;
  size_t bytes; /* literal and enum bytes so far */
};

static int fail(struct jb *b, const char *fmt, ...) {
  if (!b->failed && b->msg && b->mcap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, b->mcap, fmt, ap);
    va_end(ap);
    size_t n = strlen(b->msg);
    if (n > JS_MAX_MSG) { /* property names can be long: cut, on a UTF-8 character boundary */
      n = JS_MAX_MSG;
      while (n && ((unsigned char)b->msg[n] & 0xC0) == 0x80) n--;
      b->msg[n] = 0;
    }
  }
  b->failed = 1;
  return -1;
}

static int add_seg(struct jb *b, struct jseg s) {
  if (b->n >= JS_MAX_SEG) return fail(b, "the schema is too large (more than %d parts)", JS_MAX_SEG);
  if (b->n == b->cap) {
    int c = b->cap ? 2 * b->cap : 16;
    struct jseg *t = realloc(b->seg, (size_t)c * sizeof *t);
    if (!t) return fail(b, "out of memory");
    b->seg = t;
    b->cap = c;
  }
  b->seg[b->n++] = s;
  return 0;
}

/* the pending literal becomes a segment (its bytes owned by the builder until jprog_build copies them) */
static int flush(struct jb *b) {
  if (!b->np) return 0;
  char *l = malloc(b->np);
  if (!l) return fail(b, "out of memory");
  memcpy(l, b->pend, b->np);
  struct jseg s = {.kind = JSEG_LIT, .lit = l, .n = b->np};
  b->np = 0;
  if (add_seg(b, s)) { free(l); return -1; }
  return 0;
}

static int lit(struct jb *b, const char *p, size_t n) {
  if ((b->bytes += n) > JS_MAX_BYTES) return fail(b, "the schema is too large (more than %d bytes of text)", JS_MAX_BYTES);
  if (b->np + n > JS_MAX_LIT && flush(b)) return -1;
  if (n > JS_MAX_LIT) return fail(b, "a property name or value is too long");
  if (b->np + n > b->pcap) {
    size_t c = b->pcap ? 2 * b->pcap : 256;
    while (c < b->np + n) c *= 2;
    char *t = realloc(b->pend, c);
    if (!t) return fail(b, "out of memory");
    b->pend = t;
    b->pcap = c;
  }
  memcpy(b->pend + b->np, p, n);
  b->np += n;
  return 0;
}
static int lits(struct jb *b, const char *s) { return lit(b, s, strlen(s)); }

static int value(struct jb *b, int vmask) {
  if (flush(b)) return -1;
  return add_seg(b, (struct jseg){.kind = JSEG_VALUE, .vmask = vmask});
}

/* v written compactly; a real in its shortest form that reads back as the same double */
static char *dump_value(json_t *v) {
  if (json_is_real(v))
    for (int p = 15; p < 17; p++) {
      char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(p));
      json_t *back = s ? json_loads(s, JSON_DECODE_ANY, NULL) : NULL;
      const int same = back && json_is_real(back) && json_real_value(back) == json_real_value(v);
      json_decref(back);
      if (same) return s;
      free(s);
    }
  return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* the JV_ kind of a JSON value */
static int value_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_STRING: return JV_STRING;
  case JSON_INTEGER: return JV_INTEGER | JV_NUMBER;
  case JSON_REAL: return JV_NUMBER;
  case JSON_TRUE: case JSON_FALSE: return JV_BOOL;
  case JSON_NULL: return JV_NULL;
  case JSON_OBJECT: return JV_OBJECT;
  default: return JV_ARRAY;
  }
}

/* the given JSON values, each written compactly, as names[*first .. *first + *count) */
static int add_names(struct jb *b, json_t *const *v, int n, int *first, int *count) {
  if (n < 1 || n > JPROG_MAX_NAMES) return fail(b, "'enum' must have 1 to %d values", JPROG_MAX_NAMES);
  if (b->nn + n > JS_MAX_NAMES) return fail(b, "the schema has too many enum values");
  if (b->nn + n > b->ncap) {
    int c = b->ncap ? 2 * b->ncap : 64;
    while (c < b->nn + n) c *= 2;
    char **t = realloc(b->names, (size_t)c * sizeof *t);
    if (!t) return fail(b, "out of memory");
    b->names = t;
    b->ncap = c;
  }
  const int f0 = b->nn;
  for (int i = 0; i < n; i++) {
    char *s = dump_value(v[i]);
    if (!s) return fail(b, "out of memory");
    const size_t l = strlen(s);
    if (l > JS_MAX_LIT || (b->bytes += l) > JS_MAX_BYTES) {
      free(s);
      return fail(b, "an enum or const value is too long (at most %d bytes, %d in all)", JS_MAX_LIT, JS_MAX_BYTES);
    }
    for (int k = f0; k < b->nn; k++)
      if (!strcmp(b->names[k], s)) { free(s); s = NULL; break; } /* a repeated value */
    if (s) b->names[b->nn++] = s;
  }
  *first = f0;
  *count = b->nn - f0;
  return 0;
}

/* one of the given JSON values */
static int choice(struct jb *b, json_t *const *v, int n) {
  int first, count;
  if (flush(b) || add_names(b, v, n, &first, &count)) return -1;
  return add_seg(b, (struct jseg){.kind = JSEG_CHOICE, .first = first, .count = count});
}

static int type_mask(const char *t);

/* "type": a name or a list of names, as a JV_ mask */
static int type_of(struct jb *b, json_t *s, int *mask, const char *where) {
  json_t *ty = json_object_get(s, "type");
  *mask = 0;
  if (json_is_string(ty)) {
    if (!(*mask = type_mask(json_string_value(ty)))) return fail(b, "%s: unknown type '%s'", where, json_string_value(ty));
    return 0;
  }
  if (!json_is_array(ty) || !json_array_size(ty)) return fail(b, "%s: 'type' must be a type name or a list of them", where);
  size_t i;
  json_t *t;
  json_array_foreach(ty, i, t) {
    const int m = json_is_string(t) ? type_mask(json_string_value(t)) : 0;
    if (!m) return fail(b, "%s: 'type' must list type names", where);
    *mask |= m;
  }
  return 0;
}

static int type_mask(const char *t) {
  if (!strcmp(t, "string")) return JV_STRING;
  if (!strcmp(t, "number")) return JV_NUMBER;
  if (!strcmp(t, "integer")) return JV_INTEGER;
  if (!strcmp(t, "boolean")) return JV_BOOL;
  if (!strcmp(t, "null")) return JV_NULL;
  if (!strcmp(t, "object")) return JV_OBJECT;
  if (!strcmp(t, "array")) return JV_ARRAY;
  return 0;
}

static int node(struct jb *b, json_t *s, int depth, const char *where);

static int type_of(struct jb *b, json_t *s, int *mask, const char *where);

/* an enum/const schema's values (*n = 0 when it has neither), each of the schema's "type" if it
 * has one; or -1 */
static int enum_values(struct jb *b, json_t *s, json_t **v, int *n, const char *where) {
  json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
  *n = 0;
  if (cn) {
    v[0] = cn;
    *n = 1;
  } else if (en) {
    if (!json_is_array(en)) return fail(b, "%s: 'enum' must be an array", where);
    const size_t m = json_array_size(en);
    if (m < 1 || m > JPROG_MAX_NAMES) return fail(b, "%s: 'enum' must have 1 to %d values", where, JPROG_MAX_NAMES);
    for (size_t i = 0; i < m; i++) v[i] = json_array_get(en, i);
    *n = (int)m;
  }
  int mask = JV_ANY | JV_INTEGER;
  if (*n && json_object_get(s, "type") && type_of(b, s, &mask, where)) return -1;
  for (int i = 0; i < *n; i++)
    if (!(value_kind(v[i]) & mask)) return fail(b, "%s: an enum/const value is not of the schema's 'type'", where);
  return 0;
}

/* the keywords the subset refuses (anywhere a schema may appear) */
static const char *refused_keyword(json_t *s) {
  static const char *const refused[] = {"$ref", "anyOf", "oneOf", "allOf", "not", "if", "then", "else",
                                        "prefixItems", "contains", "patternProperties", "dependentSchemas",
                                        "unevaluatedProperties", "unevaluatedItems"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
    if (json_object_get(s, refused[i])) return refused[i];
  return NULL;
}

/* [item, ...]: items a scalar type, an enum or anything; minItems / maxItems followed */
static int array(struct jb *b, json_t *s, const char *where) {
  json_t *it = json_object_get(s, "items"), *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
  if ((mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) || (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0)))
    return fail(b, "%s: 'minItems' and 'maxItems' must be non-negative integers", where);
  const json_int_t lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : 65535;
  if (lo > hi || lo > 65535) return fail(b, "%s: 'minItems' is above 'maxItems' (or 65535)", where);
  struct jseg g = {.kind = JSEG_ARRAY, .vmask = JV_ANY, .imin = (int)lo, .imax = hi > 65535 ? 65535 : (int)hi};
  if (it && !json_is_true(it)) {
    if (!json_is_object(it)) return fail(b, "%s: 'items' must be a schema", where);
    const char *bad = refused_keyword(it);
    static const char *const nested[] = {"properties", "items", "required", "additionalProperties", "minItems", "maxItems"};
    for (size_t i = 0; !bad && i < sizeof nested / sizeof *nested; i++)
      if (json_object_get(it, nested[i])) bad = nested[i];
    if (bad)
      return fail(b, "%s: array items may be a scalar type, an enum or any JSON ('%s' is not supported there)",
                  where, bad);
    json_t *v[JPROG_MAX_NAMES];
    int n;
    if (enum_values(b, it, v, &n, where)) return -1;
    if (n) {
      if (add_names(b, v, n, &g.first, &g.count)) return -1;
    } else if (json_object_get(it, "type")) {
      if (type_of(b, it, &g.vmask, where)) return -1;
    }
  }
  if (flush(b)) return -1;
  return add_seg(b, g);
}

static int object(struct jb *b, json_t *s, json_t *props, int depth, const char *where) {
  json_t *req = json_object_get(s, "required");
  if (req && !json_is_array(req)) return fail(b, "%s: 'required' must be an array", where);
  size_t i;
  json_t *r;
  json_array_foreach(req, i, r) {
    if (!json_is_string(r)) return fail(b, "%s: 'required' must list property names", where);
    if (!json_object_get(props, json_string_value(r)))
      return fail(b, "%s: required property '%s' is not in 'properties'", where, json_string_value(r));
  }
  if (lits(b, "{")) return -1;
  const char *key;
  json_t *sub;
  int k = 0;
  json_object_foreach(props, key, sub) {
    json_t *ks = json_string(key);
    char *q = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
    json_decref(ks);
    if (!q) return fail(b, "%s: property name '%s' is not valid UTF-8", where, key);
    int rc = lits(b, k++ ? ", " : "") || lits(b, q) || lits(b, ": ");
    free(q);
    if (rc || node(b, sub, depth + 1, key)) return -1;
  }
  return lits(b, "}");
}

static int node(struct jb *b, json_t *s, int depth, const char *where) {
  if (depth > JS_MAX_DEPTH) return fail(b, "the schema nests deeper than %d levels", JS_MAX_DEPTH);
  if (json_is_true(s)) return value(b, JV_ANY);
  if (!json_is_object(s)) return fail(b, "%s: a schema must be an object (or true)", where);
  const char *bad = refused_keyword(s);
  if (bad)
    return fail(b, "%s: '%s' is not supported in a json_schema (supported: type, properties, required, "
                   "enum, const, items)", where, bad);
  json_t *v[JPROG_MAX_NAMES];
  int nv;
  if (enum_values(b, s, v, &nv, where)) return -1;
  if (nv) return choice(b, v, nv);
  json_t *props = json_object_get(s, "properties");
  if (props && !json_is_object(props)) return fail(b, "%s: 'properties' must be an object", where);
  int mask = 0;
  if (json_object_get(s, "type")) {
    if (type_of(b, s, &mask, where)) return -1;
  } else {
    mask = props ? JV_OBJECT : JV_ANY;
  }
  if (mask == JV_ARRAY) return array(b, s, where);
  if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
    return fail(b, "%s: 'items', 'minItems' and 'maxItems' need \"type\": \"array\" alone", where);
  json_t *req = json_object_get(s, "required"), *ap = json_object_get(s, "additionalProperties");
  if ((req || (ap && !json_is_true(ap))) && mask != JV_OBJECT)
    return fail(b, "%s: 'required' and 'additionalProperties' need \"type\": \"object\" alone", where);
  if (mask == JV_OBJECT && !(props && json_object_size(props))) {
    if (json_array_size(req)) return fail(b, "%s: required property '%s' is not in 'properties'", where,
                                          json_string_value(json_array_get(req, 0)) ? json_string_value(json_array_get(req, 0)) : "?");
    if (json_is_false(ap)) return lits(b, "{}");
    if (ap && !json_is_true(ap)) return fail(b, "%s: an 'additionalProperties' schema is not supported", where);
  }
  if (props && json_object_size(props)) {
    if (mask != JV_OBJECT) return fail(b, "%s: an object with 'properties' cannot also be another type", where);
    return object(b, s, props, depth, where);
  }
  return value(b, mask);
}

struct jprog *jschema_compile(json_t *schema, char *msg, size_t cap) {
  struct jb b = {.msg = msg, .mcap = cap};
  if (msg && cap) msg[0] = 0;
  struct jprog *p = NULL;
  json_t *ty = json_is_object(schema) ? json_object_get(schema, "type") : NULL;
  if (!json_is_object(schema) || json_object_get(schema, "enum") || json_object_get(schema, "const") ||
      (ty ? !(json_is_string(ty) && !strcmp(json_string_value(ty), "object")) : !json_object_get(schema, "properties")))
    fail(&b, "the root of a json_schema must be an object schema ({\"type\": \"object\", ...})");
  else if (!node(&b, schema, 0, "schema") && !flush(&b)) {
    p = jprog_build(b.seg, b.n, (const char *const *)b.names, b.nn);
    if (!p) fail(&b, "out of memory");
  }
  for (int i = 0; i < b.n; i++)
    if (b.seg[i].kind == JSEG_LIT) free((char *)b.seg[i].lit);
  for (int i = 0; i < b.nn; i++) free(b.names[i]);
  free(b.seg);
  free(b.names);
  free(b.pend);
  return p;
}
