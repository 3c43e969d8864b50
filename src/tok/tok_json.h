/* tok/tok_json.h — a small, fast, read-only JSON DOM for tokenizer.json.
 *
 * Why not jansson: jansson spends ~1 s building hash objects for Gemma's 33 MB tokenizer.json;
 * this parser unescapes strings in place in one buffer and lays nodes out in an arena, which keeps
 * the whole tokenizer load well under the 1 s budget. It is strict RFC 8259 JSON (no comments,
 * no trailing commas), limits nesting to 128 levels, and rejects lone UTF-16 surrogates. It is
 * fuzzed (fuzz/tok_load_fuzz.c). Only the tokenizer loader uses it.
 */
#ifndef HEARTH_TOK_JSON_H
#define HEARTH_TOK_JSON_H
#include <stddef.h>
#include <stdint.h>

#include "hearth.h"

enum tj_type { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ };

struct tj {
  uint8_t type;
  uint32_t n;       /* TJ_STR: byte length; TJ_ARR/TJ_OBJ: number of children */
  uint32_t keylen;  /* for members of an object */
  const char *key;  /* for members of an object (NUL-terminated), else NULL */
  union {
    const char *s;    /* TJ_STR: NUL-terminated (may contain NUL bytes; use n) */
    double num;       /* TJ_NUM */
    struct tj *kids;  /* TJ_ARR/TJ_OBJ: n children in order */
  } u;
};

struct tj_doc; /* owns the buffer and the node arena */

/* Parses text[0..len) (copied). On success *root points into *doc, which the caller frees with
 * tj_free. Returns 0 or HEARTH_ERR_FORMAT (message has the byte offset) / HEARTH_ERR_NOMEM. */
int tj_parse(const char *text, size_t len, struct tj_doc **doc, const struct tj **root,
             struct hearth_err *err);
void tj_free(struct tj_doc *doc);

/* Member of an object by key, or NULL (also when o is not an object). */
const struct tj *tj_get(const struct tj *o, const char *key);
/* 1 when v is a string equal to s. */
int tj_is_str(const struct tj *v, const char *s);
#endif
