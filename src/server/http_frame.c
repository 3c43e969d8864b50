/* server/http_frame.c — strict HTTP/1.1 request framing (see http_frame.h). */
#include "server/http_frame.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { ST_HEAD, ST_BODY, ST_CHUNK_SIZE, ST_CHUNK_DATA, ST_CHUNK_CRLF, ST_TRAILER };

#define CHUNK_LINE_MAX 1024 /* a chunk-size line with its extensions */

static size_t fail(struct http_framer *fr, unsigned status, const char *why, size_t done) {
  fr->status = status;
  snprintf(fr->why, sizeof fr->why, "%s", why);
  return done;
}

/* RFC 9110 tchar */
static int is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return 1;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
  return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-value bytes: visible ASCII, obs-text, SP, HTAB */
static int is_field_byte(unsigned char c) { return c == ' ' || c == '\t' || (c >= 0x21 && c != 0x7f); }

static const char *find_crlf(const char *p, size_t n) {
  for (size_t i = 0; i + 1 < n; i++)
    if (p[i] == '\r' && p[i + 1] == '\n') return p + i;
  return NULL;
}

/* A CR not followed by LF, or an LF not preceded by CR, in p[from..n) (a CR at the very end may
 * still get its LF). */
static int stray_cr_lf_from(const char *p, size_t from, size_t n) {
  for (size_t i = from; i < n; i++) {
    if (p[i] == '\n' && (i == 0 || p[i - 1] != '\r')) return 1;
    if (p[i] == '\r' && i + 1 < n && p[i + 1] != '\n') return 1;
  }
  return 0;
}

static int stray_cr_lf(const char *p, size_t n) { return stray_cr_lf_from(p, 0, n); }

/* The value of a field line without its leading and trailing whitespace. */
static void trim(const char **v, const char **end) {
  while (*v < *end && (**v == ' ' || **v == '\t')) (*v)++;
  while (*end > *v && ((*end)[-1] == ' ' || (*end)[-1] == '\t')) (*end)--;
}

/* One "name: value" line (without CRLF); 0, or fails fr. */
static int check_field(struct http_framer *fr, const char *l, size_t n, const char **name_end) {
  if (n && (l[0] == ' ' || l[0] == '\t'))
    return fail(fr, 400, "a folded header line (obs-fold)", 0), -1;
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)l[i])) i++;
  if (i == 0 || i == n || l[i] != ':')
    return fail(fr, 400, i == 0 ? "a header line with an empty or invalid name"
                                : "a header line whose name is not a token",
                0), -1;
  for (size_t j = i + 1; j < n; j++)
    if (!is_field_byte((unsigned char)l[j]))
      return fail(fr, 400, "a control byte in a header value", 0), -1;
  *name_end = l + i;
  return 0;
}

static int name_is(const char *l, const char *name_end, const char *name) {
  size_t n = strlen(name);
  return (size_t)(name_end - l) == n && !strncasecmp(l, name, n);
}

/* The request line "METHOD SP TARGET SP HTTP/d.d" (without CRLF). */
static int check_request_line(struct http_framer *fr, const char *l, size_t n) {
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)l[i])) i++;
  if (i == 0 || i == n || l[i] != ' ') return fail(fr, 400, "a malformed request line", 0), -1;
  size_t t = ++i;
  while (i < n && (unsigned char)l[i] > 0x20 && l[i] != 0x7f) i++;
  if (i == t || i == n || l[i] != ' ') return fail(fr, 400, "a malformed request line", 0), -1;
  i++;
  if (n - i != 8 || memcmp(l + i, "HTTP/", 5) || l[i + 5] < '0' || l[i + 5] > '9' || l[i + 6] != '.' ||
      l[i + 7] < '0' || l[i + 7] > '9')
    return fail(fr, 400, "a malformed request line", 0), -1;
  return 0;
}

/* A complete head p[0..n), ending in CRLF CRLF: checks it and sets how its body is framed. */
static int check_head(struct http_framer *fr, const char *p, size_t n) {
  const char *end = p + n - 2; /* the final CRLF */
  const char *e = find_crlf(p, (size_t)(end - p) + 2);
  if (check_request_line(fr, p, (size_t)(e - p))) return -1;
  int hosts = 0, lengths = 0, encodings = 0, chunked = 0;
  unsigned long long length = 0;
  for (const char *l = e + 2; l < end; l = e + 2) {
    e = find_crlf(l, (size_t)(end - l) + 2);
    const char *name_end;
    if (check_field(fr, l, (size_t)(e - l), &name_end)) return -1;
    const char *v = name_end + 1, *ve = e;
    trim(&v, &ve);
    if (name_is(l, name_end, "Host")) {
      hosts++;
    } else if (name_is(l, name_end, "Content-Length")) {
      lengths++;
      if (ve == v || ve - v > 18) return fail(fr, 400, "Content-Length is not 1 to 18 digits", 0), -1;
      length = 0;
      for (const char *q = v; q < ve; q++) {
        if (*q < '0' || *q > '9') return fail(fr, 400, "Content-Length is not 1 to 18 digits", 0), -1;
        length = length * 10 + (unsigned)(*q - '0');
      }
    } else if (name_is(l, name_end, "Transfer-Encoding")) {
      encodings++;
      chunked = ve - v == 7 && !strncasecmp(v, "chunked", 7);
    }
  }
  if (hosts > 1) return fail(fr, 400, "more than one Host header", 0), -1;
  if (lengths > 1) return fail(fr, 400, "more than one Content-Length header", 0), -1;
  if (lengths && encodings) return fail(fr, 400, "both Transfer-Encoding and Content-Length", 0), -1;
  if (encodings && (encodings > 1 || !chunked))
    return fail(fr, 501, "Transfer-Encoding other than chunked is not supported", 0), -1;
  if (encodings) fr->state = ST_CHUNK_SIZE;
  else if (length) { fr->state = ST_BODY; fr->left = length; }
  else fr->state = ST_HEAD;
  return 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = (char)(c | 0x20);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "HEX [; extensions]" (without CRLF); the size, or -1 (fr failed). */
static long long chunk_size(struct http_framer *fr, const char *l, size_t n) {
  size_t i = 0;
  unsigned long long v = 0;
  for (; i < n && hexval(l[i]) >= 0; i++) {
    if (i == 15) return fail(fr, 400, "a chunk size over 15 hex digits", 0), -1;
    v = v * 16 + (unsigned)hexval(l[i]);
  }
  if (i == 0) return fail(fr, 400, "a malformed chunk size", 0), -1;
  while (i < n && (l[i] == ' ' || l[i] == '\t')) i++;
  if (i < n && l[i] != ';') return fail(fr, 400, "a malformed chunk size", 0), -1;
  for (; i < n; i++)
    if (!is_field_byte((unsigned char)l[i])) return fail(fr, 400, "a control byte in a chunk extension", 0), -1;
  return (long long)v;
}

/* The end (the CR of its CRLF) of the line at q[0..m) that may take at most max bytes: a chunk
 * size line or a trailer line. NULL when it has not ended yet, or when it fails the framing, which
 * sets fr->status: 400 stray for a CR or LF not in a CRLF, too_long_status / too_long once max
 * bytes hold no CRLF. */
static const char *line_end(struct http_framer *fr, const char *q, size_t m, size_t max,
                            const char *stray, unsigned too_long_status, const char *too_long) {
  size_t k = m < max ? m : max;
  const char *e = find_crlf(q, k);
  if (e) return e;
  if (stray_cr_lf(q, k)) fail(fr, 400, stray, 0);
  else if (m >= max) fail(fr, too_long_status, too_long, 0);
  return NULL;
}

size_t http_frame_feed(struct http_framer *fr, const char *p, size_t n) {
  size_t done = 0;
  while (done < n && !fr->status) {
    const char *q = p + done;
    size_t m = n - done;
    switch (fr->state) {
      case ST_HEAD: {
        /* an empty line before a request line: passed on, MHD skips it (RFC 9112 2.2) */
        if (m >= 2 && q[0] == '\r' && q[1] == '\n') { done += 2; fr->head_seen = 0; break; }
        const char *e = NULL;
        size_t from = fr->head_seen > 3 ? fr->head_seen - 3 : 0;
        for (size_t i = from; i + 3 < m && i + 3 < HTTP_FRAME_HEAD_MAX; i++)
          if (!memcmp(q + i, "\r\n\r\n", 4)) { e = q + i + 4; break; }
        if (!e) {
          size_t k = m < HTTP_FRAME_HEAD_MAX ? m : HTTP_FRAME_HEAD_MAX;
          size_t back = fr->head_seen > 1 ? fr->head_seen - 1 : 0; /* a CR at the old end got its byte */
          if (stray_cr_lf_from(q, back, k)) return fail(fr, 400, "a line not ended by CRLF in the request head", done);
          fr->head_seen = k;
          if (m < HTTP_FRAME_HEAD_MAX) return done;
          if (!find_crlf(q, k)) return fail(fr, 414, "the request line is too long", done);
          return fail(fr, 431, "the request head is too large", done);
        }
        size_t len = (size_t)(e - q);
        fr->head_seen = 0;
        if (stray_cr_lf(q, len)) return fail(fr, 400, "a line not ended by CRLF in the request head", done);
        if (check_head(fr, q, len)) return done;
        fr->heads++;
        done += len;
        break;
      }
      case ST_BODY:
      case ST_CHUNK_DATA: {
        size_t k = fr->left < m ? (size_t)fr->left : m;
        done += k;
        fr->left -= k;
        if (!fr->left) fr->state = fr->state == ST_BODY ? ST_HEAD : ST_CHUNK_CRLF;
        break;
      }
      case ST_CHUNK_CRLF:
        if (m < 2) return q[0] == '\r' ? done : fail(fr, 400, "chunk data not followed by CRLF", done);
        if (q[0] != '\r' || q[1] != '\n') return fail(fr, 400, "chunk data not followed by CRLF", done);
        done += 2;
        fr->state = ST_CHUNK_SIZE;
        break;
      case ST_CHUNK_SIZE: {
        const char *e = line_end(fr, q, m, CHUNK_LINE_MAX, "a chunk size line not ended by CRLF",
                                 400, "a chunk size line too long");
        if (!e) return done;
        long long size = chunk_size(fr, q, (size_t)(e - q));
        if (size < 0) return done;
        done += (size_t)(e - q) + 2;
        fr->left = (unsigned long long)size;
        fr->state = size ? ST_CHUNK_DATA : ST_TRAILER;
        break;
      }
      case ST_TRAILER: {
        const char *e = line_end(fr, q, m, HTTP_FRAME_HEAD_MAX, "a trailer line not ended by CRLF",
                                 431, "a trailer line is too large");
        if (!e) return done;
        const char *name_end;
        if (e > q && check_field(fr, q, (size_t)(e - q), &name_end)) return done;
        if (e == q) fr->state = ST_HEAD;
        done += (size_t)(e - q) + 2;
        break;
      }
    }
  }
  return done;
}

int http_frame_mid_request(const struct http_framer *fr) { return fr->state != ST_HEAD; }
