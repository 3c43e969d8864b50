#!/usr/bin/env python3
"""fuzz/make-seeds.py — writes the committed seed corpora fuzz/corpus/<target>/seed-*.

Seeds are small hand-written inputs that reach deep into each parser quickly, plus the hostile
inputs of issue 33 (self-referential namespaces, deep nesting, loops over big strings; nested
Replace normalizers, a huge decoder Replace; a header with many tensors). scripts/fuzz.sh runs
each target on its committed corpus (read only) plus a scratch corpus in build-fuzz/. Rerun this
script after editing it; it rewrites only the seed-* files, never what a fuzzer added.
Third-party files (the real chat templates, tokenizers) are not committed: fuzz.sh adds the chat
templates from the shared data directory when it exists.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- fuzz_chat_jinja: template source, optionally "\n\0" + a JSON object of variables ----------
NS = "{% set ns = namespace(a=1) %}"
jinja = {
    "chatml": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "tools": "{% if tools %}{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
             "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>"
             "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
             "{% endfor %}{% elif m.role == 'tool' %}<tool_response>{{ m.content }}</tool_response>"
             "{% else %}{{ m.content | trim }}{% endif %}{% endfor %}",
    "think": "{% for m in messages[::-1] %}{% set c = m.content %}{% if '</think>' in c %}"
             "{{ c.split('</think>')[-1].lstrip('\\n') }}{% endif %}{{ loop.index0 }}{% endfor %}",
    "macro": "{% macro render(v, d) %}{% if v is mapping %}{% for k, x in v | dictsort %}{{ k }}="
             "{{ render(x, d + 1) }};{% endfor %}{% elif v is iterable and v is not string %}"
             "[{% for x in v %}{{ render(x, d + 1) }}{% if not loop.last %},{% endif %}{% endfor %}]"
             "{% else %}{{ v }}{% endif %}{% endmacro %}{{ render(messages, 0) }}",
    "filters": "{{ messages | map(attribute='role') | unique | join(', ') | upper | replace('A', 'a') }}"
               "{{ (messages | selectattr('role', 'eq', 'user') | list | length) * 2 ** 3 // 5 % 7 }}"
               "{{ 'abc'[::-1] ~ '%s' | format if false else 'x' | center(9) | indent(2, true) }}",
    "raise": "{% if messages[0].role != 'system' %}{{ raise_exception('roles must alternate') }}{% endif %}",
    "setblock": "{% set x %}{% filter upper %}{{ bos_token }}{% endfilter %}{% endset %}{{ x | length }}"
                "{% call(a) render() %}{{ a }}{% endcall %}",
    # issue 33: each of these once crashed or stalled the server
    "ns-self": NS + "{% set ns.a = ns %}{{ ns }}",
    "ns-list": NS + "{% set ns.a = [ns] %}{{ ns.a }}{{ ns.a == [ns] }}{{ ns.a | tojson }}",
    "ns-cmp": NS + "{% set ns.a = [ns] %}{% set ns.b = [ns] %}{{ ns.a == ns.b }}{{ ns.a in [ns.b] }}",
    "deep-loop": "{% set ns = namespace(l=[]) %}{% for i in range(60000) %}{% set ns.l = [ns.l] %}"
                 "{% endfor %}{{ ns.l }}{{ ns.l == ns.l }}",
    "wide": "{% set ns = namespace(a=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}"
            "{{ ns.a == [ns.a] }}{{ ns.a | tojson }}",
    "big-loop": "{% set ns = namespace(s='x') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                "{% for i in range(1000000) %}{% if 'y' in ns.s %}{% endif %}{{ ns.s.count('x') }}{% endfor %}",
    "deep-expr": "{{ " + "(" * 150 + "1" + ")" * 150 + " }}{{ x" + ".a" * 150 + " }}{{ 1" + " + 1" * 150 + " }}",
    "deep-blocks": "{% macro f(n) %}" + "{% if true %}" * 40 + "{{ f(n + 1) }}" + "{% endif %}" * 40
                   + "{% endmacro %}{{ f(0) }}",
    "vars-deep": "{{ x | tojson }}{{ x == x }}\n\0" + json.dumps({"x": json.loads("[" * 300 + "]" * 300)}),
    # CI's fuzz run, 2026-12-05: an empty string times 30**7 looped 21 million times below every limit
    "empty-repeat": "{{ (messages | map(attribute='x') | join('')) * 30 ** 7 }}{{ ([] * 10 ** 15) | length }}"
                    "{{ ('' * 10 ** 15) | length }}",
    "vars-big": "{% for i in range(100000) %}{{ s | length }}{% endfor %}\n\0"
                + json.dumps({"s": "a" * 4096, "messages": []}),
}
for k, v in jinja.items():
    write("fuzz_chat_jinja", k, v)


# ---- fuzz_tok_load: tokenizer.json, optionally "\0" + tokenizer_config.json ----------------------
def tokenizer(normalizer=None, decoder=None, pre=None):
    t = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "aa": 3, "<s>": 4},
                   "merges": ["a b", "a a"]},
         "added_tokens": [{"id": 4, "content": "<s>", "special": True}]}
    if normalizer:
        t["normalizer"] = normalizer
    if decoder:
        t["decoder"] = decoder
    if pre:
        t["pre_tokenizer"] = pre
    return json.dumps(t)


def replace(pat, content):
    return {"type": "Replace", "pattern": {"String": pat}, "content": content}


write("fuzz_tok_load", "mini", tokenizer())
write("fuzz_tok_load", "mini-config", tokenizer() + "\0" + json.dumps({"bos_token": "<s>", "add_bos_token": True}))
write("fuzz_tok_load", "bytelevel", tokenizer(pre={"type": "ByteLevel", "add_prefix_space": False},
                                              decoder={"type": "ByteLevel"}))
write("fuzz_tok_load", "spm", tokenizer(normalizer={"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "\u2581"}, replace(" ", "\u2581")]},
    decoder={"type": "Sequence", "decoders": [replace("\u2581", " "), {"type": "ByteFallback"},
                                               {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}))
# issue 33: 20 nested Replace a -> aa doubles the text 20 times
write("fuzz_tok_load", "replace-nested", tokenizer(normalizer={"type": "Sequence", "normalizers": [
    replace("a", "aa") for _ in range(20)]}))
# issue 33: a decoder Replace to a huge string (32 KiB here; the model-file tests use 1 MB), then
# seven Replace z -> zz doubling it: 4 MiB of output per 'a'
write("fuzz_tok_load", "replace-huge-decoder", tokenizer(decoder={"type": "Sequence", "decoders": [
    replace("a", "z" * 32768)] + [replace("z", "zz")] * 7}))

# ---- fuzz_tok_encode: first byte = flags, the rest = text ----------------------------------------
texts = {
    "ascii": b"\x01Hello, world! 12345 don't stop",
    "specials": b"\x03<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "unicode": "\x00caf\u00e9 \u4e2d\u6587 \U0001f600 \u2581x \u0301e".encode(),
    "invalid-utf8": b"\x02\xc3\x28\xff\xfe\xed\xa0\x80 ok",
    "spaces": b"\x00" + b" " * 300 + b"\n\n\t\r\n" * 50,
    "repeat": b"\x01" + b"a" * 2000,
    "digits": b"\x00" + b"1234567890" * 40,
}
for k, v in texts.items():
    write("fuzz_tok_encode", k, v)


# ---- fuzz_safetensors: the file bytes (also parsed as config.json) -------------------------------
def safetensors(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


write("fuzz_safetensors", "one-tensor", safetensors(
    {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}, "__metadata__": {"format": "pt"}}, b"\0" * 16))
write("fuzz_safetensors", "dtypes", safetensors(
    {"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]},
     "b": {"dtype": "F16", "shape": [2, 2], "data_offsets": [8, 16]},
     "c": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]},
     "z": {"dtype": "F32", "shape": [0, 4], "data_offsets": [24, 24]}}, b"\1" * 24))
write("fuzz_safetensors", "overlap", safetensors(
    {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
     "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, b"\0" * 24))
# issue 33: many entries (the hostile case had 100,000; 500 keeps the seed small)
write("fuzz_safetensors", "many", safetensors(
    {f"model.layers.{i}.w": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(500)},
    b"\0" * 2000))
write("fuzz_safetensors", "config", json.dumps({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096, "tie_word_embeddings": True}))

# ---- fuzz_chat_parse: first byte = format/options/chunk size, the rest = model output -------------
outs = {
    "qwen-call": b"\x01<think>\nplan\n</think>\n\nok<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>",
    "qwen-two": b"\x11<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"s\": \"x\\\"y\"}}\n</tool_call>",
    "qwen-broken": b"\x05<tool_call>\n{\"name\": \"f\", \"arguments\": {\n</tool_call><think>",
    "gemma-call": b"\x02<|channel>thought\nhmm<channel|>text<|tool_call>call:get{city:<|\"|>Oslo<|\"|>,n:3}<tool_call|>",
    "gemma-nested": b"\x22<|tool_call>call:f{a:{b:[1,{c:<|\"|>x<|\"|>}]},d:true}<tool_call|>",
}
for k, v in outs.items():
    write("fuzz_chat_parse", k, v)

# ---- fuzz_request_json: an HTTP request body ------------------------------------------------------
reqs = {
    "chat": {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
             "max_tokens": 4, "temperature": 0.5},
    "parts": {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                      {"type": "text", "text": "b"}]}]},
    "tool-roundtrip": {"model": "m", "tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "messages": [{"role": "user", "content": "w?"},
                     {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                      "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                     {"role": "tool", "tool_call_id": "c", "content": "sunny"}]},
    "no-content": {"model": "m", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}]},
}
for k, v in reqs.items():
    write("fuzz_request_json", k, json.dumps(v))
write("fuzz_request_json", "deep", '{"model":"m","messages":[{"role":"user","content":"x","x":' + "[" * 60 + "]" * 60 + "}]}")
write("fuzz_request_json", "empties", '{"model":"m","messages":[' + ",".join(["{}"] * 200) + "]}")

# ---- fuzz_http_frame: a connection's bytes (the first byte: the read size - 1) ---------------------
H = "Host: 127.0.0.1:8080\r\n"
conns = {
    "get": "GET /health HTTP/1.1\r\n" + H + "\r\n",
    "pipelined": "GET /a HTTP/1.1\r\n" + H + "\r\nPOST /t HTTP/1.1\r\n" + H + "Content-Length: 2\r\n\r\n{}",
    "chunked": "POST /t HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\n2;x=y\r\n{}\r\n0\r\nX-T: 1\r\n\r\n"
               "GET / HTTP/1.1\r\n" + H + "\r\n",
    "cl-minus-one": "POST /t HTTP/1.1\r\n" + H + "Content-Length: -1\r\n\r\n{}",
    "empty-name": "GET /health HTTP/1.1\r\n" + H + ": x\r\nGET /v1/models HTTP/1.1\r\n\r\n",
    "obs-fold": "GET / HTTP/1.1\r\n" + H + "X-A: 1\r\n 2\r\n\r\n",
    "te-cl": "POST / HTTP/1.1\r\n" + H + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
}
for i, (k, v) in enumerate(conns.items()):
    write("fuzz_http_frame", k, bytes([(i * 37) % 256]) + v.encode("latin1"))
