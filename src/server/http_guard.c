/* server/http_guard.c — per-connection deadlines against slow clients (see http_guard.h). */
#include "server/http_guard.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "server/http.h"

#define GUARD_TICK_MS 100
#define GUARD_PRESSURE_HEAD_S 1.0 /* under pressure: a head may take this long */

struct http_guard {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  int stop;
  struct http_conn head; /* list sentinel */
  int n_open;
  double head_s, idle_s, min_rate;
  int max_conns, verbose;
};

/* Closes c's socket for both directions (the fd stays open: MHD closes it after NOTIFY_CLOSED,
 * which takes the mutex this runs under, so the fd cannot be reused meanwhile). */
static void shut(struct http_guard *g, struct http_conn *c, const char *why, double age) {
  c->shut = 1;
  shutdown(c->fd, SHUT_RDWR);
  if (g->verbose)
    fprintf(stderr, "hearth serve: closed a connection: %s (%.1f s)\n", why, age);
}

static void check_all(struct http_guard *g, double now) {
  int pressure = g->n_open > g->max_conns;
  for (struct http_conn *c = g->head.next; c != &g->head; c = c->next) {
    if (c->shut || c->fd < 0) continue;
    double age = now - c->t_phase;
    if (c->phase == HTTP_HEAD) {
      double limit = c->served && g->idle_s > g->head_s ? g->idle_s : g->head_s;
      if (age > limit) shut(g, c, "request head too slow", age);
      else if (pressure && age > GUARD_PRESSURE_HEAD_S)
        shut(g, c, "request head too slow while connections are short", age);
    } else if (c->phase == HTTP_BODY) {
      if (age > g->head_s && (double)c->n_body < g->min_rate * (age - g->head_s))
        shut(g, c, "request body too slow", age);
    }
  }
}

static void *guard_main(void *arg) {
  struct http_guard *g = arg;
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += GUARD_TICK_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    if (!g->stop) check_all(g, http_now());
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

int http_guard_new(double head_s, double idle_s, double min_rate, int max_conns, int verbose,
                   struct http_guard **out) {
  struct http_guard *g = calloc(1, sizeof *g);
  if (!g) return -1;
  g->head.next = g->head.prev = &g->head;
  g->head_s = head_s;
  g->idle_s = idle_s;
  g->min_rate = min_rate;
  g->max_conns = max_conns;
  g->verbose = verbose;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&g->th, NULL, guard_main, g)) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
    return -1;
  }
  *out = g;
  return 0;
}

void http_guard_free(struct http_guard *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->stop = 1;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->th, NULL);
  /* the daemon has stopped: every connection got NOTIFY_CLOSED, the list is empty */
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

void http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode code) {
  struct http_guard *g = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    struct http_conn *c = calloc(1, sizeof *c);
    *socket_context = c;
    if (!c) return; /* unguarded, still served */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->fd = ci ? ci->connect_fd : -1;
    c->phase = HTTP_HEAD;
    c->t_phase = http_now();
    pthread_mutex_lock(&g->mu);
    c->next = &g->head;
    c->prev = g->head.prev;
    c->prev->next = c;
    g->head.prev = c;
    g->n_open++;
    pthread_mutex_unlock(&g->mu);
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    struct http_conn *c = *socket_context;
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    g->n_open--;
    pthread_mutex_unlock(&g->mu);
    free(c);
    *socket_context = NULL;
  }
}

struct http_conn *http_guard_conn(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

void http_guard_phase(struct http_guard *g, struct http_conn *c, enum http_phase phase) {
  if (!g || !c) return;
  pthread_mutex_lock(&g->mu);
  if (phase == HTTP_HEAD && c->phase != HTTP_HEAD) c->served = 1;
  c->phase = phase;
  c->t_phase = http_now();
  c->n_body = 0;
  pthread_mutex_unlock(&g->mu);
}

void http_guard_body(struct http_guard *g, struct http_conn *c, size_t n) {
  if (!g || !c) return;
  pthread_mutex_lock(&g->mu);
  c->n_body += n;
  pthread_mutex_unlock(&g->mu);
}
