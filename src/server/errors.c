/* server/errors.c — OpenAI error objects (see errors.h). */
#include "server/errors.h"

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
