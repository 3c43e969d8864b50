/* server/json_budget.h — a memory budget for request bodies and their parsed JSON.
 *
 * A JSON text can cost far more memory parsed than as text: jansson turns the 3 bytes of "{}," into
 * an object of ~200 bytes, so an 8 MB body of [{},{},...] became a 630 MB tree. Two budgets:
 *   per request  the parse may allocate at most JSON_TREE_FACTOR x the body size + JSON_TREE_SLACK
 *                (a jansson allocator that counts, per thread, while json_budget_loadb runs,
 *                after a one-pass lower bound that refuses hopeless texts before any allocation);
 *                beyond it the parse stops and the request is a 413;
 *   global       request bodies and parse trees of every request in flight together stay under
 *                the limit given to json_budget_init; beyond it a request is a 503 (retry later).
 * The allocator is jansson's global one (json_set_alloc_funcs); outside json_budget_loadb it is
 * plain malloc/free, so memory allocated before or after mixes freely.
 */
#ifndef HEARTH_SERVER_JSON_BUDGET_H
#define HEARTH_SERVER_JSON_BUDGET_H

#include <jansson.h>
#include <stddef.h>

/* Parse-tree bytes per body byte, at most. Measured with this allocator's count (bytes asked for +
 * 16 per block): chat messages ~10x, arrays of 6-digit token ids ~9x, of 3-digit ids ~15x,
 * [{},{},...] 38x, [1,1,...] 30x (an 8 MB one is millions of tokens: no context holds it). */
#define JSON_TREE_FACTOR 16
#define JSON_TREE_SLACK ((size_t)4 << 20) /* plus this much, for small bodies of small numbers */

enum { JSON_BUDGET_OK, JSON_BUDGET_REQUEST, JSON_BUDGET_GLOBAL, JSON_BUDGET_DEPTH };

/* One request's share. Zero-initialise; json_budget_release gives it back. */
struct json_budget {
  size_t used;  /* bytes charged to the global budget */
  size_t limit; /* for the running parse */
  size_t spent; /* by the running parse */
  int over;     /* JSON_BUDGET_*: why the last reserve or parse failed */
};

/* Installs the counting allocator in jansson and sets the global limit (bytes). Call once, before
 * requests arrive. */
void json_budget_init(size_t global_limit);
/* Charges n bytes (a body buffer's growth) to b and the global budget; -1 (b->over set) if the
 * global budget has no room. */
int json_budget_reserve(struct json_budget *b, size_t n);
/* json_loadb under b, after one pass over the text that refuses nesting deeper than max_depth
 * (NULL, b->over = JSON_BUDGET_DEPTH) and texts too many values to fit (JSON_BUDGET_REQUEST):
 * NULL with b->over set when a check or a budget stopped it, or as json_loadb (b->over 0). */
json_t *json_budget_loadb(struct json_budget *b, const char *text, size_t n, int max_depth,
                          size_t flags, json_error_t *je);
/* Gives b's bytes back to the global budget (the request is done with its body and tree). */
void json_budget_release(struct json_budget *b);
/* Bytes charged to the global budget now (for tests and /status). */
size_t json_budget_in_use(void);

#endif
