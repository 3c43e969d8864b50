/* tools/commands.h — the subcommands of the hearth executable, one file each (tools/cmd_<name>.c).
 * Each returns the process exit status and prints its own errors to stderr. */
#ifndef HEARTH_TOOLS_COMMANDS_H
#define HEARTH_TOOLS_COMMANDS_H
int cmd_run(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_serve(int argc, char **argv);
#endif
