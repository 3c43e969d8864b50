#!/usr/bin/env python3
"""Reference renders for hearth's chat templates (tests/chat).

    chat_templates.py inputs            write tests/fixtures/chat/{conversations,constructs}.json
    chat_templates.py render TPL_DIR    render every input with transformers' apply_chat_template
                                        (tokenize=False) into tests/fixtures/chat/*.expected.jsonl
    chat_templates.py render TPL_DIR --replica
                                        same, with a local jinja2 environment built like
                                        transformers' (for development without transformers)

Templates are read from TPL_DIR (../shared/data/chat-templates), never copied into the repo.
Where rendering raises, the record holds {"error": message, "error_type": class name}; hearth
must fail too, and for raise_exception (TemplateError) with the same message.
No template here calls strftime_now, so the renders do not depend on the date.
"""
import json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures", "chat")

# name -> (file, special tokens as in the model's tokenizer_config.json)
TEMPLATES = {
    "qwen2.5-instruct": ("qwen2.5-instruct.jinja", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "qwen3": ("qwen3.jinja", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "gemma-4-it": ("gemma-4-it.jinja", {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}),
    "gemma-4-it-interleaved": ("gemma-4-it-interleaved.jinja", {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}),
}

# ---------------------------------------------------------------------------------------------
# inputs

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search_docs", "description": "Search the documentation — returns snippets.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "Query text"},
        "limit": {"type": "integer", "description": "Max results", "nullable": True},
        "filters": {"type": "object", "description": "Filters", "properties": {
            "lang": {"type": "string", "enum": ["en", "fr", "日本語"]},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags"}},
            "required": ["lang"]},
        "weights": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "w": {"type": "number"}}, "required": ["name"]}},
        "exact": {"type": "boolean", "description": "Exact match"}},
        "required": ["query", "filters"]}}}
NOPARAMS = {"type": "function", "function": {"name": "get_time", "description": "Current UTC time."}}
RESPONSE = {"type": "function", "function": {"name": "lookup", "description": "Look up a key.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    "response": {"type": "object", "description": "The value found"}}}

def call(name, args, cid=None, as_string=False):
    c = {"type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}
    if cid: c = {"id": cid, **c}
    return c

def U(t): return {"role": "user", "content": t}
def A(t): return {"role": "assistant", "content": t}
def S(t): return {"role": "system", "content": t}
def TOOL(t, cid=None, name=None):
    m = {"role": "tool", "content": t}
    if cid: m["tool_call_id"] = cid
    if name: m["name"] = name
    return m

def conversations():
    cs = []
    def add(cid, messages, tools=None, agp=True, kwargs=None):
        cs.append({"id": cid, "messages": messages, "tools": tools, "add_generation_prompt": agp, "kwargs": kwargs or {}})
    def both(cid, messages, tools=None, kwargs=None):
        add(cid + "/gp", messages, tools, True, kwargs)
        add(cid + "/nogp", messages, tools, False, kwargs)

    both("user", [U("Hello!")])
    both("system_user", [S("You are a terse assistant."), U("What is 2+2?")])
    both("multi_turn", [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke."), A("Why did the chicken cross the road?"), U("Why?")])
    both("system_multi", [S("Be kind."), U("a"), A("b"), U("c")])
    add("ends_assistant", [U("Question?"), A("Answer.")], agp=False)
    add("ends_assistant_gp", [U("Question?"), A("Answer.")])
    both("unicode", [S("Réponds en français 🇫🇷."), U("日本語で答えて: ¿qué tal? 🦙 — «ok» ß Ω"), A("はい、元気です 😀"), U("עברית العربية")])
    both("empty_user", [U("")])
    both("whitespace_user", [U("  \n\t  ")])
    add("padded_content", [S("  padded system  \n"), U("\n\nhello  \n"), A("  reply \n"), U(" next ")])
    add("special_chars", [U("quotes \" ' and \\ backslash {{ not jinja }} {% raw %} <|im_end|> <turn|> <tool_call>")])
    add("empty_system", [S(""), U("hi")])
    add("two_systems", [S("first"), U("u1"), S("second system mid-way"), U("u2")])
    add("content_parts_user", [U([{"type": "text", "text": "part one"}, {"type": "text", "text": " part two"}])])
    add("content_parts_system", [S([{"type": "text", "text": "sys part"}]), U("hi")])
    add("content_parts_assistant", [U("hi"), {"role": "assistant", "content": [{"type": "text", "text": "parted reply"}]}, U("ok")])
    add("content_parts_image", [U([{"type": "image"}, {"type": "text", "text": "What is this?"}])])
    add("empty_messages", [])
    add("only_system", [S("just a system prompt")])
    add("developer_role", [{"role": "developer", "content": "Developer instructions."}, U("hi")])
    add("long", [x for i in range(6) for x in (U(f"question {i}"), A(f"answer {i}"))] + [U("last")])
    # tools
    both("tools_user", [U("Weather in Paris?")], tools=[WEATHER])
    add("tools_system", [S("You can use tools."), U("Weather in Paris?")], tools=[WEATHER])
    add("tools_many", [U("Find docs about tokenizers in French.")], tools=[WEATHER, SEARCH, NOPARAMS])
    add("tools_response_decl", [U("look up x")], tools=[RESPONSE])
    add("tools_empty_list", [U("hi")], tools=[])
    tc1 = [U("Weather in Paris?"), {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"}, "call_1")]},
           TOOL("{\"temperature\": 21, \"sky\": \"clear\"}", "call_1", "get_weather")]
    both("tool_call_result", tc1, tools=[WEATHER])
    add("tool_call_result_answer", tc1 + [A("It is 21°C and clear in Paris."), U("Thanks! And Lyon?")], tools=[WEATHER])
    add("tool_call_args_string", [U("Weather in Oslo?"), {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Oslo"}, "c9", as_string=True)]},
                                  TOOL("cold", "c9")], tools=[WEATHER])
    add("tool_call_content_null", [U("Weather in Rome?"), {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Rome"}, "r1")]},
                                   TOOL("warm", "r1")], tools=[WEATHER])
    add("tool_call_with_text", [U("Weather in Rome?"), {"role": "assistant", "content": "Let me check.", "tool_calls": [call("get_weather", {"city": "Rome"}, "r1")]},
                                TOOL("warm", "r1")], tools=[WEATHER])
    par = [U("Weather in Paris and Tokyo?"), {"role": "assistant", "content": "", "tool_calls": [
        call("get_weather", {"city": "Paris"}, "a"), call("get_weather", {"city": "Tokyo", "unit": "fahrenheit"}, "b")]},
        TOOL("18C", "a"), TOOL("75F", "b")]
    both("parallel_calls", par, tools=[WEATHER])
    add("parallel_calls_answer", par + [A("Paris 18°C, Tokyo 75°F.")], tools=[WEATHER])
    add("nested_args", [U("search"), {"role": "assistant", "content": "", "tool_calls": [call("search_docs", {
        "query": "tokenizer \"bpe\"", "limit": 5, "filters": {"lang": "en", "tags": ["a", "b"]}, "exact": False,
        "weights": [{"name": "x", "w": 0.5}, {"name": "y", "w": 1.0}], "score": 1e-7, "big": 1e20, "none": None, "flag": True}, "s1")]},
        TOOL("[]", "s1")], tools=[SEARCH])
    add("tool_result_parts", [U("t?"), {"role": "assistant", "content": "", "tool_calls": [call("get_time", {}, "t1")]},
                              {"role": "tool", "tool_call_id": "t1", "content": [{"type": "text", "text": "12:00 UTC"}]}], tools=[NOPARAMS])
    add("tool_result_unicode", [U("t?"), {"role": "assistant", "content": "", "tool_calls": [call("get_time", {}, "t1")]}, TOOL("時刻: 12時 ✅", "t1")], tools=[NOPARAMS])
    add("multi_step_tools", [U("Plan a trip"), {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Nice"}, "w1")]}, TOOL("sunny", "w1"),
                             {"role": "assistant", "content": "", "tool_calls": [call("search_docs", {"query": "Nice hotels", "filters": {"lang": "fr"}}, "w2")]}, TOOL("Hotel A", "w2")],
        tools=[WEATHER, SEARCH])
    add("tool_calls_no_tools_given", [U("x"), {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "X"}, "x1")]}, TOOL("ok", "x1"), A("done")])
    # thinking
    for et in (True, False):
        tag = "think_on" if et else "think_off"
        both(tag, [U("Solve 12*13.")], kwargs={"enable_thinking": et})
        add(tag + "/tools", [U("Weather in Paris?")], tools=[WEATHER], kwargs={"enable_thinking": et})
        add(tag + "/history", [U("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."}, U("3+3?")], kwargs={"enable_thinking": et})
    add("reasoning_last_turn", [U("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "Adding."}], agp=False)
    add("reasoning_inline_think", [U("2+2?"), A("<think>\nAdding two and two.\n</think>\n\n4"), U("and 3+3?")])
    add("reasoning_inline_last", [U("2+2?"), A("<think>\nAdding.\n</think>\n\n4")], agp=False)
    add("reasoning_channel_inline", [U("2+2?"), A("<|channel>thought\nAdding.<channel|>4"), U("next")])
    add("reasoning_with_tool_call", [U("Weather?"), {"role": "assistant", "content": "", "reasoning_content": "I should call the weather tool.",
        "tool_calls": [call("get_weather", {"city": "Paris"}, "p1")]}, TOOL("rain", "p1")], tools=[WEATHER], kwargs={"enable_thinking": True})
    add("reasoning_tool_then_answer", [U("Weather?"), {"role": "assistant", "content": "", "reasoning_content": "Call it.",
        "tool_calls": [call("get_weather", {"city": "Paris"}, "p1")]}, TOOL("rain", "p1"),
        {"role": "assistant", "content": "It rains.", "reasoning_content": "Summarise."}, U("ok")], tools=[WEATHER])
    add("reasoning_null", [U("hi"), {"role": "assistant", "content": "hello", "reasoning_content": None}, U("bye")])
    add("reasoning_field", [U("hi"), {"role": "assistant", "content": "hello", "reasoning": "via reasoning field", "tool_calls": [call("get_time", {}, "t")]}, TOOL("now", "t")], tools=[NOPARAMS])
    add("tool_responses_legacy", [U("t?"), {"role": "assistant", "content": "", "tool_calls": [call("get_time", {})],
        "tool_responses": [{"name": "get_time", "response": {"time": "12:00", "ok": True}}]}], tools=[NOPARAMS])
    add("tool_response_first", [TOOL("orphan tool message"), U("hi")])
    add("user_tool_response_text", [U("<tool_response>\nx\n</tool_response>"), A("ok"), U("go")])
    add("kwargs_extra", [U("hi")], kwargs={"custom_flag": True, "date_string": "26 Jul 2024"})
    add("missing_content", [{"role": "user"}])
    add("unknown_role", [{"role": "narrator", "content": "Once upon a time"}, U("go on")])
    add("enable_thinking_string", [U("hi")], kwargs={"enable_thinking": "yes"})
    return cs

# Constructs: small templates with variables, covering the interpreter beyond the real templates.
def constructs():
    K = []
    def k(cid, template, **vars): K.append({"id": cid, "template": template, "vars": vars})
    k("ws_trim_blocks", "{% if true %}\nA\n{% endif %}\nB\n")
    k("ws_lstrip", "x\n    {% if true %}y{% endif %}\n  {# c #}\nz")
    k("ws_dash", "a  {{- 'b' -}}  c\n\n{%- if 1 %} d {% endif -%}\n e")
    k("ws_plus", "  {%+ if true %}p{% endif %}")
    k("ws_var_no_lstrip", "  {{ 'v' }}\n  {% set x = 1 %}\nend")
    k("ws_trailing_nl", "line\n")
    k("ws_comment_trim", "{# comment #}\nafter{#- x -#}  tail")
    k("print_values", "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ [1, 'a', none, true] }}|{{ {'k': 'v', 'n': [1.5]} }}|{{ (1, 2) }}|{{ (1,) }}|{{ 'it\\'s' }}|{{ ['it\\'s', \"q\\\"\"] }}")
    k("print_floats", "{{ 3.0 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1e-5 }} {{ 123456789.123 }} {{ 1/3 }} {{ 2.5e16 }}")
    k("arith_concat", "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'x' + 'y' }} {{ -(3) }}")
    k("compare", "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }} {{ none == none }} {{ true == 1 }}")
    k("logic", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ not [] }} {{ 1 if false }}|{{ 'y' if 0 else 'n' }}")
    k("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem|default('-') }}{{ loop.nextitem|default('-') }}{{ loop.cycle('o','e') }};{% endfor %}", xs=["a", "b", "c"])
    k("loop_else_filter", "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }},{% else %}empty{% endfor %}|{% for x in [] %}{% else %}none{% endfor %}", xs=[1, 2, 3])
    k("loop_dict_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", d={"b": 1, "a": 2})
    k("loop_nested_depth", "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.depth }}{% endfor %}{{ loop.depth }} {% endfor %}")
    k("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}")
    k("scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }}")
    k("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}")
    k("set_block", "{% set body %}inner {{ 1 + 1 }}{% endset %}[{{ body }}]{% set up | upper %}shout{% endset %}{{ up }}")
    k("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}")
    k("macro_defaults", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}|{{ greet() }}|")
    k("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(6) }}")
    k("macro_call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %}")
    k("macro_call_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1,2]) %}[{{ item }}]{% endcall %}")
    k("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}|{% filter trim | replace('a', 'o') %}  banana  {% endfilter %}")
    k("filters_str", "{{ '  x  ' | trim }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello wORLD-foo(bar' | title }}|{{ 'hELLO' | capitalize }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'xyx' | trim('x') }}|{{ 'héllo' | length }}|{{ 'a b  c' | wordcount }}")
    k("filters_list", "{{ [3,1,2] | sort }}|{{ [3,1,2] | sort(reverse=true) | join(',') }}|{{ ['b','A','a'] | unique | list }}|{{ [1,2,3] | first }}{{ [1,2,3] | last }}|{{ [1,2] | reverse | list }}|{{ [1,2,3] | sum }}|{{ [4,2,9] | min }}{{ [4,2,9] | max }}|{{ 'abc' | list }}|{{ [1,2,3,4,5] | batch(2) | list }}")
    k("filters_map_select", "{{ users | map(attribute='name') | join(', ') }}|{{ users | selectattr('admin') | map(attribute='name') | list }}|{{ users | rejectattr('admin') | list | length }}|{{ [1,2,3,4] | select('odd') | list }}|{{ [1,2,3,4] | reject('even') | list }}|{{ ['a','b'] | map('upper') | list }}|{{ users | selectattr('name', 'equalto', 'bo') | list | length }}|{{ [1,5,9] | select('gt', 4) | list }}",
      users=[{"name": "al", "admin": True}, {"name": "bo", "admin": False}])
    k("filters_dict", "{{ d | dictsort }}|{{ d | dictsort(reverse=true) }}|{{ d | dictsort(by='value') }}|{{ d | items | list }}|{{ d | length }}", d={"b": 2, "A": 3, "c": 1})
    k("filters_default", "{{ missing | default('dflt') }}|{{ none | default('x') }}|{{ '' | default('e', true) }}|{{ 0 | d(5) }}|{{ missing is defined }}{{ missing is undefined }}")
    k("filters_convert", "{{ '42' | int + 1 }} {{ '3.5' | float }} {{ 'x' | int }} {{ 3.9 | int }} {{ 7 | string ~ '!' }} {{ 2.5 | round }} {{ 2.567 | round(2) }} {{ -3 | abs }} {{ '12abc' | int(7) }}")
    k("filters_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}")
    k("tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ 'é\"\\n\\t<>&\\u2028' | tojson }}|{{ [1.0, 2, none, true, 1e-7, 1e22] | tojson }}|{{ {} | tojson }}{{ [] | tojson }}|{{ d | tojson(separators=(',', ':')) }}|{{ 'é' | tojson(ensure_ascii=true) }}", d={"z": 1, "a": [1, {"b": None}], "ü": "ß"})
    k("tests", "{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ 5 is odd }}{{ 6 is even }}{{ 9 is divisibleby 3 }}{{ none is none }}{{ true is true }}{{ false is false }}{{ true is boolean }}{{ 1 is boolean }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 3 is gt 2 }}{{ 1 is in [1] }}{{ x is sameas none }}", x=None)
    k("str_methods", "{{ s.startswith('He') }}{{ s.endswith(('x', 'd')) }}|{{ s.split() }}|{{ s.split('l') }}|{{ s.split('l', 1) }}|{{ s.rsplit('l', 1) }}|{{ '  p  '.strip() }}|{{ 'xxpxx'.lstrip('x') }}|{{ 'xxpxx'.rstrip('x') }}|{{ s.replace('l', 'L') }}|{{ s.upper() }}{{ s.lower() }}|{{ s.find('o') }}{{ s.count('l') }}|{{ '-'.join(['a','b']) }}|{{ s.title() }}|{{ s[1:4] }}{{ s[::-1] }}{{ s[-3:] }}{{ s[0] }}", s="Hello World")
    k("slices_lists", "{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::2] }}{{ xs[::-1] }}{{ xs[-1] }}{{ xs[5] is defined }}{{ xs[10:] }}", xs=[0, 1, 2, 3, 4])
    k("dict_access", "{{ d.a }}{{ d['a'] }}{{ d.get('a') }}{{ d.get('zz', 'dflt') }}{{ d.get('zz') }}{{ d.missing is defined }}{{ d['items'] is defined }}{{ d.keys() | list }}{{ d.values() | list }}", d={"a": 1, "b": 2})
    k("dict_literals", "{% set d = {'x': 1, 'y': [1, 2], 3: 'three'} %}{{ d }}{{ d[3] }}{{ d.y[1] }}{{ dict(a=1, b=2) }}")
    k("raise", "{% if messages | length == 0 %}{{ raise_exception('No messages provided: please send at least one.') }}{% endif %}ok", messages=[])
    k("raise_in_macro", "{% macro check(x) %}{% if not x %}{{ raise_exception('Bad value: ' ~ x) }}{% endif %}{% endmacro %}{{ check(0) }}")
    k("undefined_attr_error", "{{ missing.attr }}")
    k("none_concat_error", "{{ none + 'x' }}")
    k("unicode_ops", "{{ 'ñandú'|upper }} {{ 'ÀÉÎ'|lower }} {{ '日本語'|length }} {{ '日本語'[1] }} {{ '🦙x'[0] }} {{ 'aé'[::-1] }}")
    k("range_forms", "{{ range(3) | list }}{{ range(1, 4) | list }}{{ range(10, 0, -3) | list }}")
    k("string_escapes", "{{ 'tab\\there' }}|{{ \"new\\nline\" }}|{{ '\\u00e9\\x41' }}|{{ 'a' 'b' }}")
    k("generation_tag", "{% for m in messages %}{% generation %}{{ m }}{% endgeneration %}{% endfor %}", messages=["x"])
    k("loop_over_string_dict", "{% for c in 'ab' %}{{ c }}.{% endfor %}{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %}")
    k("cond_expr_filter", "{{ ('a' if true else 'b') | upper }} {{ 'x' ~ ('y' | upper) }} {{ -2 | abs }}")
    k("is_not", "{{ 1 is not none }}{{ none is not defined }}{{ x is not string }}", x=3)
    k("in_undefined", "{{ 'a' in missing }}{% for x in missing %}no{% endfor %}{{ missing | length }}{{ missing | list }}")
    k("bool_printing_in_list", "{{ [true, false, none, 1.5, -0.0] }}{{ {'a': none} }}")
    # Python's repr escapes what str.isprintable() refuses (no-break and other Unicode spaces, format
    # characters, unassigned code points); templates print lists and dicts (a tool result given as parts)
    k("repr_nonprintable", "{{ [s] }}|{{ {'k': s} }}|{{ (s,) }}", s="r\u00a01\u3000 \u2003 \ud7ff \U000e0001 \u0378 \u200b \x7f \u0085 é 日 🦙 \u2028")
    # round: Python's round() (the decimal nearest to the binary value, ties to even; an int stays an int)
    k("round_forms", "{{ 2.675|round(2) }} {{ 1.15|round(1) }} {{ 3|round }} {{ 0.125|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 15|round(-1) }} {{ 25|round(-1) }} {{ -15|round(-1) }} {{ 1234.5|round(-2) }} {{ 2.7|round(0, 'floor') }} {{ 2.1|round(1, 'ceil') }} {{ 1e300|round(2) }} {{ -0.5|round }} {{ true|round }}")
    k("items_on_messages", "{% for m in msgs %}{% for k, v in m.items() %}{{ k }}:{{ v }},{% endfor %}{% endfor %}", msgs=[{"role": "user", "content": "c", "extra": [1]}])
    return K

def write_inputs():
    os.makedirs(FIX, exist_ok=True)
    with open(os.path.join(FIX, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump(conversations(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(FIX, "constructs.json"), "w", encoding="utf-8") as f:
        json.dump(constructs(), f, ensure_ascii=False, indent=1)
        f.write("\n")

# ---------------------------------------------------------------------------------------------
# rendering

def replica_env():
    """jinja2 environment built as transformers' _compile_jinja_template builds it."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from datetime import datetime

    class Gen(jinja2.ext.Extension):
        tags = {"generation"}
        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_r"), [], [], body).set_lineno(lineno)
        def _r(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    def strftime_now(fmt):
        return datetime.now().strftime(fmt)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Gen, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env

def compile_fn(replica):
    if replica:
        env = replica_env()
        return lambda src: env.from_string(src)
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
        return _compile_jinja_template
    except ImportError as e:  # recorded in oracle_meta.json
        print("constructs fall back to the replica environment:", e)
        env = replica_env()
        return lambda src: env.from_string(src)

def make_tokenizer(src, tokens):
    from tokenizers import Tokenizer, models
    try:
        from transformers import PreTrainedTokenizerFast as Fast
    except ImportError:
        from transformers import TokenizersBackend as Fast
    vocab = {"<unk>": 0}
    for v in tokens.values():
        vocab.setdefault(v, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok = Fast(tokenizer_object=tk, **tokens)
    tok.chat_template = src
    return tok

def err_record(e):
    return {"error": str(e), "error_type": type(e).__name__}

def render(tpl_dir, replica):
    convs = json.load(open(os.path.join(FIX, "conversations.json"), encoding="utf-8"))
    meta = {"mode": "replica" if replica else "transformers"}
    try:
        import jinja2
        meta["jinja2"] = jinja2.__version__
        if not replica:
            import transformers
            meta["transformers"] = transformers.__version__
    except Exception as e:
        meta["import_error"] = repr(e)
    for name, (fname, tokens) in TEMPLATES.items():
        src = open(os.path.join(tpl_dir, fname), encoding="utf-8").read()
        if not replica:
            tok = make_tokenizer(src, tokens)
            try:
                meta.setdefault("special_tokens_map", {})[name] = {k: str(v) for k, v in tok.special_tokens_map.items()}
            except Exception as e:
                meta.setdefault("special_tokens_map", {})[name] = repr(e)
        else:
            tmpl = compile_fn(True)(src)
        out = []
        for c in convs:
            rec = {"id": c["id"]}
            try:
                if replica:
                    s = tmpl.render(messages=c["messages"], tools=c["tools"], documents=None,
                                    add_generation_prompt=c["add_generation_prompt"], **{**tokens, **c["kwargs"]})
                else:
                    s = tok.apply_chat_template(c["messages"], tools=c["tools"], add_generation_prompt=c["add_generation_prompt"],
                                                tokenize=False, **c["kwargs"])
                rec["expected"] = s
            except Exception as e:
                rec.update(err_record(e))
            out.append(rec)
        with open(os.path.join(FIX, name + ".expected.jsonl"), "w", encoding="utf-8") as f:
            for r in out:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(name, sum("expected" in r for r in out), "renders,", sum("error" in r for r in out), "errors")
    comp = compile_fn(replica)
    out = []
    for k in json.load(open(os.path.join(FIX, "constructs.json"), encoding="utf-8")):
        rec = {"id": k["id"]}
        try:
            rec["expected"] = comp(k["template"]).render(**k["vars"])
        except Exception as e:
            rec.update(err_record(e))
        out.append(rec)
    with open(os.path.join(FIX, "constructs.expected.jsonl"), "w", encoding="utf-8") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(os.path.join(FIX, "oracle_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("constructs", len(out), meta)

if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "inputs":
        write_inputs()
    elif len(sys.argv) >= 3 and sys.argv[1] == "render":
        render(sys.argv[2], "--replica" in sys.argv)
    else:
        sys.exit(__doc__)
