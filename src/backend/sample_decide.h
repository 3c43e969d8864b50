/* backend/sample_decide.h — the last step of the sample op (backend.h) once a row's first candidates are sorted:
 * runtime/sampler.c's top-p, min-p and draw loops on them, or -1 where what is held cannot decide the host's answer
 * exactly. One definition for the CUDA kernel (backend/cuda/sample.cu, thread 0 of a row's block) and for the CPU
 * test that holds it to the sampler (tests/unit/test_sampler.c, decide), so its logic is checked without a GPU.
 *
 * Inputs: c[0..C) and id[0..C): the first C candidates in the host's order (c = (l - top) / T descending, id
 * ascending on ties); K: how many the host keeps before top-p (top_k when 0 < top_k < nc, else nc); nc: the
 * candidates; total: Σ exp(c) over every candidate with c > -60 (the host's top-p mass without top-k; used only
 * then); u: the draw. Its double sums may differ from the host's in the last bits (another order, another exp
 * within 1 ulp), so every deciding comparison is made only when its sides are more than SAMPLE_MARGIN (relative)
 * apart; closer calls, and cuts that may lie past the C held, return -1. The CUDA kernel now calls it only for
 * top-k <= SAMPLE_CAP (every candidate the host walks is held); larger sets go to backend/cuda/sample_large.cuh. */
#ifndef HEARTH_BACKEND_SAMPLE_DECIDE_H
#define HEARTH_BACKEND_SAMPLE_DECIDE_H

#include <math.h>

#define SAMPLE_CAP 1024
#define SAMPLE_MARGIN 1e-9

#ifdef __CUDACC__
#define SAMPLE_DECIDE_FN static __device__ __forceinline__
#else
#define SAMPLE_DECIDE_FN static inline
#endif

SAMPLE_DECIDE_FN int sample_decide(const float *c_val, const int *c_id, int C, int K, int nc, double total,
                                   float top_p, float min_p, double u) {
  const float mx = c_val[0];
  int n = C, undecided = 0;
  const int all_here = C == K; /* every candidate the host's loops can walk is held */
  if (top_p < 1.0f) {
    double sum = 0.0;
    if (K == nc) sum = total;
    else if (all_here) for (int i = 0; i < n; i++) sum += exp((double)(c_val[i] - mx));
    else undecided = 1; /* top-k above the cap: the mass of its k is not here */
    double cum = 0.0;
    int keep = -1;
    for (int i = 0; !undecided && i < n; i++) {
      cum += exp((double)(c_val[i] - mx)) / sum;
      if (fabs(cum - (double)top_p) <= SAMPLE_MARGIN) undecided = 1;
      else if (cum >= top_p) keep = i + 1;
      if (keep > 0) break;
    }
    if (!undecided) {
      if (keep > 0) n = keep;
      else if (!(all_here && K < nc)) undecided = 1; /* no cut in what is here (with top-k: the host keeps all k) */
    }
  }
  if (!undecided && min_p > 0.0f) {
    const double thr = log((double)min_p), m = SAMPLE_MARGIN * (1.0 + fabs(thr));
    int keep = 1;
    for (; keep < n; keep++) {
      const double d = (double)(c_val[keep] - mx);
      if (fabs(d - thr) <= m) { undecided = 1; break; }
      if (!(d >= thr)) break;
    }
    /* walked to the end of what is here: the host may hold more (its head, or k above the cap) */
    if (!undecided && keep == n && n == C && !(top_p < 1.0f) && !all_here) undecided = 1;
    n = keep;
  }
  if (!undecided && !(top_p < 1.0f) && !(min_p > 0.0f) && !all_here) undecided = 1; /* top-k above the cap */
  if (undecided) return -1;
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += exp((double)(c_val[i] - mx));
  const double target = u * sum, margin = SAMPLE_MARGIN * sum;
  double acc = 0.0;
  for (int i = 0; i < n; i++) {
    const double before = acc;
    acc += exp((double)(c_val[i] - mx));
    if (target < acc) return target - before >= margin && acc - target >= margin ? c_id[i] : -1;
  }
  return -1; /* u * sum at or past the end: a rounding edge */
}

#endif
