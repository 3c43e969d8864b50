/* server/json_budget.c — a memory budget for request bodies and their parsed JSON (see
 * json_budget.h). */
#include "server/json_budget.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* malloc's own bookkeeping per block, charged too: the cost of many tiny objects is mostly this */
#define BLOCK_OVERHEAD 16

static _Thread_local struct json_budget *tl_budget; /* set while this thread parses under a budget */
static atomic_size_t g_in_use;
static size_t g_limit;

static int charge_global(size_t n) {
  size_t prev = atomic_fetch_add(&g_in_use, n);
  if (prev + n > g_limit) {
    atomic_fetch_sub(&g_in_use, n);
    return -1;
  }
  return 0;
}

static void *counting_malloc(size_t n) {
  struct json_budget *b = tl_budget;
  if (b) {
    size_t cost = n + BLOCK_OVERHEAD;
    /* frees during the parse are not credited: the count is an upper bound of what it holds */
    if (b->spent + cost > b->limit) { b->over = JSON_BUDGET_REQUEST; return NULL; }
    if (charge_global(cost)) { b->over = JSON_BUDGET_GLOBAL; return NULL; }
    b->spent += cost;
    b->used += cost;
  }
  return malloc(n);
}

static void plain_free(void *p) { free(p); }

void json_budget_init(size_t global_limit) {
  g_limit = global_limit;
  /* jansson's default pair is malloc/free; this one is compatible with it (blocks carry no
   * header), so blocks allocated before the switch are freed correctly after it */
  json_set_alloc_funcs(counting_malloc, plain_free);
}

int json_budget_reserve(struct json_budget *b, size_t n) {
  if (charge_global(n)) { b->over = JSON_BUDGET_GLOBAL; return -1; }
  b->used += n;
  return 0;
}

/* One pass over the text, outside strings, for the two checks that come before parsing:
 *   depth        the deepest nesting of [ and {; the pass stops once it exceeds max_depth;
 *   lower bound  of what jansson would allocate: every container costs at least SCAN_CONTAINER
 *                bytes (an empty object or array is ~114 with malloc's overhead) and every other
 *                value at least SCAN_VALUE (an array slot and a json_t; null costs ~21), so a text
 *                that cannot fit is refused before the allocations a doomed parse would make.
 * (It used to be two passes, one in http.c and one here: one pass over an 8 MB body is ~20-65 %
 * faster, measured on the noisy dev machine.) */
#define SCAN_CONTAINER 96
#define SCAN_VALUE 20

static size_t scan(const char *p, size_t n, int max_depth, int *depth_out) {
  size_t containers = 0, commas = 0;
  int in_str = 0, depth = 0, deepest = 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (in_str) {
      if (c == '\\') i++;
      else if (c == '"') in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '{' || c == '[') {
      containers++;
      if (++depth > deepest && (deepest = depth) > max_depth) break;
    } else if (c == '}' || c == ']') {
      depth--;
    } else if (c == ',') {
      commas++;
    }
  }
  *depth_out = deepest;
  return containers * SCAN_CONTAINER + commas * SCAN_VALUE;
}

json_t *json_budget_loadb(struct json_budget *b, const char *text, size_t n, int max_depth,
                          size_t flags, json_error_t *je) {
  b->over = JSON_BUDGET_OK;
  b->spent = 0;
  b->limit = n * JSON_TREE_FACTOR + JSON_TREE_SLACK;
  int depth;
  size_t lower = scan(text, n, max_depth, &depth);
  if (depth > max_depth) {
    b->over = JSON_BUDGET_DEPTH;
    if (je) snprintf(je->text, sizeof je->text, "JSON nested deeper than %d levels", max_depth);
    return NULL;
  }
  if (lower > b->limit) {
    b->over = JSON_BUDGET_REQUEST;
    if (je) snprintf(je->text, sizeof je->text, "too many values for the memory budget");
    return NULL;
  }
  tl_budget = b;
  json_t *j = json_loadb(text, n, flags, je);
  tl_budget = NULL;
  return j;
}

void json_budget_release(struct json_budget *b) {
  if (b->used) atomic_fetch_sub(&g_in_use, b->used);
  b->used = 0;
}

size_t json_budget_in_use(void) { return atomic_load(&g_in_use); }
