/* load/hub_http.h — the HTTP requests hub_pull makes, over libcurl, with redirects followed here
 * (not by libcurl) so that the Authorization header goes only to the endpoint's origin (scheme,
 * host and port): libcurl's CURLOPT_UNRESTRICTED_AUTH guards only the credentials it builds
 * itself, never a custom header, so a bearer token set as a header would follow a 302 to the CDN. */
#ifndef HEARTH_LOAD_HUB_HTTP_H
#define HEARTH_LOAD_HUB_HTTP_H
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct hub_http; /* one libcurl handle + the endpoint's origin and the token */

/* The headers of one response that the Hub protocol uses (values trimmed; "" when absent). */
struct hub_http_resp {
  long status;              /* set from the status line, so a body sink can already read it */
  char location[2048];      /* the absolute redirect target of a 3xx */
  char etag[160];           /* ETag, quotes and W/ stripped */
  char linked_etag[160];    /* X-Linked-Etag (an LFS file's sha256), same */
  char repo_commit[96];     /* X-Repo-Commit */
  int64_t linked_size;      /* X-Linked-Size, -1 when absent */
  int64_t content_length;   /* Content-Length, -1 when absent */
  int64_t range_start;      /* the first byte of a 206's Content-Range, -1 when absent */
};

/* Receives body bytes; returns non-zero to abort the transfer (then HEARTH_ERR_CANCELLED). */
typedef int (*hub_http_sink)(const void *data, size_t len, void *arg);

/* endpoint: "https://huggingface.co" (its origin receives the token); token may be NULL. */
int hub_http_new(const char *endpoint, const char *token, struct hub_http **out, struct hearth_err *err);
void hub_http_free(struct hub_http *h);

/* GET url into a malloc'd NUL-terminated buffer (at most max bytes), following redirects. */
int hub_http_get_text(struct hub_http *h, const char *url, size_t max, char **body, struct hub_http_resp *r,
                      struct hearth_err *err);
/* HEAD url without following a redirect to another origin (a same-origin one is followed, as for a
 * renamed repo): the Hub answers a resolve of an LFS file with 302 + X-Linked-* headers. */
int hub_http_head(struct hub_http *h, const char *url, struct hub_http_resp *r, struct hearth_err *err);
/* GET url from byte `from` on (a Range request when from > 0), following redirects, the body to
 * sink. r->status is the final status (200, or 206 when the server honoured the range). */
int hub_http_get(struct hub_http *h, const char *url, uint64_t from, hub_http_sink sink, void *arg,
                 struct hub_http_resp *r, struct hearth_err *err);
/* url-encodes one path of '/'-separated components (each escaped, the slashes kept) into out. */
int hub_http_escape_path(const char *path, char *out, size_t cap);
#endif
