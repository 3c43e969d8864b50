/* load/hub_http.c — libcurl requests for hub_pull: header capture, manual redirects, Range. */
#ifdef HEARTH_HAVE_CURL
#include "load/hub_http.h"

#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_REDIRECTS 10

struct hub_http {
  CURL *curl;
  char origin[512];     /* "scheme://host:port" of the endpoint */
  char auth[1200];      /* "Authorization: Bearer ..." or "" */
};

/* scheme://host:port of url (default ports filled in), or -1 when it does not parse. */
static int url_origin(const char *url, char *out, size_t cap) {
  CURLU *u = curl_url();
  char *scheme = NULL, *host = NULL, *port = NULL;
  int rc = -1;
  if (u && !curl_url_set(u, CURLUPART_URL, url, 0) && !curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) &&
      !curl_url_get(u, CURLUPART_HOST, &host, 0) && !curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT)) {
    for (char *p = host; *p; p++) *p = (char)tolower((unsigned char)*p);
    rc = snprintf(out, cap, "%s://%s:%s", scheme, host, port) < (int)cap ? 0 : -1;
  }
  curl_free(scheme); curl_free(host); curl_free(port);
  curl_url_cleanup(u);
  return rc;
}

static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int hub_http_new(const char *endpoint, const char *token, struct hub_http **out, struct hearth_err *err) {
  static pthread_once_t once = PTHREAD_ONCE_INIT; /* the server may pull from several threads */
  *out = NULL;
  pthread_once(&once, global_init);
  struct hub_http *h = calloc(1, sizeof *h);
  if (!h) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  if (url_origin(endpoint, h->origin, sizeof h->origin)) {
    free(h);
    return err_set(err, HEARTH_ERR_ARG, "%s: not a URL (HF_ENDPOINT)", endpoint);
  }
  if (token && *token && snprintf(h->auth, sizeof h->auth, "Authorization: Bearer %s", token) >= (int)sizeof h->auth) {
    free(h);
    return err_set(err, HEARTH_ERR_ARG, "the Hugging Face token is too long");
  }
  if (!(h->curl = curl_easy_init())) { free(h); return err_set(err, HEARTH_ERR_NOMEM, "libcurl: cannot make a handle"); }
  *out = h;
  return 0;
}

void hub_http_free(struct hub_http *h) {
  if (!h) return;
  curl_easy_cleanup(h->curl);
  free(h);
}

/* Copies a header value with quotes and a weak-validator prefix removed. */
static void etag_copy(char *dst, size_t cap, const char *v, size_t n) {
  if (n >= 2 && v[0] == 'W' && v[1] == '/') { v += 2; n -= 2; }
  if (n >= 2 && v[0] == '"' && v[n - 1] == '"') { v++; n -= 2; }
  snprintf(dst, cap, "%.*s", (int)n, v);
}

static size_t on_header(char *line, size_t size, size_t nitems, void *arg) {
  struct hub_http_resp *r = arg;
  size_t n = size * nitems, k = 0;
  if (n >= 5 && !strncmp(line, "HTTP/", 5)) { /* a new response (e.g. after 100 Continue): forget the last */
    memset(r, 0, sizeof *r);
    r->linked_size = r->content_length = r->range_start = -1;
    const char *sp = memchr(line, ' ', n);
    if (sp && sp + 1 < line + n) r->status = strtol(sp + 1, NULL, 10); /* known before the body arrives */
    return n;
  }
  while (k < n && line[k] != ':') k++;
  if (k == n) return n;
  size_t vb = k + 1, ve = n;
  while (vb < ve && (line[vb] == ' ' || line[vb] == '\t')) vb++;
  while (ve > vb && isspace((unsigned char)line[ve - 1])) ve--;
  const char *v = line + vb;
  size_t vn = ve - vb;
#define IS(name) (k == sizeof name - 1 && !strncasecmp(line, name, k))
  if (IS("etag")) etag_copy(r->etag, sizeof r->etag, v, vn);
  else if (IS("x-linked-etag")) etag_copy(r->linked_etag, sizeof r->linked_etag, v, vn);
  else if (IS("x-repo-commit")) snprintf(r->repo_commit, sizeof r->repo_commit, "%.*s", (int)vn, v);
  else if (IS("x-linked-size")) r->linked_size = vn && vn < 20 && isdigit((unsigned char)v[0]) ? strtoll(v, NULL, 10) : -1;
  else if (IS("content-length")) r->content_length = vn && vn < 20 && isdigit((unsigned char)v[0]) ? strtoll(v, NULL, 10) : -1;
  else if (IS("content-range")) { /* "bytes START-END/TOTAL" */
    if (vn > 6 && !strncasecmp(v, "bytes ", 6) && isdigit((unsigned char)v[6])) r->range_start = strtoll(v + 6, NULL, 10);
  }
#undef IS
  return n;
}

struct body { char *buf; size_t len, max; hub_http_sink sink; void *arg; int over, cancelled; };

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
  struct body *b = arg;
  size_t n = size * nmemb;
  if (b->sink) {
    if (b->sink(data, n, b->arg)) { b->cancelled = 1; return 0; }
    return n;
  }
  if (b->len + n > b->max) { b->over = 1; return 0; }
  char *nb = realloc(b->buf, b->len + n + 1);
  if (!nb) { b->over = 1; return 0; }
  b->buf = nb;
  memcpy(b->buf + b->len, data, n);
  b->len += n;
  b->buf[b->len] = 0;
  return n;
}

/* One request, no redirect followed: method "GET" or "HEAD"; the token only to the endpoint's origin. */
static int perform(struct hub_http *h, const char *method, const char *url, uint64_t from, struct body *b,
                   struct hub_http_resp *r, struct hearth_err *err) {
  CURL *c = h->curl;
  curl_easy_reset(c);
  memset(r, 0, sizeof *r);
  r->linked_size = r->content_length = r->range_start = -1;
  char origin[512];
  if (url_origin(url, origin, sizeof origin)) return err_set(err, HEARTH_ERR_FORMAT, "%s: not a URL", url);
  struct curl_slist *hdrs = curl_slist_append(NULL, "Accept-Encoding: identity");
  hdrs = curl_slist_append(hdrs, "User-Agent: hearth");
  if (h->auth[0] && !strcmp(origin, h->origin)) hdrs = curl_slist_append(hdrs, h->auth);
  char range[64];
  if (from) {
    snprintf(range, sizeof range, "%llu-", (unsigned long long)from);
    curl_easy_setopt(c, CURLOPT_RANGE, range);
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);   /* a stalled transfer fails after a minute */
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
  if (!strcmp(method, "HEAD")) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 0L);
  CURLcode cc = curl_easy_perform(c);
  curl_slist_free_all(hdrs);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
  if (b->cancelled) return err_set(err, HEARTH_ERR_CANCELLED, "cancelled");
  if (b->over) return err_set(err, HEARTH_ERR_FORMAT, "%s: the answer is larger than %zu bytes", url, b->max);
  if (cc != CURLE_OK) return err_set(err, HEARTH_ERR_IO, "%s: %s", url, curl_easy_strerror(cc));
  if (r->status >= 300 && r->status < 400) {
    char *loc = NULL;
    curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc);
    if (loc) snprintf(r->location, sizeof r->location, "%s", loc);
  }
  return 0;
}

/* perform, then redirects while they lead on (cross_origin 0: only within the endpoint's origin).
 * A text body (no sink) is that of the last answer; a file sink sees only 2xx bodies (hub_http_get). */
static int follow(struct hub_http *h, const char *method, const char *url0, uint64_t from, struct body *b,
                  int cross_origin, struct hub_http_resp *r, struct hearth_err *err) {
  char url[2048];
  snprintf(url, sizeof url, "%s", url0);
  for (int hop = 0;; hop++) {
    free(b->buf); /* a redirect's text body */
    b->buf = NULL;
    b->len = 0;
    int rc = perform(h, method, url, from, b, r, err);
    if (rc) return rc;
    if (!(r->status >= 300 && r->status < 400 && r->location[0])) return 0;
    if (hop == MAX_REDIRECTS) return err_set(err, HEARTH_ERR_IO, "%s: too many redirects", url0);
    char o[512];
    if (!cross_origin && (url_origin(r->location, o, sizeof o) || strcmp(o, h->origin))) return 0; /* HEAD: stop at the CDN */
    snprintf(url, sizeof url, "%s", r->location);
  }
}

int hub_http_get_text(struct hub_http *h, const char *url, size_t max, char **body, struct hub_http_resp *r,
                      struct hearth_err *err) {
  struct body b = {.max = max};
  *body = NULL;
  int rc = follow(h, "GET", url, 0, &b, 1, r, err);
  if (rc) { free(b.buf); return rc; }
  if (!b.buf && !(b.buf = calloc(1, 1))) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  *body = b.buf;
  return 0;
}

int hub_http_head(struct hub_http *h, const char *url, struct hub_http_resp *r, struct hearth_err *err) {
  struct body b = {.max = 0};
  return follow(h, "HEAD", url, 0, &b, 0, r, err);
}

/* A file body goes to the sink only for a 2xx answer: gate the caller's sink on the status. */
struct gate { CURL *c; hub_http_sink sink; void *arg; };
static int gated(const void *data, size_t len, void *arg) {
  struct gate *g = arg;
  long st = 0;
  curl_easy_getinfo(g->c, CURLINFO_RESPONSE_CODE, &st);
  if (st < 200 || st >= 300) return 0; /* a redirect's or an error's body: dropped */
  return g->sink(data, len, g->arg);
}

int hub_http_get(struct hub_http *h, const char *url, uint64_t from, hub_http_sink sink, void *arg,
                 struct hub_http_resp *r, struct hearth_err *err) {
  struct gate g = {h->curl, sink, arg};
  struct body b = {.sink = gated, .arg = &g};
  return follow(h, "GET", url, from, &b, 1, r, err);
}

int hub_http_escape_path(const char *path, char *out, size_t cap) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    int keep = isalnum(*p) || strchr("-._~/", *p);
    if (o + 4 > cap) return -1;
    if (keep) out[o++] = (char)*p;
    else o += (size_t)snprintf(out + o, cap - o, "%%%02X", *p);
  }
  if (o >= cap) return -1;
  out[o] = 0;
  return 0;
}
#endif /* HEARTH_HAVE_CURL */
