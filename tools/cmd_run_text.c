/* tools/cmd_run_text.c — text in and out for `hearth run` / `hearth embed`: the model directory's
 * tokenizer.json encodes the prompt (special tokens added as the tokenizer's post-processor says,
 * as transformers' tokenizer(text) does) and decodes the generated ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "hearth.h"
#include "tok/tokenizer.h"


int cmd_run_text(const char *model_dir, const char *prompt, int32_t **ids, int *n) {
  struct hearth_err err = {0};
  struct tok *t = NULL;
  if (tok_load_dir(model_dir, &t, &err)) {
    fprintf(stderr, "hearth: %s\n", err.msg);
    return -1;
  }
  int rc = tok_encode(t, prompt, strlen(prompt), 1, 1, ids, n, &err);
  if (rc) fprintf(stderr, "hearth: %s\n", err.msg);
  tok_free(t);
  return rc ? -1 : 0;
}

int cmd_run_print_text(const char *model_dir, const int32_t *ids, int n) {
  struct hearth_err err = {0};
  struct tok *t = NULL;
  char *text = NULL;
  size_t len = 0;
  if (tok_load_dir(model_dir, &t, &err) || tok_decode(t, ids, n, 1, &text, &len, &err)) {
    fprintf(stderr, "hearth: %s\n", err.msg);
    tok_free(t);
    return -1;
  }
  fwrite(text, 1, len, stdout);
  fputc('\n', stdout);
  free(text);
  tok_free(t);
  return 0;
}
