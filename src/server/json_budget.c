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

/* A lower bound of what jansson allocates for text, from one pass outside strings: every container
 * costs at least SCAN_CONTAINER bytes (an empty object or array is ~114 with malloc's overhead) and
 * every other value at least SCAN_VALUE (an array slot and a json_t; null costs ~21). Refusing on
 * it spares the allocations a doomed parse would make before the allocator stops it. */
#define SCAN_CONTAINER 96
#define SCAN_VALUE 20

static size_t scan_lower_bound(const char *p, size_t n) {
  size_t containers = 0, commas = 0;
  int in_str = 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (in_str) {
      if (c == '\\') i++;
      else if (c == '"') in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '{' || c == '[') {
      containers++;
    } else if (c == ',') {
      commas++;
    }
  }
  return containers * SCAN_CONTAINER + commas * SCAN_VALUE;
}

json_t *json_budget_loadb(struct json_budget *b, const char *text, size_t n, size_t flags,
                          json_error_t *je) {
  b->over = JSON_BUDGET_OK;
  b->spent = 0;
  b->limit = n * JSON_TREE_FACTOR + JSON_TREE_SLACK;
  if (scan_lower_bound(text, n) > b->limit) {
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
