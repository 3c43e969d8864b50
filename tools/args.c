/* tools/args.c — option parsing shared by subcommands. */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *arg_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "hearth: option %s needs a value\n", argv[*i]);
    return NULL;
  }
  return argv[++*i];
}

int arg_int(const char *opt, const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "hearth: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

int arg_float(const char *opt, const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end) {
    fprintf(stderr, "hearth: %s expects a number, got '%s'\n", opt, s);
    return -1;
  }
  *out = v;
  return 0;
}

int arg_ids(const char *s, int32_t **ids, int *n) {
  size_t cap = 16;
  int32_t *v = malloc(cap * sizeof *v);
  int k = 0;
  if (!v) return -1;
  const char *p = s;
  for (;;) {
    while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p || errno || x < 0 || x > INT32_MAX) {
      fprintf(stderr, "hearth: bad token id near '%.16s'\n", p);
      free(v);
      return -1;
    }
    if ((size_t)k == cap) {
      int32_t *g = realloc(v, (cap *= 2) * sizeof *v);
      if (!g) { free(v); return -1; }
      v = g;
    }
    v[k++] = (int32_t)x;
    p = end;
  }
  *ids = v;
  *n = k;
  return 0;
}

int arg_model_option(int argc, char **argv, int *i, struct hearth_model_params *p) {
  const char *a = argv[*i], *v;
  long x;
  if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
    /* resolved once, here: a repo id ORG/NAME becomes its Hub-cache snapshot, so that the weights,
     * the tokenizer and the template all come from the same folder */
    static char dir[4096];
    struct hearth_err err = {0};
    if (!(v = arg_value(argc, argv, i))) return -1;
    if (hearth_resolve_model_dir(v, dir, sizeof dir, &err)) { fprintf(stderr, "hearth: %s\n", err.msg); return -1; }
    p->path = dir;
    return 1;
  }
  if (!strcmp(a, "--dtype")) {
    if (!(v = arg_value(argc, argv, i))) return -1;
    if (!strcmp(v, "int4")) p->dtype = HEARTH_DTYPE_INT4;
    else if (!strcmp(v, "bf16")) p->dtype = HEARTH_DTYPE_BF16;
    else if (!strcmp(v, "f32")) p->dtype = HEARTH_DTYPE_F32;
    else { fprintf(stderr, "hearth: --dtype must be int4, bf16 or f32\n"); return -1; }
    return 1;
  }
  if (!strcmp(a, "--backend")) {
    if (!(v = arg_value(argc, argv, i))) return -1;
    if (!strcmp(v, "cpu")) p->backend = HEARTH_BACKEND_CPU;
    else if (!strcmp(v, "cuda")) p->backend = HEARTH_BACKEND_CUDA;
    else { fprintf(stderr, "hearth: --backend must be cpu or cuda\n"); return -1; }
    return 1;
  }
  if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
    if (!(v = arg_value(argc, argv, i)) || arg_int(a, v, 0, 1024, &x)) return -1;
    p->n_threads = (int)x;
    return 1;
  }
  if (!strcmp(a, "--kv-tokens")) {
    if (!(v = arg_value(argc, argv, i)) || arg_int(a, v, 16, 1 << 24, &x)) return -1;
    p->kv_tokens = (int)x;
    return 1;
  }
  if (!strcmp(a, "--kv-seqs")) { /* sessions holding KV at once: sizes Gemma 4's sliding-window pool; -1: none */
    if (!(v = arg_value(argc, argv, i)) || arg_int(a, v, -1, 1 << 20, &x)) return -1;
    p->kv_seqs = (int)x;
    return 1;
  }
  if (!strcmp(a, "--kv-cache-dir")) {
    if (!(v = arg_value(argc, argv, i))) return -1;
    p->kv_cache_dir = v;
    return 1;
  }
  if (!strcmp(a, "--exact")) { p->exact = 1; return 1; }
  if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) { p->verbose = 1; return 1; }
  return 0;
}
