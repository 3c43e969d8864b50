/* server/json_mask.c — the JSON recognizer, output programs and the per-step vocabulary mask. */
#include "server/json_mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tok/tokenizer.h"

enum {
  M_START,     /* before the top-level '{' */
  M_VALUE,     /* a value must come (after ':' or ',' in an array) */
  M_ARR_FIRST, /* after '[': a value or ']' */
  M_OBJ_FIRST, /* after '{': a key or '}' */
  M_OBJ_KEY,   /* after ',' in an object: a key */
  M_COLON,     /* after a key */
  M_AFTER,     /* after a value: ',' or the container's closer */
  M_STR,       /* inside a string */
  M_ESC,       /* after a backslash */
  M_HEX,       /* in \uXXXX: aux digits left, hex = the value so far */
  M_UTF8,      /* inside a multi-byte character: aux continuation bytes left, aux2 = range of the next */
  M_N_MINUS,   /* number: after '-' */
  M_N_ZERO,    /* a leading 0 */
  M_N_INT,     /* integer digits */
  M_N_DOT,     /* after '.' */
  M_N_FRAC,    /* fraction digits */
  M_N_E,       /* after e/E */
  M_N_ESIGN,   /* after the exponent's sign */
  M_N_EXP,     /* exponent digits */
  M_LIT,       /* true/false/null: aux = which, aux2 = bytes matched */
  M_DONE,      /* the top-level object is closed */
};

static const char *const LITS[3] = {"true", "false", "null"};

/* first continuation byte ranges after a lead byte (UTF-8, RFC 3629) */
enum { R_ANY, R_A0BF, R_809F, R_90BF, R_808F };

void jfsm_init(struct jfsm *s) { memset(s, 0, sizeof *s); s->mode = M_START; }
int jfsm_done(const struct jfsm *s) { return s->mode == M_DONE; }

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* a value ended: back to the container (or done at the top) */
static void value_done(struct jfsm *s) { s->mode = s->depth ? M_AFTER : M_DONE; }

static int open_container(struct jfsm *s, int array) {
  if (s->depth >= JFSM_MAX_DEPTH) return 0;
  if (array) s->arr |= 1ull << s->depth;
  else s->arr &= ~(1ull << s->depth);
  s->depth++;
  s->mode = array ? M_ARR_FIRST : M_OBJ_FIRST;
  return 1;
}

static int close_container(struct jfsm *s, int array) {
  if (!s->depth || (int)((s->arr >> (s->depth - 1)) & 1) != array) return 0;
  s->depth--;
  value_done(s);
  return 1;
}

/* the first byte of a value */
static int start_value(struct jfsm *s, unsigned char c) {
  switch (c) {
  case '{': return open_container(s, 0);
  case '[': return open_container(s, 1);
  case '"': s->mode = M_STR; s->key = 0; return 1;
  case '-': s->mode = M_N_MINUS; return 1;
  case '0': s->mode = M_N_ZERO; s->digits = 1; return 1;
  case 't': s->mode = M_LIT; s->aux = 0; s->aux2 = 1; return 1;
  case 'f': s->mode = M_LIT; s->aux = 1; s->aux2 = 1; return 1;
  case 'n': s->mode = M_LIT; s->aux = 2; s->aux2 = 1; return 1;
  default:
    if (c >= '1' && c <= '9') { s->mode = M_N_INT; s->digits = 1; return 1; }
    return 0;
  }
}

/* one more digit of the current number part: at most 15 (integer, fraction) or 2 (exponent) */
static int digit(struct jfsm *s, int max) {
  if (s->digits >= max) return 0;
  s->digits++;
  return 1;
}

/* the state after a value, given the next byte (also where a number's end lands) */
static int after_value(struct jfsm *s, unsigned char c) {
  if (!s->depth) return 0; /* a top-level number (JSEG_VALUE): its end is the program's business */
  if (c == ',') {
    s->mode = (s->arr >> (s->depth - 1)) & 1 ? M_VALUE : M_OBJ_KEY;
    return 1;
  }
  if (c == '}') return close_container(s, 0);
  if (c == ']') return close_container(s, 1);
  return 0;
}

static int step(struct jfsm *s, unsigned char c) {
  if (is_ws(c)) {
    switch (s->mode) {
    case M_START: case M_VALUE: case M_ARR_FIRST: case M_OBJ_FIRST: case M_OBJ_KEY: case M_COLON: case M_AFTER:
      if (s->ws >= JFSM_MAX_WS) return 0;
      s->ws++;
      return 1;
    case M_N_ZERO: case M_N_INT: case M_N_FRAC: case M_N_EXP: /* ends the number */
      if (s->ws >= JFSM_MAX_WS) return 0;
      s->mode = M_AFTER;
      s->ws++;
      return 1;
    default: break; /* inside a string: handled below; elsewhere refused */
    }
    if (s->mode != M_STR) return 0;
  } else if (s->mode != M_STR) {
    s->ws = 0;
  }
  switch (s->mode) {
  case M_START: return c == '{' ? open_container(s, 0) : 0;
  case M_VALUE: return start_value(s, c);
  case M_ARR_FIRST: return c == ']' ? close_container(s, 1) : start_value(s, c);
  case M_OBJ_FIRST:
    if (c == '}') return close_container(s, 0);
    /* fall through */
  case M_OBJ_KEY:
    if (c != '"') return 0;
    s->mode = M_STR;
    s->key = 1;
    return 1;
  case M_COLON:
    if (c != ':') return 0;
    s->mode = M_VALUE;
    return 1;
  case M_AFTER: return after_value(s, c);
  case M_STR:
    if (c == '"') {
      if (s->key) s->mode = M_COLON;
      else value_done(s);
      return 1;
    }
    if (c == '\\') { s->mode = M_ESC; return 1; }
    if (c < 0x20) return 0;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { s->mode = M_UTF8; s->aux = 1; s->aux2 = R_ANY; return 1; }
    if (c == 0xE0) { s->mode = M_UTF8; s->aux = 2; s->aux2 = R_A0BF; return 1; }
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) { s->mode = M_UTF8; s->aux = 2; s->aux2 = R_ANY; return 1; }
    if (c == 0xED) { s->mode = M_UTF8; s->aux = 2; s->aux2 = R_809F; return 1; }
    if (c == 0xF0) { s->mode = M_UTF8; s->aux = 3; s->aux2 = R_90BF; return 1; }
    if (c >= 0xF1 && c <= 0xF3) { s->mode = M_UTF8; s->aux = 3; s->aux2 = R_ANY; return 1; }
    if (c == 0xF4) { s->mode = M_UTF8; s->aux = 3; s->aux2 = R_808F; return 1; }
    return 0;
  case M_UTF8: {
    unsigned lo = 0x80, hi = 0xBF;
    if (s->aux2 == R_A0BF) lo = 0xA0;
    else if (s->aux2 == R_809F) hi = 0x9F;
    else if (s->aux2 == R_90BF) lo = 0x90;
    else if (s->aux2 == R_808F) hi = 0x8F;
    if (c < lo || c > hi) return 0;
    s->aux2 = R_ANY;
    if (--s->aux == 0) s->mode = M_STR;
    return 1;
  }
  case M_ESC:
    if (c == 'u') { s->mode = M_HEX; s->aux = 4; s->hex = 0; return 1; }
    if (!strchr("\"\\/bfnrt", c) || !c) return 0;
    s->mode = M_STR;
    return 1;
  case M_HEX: {
    if (!is_hex(c)) return 0;
    const unsigned v = is_digit(c) ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
    s->hex = (uint16_t)(s->hex << 4 | v);
    /* \uD8.. - \uDF.. can only end as a refused surrogate half: refuse the second digit already,
     * or a constrained answer could be left with no allowed token */
    if (s->aux == 3 && s->hex >= 0xD8 && s->hex <= 0xDF) return 0;
    if (--s->aux) return 1;
    if (s->hex == 0 || (s->hex >= 0xD800 && s->hex <= 0xDFFF)) return 0; /* NUL, surrogate halves */
    s->mode = M_STR;
    return 1;
  }
  case M_N_MINUS:
    if (c == '0') { s->mode = M_N_ZERO; s->digits = 1; return 1; }
    if (c >= '1' && c <= '9') { s->mode = M_N_INT; s->digits = 1; return 1; }
    return 0;
  case M_N_ZERO:
  case M_N_INT:
    if (s->mode == M_N_INT && is_digit(c)) return digit(s, 15);
    if (c == '.') { s->mode = M_N_DOT; s->digits = 0; return 1; }
    if (c == 'e' || c == 'E') { s->mode = M_N_E; s->digits = 0; return 1; }
    return after_value(s, c);
  case M_N_DOT:
    if (!is_digit(c)) return 0;
    s->mode = M_N_FRAC;
    s->digits = 1;
    return 1;
  case M_N_FRAC:
    if (is_digit(c)) return digit(s, 15);
    if (c == 'e' || c == 'E') { s->mode = M_N_E; s->digits = 0; return 1; }
    return after_value(s, c);
  case M_N_E:
    if (c == '+' || c == '-') { s->mode = M_N_ESIGN; return 1; }
    /* fall through */
  case M_N_ESIGN:
    if (!is_digit(c)) return 0;
    s->mode = M_N_EXP;
    s->digits = 1;
    return 1;
  case M_N_EXP:
    if (is_digit(c)) return digit(s, 2);
    return after_value(s, c);
  case M_LIT: {
    const char *lit = LITS[s->aux];
    if ((unsigned char)lit[s->aux2] != c) return 0;
    if (!lit[++s->aux2]) value_done(s);
    return 1;
  }
  default: return 0; /* M_DONE: nothing may follow */
  }
}

int jfsm_feed(struct jfsm *s, unsigned char c) {
  struct jfsm t = *s;
  if (!step(&t, c)) return 0;
  *s = t;
  return 1;
}

int jfsm_feed_all(struct jfsm *s, const char *p, size_t n) {
  struct jfsm t = *s;
  for (size_t i = 0; i < n; i++)
    if (!step(&t, (unsigned char)p[i])) return 0;
  *s = t;
  return 1;
}

/* ---- programs ----------------------------------------------------------------------------- */

static const struct jseg g_json_object_seg[1] = {{.kind = JSEG_OBJECT}};
static const struct jprog g_json_object = {.n_seg = 1, .seg = g_json_object_seg};
const struct jprog *jprog_json_object(void) { return &g_json_object; }

struct jprog *jprog_build(const struct jseg *seg, int n_seg, const char *const *names, int n_names) {
  size_t bytes = 0;
  for (int i = 0; i < n_seg; i++)
    if (seg[i].kind == JSEG_LIT) bytes += seg[i].n;
  for (int i = 0; i < n_names; i++) bytes += strlen(names[i]) + 1;
  const size_t head = sizeof(struct jprog) + (size_t)n_seg * sizeof(struct jseg) +
                      (size_t)n_names * (sizeof(char *) + sizeof(size_t));
  char *mem = calloc(1, head + bytes + 1);
  if (!mem) return NULL;
  struct jprog *p = (struct jprog *)mem;
  struct jseg *sg = (struct jseg *)(mem + sizeof *p);
  const char **nm = (const char **)(sg + n_seg);
  size_t *nl = (size_t *)(nm + n_names);
  char *txt = mem + head;
  for (int i = 0; i < n_seg; i++) {
    sg[i] = seg[i];
    if (seg[i].kind == JSEG_LIT) {
      memcpy(txt, seg[i].lit, seg[i].n);
      sg[i].lit = txt;
      txt += seg[i].n;
    }
  }
  for (int i = 0; i < n_names; i++) {
    nl[i] = strlen(names[i]);
    memcpy(txt, names[i], nl[i] + 1);
    nm[i] = txt;
    txt += nl[i] + 1;
  }
  p->n_seg = n_seg;
  p->seg = sg;
  p->n_names = n_names;
  p->names = nm;
  p->name_len = nl;
  p->own = mem;
  return p;
}

int jprog_name_ok(const char *name) {
  size_t l = strlen(name);
  if (!l || l > 64) return 0;
  for (size_t k = 0; k < l; k++) {
    char c = name[k];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.'))
      return 0;
  }
  return 1;
}

struct jprog *jprog_tool_call(const char *const *names, int n) {
  static const char open[] = "<tool_call>\n{\"name\": \"", mid[] = "\", \"arguments\": ", close[] = "}\n</tool_call>";
  if (n < 1 || n > JPROG_MAX_NAMES) return NULL;
  for (int i = 0; i < n; i++)
    if (!jprog_name_ok(names[i])) return NULL;
  const struct jseg seg[5] = {{.kind = JSEG_LIT, .lit = open, .n = sizeof open - 1},
                              {.kind = JSEG_NAME, .first = 0, .count = n},
                              {.kind = JSEG_LIT, .lit = mid, .n = sizeof mid - 1},
                              {.kind = JSEG_OBJECT},
                              {.kind = JSEG_LIT, .lit = close, .n = sizeof close - 1}};
  struct jprog *p = jprog_build(seg, 5, names, n);
  if (p) p->forbid = "</tool_call>"; /* inside an argument string it would end the call early */
  return p;
}

struct jprog *jprog_tool_call_args(const char *name, const struct jprog *args) {
  static const char open[] = "<tool_call>\n{\"name\": \"", mid[] = "\", \"arguments\": ", close[] = "}\n</tool_call>";
  if (!args || args->n_seg < 1 || !jprog_name_ok(name)) return NULL;
  for (int i = 0; i < args->n_names; i++) /* an enum value holding the closing tag would end the call early */
    if (strstr(args->names[i], "</tool_call>")) return NULL;
  const size_t nn = strlen(name), hn = sizeof open - 1 + nn + sizeof mid - 1;
  char *head = malloc(hn);
  struct jseg *seg = malloc((size_t)(args->n_seg + 2) * sizeof *seg);
  struct jprog *p = NULL;
  if (head && seg) {
    memcpy(head, open, sizeof open - 1);
    memcpy(head + sizeof open - 1, name, nn); /* jprog_name_ok: nothing to escape */
    memcpy(head + sizeof open - 1 + nn, mid, sizeof mid - 1);
    seg[0] = (struct jseg){.kind = JSEG_LIT, .lit = head, .n = hn};
    memcpy(seg + 1, args->seg, (size_t)args->n_seg * sizeof *seg); /* NAME/CHOICE ranges index args->names */
    seg[args->n_seg + 1] = (struct jseg){.kind = JSEG_LIT, .lit = close, .n = sizeof close - 1};
    p = jprog_build(seg, args->n_seg + 2, args->names, args->n_names);
    if (p) p->forbid = "</tool_call>";
  }
  free(head);
  free(seg);
  return p;
}

void jprog_free(struct jprog *p) {
  if (!p || p == &g_json_object) return;
  free(p->own); /* p itself lives in it */
}

static void enter(const struct jprog *p, struct jstate *s, int seg) {
  s->seg = (uint16_t)seg;
  s->pos = 0;
  s->fb = 0;
  const int cnt = seg < p->n_seg ? p->seg[seg].count : 0;
  s->names = cnt >= 64 ? ~0ull : (1ull << cnt) - 1;
  s->cnt = 0;
  s->ph = 0;
  jfsm_init(&s->j);
  if (seg < p->n_seg && p->seg[seg].kind == JSEG_VALUE) s->j.mode = M_VALUE; /* a value at depth 0 */
}

/* JSEG_ARRAY phases */
enum { A_OPEN, A_FIRST, A_ITEM, A_AFTER, A_SPACE, A_NEXT };

/* one byte of a choice among names[first .. first + count) (state: s->names, s->pos): 1 taken,
 * 0 refused, 2 the choice was complete and c belongs to what follows */
static int choice_step(const struct jprog *p, const struct jseg *g, struct jstate *s, unsigned char c) {
  uint64_t keep = 0;
  int ends = 0;
  for (int k = 0; k < g->count; k++) {
    if (!((s->names >> k) & 1)) continue;
    const int i = g->first + k;
    if (p->name_len[i] == s->pos) ends = 1;
    else if ((unsigned char)p->names[i][s->pos] == c) keep |= 1ull << k;
  }
  /* a whole name: the quote belongs to the next segment; a whole choice: the byte does if it
   * extends no other */
  if (ends && s->pos && (g->kind == JSEG_NAME ? c == '"' : !keep)) return 2;
  if (!keep) return 0;
  s->names = keep;
  s->pos++;
  return 1;
}

/* a top-level number that is complete and would not take c (JSEG_VALUE: the segment ends there) */
static int number_ends(const struct jfsm *j, int integer, unsigned char c) {
  if (j->depth) return 0;
  switch (j->mode) {
  case M_N_ZERO: return integer || !(c == '.' || c == 'e' || c == 'E');
  case M_N_INT: return !(is_digit(c) || (!integer && (c == '.' || c == 'e' || c == 'E')));
  case M_N_FRAC: return !(is_digit(c) || c == 'e' || c == 'E');
  case M_N_EXP: return !is_digit(c);
  default: return 0;
  }
}

/* the first byte of a JSEG_VALUE: its kind must be in vmask */
static int value_kind_ok(int vmask, unsigned char c) {
  switch (c) {
  case '"': return vmask & JV_STRING;
  case '{': return vmask & JV_OBJECT;
  case '[': return vmask & JV_ARRAY;
  case 't': case 'f': return vmask & JV_BOOL;
  case 'n': return vmask & JV_NULL;
  default: return (c == '-' || is_digit(c)) && (vmask & (JV_NUMBER | JV_INTEGER));
  }
}

void jstate_init(const struct jprog *p, struct jstate *s) {
  memset(s, 0, sizeof *s);
  enter(p, s, 0);
}

int jstate_done(const struct jprog *p, const struct jstate *s) { return s->seg >= p->n_seg; }

/* After a byte c that the recognizer took: 0 when c completes the program's forbidden string inside a JSON
 * string (a tool call's closing tag would end the call early), else 1. In every segment that holds JSON
 * strings: OBJECT, VALUE and the ARRAY items. */
static int forbid_ok(const struct jprog *p, struct jstate *s, unsigned char c) {
  if (!p->forbid) return 1;
  const int in_str = s->j.mode == M_STR || s->j.mode == M_ESC || s->j.mode == M_HEX || s->j.mode == M_UTF8;
  if (!in_str) s->fb = 0;
  else if (c == (unsigned char)p->forbid[s->fb]) {
    if (!p->forbid[++s->fb]) return 0;
  } else {
    s->fb = c == (unsigned char)p->forbid[0]; /* '<' does not recur in the forbidden string */
  }
  return 1;
}

static int pstep(const struct jprog *p, struct jstate *s, unsigned char c) {
  for (;;) {
    if (s->seg >= p->n_seg) return 0;
    const struct jseg *g = &p->seg[s->seg];
    if (g->kind == JSEG_LIT) {
      if ((unsigned char)g->lit[s->pos] != c) return 0;
      if (++s->pos == g->n) enter(p, s, s->seg + 1);
      return 1;
    }
    if (g->kind == JSEG_OBJECT) {
      if (!step(&s->j, c) || !forbid_ok(p, s, c)) return 0;
      if (jfsm_done(&s->j)) enter(p, s, s->seg + 1);
      return 1;
    }
    if (g->kind == JSEG_ARRAY) {
      switch (s->ph) {
      case A_OPEN:
        if (c != '[') return 0;
        s->ph = A_FIRST;
        return 1;
      case A_FIRST:
      case A_AFTER:
        if (c == ']') {
          if (s->cnt < g->imin) return 0;
          enter(p, s, s->seg + 1);
          return 1;
        }
        if (s->ph == A_AFTER) {
          if (c != ',' || s->cnt >= g->imax) return 0;
          s->ph = A_SPACE;
          return 1;
        }
        if (s->cnt >= g->imax) return 0; /* else the first item starts with c */
        /* fall through */
      case A_NEXT:
        if (s->ph == A_NEXT || s->ph == A_FIRST) {
          s->names = g->count >= 64 ? ~0ull : (1ull << g->count) - 1;
          s->pos = 0;
          jfsm_init(&s->j);
          s->j.mode = M_VALUE;
          s->ph = A_ITEM;
        }
        continue;
      case A_SPACE:
        if (c != ' ') return 0;
        s->ph = A_NEXT;
        return 1;
      default: /* A_ITEM */
        if (g->count) {
          const int r = choice_step(p, g, s, c);
          if (r == 2) { s->cnt++; s->ph = A_AFTER; continue; }
          return r;
        } else {
          const int integer = (g->vmask & (JV_NUMBER | JV_INTEGER)) == JV_INTEGER;
          if (number_ends(&s->j, integer, c)) { s->cnt++; s->ph = A_AFTER; continue; }
          if (s->j.mode == M_VALUE && !s->j.depth && !value_kind_ok(g->vmask, c)) return 0;
          if (!step(&s->j, c) || !forbid_ok(p, s, c)) return 0;
          if (jfsm_done(&s->j)) { s->cnt++; s->ph = A_AFTER; }
          return 1;
        }
      }
    }
    if (g->kind == JSEG_VALUE) {
      const int integer = (g->vmask & (JV_NUMBER | JV_INTEGER)) == JV_INTEGER;
      if (number_ends(&s->j, integer, c)) { /* c belongs to the next segment */
        enter(p, s, s->seg + 1);
        continue;
      }
      if (s->j.mode == M_VALUE && !s->j.depth && !value_kind_ok(g->vmask, c)) return 0;
      if (!step(&s->j, c) || !forbid_ok(p, s, c)) return 0;
      if (jfsm_done(&s->j)) enter(p, s, s->seg + 1);
      return 1;
    }
    /* JSEG_NAME, JSEG_CHOICE */
    const int r = choice_step(p, g, s, c);
    if (r == 2) {
      enter(p, s, s->seg + 1);
      continue;
    }
    return r;
  }
}

int jstate_feed_all(const struct jprog *p, struct jstate *s, const char *bytes, size_t n) {
  struct jstate t = *s;
  for (size_t i = 0; i < n; i++)
    if (!pstep(p, &t, (unsigned char)bytes[i])) return 0;
  *s = t;
  return 1;
}

/* ---- the vocabulary ----------------------------------------------------------------------- */

struct jtok { int32_t id; uint32_t off, len; };

/* tokens to walk, in byte order: positions idx[0..n) in tok, lcp[i] = bytes shared with the previous
 * one, jump[d][i] = the first position after i whose token shares at most d bytes with token i
 * (d < JV_JUMP): where to go when token i's byte d is refused */
#define JV_JUMP 3
struct jlist {
  int n;
  int32_t *idx;
  uint32_t *lcp;
  int32_t *jump[JV_JUMP];
};

struct jvocab {
  int nv;           /* ids below nv */
  char *blob;       /* every plain-text token's bytes */
  struct jtok *tok; /* sorted by bytes */
  int n;
  int32_t *pos;     /* [nv]: index in tok, or -1 */
  uint32_t max_len;
  struct jstate *stack; /* [max_len + 1] mask scratch (used by one engine thread only) */
  uint8_t *ok;        /* [nv] mask scratch */
  struct jlist all;   /* every token */
  /* inside a JSON string: [0] without, [1] with a closing tag to watch for (tool calls). Tokens of
   * plain string content (no quote, backslash or control byte, whole UTF-8 characters; for [1] also
   * no '<', which starts the tag) are taken as they are (taken, by id) and leave the recognizer where
   * it was; only the rest are stepped */
  struct jlist rest[2];
  uint8_t *taken[2];
};

static const char *g_sort_blob; /* qsort has no context argument in C11 */
static int cmp_tok(const void *a, const void *b) {
  const struct jtok *x = a, *y = b;
  uint32_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(g_sort_blob + x->off, g_sort_blob + y->off, n);
  if (c) return c;
  return x->len < y->len ? -1 : x->len > y->len;
}

/* L->idx[0..L->n) set: its lcp and jump tables. 0, or -1 on OOM. The jumps are built from the end:
 * the next token sharing at most d bytes with i is i + 1 when lcp[i + 1] <= d, else the one i + 1
 * jumps to. */
static int jlist_index(const struct jvocab *v, struct jlist *L) {
  L->lcp = malloc(((size_t)L->n + 1) * sizeof *L->lcp);
  for (int d = 0; d < JV_JUMP; d++) L->jump[d] = malloc(((size_t)L->n + 1) * sizeof(int32_t));
  if (!L->lcp || !L->jump[0] || !L->jump[1] || !L->jump[2]) return -1;
  for (int i = 0; i < L->n; i++) {
    uint32_t l = 0;
    if (i) {
      const struct jtok *a = &v->tok[L->idx[i - 1]], *b = &v->tok[L->idx[i]];
      while (l < a->len && l < b->len && v->blob[a->off + l] == v->blob[b->off + l]) l++;
    }
    L->lcp[i] = l;
  }
  for (int d = 0; d < JV_JUMP; d++) {
    L->jump[d][L->n] = L->n;
    for (int i = L->n - 1; i >= 0; i--)
      L->jump[d][i] = i + 1 >= L->n || L->lcp[i + 1] <= (uint32_t)d ? i + 1 : L->jump[d][i + 1];
  }
  return 0;
}

static void jlist_free(struct jlist *L) {
  free(L->idx);
  free(L->lcp);
  for (int d = 0; d < JV_JUMP; d++) free(L->jump[d]);
}

int jvocab_new(const struct tok *t, struct jvocab **out, struct hearth_err *err) {
  *out = NULL;
  struct jvocab *v = calloc(1, sizeof *v);
  if (!v) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  v->nv = tok_vocab_size(t);
  size_t total = 0;
  for (int32_t i = 0; i < v->nv; i++) {
    const char *p;
    size_t len;
    char b;
    if (!tok_token_bytes(t, i, &p, &len, &b) && len) total += len;
  }
  v->blob = malloc(total ? total : 1);
  v->tok = malloc((size_t)v->nv * sizeof *v->tok);
  v->pos = malloc((size_t)v->nv * sizeof *v->pos);
  if (!v->blob || !v->tok || !v->pos) {
    jvocab_free(v);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  }
  size_t off = 0;
  for (int32_t i = 0; i < v->nv; i++) {
    const char *p;
    size_t len;
    char b;
    v->pos[i] = -1;
    if (tok_token_bytes(t, i, &p, &len, &b) || !len) continue;
    memcpy(v->blob + off, p, len);
    v->tok[v->n++] = (struct jtok){i, (uint32_t)off, (uint32_t)len};
    off += len;
    if (len > v->max_len) v->max_len = (uint32_t)len;
  }
  g_sort_blob = v->blob;
  qsort(v->tok, (size_t)v->n, sizeof *v->tok, cmp_tok);
  for (int i = 0; i < v->n; i++) v->pos[v->tok[i].id] = i;
  v->stack = malloc((size_t)(v->max_len + 1) * sizeof *v->stack);
  v->ok = malloc((size_t)v->nv + 1);
  uint8_t *plain = malloc((size_t)v->n + 1); /* bit 0: string content, bit 1: holds a '<' */
  for (int k = 0; k < 3; k++) {
    struct jlist *L = k ? &v->rest[k - 1] : &v->all;
    L->idx = malloc(((size_t)v->n + 1) * sizeof *L->idx);
  }
  v->taken[0] = calloc((size_t)v->nv + 1, 1);
  v->taken[1] = calloc((size_t)v->nv + 1, 1);
  int bad = !v->stack || !v->ok || !plain || !v->all.idx || !v->rest[0].idx || !v->rest[1].idx || !v->taken[0] ||
            !v->taken[1];
  for (int i = 0; !bad && i < v->n; i++) {
    struct jfsm s;
    jfsm_init(&s);
    s.mode = M_STR;
    const unsigned char *b = (const unsigned char *)v->blob + v->tok[i].off;
    uint32_t k = 0;
    while (k < v->tok[i].len && b[k] != '"' && b[k] != '\\' && step(&s, b[k])) k++;
    plain[i] = (uint8_t)((k == v->tok[i].len && s.mode == M_STR) | (memchr(b, '<', v->tok[i].len) ? 2 : 0));
  }
  for (int k = 0; !bad && k < 3; k++) {
    struct jlist *L = k ? &v->rest[k - 1] : &v->all;
    const uint8_t m = k == 2 ? 3 : 1;
    for (int i = 0; i < v->n; i++) {
      if (k && (plain[i] & m) == 1) v->taken[k - 1][v->tok[i].id] = 1;
      else L->idx[L->n++] = i;
    }
    bad = jlist_index(v, L);
  }
  free(plain);
  if (bad) {
    jvocab_free(v);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  }
  *out = v;
  return 0;
}

void jvocab_free(struct jvocab *v) {
  if (!v) return;
  jlist_free(&v->all);
  for (int k = 0; k < 2; k++) {
    jlist_free(&v->rest[k]);
    free(v->taken[k]);
  }
  free(v->blob);
  free(v->tok);
  free(v->pos);
  free(v->stack);
  free(v->ok);
  free(v);
}

int jvocab_bytes(const struct jvocab *v, int32_t id, const char **p, size_t *len) {
  if (id < 0 || id >= v->nv || v->pos[id] < 0) return -1;
  const struct jtok *t = &v->tok[v->pos[id]];
  *p = v->blob + t->off;
  *len = t->len;
  return 0;
}

/* Walks the sorted tokens keeping the recognizer's state after each prefix length of the current
 * token (stack[d]); a token sharing l bytes with the previous one restarts at min(l, the depth the
 * previous one got to), so each step costs the bytes not shared — the trie's size, not the sum of
 * the token lengths. */
/* steps the tokens of L from the state on the stack's bottom; marks the ones taken in ok */
static void walk_list(const struct jvocab *v, const struct jprog *p, const struct jlist *L, uint8_t *ok) {
  struct jstate *st = v->stack;
  uint32_t good = 0; /* stack[0..good] are valid for the previous token's bytes */
  for (int i = 0; i < L->n; i++) {
    const struct jtok *t = &v->tok[L->idx[i]];
    uint32_t d = L->lcp[i] < good ? L->lcp[i] : good;
    const unsigned char *b = (const unsigned char *)v->blob + t->off;
    while (d < t->len) {
      st[d + 1] = st[d];
      if (!pstep(p, &st[d + 1], b[d])) break;
      d++;
    }
    good = d;
    if (d == t->len) {
      ok[t->id] = 1;
    } else { /* byte d refused: so is every following token that shares bytes 0..d with this one */
      int j = d < JV_JUMP ? L->jump[d][i] : i + 1;
      while (j < L->n && L->lcp[j] > d) j++;
      i = j - 1;
    }
  }
}

int jvocab_mask(const struct jvocab *v, const struct jprog *p, const struct jstate *s, float *logits, int nv) {
  uint8_t *ok = v->ok;
  v->stack[0] = *s;
  /* inside a JSON string of an OBJECT / VALUE / ARRAY-item segment every plain token is taken as it
   * is (in a tool call's strings, which watch for the closing tag, those without a '<' when no part
   * of the tag is pending): only the others are stepped */
  int in_str = 0;
  if (s->seg < p->n_seg && (!p->forbid || (p->forbid[0] == '<' && !s->fb))) {
    const struct jseg *g = &p->seg[s->seg];
    in_str = s->j.mode == M_STR &&
             (g->kind == JSEG_OBJECT || g->kind == JSEG_VALUE || (g->kind == JSEG_ARRAY && s->ph == A_ITEM && !g->count));
  }
  if (in_str) {
    const int k = p->forbid ? 1 : 0;
    memcpy(ok, v->taken[k], (size_t)v->nv);
    walk_list(v, p, &v->rest[k], ok);
  } else {
    memset(ok, 0, (size_t)v->nv);
    walk_list(v, p, &v->all, ok);
  }
  int left = 0;
  const int m = nv < v->nv ? nv : v->nv;
  for (int i = 0; i < m; i++) {
    left += ok[i];
    logits[i] = ok[i] ? logits[i] : -INFINITY;
  }
  for (int i = m; i < nv; i++) logits[i] = -INFINITY;
  return left;
}
