/* runtime/session_verify.h — what prompt-lookup speculation (runtime/speculate.c) needs of a session beyond
 * hearth.h; defined in runtime/session.c, which owns the session's blocks and keys. */
#ifndef HEARTH_RUNTIME_SESSION_VERIFY_H
#define HEARTH_RUNTIME_SESSION_VERIFY_H

#include "hearth.h"

/* Appends tokens[i][0..counts[i]) to sessions[i] in one forward pass and chooses greedily at every appended
 * position: row r of the call (sessions in order, each session's positions in order) gets its argmax in ids[r]
 * (-1 for a row with a NaN or an infinity) and, with lps, its logprob, as a one-token greedy step would. No block
 * is keyed in the prefix cache (rejected positions are cut again: session_keep). The rows must fit one forward
 * (their sum at most session_verify_rows); sessions must not be row-invariant ones. On failure every session holds
 * what it held before. */
int session_verify(struct hearth_session **ss, int n, const int32_t *const *tokens, const int *counts, int32_t *ids,
                   float *lps, struct hearth_err *err);
/* The most rows (the pending token and its draft) a session_verify of s may take now; below 2, none. A backend that
 * is not row-invariant (set_step_twins) verifies one session at a time, and every row of a verify must take the same
 * kind of one-token step: on CUDA, a sequence short enough for attn_o (attention + o_proj in one launch) verifies
 * only rows whose keys stay within attn_o's range. session_verify fails with HEARTH_ERR_UNSUPPORTED, holding what it
 * held before, if the backend finds the rows were not such twins after all, and the model's can_speculate is 0 from
 * then on. */
int session_verify_span(const struct hearth_session *s);
/* Whether a step enqueued ahead of the caller (decoding one step ahead, session.c) is in flight for s: a verify
 * would drop it, its device time lost. */
int session_ahead_live(const struct hearth_session *s);
/* One greedy step of s on token (as hearth_sessions_step_greedy: it claims a step ahead in flight) that enqueues
 * no step ahead of the next call, so that a verify can follow without dropping one. Only where session_ahead_live(s)
 * said a step ahead of s is in flight. */
int session_step_hold(struct hearth_session *s, int32_t token, int32_t *id, float *lp, struct hearth_err *err);
/* the most rows one session_verify may hold in all */
int session_verify_rows(const struct hearth_session *s);
/* Keeps the first n tokens of s (the accepted ones after a session_verify) and keys its full blocks. */
void session_keep(struct hearth_session *s, int n);
/* whether s runs the row-invariant kernels (hearth_session_set_row_invariant): no speculation there */
int session_is_invariant(const struct hearth_session *s);
struct hearth_model *session_model(const struct hearth_session *s);
int session_n_ctx(const struct hearth_session *s);

#endif
