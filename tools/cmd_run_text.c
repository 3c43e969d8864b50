/* tools/cmd_run_text.c — text in and out for `hearth run` (tokenizer glue). */
#include <stdio.h>

#include "hearth.h"

int cmd_run_text(const char *model_dir, const char *prompt, int32_t **ids, int *n);
int cmd_run_print_text(const char *model_dir, const int32_t *ids, int n);

int cmd_run_text(const char *model_dir, const char *prompt, int32_t **ids, int *n) {
  (void)model_dir; (void)prompt; (void)ids; (void)n;
  fprintf(stderr, "hearth run: --prompt needs the tokenizer, not built yet; use --prompt-ids\n");
  return -1;
}

int cmd_run_print_text(const char *model_dir, const int32_t *ids, int n) {
  (void)model_dir;
  for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
  printf("\n");
  return 0;
}
