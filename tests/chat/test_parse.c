/* tests/chat/test_parse.c — output parsing: reasoning and tool calls from Qwen- and Gemma-4-style
 * generations, one-shot and streamed byte by byte (the two must agree), and round trips: the tool
 * calls the real templates render (tests/fixtures/chat, from transformers) parse back to the
 * arguments that went in. */
#include <string.h>
#include <jansson.h>

#include "test.h"
#include "chat_fixtures.h"
#include "chat/parse.h"

struct result { char content[4096]; char reasoning[4096]; json_t *calls; };

static void run(const struct chat_parser_opts *o, const char *text, size_t chunk, struct result *r) {
  memset(r, 0, sizeof *r);
  r->calls = json_array();
  struct chat_parser *p = NULL;
  struct hearth_err err = {0};
  if (chat_parser_new(o, &p, &err)) { CHECKF(0, "%s", err.msg); return; }
  size_t n = strlen(text);
  for (size_t i = 0;; i += chunk) {
    struct chat_delta d;
    int last = i >= n;
    int rc = !last ? chat_parser_push(p, text + i, i + chunk <= n ? chunk : n - i, &d, &err)
                   : chat_parser_finish(p, &d, &err);
    CHECK(rc == 0);
    if (rc) break;
    strncat(r->content, d.content, sizeof r->content - strlen(r->content) - 1);
    strncat(r->reasoning, d.reasoning, sizeof r->reasoning - strlen(r->reasoning) - 1);
    json_array_extend(r->calls, d.tool_calls);
    chat_delta_clear(&d);
    if (last) break;
  }
  chat_parser_free(p);
}

/* parses text one-shot and streamed (1, 2, 3 and 7 bytes at a time); all must agree with the want */
static void expect(const struct chat_parser_opts *o, const char *text, const char *content, const char *reasoning,
                   const char *calls_json /* [[name, args-json], ...] */) {
  size_t chunks[] = {100000, 1, 2, 3, 7};
  json_t *want = json_loads(calls_json, 0, NULL);
  REQUIRE(want);
  for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
    struct result r;
    run(o, text, chunks[k], &r);
    CHECKF(!strcmp(r.content, content), "chunk %zu: content '%s' want '%s'", chunks[k], r.content, content);
    CHECKF(!strcmp(r.reasoning, reasoning), "chunk %zu: reasoning '%s' want '%s'", chunks[k], r.reasoning, reasoning);
    CHECKF(json_array_size(r.calls) == json_array_size(want), "chunk %zu: %zu calls, want %zu", chunks[k],
           json_array_size(r.calls), json_array_size(want));
    for (size_t i = 0; i < json_array_size(r.calls) && i < json_array_size(want); i++) {
      json_t *c = json_array_get(r.calls, i);
      json_t *fn = json_object_get(c, "function");
      const char *id = json_string_value(json_object_get(c, "id"));
      CHECK(id && !strncmp(id, "call_", 5) && strlen(id) == 29);
      CHECK(!strcmp(json_string_value(json_object_get(c, "type")), "function"));
      CHECKF(!strcmp(json_string_value(json_object_get(fn, "name")), json_string_value(json_array_get(json_array_get(want, i), 0))),
             "name %s", json_string_value(json_object_get(fn, "name")));
      json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), JSON_DECODE_ANY, NULL);
      json_t *wargs = json_loads(json_string_value(json_array_get(json_array_get(want, i), 1)), JSON_DECODE_ANY, NULL);
      CHECKF(args && wargs && json_equal(args, wargs), "arguments %s", json_string_value(json_object_get(fn, "arguments")));
      json_decref(args);
      json_decref(wargs);
    }
    json_decref(r.calls);
  }
  json_decref(want);
}

TEST_GROUP(qwen_outputs) {
  struct chat_parser_opts o = {.format = CHAT_FORMAT_QWEN, .id_seed = 7};
  /* Qwen3, thinking then a tool call */
  expect(&o, "<think>\nThe user wants the weather in Paris. I should call get_weather.\n</think>\n\n"
             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
         "", "The user wants the weather in Paris. I should call get_weather.",
         "[[\"get_weather\", \"{\\\"city\\\": \\\"Paris\\\", \\\"unit\\\": \\\"celsius\\\"}\"]]");
  /* Qwen2.5: text, then two parallel calls */
  expect(&o, "Let me check both cities.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", \"days\": [1, 2], \"exact\": true}}\n</tool_call>",
         "Let me check both cities.\n", "",
         "[[\"get_weather\", \"{\\\"city\\\": \\\"Paris\\\"}\"], [\"get_weather\", \"{\\\"city\\\": \\\"東京\\\", \\\"days\\\": [1, 2], \\\"exact\\\": true}\"]]");
  /* Qwen3 with thinking disabled by the prompt: the model writes an empty block or plain text */
  expect(&o, "<think>\n\n</think>\n\nHello! How can I help you today?", "Hello! How can I help you today?", "", "[]");
  expect(&o, "Plain answer with a < sign and <b>tags</b> and a trailing <", "Plain answer with a < sign and <b>tags</b> and a trailing <", "", "[]");
  /* arguments given as a string, and a call without arguments */
  expect(&o, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call><tool_call>{\"name\": \"get_time\"}</tool_call>", "", "",
         "[[\"f\", \"{\\\"x\\\": 1}\"], [\"get_time\", \"{}\"]]");
  /* malformed calls stay content, verbatim */
  expect(&o, "A<tool_call>\n{not json}\n</tool_call>B", "A<tool_call>\n{not json}\n</tool_call>B", "", "[]");
  expect(&o, "unterminated <tool_call>\n{\"name\": \"f\"", "unterminated <tool_call>\n{\"name\": \"f\"", "", "[]");
  /* reasoning cut off by the token limit stays reasoning */
  expect(&o, "<think>\nStill thinking about", "", "Still thinking about", "[]");
  /* generation that starts inside the block (prompt ended with "<think>\n") */
  struct chat_parser_opts in = o;
  in.start_in_reasoning = 1;
  expect(&in, "First, 2+2=4.\nSo the answer is 4.\n</think>\n\nThe answer is **4**.", "The answer is **4**.",
         "First, 2+2=4.\nSo the answer is 4.", "[]");
  /* markers disabled */
  struct chat_parser_opts raw = o;
  raw.no_reasoning = raw.no_tools = 1;
  expect(&raw, "<think>x</think><tool_call>{}</tool_call>", "<think>x</think><tool_call>{}</tool_call>", "", "[]");
}

TEST_GROUP(gemma_outputs) {
  struct chat_parser_opts o = {.format = CHAT_FORMAT_GEMMA4, .id_seed = 9};
  expect(&o, "<|channel>thought\nThe user asks for the weather; call the tool.<channel|>"
             "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>",
         "", "The user asks for the weather; call the tool.",
         "[[\"get_weather\", \"{\\\"city\\\": \\\"Paris\\\", \\\"unit\\\": \\\"celsius\\\"}\"]]");
  expect(&o, "<|tool_call>call:search_docs{exact:false,filters:{lang:<|\"|>en<|\"|>,tags:[<|\"|>a, b<|\"|>,<|\"|>c<|\"|>]},limit:5,score:0.25,q:<|\"|>say \"hi\" {x}<|\"|>}<tool_call|>"
             "<|tool_call>call:get_time{}<tool_call|>",
         "", "",
         "[[\"search_docs\", \"{\\\"exact\\\": false, \\\"filters\\\": {\\\"lang\\\": \\\"en\\\", \\\"tags\\\": [\\\"a, b\\\", \\\"c\\\"]}, \\\"limit\\\": 5, \\\"score\\\": 0.25, \\\"q\\\": \\\"say \\\\\\\"hi\\\\\\\" {x}\\\"}\"], [\"get_time\", \"{}\"]]");
  expect(&o, "The capital of France is **Paris**.", "The capital of France is **Paris**.", "", "[]");
  expect(&o, "<|channel>thought\nHmm.\n<channel|>Answer: 42", "Answer: 42", "Hmm.", "[]");
  expect(&o, "Broken <|tool_call>call:f{x:<tool_call|> end", "Broken <|tool_call>call:f{x:<tool_call|> end", "", "[]");
}

/* The real templates' rendering of a tool call (from transformers) parses back to its arguments. */
static void roundtrip(const char *tpl, enum chat_format fmt, const char *turn, const char *open, const char *close) {
  char path[512];
  snprintf(path, sizeof path, HEARTH_SOURCE_DIR "/tests/fixtures/chat/%s.expected.jsonl", tpl);
  char *s = chat_slurp(path, NULL);
  json_t *convs = json_load_file(HEARTH_SOURCE_DIR "/tests/fixtures/chat/conversations.json", 0, NULL);
  REQUIRE(s && convs);
  int checked = 0;
  for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
    json_t *rec = json_loads(line, 0, NULL);
    const char *id = json_string_value(json_object_get(rec, "id"));
    const char *text = json_string_value(json_object_get(rec, "expected"));
    if (!text || (strcmp(id, "nested_args") && strcmp(id, "parallel_calls/nogp") && strcmp(id, "tool_call_result/nogp"))) {
      json_decref(rec);
      continue;
    }
    json_t *conv = NULL, *c;
    size_t i;
    json_array_foreach(convs, i, c) if (!strcmp(json_string_value(json_object_get(c, "id")), id)) conv = c;
    json_t *want = json_object_get(json_array_get(json_object_get(conv, "messages"), 1), "tool_calls");
    /* cut the assistant's tool-call span out of the prompt and parse it as generated text */
    const char *b = strstr(text, turn), *e;
    REQUIRE(b);
    b = strstr(b, open);
    e = b;
    for (const char *q = b; q && (q = strstr(q, close)); q += strlen(close)) e = q + strlen(close);
    REQUIRE(b && e > b);
    char *span = strndup(b, (size_t)(e - b));
    struct chat_parser_opts o = {.format = fmt, .id_seed = 1};
    struct chat_delta d;
    struct hearth_err err;
    REQUIRE(chat_parse_all(&o, span, strlen(span), &d, &err) == 0);
    CHECKF(json_array_size(d.tool_calls) == json_array_size(want), "%s %s: %zu calls", tpl, id, json_array_size(d.tool_calls));
    for (size_t k = 0; k < json_array_size(want) && k < json_array_size(d.tool_calls); k++) {
      json_t *fw = json_object_get(json_array_get(want, k), "function");
      json_t *fg = json_object_get(json_array_get(d.tool_calls, k), "function");
      CHECK(json_equal(json_object_get(fw, "name"), json_object_get(fg, "name")));
      json_t *args = json_loads(json_string_value(json_object_get(fg, "arguments")), 0, NULL);
      CHECKF(json_equal(args, json_object_get(fw, "arguments")), "%s %s: arguments %s", tpl, id,
             json_string_value(json_object_get(fg, "arguments")));
      json_decref(args);
    }
    CHECKF(strspn(d.content, " \n") == strlen(d.content), "%s %s: content '%s'", tpl, id, d.content);
    checked++;
    chat_delta_clear(&d);
    free(span);
    json_decref(rec);
  }
  CHECKF(checked == 3, "%s: %d round trips", tpl, checked);
  free(s);
  json_decref(convs);
}

TEST_GROUP(roundtrip_rendered_calls) {
  roundtrip("qwen2.5-instruct", CHAT_FORMAT_QWEN, "<|im_start|>assistant", "<tool_call>", "</tool_call>");
  roundtrip("qwen3", CHAT_FORMAT_QWEN, "<|im_start|>assistant", "<tool_call>", "</tool_call>");
  roundtrip("gemma-4-it", CHAT_FORMAT_GEMMA4, "<|turn>model", "<|tool_call>", "<tool_call|>");
  roundtrip("gemma-4-it-interleaved", CHAT_FORMAT_GEMMA4, "<|turn>model", "<|tool_call>", "<tool_call|>");
}

TEST_MAIN(T(qwen_outputs), T(gemma_outputs), T(roundtrip_rendered_calls))
