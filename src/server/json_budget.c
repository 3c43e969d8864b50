/* server/json_budget.c — a memory budget for request bodies and their parsed JSON (see
 * json_budget.h). */
#include "server/json_budget.h"

#include <stdatomic.h>
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

json_t *json_budget_loadb(struct json_budget *b, const char *text, size_t n, size_t flags,
                          json_error_t *je) {
  b->over = JSON_BUDGET_OK;
  b->spent = 0;
  b->limit = n * JSON_TREE_FACTOR + JSON_TREE_SLACK;
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
