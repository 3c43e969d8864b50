/* tools/chat_input.c — reads one user turn for `hearth chat` (chat_input.h has the rules). Owns only
 * line editing rules; what a turn means is cmd_chat.c's business. */
#include "chat_input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends len bytes of s to the turn buffer; returns -1 when out of memory. */
static int buf_add(char **b, size_t *n, size_t *cap, const char *s, size_t len) {
  if (*n + len + 1 > *cap) {
    size_t c = *cap ? *cap : 256;
    while (c < *n + len + 1) c *= 2;
    char *g = realloc(*b, c);
    if (!g) return -1;
    *b = g;
    *cap = c;
  }
  memcpy(*b + *n, s, len);
  *n += len;
  (*b)[*n] = 0;
  return 0;
}

static int ends_with_quotes(const char *s, size_t len) { return len >= 3 && !memcmp(s + len - 3, "\"\"\"", 3); }

int chat_input_read(FILE *in, FILE *prompt_out, char **text) {
  char *line = NULL, *b = NULL;
  size_t line_cap = 0, n = 0, cap = 0;
  int in_block = 0, more = 0, rc = CHAT_INPUT_EOF;
  *text = NULL;
  for (;;) {
    if (prompt_out) {
      fputs(in_block || more ? "... " : ">>> ", prompt_out);
      fflush(prompt_out);
    }
    errno = 0;
    ssize_t got = getline(&line, &line_cap, in);
    if (got < 0) {
      rc = errno == EINTR ? CHAT_INPUT_INTERRUPTED : CHAT_INPUT_EOF;
      /* an unfinished block or continuation at EOF is still a turn: the user typed it */
      if (rc == CHAT_INPUT_EOF && n) rc = CHAT_INPUT_TEXT;
      break;
    }
    size_t len = (size_t)got;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    const char *s = line;
    if (!in_block && !more && len >= 3 && !memcmp(s, "\"\"\"", 3)) { /* a block opens */
      s += 3;
      len -= 3;
      if (ends_with_quotes(s, len)) { /* """text""" on one line */
        if (buf_add(&b, &n, &cap, s, len - 3)) { rc = CHAT_INPUT_NOMEM; break; }
        rc = CHAT_INPUT_TEXT;
        break;
      }
      in_block = 1;
      if (len && buf_add(&b, &n, &cap, s, len)) { rc = CHAT_INPUT_NOMEM; break; }
      if (len && buf_add(&b, &n, &cap, "\n", 1)) { rc = CHAT_INPUT_NOMEM; break; }
      continue;
    }
    if (in_block) {
      if (ends_with_quotes(s, len)) {
        if (buf_add(&b, &n, &cap, s, len - 3)) { rc = CHAT_INPUT_NOMEM; break; }
        while (n && b[n - 1] == '\n') b[--n] = 0; /* the newline before a closing """ on its own line */
        rc = CHAT_INPUT_TEXT;
        break;
      }
      if (buf_add(&b, &n, &cap, s, len) || buf_add(&b, &n, &cap, "\n", 1)) { rc = CHAT_INPUT_NOMEM; break; }
      continue;
    }
    more = len && s[len - 1] == '\\';
    if (more) {
      if (buf_add(&b, &n, &cap, s, len - 1) || buf_add(&b, &n, &cap, "\n", 1)) { rc = CHAT_INPUT_NOMEM; break; }
      continue;
    }
    if (buf_add(&b, &n, &cap, s, len)) { rc = CHAT_INPUT_NOMEM; break; }
    if (n == 0) continue; /* an empty line is no turn */
    rc = CHAT_INPUT_TEXT;
    break;
  }
  free(line);
  if (rc == CHAT_INPUT_TEXT && !b) b = calloc(1, 1); /* an empty block """""" is an empty turn */
  if (rc == CHAT_INPUT_TEXT && !b) rc = CHAT_INPUT_NOMEM;
  if (rc != CHAT_INPUT_TEXT) {
    free(b);
    b = NULL;
  }
  *text = b;
  return rc;
}
