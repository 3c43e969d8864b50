/* tests/unit/step_sampled.h — the whole-session check of hearth_sessions_step_sampled, shared by the CPU runner
 * (test_session.c) and the CUDA one (tests/cuda/test_cuda_model.c): a sampled decode where the backend draws (one
 * session batched beside a greedy one) gives the same tokens as the same decode whose logits come to the host and
 * are sampled there by hearth_sampler_sample, for several parameter sets and seeds. The sessions are row-invariant
 * (hearth_session_set_row_invariant), so a token's logits are bit-identical alone and in a batch of two: the two
 * paths see the same rows, and any difference is the draw's. On the CPU the session layer samples on the host; on
 * CUDA the sample op decides (or defers to the host: both are checked by the same equality). */
#ifndef HEARTH_TEST_STEP_SAMPLED_H
#define HEARTH_TEST_STEP_SAMPLED_H

#include <stdio.h>
#include <stdlib.h>

#include "hearth.h"
#include "test.h"

/* Returns the number of steps whose tokens differ (each printed) over all sets, or -1 when a call failed. */
static int step_sampled_check(struct hearth_model *m, const char *label) {
  const int V = hearth_model_info(m)->n_vocab;
  struct { float t; int k; float p, minp, rep, pres, freq; } sets[] = {
    {0.8f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},   {1.0f, 40, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f},
    {1.2f, 0, 0.9f, 0.05f, 1.0f, 0.0f, 0.0f},  {0.7f, 0, 1.0f, 0.0f, 1.3f, 0.4f, 0.3f},
    {1.0f, 2000, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f}, {0.0f, 0, 1.0f, 0.0f, 1.2f, 0.0f, 0.0f} /* greedy, penalised */,
    {1e-3f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},  {1.5f, 1, 1.0f, 0.0f, 1.0f, 0.5f, 0.0f},
    {2.0f, 0, 0.95f, 0.0f, 1.1f, 0.0f, 0.0f} /* flat: on a vocabulary past 1,024, CUDA's sample_large.cuh */,
  };
  const int n_sets = (int)(sizeof sets / sizeof sets[0]), n_prompt = 21, n_steps = 24;
  int bad = 0;
  for (int si = 0; si < n_sets; si++)
    for (uint64_t seed = 11; seed <= 12; seed++) {
      struct hearth_sampling p;
      hearth_sampling_default(&p);
      p.temperature = sets[si].t; p.top_k = sets[si].k; p.top_p = sets[si].p; p.min_p = sets[si].minp;
      p.repetition_penalty = sets[si].rep; p.presence_penalty = sets[si].pres; p.frequency_penalty = sets[si].freq;
      p.seed = seed;
      struct hearth_err err = {0};
      struct hearth_sampler *sa = NULL, *sb = NULL;
      struct hearth_session *a = NULL, *b = NULL, *g = NULL, *g2 = NULL;
      int32_t prompt[21], ha[24], hb[24], tg = 0;
      for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((i * 37 + (int)seed * 101 + si * 13 + 11) % V);
      if (hearth_sampler_new(&p, V, &sa, &err) || hearth_sampler_new(&p, V, &sb, &err) ||
          hearth_session_new(m, NULL, &a, &err) || hearth_session_new(m, NULL, &b, &err) ||
          hearth_session_new(m, NULL, &g, &err) || hearth_session_new(m, NULL, &g2, &err)) {
        fprintf(stderr, "%s: setup: %s\n", label, err.msg);
        return -1;
      }
      hearth_sampler_set_prompt(sa, prompt, n_prompt);
      hearth_sampler_set_prompt(sb, prompt, n_prompt);
      struct hearth_session *all[4] = {a, b, g, g2};
      for (int i = 0; i < 4; i++) hearth_session_set_row_invariant(all[i], 1);
      int rc = hearth_session_sync(a, prompt, n_prompt - 1, &err) || hearth_session_sync(b, prompt, n_prompt - 1, &err) ||
               hearth_session_sync(g, prompt, n_prompt - 1, &err) || hearth_session_sync(g2, prompt, n_prompt - 1, &err);
      int32_t ta = prompt[n_prompt - 1], tb = ta;
      tg = ta;
      int first_bad = -1;
      for (int step = 0; !rc && step < n_steps; step++) {
        /* a (sampled) beside g (greedy) in one step */
        struct hearth_session *ab[2] = {a, g};
        const int32_t *toks[2] = {&ta, &tg};
        const int cnt[2] = {1, 1};
        const uint8_t greedy[2] = {0, 1};
        struct hearth_sample_req req = {sa, ha, step};
        const struct hearth_sample_req *samples[2] = {&req, NULL};
        int32_t ids[2] = {-7, -7};
        rc = hearth_sessions_step_sampled(ab, 2, toks, cnt, greedy, NULL, samples, ids, NULL, &err);
        if (rc) break;
        /* b: its logits on the host, sampled there; g2: g's greedy token alone */
        const int32_t *tb_p = &tb, *tg_p = &tg;
        const int one = 1;
        int32_t want_g = -7;
        rc = hearth_sessions_step(&b, 1, &tb_p, &one, &err) ||
             hearth_sessions_step_greedy(&g2, 1, &tg_p, &one, &want_g, NULL, &err);
        if (rc) break;
        const float *row = hearth_session_logits(b);
        if (!row) { rc = -1; break; }
        const int32_t want = hearth_sampler_sample(sb, row, hb, step);
        if (ids[0] != want || ids[1] != want_g) {
          bad++;
          if (first_bad < 0) first_bad = step;
          fprintf(stderr, "%s: set %d (T %g k %d p %g min_p %g rep %g pres %g freq %g) seed %d step %d: sampled %d, "
                  "host %d; greedy beside it %d, alone %d\n", label, si, sets[si].t, sets[si].k, sets[si].p,
                  sets[si].minp, sets[si].rep, sets[si].pres, sets[si].freq, (int)seed, step, ids[0], want, ids[1], want_g);
        }
        if (want < 0 || want_g < 0) { rc = -1; break; }
        ha[step] = tb = ta = want; /* both go on with the host's token, so one difference does not end the run */
        hb[step] = want;
        tg = want_g;
      }
      if (rc) fprintf(stderr, "%s: set %d seed %d: a step failed: %s\n", label, si, (int)seed, err.msg);
      else printf("  %s: set %d seed %d: %d steps, first tokens %d %d %d %d, first difference at %d\n", label, si,
                  (int)seed, n_steps, hb[0], hb[1], hb[2], hb[3], first_bad);
      for (int i = 0; i < 4; i++) hearth_session_free(all[i]);
      hearth_sampler_free(sa);
      hearth_sampler_free(sb);
      if (rc) return -1;
    }
  return bad;
}

#endif
