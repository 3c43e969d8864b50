/* runtime/speculate.c — prompt-lookup speculation for greedy decoding (hearth.h, hearth_sessions_step_spec).
 *
 * A draft is what followed the most recent earlier occurrence of the session's last n-gram (the prompt and the
 * output alike; n from SPEC_NGRAM_MAX down to SPEC_NGRAM_MIN). The pending token and the draft go through one
 * forward (session_verify) that chooses greedily at every position; the ids up to and including the first one
 * that disagrees with the draft are the step's output, and the KV of the rejected draft positions is cut again
 * (session_keep) before any block is keyed, so the prefix cache never holds a block under tokens it was not
 * computed for. That the output is the plain greedy one, bit for bit, rests on the verify rows having the bits of
 * one-token steps: true where the backend's kernels are row-invariant (the CPU), and on CUDA for a verify of one
 * sequence that the backend computes as that sequence's one-token steps (set_step_twins; session_verify_span says
 * how many rows it can). So on CUDA a step drafts only when it holds one session (info->can_speculate; decisions.md).
 *
 * A draft that fails costs the extra rows of its forward for nothing — on the CPU each row of a verify costs
 * about 0.3 of a one-token step (bench/RESULTS.md), so a draft pays only when over ~30 % of it is taken. Hence the
 * draft length follows what was taken: it starts at 1, doubles (up to max_draft) while drafts are taken whole,
 * becomes one more than what was taken when a draft is cut short, and 1 after a draft is rejected at its first
 * token; such a sequence also waits 4, 16, then SPEC_WAIT_MAX steps before it drafts again (an accepted token
 * resets the wait). A sequence that finds no match costs only the lookup. Where a step ahead is in flight (CUDA's
 * decode loop) a verify would drop it; the call then steps plainly first, which checks the draft's first token for
 * free, and verifies the rest of the draft in the next call (below, session_step_hold). */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model.h"
#include "runtime/session_verify.h"

enum { SPEC_NGRAM_MAX = 4, SPEC_NGRAM_MIN = 2, SPEC_WAIT_MAX = 64 };

struct hearth_spec {
  int kmax, k;      /* the longest draft; the next draft's length (grows while drafts are taken whole) */
  int wait, backoff; /* steps left without drafting; the wait the next rejection sets */
  /* the rest of a draft whose first token a held step confirmed (below): the next call's draft, if that call
   * comes with the session at carry_at tokens and carry_tok pending */
  int32_t carry[HEARTH_SPEC_MAX];
  int n_carry, carry_at;
  int32_t carry_tok;
  uint64_t verifies, drafted, accepted;
};

int hearth_spec_new(int max_draft, struct hearth_spec **out, struct hearth_err *err) {
  *out = NULL;
  if (max_draft < 1 || max_draft > HEARTH_SPEC_MAX)
    return err_set(err, HEARTH_ERR_ARG, "speculation: draft length %d not in 1..%d", max_draft, HEARTH_SPEC_MAX);
  struct hearth_spec *sp = calloc(1, sizeof *sp);
  if (!sp) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  sp->kmax = max_draft;
  sp->k = 1;
  *out = sp;
  return 0;
}

void hearth_spec_free(struct hearth_spec *sp) { free(sp); }

void hearth_spec_reset(struct hearth_spec *sp) {
  sp->k = 1;
  sp->wait = sp->backoff = 0;
  sp->n_carry = 0;
}

void hearth_spec_counts(const struct hearth_spec *sp, uint64_t *verifies, uint64_t *drafted, uint64_t *accepted) {
  if (verifies) *verifies = sp->verifies;
  if (drafted) *drafted = sp->drafted;
  if (accepted) *accepted = sp->accepted;
}

/* the context a draft is looked up in: the session's tokens, then the pending one */
struct ctx {
  const int32_t *t;
  int n; /* tokens in t; position n is the pending token */
  int32_t pending;
};
static int32_t at(const struct ctx *c, int j) { return j < c->n ? c->t[j] : c->pending; }

/* Up to k tokens after the most recent earlier occurrence of the context's last n-gram (longest n first) into
 * draft; returns how many. A continuation that reaches the end of the context goes on with the draft itself
 * (a cycle shorter than k is drafted k long). */
static int lookup(const struct ctx *c, int k, int32_t *draft) {
  const int L = c->n + 1;
  for (int g = SPEC_NGRAM_MAX; g >= SPEC_NGRAM_MIN; g--) {
    if (L < g + 1) continue;
    for (int j = L - g - 1; j >= 0; j--) {
      int t = 0;
      while (t < g && at(c, j + t) == at(c, L - g + t)) t++;
      if (t < g) continue;
      const int from = j + g, avail = L - from; /* avail >= 1 */
      for (int i = 0; i < k; i++) draft[i] = i < avail ? at(c, from + i) : draft[i - avail];
      return k;
    }
  }
  return 0;
}

/* after a draft of k tokens of which a were taken */
static void adapt(struct hearth_spec *sp, int k, int a) {
  if (a == 0) { /* the draft failed at its first token: wait longer each time before the next */
    sp->backoff = sp->backoff ? (sp->backoff * 4 > SPEC_WAIT_MAX ? SPEC_WAIT_MAX : sp->backoff * 4) : 4;
    sp->wait = sp->backoff;
    sp->k = 1; /* the next try risks one row */
    return;
  }
  sp->backoff = 0;
  /* taken whole: draft longer next time; cut short: about as long as what was taken, and one more */
  sp->k = a == k ? (2 * k > sp->kmax ? sp->kmax : 2 * k) : (a + 1 > sp->kmax ? sp->kmax : a + 1);
}

/* after a verify of k drafted tokens of which a were taken */
static void learn(struct hearth_spec *sp, int k, int a) {
  sp->verifies++;
  sp->drafted += (uint64_t)k;
  sp->accepted += (uint64_t)a;
  adapt(sp, k, a);
}

int hearth_sessions_step_spec(struct hearth_session **ss, int n, const int32_t *pending, struct hearth_spec *const *sp,
                              const int *want, int32_t *ids, float *logprobs, int *n_ids, struct hearth_err *err) {
  enum { W = HEARTH_SPEC_MAX + 1 };
  if (n <= 0) return 0;
  if (n > hearth_model_info(session_model(ss[0]))->max_seqs)
    return err_set(err, HEARTH_ERR_ARG, "at most %d sessions per step", hearth_model_info(session_model(ss[0]))->max_seqs);
  const struct hearth_model *m = session_model(ss[0]);
  /* twins (CUDA): one session a step; a backend whose rows are alike in any batch: any */
  const int can = hearth_model_info(session_model(ss[0]))->can_speculate && (n == 1 || !m->be->set_step_twins);
  const int per = session_verify_rows(ss[0]) / n; /* rows each session may use in one forward (>= 1) */
  int32_t tok[MODEL_MAX_SEQS][W];
  const int32_t *tp[MODEL_MAX_SEQS];
  int cnt[MODEL_MAX_SEQS], any = 0;
  int first[MODEL_MAX_SEQS] = {0}; /* 1: the draft's first token was confirmed by a held step (a carried draft) */
  for (int i = 0; i < n; i++) {
    tok[i][0] = pending[i];
    tp[i] = tok[i];
    cnt[i] = 1;
    struct hearth_spec *s = sp ? sp[i] : NULL;
    const int held = hearth_session_n_tokens(ss[i]);
    int carried = 0; /* a carried draft is for the very next call only */
    if (s) {
      carried = s->n_carry > 0 && s->carry_at == held && s->carry_tok == pending[i] ? s->n_carry : 0;
      s->n_carry = 0;
    }
    const int span = can && s && want && want[i] >= 2 && !session_is_invariant(ss[i]) ? session_verify_span(ss[i]) : 0;
    if (span < 2) continue;
    if (!carried && s->wait > 0) { s->wait--; continue; }
    int k = carried ? carried : s->k;
    if (k > want[i] - 1) k = want[i] - 1;
    if (k > per - 1) k = per - 1;
    if (k > span - 1) k = span - 1;
    if (k > session_n_ctx(ss[i]) - held - 2) k = session_n_ctx(ss[i]) - held - 2; /* room for the next pending */
    if (k <= 0) continue;
    const struct ctx c = {hearth_session_tokens(ss[i]), held, pending[i]};
    if (carried) memcpy(tok[i] + 1, s->carry, (size_t)k * sizeof(int32_t));
    cnt[i] += carried ? k : lookup(&c, k, tok[i] + 1);
    first[i] = carried > 0;
    any |= cnt[i] > 1;
  }
  if (!any) { /* no draft: a plain step (its kernels, its bits) */
    int32_t id[MODEL_MAX_SEQS];
    float lp[MODEL_MAX_SEQS];
    int rc = hearth_sessions_step_greedy(ss, n, tp, cnt, id, logprobs ? lp : NULL, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
      ids[(size_t)i * W] = id[i];
      if (logprobs) logprobs[(size_t)i * W] = lp[i];
      n_ids[i] = 1;
    }
    return 0;
  }
  if (n == 1 && session_ahead_live(ss[0])) {
    /* A step ahead of this call is in flight (CUDA's decode loop): a verify now would drop it, a whole step of the
     * device's time lost. This step claims it instead and enqueues none, which checks the draft's first token for
     * nothing: the rest of a draft it confirms is the next call's draft (verified then, with nothing in flight),
     * and one it rejects backs off as a verify rejected at its first token would. The counts (hearth_spec_counts)
     * take a confirmed first token with the verify of the rest; a draft rejected here is in none of them */
    struct hearth_spec *s = sp[0];
    float lp;
    int rc = session_step_hold(ss[0], pending[0], &ids[0], logprobs ? &lp : NULL, err);
    if (rc) return rc;
    if (logprobs) logprobs[0] = lp;
    n_ids[0] = 1;
    const int k = cnt[0] - 1;
    if (ids[0] != tok[0][1]) adapt(s, k, 0);
    else if (k == 1) adapt(s, 1, 1);
    else {
      memcpy(s->carry, tok[0] + 2, (size_t)(k - 1) * sizeof(int32_t));
      s->n_carry = k - 1;
      s->carry_at = hearth_session_n_tokens(ss[0]);
      s->carry_tok = ids[0];
    }
    return 0;
  }
  int32_t rid[MODEL_MAX_SEQS * W];
  float rlp[MODEL_MAX_SEQS * W];
  int held[MODEL_MAX_SEQS];
  for (int i = 0; i < n; i++) held[i] = hearth_session_n_tokens(ss[i]);
  int rc = session_verify(ss, n, tp, cnt, rid, logprobs ? rlp : NULL, err);
  if (rc == HEARTH_ERR_UNSUPPORTED && !hearth_model_info(m)->can_speculate) { /* no twins after all: a plain step */
    int32_t id;
    float lp;
    const int32_t *t0 = tok[0];
    const int one = 1;
    if ((rc = hearth_sessions_step_greedy(ss, 1, &t0, &one, &id, logprobs ? &lp : NULL, err))) return rc;
    ids[0] = id;
    if (logprobs) logprobs[0] = lp;
    n_ids[0] = 1;
    return 0;
  }
  if (rc) return rc;
  for (int i = 0, r = 0; i < n; r += cnt[i], i++) {
    const int k = cnt[i] - 1;
    int a = 0; /* draft tokens taken: each equals the argmax of the position before it */
    while (a < k && rid[r + a] == tok[i][1 + a]) a++;
    for (int j = 0; j <= a; j++) {
      ids[(size_t)i * W + j] = rid[r + j];
      if (logprobs) logprobs[(size_t)i * W + j] = rlp[r + j];
    }
    n_ids[i] = a + 1;
    session_keep(ss[i], held[i] + 1 + a);
    if (k > 0) learn(sp[i], k + first[i], a + first[i]); /* a carried draft: with its confirmed first token */
  }
  return 0;
}
