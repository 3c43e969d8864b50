/* tools/hearth.c — the hearth executable: dispatches to one subcommand per file. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "hearth.h"

static const struct { const char *name; int (*fn)(int, char **); const char *help; } k_cmds[] = {
  {"run", cmd_run, "generate tokens from a prompt"},
  {"chat", cmd_chat, "chat with a model in the terminal"},
  {"embed", cmd_embed, "embed a prompt with an embedding model"},
  {"bench", cmd_bench, "prefill and decode speed (tokens/s, GB/s)"},
  {"mkmodel", cmd_mkmodel, "write a random-weight checkpoint of a config"},
  {"tokenize", cmd_tokenize, "encode text or decode ids with a tokenizer.json"},
  {"template", cmd_template, "render a chat template"},
  {"serve", cmd_serve, "OpenAI-compatible server on loopback"},
  {"pull", cmd_pull, "download a model from the Hugging Face Hub into its cache"},
  {"list", cmd_list, "the models in the Hugging Face cache hearth can load"},
  {"rm", cmd_rm, "remove a model from the Hugging Face cache"},
};

static void usage(FILE *f) {
  fprintf(f, "hearth %s — private local LLM inference\n\nusage: hearth <command> [options]\n\n", hearth_version());
  for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++) fprintf(f, "  %-10s %s\n", k_cmds[i].name, k_cmds[i].help);
  fprintf(f, "\n'hearth <command> --help' describes each command.\n");
  fprintf(f, "\nenvironment (README.md, \"Environment\"):\n"
             "  HF_HUB_CACHE, HF_HOME  where model names are looked up (default ~/.cache/huggingface/hub)\n"
             "  HF_ENDPOINT, HF_TOKEN  pull: the Hub to download from, the token for gated models\n"
             "  HEARTH_API_KEY         serve: the bearer key clients must send (as --api-key)\n"
             "  HEARTH_CPU             avx512, avx2-vnni, avx2 or scalar: cap the CPU kernels' instruction set (default: the best\n"
             "                         the CPU has, AMX included), e.g. to compare paths or to avoid AVX-512 clock drops\n");
}

int main(int argc, char **argv) {
  if (argc < 2) { usage(stderr); return 2; }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
  if (!strcmp(argv[1], "--version")) { printf("hearth %s\n", hearth_version()); return 0; }
  for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
    if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "hearth: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
