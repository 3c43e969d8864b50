/* server/stream_load.h — a streamed completion whose model is not loaded yet.
 *
 * Loading a model takes from seconds to a minute. A plain request waits for it in its handler, but
 * a streaming client that sees nothing for that long (no status line, no headers) may give up, as
 * may a proxy between. So a stream whose model is not ready starts its response at once: 200,
 * text/event-stream, then a ": keep-alive" comment every --keepalive-ms (sse.c: 3 s by default)
 * while a thread of its own waits in srv_model_acquire (loading the model, or waiting for the
 * request that does). Then the endpoint's start() builds the generation with the model and its
 * produce() streams as for a model that was loaded already. Comments are what the SSE format has
 * for this: every client, the official openai one included, ignores them.
 *
 * What the stream cannot do any more once its 200 is out is answer with an error status: a failed
 * load (500 model_load_failed), a model of the wrong kind (400 invalid_model) or a request the
 * model refuses (start()'s failure: a prompt over the context, a template error, a full queue)
 * becomes an OpenAI error event ({"error": {...}}, which the openai client raises as an APIError)
 * followed by data: [DONE], as streams already end on a failure mid-generation.
 *
 * A client that goes away while the model loads ends the stream (the endpoint's context is freed
 * at once); the load itself goes on to its end on the waiting thread, which then drops the model's
 * reference (the model stays loaded, for the next request), so nothing leaks and a load is never
 * cut in the middle. server_run waits for these threads before freeing the models (srv.n_waiting).
 */
#ifndef HEARTH_SERVER_STREAM_LOAD_H
#define HEARTH_SERVER_STREAM_LOAD_H

#include "server/gen.h"
#include "server/http.h"
#include "server/sse.h"

struct stream_load_ops {
  /* With the model loaded (a reference held by the stream until its end): sets up the generation.
   * Returns 0, or -1 with f filled. Runs on the connection's thread. */
  int (*start)(void *ctx, struct srv_model *m, const struct http_watch *watch, struct gen_fail *f);
  sse_produce_fn produce; /* after a successful start, as with sse_reply */
  sse_free_fn free_ctx;   /* exactly once, before the model's reference is dropped */
};

/* Starts the stream for the model named by r's "model" (known to exist: ep_pick_model_or_pending
 * said so), of kind embedding (1 embedding, 0 generative, -1 either). ctx may point into r->json,
 * which the stream keeps alive. ctx is freed through ops->free_ctx in every case. */
enum MHD_Result stream_load_reply(struct http_req *r, int embedding,
                                  const struct stream_load_ops *ops, void *ctx);

#endif
