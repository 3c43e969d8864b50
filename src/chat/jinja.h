/* chat/jinja.h — the Jinja subset interpreter behind chat templates (internal to src/chat).
 *
 * Three stages, one file each:
 *   jinja_lex.c     source → tokens, with jinja2's whitespace rules as transformers configures them
 *                   (trim_blocks, lstrip_blocks, `{%-`/`-%}`, a single trailing newline dropped);
 *   jinja_parse.c   tokens → an immutable AST; every unsupported construct, filter or test fails here,
 *                   naming the line;
 *   jinja_eval.c    AST + a context of values → output string, with Python/jinja2 value semantics
 *                   (jinja_value.c: values, printing, tojson; jinja_builtins.c: filters, tests, methods).
 *
 * Memory: everything a render creates lives in one arena that is dropped at the end of the render,
 * so an error anywhere simply unwinds (longjmp) to the render entry. The parsed program lives in its
 * own arena owned by struct jinja_program and is never written after parsing, which is what makes
 * concurrent renders of one program safe.
 */
#ifndef HEARTH_CHAT_JINJA_H
#define HEARTH_CHAT_JINJA_H
#include <jansson.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "hearth.h"

/* ---- arena ------------------------------------------------------------------------ */

/* A render's arena is also its meter: besides the bytes it hands out (cap) it counts the bytes
 * the render touches (work: allocated, copied, scanned, compared), because a step budget alone
 * lets a template loop a million times over an 8 MB string. Both limits jump to `fail`. */
struct jarena_chunk;
struct jarena {
  struct jarena_chunk *head;
  size_t used, cap;       /* bytes handed out / hard limit (0 = unlimited) */
  size_t work, max_work;  /* bytes touched so far / budget (0 = unmetered, as the parse arena) */
  jmp_buf *fail;          /* where to jump when a limit is hit (NULL: return NULL / do nothing) */
  char *fail_msg;         /* message buffer (at least 512 bytes) filled before the jump */
};
void *jarena_alloc(struct jarena *a, size_t n);   /* zeroed, 16-aligned; charged 2n (zeroing, first touch); NULL only without fail */
void jarena_free(struct jarena *a);
/* Adds n bytes of work; over max_work it fills fail_msg and jumps to fail. */
void jarena_charge(struct jarena *a, size_t n);
/* Fails the render with a message (jumps to fail); a no-op without fail. */
void jarena_fail(struct jarena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* How deep a value may nest for the walks that recurse over it (printing, repr, tojson, equality,
 * ordering, JSON input). Namespaces are mutable, so a value can contain itself
 * ({% set ns.a = [ns] %}): the depth limit is what ends the walk over such a cycle, and the work
 * budget what ends a walk over a shared structure ([a, a] nested 60 times) that is shallow but
 * exponentially wide. Values live in the render arena, so cycles need no freeing. */
#define JINJA_VALUE_DEPTH 200
/* Work is counted in byte-equivalents of memcmp (weights measured on x86-64, gcc -O2): a byte
 * copied, compared or searched is 1; a byte decoded to a code point and classified or case-mapped (utf8proc) costs about this many. */
#define JWORK_DECODE 32
/* ... and a byte walked to count or find code points (utf8_len, a string index) about this many */
#define JWORK_WALK 4

/* ---- values ------------------------------------------------------------------------- */

enum jv_kind {
  JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC, JV_LOOP
};

struct jstr { const char *p; size_t n; };
struct jlist;
struct jdict;
struct jfunc;
struct jloop;

struct jv {
  enum jv_kind kind;
  union {
    int b;
    int64_t i;
    double f;
    struct jstr s;
    struct jlist *l;   /* JV_LIST (tuple when l->tuple) */
    struct jdict *d;   /* JV_DICT and JV_NS (namespace: mutable attributes) */
    struct jfunc *fn;
    struct jloop *loop;
  } u;
  const char *undef_hint;  /* JV_UNDEF: what was missing, for error messages (may be NULL) */
};

struct jlist { size_t n, cap; struct jv *v; int tuple; };
struct jdict_entry { struct jv k, v; };
struct jdict { size_t n, cap; struct jdict_entry *e; };

static inline struct jv jv_undef(void) { struct jv v = {0}; return v; }
static inline struct jv jv_none(void) { struct jv v = {0}; v.kind = JV_NONE; return v; }
static inline struct jv jv_bool(int b) { struct jv v = {0}; v.kind = JV_BOOL; v.u.b = !!b; return v; }
static inline struct jv jv_int(int64_t i) { struct jv v = {0}; v.kind = JV_INT; v.u.i = i; return v; }
static inline struct jv jv_float(double f) { struct jv v = {0}; v.kind = JV_FLOAT; v.u.f = f; return v; }
static inline struct jv jv_strn(const char *p, size_t n) {
  struct jv v = {0}; v.kind = JV_STR; v.u.s.p = p; v.u.s.n = n; return v;
}

/* growable byte buffer inside an arena */
struct jbuf { struct jarena *a; char *p; size_t n, cap, limit; };
void jbuf_put(struct jbuf *b, const char *s, size_t n);
void jbuf_puts(struct jbuf *b, const char *s);
void jbuf_putc(struct jbuf *b, char c);
struct jv jbuf_value(struct jbuf *b);  /* the bytes so far as a string value (not copied) */

struct jv jv_str_copy(struct jarena *a, const char *p, size_t n);
struct jv jv_list_new(struct jarena *a, size_t cap);
void jv_list_push(struct jarena *a, struct jv list, struct jv item);
struct jv jv_dict_new(struct jarena *a, size_t cap);
void jv_dict_set(struct jarena *a, struct jv dict, struct jv key, struct jv val); /* insert or replace */
/* lookups are linear scans (dicts are small and keep order); each charges its scan to a */
struct jv *jv_dict_get(struct jarena *a, struct jv dict, struct jv key);          /* NULL if absent */
struct jv *jv_dict_gets(struct jarena *a, struct jv dict, const char *key, size_t n);

int jv_truthy(struct jv v);
/* Python ==; charges its work to a and fails through it past JINJA_VALUE_DEPTH. */
int jv_equal(struct jarena *a, struct jv x, struct jv y);
const char *jv_type_name(struct jv v);  /* Python's name: 'str', 'int', 'dict', ... */
size_t utf8_len(const char *p, size_t n); /* code points */

/* str(v) as Python/jinja2 prints it ({{ v }}): None, True, 1.5, ['a', 1], {'k': 'v'}. */
void jv_print(struct jbuf *out, struct jv v);
/* repr(v) */
void jv_repr(struct jbuf *out, struct jv v);
/* json.dumps(v, ensure_ascii, indent (<0: None), separators (NULL: default), sort_keys).
 * Returns 0, or -1 when v holds something JSON cannot encode (sets *bad to it). */
int jv_tojson(struct jbuf *out, struct jv v, int ensure_ascii, int indent, const char *item_sep,
              const char *key_sep, int sort_keys, struct jv *bad);
/* Python float repr (shortest round-trip), e.g. 1.0, 0.1, 1e-05, 1e+16, inf, nan. */
void jv_float_repr(char *buf, size_t cap, double f);

/* JSON ↔ values. Objects keep their key order. */
struct jv jv_from_json(struct jarena *a, json_t *j);

/* ---- tokens and AST ------------------------------------------------------------------- */

enum jtok_kind {
  JT_EOF = 0, JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
  JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP
};
/* operator codes for JT_OP tokens (and binary operators in the AST) */
enum jop {
  JO_ADD = 1, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW, JO_TILDE,
  JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE, JO_IN, JO_NOTIN,
  JO_ASSIGN, JO_LPAREN, JO_RPAREN, JO_LBRACKET, JO_RBRACKET, JO_LBRACE, JO_RBRACE,
  JO_COMMA, JO_DOT, JO_COLON, JO_PIPE
};

struct jtok {
  enum jtok_kind kind;
  int line;
  int op;           /* JT_OP */
  struct jstr s;    /* TEXT, NAME, STRING (unescaped) */
  int64_t i;
  double f;
};

/* Lexes src (a private copy is made in the arena). Returns the token count (last is JT_EOF) or
 * -1 with msg filled ("line N: ..."). */
int jinja_lex(struct jarena *a, const char *src, size_t n, struct jtok **out, char *msg, size_t msgcap);

enum jn_kind {
  /* expressions */
  JN_LIT = 1, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL, JN_KWARG,
  JN_FILTER, JN_TEST, JN_NOT, JN_NEG, JN_POS, JN_BINOP, JN_AND, JN_OR, JN_COMPARE, JN_COND, JN_CONCAT,
  JN_BLOCKVAL, /* the rendered body inside {% filter %} */
  /* statements */
  JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_CALLBLOCK, JN_FILTERBLOCK,
  JN_BREAK, JN_CONTINUE
};

struct jnode;
struct jnodes { struct jnode **v; int n, cap; };

struct jnode {
  enum jn_kind kind;
  int line;
  int op;                 /* JN_BINOP/JN_COMPARE operators; builtin id of JN_FILTER/JN_TEST; flags */
  int neg;                /* JN_TEST: `is not` */
  struct jstr name;       /* NAME, GETATTR attribute, KWARG name, FILTER/TEST/MACRO name */
  struct jv lit;          /* JN_LIT, JN_TEXT */
  struct jnode *a, *b, *c; /* operands: see jinja_parse.c for each kind */
  struct jnodes list;     /* items, arguments, body */
  struct jnodes list2;    /* else body, macro parameters, compare operands, for targets */
};

struct jinja_program {
  struct jarena arena;
  struct jnodes body;
};

/* Parses a template. On failure returns a negative HEARTH_ERR_* and fills err
 * ("template line N: unsupported construct 'x'"); *out is untouched. */
int jinja_parse(const char *src, size_t n, struct jinja_program **out, struct hearth_err *err);
void jinja_program_free(struct jinja_program *p);

/* builtin ids resolved at parse time; -1 when unknown */
int jinja_filter_id(const char *name, size_t n);
int jinja_test_id(const char *name, size_t n);

/* ---- evaluation ------------------------------------------------------------------------ */

struct jinja_limits {
  size_t max_output;      /* bytes of rendered text (default 8 MiB) */
  size_t max_memory;      /* arena bytes per render (default 256 MiB) */
  long max_steps;         /* loop iterations + macro calls (default 1,000,000) */
  int max_depth;          /* nested macro calls / filter blocks (default 64) */
  size_t max_work;        /* bytes touched (default 512 MiB + 64 per byte of variables' text) */
};

struct jctx;  /* evaluation state, private to jinja_eval.c / jinja_builtins.c */

/* Renders prog with the given variables (a JSON object; keys become template globals) plus the
 * callables raise_exception, strftime_now, range, namespace, dict. Returns 0 and a malloc'd,
 * NUL-terminated string in *out (caller frees), or a negative HEARTH_ERR_* with err filled:
 * HEARTH_ERR_ARG for raise_exception (message = the template's) and template runtime errors,
 * HEARTH_ERR_NOMEM for exceeded limits. Thread-safe for concurrent calls on one prog. */
int jinja_render(const struct jinja_program *prog, json_t *vars, const struct jinja_limits *lim,
                 char **out, size_t *out_len, struct hearth_err *err);

/* Error inside evaluation: formats the message and unwinds to jinja_render. */
_Noreturn void jctx_fail(struct jctx *c, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
struct jarena *jctx_arena(struct jctx *c);
/* calls a callable value (macro, builtin, bound method) with evaluated arguments */
struct jv jctx_call(struct jctx *c, int line, struct jv fn, struct jv *args, int nargs,
                    struct jstr *kwnames, struct jv *kwvals, int nkw);
/* str(v) as a new string value */
struct jv jctx_str(struct jctx *c, struct jv v);

/* builtins (jinja_builtins.c) */
struct jv jinja_apply_filter(struct jctx *c, int line, int id, struct jv v, struct jv *args, int nargs,
                             struct jstr *kwnames, struct jv *kwvals, int nkw);
int jinja_apply_test(struct jctx *c, int line, int id, struct jv v, struct jv *args, int nargs);
/* obj.name: dict methods, str methods, loop attributes, then keys. Undefined when absent. */
struct jv jinja_getattr(struct jctx *c, int line, struct jv obj, struct jstr name);
/* calls a bound method created by jinja_getattr */
struct jv jinja_call_method(struct jctx *c, int line, struct jfunc *fn, struct jv *args, int nargs,
                            struct jstr *kwnames, struct jv *kwvals, int nkw);

/* callables */
enum jfunc_kind { JF_MACRO = 1, JF_BUILTIN, JF_METHOD, JF_CALLER };
enum jbuiltin { JB_RANGE = 1, JB_NAMESPACE, JB_DICT, JB_RAISE, JB_STRFTIME, JB_CYCLE };
struct jfunc {
  enum jfunc_kind kind;
  int builtin;               /* JF_BUILTIN */
  const struct jnode *macro; /* JF_MACRO / JF_CALLER (the call block) */
  struct jv self;            /* JF_METHOD */
  struct jstr name;          /* method name */
  void *scope;               /* JF_CALLER: the scope the call block was written in */
};

struct jloop {
  int64_t index0, length;
  struct jv items;           /* the list being iterated */
  int depth0;
};

#endif
