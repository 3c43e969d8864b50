/* chat/jinja_parse.c — tokens → AST for the Jinja subset chat templates use.
 *
 * Grammar and precedence follow jinja2's parser (lowest first): conditional `a if b else c`, or,
 * and, not, comparisons (== != < > <= >= in, not in), + -, ~, * / // %, **, unary - +, then
 * primaries with postfix `.name`, `[sub]`, `[a:b:c]`, `(args)`, and filter/test chains
 * (`| f(args)`, `is [not] t(args)`).
 * Statements: if/elif/else, for (tuple targets, `if` filter, else), set (name, tuple, ns.attr,
 * block form), macro, call, filter blocks, break/continue, generation (transformers' marker,
 * rendered as its body). Everything else — extends, include, import, recursive loops, unknown
 * filters and tests — fails here with the line, so a template either loads whole or not at all.
 *
 * Node fields by kind: a/b/c are operands (GETATTR a.name; GETITEM a[b]; SLICE a[b:c:list[0]];
 * CALL a(list); FILTER a|name(list); TEST a is name(list); BINOP a op b; COMPARE a (op list2)...;
 * COND b if a else c; IF a {list} else {list2}; FOR list2(targets) in a if b {list} else {c->list};
 * SET list2(targets) = a; MACRO name(list2) {list}; CALLBLOCK a with params list2 {list}).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "chat/jinja.h"

#define MAX_NEST 200

struct parser {
  struct jarena *a;
  struct jtok *t;
  int nt, i;
  int depth;
  jmp_buf jb;
  char msg[512];
};

static _Noreturn void pfail(struct parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void pfail(struct parser *P, const char *fmt, ...) {
  va_list ap;
  int line = P->t[P->i].line;
  int k = snprintf(P->msg, sizeof P->msg, "template line %d: ", line);
  va_start(ap, fmt);
  vsnprintf(P->msg + k, sizeof P->msg - (size_t)k, fmt, ap);
  va_end(ap);
  longjmp(P->jb, 1);
}

static struct jtok *cur(struct parser *P) { return &P->t[P->i]; }
static struct jtok *next(struct parser *P) {
  struct jtok *t = &P->t[P->i];
  if (t->kind != JT_EOF) P->i++;
  return t;
}
static int is_op(struct parser *P, int op) { return cur(P)->kind == JT_OP && cur(P)->op == op; }
static int is_name(struct parser *P, const char *s) {
  struct jtok *t = cur(P);
  return t->kind == JT_NAME && t->s.n == strlen(s) && !memcmp(t->s.p, s, t->s.n);
}
static int accept_op(struct parser *P, int op) {
  if (is_op(P, op)) { next(P); return 1; }
  return 0;
}
static int accept_name(struct parser *P, const char *s) {
  if (is_name(P, s)) { next(P); return 1; }
  return 0;
}
static const char *tokdesc(struct jtok *t) {
  switch (t->kind) {
  case JT_EOF: return "end of template";
  case JT_TEXT: return "template text";
  case JT_VAR_BEGIN: return "'{{'";
  case JT_VAR_END: return "'}}'";
  case JT_BLOCK_BEGIN: return "'{%'";
  case JT_BLOCK_END: return "'%}'";
  case JT_NAME: return "a name";
  case JT_STRING: return "a string";
  case JT_INT: case JT_FLOAT: return "a number";
  case JT_OP: return "an operator";
  }
  return "?";
}
static void expect_op(struct parser *P, int op, const char *what) {
  if (!accept_op(P, op)) pfail(P, "expected '%s', got %s", what, tokdesc(cur(P)));
}
static struct jstr expect_namestr(struct parser *P) {
  if (cur(P)->kind != JT_NAME) pfail(P, "expected a name, got %s", tokdesc(cur(P)));
  return next(P)->s;
}
static void expect_block_end(struct parser *P) {
  if (cur(P)->kind != JT_BLOCK_END) pfail(P, "expected '%%}', got %s", tokdesc(cur(P)));
  next(P);
}

static struct jnode *mk(struct parser *P, enum jn_kind k) {
  struct jnode *n = jarena_alloc(P->a, sizeof *n);
  if (!n) pfail(P, "out of memory");
  n->kind = k;
  n->line = cur(P)->line;
  return n;
}
static void add(struct parser *P, struct jnodes *l, struct jnode *n) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 4;
    struct jnode **v = jarena_alloc(P->a, (size_t)cap * sizeof *v);
    if (!v) pfail(P, "out of memory");
    if (l->n) memcpy(v, l->v, (size_t)l->n * sizeof *v);
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = n;
}
static int str_is(struct jstr s, const char *c) { return s.n == strlen(c) && !memcmp(s.p, c, s.n); }

/* ---- expressions -------------------------------------------------------------------------- */

static struct jnode *parse_expr(struct parser *P);
static struct jnode *parse_unary(struct parser *P, int with_filter);
static struct jnode *parse_or(struct parser *P);

static void enter(struct parser *P) {
  if (++P->depth > MAX_NEST) pfail(P, "expression or block nesting deeper than %d", MAX_NEST);
}
/* A left-associative chain (a + b + c, x.a.b, x | f | g, a and b and c) is parsed by a loop but
 * builds a tree as deep as it is long, which the evaluator walks recursively: each link counts as
 * one level of nesting, released when the chain ends. */
static void chain_link(struct parser *P, int *links) {
  enter(P);
  (*links)++;
}

static void parse_args(struct parser *P, struct jnodes *args) {
  /* after '(' */
  int seen_kw = 0;
  while (!is_op(P, JO_RPAREN)) {
    if (args->n) expect_op(P, JO_COMMA, ",");
    if (is_op(P, JO_RPAREN)) break;
    if (is_op(P, JO_MUL) || is_op(P, JO_POW)) pfail(P, "unsupported construct '*args/**kwargs' in a call");
    if (cur(P)->kind == JT_NAME && P->t[P->i + 1].kind == JT_OP && P->t[P->i + 1].op == JO_ASSIGN) {
      struct jnode *kw = mk(P, JN_KWARG);
      kw->name = next(P)->s;
      next(P);
      kw->a = parse_expr(P);
      add(P, args, kw);
      seen_kw = 1;
    } else {
      if (seen_kw) pfail(P, "positional argument after keyword argument");
      add(P, args, parse_expr(P));
    }
  }
  next(P);
}

static struct jnode *parse_primary(struct parser *P) {
  struct jtok *t = cur(P);
  struct jnode *n;
  enter(P);
  if (t->kind == JT_NAME) {
    next(P);
    if (str_is(t->s, "true") || str_is(t->s, "True")) { n = mk(P, JN_LIT); n->lit = jv_bool(1); }
    else if (str_is(t->s, "false") || str_is(t->s, "False")) { n = mk(P, JN_LIT); n->lit = jv_bool(0); }
    else if (str_is(t->s, "none") || str_is(t->s, "None")) { n = mk(P, JN_LIT); n->lit = jv_none(); }
    else { n = mk(P, JN_NAME); n->name = t->s; }
  } else if (t->kind == JT_STRING) {
    next(P);
    n = mk(P, JN_LIT);
    n->lit = jv_strn(t->s.p, t->s.n);
    if (cur(P)->kind == JT_STRING) { /* adjacent literals concatenate */
      size_t tot = t->s.n;
      int j = P->i;
      while (P->t[j].kind == JT_STRING) tot += P->t[j++].s.n;
      char *d = jarena_alloc(P->a, tot + 1);
      if (!d) pfail(P, "out of memory");
      memcpy(d, t->s.p, t->s.n);
      size_t k = t->s.n;
      while (cur(P)->kind == JT_STRING) { memcpy(d + k, cur(P)->s.p, cur(P)->s.n); k += cur(P)->s.n; next(P); }
      n->lit = jv_strn(d, k);
    }
  } else if (t->kind == JT_INT) {
    next(P);
    n = mk(P, JN_LIT);
    n->lit = jv_int(t->i);
  } else if (t->kind == JT_FLOAT) {
    next(P);
    n = mk(P, JN_LIT);
    n->lit = jv_float(t->f);
  } else if (accept_op(P, JO_LPAREN)) {
    if (accept_op(P, JO_RPAREN)) {
      n = mk(P, JN_TUPLE);
    } else {
      struct jnode *e = parse_expr(P);
      if (is_op(P, JO_COMMA)) {
        n = mk(P, JN_TUPLE);
        add(P, &n->list, e);
        while (accept_op(P, JO_COMMA)) {
          if (is_op(P, JO_RPAREN)) break;
          add(P, &n->list, parse_expr(P));
        }
      } else {
        n = e;
      }
      expect_op(P, JO_RPAREN, ")");
    }
  } else if (accept_op(P, JO_LBRACKET)) {
    n = mk(P, JN_LIST);
    while (!is_op(P, JO_RBRACKET)) {
      if (n->list.n) expect_op(P, JO_COMMA, ",");
      if (is_op(P, JO_RBRACKET)) break;
      add(P, &n->list, parse_expr(P));
    }
    next(P);
  } else if (accept_op(P, JO_LBRACE)) {
    n = mk(P, JN_DICT);
    while (!is_op(P, JO_RBRACE)) {
      if (n->list.n) expect_op(P, JO_COMMA, ",");
      if (is_op(P, JO_RBRACE)) break;
      add(P, &n->list, parse_expr(P));
      expect_op(P, JO_COLON, ":");
      add(P, &n->list2, parse_expr(P));
    }
    next(P);
  } else {
    pfail(P, "unexpected %s in expression", tokdesc(t));
  }
  P->depth--;
  return n;
}

static struct jnode *parse_subscript_arg(struct parser *P) {
  /* after '[': expr | [a]:[b][:[c]] */
  struct jnode *lo = NULL, *hi = NULL, *st = NULL;
  if (!is_op(P, JO_COLON)) {
    lo = parse_expr(P);
    if (!is_op(P, JO_COLON)) { expect_op(P, JO_RBRACKET, "]"); return lo; }
  }
  next(P); /* ':' */
  struct jnode *s = mk(P, JN_SLICE);
  if (!is_op(P, JO_RBRACKET) && !is_op(P, JO_COLON)) hi = parse_expr(P);
  if (accept_op(P, JO_COLON))
    if (!is_op(P, JO_RBRACKET)) st = parse_expr(P);
  expect_op(P, JO_RBRACKET, "]");
  s->b = lo;
  s->c = hi;
  if (st) add(P, &s->list, st);
  return s;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n) {
  for (int links = 0;; chain_link(P, &links)) {
    if (is_op(P, JO_DOT)) {
      next(P);
      struct jnode *g = mk(P, JN_GETATTR);
      g->a = n;
      if (cur(P)->kind == JT_NAME) g->name = next(P)->s;
      else if (cur(P)->kind == JT_INT) { /* x.0 means x[0] */
        g->kind = JN_GETITEM;
        g->b = mk(P, JN_LIT);
        g->b->lit = jv_int(next(P)->i);
      } else pfail(P, "expected an attribute name after '.'");
      n = g;
    } else if (accept_op(P, JO_LBRACKET)) {
      struct jnode *arg = parse_subscript_arg(P);
      if (arg->kind == JN_SLICE) { arg->a = n; n = arg; }
      else { struct jnode *g = mk(P, JN_GETITEM); g->a = n; g->b = arg; n = g; }
    } else if (accept_op(P, JO_LPAREN)) {
      struct jnode *c = mk(P, JN_CALL);
      c->a = n;
      parse_args(P, &c->list);
      n = c;
    } else {
      P->depth -= links;
      return n;
    }
  }
}

static int starts_primary(struct parser *P) {
  struct jtok *t = cur(P);
  if (t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT) return 1;
  if (t->kind == JT_OP) return t->op == JO_LPAREN || t->op == JO_LBRACKET || t->op == JO_LBRACE;
  if (t->kind == JT_NAME) {
    static const char *kw[] = {"and", "or", "not", "in", "is", "if", "else", "elif", "recursive"};
    for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
      if (str_is(t->s, kw[i])) return 0;
    return 1;
  }
  return 0;
}

static struct jnode *parse_filter_one(struct parser *P, struct jnode *operand) {
  /* after '|' */
  struct jnode *f = mk(P, JN_FILTER);
  f->a = operand;
  f->name = expect_namestr(P);
  while (accept_op(P, JO_DOT)) { /* dotted filter names do not exist in jinja2's builtins */
    pfail(P, "unsupported filter '%.*s.%s'", (int)f->name.n, f->name.p, "...");
  }
  f->op = jinja_filter_id(f->name.p, f->name.n);
  if (f->op < 0) pfail(P, "unsupported filter '%.*s'", (int)f->name.n, f->name.p);
  if (accept_op(P, JO_LPAREN)) parse_args(P, &f->list);
  return f;
}

static struct jnode *parse_filter_expr(struct parser *P, struct jnode *n) {
  for (int links = 0;; chain_link(P, &links)) {
    if (accept_op(P, JO_PIPE)) {
      n = parse_filter_one(P, n);
    } else if (is_name(P, "is")) {
      next(P);
      struct jnode *t = mk(P, JN_TEST);
      t->a = n;
      if (accept_name(P, "not")) t->neg = 1;
      /* test names may be keywords-as-names (none, true, false) or comparison operators */
      if (cur(P)->kind == JT_NAME) t->name = next(P)->s;
      else pfail(P, "expected a test name after 'is'");
      t->op = jinja_test_id(t->name.p, t->name.n);
      if (t->op < 0) pfail(P, "unsupported test '%.*s'", (int)t->name.n, t->name.p);
      if (accept_op(P, JO_LPAREN)) parse_args(P, &t->list);
      else if (starts_primary(P)) add(P, &t->list, parse_postfix(P, parse_primary(P)));
      n = t;
    } else if (is_op(P, JO_LPAREN)) {
      n = parse_postfix(P, n);
    } else {
      P->depth -= links;
      return n;
    }
  }
}

static struct jnode *parse_unary(struct parser *P, int with_filter) {
  struct jnode *n;
  enter(P);
  if (accept_op(P, JO_SUB)) { n = mk(P, JN_NEG); n->a = parse_unary(P, 0); }
  else if (accept_op(P, JO_ADD)) { n = mk(P, JN_POS); n->a = parse_unary(P, 0); }
  else n = parse_primary(P);
  n = parse_postfix(P, n);
  if (with_filter) n = parse_filter_expr(P, n);
  P->depth--;
  return n;
}

static struct jnode *binop(struct parser *P, int op, struct jnode *l, struct jnode *r) {
  struct jnode *b = mk(P, JN_BINOP);
  b->op = op;
  b->a = l;
  b->b = r;
  return b;
}

static struct jnode *parse_pow(struct parser *P) {
  struct jnode *l = parse_unary(P, 1);
  int links = 0;
  while (accept_op(P, JO_POW)) {
    chain_link(P, &links);
    l = binop(P, JO_POW, l, parse_unary(P, 1));
  }
  P->depth -= links;
  return l;
}
static struct jnode *parse_math2(struct parser *P) {
  struct jnode *l = parse_pow(P);
  for (int links = 0;; chain_link(P, &links)) {
    struct jtok *t = cur(P);
    if (t->kind == JT_OP && (t->op == JO_MUL || t->op == JO_DIV || t->op == JO_FLOORDIV || t->op == JO_MOD)) {
      next(P);
      l = binop(P, t->op, l, parse_pow(P));
    } else {
      P->depth -= links;
      return l;
    }
  }
}
static struct jnode *parse_concat(struct parser *P) {
  struct jnode *l = parse_math2(P);
  if (!is_op(P, JO_TILDE)) return l;
  struct jnode *c = mk(P, JN_CONCAT);
  add(P, &c->list, l);
  while (accept_op(P, JO_TILDE)) add(P, &c->list, parse_math2(P));
  return c;
}
static struct jnode *parse_math1(struct parser *P) {
  struct jnode *l = parse_concat(P);
  for (int links = 0;; chain_link(P, &links)) {
    struct jtok *t = cur(P);
    if (t->kind == JT_OP && (t->op == JO_ADD || t->op == JO_SUB)) {
      next(P);
      l = binop(P, t->op, l, parse_concat(P));
    } else {
      P->depth -= links;
      return l;
    }
  }
}
static struct jnode *parse_compare(struct parser *P) {
  struct jnode *l = parse_math1(P);
  struct jnode *c = NULL;
  for (;;) {
    struct jtok *t = cur(P);
    int op = 0;
    if (t->kind == JT_OP && (t->op == JO_EQ || t->op == JO_NE || t->op == JO_LT || t->op == JO_LE ||
                             t->op == JO_GT || t->op == JO_GE)) {
      op = t->op;
      next(P);
    } else if (is_name(P, "in")) {
      op = JO_IN;
      next(P);
    } else if (is_name(P, "not") && P->t[P->i + 1].kind == JT_NAME && P->t[P->i + 1].s.n == 2 &&
               !memcmp(P->t[P->i + 1].s.p, "in", 2)) {
      op = JO_NOTIN;
      next(P);
      next(P);
    } else {
      break;
    }
    if (!c) { c = mk(P, JN_COMPARE); c->a = l; }
    struct jnode *r = parse_math1(P);
    r->op = r->op; /* operand node */
    struct jnode *opn = mk(P, JN_LIT);
    opn->op = op;
    opn->a = r;
    add(P, &c->list2, opn);
  }
  return c ? c : l;
}
static struct jnode *parse_not(struct parser *P) {
  if (accept_name(P, "not")) {
    enter(P);
    struct jnode *n = mk(P, JN_NOT);
    n->a = parse_not(P);
    P->depth--;
    return n;
  }
  return parse_compare(P);
}
static struct jnode *parse_and(struct parser *P) {
  struct jnode *l = parse_not(P);
  int links = 0;
  while (accept_name(P, "and")) {
    chain_link(P, &links);
    struct jnode *n = mk(P, JN_AND);
    n->a = l;
    n->b = parse_not(P);
    l = n;
  }
  P->depth -= links;
  return l;
}
static struct jnode *parse_or(struct parser *P) {
  struct jnode *l = parse_and(P);
  int links = 0;
  while (accept_name(P, "or")) {
    chain_link(P, &links);
    struct jnode *n = mk(P, JN_OR);
    n->a = l;
    n->b = parse_and(P);
    l = n;
  }
  P->depth -= links;
  return l;
}
static struct jnode *parse_expr(struct parser *P) {
  enter(P);
  struct jnode *e = parse_or(P);
  int links = 0;
  while (accept_name(P, "if")) {
    chain_link(P, &links);
    struct jnode *c = mk(P, JN_COND);
    c->b = e;
    c->a = parse_or(P);
    if (accept_name(P, "else")) c->c = parse_expr(P);
    e = c;
  }
  P->depth -= links + 1;
  return e;
}

/* a, b = ... / for a, b in ...: a tuple of plain names (or a single name / ns.attr for set) */
static void parse_targets(struct parser *P, struct jnodes *out, int allow_attr) {
  int paren = accept_op(P, JO_LPAREN);
  do {
    struct jnode *n = mk(P, JN_NAME);
    n->name = expect_namestr(P);
    if (allow_attr && is_op(P, JO_DOT)) {
      next(P);
      struct jnode *g = mk(P, JN_GETATTR);
      g->a = n;
      g->name = expect_namestr(P);
      n = g;
    }
    add(P, out, n);
  } while (accept_op(P, JO_COMMA));
  if (paren) expect_op(P, JO_RPAREN, ")");
}

/* ---- statements -------------------------------------------------------------------------- */

/* Parses statements until a block tag whose first name is one of `ends` (NULL-terminated list);
 * leaves the parser on that name (after '{%') and returns its index, or -1 at EOF when ends is NULL. */
static int parse_body(struct parser *P, struct jnodes *body, const char *const *ends);

static void parse_if_rest(struct parser *P, struct jnode *n) {
  static const char *const ends[] = {"elif", "else", "endif", NULL};
  n->a = parse_expr(P);
  expect_block_end(P);
  int which = parse_body(P, &n->list, ends);
  next(P);
  if (which == 0) {
    struct jnode *e = mk(P, JN_IF);
    add(P, &n->list2, e);
    parse_if_rest(P, e);
    return;
  }
  if (which == 1) {
    static const char *const e2[] = {"endif", NULL};
    expect_block_end(P);
    parse_body(P, &n->list2, e2);
    next(P);
  }
  expect_block_end(P);
}

static struct jnode *parse_statement(struct parser *P) {
  /* at the name after '{%' */
  struct jtok *t = cur(P);
  if (t->kind != JT_NAME) pfail(P, "expected a statement name after '{%%'");
  struct jstr kw = t->s;
  struct jnode *n;
  enter(P);
  next(P);
  if (str_is(kw, "if")) {
    n = mk(P, JN_IF);
    parse_if_rest(P, n);
  } else if (str_is(kw, "for")) {
    static const char *const ends[] = {"else", "endfor", NULL};
    n = mk(P, JN_FOR);
    parse_targets(P, &n->list2, 0);
    if (!accept_name(P, "in")) pfail(P, "expected 'in' in for loop");
    n->a = parse_or(P); /* jinja2: parse_tuple(with_condexpr=False) */
    if (is_op(P, JO_COMMA)) pfail(P, "unsupported construct: iterating over a bare tuple");
    if (accept_name(P, "if")) n->b = parse_expr(P);
    if (is_name(P, "recursive")) pfail(P, "unsupported construct 'recursive' loop");
    expect_block_end(P);
    int which = parse_body(P, &n->list, ends);
    next(P);
    if (which == 0) {
      static const char *const e2[] = {"endfor", NULL};
      expect_block_end(P);
      n->c = mk(P, JN_TEXT); /* holder for the else body */
      parse_body(P, &n->c->list, e2);
      next(P);
    }
    expect_block_end(P);
  } else if (str_is(kw, "set")) {
    n = mk(P, JN_SET);
    parse_targets(P, &n->list2, 1);
    if (accept_op(P, JO_ASSIGN)) {
      struct jnode *e = parse_expr(P);
      if (is_op(P, JO_COMMA)) { /* set a, b = 1, 2 */
        struct jnode *tu = mk(P, JN_TUPLE);
        add(P, &tu->list, e);
        while (accept_op(P, JO_COMMA)) add(P, &tu->list, parse_expr(P));
        e = tu;
      }
      n->a = e;
      expect_block_end(P);
    } else {
      static const char *const ends[] = {"endset", NULL};
      if (n->list2.n != 1 || n->list2.v[0]->kind != JN_NAME) pfail(P, "block set needs one plain name");
      n->kind = JN_SETBLOCK;
      struct jnode *chain = NULL;
      if (accept_op(P, JO_PIPE)) {
        chain = parse_filter_one(P, mk(P, JN_BLOCKVAL));
        int links = 0;
        while (accept_op(P, JO_PIPE)) { chain_link(P, &links); chain = parse_filter_one(P, chain); }
        P->depth -= links;
      }
      n->a = chain;
      expect_block_end(P);
      parse_body(P, &n->list, ends);
      next(P);
      expect_block_end(P);
    }
  } else if (str_is(kw, "macro")) {
    static const char *const ends[] = {"endmacro", NULL};
    n = mk(P, JN_MACRO);
    n->name = expect_namestr(P);
    expect_op(P, JO_LPAREN, "(");
    while (!is_op(P, JO_RPAREN)) {
      if (n->list2.n) expect_op(P, JO_COMMA, ",");
      struct jnode *prm = mk(P, JN_KWARG);
      prm->name = expect_namestr(P);
      if (accept_op(P, JO_ASSIGN)) prm->a = parse_expr(P);
      add(P, &n->list2, prm);
    }
    next(P);
    expect_block_end(P);
    parse_body(P, &n->list, ends);
    next(P);
    if (cur(P)->kind == JT_NAME) next(P); /* {% endmacro name %} */
    expect_block_end(P);
  } else if (str_is(kw, "call")) {
    static const char *const ends[] = {"endcall", NULL};
    n = mk(P, JN_CALLBLOCK);
    if (accept_op(P, JO_LPAREN)) {
      while (!is_op(P, JO_RPAREN)) {
        if (n->list2.n) expect_op(P, JO_COMMA, ",");
        struct jnode *prm = mk(P, JN_KWARG);
        prm->name = expect_namestr(P);
        if (accept_op(P, JO_ASSIGN)) prm->a = parse_expr(P);
        add(P, &n->list2, prm);
      }
      next(P);
    }
    n->a = parse_expr(P);
    if (n->a->kind != JN_CALL) pfail(P, "expected a macro call in {%% call %%}");
    expect_block_end(P);
    parse_body(P, &n->list, ends);
    next(P);
    expect_block_end(P);
  } else if (str_is(kw, "filter")) {
    static const char *const ends[] = {"endfilter", NULL};
    n = mk(P, JN_FILTERBLOCK);
    struct jnode *chain = parse_filter_one(P, mk(P, JN_BLOCKVAL));
    int links = 0;
    while (accept_op(P, JO_PIPE)) { chain_link(P, &links); chain = parse_filter_one(P, chain); }
    P->depth -= links;
    n->a = chain;
    expect_block_end(P);
    parse_body(P, &n->list, ends);
    next(P);
    expect_block_end(P);
  } else if (str_is(kw, "generation")) {
    /* transformers' AssistantTracker: marks assistant text, renders as its body */
    static const char *const ends[] = {"endgeneration", NULL};
    n = mk(P, JN_IF);
    n->a = mk(P, JN_LIT);
    n->a->lit = jv_bool(1);
    expect_block_end(P);
    parse_body(P, &n->list, ends);
    next(P);
    expect_block_end(P);
  } else if (str_is(kw, "break") || str_is(kw, "continue")) {
    n = mk(P, str_is(kw, "break") ? JN_BREAK : JN_CONTINUE);
    expect_block_end(P);
  } else {
    pfail(P, "unsupported construct '{%% %.*s %%}'", (int)kw.n, kw.p);
  }
  P->depth--;
  return n;
}

static int parse_body(struct parser *P, struct jnodes *body, const char *const *ends) {
  for (;;) {
    struct jtok *t = cur(P);
    if (t->kind == JT_EOF) {
      if (ends) {
        int last = 0;
        while (ends[last + 1]) last++;
        pfail(P, "unexpected end of template, expected '{%% %s %%}'", ends[last]);
      }
      return -1;
    }
    if (t->kind == JT_TEXT) {
      struct jnode *n = mk(P, JN_TEXT);
      n->lit = jv_strn(t->s.p, t->s.n);
      next(P);
      add(P, body, n);
    } else if (t->kind == JT_VAR_BEGIN) {
      next(P);
      struct jnode *n = mk(P, JN_OUTPUT);
      n->a = parse_expr(P);
      if (cur(P)->kind != JT_VAR_END) pfail(P, "expected '}}', got %s", tokdesc(cur(P)));
      next(P);
      add(P, body, n);
    } else if (t->kind == JT_BLOCK_BEGIN) {
      next(P);
      if (ends && cur(P)->kind == JT_NAME)
        for (int k = 0; ends[k]; k++)
          if (str_is(cur(P)->s, ends[k])) return k;
      if (cur(P)->kind == JT_NAME) {
        static const char *const closers[] = {"endif", "endfor", "elif", "else", "endmacro", "endset",
                                              "endcall", "endfilter", "endgeneration", NULL};
        for (int k = 0; closers[k]; k++)
          if (str_is(cur(P)->s, closers[k])) pfail(P, "unexpected '{%% %s %%}'", closers[k]);
      }
      add(P, body, parse_statement(P));
    } else {
      pfail(P, "unexpected %s", tokdesc(t));
    }
  }
}

int jinja_parse(const char *src, size_t n, struct jinja_program **out, struct hearth_err *err) {
  struct jinja_program *prog = calloc(1, sizeof *prog);
  if (!prog) return err_set(err, HEARTH_ERR_NOMEM, "out of memory loading a template");
  prog->arena.cap = 64u << 20;
  char msg[512];
  struct jtok *toks;
  int nt = jinja_lex(&prog->arena, src, n, &toks, msg, sizeof msg);
  if (nt < 0) {
    jinja_program_free(prog);
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s", msg);
  }
  struct parser *P = calloc(1, sizeof *P);
  if (!P) {
    jinja_program_free(prog);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory loading a template");
  }
  P->a = &prog->arena;
  P->t = toks;
  P->nt = nt;
  if (setjmp(P->jb)) {
    int rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s", P->msg);
    free(P);
    jinja_program_free(prog);
    return rc;
  }
  parse_body(P, &prog->body, NULL);
  free(P);
  *out = prog;
  return 0;
}

void jinja_program_free(struct jinja_program *p) {
  if (!p) return;
  jarena_free(&p->arena);
  free(p);
}
