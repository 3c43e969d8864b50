/* bench/kv_plan.c — the KV pool a Gemma 4 config takes at a context, keeping every position vs the sliding-window
 * ring (runtime/kv_ring.h), from the config alone (the same layer geometry and pool sizing the loader uses; f32 K
 * and V as on the CPU, half that on CUDA's f16 fast path). `hearth run -v` prints the allocated figure for a model
 * that is there (bench/RESULTS.md measured E2B both ways).
 *   cc -O2 -Isrc -Iinclude bench/kv_plan.c build-NAME/libhearth.a -ljansson -lm -lpthread -o /tmp/kv_plan
 *   /tmp/kv_plan CONTEXT KV_SEQS PASS_TOKENS configs/gemma-4-*.json */
#include <stdio.h>
#include <stdlib.h>

#include "load/hf_config.h"
#include "runtime/kv_ring.h"

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)len + 1);
  if (s && fread(s, 1, (size_t)len, f) != (size_t)len) { free(s); s = NULL; }
  fclose(f);
  *n = (size_t)len;
  return s;
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: kv_plan CONTEXT KV_SEQS PASS_TOKENS CONFIG.json...\n"); return 2; }
  const int ctx = atoi(argv[1]), seqs = atoi(argv[2]), pass = atoi(argv[3]), bs = 16;
  static struct hf_config c;
  for (int a = 4; a < argc; a++) {
    size_t n;
    char *t = slurp(argv[a], &n);
    struct hearth_err err = {0};
    if (!t || hf_config_parse(t, n, argv[a], &c, &err)) { fprintf(stderr, "%s: %s\n", argv[a], err.msg); return 1; }
    free(t);
    unsigned long long sl = 0, full = 0;
    int n_sl = 0, n_full = 0, n_sh = 0;
    for (int l = 0; l < c.num_hidden_layers; l++) {
      const struct hf_layer *y = &c.layer[l];
      const unsigned long long b = 2ull * (unsigned long long)y->n_kv_heads * (unsigned long long)y->head_dim * 4;
      if (y->kv_source != l) n_sh++;
      else if (y->sliding) sl += b, n_sl++;
      else full += b, n_full++;
    }
    const int blocks = (ctx + bs - 1) / bs, swa = kv_swa_blocks(blocks, bs, c.g4.sliding_window, seqs, pass);
    const double keep = (double)blocks * bs * (double)(sl + full), ring = (double)blocks * bs * full + (double)swa * bs * sl;
    printf("%s: %d sliding layers %llu B/token (window %d), %d full %llu B/token, %d shared 0 B; context %d, %d session(s): "
           "keep everything %.1f MiB, ring %.1f MiB (sliding pool %d tokens)\n",
           argv[a], n_sl, sl, c.g4.sliding_window, n_full, full, n_sh, ctx, seqs, keep / 1048576.0, ring / 1048576.0,
           swa * bs);
  }
  return 0;
}
