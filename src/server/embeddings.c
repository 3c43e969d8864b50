/* server/embeddings.c — POST /v1/embeddings.
 * input: a string, an array of strings, an array of token ids, or an array of such arrays (at most
 * EMB_MAX_INPUTS = 2,048 inputs, each at most the context; the body is also bounded by --max-body,
 * 413 above). encoding_format "float" (default) or "base64" (the raw little-endian float32 bytes, as
 * OpenAI sends them). dimensions: keep the first d components and re-normalise (Matryoshka
 * truncation, as Qwen3-Embedding is trained for).
 * The inputs are tokenized here (a bad one is this request's 400) and computed by the model's
 * embed_queue, which packs them with those of concurrent requests into shared forward passes; an
 * input's vector is the same bits whatever it was packed with (hearth_embed_batch). Abandoned work
 * stops: the queue polls the client before each round (and a round whose clients are all gone
 * before each pass); a vanished client's request is dropped, and one still computing when the
 * shutdown grace period ends gets 503. NaN or infinite values in an embedding are a 500, never a
 * 200 with garbage. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/embed_queue.h"
#include "server/errors.h"
#include "server/routes.h"
#include "server/sbuf.h"
#include "server/textio.h"

#define EMB_MAX_INPUTS 2048

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static json_t *base64_floats(const float *v, int n) {
  const unsigned char *b = (const unsigned char *)v; /* x86/ARM hosts are little-endian */
  size_t len = (size_t)n * 4, olen = (len + 2) / 3 * 4;
  char *o = malloc(olen + 1);
  if (!o) return NULL;
  size_t j = 0;
  for (size_t i = 0; i < len; i += 3) {
    unsigned x = (unsigned)b[i] << 16 | (i + 1 < len ? (unsigned)b[i + 1] << 8 : 0) |
                 (i + 2 < len ? b[i + 2] : 0);
    o[j++] = B64[x >> 18 & 63];
    o[j++] = B64[x >> 12 & 63];
    o[j++] = i + 1 < len ? B64[x >> 6 & 63] : '=';
    o[j++] = i + 2 < len ? B64[x & 63] : '=';
  }
  o[j] = 0;
  json_t *s = json_stringn(o, j);
  free(o);
  return s;
}

/* Tokenizes input k into *ids (malloc'd) and *n. On failure *ids stays NULL (the caller frees every ids[k]
 * whatever happened) and e says why; the return value is 1, or 2 when the input is longer than the context
 * (answered with OpenAI's context_length_exceeded code). */
static int input_tokens(struct srv_model *m, json_t *in, size_t k, int32_t **ids, int *n,
                        struct verr *e) {
  int32_t *t = NULL;
  int len = 0;
  *ids = NULL;
  if (json_is_string(in)) {
    struct hearth_err err = {0};
    if (textio_encode(m->tio, json_string_value(in), json_string_length(in), 1, &t, &len, &err)) /* t stays NULL */
      return v_fail(e, "input", "input[%zu]: %s", k, errors_scrub(err.msg));
  } else if (json_is_array(in) && json_array_size(in)) {
    size_t i;
    json_t *v;
    len = (int)json_array_size(in);
    t = malloc((size_t)len * sizeof *t);
    if (!t) return v_fail(e, "input", "out of memory");
    json_array_foreach(in, i, v) {
      if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= m->info->n_vocab) {
        free(t);
        return v_fail(e, "input", "'input[%zu]' must hold token ids in [0, %d)", k, m->info->n_vocab);
      }
      t[i] = (int32_t)json_integer_value(v);
    }
  } else {
    return v_fail(e, "input", "'input' must be a string, an array of strings, or token id arrays");
  }
  if (len < 1) {
    free(t);
    return v_fail(e, "input", "'input[%zu]' is empty", k);
  }
  if (len > m->n_ctx) {
    free(t);
    v_fail(e, "input", "'input[%zu]' has %d tokens; the context is %d", k, len, m->n_ctx);
    return 2;
  }
  *ids = t;
  *n = len;
  return 0;
}

/* What the queue polls between rounds and passes (embq_req.gone); called by whichever request thread
 * leads the round, one at a time. */
struct emb_watch {
  struct http_watch w;
  struct srv *srv;
  int gone;          /* the client has gone */
  int shutdown;      /* the grace period is over */
};

static int emb_abort(void *arg) {
  struct emb_watch *x = arg;
  if (atomic_load(&x->srv->aborting)) x->shutdown = 1;
  else if (http_watch_check(&x->w) == HTTP_PEER_GONE) x->gone = 1;
  return x->gone || x->shutdown;
}

static enum MHD_Result embed_all(struct http_req *r, struct srv_model *m, json_t *list,
                                 const char *fmt, long long dims);

enum MHD_Result ep_embeddings(struct http_req *r) {
  enum MHD_Result ret;
  struct srv_model *m = ep_pick_model(r, 1, &ret);
  if (!m) return ret;
  struct verr e = {{0}, {0}};
  static const char *const FORMATS[] = {"float", "base64", NULL};
  const char *fmt;
  long long dims;
  if (v_enum(r->json, "encoding_format", FORMATS, "float", &fmt, &e) ||
      v_int(r->json, "dimensions", 1, m->info->n_embd, m->info->n_embd, &dims, &e))
    return http_reply_verr(r, &e);
  json_t *input = json_object_get(r->json, "input");
  if (!input || json_is_null(input)) {
    v_fail(&e, "input", "'input' is required");
    return http_reply_verr(r, &e);
  }
  /* one input, or a list of inputs */
  json_t *list;
  if (json_is_string(input) || (json_is_array(input) && json_array_size(input) &&
                                json_is_integer(json_array_get(input, 0))))
    list = json_pack("[O]", input);
  else if (json_is_array(input) && json_array_size(input))
    list = json_incref(input);
  else {
    v_fail(&e, "input", "'input' must be a non-empty string or array");
    return http_reply_verr(r, &e);
  }
  if (json_array_size(list) > EMB_MAX_INPUTS) {
    json_decref(list);
    v_fail(&e, "input", "'input' holds %zu items; at most %d are allowed per request", json_array_size(list),
           EMB_MAX_INPUTS);
    return http_reply_verr(r, &e);
  }
  atomic_fetch_add(&m->embed_busy, 1);
  enum MHD_Result ret2 = embed_all(r, m, list, fmt, dims);
  atomic_fetch_sub(&m->embed_busy, 1);
  return ret2;
}

/* the error reply for a failed request (all its inputs tokenized, its vectors computed or not) */
static enum MHD_Result embed_failed(struct http_req *r, struct srv_model *m, struct embq_req *q,
                                    const struct emb_watch *ew) {
  if (q->rc == HEARTH_ERR_CANCELLED && (ew->gone || ew->shutdown)) {
    atomic_fetch_add(&m->embed_cancelled, 1);
    if (ew->gone) return MHD_NO; /* nobody to answer: drop the connection */
    return http_reply_error(r, 503, NULL, "shutting_down", "the server is shutting down; the request was cancelled");
  }
  return http_reply_error(r, 500, NULL, "embedding_failed", "%s", errors_scrub(q->err.msg));
}

static enum MHD_Result embed_all(struct http_req *r, struct srv_model *m, json_t *list,
                                 const char *fmt, long long dims) {
  struct verr e = {{0}, {0}};
  struct emb_watch ew = {.srv = r->srv};
  http_watch_init(r, 0, &ew.w);
  const int nd = m->info->n_embd;
  const size_t n = json_array_size(list);
  int32_t **ids = calloc(n, sizeof *ids);
  int *lens = calloc(n, sizeof *lens);
  float *vecs = malloc(n * (size_t)nd * sizeof *vecs);
  enum MHD_Result ret;
  long long total = 0;
  if (!ids || !lens || !vecs) {
    ret = http_reply_error(r, 500, NULL, "embedding_failed", "out of memory");
    goto done;
  }
  size_t k;
  json_t *in;
  json_array_foreach(list, k, in) {
    int bad = input_tokens(m, in, k, &ids[k], &lens[k], &e);
    if (bad) {
      ret = bad == 2 ? http_reply_error(r, 400, e.param, "context_length_exceeded", "%s", e.msg)
                     : http_reply_verr(r, &e);
      goto done;
    }
    total += lens[k];
  }
  struct embq_req q = {.n = (int)n, .tokens = (const int32_t *const *)ids, .lens = lens, .out = vecs,
                       .gone = emb_abort, .gone_arg = &ew};
  if (embq_run(m->embq, &q)) {
    ret = embed_failed(r, m, &q, &ew);
    goto done;
  }
  json_t *data = json_array();
  for (k = 0; k < n; k++) {
    float *vec = vecs + k * (size_t)nd;
    int finite = 1;
    for (int i = 0; i < nd; i++) finite &= fabsf(vec[i]) <= FLT_MAX; /* false for NaN, inf */
    if (!finite) {
      json_decref(data);
      ret = http_reply_error(r, 500, NULL, "embedding_failed",
                             "the model produced NaN or infinite values for input[%zu] (its "
                             "weights or activations overflowed)", k);
      goto done;
    }
    if (dims < nd) { /* truncate and re-normalise */
      double ss = 0;
      for (int i = 0; i < dims; i++) ss += (double)vec[i] * vec[i];
      float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.f;
      for (int i = 0; i < dims; i++) vec[i] *= inv;
    }
    json_t *emb;
    if (!strcmp(fmt, "base64")) {
      emb = base64_floats(vec, (int)dims);
    } else {
      emb = json_array();
      for (int i = 0; i < dims; i++) json_array_append_new(emb, json_real(vec[i]));
    }
    json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", (int)k,
                                          "embedding", emb));
  }
  ret = http_reply_json(r, 200,
                        json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data,
                                  "model", m->id, "usage", "prompt_tokens", (json_int_t)total,
                                  "total_tokens", (json_int_t)total));
done:
  for (k = 0; ids && k < n; k++) free(ids[k]);
  free(ids);
  free(lens);
  free(vecs);
  json_decref(list);
  return ret;
}
