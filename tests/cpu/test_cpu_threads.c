/* test_cpu_threads.c — the int4 fast path gives the same tokens (and bit-identical logits) with 1,
 * 2 and N threads: matmuls split by output rows, attention by whole (tile, head) items, so no
 * reduction order depends on the thread count. Uses the tiny Qwen2 fixture of tests/fixtures. */
#include <stdint.h>
#include <string.h>

#include "hearth.h"
#include "test.h"

#define NGEN 24

static int run(int threads, int32_t *toks, float *logits0, int *n_vocab) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/model/qwen2", HEARTH_SOURCE_DIR);
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  p.path = path;
  p.n_threads = threads;
  p.kv_tokens = 512;
  struct hearth_model *m = NULL;
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  if (hearth_model_load(&p, &m, &err)) { fprintf(stderr, "load: %s\n", err.msg); return -1; }
  int nv = hearth_model_info(m)->n_vocab;
  *n_vocab = nv;
  if (hearth_session_new(m, NULL, &s, &err)) { hearth_model_free(m); return -1; }
  int32_t prompt[40];
  for (int i = 0; i < 40; i++) prompt[i] = (int32_t)((i * 37 + 11) % nv);
  int rc = hearth_session_sync(s, prompt, 40, &err);
  if (!rc) memcpy(logits0, hearth_session_logits(s), sizeof(float) * (size_t)nv);
  for (int g = 0; g < NGEN && !rc; g++) {
    const float *l = hearth_session_logits(s);
    int best = 0;
    for (int i = 1; i < nv; i++) if (l[i] > l[best]) best = i;
    toks[g] = best;
    int32_t t = best;
    rc = hearth_session_append(s, &t, 1, &err);
  }
  if (rc) fprintf(stderr, "run: %s\n", err.msg);
  hearth_session_free(s);
  hearth_model_free(m);
  return rc;
}

TEST_GROUP(tokens_1_2_n) {
  static float l1[1 << 20], ln[1 << 20];
  int32_t t1[NGEN], tn[NGEN];
  int nv = 0;
  REQUIRE(run(1, t1, l1, &nv) == 0);
  REQUIRE(nv <= (1 << 20));
  const int threads[] = {2, 3, 5};
  for (int i = 0; i < 3; i++) {
    REQUIRE(run(threads[i], tn, ln, &nv) == 0);
    CHECKF(!memcmp(t1, tn, sizeof t1), "%d threads: tokens differ from 1 thread", threads[i]);
    CHECKF(!memcmp(l1, ln, sizeof(float) * (size_t)nv), "%d threads: prompt logits not bit-identical", threads[i]);
  }
}

TEST_MAIN(T(tokens_1_2_n))
