/* server/http_relay.c — the accept loop and per-connection relay in front of MHD (see
 * http_relay.h). */
#include "server/http_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/errors.h"
#include "server/http_frame.h"

#define RELAY_IN (64 * 1024)  /* client bytes: judged and waiting for MHD, or not yet judged */
#define RELAY_OUT (32 * 1024) /* MHD's bytes waiting for the client */
#define LINGER_MS 1000        /* after our own error reply: read and drop for this long, at most */
#define LINGER_BYTES (1 << 20)

struct conn {
  struct conn *next;      /* in the relay's list */
  struct http_relay *rl;
  int c, p, p_mhd;        /* client socket, our end of the pair, MHD's end (the list's key) */
  atomic_ulong n_done;    /* requests MHD has completed on this connection */
  struct http_framer fr;
  char in[RELAY_IN];
  size_t in_len, ok;      /* in[0..ok) judged well framed, in[ok..in_len) not yet judged */
  char out[RELAY_OUT];
  size_t out_off, out_len;
};

struct http_relay {
  int lfd;
  struct MHD_Daemon *d;
  int max_conns;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct conn *conns;
  int n_conns;
};

static void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* Writes all of p to fd (non-blocking) within timeout_ms; 0, or -1. */
static int send_all(int fd, const char *p, size_t n, int timeout_ms) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) { p += k; n -= (size_t)k; continue; }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    if (poll(&pf, 1, timeout_ms) <= 0) return -1;
  }
  return 0;
}

/* Our own error response for a framing violation. */
static void send_error(int fd, unsigned status, const char *why) {
  const char *code = status == 501 ? "not_implemented" : status == 414 ? "uri_too_long"
                   : status == 431 ? "headers_too_large" : "bad_request";
  const char *reason = status == 501 ? "Not Implemented" : status == 414 ? "URI Too Long"
                     : status == 431 ? "Request Header Fields Too Large" : "Bad Request";
  json_t *j = errors_json(status, NULL, code, why);
  char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  const char *b = body ? body : "{\"error\":{\"message\":\"bad request\"}}";
  char head[256];
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n",
                   status, reason, strlen(b));
  if (!send_all(fd, head, (size_t)n, 1000)) send_all(fd, b, strlen(b), 1000);
  free(body);
}

/* Ends the client connection after a reply: our side first (the client sees the end of the reply),
 * then what the client still sends is read and dropped for a while, so that closing does not reset
 * the connection before the client has read the reply. */
static void close_gracefully(int fd) {
  shutdown(fd, SHUT_WR);
  char sink[4096];
  size_t dropped = 0;
  for (int waited = 0; waited < LINGER_MS && dropped < LINGER_BYTES; waited += 50) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 50) < 0) break;
    if (!pf.revents) continue;
    ssize_t k = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) break;
    if (k > 0) dropped += (size_t)k;
  }
  close(fd);
}

static void unlist(struct conn *cn) {
  struct http_relay *rl = cn->rl;
  pthread_mutex_lock(&rl->mu);
  for (struct conn **pp = &rl->conns; *pp; pp = &(*pp)->next)
    if (*pp == cn) { *pp = cn->next; break; }
  rl->n_conns--;
  pthread_cond_broadcast(&rl->cv);
  pthread_mutex_unlock(&rl->mu);
}

/* Moves MHD's waiting bytes to the client (blocking up to a second); 0, or -1 (client gone). */
static int flush_out(struct conn *cn) {
  for (;;) {
    if (cn->out_len > cn->out_off) {
      if (send_all(cn->c, cn->out + cn->out_off, cn->out_len - cn->out_off, 1000)) return -1;
      cn->out_off = cn->out_len = 0;
    }
    ssize_t k = recv(cn->p, cn->out, sizeof cn->out, MSG_DONTWAIT);
    if (k <= 0) return 0;
    cn->out_len = (size_t)k;
  }
}

static void *relay_main(void *arg) {
  struct conn *cn = arg;
  int client_eof = 0, p_shut = 0;
  enum { GONE, MHD_CLOSED, REFUSED } end;
  for (;;) {
    /* judge new client bytes */
    if (!cn->fr.status && cn->ok < cn->in_len)
      cn->ok += http_frame_feed(&cn->fr, cn->in + cn->ok, cn->in_len - cn->ok);
    /* pass judged bytes to MHD */
    if (cn->ok) {
      ssize_t k = send(cn->p, cn->in, cn->ok, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { end = MHD_CLOSED; break; }
      if (k > 0) {
        memmove(cn->in, cn->in + k, cn->in_len - (size_t)k);
        cn->in_len -= (size_t)k;
        cn->ok -= (size_t)k;
      }
    }
    /* the client's end of input, once MHD has everything before it */
    if (client_eof && !cn->ok && !p_shut) {
      shutdown(cn->p, SHUT_WR);
      p_shut = 1;
    }
    /* MHD's bytes to the client */
    if (cn->out_len > cn->out_off) {
      ssize_t k = send(cn->c, cn->out + cn->out_off, cn->out_len - cn->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { end = GONE; break; }
      if (k > 0 && (cn->out_off += (size_t)k) == cn->out_len) cn->out_off = cn->out_len = 0;
    }
    /* a violation: once MHD has answered every request passed before it, our reply */
    if (cn->fr.status && !cn->ok) {
      unsigned long need = cn->fr.heads - (http_frame_mid_request(&cn->fr) ? 1 : 0);
      if (atomic_load(&cn->n_done) >= need) { end = REFUSED; break; }
    }
    struct pollfd pf[2] = {
        {.fd = cn->c, .events = (short)((!client_eof && !cn->fr.status && cn->in_len < RELAY_IN ? POLLIN : 0) |
                                        (cn->out_len > cn->out_off ? POLLOUT : 0))},
        {.fd = cn->p, .events = (short)((cn->out_len < RELAY_OUT ? POLLIN : 0) | (cn->ok ? POLLOUT : 0))},
    };
    if (!pf[1].events) pf[1].fd = -1; /* out is full: MHD's hang-up would wake this loop for nothing */
    /* while refusing, completions arrive from MHD's thread: look again every 20 ms */
    if (poll(pf, 2, cn->fr.status ? 20 : -1) < 0 && errno != EINTR) { end = GONE; break; }
    if (pf[0].revents & (POLLERR | POLLNVAL)) { end = GONE; break; }
    if (pf[0].revents & (POLLIN | POLLHUP) && !client_eof && !cn->fr.status && cn->in_len < RELAY_IN) {
      ssize_t k = recv(cn->c, cn->in + cn->in_len, RELAY_IN - cn->in_len, MSG_DONTWAIT);
      if (k == 0) client_eof = 1;
      else if (k > 0) cn->in_len += (size_t)k;
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { end = GONE; break; }
    } else if (pf[0].revents & POLLHUP) {
      end = GONE;
      break;
    }
    if (pf[1].revents & (POLLIN | POLLHUP | POLLERR) && cn->out_len < RELAY_OUT) {
      ssize_t k = recv(cn->p, cn->out + cn->out_len, RELAY_OUT - cn->out_len, MSG_DONTWAIT);
      if (k > 0) cn->out_len += (size_t)k;
      else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) { end = MHD_CLOSED; break; }
    }
  }
  if (end == GONE) { /* the client reset or vanished: MHD sees its end hang up */
    close(cn->c);
  } else {
    int alive = !flush_out(cn);
    if (end == REFUSED && alive) send_error(cn->c, cn->fr.status, cn->fr.why);
    if (alive) close_gracefully(cn->c);
    else close(cn->c);
  }
  unlist(cn);
  close(cn->p);
  free(cn);
  return NULL;
}

static void *accept_main(void *arg) {
  struct http_relay *rl = arg;
  for (;;) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int c = accept4(rl->lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        usleep(10 * 1000); /* out of descriptors: let connections end */
        continue;
      }
      return NULL; /* the socket was shut down: http_relay_stop_accepting */
    }
    int sv[2];
    struct conn *cn = NULL;
    pthread_mutex_lock(&rl->mu);
    int full = rl->n_conns >= rl->max_conns;
    pthread_mutex_unlock(&rl->mu);
    if (full || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) { close(c); continue; }
    cn = calloc(1, sizeof *cn);
    if (!cn) { close(c); close(sv[0]); close(sv[1]); continue; }
    cn->rl = rl;
    cn->c = c;
    cn->p = sv[0];
    cn->p_mhd = sv[1];
    set_nonblocking(c);
    set_nonblocking(sv[0]);
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* SSE tokens go out as they come */
    /* listed before MHD can complete anything on it; newest first, since a closed MHD end's number
     * may be reused by the next socketpair while the old relay is still ending */
    pthread_mutex_lock(&rl->mu);
    cn->next = rl->conns;
    rl->conns = cn;
    rl->n_conns++;
    pthread_mutex_unlock(&rl->mu);
    if (MHD_add_connection(rl->d, sv[1], (struct sockaddr *)&ss, len) != MHD_YES) { /* closes sv[1] */
      unlist(cn);
      close(c);
      close(sv[0]);
      free(cn);
      continue;
    }
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 * 1024);
    if (pthread_create(&th, &at, relay_main, cn)) { /* MHD sees its end hang up */
      unlist(cn);
      close(c);
      close(sv[0]);
      free(cn);
    }
    pthread_attr_destroy(&at);
  }
}

int http_relay_start(int listen_fd, struct MHD_Daemon *d, int max_conns, struct http_relay **out) {
  struct http_relay *rl = calloc(1, sizeof *rl);
  if (!rl) return -1;
  rl->lfd = listen_fd;
  rl->d = d;
  rl->max_conns = max_conns;
  pthread_mutex_init(&rl->mu, NULL);
  pthread_cond_init(&rl->cv, NULL);
  if (pthread_create(&rl->th, NULL, accept_main, rl)) {
    pthread_cond_destroy(&rl->cv);
    pthread_mutex_destroy(&rl->mu);
    free(rl);
    return -1;
  }
  *out = rl;
  return 0;
}

void http_relay_stop_accepting(struct http_relay *rl) {
  if (!rl || rl->lfd < 0) return;
  shutdown(rl->lfd, SHUT_RDWR); /* wakes accept() */
  pthread_join(rl->th, NULL);
  close(rl->lfd);
  rl->lfd = -1;
}

void http_relay_free(struct http_relay *rl) {
  if (!rl) return;
  http_relay_stop_accepting(rl);
  /* the daemon has stopped and closed its ends: every relay thread is ending */
  pthread_mutex_lock(&rl->mu);
  while (rl->n_conns) pthread_cond_wait(&rl->cv, &rl->mu);
  pthread_mutex_unlock(&rl->mu);
  pthread_cond_destroy(&rl->cv);
  pthread_mutex_destroy(&rl->mu);
  free(rl);
}

void http_relay_completed(struct http_relay *rl, int mhd_fd) {
  if (!rl || mhd_fd < 0) return;
  pthread_mutex_lock(&rl->mu);
  for (struct conn *cn = rl->conns; cn; cn = cn->next)
    if (cn->p_mhd == mhd_fd) { atomic_fetch_add(&cn->n_done, 1); break; }
  pthread_mutex_unlock(&rl->mu);
}
