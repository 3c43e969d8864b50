/* tools/cmd_embed.c — `hearth embed`: the pooled (last token unless sentence-transformers' Pooling
 * config says otherwise), L2-normalised embedding of a prompt, any checkpoint loaded as an embedder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "base/err.h"
#include "commands.h"
#include "hearth.h"


int cmd_embed(int argc, char **argv) {
  struct hearth_model_params mp;
  hearth_model_params_default(&mp);
  const char *prompt_ids = NULL, *prompt = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    int r = arg_model_option(argc, argv, &i, &mp);
    if (r < 0) return 2;
    if (r) continue;
    if (!strcmp(argv[i], "--prompt-ids")) { if (!(prompt_ids = arg_value(argc, argv, &i))) return 2; }
    else if (!strcmp(argv[i], "--prompt")) { if (!(prompt = arg_value(argc, argv, &i))) return 2; }
    else if (!strcmp(argv[i], "--json")) json = 1;
    else { fprintf(stderr, "usage: hearth embed --model DIR [--dtype int4|bf16|f32] (--prompt-ids \"ID ...\" | --prompt TEXT) [--json]\n"); return 2; }
  }
  if (!mp.path || (!prompt_ids && !prompt)) { fprintf(stderr, "usage: hearth embed --model DIR (--prompt-ids \"ID ...\" | --prompt TEXT) [--json]\n"); return 2; }
  int32_t *ids = NULL;
  int n = 0;
  if (prompt_ids ? arg_ids(prompt_ids, &ids, &n) : cmd_run_text(mp.path, prompt, &ids, &n)) return 2;
  struct hearth_err err = {0};
  struct hearth_model *m = NULL;
  struct hearth_session *s = NULL;
  float *e = NULL;
  mp.embedding = 1; /* whatever config.json names: no LM head is bound */
  int rc = n > 0 ? hearth_model_load(&mp, &m, &err) : err_set(&err, HEARTH_ERR_ARG, "the prompt is empty");
  if (!rc) rc = hearth_session_new(m, NULL, &s, &err);
  if (!rc && !(e = malloc((size_t)hearth_model_info(m)->n_embd * sizeof *e))) rc = err_set(&err, HEARTH_ERR_NOMEM, "out of memory");
  if (!rc) rc = hearth_session_embed(s, ids, n, e, &err);
  if (rc) {
    fprintf(stderr, "hearth embed: %s\n", err.msg);
  } else {
    int d = hearth_model_info(m)->n_embd;
    printf(json ? "[" : "");
    for (int i = 0; i < d; i++) printf("%s%.9g", i ? (json ? ", " : " ") : "", e[i]);
    printf(json ? "]\n" : "\n");
  }
  free(e);
  hearth_session_free(s);
  hearth_model_free(m);
  free(ids);
  return rc ? 1 : 0;
}
