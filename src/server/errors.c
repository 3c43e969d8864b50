/* server/errors.c — OpenAI error objects (see errors.h). */
#include "server/errors.h"

#include <string.h>

const char *errors_type(unsigned status) {
  switch (status) {
  case 401: return "authentication_error";
  case 403: return "permission_error";
  case 404: return "invalid_request_error";
  case 429: return "rate_limit_error";
  case 503: return "server_overloaded";
  default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

json_t *errors_json(unsigned status, const char *param, const char *code, const char *msg) {
  json_t *e = json_pack("{s:s, s:s, s:o, s:o}", "message", msg ? msg : "", "type",
                        errors_type(status), "param", param ? json_string(param) : json_null(),
                        "code", code ? json_string(code) : json_null());
  if (!e) /* msg was not valid UTF-8 (it may quote client bytes): keep the status, drop the text */
    e = json_pack("{s:s, s:s, s:n, s:n}", "message", "invalid request", "type", errors_type(status),
                  "param", "code");
  if (!e) return NULL;
  return json_pack("{s:o}", "error", e);
}

/* A path ends at whitespace, a quote, or punctuation that follows a file name in a message. */
static int path_end(char c) {
  return c == 0 || c == ' ' || c == '\t' || c == '\n' || c == '\'' || c == '"' || c == ')' ||
         c == ',' || c == ';' || (c == ':');
}

char *errors_scrub(char *msg) {
  char *w = msg;
  for (const char *p = msg; *p;) {
    int starts = *p == '/' && (p == msg || strchr(" \t'\"(=:[", p[-1]));
    if (starts) {
      const char *e = p, *last = p;
      while (!path_end(*e)) {
        if (*e == '/') last = e;
        e++;
      }
      if (last - p >= 3) { /* a directory part of 3+ bytes: "..." is never longer */
        memcpy(w, "...", 3);
        w += 3;
        p = last;
        continue;
      }
    }
    *w++ = *p++;
  }
  *w = 0;
  return msg;
}
