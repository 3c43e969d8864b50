/* runtime/row_score.h — hearth_row_score between the session layer and the backends: the request and result
 * words of the row_score op (backend/backend.h), and the same computation on the host for backends without
 * the op (the CPU, whose logits are in host memory already). */
#ifndef HEARTH_RUNTIME_ROW_SCORE_H
#define HEARTH_RUNTIME_ROW_SCORE_H
#include <stdint.h>

#include "hearth.h"

/* sc's in-fields -> req[HB_SCORE_REQ]; sc NULL: a row nothing is asked of (k = n_ids = 0) */
void row_score_req(const struct hearth_row_score *sc, int32_t *req);
/* the row_score op on the host: logits row lg[V] and req -> out[HB_SCORE_OUT] */
void row_score_host(const float *lg, int64_t V, const int32_t *req, int32_t *out);
/* result words -> sc's out-fields (logprobs as (double)logit − max − log Σ exp) */
void row_score_fill(const int32_t *out, int64_t V, struct hearth_row_score *sc);
#endif
