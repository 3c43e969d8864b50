/* runtime/row_score.c — see row_score.h. The host computation is the op's definition written plainly: the
 * same passes and orders as backend/cuda/sample.cu's row_score_kernel, summed left to right. */
#include "runtime/row_score.h"

#include <math.h>
#include <string.h>

#include "backend/backend.h"

void row_score_req(const struct hearth_row_score *sc, int32_t *req) {
  memset(req, 0, HB_SCORE_REQ * sizeof *req);
  if (!sc) return;
  req[0] = sc->k < 0 ? 0 : sc->k > HB_SCORE_K ? HB_SCORE_K : sc->k;
  req[1] = sc->n_ids < 0 ? 0 : sc->n_ids > HB_SCORE_NID ? HB_SCORE_NID : sc->n_ids;
  memcpy(req + 2, sc->ids, (size_t)req[1] * sizeof *req);
}

static int32_t f2w(float v) {
  int32_t w;
  memcpy(&w, &v, sizeof w);
  return w;
}

static float w2f(int32_t w) {
  float v;
  memcpy(&v, &w, sizeof v);
  return v;
}

void row_score_host(const float *lg, int64_t V, const int32_t *req, int32_t *out) {
  memset(out, 0, HB_SCORE_OUT * sizeof *out);
  float mx = -INFINITY;
  int64_t bi = 0;
  int finite = 1;
  for (int64_t i = 0; i < V; i++) {
    finite &= fabsf(lg[i]) <= 3.402823466e38f; /* false for NaN and ±inf */
    if (lg[i] > mx) { mx = lg[i]; bi = i; }
  }
  if (!finite || V <= 0) { out[0] = -1; return; }
  double s = 0.0;
  for (int64_t i = 0; i < V; i++) s += exp((double)lg[i] - (double)mx);
  double ls = log(s);
  out[0] = (int32_t)bi;
  out[1] = f2w(mx);
  memcpy(out + 2, &ls, sizeof ls);
  int nid = req[1] < 0 ? 0 : req[1] > HB_SCORE_NID ? HB_SCORE_NID : req[1];
  for (int j = 0; j < nid; j++) {
    int32_t id = req[2 + j];
    out[HB_SCORE_IDV + j] = id >= 0 && id < V ? f2w(lg[id]) : f2w(NAN);
  }
  int k = req[0] < 0 ? 0 : req[0] > HB_SCORE_K ? HB_SCORE_K : req[0];
  if (k > V) k = (int)V;
  int n = 0; /* insertion into a sorted top-k: value descending, lower index first (a later equal value is not before) */
  int32_t *top = out + HB_SCORE_TOP;
  for (int64_t i = 0; i < V && k > 0; i++) {
    float v = lg[i];
    if (n == k && v <= lg[top[k - 1]]) continue;
    int j = n < k ? n++ : k - 1;
    while (j > 0 && lg[top[j - 1]] < v) { top[j] = top[j - 1]; j--; }
    top[j] = (int32_t)i;
  }
  for (int j = 0; j < n; j++) out[HB_SCORE_TOPV + j] = f2w(lg[top[j]]);
}

void row_score_fill(const int32_t *out, int64_t V, struct hearth_row_score *sc) {
  sc->id = out[0];
  if (sc->id < 0) return;
  double mx = w2f(out[1]), ls;
  memcpy(&ls, out + 2, sizeof ls);
  sc->logprob = 0.0 - ls; /* the max's own: (mx - mx) - ls */
  int k = sc->k < 0 ? 0 : sc->k > HB_SCORE_K ? HB_SCORE_K : sc->k;
  sc->n_top = k > V ? (int)V : k;
  for (int j = 0; j < sc->n_top; j++) {
    sc->top_id[j] = out[HB_SCORE_TOP + j];
    sc->top_lp[j] = (double)w2f(out[HB_SCORE_TOPV + j]) - mx - ls;
  }
  int nid = sc->n_ids < 0 ? 0 : sc->n_ids > HB_SCORE_NID ? HB_SCORE_NID : sc->n_ids;
  for (int j = 0; j < nid; j++) sc->id_lp[j] = (double)w2f(out[HB_SCORE_IDV + j]) - mx - ls;
}

_Static_assert(HEARTH_SCORE_TOPK == HB_SCORE_K && HEARTH_SCORE_IDS == HB_SCORE_NID,
               "hearth_row_score and the row_score op carry the same counts");
