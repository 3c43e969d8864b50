/* tools/cmd_bench.c — `hearth bench`: prefill (ppN) and decode (tgN) speed, llama-bench style,
 * with weight bytes per token and the bandwidth they imply, so the distance to the memory floor
 * is visible. Also aggregate decode over B concurrent sequences (tgNxB). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "commands.h"
#include "hearth.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int parse_list(const char *s, long *v, int max) {
  if (!s) return -1;
  int n = 0;
  while (*s && n < max) {
    char *end;
    long x = strtol(s, &end, 10);
    if (end == s || x <= 0) return -1;
    v[n++] = x;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

static int bad_list(const char *opt) {
  fprintf(stderr, "hearth bench: %s expects a comma-separated list of positive integers\n", opt);
  return 2;
}

struct result { char test[32]; double med, min, max; int tokens; };

static double g_probe_gbs; /* the measured read floor (GB/s), 0 = not probed */

static void report(const struct result *r, const struct hearth_model_info *mi, int json, int decode) {
  double gbs = decode ? r->med * (double)mi->weight_bytes_per_token / 1e9 : 0;
  if (json)
    printf("{\"test\": \"%s\", \"kernels\": \"%s\", \"tokens_per_s\": %.2f, \"min\": %.2f, \"max\": %.2f, \"weight_bytes_per_token\": %llu%s%.2f}\n",
           r->test, mi->kernels, r->med, r->min, r->max, (unsigned long long)mi->weight_bytes_per_token,
           decode ? ", \"weight_gb_per_s\": " : ", \"ms\": ", decode ? gbs : 1000.0 * r->tokens / r->med);
  else
    printf("| %-12s | %10.2f | %10.2f | %10.2f |\n", r->test, r->med, r->min, r->max);
  if (!json && decode) {
    printf("|              |   weights %.1f MB/token -> %.1f GB/s at the median", (double)mi->weight_bytes_per_token / 1e6, gbs);
    if (g_probe_gbs > 0) printf(" = %.0f%% of the probed floor (%.1f GB/s, %.1f tok/s)", 100.0 * gbs / g_probe_gbs, g_probe_gbs,
                                g_probe_gbs * 1e9 / (double)mi->weight_bytes_per_token);
    printf("\n");
  }
}

static void summarize(struct result *r, double *tps, int reps) {
  qsort(tps, (size_t)reps, sizeof *tps, cmp_d);
  r->med = reps % 2 ? tps[reps / 2] : 0.5 * (tps[reps / 2 - 1] + tps[reps / 2]);
  r->min = tps[0];
  r->max = tps[reps - 1];
}

/* Streams a buffer of `mib` MiB with `threads` readers; returns GB/s (the machine's read floor). */
double bench_bandwidth_probe(int threads, int mib);

static int err_set_bench(struct hearth_err *err, const char *msg) {
  snprintf(err->msg, sizeof err->msg, "%s", msg);
  return -1;
}

/* tg tokens for each of the B sessions by speculative greedy steps (cur: each one's pending token); sessions that
 * have their tg leave the batch. Adds the drafting counts to *v, *d, *a. */
static int bench_spec(struct hearth_session **ss, int B, int32_t *cur, long tg, int k, uint64_t *v, uint64_t *d,
                      uint64_t *a, struct hearth_err *err) {
  enum { W = HEARTH_SPEC_MAX + 1 };
  struct hearth_spec *sp[64] = {0};
  long made[64] = {0};
  int rc = 0;
  for (int i = 0; i < B && !rc; i++) rc = hearth_spec_new(k, &sp[i], err);
  while (!rc) {
    struct hearth_session *as[64];
    struct hearth_spec *asp[64];
    int32_t pend[64], ids[64 * W];
    int idx[64], want[64], nid[64], n = 0;
    for (int i = 0; i < B; i++)
      if (made[i] < tg) { idx[n] = i; as[n] = ss[i]; asp[n] = sp[i]; pend[n] = cur[i]; want[n++] = (int)(tg - made[i]); }
    if (!n) break;
    rc = hearth_sessions_step_spec(as, n, pend, asp, want, ids, NULL, nid, err);
    for (int j = 0; !rc && j < n; j++) {
      made[idx[j]] += nid[j];
      cur[idx[j]] = ids[j * W + nid[j] - 1];
    }
  }
  for (int i = 0; i < B; i++) {
    uint64_t x = 0, y = 0, z = 0;
    if (sp[i]) hearth_spec_counts(sp[i], &x, &y, &z);
    *v += x; *d += y; *a += z;
    hearth_spec_free(sp[i]);
  }
  return rc;
}

int cmd_bench(int argc, char **argv) {
  struct hearth_model_params mp;
  hearth_model_params_default(&mp);
  long pp[16], tg = 128, reps = 5, ctx[8] = {71}, batch[8], tg_k = 0;
  int n_pp = 3, n_ctx = 1, n_batch = 0, json = 0, probe = 0, host_sample = 0;
  long spec_k = 0; /* --speculate K: the --batch runs decode with prompt-lookup drafts (hearth_sessions_step_spec) */
  struct hearth_sampling sp; /* tgN: greedy unless --temp > 0 (then sampled, seed 1) */
  hearth_sampling_default(&sp);
  sp.temperature = 0.0f;
  sp.seed = 1;
  double f;
  pp[0] = 71; pp[1] = 512; pp[2] = 1570;
  for (int i = 1; i < argc; i++) {
    int r = arg_model_option(argc, argv, &i, &mp);
    if (r < 0) return 2;
    if (r) continue;
    const char *a = argv[i], *v;
    if (!strcmp(a, "-p")) { if ((n_pp = parse_list(arg_value(argc, argv, &i), pp, 16)) < 0) return bad_list(a); }
    else if (!strcmp(a, "-n")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 1 << 20, &tg)) return 2; }
    else if (!strcmp(a, "-r")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 1, 1000, &reps)) return 2; }
    else if (!strcmp(a, "--tg-ctx")) { if ((n_ctx = parse_list(arg_value(argc, argv, &i), ctx, 8)) <= 0) return bad_list(a); }
    else if (!strcmp(a, "--batch")) { if ((n_batch = parse_list(arg_value(argc, argv, &i), batch, 8)) < 0) return bad_list(a); }
    else if (!strcmp(a, "--temp")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; sp.temperature = (float)f; }
    else if (!strcmp(a, "--top-p")) { if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, &f)) return 2; sp.top_p = (float)f; }
    else if (!strcmp(a, "--top-k")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 1 << 30, &tg_k)) return 2; sp.top_k = (int)tg_k; }
    else if (!strcmp(a, "--host-sample")) host_sample = 1;
    else if (!strcmp(a, "--speculate")) { if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, HEARTH_SPEC_MAX, &spec_k)) return 2; }
    else if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--probe")) probe = 1;
    else {
      fprintf(stderr, "usage: hearth bench --model DIR [--threads T] [-p 71,512,1570] [-n 128] [-r 5] [--tg-ctx 71,1570]\n"
                      "                    [--batch 8,32] [--dtype ...] [--backend ...] [--probe] [--json]\n"
                      "                    [--temp X [--top-p P] [--top-k K] [--host-sample]] [--speculate K]\n"
                      "--speculate K: the --batch runs decode greedily with prompt-lookup drafts of up to K tokens (their\n"
                      "ids are plain greedy decoding's); the acceptance is printed below the row.\n"
                      "--temp X > 0: tgN samples (seed 1) where the logits are (hearth_sessions_step_sampled), or with\n"
                      "--host-sample from the logits copied to the host (hearth_sampler_sample, as before issue 36 item 4).\n");
      return 2;
    }
  }
  if (!mp.path) { fprintf(stderr, "hearth bench: --model DIR is required\n"); return 2; }
  for (int i = 0; i < n_batch; i++)
    if (batch[i] > 64) { fprintf(stderr, "hearth bench: --batch widths are at most 64\n"); return 2; }
  long maxctx = 0;
  for (int i = 0; i < n_pp; i++) if (pp[i] > maxctx) maxctx = pp[i];
  for (int i = 0; i < n_ctx; i++) if (ctx[i] + tg > maxctx) maxctx = ctx[i] + tg;
  long maxb = 1;
  for (int i = 0; i < n_batch; i++) if (batch[i] > maxb) maxb = batch[i];
  if (!mp.kv_tokens) mp.kv_tokens = (int)((maxctx > 71 + tg ? maxctx : 71 + tg) * maxb + 64 * maxb + 64);
  struct hearth_err err = {0};
  struct hearth_model *m = NULL;
  if (hearth_model_load(&mp, &m, &err)) { fprintf(stderr, "hearth bench: %s\n", err.msg); return 1; }
  const struct hearth_model_info *mi = hearth_model_info(m);
  if (!json) {
    printf("model %s: %s, %d layers, d=%d, %.1fM params, weights %.1f MiB, %.1f MB read per decode token, backend %s, kernels %s\n",
           mp.path, mi->arch, mi->n_layer, mi->n_embd, (double)mi->n_params / 1e6, (double)mi->weight_bytes / 1048576.0,
           (double)mi->weight_bytes_per_token / 1e6, mi->backend == HEARTH_BACKEND_CUDA ? "cuda" : "cpu", mi->kernels);
    if (probe && mi->backend == HEARTH_BACKEND_CPU) {
      double bw = bench_bandwidth_probe(mp.n_threads, 1024);
      g_probe_gbs = bw;
      printf("memory read probe: %.1f GB/s -> decode floor %.1f tok/s\n", bw, bw * 1e9 / (double)mi->weight_bytes_per_token);
    }
    printf("| %-12s | %10s | %10s | %10s |\n|--------------|------------|------------|------------|\n", "test", "tok/s med", "min", "max");
  }
  int32_t *toks = malloc((size_t)(maxctx + tg + 8) * sizeof *toks);
  double *tps = malloc((size_t)reps * sizeof *tps);
  int32_t *hist = malloc((size_t)(tg + 1) * sizeof *hist); /* a sampled tgN's tokens (the penalties' history) */
  uint64_t rs = 42;
  for (long i = 0; i < maxctx + tg + 8; i++) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; toks[i] = (int32_t)(rs % (uint64_t)mi->n_vocab); }
  int rc = 0;
  struct hearth_session *s = NULL;
  if ((rc = hearth_session_new(m, NULL, &s, &err))) goto done;
  /* warm-up */
  if ((rc = hearth_session_sync(s, toks, 8, &err))) goto done;
  for (int i = 0; i < n_pp; i++) {
    struct result r = {.tokens = (int)pp[i]};
    snprintf(r.test, sizeof r.test, "pp%ld", pp[i]);
    for (int k = 0; k < reps; k++) {
      int32_t first = toks[0];
      toks[0] = (int32_t)(first + 1 + k) % mi->n_vocab; /* defeat prefix reuse: a different first token */
      double t0 = now_s();
      rc = hearth_session_sync(s, toks, (int)pp[i], &err);
      double t1 = now_s();
      toks[0] = first;
      if (rc) goto done;
      tps[k] = (double)pp[i] / (t1 - t0);
    }
    summarize(&r, tps, (int)reps);
    report(&r, mi, json, 0);
  }
  for (int c = 0; tg > 0 && c < n_ctx; c++) {
    struct result r = {.tokens = (int)tg};
    if (c == 0) snprintf(r.test, sizeof r.test, "tg%ld", tg);
    else snprintf(r.test, sizeof r.test, "tg%ld@d%ld", tg, ctx[c]);
    if (sp.temperature > 0) { /* the name says how it sampled */
      size_t l = strlen(r.test);
      snprintf(r.test + l, sizeof r.test - l, " T%g%s", (double)sp.temperature, host_sample ? " host" : "");
    }
    for (int k = 0; k < reps; k++) {
      toks[0] = (int32_t)(toks[0] + 1) % mi->n_vocab;
      if ((rc = hearth_session_sync(s, toks, (int)ctx[c], &err))) goto done;
      /* greedy generation: each step feeds back the token the last one chose (on GPUs the
       * choice is made on the device, so only ids cross the bus) */
      int32_t t = toks[ctx[c] % (maxctx + 1)];
      struct hearth_sampler *smp = NULL;
      if (sp.temperature > 0 && (rc = hearth_sampler_new(&sp, mi->n_vocab, &smp, &err))) goto done;
      double t0 = now_s();
      for (long j = 0; j < tg; j++) {
        const int32_t *tp1 = &t;
        int one = 1;
        if (!smp) rc = hearth_sessions_step_greedy(&s, 1, &tp1, &one, &t, NULL, &err);
        else if (host_sample) { /* the whole row to the host, sampled there */
          if (!(rc = hearth_sessions_step(&s, 1, &tp1, &one, &err))) t = hearth_sampler_sample(smp, hearth_session_logits(s), hist, (int)j);
        } else {
          const struct hearth_sample_req req = {smp, hist, (int)j}, *rq = &req;
          const uint8_t g = 1;
          rc = hearth_sessions_step_sampled(&s, 1, &tp1, &one, &g, NULL, &rq, &t, NULL, &err);
        }
        if (!rc && t < 0) rc = err_set_bench(&err, "the model produced NaN or infinite logits");
        if (rc) { hearth_sampler_free(smp); goto done; }
        hist[j] = t;
      }
      tps[k] = (double)tg / (now_s() - t0);
      hearth_sampler_free(smp);
    }
    summarize(&r, tps, (int)reps);
    report(&r, mi, json, 1);
  }
  /* the cache is sized for the widest batch, not for it beside the sequence above: give that one's blocks back
   * (at --batch 1 the two did not fit, and the batch row failed with "KV cache is full") */
  hearth_session_free(s);
  s = NULL;
  for (int bi = 0; tg > 0 && bi < n_batch; bi++) {
    int B = (int)batch[bi];
    struct hearth_session **ss = calloc((size_t)B, sizeof *ss);
    const int32_t **tp = calloc((size_t)B, sizeof *tp);
    int *cnt = calloc((size_t)B, sizeof *cnt);
    struct result r = {.tokens = (int)tg * B};
    snprintf(r.test, sizeof r.test, spec_k ? "tg%ldx%d spec%ld" : "tg%ldx%d", tg, B, spec_k);
    uint64_t sv = 0, sd = 0, sa = 0; /* speculation: verifies, drafted, accepted over the reps */
    for (int j = 0; j < B && !rc; j++) rc = hearth_session_new(m, NULL, &ss[j], &err);
    for (int k = 0; k < reps && !rc; k++) {
      for (int j = 0; j < B && !rc; j++) { toks[1] = (int32_t)(j + k) % mi->n_vocab; rc = hearth_session_sync(ss[j], toks, (int)ctx[0], &err); }
      double t0 = now_s();
      int32_t *cur = calloc((size_t)B, sizeof *cur);
      for (int j = 0; j < B; j++) { cur[j] = toks[j % (maxctx + 1)]; tp[j] = &cur[j]; cnt[j] = 1; }
      if (spec_k) rc = bench_spec(ss, B, cur, tg, (int)spec_k, &sv, &sd, &sa, &err);
      for (long step = 0; !spec_k && step < tg && !rc; step++)
        rc = hearth_sessions_step_greedy(ss, B, tp, cnt, cur, NULL, &err); /* ids overwrite cur */
      free(cur);
      tps[k] = (double)(tg * B) / (now_s() - t0);
    }
    if (!rc) { summarize(&r, tps, (int)reps); report(&r, mi, json, 1); }
    if (!rc && spec_k && !json)
      printf("|              |   speculation: %llu verifies, %llu drafted, %llu accepted\n", (unsigned long long)sv,
             (unsigned long long)sd, (unsigned long long)sa);
    for (int j = 0; j < B; j++) hearth_session_free(ss[j]);
    free(ss); free(tp); free(cnt);
    if (rc) goto done;
  }
done:
  if (rc) fprintf(stderr, "hearth bench: %s\n", err.msg);
  hearth_session_free(s);
  hearth_model_free(m);
  free(toks);
  free(tps);
  free(hist);
  return rc ? 1 : 0;
}
