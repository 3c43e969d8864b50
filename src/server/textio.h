/* server/textio.h — the one place where the server meets the tokenizer (tok/tokenizer.h), the
 * chat templates (chat/template.h) and the output parser (chat/parse.h). Endpoints see only this.
 *
 * Threading: a loaded textio is immutable and shared by all connection threads; a textio_parser
 * belongs to one request.
 */
#ifndef HEARTH_SERVER_TEXTIO_H
#define HEARTH_SERVER_TEXTIO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "hearth.h"
#include "server/sbuf.h"

struct textio;
struct tok;

/* Loads dir/tokenizer.json (+ tokenizer_config.json) and, when present, the chat template
 * (tokenizer_config.json "chat_template" or chat_template.jinja). A template that is there but
 * does not load is not an error: a warning naming the file and the parse error goes to stderr and
 * textio_template_error() keeps it for the chat requests. */
int textio_load(const char *dir, struct textio **out, struct hearth_err *err);
void textio_free(struct textio *t);
const struct tok *textio_tok(const struct textio *t);
int textio_has_template(const struct textio *t);
/* Why the model directory's chat template failed to load ("DIR/chat_template.jinja: template
 * line N: ..."), or NULL when it loaded or the directory has none. The model still serves
 * completions, tokenization and embeddings; chat requests answer with this error. */
const char *textio_template_error(const struct textio *t);
/* 1 when the chat template teaches Qwen's tool-call syntax (<tool_call>{json}</tool_call>): the
 * format a forced tool call (tool_choice "required" or named) is decoded in */
int textio_qwen_tool_calls(const struct textio *t);

/* Text → ids (*ids malloc'd). add_special: the tokenizer's post-processor (BOS/EOS), as HF does
 * for plain prompts; special tokens written in the text are parsed as specials. */
int textio_encode(const struct textio *t, const char *text, size_t len, int add_special,
                  int32_t **ids, int *n, struct hearth_err *err);
/* ids → text (*text malloc'd, valid UTF-8). Ids at or past the tokenizer's vocabulary (padding
 * rows of the embedding table) and negative ids decode as empty text. */
int textio_decode(const struct textio *t, const int32_t *ids, int n, int skip_special, char **text,
                  size_t *len, struct hearth_err *err);
/* Renders a chat (messages: the request's array; tools: array or NULL; kwargs: object or NULL)
 * with add_generation_prompt. *out malloc'd. HEARTH_ERR_ARG (with a message naming the field) for
 * messages the template refuses. */
int textio_render_chat(const struct textio *t, json_t *messages, json_t *tools, json_t *kwargs,
                       char **out, struct hearth_err *err);

/* ---- streaming detokenization --------------------------------------------------------- */
struct textio_detok;
int textio_detok_new(const struct textio *t, struct textio_detok **out, struct hearth_err *err);
void textio_detok_free(struct textio_detok *d);
/* Appends the text completed by id (complete UTF-8 only) to out. final: flush what is held. */
int textio_detok_push(struct textio_detok *d, int32_t id, struct sbuf *out, struct hearth_err *err);
int textio_detok_flush(struct textio_detok *d, struct sbuf *out, struct hearth_err *err);

/* ---- chat output parsing (tool calls, reasoning) -------------------------------------- */
struct textio_delta {
  struct sbuf content;    /* new visible text */
  struct sbuf reasoning;  /* new reasoning text (<think> ... </think>) */
  json_t *tool_calls;     /* NULL or an array of OpenAI tool-call deltas {index, id?, type?,
                             function: {name?, arguments}} completed or extended by this feed */
};
struct textio_parser;
/* tools: the request declared tools (tool-call markup is parsed only then). prompt: the rendered
 * prompt (a prompt ending inside an open <think> starts the output in reasoning). constrained: the
 * output is decoded under a json_mask program (json_object, a forced call): no reasoning split, so
 * a "<think>" inside a JSON string stays content. */
int textio_parser_new(const struct textio *t, int tools, int constrained, const char *prompt,
                      struct textio_parser **out, struct hearth_err *err);
void textio_parser_free(struct textio_parser *p);
/* Feeds model text; fills d (the caller resets it between feeds). final: the text has ended,
 * flush everything held back. */
int textio_parser_feed(struct textio_parser *p, const char *text, size_t len, int final,
                       struct textio_delta *d, struct hearth_err *err);
void textio_delta_reset(struct textio_delta *d);
void textio_delta_free(struct textio_delta *d);

#endif
