/* server/tokenize.c — POST /tokenize and POST /detokenize (the vLLM / llama.cpp shapes).
 *   /tokenize   {model, prompt | messages (+tools, chat_template_kwargs), add_special_tokens?} → {tokens, count, max_model_len}
 *               with messages, the chat template is applied first and the rendered "prompt" is
 *               returned too, so clients can see exactly what the model reads.
 *   /detokenize {model, tokens: [ids]} → {prompt}
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/errors.h"
#include "server/routes.h"
#include "server/sbuf.h"
#include "server/textio.h"

static struct srv_model *any_model(struct http_req *r, enum MHD_Result *ret) {
  return ep_pick_model(r, -1, ret);
}

enum MHD_Result ep_tokenize(struct http_req *r) {
  enum MHD_Result ret;
  struct srv_model *m = any_model(r, &ret);
  if (!m) return ret;
  struct verr e = {{0}, {0}};
  const char *prompt;
  json_t *msgs, *tools, *kwargs;
  int add_special;
  /* chat_template_kwargs as chat completions takes them, so that the count matches its usage */
  if (v_str(r->json, "prompt", 0, NULL, &prompt, &e) || v_arr(r->json, "messages", &msgs, &e) ||
      v_arr(r->json, "tools", &tools, &e) || v_obj(r->json, "chat_template_kwargs", &kwargs, &e) ||
      v_bool(r->json, "add_special_tokens", msgs ? 0 : 1, &add_special, &e))
    return http_reply_verr(r, &e);
  if (!prompt == !msgs)
    return http_reply_error(r, 400, "prompt", "invalid_value", "give exactly one of 'prompt' and 'messages'");
  char *rendered = NULL;
  struct hearth_err err = {0};
  size_t plen = prompt ? json_string_length(json_object_get(r->json, "prompt")) : 0;
  if (msgs) {
    json_t *norm = chat_messages_normalize(msgs, &e);
    if (!norm) return http_reply_verr(r, &e);
    int rc = textio_render_chat(m->tio, norm, tools, kwargs, &rendered, &err);
    json_decref(norm);
    if (rc) return http_reply_error(r, 400, "messages", "template_error", "%s", errors_scrub(err.msg));
    prompt = rendered;
    plen = strlen(rendered);
  }
  int32_t *ids = NULL;
  int n = 0;
  int rc = textio_encode(m->tio, prompt, plen, add_special, &ids, &n, &err);
  if (rc) {
    free(rendered);
    return http_reply_error(r, 500, NULL, NULL, "%s", errors_scrub(err.msg));
  }
  /* the reply is written as text, not built as a jansson tree: an 8 MB prompt is ~1.6 M tokens,
   * and a tree of them cost ~100 MB (a json_t and an array slot per id) on top of the text */
  size_t need = 64; /* the ids' text exactly, so the buffer is sized once */
  for (int i = 0; i < n; i++) need += (size_t)snprintf(NULL, 0, ",%d", (int)ids[i]);
  struct sbuf out = {0};
  int bad = sbuf_reserve(&out, need) || sbuf_adds(&out, "{\"tokens\":[");
  for (int i = 0; i < n && !bad; i++) {
    char num[16];
    int k = snprintf(num, sizeof num, i ? ",%d" : "%d", (int)ids[i]);
    bad = sbuf_add(&out, num, (size_t)k);
  }
  free(ids);
  if (!bad) bad = sbuf_addf(&out, "],\"count\":%d,\"max_model_len\":%d", n, m->n_ctx);
  if (rendered && !bad) {
    json_t *js = json_string(rendered);
    char *enc = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(js);
    bad = !enc || sbuf_adds(&out, ",\"prompt\":") || sbuf_adds(&out, enc);
    free(enc);
  }
  free(rendered);
  if (bad || sbuf_adds(&out, "}")) {
    sbuf_free(&out);
    return http_reply_error(r, 500, NULL, NULL, "out of memory");
  }
  return http_reply_json_text(r, 200, out.p, out.n);
}

enum MHD_Result ep_detokenize(struct http_req *r) {
  enum MHD_Result ret;
  struct srv_model *m = any_model(r, &ret);
  if (!m) return ret;
  struct verr e = {{0}, {0}};
  json_t *toks;
  if (v_arr(r->json, "tokens", &toks, &e)) return http_reply_verr(r, &e);
  if (!toks) {
    v_fail(&e, "tokens", "'tokens' is required");
    return http_reply_verr(r, &e);
  }
  size_t n = json_array_size(toks), i;
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) return http_reply_error(r, 500, NULL, NULL, "out of memory");
  json_t *v;
  json_array_foreach(toks, i, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= m->info->n_vocab) {
      free(ids);
      return http_reply_error(r, 400, "tokens", "invalid_value", "'tokens[%zu]' must be a token id in [0, %d)",
                              i, m->info->n_vocab);
    }
    ids[i] = (int32_t)json_integer_value(v);
  }
  char *text = NULL;
  size_t len = 0;
  struct hearth_err err = {0};
  int rc = textio_decode(m->tio, ids, (int)n, 0, &text, &len, &err);
  free(ids);
  if (rc) return http_reply_error(r, 400, "tokens", "invalid_value", "%s", errors_scrub(err.msg));
  json_t *body = json_pack("{s:s%}", "prompt", text, len);
  free(text);
  return http_reply_json(r, 200, body);
}
