/* server/http.h — one HTTP request as the route handlers see it, and the reply helpers.
 *
 * http.c owns the libmicrohttpd daemon: it runs one thread per connection, so a handler may block
 * (a non-streamed completion waits for its tokens in the handler). Before a handler runs, http.c
 * has checked the route and method (404/405), the Host header (403), the bearer token (401), the
 * Content-Type of POSTs (415), the body size (413) and parsed the body as a JSON object (400).
 * Every reply helper queues exactly one response and returns what the MHD access handler returns.
 */
#ifndef HEARTH_SERVER_HTTP_H
#define HEARTH_SERVER_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>

#include "server/http_guard.h"
#include "server/json_budget.h"
#include "server/srv.h"
#include "server/validate.h"

struct route;

struct http_req {
  struct srv *srv;
  struct MHD_Connection *conn;
  const char *url;           /* path without the query string (MHD owns it) */
  const char *method;
  const struct route *route;
  int started;               /* the first access-handler call (headers only) is done */
  int rejected;              /* a response was queued before the body was read */
  char *body;                /* the request body, NUL-terminated; capped at opt->max_body */
  size_t n_body, cap_body;
  int too_big;               /* over max_body: the body is read and dropped, then 413 */
  int over_budget;           /* the global request-memory budget is spent: body dropped, then 503 */
  int close_after;           /* the request's framing is unusable: close after the reply */
  struct json_budget budget; /* this request's body and tree bytes (json_budget.h) */
  struct http_conn *gc;      /* the connection as the slow-client guard sees it (may be NULL) */
  json_t *json;              /* POST body parsed as an object, owned here */
  unsigned status;           /* status of the queued reply (for the log) */
  double t0;                 /* monotonic seconds at arrival */
  int http10;                /* an HTTP/1.0 request: no interim (1xx) responses may be sent */
  int counted;               /* counted in srv->n_inflight until on_completed */
  struct srv_model *held;    /* the model this request uses (ep_pick_model), released when it
                                completes; a stream's when its last byte is out */
};

/* Replies with body (stolen, may be NULL on OOM → 500) as application/json. */
enum MHD_Result http_reply_json(struct http_req *r, unsigned status, json_t *body);
/* Replies with text (malloc'ed JSON of n bytes, stolen) as application/json: for replies too large
 * to build as a jansson tree first. */
enum MHD_Result http_reply_json_text(struct http_req *r, unsigned status, char *text, size_t n);
/* Replies with an OpenAI error object; param and code may be NULL. */
enum MHD_Result http_reply_error(struct http_req *r, unsigned status, const char *param,
                              const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* 400 invalid_request_error naming e->param. */
enum MHD_Result http_reply_verr(struct http_req *r, const struct verr *e);
/* Replies 200 text/event-stream whose body comes from cb (chunked on HTTP/1.1); fcb(cls) runs
 * when the response is done, also after a disconnect. */
enum MHD_Result http_reply_stream(struct http_req *r, MHD_ContentReaderCallback cb, void *cls,
                               MHD_ContentReaderFreeCallback fcb);

/* The request's socket; -1 if unknown. */
int http_conn_fd(struct http_req *r);

/* Watching a client while its request is computed, from the connection's thread (the only one
 * that may write to the socket before the reply is queued). A disconnect is a reset or an error
 * on the socket. An end of input alone is ambiguous: the client closed, or only shut down its
 * sending side (a half-close, which is not a disconnect: it still reads the reply). A write tells
 * them apart, since a closed socket answers it with a reset: a stream writes an SSE comment (the
 * check asks its producer to), a plain HTTP/1.1 reply an interim "100 Continue" (which HTTP/1.1
 * allows before the final response to a POST); an HTTP/1.0 client's end of input counts as gone.
 * Probes repeat with a growing gap (1 s, doubling to 16 s) while the end of input stands. */
struct http_watch {
  int fd;                    /* -1: nothing to watch */
  int stream;
  int http10;
  double next_probe;         /* monotonic s; 0 before the first probe */
  double gap;                /* s until the next probe */
};
enum { HTTP_PEER_OK = 0, HTTP_PEER_GONE = 1, HTTP_PEER_PROBE = 2 };
void http_watch_init(struct http_req *r, int stream, struct http_watch *w);
/* HTTP_PEER_GONE, HTTP_PEER_OK, or (streams) HTTP_PEER_PROBE: write a comment now. Cheap (one
 * poll, no blocking): call it on every wait slice. */
int http_watch_check(struct http_watch *w);
/* Monotonic seconds. */
double http_now(void);

/* Starts the daemon on o->host:o->port; *port_out gets the bound port. */
int http_start(struct srv *s, struct MHD_Daemon **out, int *port_out, struct hearth_err *err);
/* Stops the daemon (joining every connection), then the slow-client guard. */
void http_stop(struct srv *s, struct MHD_Daemon *d);
/* 1 if host names the loopback interface (127.0.0.0/8, ::1, localhost). */
int http_is_loopback(const char *host);

#endif
