/* chat/template.h — a checkpoint's chat template: messages (+ tools) → the exact prompt string.
 *
 * The template is the model's own Jinja source (chat_template.jinja or tokenizer_config.json's
 * chat_template), rendered the way transformers' apply_chat_template(..., tokenize=False) renders
 * it: the template sees `messages` and `tools` exactly as given (null when no tools),
 * `add_generation_prompt`, `documents` (null), the special tokens named in tokenizer_config.json
 * (bos_token, eos_token, ...) and any extra kwargs (e.g. enable_thinking).
 *
 * Errors: functions return 0 or a negative HEARTH_ERR_* and fill err.
 *   - load: HEARTH_ERR_UNSUPPORTED names the line and the construct ("template line 12: unsupported
 *     filter 'foo'"); HEARTH_ERR_IO / HEARTH_ERR_FORMAT for unreadable or malformed files.
 *   - render: HEARTH_ERR_ARG when the template rejects the conversation — for raise_exception the
 *     message is exactly the template's (the server returns it as a 400) — or exceeds 1e6 loop
 *     steps, macro depth 64 or evaluation depth 1,000; HEARTH_ERR_NOMEM when output (8 MiB),
 *     memory (256 MiB), work (512 MiB + 64 per byte of the conversation, jinja.h) or value
 *     nesting (200, e.g. a namespace that contains itself) is exceeded.
 * Thread safety: a loaded template is immutable; any number of threads may render it at once.
 */
#ifndef HEARTH_CHAT_TEMPLATE_H
#define HEARTH_CHAT_TEMPLATE_H
#include <jansson.h>
#include <stddef.h>

#include "hearth.h"

/* Tool-call / reasoning syntax a template teaches its model (detected from the template text). */
enum chat_format {
  CHAT_FORMAT_NONE = 0,  /* no tool-call syntax recognised */
  CHAT_FORMAT_QWEN = 1,  /* <tool_call>{json}</tool_call>, reasoning in <think>…</think> */
  CHAT_FORMAT_GEMMA4 = 2 /* <|tool_call>call:NAME{…}<tool_call|>, reasoning in <|channel>thought…<channel|> */
};

struct chat_template_opts {
  /* Special tokens passed to the template as variables (NULL: not passed, i.e. undefined). */
  const char *bos_token, *eos_token, *unk_token, *pad_token, *sep_token, *cls_token, *mask_token;
};

struct chat_template;

/* Parses template source (len bytes, need not be NUL-terminated). opts may be NULL. */
int chat_template_load(const char *source, size_t len, const struct chat_template_opts *opts,
                       struct chat_template **out, struct hearth_err *err);

/* Loads the template of a Hugging Face model directory: chat_template.jinja if present, else
 * tokenizer_config.json's "chat_template" (a string, or a list of {name, template} from which
 * `name` is taken — NULL means "default"), else chat_template.json. Special tokens come from
 * tokenizer_config.json (strings or {"content": ...} objects), falling back to
 * special_tokens_map.json. Needs no weights and no config.json. */
int chat_template_load_dir(const char *model_dir, const char *name, struct chat_template **out,
                           struct hearth_err *err);

/* 1 when model_dir names a chat template (chat_template.jinja, a "chat_template" key in
 * tokenizer_config.json, or chat_template.json), whether or not it loads: tells a model without
 * a template (embedding models) from one whose template is broken. */
int chat_template_dir_has(const char *model_dir);

/* Renders a conversation. messages: JSON array of message objects (passed through untouched);
 * tools: JSON array of OpenAI tool schemas or NULL; kwargs: JSON object of extra template
 * variables or NULL. On success *out is a malloc'd NUL-terminated string (caller frees). */
int chat_template_render(const struct chat_template *t, json_t *messages, json_t *tools,
                         int add_generation_prompt, json_t *kwargs, char **out, struct hearth_err *err);

/* The tool-call/reasoning syntax of this template (for chat_parser_new). */
enum chat_format chat_template_format(const struct chat_template *t);
/* Detects the format from template text. */
enum chat_format chat_format_detect(const char *source, size_t len);
/* The template source (NUL-terminated copy). */
const char *chat_template_source(const struct chat_template *t);

void chat_template_free(struct chat_template *t);

#endif
