/* tests/test.h — the tiny test harness every runner uses.
 *
 * A runner defines its groups with TEST_GROUP(name) and lists them in a TEST_MAIN table.
 * `runner` runs all groups, `runner NAME` one group, `runner --list` prints the names.
 * Each CHECK that fails prints file:line and the expression and marks the group failed;
 * the runner ends with the line "N passed, N failed" and exits non-zero on any failure.
 */
#ifndef HEARTH_TEST_H
#define HEARTH_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int test_failures; /* failures in the current group */

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); test_failures++; } } while (0)
#define CHECKF(cond, ...) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); test_failures++; } } while (0)
#define REQUIRE(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); test_failures++; return; } } while (0)

/* Where scripts/fetch-tokenizers.sh put the tokenizer `name` ($HEARTH_CACHE or ~/.cache/hearth). */
static inline const char *test_tokenizer_dir(char *buf, size_t n, const char *name) {
  const char *c = getenv("HEARTH_CACHE");
  if (c && *c) snprintf(buf, n, "%s/tokenizers/%s", c, name);
  else snprintf(buf, n, "%s/.cache/hearth/tokenizers/%s", getenv("HOME") ? getenv("HOME") : ".", name);
  return buf;
}

struct test_group { const char *name; void (*fn)(void); };

#define TEST_GROUP(name) static void name(void)
#define TEST_MAIN(...) \
  int test_failures = 0; \
  static const struct test_group test_groups_[] = { __VA_ARGS__ }; \
  int main(int argc, char **argv) { \
    int n = (int)(sizeof test_groups_ / sizeof test_groups_[0]), passed = 0, failed = 0, ran = 0; \
    if (argc > 1 && !strcmp(argv[1], "--list")) { \
      for (int i = 0; i < n; i++) { printf("%s\n", test_groups_[i].name); } return 0; } \
    for (int i = 0; i < n; i++) { \
      if (argc > 1 && strcmp(argv[1], test_groups_[i].name)) continue; \
      test_failures = 0; ran++; test_groups_[i].fn(); \
      if (test_failures) { failed++; printf("FAIL %s (%d checks)\n", test_groups_[i].name, test_failures); } \
      else { passed++; printf("ok   %s\n", test_groups_[i].name); } } \
    if (!ran) { fprintf(stderr, "no such group: %s\n", argc > 1 ? argv[1] : "(none)"); return 2; } \
    printf("%d passed, %d failed\n", passed, failed); return failed ? 1 : 0; }
#define T(fn) { #fn, fn }

#endif
