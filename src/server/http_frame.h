/* server/http_frame.h — strict HTTP/1.1 request framing, checked on the raw bytes before
 * libmicrohttpd sees them (http_relay.h).
 *
 * libmicrohttpd 0.9.75 frames some malformed requests in ways a client cannot predict (it writes
 * its 400 for "Content-Length: -1" twice; a header line with an empty name ends the head and the
 * rest becomes a second request). The framer walks a connection's bytes as they arrive and judges
 * them: a request head (through its blank line) must be complete and strictly well formed before
 * any of it is passed on, then the body is passed on as its framing says (Content-Length bytes, or
 * chunks up to the last chunk and its trailer), then the next head. What it accepts has exactly
 * one reading, so MHD, which sees the same bytes, cannot disagree with it. Refused:
 *   request line  not "TOKEN SP TARGET SP HTTP/d.d" (one space each, CRLF)          400
 *   header lines  a name that is not an RFC 9110 token (empty, spaces, ':' first),
 *                 whitespace before the colon, obs-fold (a line that starts with
 *                 SP/HTAB), control bytes, a CR or LF that is not part of a CRLF   400
 *   Host          more than once                                                     400
 *   Content-Length  not 1-18 digits, or more than once (even equal)                400
 *   Transfer-Encoding  with Content-Length                                           400
 *                 other than exactly one "chunked"                                   501
 *   chunks        a size line that is not 1-15 hex digits (+ extensions), data not
 *                 followed by CRLF, a malformed trailer line                         400
 *   size          a request line longer than HTTP_FRAME_HEAD_MAX (414), a head or a
 *                 trailer longer than that (431)
 * A head is judged only when complete, so a slow head costs nothing here: the slow-client guard
 * (http_guard.h) closes the connection, since MHD receives nothing meanwhile. */
#ifndef HEARTH_SERVER_HTTP_FRAME_H
#define HEARTH_SERVER_HTTP_FRAME_H

#include <stddef.h>

#define HTTP_FRAME_HEAD_MAX (32 * 1024) /* bytes of one request head (MHD's own limit is lower) */

struct http_framer {
  int state;                  /* where in a request the next byte falls (http_frame.c) */
  unsigned long long left;    /* body or chunk bytes still to come */
  unsigned long heads;        /* complete, valid request heads passed so far */
  size_t head_seen;           /* bytes of the head now arriving already searched for its end (a head
                               * trickling in is not rescanned from its start on every read) */
  unsigned status;            /* 0, or the HTTP status of the violation that stopped it */
  char why[96];               /* what was wrong, for the error reply */
};

/* Judges the bytes p[0..n) that follow everything judged before. Returns how many of them, from
 * the start, are well framed (pass them on); the rest needs more bytes (present them again, with
 * more after them), unless fr->status is set: then the connection's framing is broken there and
 * nothing after the returned prefix may be passed on. Zero-initialise fr for a new connection. */
size_t http_frame_feed(struct http_framer *fr, const char *p, size_t n);

/* 1 while the framer is inside a request (its head was passed, its body not yet complete). */
int http_frame_mid_request(const struct http_framer *fr);

#endif
