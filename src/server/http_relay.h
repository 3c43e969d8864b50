/* server/http_relay.h — hearth's own accept loop in front of libmicrohttpd, so that every request
 * head is framed strictly (http_frame.h) before MHD parses it.
 *
 * MHD runs without a listening socket (MHD_USE_NO_LISTEN_SOCKET). The relay owns the loopback
 * listening socket; for each accepted TCP connection it makes a socketpair, hands one end to MHD
 * (MHD_add_connection) and runs a thread that moves bytes between the client and the other end:
 *   client -> MHD  only what the framer judged well framed, a request at a time as it arrives, so a
 *                  pipelined or keep-alive follow-up request is judged like the first;
 *   MHD -> client  everything, as is.
 * On a framing violation it stops reading the client, lets MHD finish the requests already passed
 * (it counts their completions: http_relay_completed from MHD's NOTIFY_COMPLETED), sends them on,
 * then writes one error response of its own ("Connection: close") and closes.
 * Peer state crosses the relay as it would a direct socket: the client's end of input becomes
 * shutdown(SHUT_WR) of MHD's end (a half-close stays a half-close), a reset or a failed write closes
 * MHD's end (MHD's watchers see the hang-up), and MHD closing its end closes the client's.
 * Deadlines stay with the slow-client guard (http_guard.h): MHD receives nothing of a head until it
 * is complete and valid, so a slow head is a silent MHD connection, which the guard closes. */
#ifndef HEARTH_SERVER_HTTP_RELAY_H
#define HEARTH_SERVER_HTTP_RELAY_H

#include <microhttpd.h>

struct http_relay;

/* Starts accepting on listen_fd (bound and listening; the relay owns and closes it) for daemon d,
 * with at most max_conns connections open at once (more are closed at accept). 0, or -1. */
int http_relay_start(int listen_fd, struct MHD_Daemon *d, int max_conns, struct http_relay **out);
/* Stops accepting (joins the accept thread, closes the listening socket). Then stop the daemon,
 * then http_relay_free, which waits for every connection's thread to end. */
void http_relay_stop_accepting(struct http_relay *rl);
void http_relay_free(struct http_relay *rl);
/* MHD_OPTION_NOTIFY_COMPLETED: a request on the MHD connection whose socket is mhd_fd is done
 * (its response fully written to the relay). */
void http_relay_completed(struct http_relay *rl, int mhd_fd);

#endif
