/* chat/parse.h — splitting generated text into content, reasoning and OpenAI tool calls.
 *
 * Incremental: push text deltas as they are decoded; each push returns the content and
 * reasoning that are now certain plus the tool calls completed so far. Text that might be the
 * start of a marker (e.g. a trailing "<tool") is held back until the next push or finish, so the
 * concatenation of all deltas equals what a one-shot parse of the whole text gives.
 *
 * Formats (enum chat_format in chat/template.h):
 *   QWEN     reasoning `<think>\n…\n</think>\n\n` (newlines next to the tags are dropped, as the
 *            Qwen3 template strips them when re-rendering); tool calls
 *            `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`.
 *   GEMMA4   reasoning `<|channel>thought\n…<channel|>`; tool calls
 *            `<|tool_call>call:NAME{key:value,…}<tool_call|>` where strings are quoted with
 *            `<|"|>` and keys are bare.
 * A tool call that cannot be parsed is passed through as content, unchanged.
 * Tool calls come out in the OpenAI shape:
 *   {"id": "call_…", "type": "function", "function": {"name": "…", "arguments": "<JSON text>"}}
 */
#ifndef HEARTH_CHAT_PARSE_H
#define HEARTH_CHAT_PARSE_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/template.h"
#include "hearth.h"

struct chat_parser_opts {
  enum chat_format format;
  int start_in_reasoning;  /* the prompt already opened a reasoning block (e.g. ends in "<think>\n") */
  int no_reasoning;        /* leave reasoning markers in the content */
  int no_tools;            /* leave tool-call markers in the content */
  uint64_t id_seed;        /* seed for tool-call ids (0: time-based) */
};

/* What one push/finish produced. Strings are malloc'd and NUL-terminated (never NULL after a
 * successful call, possibly ""); tool_calls is a JSON array (possibly empty). Free with
 * chat_delta_clear. */
struct chat_delta {
  char *content;
  char *reasoning;
  json_t *tool_calls;
};

struct chat_parser;

/* Fills opts for a template and the prompt rendered with it: the format, and whether generation
 * starts inside a reasoning block (prompt ends with an open "<think>" / "<|channel>thought"). */
void chat_parser_opts_for(const struct chat_template *t, const char *prompt, struct chat_parser_opts *opts);

int chat_parser_new(const struct chat_parser_opts *opts, struct chat_parser **out, struct hearth_err *err);
/* Feeds n bytes of generated text. On failure (HEARTH_ERR_NOMEM) d is empty and the parser unusable. */
int chat_parser_push(struct chat_parser *p, const char *text, size_t n, struct chat_delta *d, struct hearth_err *err);
/* Flushes held-back text at the end of generation (an unterminated tool call becomes content,
 * an unterminated reasoning block stays reasoning). */
int chat_parser_finish(struct chat_parser *p, struct chat_delta *d, struct hearth_err *err);
void chat_delta_clear(struct chat_delta *d);
void chat_parser_free(struct chat_parser *p);

/* One-shot helper: the whole text → content, reasoning and tool calls. */
int chat_parse_all(const struct chat_parser_opts *opts, const char *text, size_t n, struct chat_delta *d,
                   struct hearth_err *err);

#endif
