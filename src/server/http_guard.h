/* server/http_guard.h — per-connection deadlines against slow clients (slowloris).
 *
 * libmicrohttpd's connection timeout is an idle timeout: every byte resets it, so a client that
 * trickles one byte a second holds a connection forever. The guard tracks every connection from
 * accept (MHD_OPTION_NOTIFY_CONNECTION) to close and knows which phase it is in:
 *   HEAD  waiting for a request head: after accept the whole head must arrive within head_s
 *         seconds; after a reply on a keep-alive connection within max(head_s, idle_s), so that
 *         an idle keep-alive connection lives as long as MHD's idle timeout lets it;
 *   BODY  reading the body: after a grace of head_s seconds the bytes received must keep up with
 *         min_rate bytes per second on average;
 *   BUSY  a handler runs or a reply is being sent: no deadline here (the engine and the SSE writer
 *         have their own).
 * A thread checks every connection ten times a second and closes offenders with shutdown(2): the
 * connection's own thread then sees end-of-file and MHD closes it as if the client had left.
 * Capacity: MHD admits max_conns + HTTP_GUARD_RESERVE connections; while more than max_conns are
 * open, heads that have been arriving for over a second are closed as well (a real client sends its
 * head at once), so a quick request such as /health gets through while slow clients hold the rest.
 */
#ifndef HEARTH_SERVER_HTTP_GUARD_H
#define HEARTH_SERVER_HTTP_GUARD_H

#include <microhttpd.h>
#include <stddef.h>

#define HTTP_GUARD_RESERVE 8 /* connections above max_conns that only quick requests keep */

enum http_phase { HTTP_HEAD, HTTP_BODY, HTTP_BUSY };

struct http_guard;

/* One connection as the guard sees it: MHD's socket context. */
struct http_conn {
  struct http_conn *prev, *next;
  int fd;
  int phase;          /* enum http_phase */
  double t_phase;     /* when the phase began (monotonic seconds) */
  size_t n_body;      /* body bytes received in the BODY phase */
  int shut;           /* closed by the guard */
  int served;         /* a request has completed on this connection (keep-alive) */
  int nul_in_url;     /* the URL or a query argument held %00 (set while unescaping) */
};

/* Starts the checking thread. head_s: head deadline and body grace; idle_s: MHD's idle timeout;
 * min_rate: body bytes per second after the grace; max_conns: the soft connection limit. */
int http_guard_new(double head_s, double idle_s, double min_rate, int max_conns, int verbose,
                   struct http_guard **out);
/* Stops the thread; call after the daemon has stopped (every connection closed). */
void http_guard_free(struct http_guard *g);

/* MHD_OPTION_NOTIFY_CONNECTION callback (cls = the guard). */
void http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);

/* The connection's record (NULL if the guard does not know it). */
struct http_conn *http_guard_conn(struct MHD_Connection *conn);
/* Phase changes and body progress, from the connection's thread. */
void http_guard_phase(struct http_guard *g, struct http_conn *c, enum http_phase phase);
void http_guard_body(struct http_guard *g, struct http_conn *c, size_t n);

#endif
