/* tools/cmd_tokenize.c — `hearth tokenize`: encode stdin text to ids, or decode ids to text, with a
 * Hugging Face tokenizer.json (src/tok/). The text is taken verbatim, trailing newline included
 * (use printf '%s' or echo -n for exact strings). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "tok/tokenizer.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: hearth tokenize (--tokenizer FILE.json | --model DIR) [options] < input\n"
          "  encodes UTF-8 text from stdin and prints the ids space-separated on one line\n"
          "  --add-special       apply the tokenizer's post-processor (e.g. Gemma's <bos>)\n"
          "  --no-parse-special  tokenize special-token strings as plain text\n"
          "  --decode            read ids (spaces/commas/newlines) from stdin and print the text\n"
          "  --skip-special      with --decode: drop special tokens\n"
          "  tokenizer_config.json beside the tokenizer.json is read when present.\n");
}

static char *read_all(FILE *f, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  for (;;) {
    if (n == cap) {
      char *b = realloc(buf, cap *= 2);
      if (!b) { free(buf); return NULL; }
      buf = b;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  if (ferror(f)) { free(buf); return NULL; }
  *len = n;
  return buf;
}

static int parse_ids(const char *s, size_t len, int32_t **ids, int *n) {
  size_t cap = 256;
  *n = 0;
  *ids = malloc(cap * sizeof **ids);
  if (!*ids) return -1;
  size_t i = 0;
  while (i < len) {
    while (i < len && (s[i] == ' ' || s[i] == ',' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    if (i >= len) break;
    long v = 0;
    size_t st = i;
    while (i < len && s[i] >= '0' && s[i] <= '9' && v <= 0x7FFFFFFF) v = v * 10 + (s[i++] - '0');
    if (i == st || v > 0x7FFFFFFF || (i < len && !strchr(" ,\n\r\t", s[i]))) {
      fprintf(stderr, "hearth tokenize: bad id at byte %zu of the input\n", st);
      return -1;
    }
    if ((size_t)*n == cap) {
      int32_t *p = realloc(*ids, (cap *= 2) * sizeof *p);
      if (!p) return -1;
      *ids = p;
    }
    (*ids)[(*n)++] = (int32_t)v;
  }
  return 0;
}

int cmd_tokenize(int argc, char **argv) {
  const char *tokfile = NULL, *model = NULL;
  int add_special = 0, parse_special = 1, decode = 0, skip_special = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if ((!strcmp(a, "--tokenizer") || !strcmp(a, "--model")) && i + 1 < argc) {
      if (a[2] == 't') tokfile = argv[++i]; else model = argv[++i];
    } else if (!strcmp(a, "--add-special")) add_special = 1;
    else if (!strcmp(a, "--no-parse-special")) parse_special = 0;
    else if (!strcmp(a, "--decode")) decode = 1;
    else if (!strcmp(a, "--skip-special")) skip_special = 1;
    else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    else { fprintf(stderr, "hearth tokenize: unknown or incomplete option '%s'\n", a); usage(stderr); return 2; }
  }
  if (!tokfile == !model) { usage(stderr); return 2; }

  struct hearth_err err = {0};
  struct tok *t = NULL;
  int rc;
  char dir[4096]; /* a repo id: its Hub-cache snapshot */
  if (model) {
    rc = hearth_resolve_model_dir(model, dir, sizeof dir, &err);
    if (!rc) rc = tok_load_dir(dir, &t, &err);
  }
  else {
    char cfg[4096];
    const char *slash = strrchr(tokfile, '/');
    int dl = slash ? (int)(slash - tokfile) : 1;
    snprintf(cfg, sizeof cfg, "%.*s/tokenizer_config.json", dl, slash ? tokfile : ".");
    struct stat st;
    rc = tok_load(tokfile, stat(cfg, &st) == 0 ? cfg : NULL, &t, &err);
  }
  if (rc) { fprintf(stderr, "hearth tokenize: %s\n", err.msg); return 1; }

  size_t len;
  char *in = read_all(stdin, &len);
  if (!in) { fprintf(stderr, "hearth tokenize: cannot read stdin\n"); tok_free(t); return 1; }
  int status = 0;
  int32_t *ids = NULL;
  int n = 0;
  if (decode) {
    char *text;
    size_t tl;
    if (parse_ids(in, len, &ids, &n)) status = 1;
    else if (tok_decode(t, ids, n, skip_special, &text, &tl, &err)) { fprintf(stderr, "hearth tokenize: %s\n", err.msg); status = 1; }
    else { fwrite(text, 1, tl, stdout); free(text); }
  } else {
    if (tok_encode(t, in, len, add_special, parse_special, &ids, &n, &err)) {
      fprintf(stderr, "hearth tokenize: %s\n", err.msg);
      status = 1;
    } else {
      for (int k = 0; k < n; k++) printf(k ? " %d" : "%d", ids[k]);
      putchar('\n');
    }
  }
  free(ids);
  free(in);
  tok_free(t);
  if (fflush(stdout)) status = 1;
  return status;
}
