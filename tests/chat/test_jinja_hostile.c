/* tests/chat/test_jinja_hostile.c — templates written to crash, stall or bloat the renderer.
 *
 * A chat template comes from the model directory and runs on a connection thread for every chat
 * request, so each row here once took (or could take) the whole server down: self-referential
 * namespaces, values nested 60,000 deep, structures that share themselves into exponential size,
 * loops that stay inside the step budget but scan an 8 MB string each time, and expressions whose
 * syntax tree is deeper than the stack. Each must end in a clean error naming the limit, in bounded
 * time (the ctest timeout is the backstop; the error message says which meter stopped it), and the
 * same renderer must still render a large legitimate conversation through a real template.
 * Run under ASan in CI: a self-referential value must not leak (values live in the render arena).
 */
#include <string.h>

#include "test.h"
#include "chat_fixtures.h"
#include "chat/jinja.h"
#include "chat/template.h"

/* Parses src and renders it with vars (may be NULL) under lim (NULL: the defaults the server
 * uses); returns the status, fills err / *out. */
static int render(const char *src, json_t *vars, const struct jinja_limits *lim, char **out, struct hearth_err *err) {
  struct jinja_program *p = NULL;
  *out = NULL;
  int rc = jinja_parse(src, strlen(src), &p, err);
  if (rc) return rc;
  rc = jinja_render(p, vars, lim, out, NULL, err);
  jinja_program_free(p);
  return rc;
}

/* A render that must fail with a message containing `want`. */
static int fails_lim(const char *name, const char *src, json_t *vars, const struct jinja_limits *lim, const char *want) {
  char *out = NULL;
  struct hearth_err err = {0};
  int rc = render(src, vars, lim, &out, &err);
  int ok = rc != 0 && out == NULL && strstr(err.msg, want) != NULL;
  if (!ok) fprintf(stderr, "  %s: rc %d, '%s' (want an error with '%s')\n", name, rc, rc ? err.msg : out, want);
  free(out);
  return ok;
}
static int fails_with(const char *name, const char *src, json_t *vars, const char *want) {
  return fails_lim(name, src, vars, NULL, want);
}

/* A render that must succeed with exactly `want`. */
static int renders(const char *name, const char *src, json_t *vars, const char *want) {
  char *out = NULL;
  struct hearth_err err = {0};
  int rc = render(src, vars, NULL, &out, &err);
  int ok = rc == 0 && out && !strcmp(out, want);
  if (!ok) fprintf(stderr, "  %s: rc %d, '%s' (want '%s')\n", name, rc, rc ? err.msg : out, want);
  free(out);
  return ok;
}

#define NS_SELF "{% set ns = namespace(a=1) %}{% set ns.a = ns %}"
#define NS_LIST "{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}"
/* ns.l and ns.m: two separately built lists nested 60,000 deep */
#define DEEP "{% set ns = namespace(l=[], m=[]) %}{% for i in range(60000) %}{% set ns.l = [ns.l] %}" \
             "{% set ns.m = [ns.m] %}{% endfor %}"
/* ns.a and ns.b: [x, x] doubled 60 times (2^60 leaves, 61 levels: shallow but exponentially wide) */
#define WIDE "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}" \
             "{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
#define NEST "nested deeper than"
#define WORK "work budget"

TEST_GROUP(cycles_and_depth) {
  static const struct { const char *name, *src, *want; } rows[] = {
    {"print a namespace holding itself", NS_SELF "{{ ns }}", NEST},
    {"repr via string filter", NS_SELF "{{ ns | string }}", NEST},
    {"print a list holding its namespace", NS_LIST "{{ ns.a }}", NEST},
    {"join over the cycle", NS_LIST "{{ ns.a | join(',') }}", NEST},
    {"tojson of the cycle", NS_LIST "{{ ns.a | tojson }}", "serializ"},
    {"concat the cycle", NS_SELF "{{ 'x' ~ ns }}", NEST},
    {"print 60,000-deep list", DEEP "{{ ns.l }}", NEST},
    {"tojson 60,000-deep list", DEEP "{{ ns.l | tojson }}", NEST},
    {"== on 60,000-deep lists", DEEP "{{ ns.l == ns.m }}", NEST},
    {"!= on 60,000-deep lists", DEEP "{{ ns.l != ns.m }}", NEST},
    {"< on 60,000-deep lists", DEEP "{{ ns.l < ns.m }}", NEST},
    {"in over 60,000-deep lists", DEEP "{{ ns.l in [ns.m] }}", NEST},
    {"is eq test", DEEP "{{ ns.l is eq(ns.m) }}", NEST},
    {"unique over deep lists", DEEP "{{ [ns.l, ns.m] | unique | length }}", NEST},
    {"sort deep lists", DEEP "{{ [ns.l, ns.m] | sort | length }}", NEST},
    {"deep list as a dict key", DEEP "{{ {(ns.l,): 1}[(ns.m,)] }}", NEST},
    {"print exponentially wide", WIDE "{{ ns.a }}", "exceeded"},
    {"tojson exponentially wide", WIDE "{{ ns.a | tojson }}", "exceeded"},
    {"== exponentially wide", WIDE "{{ ns.a == ns.b }}", WORK},
    {"< exponentially wide", WIDE "{{ ns.a < ns.b + [2] }}", WORK},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    CHECKF(fails_with(rows[i].name, rows[i].src, NULL, rows[i].want), "row %zu: %s", i, rows[i].name);
  /* what stays legal: comparing a namespace is identity, a shallow cycle can be walked by hand */
  CHECK(renders("namespace identity", NS_SELF "{{ ns == ns }} {{ [ns] == [ns] }} {{ ns.a.a.a is sameas(ns) }}", NULL,
                "True True True"));
  CHECK(renders("199 levels print", "{% set ns = namespace(l=0) %}{% for i in range(199) %}{% set ns.l = [ns.l] %}"
                "{% endfor %}{{ (ns.l | string | length) }}", NULL, "399"));
}

/* {"x": [[[...]]]} nested `depth` deep */
static json_t *deep_json(int depth) {
  json_t *v = json_array();
  for (int i = 1; i < depth; i++) {
    json_t *o = json_array();
    json_array_append_new(o, v);
    v = o;
  }
  json_t *vars = json_object();
  json_object_set_new(vars, "x", v);
  return vars;
}

TEST_GROUP(syntax_depth) {
  /* trees deeper than the parser allows, each built by a loop in the parser rather than recursion */
  static const char *const links[] = {" + 1", ".a", " | trim", " and x", " or x", " * 2", " ** 1", "[0]", "()",
                                      " if x else 1", " is defined"};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    size_t n = 100000, k = strlen(links[i]);
    char *src = malloc(n * k + 16);
    REQUIRE(src);
    strcpy(src, "{{ x");
    for (size_t j = 0; j < n; j++) memcpy(src + 4 + j * k, links[i], k);
    strcpy(src + 4 + n * k, " }}");
    struct jinja_program *p = NULL;
    struct hearth_err err = {0};
    int rc = jinja_parse(src, strlen(src), &p, &err);
    CHECKF(rc == HEARTH_ERR_UNSUPPORTED && strstr(err.msg, "nesting deeper"), "'x%s' x 100000: rc %d %s", links[i], rc,
           err.msg);
    jinja_program_free(p);
    free(src);
  }
  /* 150 links parse and render (real templates chain a few dozen at most) */
  char src[4096] = "{{ 0";
  for (int j = 0; j < 150; j++) strcat(src, " + 1");
  strcat(src, " }}");
  CHECK(renders("150 links", src, NULL, "150"));
  /* macro recursion times block nesting: the evaluator's own frames are bounded */
  char m[8192] = "{% macro f(n) %}";
  for (int j = 0; j < 60; j++) strcat(m, "{% if true %}");
  strcat(m, "{% if n < 60 %}{{ f(n + 1) }}{% endif %}");
  for (int j = 0; j < 60; j++) strcat(m, "{% endif %}");
  strcat(m, "{% endmacro %}{{ f(0) }}");
  CHECK(fails_with("macro x blocks", m, NULL, "evaluation nested deeper than 1000"));
  /* template variables nested deeper than a walk may go */
  json_t *vars = deep_json(300);
  CHECK(fails_with("300-deep variables", "{{ 1 }}", vars, "nested deeper than"));
  json_decref(vars);
  vars = deep_json(150);
  CHECK(renders("150-deep variables", "{{ x | tojson | length }}", vars, "300"));
  json_decref(vars);
}

/* {"s": 4 MB of 'a', "t": the same bytes, "d": an object with 200,000 keys}: the size of a request
 * the server accepts (8 MB body), which also sets the budget (512 MiB + 64 x its text) */
static json_t *big_vars(void) {
  size_t n = 4u << 20;
  char *s = malloc(n);
  if (!s) return NULL;
  memset(s, 'a', n);
  json_t *v = json_object();
  json_object_set_new(v, "s", json_stringn(s, n));
  json_object_set_new(v, "t", json_stringn(s, n));
  free(s);
  json_t *d = json_object();
  for (int i = 0; i < 200000; i++) {
    char k[32];
    snprintf(k, sizeof k, "k%d", i);
    json_object_set_new(d, k, json_integer(i));
  }
  json_object_set_new(v, "d", d);
  return v;
}

TEST_GROUP(work_budget) {
  json_t *vars = big_vars();
  REQUIRE(vars);
  /* each row stays far inside the step budget (1e6) but would scan 4 MB (or 200,000 keys) per step */
#define LOOP(body) "{% for i in range(1000000) %}" body "{% endfor %}"
  static const struct { const char *name, *src, *want; } rows[] = {
    {"substring test", LOOP("{% if 'b' in s %}{% endif %}"), WORK},
    {"string equality", LOOP("{% if s == t %}{% endif %}"), WORK},
    {"string ordering", LOOP("{% if s < t %}{% endif %}"), WORK},
    {"length", LOOP("{% if s | length %}{% endif %}"), WORK},
    {"index", LOOP("{% if s[-1] %}{% endif %}"), WORK},
    {"slice", LOOP("{% if s[1:2] %}{% endif %}"), WORK},
    {"count", LOOP("{% if s.count('b') %}{% endif %}"), WORK},
    {"find", LOOP("{% if s.find('b') %}{% endif %}"), WORK},
    {"rfind", LOOP("{% if s.rfind('ab') %}{% endif %}"), WORK},
    {"strip", LOOP("{% if s.strip('a') %}{% endif %}"), WORK},
    {"replace (memory or work)", LOOP("{% if s.replace('b', 'c') %}{% endif %}"), "exceeded its"},
    {"isalpha", LOOP("{% if s.isalpha() %}{% endif %}"), WORK},
    {"trim", LOOP("{% if s | trim %}{% endif %}"), WORK},
    {"wordcount", LOOP("{% if s | wordcount %}{% endif %}"), WORK},
    {"lower test", LOOP("{% if s is lower %}{% endif %}"), WORK},
    {"dict lookup", LOOP("{% if d.missing %}{% endif %}"), WORK},
    {"dict get", LOOP("{% if d.get('missing') %}{% endif %}"), WORK},
    {"dict in", LOOP("{% if 'missing' in d %}{% endif %}"), WORK},
  };
  /* the rows under a budget of 64 MiB (fast under ASan); the default one stops the first row too */
  const struct jinja_limits small = {.max_work = 64u << 20};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    CHECKF(fails_lim(rows[i].name, rows[i].src, vars, &small, rows[i].want), "row %zu: %s", i, rows[i].name);
  CHECK(fails_with("default budget", rows[0].src, vars, WORK));
#undef LOOP
  /* the same operations a few times are fine */
  /* count('ab'), not count('a'): 4 million hits are 4 million memmem calls, and ASan checks each
   * one's range to the end of the string (quadratic under ASan only) */
  CHECK(renders("a few scans", "{{ 'b' in s }} {{ s == t }} {{ s | length }} {{ s.count('ab') }} {{ d.k199999 }}", vars,
                "False True 4194304 0 199999"));
  /* an empty string or list times a huge count is empty at once (a fuzzer's hang: the loop ran 10^15 times) */
  CHECK(renders("empty repeats", "{{ ('' * 10**15) | length }} {{ ([] * 10**15) | length }} {{ (10**15 * '') | length }}",
                vars, "0 0 0"));
  json_decref(vars);
}

/* A legitimate large conversation through the real Qwen3 template: 200 turns, 2 MB of text. The
 * template: the tokenizer cache's qwen3/chat_template.jinja (scripts/fetch-tokenizers.sh), else
 * ../shared's copy. */
TEST_GROUP(large_legit_render) {
  char path[4096];
  const char *cache = getenv("HEARTH_CACHE"), *home = getenv("HOME");
  if (cache && *cache) snprintf(path, sizeof path, "%s/tokenizers/qwen3/chat_template.jinja", cache);
  else snprintf(path, sizeof path, "%s/.cache/hearth/tokenizers/qwen3/chat_template.jinja", home ? home : ".");
  size_t len;
  char *src = chat_slurp(path, &len);
  if (!src) {
    snprintf(path, sizeof path, "%s/data/chat-templates/qwen3.jinja", chat_shared_dir());
    src = chat_slurp(path, &len);
  }
  CHECKF(src != NULL, "no qwen3 chat template (run scripts/fetch-tokenizers.sh): last tried %s", path);
  if (!src) return;
  struct chat_template *t = NULL;
  struct hearth_err err = {0};
  CHECKF(chat_template_load(src, len, NULL, &t, &err) == 0, "%s", err.msg);
  free(src);
  if (!t) return;
  size_t each = 10000;
  char *text = malloc(each + 1);
  REQUIRE(text);
  memset(text, 'w', each);
  text[each] = 0;
  json_t *msgs = json_array();
  for (int i = 0; i < 200; i++) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(i % 2 ? "assistant" : "user"));
    json_object_set_new(m, "content", json_string(text));
    json_array_append_new(msgs, m);
  }
  char *out = NULL;
  int rc = chat_template_render(t, msgs, NULL, 1, NULL, &out, &err);
  CHECKF(rc == 0 && out && strlen(out) > 200 * each, "rc %d %s", rc, rc ? err.msg : "");
  free(out);
  free(text);
  json_decref(msgs);
  chat_template_free(t);
}

TEST_MAIN(T(cycles_and_depth), T(syntax_depth), T(work_budget), T(large_legit_render))
