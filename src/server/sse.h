/* server/sse.h — server-sent events over a libmicrohttpd callback response.
 *
 * A streaming endpoint supplies produce(ctx, out, timeout_ms): it blocks for at most about
 * timeout_ms, appends zero or more complete frames to out and returns 0 (more to come), 1
 * (finished: out holds the last frames) or -1 (abort the connection: the client has gone). While
 * produce yields nothing for --keepalive-ms (default 3 s; a long prefill, a wait in the queue) a
 * ": keep-alive" comment is sent, which keeps proxies and clients from timing out and also detects
 * a vanished client. free_ctx(ctx) runs exactly once when the response is done or the connection
 * dies.
 */
#ifndef HEARTH_SERVER_SSE_H
#define HEARTH_SERVER_SSE_H

#include <jansson.h>

#include "server/http.h"
#include "server/sbuf.h"

typedef int (*sse_produce_fn)(void *ctx, struct sbuf *out, int timeout_ms);
typedef void (*sse_free_fn)(void *ctx);

enum MHD_Result sse_reply(struct http_req *r, sse_produce_fn produce, sse_free_fn free_ctx,
                          void *ctx);
/* Appends "data: <obj as compact JSON>\n\n" and drops obj. Returns 0 or -1 on OOM. */
int sse_event(struct sbuf *out, json_t *obj);
/* Appends "data: [DONE]\n\n". */
int sse_done(struct sbuf *out);

#endif
