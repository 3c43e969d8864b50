/* server/errors.h — OpenAI-style error bodies:
 *   {"error": {"message": "...", "type": "invalid_request_error", "param": "x"|null, "code": "..."|null}}
 * The status → type mapping follows OpenAI: 400/404/405/413/415/422 invalid_request_error,
 * 401 authentication_error, 403 permission_error, 429/503 server overloaded, 5xx server_error. */
#ifndef HEARTH_SERVER_ERRORS_H
#define HEARTH_SERVER_ERRORS_H

#include <jansson.h>

/* The "type" string for an HTTP status. */
const char *errors_type(unsigned status);
/* A new error object; param and code may be NULL (JSON null). Returns NULL only on OOM. */
json_t *errors_json(unsigned status, const char *param, const char *code, const char *msg);

/* Rewrites, in place, every absolute file path in msg (a '/' that starts a word and contains
 * another '/') to ".../<last component>", so that messages from the loaders and templates never
 * reveal where files live. Returns msg. */
char *errors_scrub(char *msg);

#endif
