/* tools/args.h — small helpers shared by the subcommands: option values and model flags. */
#ifndef HEARTH_TOOLS_ARGS_H
#define HEARTH_TOOLS_ARGS_H
#include <stdint.h>

#include "hearth.h"

/* argv[*i] is an option needing a value: returns argv[++*i] or NULL (after printing an error). */
const char *arg_value(int argc, char **argv, int *i);
/* Parses a strict integer / float; returns 0 on success, -1 with a message otherwise. */
int arg_int(const char *opt, const char *s, long lo, long hi, long *out);
int arg_float(const char *opt, const char *s, double *out);
/* Parses "ID ID ..." (spaces or commas). Caller frees *ids. */
int arg_ids(const char *s, int32_t **ids, int *n);
/* Handles --model/--dtype/--backend/--threads/--exact/--kv-tokens/--kv-cache-dir/--verbose; returns 1 if consumed,
 * 0 if not a model option, -1 on a bad value. */
int arg_model_option(int argc, char **argv, int *i, struct hearth_model_params *p);
#endif
