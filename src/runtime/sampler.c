/* runtime/sampler.c — token selection: penalties, temperature, top-k, top-p, min-p, seeded RNG.
 *
 * Order follows transformers' generate(): repetition penalty (HF semantics) and OpenAI
 * presence/frequency penalties on the raw logits, then temperature, top-k, top-p, min-p, then a
 * draw from the renormalised distribution. temperature 0 is greedy: argmax, lowest id on ties. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "runtime/sampler.h"

struct cand {
  float logit;
  int32_t id;
};

struct hearth_sampler {
  struct hearth_sampling p;
  int n_vocab;
  uint64_t s[4];      /* xoshiro256** state */
  float *work;        /* [n_vocab] penalised logits */
  struct cand *cands; /* [n_vocab] */
  struct cand *tmp;   /* [n_vocab] the radix sort's second buffer (allocated at the first large sort) */
  int32_t *counts;    /* [n_vocab] occurrences in history (scratch, all zero between calls) */
  const int32_t *prompt; /* the prompt, for the repetition penalty (not owned) */
  int n_prompt;
};

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(struct hearth_sampler *r) {
  uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
  return res;
}

static double next_unit(struct hearth_sampler *r) { return (double)(next_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

void hearth_sampling_default(struct hearth_sampling *p) {
  memset(p, 0, sizeof *p);
  p->temperature = 1.0f;
  p->top_p = 1.0f;
  p->repetition_penalty = 1.0f;
}

int hearth_sampling_is_plain_greedy(const struct hearth_sampling *p) {
  return p->temperature == 0.0f && p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f &&
         p->frequency_penalty == 0.0f;
}

int hearth_sampler_new(const struct hearth_sampling *p, int n_vocab, struct hearth_sampler **out, struct hearth_err *err) {
  *out = NULL;
  if (n_vocab <= 0) return err_set(err, HEARTH_ERR_ARG, "n_vocab must be positive");
  if (!(p->temperature >= 0) || !(p->top_p > 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
      p->top_k < 0 || !(p->repetition_penalty > 0))
    return err_set(err, HEARTH_ERR_ARG, "sampling parameters out of range");
  struct hearth_sampler *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  s->p = *p;
  s->n_vocab = n_vocab;
  s->work = malloc((size_t)n_vocab * sizeof *s->work);
  s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
  s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
  if (!s->work || !s->cands || !s->counts) { hearth_sampler_free(s); return err_set(err, HEARTH_ERR_NOMEM, "out of memory"); }
  uint64_t x = p->seed;
  for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
  *out = s;
  return 0;
}

void hearth_sampler_free(struct hearth_sampler *s) {
  if (!s) return;
  free(s->work);
  free(s->cands);
  free(s->tmp);
  free(s->counts);
  free(s);
}

static int cmp_cand_desc(const void *a, const void *b) {
  const struct cand *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* The order key of a candidate: larger logit, larger key; -0 keyed as +0 (cmp_cand_desc sees them equal) */
static uint32_t cand_key(float v) {
  uint32_t u;
  if (v == 0.0f) v = 0.0f;
  memcpy(&u, &v, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Sorts c[0..n) into cmp_cand_desc's order, which is a total order, so any correct sort gives the same sequence
 * and the draws stay qsort's bit for bit. A large head (a flat row under top-p: most of a 152k vocabulary) takes a
 * stable LSD radix sort on the key, 8 bits a pass, passes where every key has the same digit skipped: the head
 * comes from select_head in id order, so equal keys stay in id order as the comparator wants. qsort with a
 * comparator took ~20-30 ms for 150k candidates; the whole draw is now ~3-4 ms (bench/RESULTS.md, issue 36 item 4). */
static void sort_cands(struct hearth_sampler *s, struct cand *c, int n) {
  if (n > 2048 && !s->tmp) s->tmp = malloc((size_t)s->n_vocab * sizeof *s->tmp);
  if (n <= 2048 || !s->tmp) { qsort(c, (size_t)n, sizeof *c, cmp_cand_desc); return; }
  struct cand *src = c, *dst = s->tmp;
  for (int shift = 0; shift < 32; shift += 8) {
    int cnt[256] = {0};
    for (int i = 0; i < n; i++) cnt[(~cand_key(src[i].logit) >> shift) & 255u]++;
    int trivial = 0;
    for (int b = 0; b < 256; b++) trivial |= cnt[b] == n;
    if (trivial) continue;
    for (int b = 0, at = 0; b < 256; b++) { const int k = cnt[b]; cnt[b] = at; at += k; }
    for (int i = 0; i < n; i++) dst[cnt[(~cand_key(src[i].logit) >> shift) & 255u]++] = src[i];
    struct cand *t = src; src = dst; dst = t;
  }
  if (src != c) memcpy(c, src, (size_t)n * sizeof *c);
}

/* Moves to the front the candidates that can survive the filters and returns how many, so only
 * those are sorted (a full sort of a 152k vocabulary took ~10 ms per token). Candidates hold
 * logit - max <= 0. The head is every candidate >= a threshold t, lowered until it provably holds
 * the result: with top-k, at least k candidates (top-p and min-p then act inside the top k); with
 * top-p alone, at least top_p of the total probability (the top-p set is a prefix of the sorted
 * order); with min-p alone, t <= log(min_p). Ties at t are all included, so the sorted head equals
 * the first entries of a full sort. The head keeps its id order (sort_cands relies on it). */
static int select_head(struct cand *c, int n, int k, const struct hearth_sampling *p, double total) {
  for (double d = 8.0; d < 1e6; d *= 2) {
    float t = (float)-d;
    int cnt = 0;
    double mass = 0;
    for (int i = 0; i < n; i++)
      if (c[i].logit >= t) {
        cnt++;
        if (k == n && p->top_p < 1.0f) mass += exp((double)c[i].logit);
      }
    if (cnt == n) return n;
    int ok = k < n ? cnt >= k : p->top_p < 1.0f ? mass >= (double)p->top_p * total : (double)t <= log((double)p->min_p);
    if (!ok) continue;
    int w = 0;
    for (int i = 0; i < n; i++)
      if (c[i].logit >= t) { struct cand x = c[w]; c[w] = c[i]; c[i] = x; w++; }
    return w;
  }
  return n;
}

/* The row the selection reads: logits itself, or s->work holding it with the penalties applied */
static const float *penalize(struct hearth_sampler *s, const float *logits, const int32_t *history, int n_history) {
  const struct hearth_sampling *p = &s->p;
  int V = s->n_vocab;
  const float *lg = logits;
  int rep = p->repetition_penalty != 1.0f && ((history && n_history > 0) || s->n_prompt > 0);
  int pf = (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) && history && n_history > 0;
  if (rep || pf) {
    memcpy(s->work, logits, (size_t)V * sizeof *s->work);
    /* repetition penalty (transformers): once per distinct token of prompt + output */
    if (rep) {
      for (int pass = 0; pass < 2; pass++) {
        const int32_t *h = pass ? history : s->prompt;
        int nh = pass ? (history ? n_history : 0) : s->n_prompt;
        for (int i = 0; i < nh; i++) {
          int32_t t = h[i];
          if (t < 0 || t >= V || s->counts[t] < 0) continue;
          float l = s->work[t];
          s->work[t] = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
          s->counts[t] = -1; /* mark: penalised once */
        }
      }
      for (int pass = 0; pass < 2; pass++) { /* reset the marks */
        const int32_t *h = pass ? history : s->prompt;
        int nh = pass ? (history ? n_history : 0) : s->n_prompt;
        for (int i = 0; i < nh; i++) if (h[i] >= 0 && h[i] < V) s->counts[h[i]] = 0;
      }
    }
    /* presence / frequency penalties (OpenAI): over the generated tokens only */
    if (pf) {
      for (int i = 0; i < n_history; i++) if (history[i] >= 0 && history[i] < V) s->counts[history[i]]++;
      for (int i = 0; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || t >= V || s->counts[t] == 0) continue;
        s->work[t] -= p->presence_penalty + p->frequency_penalty * (float)s->counts[t];
        s->counts[t] = 0; /* once per distinct token; also resets the scratch */
      }
    }
    lg = s->work;
  }
  return lg;
}

/* The selection from the (penalised) row lg: greedy, or the draw with *u_given, or with the RNG's next draw when
 * u_given is NULL (taken only where a draw is made, so the RNG advances exactly as it always did) */
static int32_t pick(struct hearth_sampler *s, const float *lg, const double *u_given) {
  const struct hearth_sampling *p = &s->p;
  int V = s->n_vocab;
  if (p->temperature == 0.0f) { /* a NaN never wins: it compares false, so start from a number */
    int32_t best = 0;
    while (best < V - 1 && isnan(lg[best])) best++;
    for (int i = best + 1; i < V; i++) if (lg[i] > lg[best]) best = i;
    return best;
  }
  /* candidates hold (logit - max) / temperature <= 0: dividing first overflows to +inf for a
   * tiny temperature (1e-38 and 10 / 1e-38 > FLT_MAX), and inf - inf turned every weight into NaN,
   * so the draw fell through to the last candidate, an arbitrary token, instead of the argmax */
  float top = -INFINITY;
  for (int i = 0; i < V; i++)
    if (lg[i] > top) top = lg[i];
  if (top == INFINITY) { /* infinite logits: the lowest such id, as greedy would choose */
    for (int i = 0; i < V; i++)
      if (lg[i] == INFINITY) return i;
  }
  int n = 0;
  for (int i = 0; i < V; i++) {
    if (isnan(lg[i]) || lg[i] == -INFINITY) continue;
    s->cands[n].logit = (lg[i] - top) / p->temperature;
    s->cands[n].id = i;
    n++;
  }
  if (n == 0) return 0;
  int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
  double total = 0; /* softmax denominator over all candidates (the max is 0); top-p without top-k */
  if (k < n || p->top_p < 1.0f || p->min_p > 0.0f) {
    int n_all = n;
    if (k == n && p->top_p < 1.0f)
      for (int i = 0; i < n; i++)
        if (s->cands[i].logit > -60.0f) total += exp((double)s->cands[i].logit); /* e^-60: nothing */
    n = select_head(s->cands, n, k, p, total);
    sort_cands(s, s->cands, n);
    if (k < n_all) n = k;
  } else { /* plain sampling: no sort needed, but keep max first for stability */
    int bi = 0;
    for (int i = 1; i < n; i++) if (s->cands[i].logit > s->cands[bi].logit) bi = i;
    struct cand t = s->cands[0]; s->cands[0] = s->cands[bi]; s->cands[bi] = t;
  }
  float mx = s->cands[0].logit;
  double sum = 0;
  if (total > 0) sum = total; /* top-p over the whole distribution, of which only the head is sorted */
  else for (int i = 0; i < n; i++) sum += exp((double)(s->cands[i].logit - mx));
  if (p->top_p < 1.0f) {
    double cum = 0;
    int keep = n;
    for (int i = 0; i < n; i++) {
      cum += exp((double)(s->cands[i].logit - mx)) / sum;
      if (cum >= p->top_p) { keep = i + 1; break; }
    }
    n = keep;
  }
  if (p->min_p > 0.0f) { /* relative to the top token's probability */
    double thr = log((double)p->min_p);
    int keep = 1;
    while (keep < n && (double)(s->cands[keep].logit - mx) >= thr) keep++;
    n = keep;
  }
  sum = 0;
  for (int i = 0; i < n; i++) sum += exp((double)(s->cands[i].logit - mx));
  double u = (u_given ? *u_given : next_unit(s)) * sum, acc = 0;
  for (int i = 0; i < n; i++) {
    acc += exp((double)(s->cands[i].logit - mx));
    if (u < acc) return s->cands[i].id;
  }
  return s->cands[n - 1].id;
}

int32_t hearth_sampler_sample(struct hearth_sampler *s, const float *logits, const int32_t *history, int n_history) {
  return pick(s, penalize(s, logits, history, n_history), NULL);
}

int32_t sampler_sample_u(struct hearth_sampler *s, const float *logits, const int32_t *history, int n_history, double u) {
  return pick(s, penalize(s, logits, history, n_history), &u);
}

double sampler_peek_unit(const struct hearth_sampler *s) {
  struct hearth_sampler t; /* the state alone is copied and advanced */
  memcpy(t.s, s->s, sizeof t.s);
  return next_unit(&t);
}

void sampler_skip_unit(struct hearth_sampler *s) { (void)next_u64(s); }

int sampler_device_row(struct hearth_sampler *s, const int32_t *history, int n_history, struct hb_sample_row *row,
                       struct hb_sample_pen *pen, int cap) {
  const struct hearth_sampling *p = &s->p;
  const int V = s->n_vocab;
  if (!(p->temperature > 0.0f)) return -2; /* greedy (with penalties): the host's argmax of the penalised row */
  if (!history) n_history = 0;
  /* which penalties apply: the conditions of penalize() */
  const int rep = p->repetition_penalty != 1.0f && (n_history > 0 || s->n_prompt > 0);
  const int pf = (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) && n_history > 0;
  *row = (struct hb_sample_row){.u = sampler_peek_unit(s), .temperature = p->temperature, .top_k = p->top_k,
                                .top_p = p->top_p, .min_p = p->min_p, .repetition = rep ? p->repetition_penalty : 1.0f,
                                .presence = pf ? p->presence_penalty : 0.0f, .frequency = pf ? p->frequency_penalty : 0.0f};
  /* the distinct tokens: those of the prompt (repetition penalty only), then the generated ones, each with its
   * count among the generated; s->counts[t] holds entry index + 1 meanwhile and is zeroed again below */
  int n = 0, over = 0;
  for (int pass = rep ? 0 : 1; pass < 2 && (rep || pf) && !over; pass++) {
    const int32_t *h = pass ? history : s->prompt;
    const int nh = pass ? n_history : s->n_prompt;
    for (int i = 0; i < nh; i++) {
      const int32_t t = h[i];
      if (t < 0 || t >= V) continue;
      if (!s->counts[t]) {
        if (n == cap) { over = 1; break; }
        pen[n] = (struct hb_sample_pen){t, 0};
        s->counts[t] = ++n;
      }
      if (pass) pen[s->counts[t] - 1].count++;
    }
  }
  for (int i = 0; i < n; i++) s->counts[pen[i].id] = 0;
  return over ? -1 : n;
}

void hearth_sampler_set_prompt(struct hearth_sampler *s, const int32_t *prompt, int n_prompt) {
  s->prompt = prompt;
  s->n_prompt = prompt && n_prompt > 0 ? n_prompt : 0;
}

float hearth_logprob(const float *logits, int n_vocab, int32_t id) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; i++) if (logits[i] > mx) mx = logits[i];
  double sum = 0;
  for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx); /* differences in double, as the server's score() */
  return (float)((double)logits[id] - mx - log(sum));
}
