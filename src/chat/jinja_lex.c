/* chat/jinja_lex.c — template source → tokens, with jinja2's whitespace rules.
 *
 * Owns the exact whitespace behaviour of the environment transformers builds for chat templates
 * (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), keep_trailing_newline=False):
 *   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after it;
 *   - trim_blocks: one newline right after `%}` or `#}` is dropped (not after `}}`);
 *   - lstrip_blocks: spaces/tabs between a line start and `{%`/`{#` are dropped (not before `{{`),
 *     unless the tag is written `{%+`;
 *   - one trailing newline at the end of the source is dropped; \r\n and \r become \n.
 * Comments vanish here. Tokens inside tags are names, literals and operators; keywords are names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

struct lexer {
  struct jarena *a;
  const char *s;
  size_t n, pos;
  int line;
  struct jtok *t;
  int nt, cap;
  char *msg;
  size_t msgcap;
};

static struct jtok *push(struct lexer *L, enum jtok_kind k) {
  if (L->nt == L->cap) {
    int cap = L->cap ? L->cap * 2 : 256;
    struct jtok *nt = jarena_alloc(L->a, (size_t)cap * sizeof *nt);
    if (!nt) return NULL;
    if (L->nt) memcpy(nt, L->t, (size_t)L->nt * sizeof *nt);
    L->t = nt;
    L->cap = cap;
  }
  struct jtok *t = &L->t[L->nt++];
  memset(t, 0, sizeof *t);
  t->kind = k;
  t->line = L->line;
  return t;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int count_nl(const char *p, size_t n) {
  int k = 0;
  for (size_t i = 0; i < n; i++) k += p[i] == '\n';
  return k;
}

static int fail(struct lexer *L, const char *what) {
  snprintf(L->msg, L->msgcap, "template line %d: %s", L->line, what);
  return -1;
}

static void put_utf8(char *d, size_t *k, unsigned cp) {
  if (cp < 0x80) d[(*k)++] = (char)cp;
  else if (cp < 0x800) { d[(*k)++] = (char)(0xC0 | (cp >> 6)); d[(*k)++] = (char)(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    d[(*k)++] = (char)(0xE0 | (cp >> 12)); d[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    d[(*k)++] = (char)(0x80 | (cp & 0x3F));
  } else {
    d[(*k)++] = (char)(0xF0 | (cp >> 18)); d[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F)); d[(*k)++] = (char)(0x80 | (cp & 0x3F));
  }
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A string literal, unescaped as Python's "unicode-escape" codec does (what jinja2 uses). */
static int lex_string(struct lexer *L) {
  char q = L->s[L->pos];
  size_t i = L->pos + 1;
  while (i < L->n && L->s[i] != q) {
    if (L->s[i] == '\\') i++;
    i++;
  }
  if (i >= L->n) return fail(L, "unterminated string literal");
  const char *p = L->s + L->pos + 1;
  size_t len = i - L->pos - 1;
  char *d = jarena_alloc(L->a, len * 2 + 1);
  if (!d) return fail(L, "out of memory");
  size_t k = 0;
  struct jtok *t = push(L, JT_STRING);
  if (!t) return fail(L, "out of memory");
  for (size_t j = 0; j < len; j++) {
    if (p[j] != '\\' || j + 1 >= len) { d[k++] = p[j]; continue; }
    char c = p[++j];
    int hd = 0;
    switch (c) {
    case 'n': d[k++] = '\n'; break;
    case 't': d[k++] = '\t'; break;
    case 'r': d[k++] = '\r'; break;
    case '\\': d[k++] = '\\'; break;
    case '\'': d[k++] = '\''; break;
    case '"': d[k++] = '"'; break;
    case 'a': d[k++] = '\a'; break;
    case 'b': d[k++] = '\b'; break;
    case 'f': d[k++] = '\f'; break;
    case 'v': d[k++] = '\v'; break;
    case '\n': break; /* line continuation */
    case 'x': hd = 2; break;
    case 'u': hd = 4; break;
    case 'U': hd = 8; break;
    default:
      if (c >= '0' && c <= '7') {
        unsigned v = 0;
        int m = 0;
        while (m < 3 && j < len && p[j] >= '0' && p[j] <= '7') v = v * 8 + (unsigned)(p[j++] - '0'), m++;
        j--;
        put_utf8(d, &k, v);
      } else {
        d[k++] = '\\';
        d[k++] = c;
      }
    }
    if (hd) {
      unsigned v = 0;
      for (int m = 0; m < hd; m++) {
        if (j + 1 >= len || hexval(p[j + 1]) < 0) return fail(L, "truncated \\x/\\u escape in string literal");
        v = v * 16 + (unsigned)hexval(p[++j]);
      }
      if (v > 0x10FFFF) return fail(L, "invalid \\U escape in string literal");
      put_utf8(d, &k, v);
    }
  }
  d[k] = 0;
  t->s.p = d;
  t->s.n = k;
  L->line += count_nl(p, len);
  L->pos = i + 1;
  return 0;
}

static const struct { const char *s; int op; } OPS[] = {
  {"//", JO_FLOORDIV}, {"**", JO_POW}, {"==", JO_EQ}, {"!=", JO_NE}, {"<=", JO_LE}, {">=", JO_GE},
  {"+", JO_ADD}, {"-", JO_SUB}, {"*", JO_MUL}, {"/", JO_DIV}, {"%", JO_MOD}, {"~", JO_TILDE},
  {"<", JO_LT}, {">", JO_GT}, {"=", JO_ASSIGN}, {"(", JO_LPAREN}, {")", JO_RPAREN},
  {"[", JO_LBRACKET}, {"]", JO_RBRACKET}, {"{", JO_LBRACE}, {"}", JO_RBRACE}, {",", JO_COMMA},
  {".", JO_DOT}, {":", JO_COLON}, {"|", JO_PIPE},
};

/* Lexes the inside of a {{ }} or {% %} tag up to and including its end marker. */
static int lex_tag(struct lexer *L, int is_block, int *strip_after) {
  const char *end = is_block ? "%}" : "}}";
  int depth = 0; /* brackets: a '}' inside braces is not the tag end */
  for (;;) {
    while (L->pos < L->n && is_ws(L->s[L->pos])) {
      if (L->s[L->pos] == '\n') L->line++;
      L->pos++;
    }
    if (L->pos >= L->n) return fail(L, is_block ? "unclosed block tag '{%'" : "unclosed variable tag '{{'");
    const char *p = L->s + L->pos;
    size_t left = L->n - L->pos;
    if (depth == 0 || is_block) {
      if (left >= 3 && (p[0] == '-' || p[0] == '+') && !memcmp(p + 1, end, 2)) {
        *strip_after = p[0] == '-' ? 1 : -1;
        L->pos += 3;
        return 0;
      }
      if (left >= 2 && !memcmp(p, end, 2) && (depth == 0)) {
        *strip_after = 0;
        L->pos += 2;
        return 0;
      }
    }
    char c = p[0];
    if (is_name0(c)) {
      size_t k = 1;
      while (k < left && (is_name0(p[k]) || is_digit(p[k]))) k++;
      struct jtok *t = push(L, JT_NAME);
      if (!t) return fail(L, "out of memory");
      t->s.p = p;
      t->s.n = k;
      L->pos += k;
    } else if (is_digit(c)) {
      size_t k = 0;
      int isf = 0;
      while (k < left && (is_digit(p[k]) || p[k] == '_')) k++;
      if (k + 1 < left && p[k] == '.' && is_digit(p[k + 1])) {
        isf = 1;
        k++;
        while (k < left && (is_digit(p[k]) || p[k] == '_')) k++;
      }
      if (k < left && (p[k] == 'e' || p[k] == 'E')) {
        size_t e = k + 1;
        if (e < left && (p[e] == '+' || p[e] == '-')) e++;
        if (e < left && is_digit(p[e])) {
          isf = 1;
          k = e;
          while (k < left && is_digit(p[k])) k++;
        }
      }
      char buf[64];
      size_t bn = 0;
      for (size_t j = 0; j < k && bn < sizeof buf - 1; j++)
        if (p[j] != '_') buf[bn++] = p[j];
      buf[bn] = 0;
      struct jtok *t = push(L, isf ? JT_FLOAT : JT_INT);
      if (!t) return fail(L, "out of memory");
      if (isf) t->f = strtod(buf, NULL);
      else t->i = strtoll(buf, NULL, 10);
      L->pos += k;
    } else if (c == '\'' || c == '"') {
      if (lex_string(L)) return -1;
    } else {
      size_t k;
      for (k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        size_t ol = strlen(OPS[k].s);
        if (left >= ol && !memcmp(p, OPS[k].s, ol)) break;
      }
      if (k == sizeof OPS / sizeof OPS[0]) {
        char m[64];
        snprintf(m, sizeof m, "unexpected character '%c' in tag", c);
        return fail(L, m);
      }
      struct jtok *t = push(L, JT_OP);
      if (!t) return fail(L, "out of memory");
      t->op = OPS[k].op;
      if (t->op == JO_LPAREN || t->op == JO_LBRACKET || t->op == JO_LBRACE) depth++;
      if ((t->op == JO_RPAREN || t->op == JO_RBRACKET || t->op == JO_RBRACE) && depth > 0) depth--;
      L->pos += strlen(OPS[k].s);
    }
  }
}

int jinja_lex(struct jarena *a, const char *src0, size_t n0, struct jtok **out, char *msg, size_t msgcap) {
  /* normalise newlines and drop one trailing newline (keep_trailing_newline=False) */
  char *src = jarena_alloc(a, n0 + 1);
  if (!src) { snprintf(msg, msgcap, "out of memory"); return -1; }
  size_t n = 0;
  for (size_t i = 0; i < n0; i++) {
    if (src0[i] == '\r') {
      src[n++] = '\n';
      if (i + 1 < n0 && src0[i + 1] == '\n') i++;
    } else {
      src[n++] = src0[i];
    }
  }
  if (n && src[n - 1] == '\n') n--;
  src[n] = 0;

  struct lexer L = {.a = a, .s = src, .n = n, .line = 1, .msg = msg, .msgcap = msgcap};
  int line_starting = 1;
  while (L.pos < n) {
    /* find the next tag opener */
    size_t t = L.pos;
    int kind = 0; /* 1 var, 2 block, 3 comment */
    while (t + 1 < n) {
      if (src[t] == '{' && (src[t + 1] == '{' || src[t + 1] == '%' || src[t + 1] == '#')) {
        kind = src[t + 1] == '{' ? 1 : src[t + 1] == '%' ? 2 : 3;
        break;
      }
      t++;
    }
    if (!kind) t = n;
    const char *text = src + L.pos;
    size_t tlen = t - L.pos;
    char mod = 0;
    if (kind && t + 2 < n && (src[t + 2] == '-' || src[t + 2] == '+')) mod = src[t + 2];
    if (kind && mod == '-') {
      while (tlen && is_ws(text[tlen - 1])) tlen--;
    } else if (kind && mod != '+' && kind != 1) {
      /* lstrip_blocks */
      size_t lpos = tlen;
      while (lpos && text[lpos - 1] != '\n') lpos--;
      if (lpos > 0 || line_starting) {
        size_t j = lpos;
        while (j < tlen && is_ws(text[j]) && text[j] != '\n') j++;
        if (j == tlen && tlen > lpos) tlen = lpos;
      }
    }
    if (tlen) {
      struct jtok *tk = push(&L, JT_TEXT);
      if (!tk) return fail(&L, "out of memory");
      tk->s.p = text;
      tk->s.n = tlen;
    }
    L.line += count_nl(src + L.pos, t - L.pos);
    if (!kind) break;
    L.pos = t + 2 + (mod ? 1 : 0);
    int strip_after = 0;
    if (kind == 3) {
      const char *e = NULL;
      for (size_t j = L.pos; j + 1 < n; j++)
        if (src[j] == '#' && src[j + 1] == '}') { e = src + j; break; }
      if (!e) return fail(&L, "unclosed comment '{#'");
      size_t ep = (size_t)(e - src);
      if (ep > L.pos && src[ep - 1] == '-') strip_after = 1;
      else if (ep > L.pos && src[ep - 1] == '+') strip_after = -1;
      L.line += count_nl(src + L.pos, ep - L.pos);
      L.pos = ep + 2;
    } else {
      struct jtok *tk = push(&L, kind == 1 ? JT_VAR_BEGIN : JT_BLOCK_BEGIN);
      if (!tk) return fail(&L, "out of memory");
      if (lex_tag(&L, kind == 2, &strip_after)) return -1;
      tk = push(&L, kind == 1 ? JT_VAR_END : JT_BLOCK_END);
      if (!tk) return fail(&L, "out of memory");
    }
    line_starting = 0;
    if (strip_after == 1) {
      while (L.pos < n && is_ws(src[L.pos])) {
        if (src[L.pos] == '\n') L.line++;
        L.pos++;
      }
      line_starting = src[L.pos - 1] == '\n';
    } else if (strip_after == 0 && kind != 1 && L.pos < n && src[L.pos] == '\n') {
      L.pos++;
      L.line++;
      line_starting = 1;
    }
  }
  if (!push(&L, JT_EOF)) return fail(&L, "out of memory");
  *out = L.t;
  return L.nt;
}
