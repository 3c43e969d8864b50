/* backend/cuda/trace.cu — the in-graph timeline of a trace build (-DHEARTH_TRACE=1; cuda_common.cuh).
 * The latest graph captured is traced: its GEMV and attention launches get ids 0, 1, ... in launch
 * order (a new capture starts the table afresh), each replay of it is synchronised and its stamps added
 * up (replays of older graphs are not), and the context's end prints, per kernel, the mean time (µs) of
 * each stamped stage (the kinds: cuda_common.cuh), from the first block's wait release: where inside a
 * kernel the time after its wait goes, and the release after the previous kernel's end (the boundary).
 * In a default build every function here is an empty stub. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

#if HEARTH_TRACE
int cu_trace_id(struct hb_ctx *c, const char *fmt, ...) {
  if (!c->capturing || !c->tr_dev || c->tr_seq >= CU_TRACE_MAX) return -1;
  const int id = c->tr_seq++;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->tr_label[id], sizeof c->tr_label[id], fmt, ap);
  va_end(ap);
  return id;
}

void cu_trace_capture_begin(struct hb_ctx *c) {
  c->tr_captures++;
  c->tr_seq = c->tr_steps = 0;
  memset(c->tr_sum, 0, sizeof c->tr_sum);
  memset(c->tr_cnt, 0, sizeof c->tr_cnt);
  /* failures here only turn the trace off; the runtime's sticky last error is cleared so that the
   * next launch check does not blame its kernel */
  if (!c->tr_dev && cudaMalloc(&c->tr_dev, CU_TRACE_KINDS * CU_TRACE_MAX * sizeof(unsigned long long)) != cudaSuccess) {
    c->tr_dev = NULL;
    (void)cudaGetLastError();
  }
}

int cu_trace_graph_traced(struct hb_ctx *c) { return c->tr_dev && c->tr_seq > 0 ? c->tr_captures : 0; }

int cu_trace_captures(struct hb_ctx *c) { return c->tr_captures; }

void cu_trace_replay_begin(struct hb_ctx *c) {
  if (cudaMemsetAsync(c->tr_dev, 0xff, CU_TRACE_NMIN * CU_TRACE_MAX * sizeof(unsigned long long), c->stream) != cudaSuccess ||
      cudaMemsetAsync(c->tr_dev + CU_TRACE_NMIN * CU_TRACE_MAX, 0,
                      (CU_TRACE_KINDS - CU_TRACE_NMIN) * CU_TRACE_MAX * sizeof(unsigned long long), c->stream) != cudaSuccess)
    cu_fail(c, HEARTH_ERR_BACKEND, __FILE__, __LINE__, "trace: cudaMemsetAsync failed");
}

void cu_trace_replay_end(struct hb_ctx *c) {
  static unsigned long long h[CU_TRACE_KINDS * CU_TRACE_MAX];
  if (CU_OK(c, cudaStreamSynchronize(c->stream)) || CU_OK(c, cudaMemcpy(h, c->tr_dev, sizeof h, cudaMemcpyDeviceToHost)))
    return;
  unsigned long long t0 = ~0ull;
  for (int i = 0; i < c->tr_seq; i++) if (h[i] < t0) t0 = h[i];
  if (t0 == ~0ull) return;
  for (int i = 0; i < c->tr_seq; i++) {
    if (h[i] == ~0ull || h[CU_TRACE_MAX + i] == ~0ull || !h[2 * CU_TRACE_MAX + i]) continue;
    for (int k = 0; k < CU_TRACE_KINDS; k++) /* kinds a kernel does not stamp stay 0 */
      c->tr_sum[k][i] += h[k * CU_TRACE_MAX + i] ? (double)(h[k * CU_TRACE_MAX + i] - t0) * 1e-3 : 0.0;
    c->tr_cnt[i]++;
  }
  c->tr_steps++;
}

void cu_trace_print(struct hb_ctx *c) {
  if (!c->tr_steps) return;
  fprintf(stderr, "\n### in-graph timeline: %d replays of the latest captured graph, µs from the step's first stamp\n"
                  "(first/last: over the kernel's blocks; the last six columns are after the first wait release: pro = x in\n"
                  "shared memory, slot = the first ring step landed, mma = the last step multiplied, red = partial tiles\n"
                  "reduced, emit = outputs written; – where a kernel has no such stage)\n\n"
                  "| # | kernel | first entry | last entry | first release | release − prev end | last release | pro | slot |"
                  " mma | red | emit | end |\n"
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", c->tr_steps);
  double prev_end = 0.0;
  for (int i = 0; i < c->tr_seq; i++) {
    if (!c->tr_cnt[i]) { fprintf(stderr, "| %d | %s | – | – | – | – | – | – | – | – | – | – | – |\n", i, c->tr_label[i]); continue; }
    double m[CU_TRACE_KINDS];
    for (int k = 0; k < CU_TRACE_KINDS; k++) m[k] = c->tr_sum[k][i] / c->tr_cnt[i];
    const double w = m[1];
    char col[6][16];
    const int ks[6] = {3, 4, 5, 7, 8, 9};
    for (int k = 0; k < 6; k++) {
      if (m[ks[k]] > 0) snprintf(col[k], sizeof col[k], "%.2f", m[ks[k]] - w);
      else snprintf(col[k], sizeof col[k], "–");
    }
    fprintf(stderr, "| %d | %s | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %s | %s | %s | %.2f |\n", i, c->tr_label[i], m[0],
            m[6], w, w - prev_end, col[0], col[1], col[2], col[3], col[4], col[5], m[2] - w);
    prev_end = m[2];
  }
}
#else
int cu_trace_id(struct hb_ctx *, const char *, ...) { return -1; }
void cu_trace_capture_begin(struct hb_ctx *) {}
int cu_trace_graph_traced(struct hb_ctx *) { return 0; }
int cu_trace_captures(struct hb_ctx *) { return 0; }
void cu_trace_replay_begin(struct hb_ctx *) {}
void cu_trace_replay_end(struct hb_ctx *) {}
void cu_trace_print(struct hb_ctx *) {}
#endif
