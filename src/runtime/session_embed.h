/* runtime/session_embed.h — the one piece of session.c that runtime/embed_batch.c needs: an
 * embedding forward over several fresh sequences, without the public API's per-session logits. */
#ifndef HEARTH_RUNTIME_SESSION_EMBED_H
#define HEARTH_RUNTIME_SESSION_EMBED_H

#include "hearth.h"

/* Resets sessions ss[0..n) of one embedding model, evaluates tokens[i][0..counts[i]) from position 0
 * in each (packed into forward passes of at most the scratch's max_tokens; one pass when the counts
 * sum to at most that and n <= max_seqs), and writes each sequence's final hidden state at its last
 * position (before pooling and normalisation) to hidden[i * n_embd]. The sessions are left empty
 * (their KV blocks back in the pool) whether or not it succeeds. With n == 1 the session's abort
 * hook is polled before every pass. */
int session_embed_last(struct hearth_session **ss, int n, const int32_t *const *tokens, const int *counts,
                       float *hidden, struct hearth_err *err);

#endif
