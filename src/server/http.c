/* server/http.c — libmicrohttpd glue: the loopback-only daemon and the checks every request passes.
 *
 * Mode: one thread per connection (MHD_USE_THREAD_PER_CONNECTION), so handlers and SSE readers may
 * block on their request's token stream without busy-waiting. Guards, in the order applied:
 *   bind        loopback only (http_is_loopback), refused at start otherwise
 *   drain       after SIGTERM (srv->draining) every new request → 503 shutting_down
 *   limits      MHD: connection limit (max_conns + a small reserve), idle timeout (timeout_s),
 *               per-connection memory (header floods → 431 from MHD), strict parsing; the
 *               slow-client guard (http_guard.h): head deadline, body rate floor
 *   framing     before MHD: the relay (http_relay.h) frames every request head strictly
 *               (http_frame.h: malformed lines, empty header names, obs-fold, two Host or
 *               Content-Length headers, Content-Length not digits, Transfer-Encoding with
 *               Content-Length → 400; a Transfer-Encoding other than chunked → 501) and closes;
 *               here: %00 in the URL → 400 and close
 *   route       unknown path 404, known path with another method 405 + Allow
 *   Host        must name loopback and the bound port (DNS-rebinding guard) → 403; HTTP/1.1
 *               without Host → 400
 *   auth        bearer token when --api-key is set → 401
 *   type        POST needs Content-Type application/json and no Content-Encoding but identity → 415
 *   size        Content-Length or streamed body above max_body → 413, sent after the body has
 *               been read and dropped (so clients that write the whole body first see it), up to
 *               max(HTTP_DISCARD_MIN, 8 x max_body); larger or with "Expect: 100-continue" at once
 *   memory      bodies and parse trees of all requests in flight within a global budget → 503;
 *               a parse tree within JSON_TREE_FACTOR x its body → 413 (json_budget.h)
 *   depth       JSON nesting deeper than max_depth → 400 (the same pre-scan as the budget's)
 *   JSON        body must parse (strict UTF-8) to an object → 400
 * Every rejection is an OpenAI error object. Not here: anything about models or tokens.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "server/errors.h"
#include "server/http_guard.h"
#include "server/http_relay.h"
#include "server/json_budget.h"
#include "server/registry.h"
#include "server/routes.h"

double http_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- replies ------------------------------------------------------------------------ */

/* An oversized body is read and dropped up to this many bytes before the 413, so that clients that
 * send the whole body before reading (most do) see the 413 rather than a reset connection. */
#define HTTP_DISCARD_MIN ((unsigned long long)64 << 20)
/* The body rate floor after the head deadline (http_guard.h), bytes per second. */
#define HTTP_MIN_BODY_RATE (16.0 * 1024)

static enum MHD_Result queue(struct http_req *r, unsigned status, struct MHD_Response *resp) {
  if (!resp) return MHD_NO;
  if (r->close_after) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  r->status = status;
  if (status >= 400) atomic_fetch_add(&r->srv->n_errors, 1);
  enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

enum MHD_Result http_reply_json(struct http_req *r, unsigned status, json_t *body) {
  char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
  json_decref(body);
  if (!text) {
    static const char oom[] =
        "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
        "\"code\":null}}";
    status = 500;
    text = strdup(oom);
    if (!text) return MHD_NO;
  }
  return http_reply_json_text(r, status, text, strlen(text));
}

enum MHD_Result http_reply_json_text(struct http_req *r, unsigned status, char *text, size_t n) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
  if (!resp) { free(text); return MHD_NO; }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
  if (status == 503 || status == 429) MHD_add_response_header(resp, "Retry-After", "1");
  return queue(r, status, resp);
}

enum MHD_Result http_reply_error(struct http_req *r, unsigned status, const char *param,
                                 const char *code, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return http_reply_json(r, status, errors_json(status, param, code, msg));
}

enum MHD_Result http_reply_verr(struct http_req *r, const struct verr *e) {
  return http_reply_error(r, 400, e->param[0] ? e->param : NULL, "invalid_value", "%s", e->msg);
}

/* A stream keeps its model after its request has completed: MHD may report the completion before
 * it frees the response (a reset connection), and the producer reads the model until then. */
struct held_stream {
  MHD_ContentReaderCallback cb;
  MHD_ContentReaderFreeCallback fcb;
  void *cls;
  struct srv *srv;
  struct srv_model *held;
};

static ssize_t held_read(void *cls, uint64_t pos, char *buf, size_t max) {
  struct held_stream *h = cls;
  return h->cb(h->cls, pos, buf, max);
}

static void held_free(void *cls) {
  struct held_stream *h = cls;
  h->fcb(h->cls);
  srv_model_release(h->srv, h->held);
  free(h);
}

enum MHD_Result http_reply_stream(struct http_req *r, MHD_ContentReaderCallback cb, void *cls,
                                  MHD_ContentReaderFreeCallback fcb) {
  if (r->held) { /* the model reference moves to the response */
    struct held_stream *h = malloc(sizeof *h);
    if (!h) { fcb(cls); return MHD_NO; }
    *h = (struct held_stream){cb, fcb, cls, r->srv, r->held};
    r->held = NULL;
    cb = held_read;
    fcb = held_free;
    cls = h;
  }
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, cb, cls, fcb);
  if (!resp) { fcb(cls); return MHD_NO; }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  return queue(r, 200, resp);
}

int http_conn_fd(struct http_req *r) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? ci->connect_fd : -1;
}

void http_watch_init(struct http_req *r, int stream, struct http_watch *w) {
  memset(w, 0, sizeof *w);
  w->fd = r ? http_conn_fd(r) : -1;
  w->stream = stream;
  w->http10 = r ? r->http10 : 0;
  w->gap = 1.0;
}

int http_watch_check(struct http_watch *w) {
  if (w->fd < 0) return HTTP_PEER_OK;
  struct pollfd p = {.fd = w->fd, .events = POLLIN | POLLRDHUP};
  if (poll(&p, 1, 0) <= 0) return HTTP_PEER_OK;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return HTTP_PEER_GONE; /* reset, or closed both ways */
  if (!(p.revents & (POLLIN | POLLRDHUP))) return HTTP_PEER_OK;
  char c;
  ssize_t k = recv(w->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (k > 0) return HTTP_PEER_OK; /* a pipelined request waits: the client is there */
  if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? HTTP_PEER_OK : HTTP_PEER_GONE;
  /* end of input: closed or half-closed (see http.h) */
  double now = http_now();
  if (w->next_probe && now < w->next_probe) return HTTP_PEER_OK;
  w->next_probe = now + w->gap;
  if (w->gap < 16.0) w->gap *= 2;
  if (w->stream) return HTTP_PEER_PROBE;
  if (w->http10) return HTTP_PEER_GONE;
  static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
  if (send(w->fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
      errno != EWOULDBLOCK && errno != EINTR)
    return HTTP_PEER_GONE;
  return HTTP_PEER_OK;
}

/* ---- header checks -------------------------------------------------------------------- */

int http_is_loopback(const char *host) {
  if (!host) return 0;
  if (!strcasecmp(host, "localhost")) return 1;
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return 0;
}

/* Host header: "localhost", "127.x.y.z" or "[::1]", with ":port" equal to the bound port (a
 * missing port means 80, as HTTP says). */
static int host_ok(const char *h, int port) {
  char name[128];
  size_t n = strlen(h);
  if (n == 0 || n >= sizeof name) return 0;
  const char *end = h + n;
  if (h[0] == '[') {
    const char *rb = strchr(h, ']');
    if (!rb) return 0;
    memcpy(name, h + 1, (size_t)(rb - h - 1));
    name[rb - h - 1] = 0;
    if (rb[1] && rb[1] != ':') return 0;
    end = rb + 1;
    if (!inet_pton(AF_INET6, name, &(struct in6_addr){0})) return 0;
  } else {
    const char *colon = strchr(h, ':');
    if (colon) {
      if (strchr(colon + 1, ':')) return 0; /* bare IPv6 without brackets */
      end = colon;
    }
    memcpy(name, h, (size_t)(end - h));
    name[end - h] = 0;
  }
  int given = 80;
  if (*end == ':') {
    const char *p = end + 1;
    if (!*p || strlen(p) > 5) return 0;
    for (given = 0; *p; p++) {
      if (!isdigit((unsigned char)*p)) return 0;
      given = given * 10 + (*p - '0');
    }
  }
  return given == port && http_is_loopback(name);
}

static int content_type_json(const char *ct) {
  if (!ct) return 0;
  while (*ct == ' ') ct++;
  size_t n = strlen("application/json");
  if (strncasecmp(ct, "application/json", n)) return 0;
  return ct[n] == 0 || ct[n] == ';' || ct[n] == ' ';
}

static int auth_ok(const char *want, const char *got) {
  if (!want) return 1;
  if (!got || strncasecmp(got, "Bearer ", 7)) return 0;
  got += 7;
  size_t a = strlen(want), b = strlen(got);
  unsigned diff = (unsigned)(a ^ b);
  for (size_t i = 0; i < b; i++) diff |= (unsigned char)got[i] ^ (unsigned char)want[i % (a ? a : 1)];
  return diff == 0;
}

/* A URL that held %00 (MHD would hand the handler a path cut at the NUL): queues a 400 and
 * returns 1, or returns 0. The rest of the framing (duplicate Host or Content-Length, a
 * Transfer-Encoding other than chunked, malformed heads) never gets here: the relay's framer
 * refuses it before MHD parses anything (http_frame.h). */
static int framing_check(struct http_req *r, enum MHD_Result *ret) {
  int nul = r->gc && r->gc->nul_in_url;
  if (r->gc) r->gc->nul_in_url = 0; /* noted while unescaping this request's URL */
  if (!nul) return 0;
  r->close_after = 1;
  *ret = http_reply_error(r, 400, NULL, "bad_request", "the URL holds a NUL byte (%%00)");
  return 1;
}

/* Checks that need only the headers; queues a rejection and returns 1, or returns 0. */
static int precheck(struct http_req *r, const char *version, enum MHD_Result *ret) {
  struct MHD_Connection *c = r->conn;
  int known;
  const char *allow;
  if (framing_check(r, ret)) return 1;
  r->route = routes_match(r->url, r->method, &known, &allow);
  const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
  if (!host && strcmp(version, MHD_HTTP_VERSION_1_0)) {
    *ret = http_reply_error(r, 400, NULL, "missing_host", "HTTP/1.1 requests need a Host header");
    return 1;
  }
  if (host && !host_ok(host, atomic_load(&r->srv->port))) {
    *ret = http_reply_error(r, 403, NULL, "invalid_host",
                            "Host must name the loopback interface (localhost, 127.0.0.1, [::1]) "
                            "and this server's port");
    return 1;
  }
  if (!r->route) {
    if (known) {
      struct MHD_Response *resp = NULL;
      json_t *body = errors_json(405, NULL, "method_not_allowed", "method not allowed");
      char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
      json_decref(body);
      if (text) resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
      if (!resp) { free(text); *ret = MHD_NO; return 1; }
      MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
      MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
      *ret = queue(r, 405, resp);
    } else {
      *ret = http_reply_error(r, 404, NULL, "not_found", "no route for %s %s", r->method,
                              strcmp(r->method, "GET") && strcmp(r->method, "POST") ? "" : r->url);
    }
    return 1;
  }
  if (!r->route->open &&
      !auth_ok(r->srv->opt->api_key,
               MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION))) {
    *ret = http_reply_error(r, 401, NULL, "invalid_api_key", "missing or wrong bearer token");
    return 1;
  }
  if (!strcmp(r->method, "POST")) {
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!content_type_json(ct)) {
      *ret = http_reply_error(r, 415, NULL, "unsupported_media_type",
                              "Content-Type must be application/json");
      return 1;
    }
    /* a compressed body (gzip, ...) would be read as bad JSON: say what is wrong instead */
    const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (ce && strcasecmp(ce, "identity")) {
      *ret = http_reply_error(r, 415, NULL, "unsupported_media_type",
                              "Content-Encoding '%.32s' is not supported: send the body uncompressed", ce);
      return 1;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
      char *endp;
      errno = 0;
      unsigned long long v = strtoull(cl, &endp, 10);
      if (errno || *endp || v > r->srv->opt->max_body) {
        unsigned long long discard = 8ull * r->srv->opt->max_body;
        if (discard < HTTP_DISCARD_MIN) discard = HTTP_DISCARD_MIN;
        /* a client that waits for 100 Continue, or a body too large to drop, gets it at once */
        if (errno || *endp || v > discard ||
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT)) {
          r->close_after = 1;
          *ret = http_reply_error(r, 413, NULL, "body_too_large", "request body exceeds %zu bytes",
                                  r->srv->opt->max_body);
          return 1;
        }
        r->too_big = 1; /* read and drop it, then 413 */
      }
    }
  }
  return 0;
}

/* ---- the access handler ------------------------------------------------------------------ */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  struct srv *s = cls;
  struct http_req *r = *con_cls;
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    r->srv = s;
    r->conn = conn;
    r->url = url;
    r->method = method;
    r->t0 = http_now();
    r->gc = http_guard_conn(conn);
    r->http10 = !strcmp(version, MHD_HTTP_VERSION_1_0);
    *con_cls = r;
    http_guard_phase(s->guard, r->gc, HTTP_BODY);
    enum MHD_Result ret;
    if (atomic_load(&s->draining)) { /* SIGTERM: what is in flight finishes, nothing new starts */
      r->rejected = 1;
      return http_reply_error(r, 503, NULL, "shutting_down", "the server is shutting down");
    }
    r->counted = 1;
    atomic_fetch_add(&s->n_inflight, 1);
    if (precheck(r, version, &ret)) {
      r->rejected = 1;
      return ret;
    }
    return MHD_YES; /* come back with the body (or with nothing for GET) */
  }
  if (*upload_size) http_guard_body(s->guard, r->gc, *upload_size); /* the body rate floor */
  if (r->rejected) { *upload_size = 0; return MHD_YES; }
  if (*upload_size) { /* a piece of the body */
    size_t n = *upload_size;
    *upload_size = 0;
    if (r->too_big || r->over_budget) return MHD_YES;
    if (r->n_body + n > s->opt->max_body) {
      r->too_big = 1;
      free(r->body);
      r->body = NULL;
      r->n_body = 0;
      return MHD_YES;
    }
    if (r->n_body + n + 1 > r->cap_body) {
      size_t cap = r->cap_body ? r->cap_body : 4096;
      while (cap < r->n_body + n + 1) cap *= 2;
      char *b = json_budget_reserve(&r->budget, cap - r->cap_body) ? NULL : realloc(r->body, cap);
      if (!b) { /* no room: drop the body, 503 at the end */
        r->over_budget = 1;
        free(r->body);
        r->body = NULL;
        r->n_body = 0;
        return MHD_YES;
      }
      r->body = b;
      r->cap_body = cap;
    }
    memcpy(r->body + r->n_body, upload, n);
    r->n_body += n;
    r->body[r->n_body] = 0;
    return MHD_YES;
  }
  /* the whole request is here */
  http_guard_phase(s->guard, r->gc, HTTP_BUSY);
  if (r->too_big)
    return http_reply_error(r, 413, NULL, "body_too_large", "request body exceeds %zu bytes",
                            s->opt->max_body);
  if (r->over_budget)
    return http_reply_error(r, 503, NULL, "server_busy",
                            "too many request bodies in memory right now; retry");
  if (!strcmp(method, "POST")) {
    json_error_t je;
    if (!r->n_body) return http_reply_error(r, 400, NULL, "invalid_json", "empty request body");
    r->json = json_budget_loadb(&r->budget, r->body, r->n_body, s->opt->max_depth,
                                JSON_REJECT_DUPLICATES, &je);
    if (!r->json && r->budget.over == JSON_BUDGET_DEPTH)
      return http_reply_error(r, 400, NULL, "invalid_json", "JSON nested deeper than %d levels",
                              s->opt->max_depth);
    if (!r->json && r->budget.over == JSON_BUDGET_GLOBAL)
      return http_reply_error(r, 503, NULL, "server_busy",
                              "too many request bodies in memory right now; retry");
    if (!r->json && r->budget.over == JSON_BUDGET_REQUEST)
      return http_reply_error(r, 413, NULL, "json_too_large",
                              "the request JSON would take more than %d times its size in memory "
                              "once parsed (too many small values)", JSON_TREE_FACTOR);
    if (!r->json && json_error_code(&je) == json_error_null_character) /* legal JSON; our strings end at NUL */
      return http_reply_error(r, 400, NULL, "invalid_json",
                              "invalid JSON at line %d column %d: a string holds \\u0000 (U+0000 NUL), which hearth "
                              "does not accept", je.line, je.column);
    if (!r->json)
      return http_reply_error(r, 400, NULL, "invalid_json", "invalid JSON at line %d column %d: %s",
                              je.line, je.column, je.text);
    if (!json_is_object(r->json))
      return http_reply_error(r, 400, NULL, "invalid_json", "the body must be a JSON object");
  }
  atomic_fetch_add(&s->n_requests, 1);
  atomic_fetch_add(&s->n_active_http, 1);
  enum MHD_Result ret = r->route->fn(r);
  atomic_fetch_sub(&s->n_active_http, 1);
  return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  struct srv *s = cls;
  /* a keep-alive connection waits for its next request head from now */
  http_guard_phase(s->guard, http_guard_conn(conn), HTTP_HEAD);
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci) http_relay_completed(s->relay, ci->connect_fd); /* its response is written: see http_relay.h */
  struct http_req *r = *con_cls;
  if (!r) return;
  if (s->opt->verbose)
    fprintf(stderr, "hearth serve: %s %s -> %u (%.1f ms)%s\n", r->method, r->url, r->status,
            (http_now() - r->t0) * 1e3, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " [aborted]");
  if (r->counted) atomic_fetch_sub(&s->n_inflight, 1);
  if (r->held) srv_model_release(s, r->held);
  json_decref(r->json);
  free(r->body);
  json_budget_release(&r->budget);
  free(r);
  *con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap) {
  struct srv *s = cls;
  if (!s->opt->verbose) return;
  fputs("hearth serve (mhd): ", stderr);
  vfprintf(stderr, fmt, ap);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = (char)tolower((unsigned char)c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* MHD_OPTION_UNESCAPE_CALLBACK: %XX decoding as MHD does it, noting a %00 on the connection so that
 * framing_check refuses the request (MHD would hand the handler a path cut at the NUL). */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s) {
  (void)cls;
  char *w = s;
  int nul = 0;
  for (const char *p = s; *p; p++) {
    int hi, lo;
    if (*p == '%' && (hi = hexval(p[1])) >= 0 && (lo = hexval(p[2])) >= 0) {
      *w = (char)(hi * 16 + lo);
      nul |= *w == 0;
      w++;
      p += 2;
    } else {
      *w++ = *p;
    }
  }
  *w = 0;
  struct http_conn *c = nul ? http_guard_conn(conn) : NULL;
  if (c) c->nul_in_url = 1;
  return (size_t)(w - s);
}

/* A listening TCP socket on the loopback address ss (http_start checked that it is one); the bound
 * port in *port. The fd, or -1. */
static int listen_loopback(struct sockaddr_storage *ss, int *port) {
  int v6 = ss->ss_family == AF_INET6;
  socklen_t len = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (v6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)ss, len) || listen(fd, SOMAXCONN) ||
      getsockname(fd, (struct sockaddr *)ss, &len)) {
    close(fd);
    return -1;
  }
  *port = ntohs(v6 ? ((struct sockaddr_in6 *)ss)->sin6_port : ((struct sockaddr_in *)ss)->sin_port);
  return fd;
}

int http_start(struct srv *s, struct MHD_Daemon **out, int *port_out, struct hearth_err *err) {
  const struct server_options *o = s->opt;
  if (!http_is_loopback(o->host))
    return err_set(err, HEARTH_ERR_ARG,
                   "--host %s: hearth serves loopback only (127.0.0.1, ::1, localhost)", o->host);
  if (o->api_key && !*o->api_key) /* "Bearer " with nothing after it must not be a valid token */
    return err_set(err, HEARTH_ERR_ARG, "the API key is empty");
  if (o->port < 0 || o->port > 65535)
    return err_set(err, HEARTH_ERR_ARG, "--port %d: out of range", o->port);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  /* no listening socket of MHD's own: the relay accepts and frames (http_relay.h) */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                   MHD_USE_ERROR_LOG | MHD_USE_POLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
  const char *h = !strcasecmp(o->host, "localhost") ? "127.0.0.1" : o->host;
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, h, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)o->port);
  } else if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)o->port);
  } else {
    return err_set(err, HEARTH_ERR_ARG, "--host %s: not an address", o->host);
  }
  if (o->head_timeout_s < 1)
    return err_set(err, HEARTH_ERR_ARG, "--header-timeout %d: must be at least 1", o->head_timeout_s);
  /* every body and parse tree in flight together: 64 bodies' worth, at least 512 MiB */
  size_t global = 64 * o->max_body;
  json_budget_init(global < ((size_t)512 << 20) ? (size_t)512 << 20 : global);
  if (http_guard_new(o->head_timeout_s, o->timeout_s, HTTP_MIN_BODY_RATE, o->max_conns, o->verbose,
                     &s->guard))
    return err_set(err, HEARTH_ERR_NOMEM, "cannot start the connection guard");
  int port = 0, lfd = listen_loopback(&ss, &port);
  if (lfd < 0) {
    http_guard_free(s->guard);
    s->guard = NULL;
    return err_set(err, HEARTH_ERR_IO, "cannot listen on %s:%d (port in use?)", o->host, o->port);
  }
  atomic_store(&s->port, port);
  struct MHD_Daemon *d = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, s,
      MHD_OPTION_EXTERNAL_LOGGER, on_log, s,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_conns + HTTP_GUARD_RESERVE),
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
      MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
      MHD_OPTION_NOTIFY_CONNECTION, http_guard_notify, s->guard,
      MHD_OPTION_UNESCAPE_CALLBACK, unescape, s,
      MHD_OPTION_END);
  if (d && http_relay_start(lfd, d, o->max_conns + HTTP_GUARD_RESERVE, &s->relay)) {
    MHD_stop_daemon(d);
    d = NULL;
  }
  if (!d) {
    close(lfd);
    http_guard_free(s->guard);
    s->guard = NULL;
    return err_set(err, HEARTH_ERR_IO, "cannot start the HTTP daemon on %s:%d", o->host, port);
  }
  *port_out = port;
  *out = d;
  return 0;
}

void http_stop(struct srv *s, struct MHD_Daemon *d) {
  http_relay_stop_accepting(s->relay);
  if (d) MHD_stop_daemon(d); /* closes MHD's ends: the relay threads end */
  http_relay_free(s->relay);
  s->relay = NULL;
  http_guard_free(s->guard);
  s->guard = NULL;
}
