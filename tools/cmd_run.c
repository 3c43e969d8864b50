/* tools/cmd_run.c — `hearth run`: load a model, evaluate a prompt, generate N tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "commands.h"
#include "base/err.h"
#include "hearth.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void usage(void) {
  fprintf(stderr,
          "usage: hearth run --model DIR (--prompt-ids \"ID ID ...\" | --prompt TEXT) [-n N] [--ids]\n"
          "                  [--dtype int4|bf16|f32] [--backend cpu|cuda] [--threads T] [--exact]\n"
          "                  [--temperature X] [--top-k K] [--top-p P] [--min-p P] [--seed S]\n"
          "                  [--repetition-penalty X] [--ignore-eos] [--kv-tokens N] [--kv-seqs N (1; -1: Gemma 4's\n"
          "                  sliding layers keep every position)] [--speculate K | --no-speculate] [--stats]\n"
          "--speculate K: greedy decoding drafts up to K (1..8) tokens by prompt lookup, bit-identically (default %d; on CUDA\n"
          "Qwen families only); --stats: tok/s and draft acceptance on stderr\n", HEARTH_SPEC_DEFAULT);
}


int cmd_run(int argc, char **argv) {
  struct hearth_model_params mp;
  hearth_model_params_default(&mp);
  mp.verbose = 1; /* the memory plan on stderr at load (weights, KV bytes per token by layer type) */
  mp.kv_seqs = 1;  /* one session: Gemma 4's sliding layers need one window of KV */
  struct hearth_sampling sp;
  hearth_sampling_default(&sp);
  sp.temperature = 0.0f;
  const char *prompt_ids = NULL, *prompt = NULL;
  long n_gen = 16;
  int print_ids = 0, ignore_eos = 0, stats = 0;
  long spec_k = HEARTH_SPEC_DEFAULT; /* used where the backend can (info->can_speculate) */
  for (int i = 1; i < argc; i++) {
    int r = arg_model_option(argc, argv, &i, &mp);
    if (r < 0) return 2;
    if (r) continue;
    const char *a = argv[i], *v;
    long x;
    double f;
    if (!strcmp(a, "--prompt-ids")) { if (!(prompt_ids = arg_value(argc, argv, &i))) return 2; }
    else if (!strcmp(a, "--prompt") || !strcmp(a, "-p")) { if (!(prompt = arg_value(argc, argv, &i))) return 2; }
    else if (!strcmp(a, "-n")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 1 << 24, &n_gen)) return 2; }
    else if (!strcmp(a, "--ids")) print_ids = 1;
    else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
    else if (!strcmp(a, "--speculate")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, HEARTH_SPEC_MAX, &spec_k)) return 2; }
    else if (!strcmp(a, "--no-speculate")) spec_k = 0;
    else if (!strcmp(a, "--stats")) stats = 1;
    else if (!strcmp(a, "--temperature")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; sp.temperature = (float)f; }
    else if (!strcmp(a, "--top-p")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; sp.top_p = (float)f; }
    else if (!strcmp(a, "--min-p")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; sp.min_p = (float)f; }
    else if (!strcmp(a, "--repetition-penalty")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; sp.repetition_penalty = (float)f; }
    else if (!strcmp(a, "--top-k")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 1 << 30, &x)) return 2; sp.top_k = (int)x; }
    else if (!strcmp(a, "--seed")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 0x7fffffffffffffffL, &x)) return 2; sp.seed = (uint64_t)x; }
    else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
    else { fprintf(stderr, "hearth run: unknown option '%s'\n", a); usage(); return 2; }
  }
  if (!mp.path || (!prompt_ids && !prompt)) { usage(); return 2; }
  int32_t *ids = NULL;
  int n = 0;
  if (prompt_ids) {
    if (arg_ids(prompt_ids, &ids, &n)) return 2;
  } else if (cmd_run_text(mp.path, prompt, &ids, &n)) {
    return 1;
  }
  if (n == 0) { fprintf(stderr, "hearth run: the prompt is empty\n"); free(ids); return 2; }
  struct hearth_err err = {0};
  struct hearth_model *m = NULL;
  struct hearth_session *s = NULL;
  struct hearth_sampler *smp = NULL;
  int32_t *out = malloc(((size_t)n_gen + 1) * sizeof *out);
  int rc = out ? hearth_model_load(&mp, &m, &err) : HEARTH_ERR_NOMEM;
  if (!rc && hearth_model_info(m)->is_embedding) rc = err_set(&err, HEARTH_ERR_ARG, "%s is an embedding model: use hearth embed", mp.path);
  if (!rc) {
    struct hearth_session_params spp = {0};
    rc = hearth_session_new(m, &spp, &s, &err);
  }
  if (!rc) rc = hearth_sampler_new(&sp, hearth_model_info(m)->n_vocab, &smp, &err);
  if (!rc) hearth_sampler_set_prompt(smp, ids, n);
  if (!rc) rc = hearth_session_sync(s, ids, n, &err);
  int n_out = 0;
  /* plain greedy: the next token is chosen where the logits are (on a GPU only its id comes back) */
  const int on_device = hearth_sampling_is_plain_greedy(&sp);
  /* greedy with prompt-lookup drafts (hearth_sessions_step_spec: the same ids, several per forward) */
  struct hearth_spec *spec = NULL;
  if (!rc && on_device && spec_k > 0 && hearth_model_info(m)->can_speculate) rc = hearth_spec_new((int)spec_k, &spec, &err);
  int32_t next = -1; /* chosen by the last step (on_device) */
  int32_t sids[HEARTH_SPEC_MAX + 1];
  int n_sids = 0, at = 0; /* ids the last speculative step gave that are not yet in out */
  double *dts = stats ? malloc(((size_t)n_gen + 1) * sizeof *dts) : NULL; /* --stats: each step's time */
  int n_dts = 0;
  const double t0 = now_s();
  while (!rc && n_out < n_gen) {
    int32_t t = at < n_sids ? sids[at++] : next >= 0 ? next : hearth_sampler_sample(smp, hearth_session_logits(s), out, n_out);
    if (t < 0) { rc = err_set(&err, HEARTH_ERR_BACKEND, "the model produced NaN or infinite logits"); break; }
    out[n_out++] = t;
    const struct hearth_model_info *mi = hearth_model_info(m);
    int is_eos = 0;
    for (int k = 0; k < mi->n_eos; k++) if (mi->eos_ids[k] == t) is_eos = 1;
    if (is_eos && !ignore_eos) break;
    if (n_out < n_gen && at >= n_sids) {
      const double ts = now_s();
      if (spec) { /* t is pending: the step gives it and up to want - 1 drafted tokens after it */
        const int want = (int)(n_gen - n_out);
        rc = hearth_sessions_step_spec(&s, 1, &t, &spec, &want, sids, NULL, &n_sids, &err);
        at = 0;
      } else if (on_device) {
        const int32_t *tp = &t;
        const int one = 1;
        rc = hearth_sessions_step_greedy(&s, 1, &tp, &one, &next, NULL, &err);
      } else {
        rc = hearth_session_append(s, &t, 1, &err);
      }
      if (dts) dts[n_dts++] = now_s() - ts;
    }
  }
  if (stats && !rc) {
    const double dt = now_s() - t0;
    uint64_t v = 0, d = 0, a = 0;
    if (spec) hearth_spec_counts(spec, &v, &d, &a);
    /* the median step: robust to a busy machine's bursts (the speculation's verifies are a few of many steps) */
    if (dts) qsort(dts, (size_t)n_dts, sizeof *dts, cmp_double);
    fprintf(stderr, "hearth run: %d tokens in %.3f s (%.2f tok/s); median step %.3f ms; speculation %s: %llu verifies, %llu drafted, %llu accepted\n",
            n_out, dt, n_out / dt, n_dts ? 1e3 * dts[n_dts / 2] : 0.0, spec ? "on" : "off", (unsigned long long)v,
            (unsigned long long)d, (unsigned long long)a);
  }
  hearth_spec_free(spec);
  free(dts);
  if (rc) {
    fprintf(stderr, "hearth run: %s\n", err.msg);
  } else if (print_ids || !prompt) {
    for (int i = 0; i < n_out; i++) printf(i ? " %d" : "%d", out[i]);
    printf("\n");
  } else {
    rc = cmd_run_print_text(mp.path, out, n_out);
  }
  hearth_sampler_free(smp);
  hearth_session_free(s);
  hearth_model_free(m);
  free(out);
  free(ids);
  return rc ? 1 : 0;
}
