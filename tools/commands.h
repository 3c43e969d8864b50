/* tools/commands.h — the subcommands of the hearth executable, one file each (tools/cmd_<name>.c).
 * Each returns the process exit status and prints its own errors to stderr. */
#ifndef HEARTH_TOOLS_COMMANDS_H
#define HEARTH_TOOLS_COMMANDS_H
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_rm(int argc, char **argv);
#include <stdint.h>
/* Text glue for run/embed (cmd_run_text.c): encode a prompt / print ids as text with DIR's tokenizer.
 * Return 0, or -1 after printing the error. *ids is malloc'd. */
int cmd_run_text(const char *model_dir, const char *prompt, int32_t **ids, int *n);
int cmd_run_print_text(const char *model_dir, const int32_t *ids, int n);
#endif
