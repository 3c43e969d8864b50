/* tok/tokenizer.h — the tokenizer module: Hugging Face tokenizer.json → encode / decode /
 * streaming detokenization, with exact parity with HF `tokenizers` (tests/tok/ holds the proof).
 *
 * Supported pipeline components (anything else is refused at load with HEARTH_ERR_UNSUPPORTED
 * naming the component, never silently mis-tokenized):
 *   normalizer     null, NFC, NFD, NFKC, NFKD, Replace (String pattern), Prepend, Sequence of these
 *   pre_tokenizer  null, Split (Regex or String; Isolated, MergedWithPrevious, MergedWithNext,
 *                  Removed; invert=false), ByteLevel (add_prefix_space=false), Sequence of these
 *   model          BPE (merges by rank, byte_fallback, unk_token, fuse_unk, ignore_merges;
 *                  no dropout, empty continuing_subword_prefix / end_of_word_suffix)
 *   post_processor null, ByteLevel, TemplateProcessing (single), Sequence of these
 *   decoder        null, ByteLevel, Replace (String), ByteFallback, Fuse, Sequence of these
 *   added_tokens   special or not, lstrip / rstrip / single_word / normalized honoured
 *
 * Limits against hostile files (tok_internal.h has the numbers): normalizer Sequences nest at most
 * 4 deep with at most 32 steps, and normalized text may not grow past 64x + 4 KB (load-time check
 * of the Replace steps, then a tokenize-time error); a token's decoded piece may not pass 8x + 64
 * bytes (load time). A byte-level vocabulary lacking any of its 256 byte symbols, or byte_fallback
 * lacking any <0xXX>, is refused unless an unk_token stands in; a character that has no token,
 * no byte fallback and no unk is a tokenize-time error (HF would drop it silently).
 *
 * Input text that is not valid UTF-8 is first repaired the way Python's
 * bytes.decode("utf-8", "replace") does it: each maximal invalid subsequence becomes U+FFFD.
 * Decoded text is always valid UTF-8.
 *
 * Threading: a loaded struct tok is immutable; any number of threads may encode/decode with it at
 * once. A struct tok_stream belongs to one thread at a time.
 */
#ifndef HEARTH_TOK_TOKENIZER_H
#define HEARTH_TOK_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#include "hearth.h"

struct tok;

/* Loads tokenizer.json and, when config_path is not NULL, tokenizer_config.json (bos/eos tokens,
 * add_bos_token/add_eos_token). On success *out is owned by the caller (tok_free).
 * Errors: HEARTH_ERR_IO, HEARTH_ERR_FORMAT (malformed JSON or inconsistent vocab/merges),
 * HEARTH_ERR_UNSUPPORTED (a component listed above is missing), HEARTH_ERR_NOMEM. */
int tok_load(const char *tokenizer_json_path, const char *tokenizer_config_path, struct tok **out,
             struct hearth_err *err);
/* dir/tokenizer.json plus dir/tokenizer_config.json when that file exists. */
int tok_load_dir(const char *dir, struct tok **out, struct hearth_err *err);
/* Same from memory (config may be NULL). Used by the fuzzer and tests. */
int tok_load_mem(const char *json, size_t len, const char *config, size_t config_len, struct tok **out,
                 struct hearth_err *err);
void tok_free(struct tok *t);

/* Encodes text[0..len). add_special: apply the tokenizer.json post-processor (e.g. Gemma's <bos>,
 * Qwen3-Embedding's trailing <|endoftext|>), as HF encode(add_special_tokens=True) does.
 * parse_special: 1 = special added tokens in the text become their ids (HF default);
 * 0 = they are tokenized as plain text (HF split_special_tokens / encode_special_tokens).
 * Non-special added tokens are always matched, as in HF.
 * On success *ids is malloc'd (caller frees; non-NULL even when *n == 0). */
int tok_encode(const struct tok *t, const char *text, size_t len, int add_special, int parse_special,
               int32_t **ids, int *n, struct hearth_err *err);

/* Decodes ids[0..n) like HF decode(ids, skip_special_tokens). *text is malloc'd, NUL-terminated,
 * valid UTF-8; *len excludes the NUL. An id outside the vocabulary is HEARTH_ERR_ARG. */
int tok_decode(const struct tok *t, const int32_t *ids, int n, int skip_special, char **text, size_t *len,
               struct hearth_err *err);

int tok_vocab_size(const struct tok *t);  /* largest id + 1 */
/* Checks at load that every token id is a row of the model's embedding (n_model_rows, config.json
 * vocab_size). The model may have more rows than the tokenizer has ids (Qwen pads 151,665 to
 * 151,936). Returns 0 or HEARTH_ERR_FORMAT naming the first id out of range. */
int tok_check_model_vocab(const struct tok *t, int n_model_rows, struct hearth_err *err);
/* The token's string as written in tokenizer.json (byte-level tokens are in the GPT-2 mapped
 * alphabet, e.g. "Ġthe"); NULL for an id without a token. */
const char *tok_token_text(const struct tok *t, int32_t id, size_t *len);
/* The bytes id adds to decoded text on its own: byte-level tokens their raw bytes (possibly part
 * of a UTF-8 character), pieces their decoded string, a byte-fallback token <0xXX> its one byte
 * (written to *byte, *p pointing at it). Returns 0, or -1 for special tokens and ids without a
 * token (they decode to no plain text). */
int tok_token_bytes(const struct tok *t, int32_t id, const char **p, size_t *len, char *byte);
/* The id of a token string (vocab or added token), or -1. */
int32_t tok_find_token(const struct tok *t, const char *s, size_t len);
int tok_is_special(const struct tok *t, int32_t id); /* a special added token */
int32_t tok_bos_id(const struct tok *t);   /* from tokenizer_config.json bos_token; -1 if none */
int32_t tok_eos_id(const struct tok *t);   /* from tokenizer_config.json eos_token; -1 if none */
int tok_add_bos(const struct tok *t);      /* tokenizer_config.json add_bos_token (0 if absent) */
int tok_add_eos(const struct tok *t);      /* tokenizer_config.json add_eos_token (0 if absent) */

/* ---- streaming detokenizer ------------------------------------------------------------ */
/* Feeds ids one at a time and yields text that is always complete UTF-8: a character split over
 * byte-level tokens is held back until it completes, and a run of byte-fallback tokens (<0xXX>) is
 * held until the run ends, because HF decides valid-or-U+FFFD over the whole run. The concatenation
 * of every piece it yields, plus tok_stream_flush, equals tok_decode of the same ids. */
struct tok_stream;
int tok_stream_new(const struct tok *t, int skip_special, struct tok_stream **out, struct hearth_err *err);
void tok_stream_free(struct tok_stream *s);
/* Pushes one id. On return text and len hold the newly completed text (possibly empty), valid until the next call
 * on s. HEARTH_ERR_ARG for an id outside the vocabulary (the stream is unchanged). */
int tok_stream_push(struct tok_stream *s, int32_t id, const char **text, size_t *len, struct hearth_err *err);
/* Emits whatever is held back (an unfinished character becomes U+FFFD, as decode would) and resets. */
int tok_stream_flush(struct tok_stream *s, const char **text, size_t *len, struct hearth_err *err);
#endif
