/* tools/chat_input.h — one user turn of `hearth chat`, read from a terminal or a pipe.
 *
 * Rules (also in `hearth chat --help`):
 *   - a line is a turn; an empty line is skipped;
 *   - a line ending in a backslash continues on the next line (the backslash becomes a newline);
 *   - a line starting with """ opens a block that runs until a line ending with """; the block's
 *     lines, newlines included, are one turn ("""one line""" works too).
 * Commands such as /clear are the caller's: a turn's text is returned as typed. */
#ifndef HEARTH_TOOLS_CHAT_INPUT_H
#define HEARTH_TOOLS_CHAT_INPUT_H
#include <stdio.h>

enum chat_input_status {
  CHAT_INPUT_TEXT = 0,        /* *text holds a turn (malloc'd, NUL-terminated, no trailing newline) */
  CHAT_INPUT_EOF = 1,         /* end of input with nothing pending */
  CHAT_INPUT_INTERRUPTED = 2, /* a signal (Ctrl-C) interrupted the read; what was typed is dropped */
  CHAT_INPUT_NOMEM = -1,
};

/* Reads the next turn from in. prompt_out: where to print the ">>> " / "... " prompts (NULL: none,
 * for piped input). Returns a chat_input_status; *text is NULL unless CHAT_INPUT_TEXT. */
int chat_input_read(FILE *in, FILE *prompt_out, char **text);
#endif
