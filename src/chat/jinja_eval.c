/* chat/jinja_eval.c — runs a parsed template: statements, expressions, scopes, macros, limits.
 *
 * Semantics are jinja2's as transformers configures it: undefined names are jinja2.Undefined
 * (print as '', iterate as empty, fail on attribute access, arithmetic and calls), `set` inside a
 * for body stays in that iteration while `set` inside if writes the enclosing scope, namespaces
 * are the only mutable objects, `a and b` / `a or b` return an operand, `/` is true division,
 * `%` and `//` follow Python's signs.
 * Limits: every loop iteration and macro call is a step (max_steps), macro/caller nesting is
 * bounded (max_depth), output and arena bytes are bounded, the bytes a render touches are metered
 * (max_work, counted by the arena: allocations, copies, scans, comparisons), the evaluator's own
 * recursion is bounded (EVAL_DEPTH) and so is every walk over a value (JINJA_VALUE_DEPTH); hitting
 * one is an error, not a crash.
 * Errors unwind with longjmp to jinja_render, which frees the render arena.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "chat/jinja.h"

struct scope {
  struct scope *parent;
  int n, cap;
  struct jstr *names;
  struct jv *vals;
};

/* Nested eval/exec_body frames one render may stack: the parser bounds a template's own nesting
 * (200), macro calls multiply it. A render at this depth runs under ASan on an 8 MB stack (the
 * default for the server's connection threads): tests/chat/test_jinja_hostile.c, syntax_depth. */
#define EVAL_DEPTH 1000

struct jctx {
  struct jarena arena;
  int edepth;          /* eval + exec_body frames on the stack */
  jmp_buf jb;
  char msg[512];
  int code;
  const struct jinja_limits *lim;
  long steps;
  int depth;
  struct jv vars;      /* render variables (dict) */
  struct scope *root;
  struct jv blockval;  /* the body inside {% filter %} / {% set x | f %} */
};

static int exec_body(struct jctx *c, const struct jnodes *body, struct scope *s, struct jbuf *out);
static struct jv eval(struct jctx *c, const struct jnode *n, struct scope *s);

static void frame_enter(struct jctx *c, int line) {
  if (++c->edepth > EVAL_DEPTH) jctx_fail(c, line, "template evaluation nested deeper than %d levels", EVAL_DEPTH);
}

_Noreturn void jctx_fail(struct jctx *c, int line, const char *fmt, ...) {
  va_list ap;
  int k = line > 0 ? snprintf(c->msg, sizeof c->msg, "template line %d: ", line) : 0;
  va_start(ap, fmt);
  vsnprintf(c->msg + k, sizeof c->msg - (size_t)k, fmt, ap);
  va_end(ap);
  if (!c->code) c->code = HEARTH_ERR_ARG;
  longjmp(c->jb, 1);
}

struct jarena *jctx_arena(struct jctx *c) { return &c->arena; }

static struct jbuf newbuf(struct jctx *c) {
  struct jbuf b = {.a = &c->arena, .limit = c->lim->max_output};
  return b;
}

struct jv jctx_str(struct jctx *c, struct jv v) {
  if (v.kind == JV_STR) return v;
  struct jbuf b = newbuf(c);
  jv_print(&b, v);
  return jbuf_value(&b);
}

static void step(struct jctx *c, int line) {
  if (++c->steps > c->lim->max_steps)
    jctx_fail(c, line, "template evaluation exceeded %ld steps (loop iterations and macro calls)",
              c->lim->max_steps);
}

/* ---- scopes ---------------------------------------------------------------------------------- */

static struct scope *scope_new(struct jctx *c, struct scope *parent) {
  struct scope *s = jarena_alloc(&c->arena, sizeof *s);
  s->parent = parent;
  return s;
}

static void scope_set(struct jctx *c, struct scope *s, struct jstr name, struct jv v) {
  for (int i = 0; i < s->n; i++)
    if (s->names[i].n == name.n && !memcmp(s->names[i].p, name.p, name.n)) { s->vals[i] = v; return; }
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 8;
    struct jstr *nn = jarena_alloc(&c->arena, (size_t)cap * sizeof *nn);
    struct jv *nv = jarena_alloc(&c->arena, (size_t)cap * sizeof *nv);
    if (s->n) {
      memcpy(nn, s->names, (size_t)s->n * sizeof *nn);
      memcpy(nv, s->vals, (size_t)s->n * sizeof *nv);
    }
    s->names = nn;
    s->vals = nv;
    s->cap = cap;
  }
  s->names[s->n] = name;
  s->vals[s->n] = v;
  s->n++;
}

static struct jv *scope_find(struct scope *s, struct jstr name) {
  for (; s; s = s->parent)
    for (int i = s->n - 1; i >= 0; i--)
      if (s->names[i].n == name.n && !memcmp(s->names[i].p, name.p, name.n)) return &s->vals[i];
  return NULL;
}

static struct jv mkfunc(struct jctx *c, enum jfunc_kind k, int builtin) {
  struct jv v = {0};
  v.kind = JV_FUNC;
  v.u.fn = jarena_alloc(&c->arena, sizeof *v.u.fn);
  v.u.fn->kind = k;
  v.u.fn->builtin = builtin;
  return v;
}

static struct jv lookup(struct jctx *c, const struct jnode *n, struct scope *s) {
  struct jv *v = scope_find(s, n->name);
  if (v) return *v;
  v = jv_dict_gets(&c->arena, c->vars, n->name.p, n->name.n);
  if (v) return *v;
  static const struct { const char *name; int id; } B[] = {
    {"range", JB_RANGE}, {"namespace", JB_NAMESPACE}, {"dict", JB_DICT},
    {"raise_exception", JB_RAISE}, {"strftime_now", JB_STRFTIME},
  };
  for (size_t i = 0; i < sizeof B / sizeof B[0]; i++)
    if (n->name.n == strlen(B[i].name) && !memcmp(n->name.p, B[i].name, n->name.n))
      return mkfunc(c, JF_BUILTIN, B[i].id);
  struct jv u = jv_undef();
  char *hint = jarena_alloc(&c->arena, n->name.n + 16);
  snprintf(hint, n->name.n + 16, "'%.*s'", (int)n->name.n, n->name.p);
  u.undef_hint = hint;
  return u;
}

static _Noreturn void fail_undef(struct jctx *c, int line, struct jv u) {
  if (u.undef_hint) jctx_fail(c, line, "%s is undefined", u.undef_hint);
  jctx_fail(c, line, "value is undefined");
}

/* ---- operators --------------------------------------------------------------------------------- */

static int isnum(struct jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }
static double fnum(struct jv v) { return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b; }
static int64_t inum(struct jv v) { return v.kind == JV_INT ? v.u.i : v.u.b; }

static _Noreturn void type_error(struct jctx *c, int line, const char *op, struct jv a, struct jv b) {
  if (a.kind == JV_UNDEF) fail_undef(c, line, a);
  if (b.kind == JV_UNDEF) fail_undef(c, line, b);
  jctx_fail(c, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static struct jv concat2(struct jctx *c, struct jv a, struct jv b) {
  struct jbuf buf = newbuf(c);
  jbuf_put(&buf, a.u.s.p, a.u.s.n);
  jbuf_put(&buf, b.u.s.p, b.u.s.n);
  return jbuf_value(&buf);
}

static struct jv repeat(struct jctx *c, struct jv seq, int64_t k) {
  /* An empty operand repeats to itself: skip the loop, which a huge count would
     otherwise spin through without ever reaching the output limit. */
  if (k < 0 || (seq.kind == JV_STR ? seq.u.s.n : seq.u.l->n) == 0) k = 0;
  if (seq.kind == JV_STR) {
    struct jbuf buf = newbuf(c);
    for (int64_t i = 0; i < k; i++) jbuf_put(&buf, seq.u.s.p, seq.u.s.n);
    return jbuf_value(&buf);
  }
  struct jv l = jv_list_new(&c->arena, 0);
  l.u.l->tuple = seq.u.l->tuple;
  for (int64_t i = 0; i < k; i++)
    for (size_t j = 0; j < seq.u.l->n; j++) jv_list_push(&c->arena, l, seq.u.l->v[j]);
  return l;
}

static struct jv arith(struct jctx *c, int line, int op, struct jv a, struct jv b) {
  static const char *names[] = {[JO_ADD] = "+", [JO_SUB] = "-", [JO_MUL] = "*", [JO_DIV] = "/",
                                [JO_FLOORDIV] = "//", [JO_MOD] = "%", [JO_POW] = "**"};
  const char *on = names[op];
  if (a.kind == JV_UNDEF) fail_undef(c, line, a);
  if (b.kind == JV_UNDEF) fail_undef(c, line, b);
  if (op == JO_ADD) {
    if (a.kind == JV_STR && b.kind == JV_STR) return concat2(c, a, b);
    if (a.kind == JV_LIST && b.kind == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
      struct jv l = jv_list_new(&c->arena, a.u.l->n + b.u.l->n);
      l.u.l->tuple = a.u.l->tuple;
      for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(&c->arena, l, a.u.l->v[i]);
      for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(&c->arena, l, b.u.l->v[i]);
      return l;
    }
  }
  if (op == JO_MUL) {
    if ((a.kind == JV_STR || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL)) {
      if (inum(b) > 0 && (a.kind == JV_STR ? a.u.s.n : a.u.l->n) * (uint64_t)inum(b) > c->lim->max_output)
        jctx_fail(c, line, "repetition result too large");
      return repeat(c, a, inum(b));
    }
    if ((b.kind == JV_STR || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL))
      return arith(c, line, op, b, a);
  }
  if (!isnum(a) || !isnum(b)) type_error(c, line, on, a, b);
  int ints = a.kind != JV_FLOAT && b.kind != JV_FLOAT;
  if (ints) {
    int64_t x = inum(a), y = inum(b), r;
    switch (op) {
    case JO_ADD: if (!__builtin_add_overflow(x, y, &r)) return jv_int(r); break;
    case JO_SUB: if (!__builtin_sub_overflow(x, y, &r)) return jv_int(r); break;
    case JO_MUL: if (!__builtin_mul_overflow(x, y, &r)) return jv_int(r); break;
    case JO_DIV:
      if (y == 0) jctx_fail(c, line, "division by zero");
      return jv_float((double)x / (double)y);
    case JO_FLOORDIV: case JO_MOD: {
      if (y == 0) jctx_fail(c, line, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) break;
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
      return jv_int(op == JO_MOD ? m : q);
    }
    case JO_POW:
      if (y >= 0) {
        int64_t acc = 1;
        int ovf = 0;
        for (int64_t k = 0; k < y && !ovf; k++) {
          ovf = __builtin_mul_overflow(acc, x, &acc);
          if (acc == 0 || acc == 1) break;
          if (k > 64 && (acc == 1 || acc == -1)) break;
        }
        if (!ovf) {
          if (acc == -1 && (y % 2 == 0)) acc = 1;
          return jv_int(acc);
        }
        break;
      }
      return jv_float(pow((double)x, (double)y));
    }
    jctx_fail(c, line, "integer overflow in '%s'", on);
  }
  double x = fnum(a), y = fnum(b);
  switch (op) {
  case JO_ADD: return jv_float(x + y);
  case JO_SUB: return jv_float(x - y);
  case JO_MUL: return jv_float(x * y);
  case JO_DIV: if (y == 0) jctx_fail(c, line, "float division by zero"); return jv_float(x / y);
  case JO_FLOORDIV: if (y == 0) jctx_fail(c, line, "float floor division by zero"); return jv_float(floor(x / y));
  case JO_MOD: {
    if (y == 0) jctx_fail(c, line, "float modulo");
    double m = fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return jv_float(m);
  }
  case JO_POW: return jv_float(pow(x, y));
  }
  jctx_fail(c, line, "bad operator");
}

static int str_cmp(struct jstr a, struct jstr b) {
  size_t n = a.n < b.n ? a.n : b.n;
  int r = memcmp(a.p, b.p, n);
  if (r) return r < 0 ? -1 : 1;
  return a.n < b.n ? -1 : a.n > b.n;
}

/* Python ordering; fails on unorderable types */
static int order_rec(struct jctx *c, int line, struct jv a, struct jv b, int depth) {
  if (depth > JINJA_VALUE_DEPTH) jctx_fail(c, line, "values nested deeper than %d levels cannot be ordered", JINJA_VALUE_DEPTH);
  jarena_charge(&c->arena, sizeof(struct jv));
  if (isnum(a) && isnum(b)) {
    if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) return inum(a) < inum(b) ? -1 : inum(a) > inum(b);
    double x = fnum(a), y = fnum(b);
    return x < y ? -1 : x > y;
  }
  if (a.kind == JV_STR && b.kind == JV_STR) {
    jarena_charge(&c->arena, a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n);
    return str_cmp(a.u.s, b.u.s);
  }
  if (a.kind == JV_LIST && b.kind == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
    for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
      if (jv_equal(&c->arena, a.u.l->v[i], b.u.l->v[i])) continue;
      return order_rec(c, line, a.u.l->v[i], b.u.l->v[i], depth + 1);
    }
    return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
  }
  if (a.kind == JV_UNDEF) fail_undef(c, line, a);
  if (b.kind == JV_UNDEF) fail_undef(c, line, b);
  jctx_fail(c, line, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}
int jinja_order(struct jctx *c, int line, struct jv a, struct jv b);
int jinja_order(struct jctx *c, int line, struct jv a, struct jv b) { return order_rec(c, line, a, b, 0); }

int jinja_contains(struct jctx *c, int line, struct jv container, struct jv item);
int jinja_contains(struct jctx *c, int line, struct jv container, struct jv item) {
  switch (container.kind) {
  case JV_UNDEF: return 0;
  case JV_STR:
    if (item.kind != JV_STR)
      jctx_fail(c, line, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
    if (item.u.s.n == 0) return 1;
    jarena_charge(&c->arena, container.u.s.n);
    return memmem(container.u.s.p, container.u.s.n, item.u.s.p, item.u.s.n) != NULL;
  case JV_LIST:
    for (size_t i = 0; i < container.u.l->n; i++)
      if (jv_equal(&c->arena, container.u.l->v[i], item)) return 1;
    return 0;
  case JV_DICT: return jv_dict_get(&c->arena, container, item) != NULL;
  default:
    jctx_fail(c, line, "argument of type '%s' is not iterable", jv_type_name(container));
  }
}

/* ---- subscripts and slices ---------------------------------------------------------------------- */

static size_t cp_offset(struct jstr s, int64_t idx) { /* byte offset of code point idx (clamped) */
  size_t i = 0;
  int64_t k = 0;
  while (i < s.n && k < idx) {
    i++;
    while (i < s.n && ((unsigned char)s.p[i] & 0xC0) == 0x80) i++;
    k++;
  }
  return i;
}

static struct jv subscript(struct jctx *c, int line, struct jv obj, struct jv key) {
  if (obj.kind == JV_UNDEF) fail_undef(c, line, obj);
  if (obj.kind == JV_DICT) {
    struct jv *v = jv_dict_get(&c->arena, obj, key);
    if (v) return *v;
  } else if ((obj.kind == JV_LIST || obj.kind == JV_STR) && (key.kind == JV_INT || key.kind == JV_BOOL)) {
    if (obj.kind == JV_STR) jarena_charge(&c->arena, 3 * JWORK_WALK * obj.u.s.n); /* three walks */
    int64_t n = obj.kind == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)utf8_len(obj.u.s.p, obj.u.s.n);
    int64_t i = inum(key);
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.kind == JV_LIST) return obj.u.l->v[i];
      size_t b = cp_offset(obj.u.s, i), e = cp_offset(obj.u.s, i + 1);
      return jv_strn(obj.u.s.p + b, e - b);
    }
  } else if (obj.kind == JV_LOOP || obj.kind == JV_NS) {
    if (key.kind == JV_STR && obj.kind == JV_NS) {
      struct jv *v = jv_dict_get(&c->arena, obj, key);
      if (v) return *v;
    }
  }
  if (key.kind == JV_STR && obj.kind != JV_NS) return jinja_getattr(c, line, obj, key.u.s);
  struct jv u = jv_undef();
  u.undef_hint = "subscript";
  struct jbuf b = newbuf(c);
  jbuf_puts(&b, "'");
  jbuf_puts(&b, jv_type_name(obj));
  jbuf_puts(&b, " object' has no element ");
  jv_repr(&b, key);
  jbuf_putc(&b, 0);
  u.undef_hint = b.p;
  return u;
}

static int64_t slice_int(struct jctx *c, int line, struct jv v, int64_t dflt) {
  if (v.kind == JV_NONE || v.kind == JV_UNDEF) return dflt;
  if (v.kind != JV_INT && v.kind != JV_BOOL) jctx_fail(c, line, "slice indices must be integers or None");
  return inum(v);
}

static struct jv do_slice(struct jctx *c, int line, struct jv obj, struct jv lo, struct jv hi, struct jv st) {
  if (obj.kind == JV_UNDEF) fail_undef(c, line, obj);
  if (obj.kind != JV_LIST && obj.kind != JV_STR)
    jctx_fail(c, line, "'%s' object is not subscriptable", jv_type_name(obj));
  if (obj.kind == JV_STR) jarena_charge(&c->arena, 2 * JWORK_WALK * obj.u.s.n);
  int64_t n = obj.kind == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)utf8_len(obj.u.s.p, obj.u.s.n);
  int64_t step = slice_int(c, line, st, 1);
  if (step == 0) jctx_fail(c, line, "slice step cannot be zero");
  int64_t start, stop;
  if (step > 0) {
    start = slice_int(c, line, lo, 0);
    stop = slice_int(c, line, hi, n);
    if (start < 0) { start += n; if (start < 0) start = 0; }
    if (start > n) start = n;
    if (stop < 0) { stop += n; if (stop < 0) stop = 0; }
    if (stop > n) stop = n;
  } else {
    start = slice_int(c, line, lo, n - 1);
    stop = slice_int(c, line, hi, -n - 1);
    if (start < 0) { start += n; if (start < 0) start = -1; }
    if (start >= n) start = n - 1;
    if (stop < 0) { stop += n; if (stop < 0) stop = -1; }
    if (stop >= n) stop = n - 1;
  }
  if (obj.kind == JV_LIST) {
    struct jv l = jv_list_new(&c->arena, 0);
    l.u.l->tuple = obj.u.l->tuple;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jv_list_push(&c->arena, l, obj.u.l->v[i]);
    return l;
  }
  if (step == 1) {
    if (stop <= start) return jv_strn("", 0);
    size_t b = cp_offset(obj.u.s, start), e = cp_offset(obj.u.s, stop);
    return jv_strn(obj.u.s.p + b, e - b);
  }
  /* strided: the byte offset of every code point once, not a walk from the start per item */
  size_t *off = jarena_alloc(&c->arena, ((size_t)n + 1) * sizeof *off);
  for (int64_t k = 0, i = 0; k <= n; k++) {
    off[k] = (size_t)i;
    if (i < (int64_t)obj.u.s.n) {
      i++;
      while (i < (int64_t)obj.u.s.n && ((unsigned char)obj.u.s.p[i] & 0xC0) == 0x80) i++;
    }
  }
  struct jbuf b = newbuf(c);
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jbuf_put(&b, obj.u.s.p + off[i], off[i + 1] - off[i]);
  return jbuf_value(&b);
}

/* ---- calls ----------------------------------------------------------------------------------------- */

struct callargs {
  struct jv *args;
  int nargs;
  struct jstr *kwn;
  struct jv *kwv;
  int nkw;
};

static void eval_args(struct jctx *c, const struct jnodes *l, struct scope *s, struct callargs *ca) {
  ca->args = jarena_alloc(&c->arena, (size_t)(l->n + 1) * sizeof *ca->args);
  ca->kwn = jarena_alloc(&c->arena, (size_t)(l->n + 1) * sizeof *ca->kwn);
  ca->kwv = jarena_alloc(&c->arena, (size_t)(l->n + 1) * sizeof *ca->kwv);
  ca->nargs = ca->nkw = 0;
  for (int i = 0; i < l->n; i++) {
    const struct jnode *a = l->v[i];
    if (a->kind == JN_KWARG) {
      ca->kwn[ca->nkw] = a->name;
      ca->kwv[ca->nkw++] = eval(c, a->a, s);
    } else {
      ca->args[ca->nargs++] = eval(c, a, s);
    }
  }
}

static struct jv call_macro(struct jctx *c, int line, struct jfunc *fn, struct jv *args, int nargs,
                            struct jstr *kwn, struct jv *kwv, int nkw, struct jv caller) {
  const struct jnode *m = fn->macro;
  step(c, line);
  if (++c->depth > c->lim->max_depth)
    jctx_fail(c, line, "macro calls nested deeper than %d", c->lim->max_depth);
  struct scope *s = scope_new(c, fn->scope);
  int np = m->list2.n;
  if (nargs > np) {
    if (fn->kind == JF_CALLER) jctx_fail(c, line, "caller() takes not more than %d argument(s)", np);
    jctx_fail(c, line, "macro '%.*s' takes not more than %d argument(s)", (int)m->name.n, m->name.p, np);
  }
  for (int k = 0; k < nkw; k++) {
    int found = 0;
    for (int i = 0; i < np; i++)
      if (m->list2.v[i]->name.n == kwn[k].n && !memcmp(m->list2.v[i]->name.p, kwn[k].p, kwn[k].n)) {
        if (i < nargs) jctx_fail(c, line, "macro got multiple values for argument '%.*s'", (int)kwn[k].n, kwn[k].p);
        found = 1;
      }
    if (!found)
      jctx_fail(c, line, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->name.n, m->name.p,
                (int)kwn[k].n, kwn[k].p);
  }
  for (int i = 0; i < np; i++) {
    const struct jnode *prm = m->list2.v[i];
    struct jv v = jv_undef();
    int set = 0;
    if (i < nargs) { v = args[i]; set = 1; }
    for (int k = 0; k < nkw && !set; k++)
      if (prm->name.n == kwn[k].n && !memcmp(prm->name.p, kwn[k].p, kwn[k].n)) { v = kwv[k]; set = 1; }
    if (!set) {
      if (prm->a) v = eval(c, prm->a, s);
      else {
        char *hint = jarena_alloc(&c->arena, prm->name.n + 80);
        snprintf(hint, prm->name.n + 80, "parameter '%.*s' was not provided", (int)prm->name.n, prm->name.p);
        v.undef_hint = hint;
      }
    }
    scope_set(c, s, prm->name, v);
  }
  if (caller.kind == JV_FUNC) scope_set(c, s, (struct jstr){"caller", 6}, caller);
  struct jbuf out = newbuf(c);
  exec_body(c, &m->list, s, &out);
  c->depth--;
  return jbuf_value(&out);
}

static struct jv call_builtin(struct jctx *c, int line, int id, struct jv *args, int nargs, struct jstr *kwn,
                              struct jv *kwv, int nkw) {
  switch (id) {
  case JB_RANGE: {
    if (nkw) jctx_fail(c, line, "range() takes no keyword arguments");
    if (nargs < 1 || nargs > 3) jctx_fail(c, line, "range expected 1 to 3 arguments, got %d", nargs);
    int64_t a[3];
    for (int i = 0; i < nargs; i++) {
      if (args[i].kind != JV_INT && args[i].kind != JV_BOOL) {
        if (args[i].kind == JV_UNDEF) fail_undef(c, line, args[i]);
        jctx_fail(c, line, "'%s' object cannot be interpreted as an integer", jv_type_name(args[i]));
      }
      a[i] = inum(args[i]);
    }
    int64_t start = nargs > 1 ? a[0] : 0, stop = nargs > 1 ? a[1] : a[0], st = nargs > 2 ? a[2] : 1;
    if (st == 0) jctx_fail(c, line, "range() arg 3 must not be zero");
    double cnt = st > 0 ? ((double)stop - (double)start) / (double)st : ((double)start - (double)stop) / (double)-st;
    if (cnt > (double)c->lim->max_steps) jctx_fail(c, line, "range too large (%.0f items)", ceil(cnt));
    struct jv l = jv_list_new(&c->arena, cnt > 0 ? (size_t)ceil(cnt) : 0);
    for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) jv_list_push(&c->arena, l, jv_int(i));
    return l;
  }
  case JB_NAMESPACE: case JB_DICT: {
    struct jv d = jv_dict_new(&c->arena, (size_t)nkw + 4);
    if (nargs > 1) jctx_fail(c, line, "%s expected at most 1 argument", id == JB_DICT ? "dict" : "namespace");
    if (nargs == 1) {
      if (args[0].kind == JV_DICT || args[0].kind == JV_NS) {
        for (size_t i = 0; i < args[0].u.d->n; i++)
          jv_dict_set(&c->arena, d, args[0].u.d->e[i].k, args[0].u.d->e[i].v);
      } else if (args[0].kind == JV_LIST) {
        for (size_t i = 0; i < args[0].u.l->n; i++) {
          struct jv p = args[0].u.l->v[i];
          if (p.kind != JV_LIST || p.u.l->n != 2) jctx_fail(c, line, "dictionary update sequence element has wrong length");
          jv_dict_set(&c->arena, d, p.u.l->v[0], p.u.l->v[1]);
        }
      } else {
        jctx_fail(c, line, "'%s' object is not iterable", jv_type_name(args[0]));
      }
    }
    for (int i = 0; i < nkw; i++) jv_dict_set(&c->arena, d, jv_strn(kwn[i].p, kwn[i].n), kwv[i]);
    if (id == JB_NAMESPACE) d.kind = JV_NS;
    return d;
  }
  case JB_RAISE: {
    struct jv m = nargs ? jctx_str(c, args[0]) : jv_strn("", 0);
    c->code = HEARTH_ERR_ARG;
    snprintf(c->msg, sizeof c->msg, "%.*s", (int)m.u.s.n, m.u.s.p);
    longjmp(c->jb, 2);
  }
  case JB_STRFTIME: {
    if (nargs != 1 || args[0].kind != JV_STR) jctx_fail(c, line, "strftime_now expects one format string");
    char fmt[256], out[512];
    snprintf(fmt, sizeof fmt, "%.*s", (int)args[0].u.s.n, args[0].u.s.p);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t k = strftime(out, sizeof out, fmt, &tm);
    return jv_str_copy(&c->arena, out, k);
  }
  }
  jctx_fail(c, line, "unknown builtin");
}

struct jv jctx_call(struct jctx *c, int line, struct jv fn, struct jv *args, int nargs, struct jstr *kwn,
                    struct jv *kwv, int nkw) {
  if (fn.kind == JV_UNDEF) fail_undef(c, line, fn);
  if (fn.kind != JV_FUNC) jctx_fail(c, line, "'%s' object is not callable", jv_type_name(fn));
  switch (fn.u.fn->kind) {
  case JF_MACRO: case JF_CALLER: return call_macro(c, line, fn.u.fn, args, nargs, kwn, kwv, nkw, jv_undef());
  case JF_BUILTIN: return call_builtin(c, line, fn.u.fn->builtin, args, nargs, kwn, kwv, nkw);
  case JF_METHOD: return jinja_call_method(c, line, fn.u.fn, args, nargs, kwn, kwv, nkw);
  }
  jctx_fail(c, line, "bad callable");
}

/* ---- expressions ------------------------------------------------------------------------------------ */

static struct jv eval_node(struct jctx *c, const struct jnode *n, struct scope *s);
static struct jv eval(struct jctx *c, const struct jnode *n, struct scope *s) {
  frame_enter(c, n->line);
  struct jv v = eval_node(c, n, s);
  c->edepth--;
  return v;
}

static struct jv eval_node(struct jctx *c, const struct jnode *n, struct scope *s) {
  switch (n->kind) {
  case JN_LIT: return n->lit;
  case JN_NAME: return lookup(c, n, s);
  case JN_BLOCKVAL: return c->blockval;
  case JN_LIST: case JN_TUPLE: {
    struct jv l = jv_list_new(&c->arena, (size_t)n->list.n);
    l.u.l->tuple = n->kind == JN_TUPLE;
    for (int i = 0; i < n->list.n; i++) l.u.l->v[i] = eval(c, n->list.v[i], s);
    l.u.l->n = (size_t)n->list.n;
    return l;
  }
  case JN_DICT: {
    struct jv d = jv_dict_new(&c->arena, (size_t)n->list.n);
    for (int i = 0; i < n->list.n; i++) {
      struct jv k = eval(c, n->list.v[i], s);
      if (k.kind == JV_LIST && !k.u.l->tuple) jctx_fail(c, n->line, "unhashable type: 'list'");
      if (k.kind == JV_DICT) jctx_fail(c, n->line, "unhashable type: 'dict'");
      jv_dict_set(&c->arena, d, k, eval(c, n->list2.v[i], s));
    }
    return d;
  }
  case JN_GETATTR: return jinja_getattr(c, n->line, eval(c, n->a, s), n->name);
  case JN_GETITEM: {
    struct jv o = eval(c, n->a, s);
    return subscript(c, n->line, o, eval(c, n->b, s));
  }
  case JN_SLICE: {
    struct jv o = eval(c, n->a, s);
    struct jv lo = n->b ? eval(c, n->b, s) : jv_none();
    struct jv hi = n->c ? eval(c, n->c, s) : jv_none();
    struct jv st = n->list.n ? eval(c, n->list.v[0], s) : jv_none();
    return do_slice(c, n->line, o, lo, hi, st);
  }
  case JN_CALL: {
    struct jv fn = eval(c, n->a, s);
    struct callargs ca;
    eval_args(c, &n->list, s, &ca);
    return jctx_call(c, n->line, fn, ca.args, ca.nargs, ca.kwn, ca.kwv, ca.nkw);
  }
  case JN_FILTER: {
    struct jv v = eval(c, n->a, s);
    struct callargs ca;
    eval_args(c, &n->list, s, &ca);
    return jinja_apply_filter(c, n->line, n->op, v, ca.args, ca.nargs, ca.kwn, ca.kwv, ca.nkw);
  }
  case JN_TEST: {
    struct jv v = eval(c, n->a, s);
    struct callargs ca;
    eval_args(c, &n->list, s, &ca);
    int r = jinja_apply_test(c, n->line, n->op, v, ca.args, ca.nargs);
    return jv_bool(n->neg ? !r : r);
  }
  case JN_NOT: return jv_bool(!jv_truthy(eval(c, n->a, s)));
  case JN_NEG: case JN_POS: {
    struct jv v = eval(c, n->a, s);
    if (v.kind == JV_UNDEF) fail_undef(c, n->line, v);
    if (!isnum(v)) jctx_fail(c, n->line, "bad operand type for unary %s: '%s'", n->kind == JN_NEG ? "-" : "+", jv_type_name(v));
    if (n->kind == JN_POS) return v.kind == JV_BOOL ? jv_int(v.u.b) : v;
    if (v.kind == JV_FLOAT) return jv_float(-v.u.f);
    if (inum(v) == INT64_MIN) jctx_fail(c, n->line, "integer overflow");
    return jv_int(-inum(v));
  }
  case JN_BINOP: {
    struct jv a = eval(c, n->a, s);
    return arith(c, n->line, n->op, a, eval(c, n->b, s));
  }
  case JN_AND: {
    struct jv a = eval(c, n->a, s);
    return jv_truthy(a) ? eval(c, n->b, s) : a;
  }
  case JN_OR: {
    struct jv a = eval(c, n->a, s);
    return jv_truthy(a) ? a : eval(c, n->b, s);
  }
  case JN_COMPARE: {
    struct jv l = eval(c, n->a, s);
    for (int i = 0; i < n->list2.n; i++) {
      const struct jnode *opn = n->list2.v[i];
      struct jv r = eval(c, opn->a, s);
      int ok;
      switch (opn->op) {
      case JO_EQ: ok = jv_equal(&c->arena, l, r); break;
      case JO_NE: ok = !jv_equal(&c->arena, l, r); break;
      case JO_LT: ok = jinja_order(c, n->line, l, r) < 0; break;
      case JO_LE: ok = jinja_order(c, n->line, l, r) <= 0; break;
      case JO_GT: ok = jinja_order(c, n->line, l, r) > 0; break;
      case JO_GE: ok = jinja_order(c, n->line, l, r) >= 0; break;
      case JO_IN: ok = jinja_contains(c, n->line, r, l); break;
      default: ok = !jinja_contains(c, n->line, r, l); break;
      }
      if (!ok) return jv_bool(0);
      l = r;
    }
    return jv_bool(1);
  }
  case JN_COND:
    if (jv_truthy(eval(c, n->a, s))) return eval(c, n->b, s);
    if (n->c) return eval(c, n->c, s);
    return jv_undef();
  case JN_CONCAT: {
    struct jbuf b = newbuf(c);
    for (int i = 0; i < n->list.n; i++) jv_print(&b, eval(c, n->list.v[i], s));
    return jbuf_value(&b);
  }
  default: jctx_fail(c, n->line, "not an expression");
  }
}

/* ---- statements --------------------------------------------------------------------------------------- */

enum { FLOW_NORMAL = 0, FLOW_BREAK, FLOW_CONTINUE };

static struct jv iterable_list(struct jctx *c, int line, struct jv v) {
  switch (v.kind) {
  case JV_LIST: return v;
  case JV_UNDEF: return jv_list_new(&c->arena, 0);
  case JV_DICT: {
    struct jv l = jv_list_new(&c->arena, v.u.d->n);
    for (size_t i = 0; i < v.u.d->n; i++) l.u.l->v[i] = v.u.d->e[i].k;
    l.u.l->n = v.u.d->n;
    return l;
  }
  case JV_STR: {
    struct jv l = jv_list_new(&c->arena, v.u.s.n);
    for (size_t i = 0; i < v.u.s.n;) {
      size_t j = i + 1;
      while (j < v.u.s.n && ((unsigned char)v.u.s.p[j] & 0xC0) == 0x80) j++;
      jv_list_push(&c->arena, l, jv_strn(v.u.s.p + i, j - i));
      i = j;
    }
    return l;
  }
  default: jctx_fail(c, line, "'%s' object is not iterable", jv_type_name(v));
  }
}
struct jv jinja_iterable_list(struct jctx *c, int line, struct jv v);
struct jv jinja_iterable_list(struct jctx *c, int line, struct jv v) { return iterable_list(c, line, v); }

static void bind_targets(struct jctx *c, int line, const struct jnodes *t, struct scope *s, struct jv v) {
  if (t->n == 1) {
    scope_set(c, s, t->v[0]->name, v);
    return;
  }
  struct jv l = iterable_list(c, line, v);
  if ((int)l.u.l->n != t->n)
    jctx_fail(c, line, "%s values to unpack (expected %d, got %zu)", (int)l.u.l->n > t->n ? "too many" : "not enough",
              t->n, l.u.l->n);
  for (int i = 0; i < t->n; i++) scope_set(c, s, t->v[i]->name, l.u.l->v[i]);
}

static int exec_for(struct jctx *c, const struct jnode *n, struct scope *s, struct jbuf *out) {
  struct jv items = iterable_list(c, n->line, eval(c, n->a, s));
  if (n->b) { /* {% for x in xs if cond %}: filter first, so loop.length counts the kept items */
    struct jv kept = jv_list_new(&c->arena, 0);
    for (size_t i = 0; i < items.u.l->n; i++) {
      step(c, n->line);
      struct scope *fs = scope_new(c, s);
      bind_targets(c, n->line, &n->list2, fs, items.u.l->v[i]);
      if (jv_truthy(eval(c, n->b, fs))) jv_list_push(&c->arena, kept, items.u.l->v[i]);
    }
    items = kept;
  }
  int depth0 = 0; /* loop.depth counts recursive loop() calls only, which are unsupported */
  size_t len = items.u.l->n;
  for (size_t i = 0; i < len; i++) {
    step(c, n->line);
    struct scope *is = scope_new(c, s);
    struct jv lv = {0};
    lv.kind = JV_LOOP;
    lv.u.loop = jarena_alloc(&c->arena, sizeof *lv.u.loop);
    lv.u.loop->index0 = (int64_t)i;
    lv.u.loop->length = (int64_t)len;
    lv.u.loop->items = items;
    lv.u.loop->depth0 = depth0;
    scope_set(c, is, (struct jstr){"loop", 4}, lv);
    bind_targets(c, n->line, &n->list2, is, items.u.l->v[i]);
    int fl = exec_body(c, &n->list, is, out);
    if (fl == FLOW_BREAK) break;
  }
  if (len == 0 && n->c) return exec_body(c, &n->c->list, s, out);
  return FLOW_NORMAL;
}

static void assign(struct jctx *c, const struct jnode *n, struct scope *s, struct jv v) {
  if (n->list2.n == 1 && n->list2.v[0]->kind == JN_GETATTR) {
    const struct jnode *t = n->list2.v[0];
    struct jv *ns = scope_find(s, t->a->name);
    if (!ns) ns = jv_dict_gets(&c->arena, c->vars, t->a->name.p, t->a->name.n);
    if (!ns || ns->kind != JV_NS)
      jctx_fail(c, n->line, "cannot assign attribute on non-namespace object");
    jv_dict_set(&c->arena, *ns, jv_strn(t->name.p, t->name.n), v);
    return;
  }
  for (int i = 0; i < n->list2.n; i++)
    if (n->list2.v[i]->kind != JN_NAME) jctx_fail(c, n->line, "can only assign attributes in a single target");
  bind_targets(c, n->line, &n->list2, s, v);
}

static struct jv render_body(struct jctx *c, const struct jnodes *body, struct scope *s) {
  struct jbuf b = newbuf(c);
  if (++c->depth > c->lim->max_depth) jctx_fail(c, 0, "blocks nested deeper than %d", c->lim->max_depth);
  exec_body(c, body, s, &b);
  c->depth--;
  return jbuf_value(&b);
}

static int exec_stmts(struct jctx *c, const struct jnodes *body, struct scope *s, struct jbuf *out);
static int exec_body(struct jctx *c, const struct jnodes *body, struct scope *s, struct jbuf *out) {
  frame_enter(c, body->n ? body->v[0]->line : 0);
  int fl = exec_stmts(c, body, s, out);
  c->edepth--;
  return fl;
}

static int exec_stmts(struct jctx *c, const struct jnodes *body, struct scope *s, struct jbuf *out) {
  for (int i = 0; i < body->n; i++) {
    const struct jnode *n = body->v[i];
    int fl = FLOW_NORMAL;
    switch (n->kind) {
    case JN_TEXT: jbuf_put(out, n->lit.u.s.p, n->lit.u.s.n); break;
    case JN_OUTPUT: jv_print(out, eval(c, n->a, s)); break;
    case JN_IF:
      if (jv_truthy(eval(c, n->a, s))) fl = exec_body(c, &n->list, s, out);
      else fl = exec_body(c, &n->list2, s, out);
      break;
    case JN_FOR: fl = exec_for(c, n, s, out); break;
    case JN_SET: assign(c, n, s, eval(c, n->a, s)); break;
    case JN_SETBLOCK: {
      struct jv v = render_body(c, &n->list, s);
      if (n->a) {
        struct jv saved = c->blockval;
        c->blockval = v;
        v = eval(c, n->a, s);
        c->blockval = saved;
      }
      assign(c, n, s, v);
      break;
    }
    case JN_MACRO: {
      struct jv f = mkfunc(c, JF_MACRO, 0);
      f.u.fn->macro = n;
      f.u.fn->scope = s;
      f.u.fn->name = n->name;
      scope_set(c, s, n->name, f);
      break;
    }
    case JN_CALLBLOCK: {
      struct jv caller = mkfunc(c, JF_CALLER, 0);
      /* the call block acts as an anonymous macro whose parameters are list2 and body list */
      caller.u.fn->macro = n;
      caller.u.fn->scope = s;
      struct jv fn = eval(c, n->a->a, s);
      struct callargs ca;
      eval_args(c, &n->a->list, s, &ca);
      if (fn.kind != JV_FUNC || fn.u.fn->kind != JF_MACRO) jctx_fail(c, n->line, "{%% call %%} needs a macro");
      jv_print(out, call_macro(c, n->line, fn.u.fn, ca.args, ca.nargs, ca.kwn, ca.kwv, ca.nkw, caller));
      break;
    }
    case JN_FILTERBLOCK: {
      struct jv saved = c->blockval;
      c->blockval = render_body(c, &n->list, s);
      jv_print(out, eval(c, n->a, s));
      c->blockval = saved;
      break;
    }
    case JN_BREAK: return FLOW_BREAK;
    case JN_CONTINUE: return FLOW_CONTINUE;
    default: jctx_fail(c, n->line, "not a statement");
    }
    if (fl != FLOW_NORMAL) return fl;
  }
  return FLOW_NORMAL;
}

/* ---- entry ----------------------------------------------------------------------------------------------- */

/* bytes of text in the variables (their depth was checked by jv_from_json) */
static size_t json_text_bytes(json_t *j) {
  size_t n = 0, i;
  const char *k;
  json_t *v;
  switch (json_typeof(j)) {
  case JSON_STRING: return json_string_length(j);
  case JSON_ARRAY: json_array_foreach(j, i, v) n += json_text_bytes(v) + 1; return n;
  case JSON_OBJECT: json_object_foreach(j, k, v) n += strlen(k) + json_text_bytes(v) + 1; return n;
  default: return 8;
  }
}

int jinja_render(const struct jinja_program *prog, json_t *vars, const struct jinja_limits *lim0,
                 char **out, size_t *out_len, struct hearth_err *err) {
  struct jinja_limits lim = {8u << 20, 256u << 20, 1000000, 64, (size_t)512 << 20};
  if (lim0) {
    if (lim0->max_work) lim.max_work = lim0->max_work;
    if (lim0->max_output) lim.max_output = lim0->max_output;
    if (lim0->max_memory) lim.max_memory = lim0->max_memory;
    if (lim0->max_steps) lim.max_steps = lim0->max_steps;
    if (lim0->max_depth) lim.max_depth = lim0->max_depth;
  }
  if (vars && !json_is_object(vars)) return err_set(err, HEARTH_ERR_ARG, "template variables must be a JSON object");
  struct jctx *c = calloc(1, sizeof *c);
  if (!c) return err_set(err, HEARTH_ERR_NOMEM, "out of memory rendering a template");
  c->lim = &lim;
  c->arena.cap = lim.max_memory;
  c->arena.max_work = lim.max_work;
  c->arena.fail = &c->jb;
  c->arena.fail_msg = c->msg;
  int jr = setjmp(c->jb);
  if (jr) {
    int code = c->code ? c->code : HEARTH_ERR_NOMEM;
    int rc = err_set(err, code, "%s", c->msg);
    jarena_free(&c->arena);
    free(c);
    return rc;
  }
  c->vars = vars ? jv_from_json(&c->arena, vars) : jv_dict_new(&c->arena, 0);
  /* The real templates touch 12-56 bytes per byte of conversation (measured: qwen2.5, qwen3,
   * gemma-4); a conversation's own size buys it 64 bytes of work per byte on top of the default. */
  if (vars && !(lim0 && lim0->max_work)) c->arena.max_work += 64 * json_text_bytes(vars);
  c->root = scope_new(c, NULL);
  struct jbuf b = newbuf(c);
  exec_body(c, &prog->body, c->root, &b);
  char *s = malloc(b.n + 1);
  if (!s) {
    jarena_free(&c->arena);
    free(c);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory rendering a template");
  }
  if (b.n) memcpy(s, b.p, b.n);
  s[b.n] = 0;
  if (out_len) *out_len = b.n;
  *out = s;
  jarena_free(&c->arena);
  free(c);
  return 0;
}
