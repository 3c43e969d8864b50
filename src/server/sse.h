/* server/sse.h — server-sent events over a libmicrohttpd callback response.
 *
 * A streaming endpoint supplies produce(ctx, out): it blocks for at most about a second, appends
 * zero or more complete frames to out and returns 0 (more to come), 1 (finished: out holds the
 * last frames) or -1 (abort the connection: the client has gone). While produce yields nothing
 * for 10 s a ": keep-alive" comment is sent, which also detects a vanished client. free_ctx(ctx)
 * runs exactly once when the response is done or the connection dies.
 */
#ifndef HEARTH_SERVER_SSE_H
#define HEARTH_SERVER_SSE_H

#include <jansson.h>

#include "server/http.h"
#include "server/sbuf.h"

typedef int (*sse_produce_fn)(void *ctx, struct sbuf *out);
typedef void (*sse_free_fn)(void *ctx);

enum MHD_Result sse_reply(struct http_req *r, sse_produce_fn produce, sse_free_fn free_ctx,
                          void *ctx);
/* Appends "data: <obj as compact JSON>\n\n" and drops obj. Returns 0 or -1 on OOM. */
int sse_event(struct sbuf *out, json_t *obj);
/* Appends "data: [DONE]\n\n". */
int sse_done(struct sbuf *out);

#endif
