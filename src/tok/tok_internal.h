/* tok/tok_internal.h — the loaded tokenizer, shared by the files of src/tok/ (not public).
 * A struct tok is built once by tok_load.c and never written afterwards. */
#ifndef HEARTH_TOK_INTERNAL_H
#define HEARTH_TOK_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tok/tok_map.h"
#include "tok/tokenizer.h"

/* Normalized text may grow to TOK_NORM_GROWTH x its input + TOK_NORM_SLACK bytes (NFKC expands a
 * character at most ~11x, Gemma's Replace " " -> "\u2581" 3x); a longer result fails the
 * tokenization. The loader refuses a pipeline whose Replace steps alone could exceed the factor. */
#define TOK_NORM_GROWTH 64
#define TOK_NORM_SLACK 4096
/* A token's decoded piece may be at most TOK_DEC_GROWTH x its text + TOK_DEC_SLACK bytes. */
#define TOK_DEC_GROWTH 8
#define TOK_DEC_SLACK 64

enum tok_norm_kind { TN_NFC, TN_NFD, TN_NFKC, TN_NFKD, TN_REPLACE, TN_PREPEND };
struct tok_norm_step {
  int kind;
  char *pat, *rep; /* Replace: pattern -> rep; Prepend: rep */
  size_t patlen, replen;
};

enum tok_split_beh { SB_ISOLATED, SB_MERGED_PREV, SB_MERGED_NEXT, SB_REMOVED };
struct tok_pre_step {
  int behavior;
  pcre2_code *re;  /* Regex split (also ByteLevel use_regex) */
  char *pat;       /* String split */
  size_t patlen;
};

/* Added-token trie over bytes. Node 0 is the root. */
struct tok_trie_node {
  int32_t first_child, next_sibling;
  int32_t added;   /* index into tok.added, or -1 */
  uint8_t byte;
};
struct tok_trie {
  struct tok_trie_node *nodes;
  int32_t n, cap;
  int32_t root_child[256]; /* fast first step */
};

struct tok_added {
  int32_t id;
  uint8_t special, lstrip, rstrip, single_word, normalized;
};

struct tok {
  /* ---- vocabulary (model vocab + added tokens), by id ---- */
  int32_t n_vocab;         /* largest id + 1 */
  char *blob;              /* token strings */
  uint32_t *off, *len;     /* of id i; len == UINT32_MAX for an id without a token */
  struct tok_strmap vocab; /* string -> id */
  uint8_t *special;        /* [n_vocab] 1 = special added token */

  /* ---- added tokens ---- */
  struct tok_added *added;
  int32_t n_added;
  struct tok_trie trie_raw, trie_norm; /* normalized=false / normalized=true tokens */

  /* ---- normalizer, pre-tokenizer ---- */
  struct tok_norm_step *norm;
  int n_norm;
  struct tok_pre_step *pre;
  int n_pre;
  int byte_level;          /* ByteLevel pre-tokenizer: BPE runs over the GPT-2 byte alphabet */

  /* ---- BPE model ---- */
  struct tok_pairmap merges;
  int32_t byte_id[256];    /* byte-level: id of the mapped char of each byte (-1 if absent) */
  int32_t bf_id[256];      /* byte fallback: id of <0xXX> (-1 if absent) */
  int32_t *char_id;        /* not byte-level: id of code point c < 0x10000 as a token, -1 if none */
  int byte_fallback, fuse_unk, ignore_merges;
  int32_t unk_id;          /* -1 if none */

  /* ---- post-processor (TemplateProcessing single) ---- */
  int32_t *pp_prefix, *pp_suffix;
  int n_pp_prefix, n_pp_suffix;

  /* ---- decoder ---- */
  int dec_bytelevel, dec_bytefallback, dec_none;
  char *dblob;             /* decoded piece of each id (after Replace / byte-level unmapping) */
  uint32_t *doff, *dlen;
  int16_t *byte_val;       /* ByteFallback: byte value of a <0xXX> token, else -1 */

  /* ---- tokenizer_config.json ---- */
  int32_t bos_id, eos_id;
  int add_bos, add_eos;
};

/* GPT-2 bytes_to_unicode: the code point standing for byte b. */
uint32_t tok_byte_to_cp(uint8_t b);

/* UTF-8 helpers (tok_utf8.c). */
/* Length of the valid UTF-8 sequence starting at s[0..n), or 0 if invalid/incomplete there. */
int tok_utf8_valid_len(const unsigned char *s, size_t n);
/* Length of the maximal invalid subpart starting at s (>= 1), per the Unicode / WHATWG rule. */
int tok_utf8_invalid_len(const unsigned char *s, size_t n);
/* Encodes cp, returns its length (1..4). */
int tok_utf8_put(char *out, uint32_t cp);
/* Decodes one valid sequence; returns its length. */
int tok_utf8_get(const unsigned char *s, uint32_t *cp);
/* 1 when s[0..n) is a proper prefix of some valid UTF-8 sequence (an unfinished character). */
int tok_utf8_incomplete(const unsigned char *s, size_t n);

/* A split regex's General Category escapes widened to Unicode 16.0 (tok_unicode.c): a malloc'd NUL-terminated
 * pattern of *m bytes, NULL on OOM. */
char *tok_gc_rewrite(const char *p, size_t n, size_t *m);
/* utf8proc_map(s, n, out, opt) as HF's Unicode 9.0 normalizer: code points assigned after 9.0 left as they are and
 * the text between them normalized (tok_unicode.c). The length, or a negative utf8proc error. */
ssize_t tok_norm_map(const char *s, size_t n, int opt, char **out);

/* Added-token tries (tok_added.c). */
int tok_trie_add(struct tok_trie *t, const char *s, size_t n, int32_t added_index);
void tok_trie_free(struct tok_trie *t);

/* BPE over one pre-token (tok_bpe.c); defined there. */
struct tok_vec { int32_t *v; size_t n, cap; };
int tok_vec_push(struct tok_vec *v, int32_t x);
struct tok_bpe_scratch;
/* 0, -1 out of memory, -2 a character the vocabulary cannot represent (see tok_bpe.c). */
int tok_bpe_word(const struct tok *t, const char *s, size_t n, struct tok_vec *out,
                 struct tok_bpe_scratch **scratch);
void tok_bpe_scratch_free(struct tok_bpe_scratch *s);
#endif
