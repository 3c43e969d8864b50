/* server/json_mask.h — constrained decoding: response_format json_object / json_schema and forced
 * tool calls.
 *
 * A byte-level JSON recognizer (jfsm: RFC 8259 with an object at the top level, UTF-8 checked
 * inside strings, at most JFSM_MAX_WS whitespace bytes in a row, nesting up to 64; narrowed to what
 * every JSON parser reads back the same: integer and fraction parts of at most 15 digits, exponents
 * of at most 2, no \u0000 and no \uD800-\uDFFF escapes (a model writes UTF-8)) and the
 * vocabulary as byte strings sorted for prefix sharing (jvocab). Each decoding step, jvocab_mask
 * leaves only the tokens whose bytes keep the output a prefix of a JSON object: the engine samples
 * from what remains and stops the sequence when the object is complete. Special tokens (and so the
 * end-of-sequence token) are never allowed: a json_object answer ends by closing its object, or
 * at max_tokens.
 */
#ifndef HEARTH_SERVER_JSON_MASK_H
#define HEARTH_SERVER_JSON_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "hearth.h"

#define JFSM_MAX_WS 64
#define JFSM_MAX_DEPTH 64

struct jfsm {
  uint64_t arr;    /* bit d: container at depth d is an array (else an object) */
  uint8_t depth;   /* open containers */
  uint8_t mode;    /* enum in json_mask.c */
  uint8_t aux;     /* literal index / \u digits left / UTF-8 continuation bytes left */
  uint8_t aux2;    /* literal position / first continuation byte's range */
  uint8_t key;     /* the open string is an object key */
  uint8_t ws;      /* whitespace bytes in a row */
  uint8_t digits;  /* digits of the current number part (integer, fraction or exponent) */
  uint16_t hex;    /* \uXXXX: the value so far */
};

void jfsm_init(struct jfsm *s);
/* Feeds one byte; returns 1 when the text stays a JSON-object prefix, 0 (s unchanged) when not. */
int jfsm_feed(struct jfsm *s, unsigned char c);
/* Feeds n bytes; 1 if all were accepted (s advanced), 0 if one was refused (s unchanged). */
int jfsm_feed_all(struct jfsm *s, const char *p, size_t n);
/* 1 when the top-level object has been closed. */
int jfsm_done(const struct jfsm *s);

/* ---- output programs: what a constrained answer must be, as a sequence of segments ------------
 * JSEG_LIT: exactly these bytes; JSEG_NAME: one of the segment's names (names[first..first+count):
 * the segment ends where the next byte is a '"' that completes a name); JSEG_OBJECT: one JSON object
 * (leading whitespace allowed); JSEG_VALUE: one JSON value of the kinds in vmask (JV_*, no leading
 * whitespace; a number ends where the next byte cannot continue it); JSEG_CHOICE: one of the
 * segment's names, each a whole JSON text (an enum), ending where the next byte extends none;
 * JSEG_ARRAY: [item, item, ...] with imin..imax items, each a JSEG_CHOICE of the segment's names when
 * count > 0, else a JSEG_VALUE of vmask. The
 * answer is complete when the last segment is. json_object is one JSEG_OBJECT; a forced Qwen tool
 * call is <tool_call>\n{"name": "NAME", "arguments": OBJECT}\n</tool_call>; a json_schema answer
 * is compiled into literals, values and choices (json_schema.h). */
enum { JSEG_LIT, JSEG_NAME, JSEG_OBJECT, JSEG_VALUE, JSEG_CHOICE, JSEG_ARRAY };
enum { JV_STRING = 1, JV_NUMBER = 2, JV_INTEGER = 4, JV_BOOL = 8, JV_NULL = 16, JV_OBJECT = 32, JV_ARRAY = 64 };
#define JV_ANY (JV_STRING | JV_NUMBER | JV_BOOL | JV_NULL | JV_OBJECT | JV_ARRAY)
#define JPROG_MAX_NAMES 64 /* per segment */
struct jseg {
  int kind;
  const char *lit; /* JSEG_LIT */
  size_t n;
  int first, count; /* JSEG_NAME, JSEG_CHOICE: names[first .. first + count) */
  int vmask;        /* JSEG_VALUE, JSEG_ARRAY items */
  int imin, imax;   /* JSEG_ARRAY: item count bounds (imax <= 65535) */
};
struct jprog {
  int n_seg;
  const struct jseg *seg;
  const char *forbid; /* never inside a JSON string (a tool call's closing tag), or NULL */
  int n_names;
  const char *const *names;
  const size_t *name_len;
  void *own; /* one allocation holding the segments, literals and names (jprog_free) */
};
struct jstate {
  struct jfsm j;   /* the open JSEG_OBJECT */
  uint64_t names;  /* JSEG_NAME: names still matching */
  uint16_t pos;    /* JSEG_LIT / JSEG_NAME / JSEG_CHOICE: bytes matched */
  uint16_t seg;    /* current segment; n_seg = complete */
  uint16_t cnt;    /* JSEG_ARRAY: items so far */
  uint8_t ph;      /* JSEG_ARRAY: where in the array (json_mask.c) */
  uint8_t fb;      /* bytes of the program's forbidden string matched inside a JSON string */
};
/* The json_object program (static). */
const struct jprog *jprog_json_object(void);
/* 1 when name can be forced: 1..64 bytes of [A-Za-z0-9_.-] (OpenAI's function-name rule plus '.'). */
int jprog_name_ok(const char *name);
/* A forced Qwen-style tool call naming one of names[0..n) (1..JPROG_MAX_NAMES, each jprog_name_ok);
 * its strings may not contain "</tool_call>". NULL on OOM or a refused name. */
struct jprog *jprog_tool_call(const char *const *names, int n);
/* The same call of the one function name whose arguments follow args (a json_schema program of the
 * function's "parameters", json_schema.h) instead of being any JSON object. NULL on OOM, a refused name or
 * an enum value of args holding "</tool_call>"; args stays the caller's. */
struct jprog *jprog_tool_call_args(const char *name, const struct jprog *args);
/* A program from its parts (copied into one allocation): n_seg segments whose LIT pointers and NAME/
 * CHOICE ranges refer to lits and names[0..n_names). NULL on OOM. */
struct jprog *jprog_build(const struct jseg *seg, int n_seg, const char *const *names, int n_names);
void jprog_free(struct jprog *p);
void jstate_init(const struct jprog *p, struct jstate *s);
/* 1 if all n bytes were accepted (s advanced), 0 if one was refused (s unchanged). */
int jstate_feed_all(const struct jprog *p, struct jstate *s, const char *bytes, size_t n);
int jstate_done(const struct jprog *p, const struct jstate *s);

struct tok;
struct jvocab;
/* The vocabulary's plain-text tokens (specials left out). */
int jvocab_new(const struct tok *t, struct jvocab **out, struct hearth_err *err);
void jvocab_free(struct jvocab *v);
/* The bytes of token id, or -1 when it is not a plain-text token. */
int jvocab_bytes(const struct jvocab *v, int32_t id, const char **p, size_t *len);
/* logits[i] = -inf for every token i < nv that the state cannot take next; returns the number of
 * tokens left (0: nothing can follow — the caller ends the sequence). */
int jvocab_mask(const struct jvocab *v, const struct jprog *p, const struct jstate *s, float *logits, int nv);

#endif
