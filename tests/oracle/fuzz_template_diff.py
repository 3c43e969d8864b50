#!/usr/bin/env python3
"""tests/oracle/fuzz_template_diff.py — a differential fuzz of hearth's chat templates against a jinja2 environment
built like transformers' (chat_templates.py's replica): random conversations (system/developer, text and part
lists, tool calls with string or object arguments, tool results, reasoning_content, enable_thinking, tools) rendered
by both; prints mismatches and a count (a conversation both reject counts as agreeing). A tool, not a test.
    python3 tests/oracle/fuzz_template_diff.py qwen2.5-instruct|qwen3|gemma-4-it|gemma-4-it-interleaved N SEED
HEARTH: the hearth binary (default build/hearth); TPL_DIR: the templates (default ../shared/data/chat-templates).
Session 47: 1,000 conversations over the four templates, no difference."""
import json, os, random, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_templates import replica_env, TEMPLATES, WEATHER, SEARCH, NOPARAMS, RESPONSE
TPL = os.environ.get('TPL_DIR') or os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'shared', 'data', 'chat-templates')
BIN = os.environ.get('HEARTH', 'build/hearth')
TMP = os.environ.get('TMPDIR', '/tmp')
name, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
R = random.Random(seed)
fname, toks = TEMPLATES[name]
src = open(os.path.join(TPL, fname), encoding='utf-8').read()
tmpl = replica_env().from_string(src)
TEXTS = ['hi', '', ' ', 'Hello,\nworld', '  lead and trail  ', 'a<b>&"q"', '{"json": [1, 2]}', '日本語 テキスト', '😀 emoji',
         '<think>\nhidden\n</think>\n\nshown', '<tool_call>\n{"name": "x"}\n</tool_call>', 'line1\n\nline3\n', '\t\ttabs',
         '<|im_start|>user', '<start_of_turn>', '<|turn>model', 'trailing newline\n', '</think>only close', 'x' * 50]
def text(): return R.choice(TEXTS) + (R.choice(TEXTS) if R.random() < 0.3 else '')
def args():
    return R.choice([{}, {'city': 'Paris'}, {'city': 'Köln', 'unit': 'celsius'}, {'query': 'q', 'filters': {'lang': 'en', 'tags': ['a', 'b']}, 'limit': None, 'exact': True},
                     {'n': 1.5, 'neg': -3, 'big': 12345678901, 'list': [1, 'two', {'three': 3}], 'empty': '', 's': 'quote " and \\ backslash'}])
def content():
    r = R.random()
    if r < 0.9: return text()
    if r < 0.95: return [{'type': 'text', 'text': text()} for _ in range(R.randint(1, 3))]
    return None
def conv():
    msgs = []
    if R.random() < 0.4: msgs.append({'role': R.choice(['system', 'system', 'developer']), 'content': text()})
    for _ in range(R.randint(1, 4)):
        msgs.append({'role': 'user', 'content': content() if R.random() < 0.9 else text()})
        if R.random() < 0.7:
            a = {'role': 'assistant', 'content': content()}
            if R.random() < 0.3: a['reasoning_content'] = text()
            if R.random() < 0.35:
                calls = []
                for i in range(R.randint(1, 2)):
                    ar = args()
                    c = {'type': 'function', 'function': {'name': R.choice(['get_weather', 'search_docs', 'get_time']), 'arguments': json.dumps(ar) if R.random() < 0.5 else ar}}
                    if R.random() < 0.7: c['id'] = f'call_{i}'
                    calls.append(c)
                a['tool_calls'] = calls
                msgs.append(a)
                for c in calls:
                    t = {'role': 'tool', 'content': text() if R.random() < 0.8 else json.dumps({'ok': True})}
                    if R.random() < 0.6 and 'id' in c: t['tool_call_id'] = c['id']
                    if R.random() < 0.4: t['name'] = c['function']['name']
                    msgs.append(t)
                if R.random() < 0.5: msgs.append({'role': 'assistant', 'content': text()})
                continue
            msgs.append(a)
    if R.random() < 0.15 and msgs[-1]['role'] == 'user': msgs.append({'role': 'assistant', 'content': text()})
    tools = R.choice([None, None, [WEATHER], [WEATHER, SEARCH], [NOPARAMS], [RESPONSE, SEARCH]])
    kw = {}
    if R.random() < 0.4: kw['enable_thinking'] = R.random() < 0.5
    agp = R.random() < 0.8
    return msgs, tools, kw, agp
bad = errs_both = 0
for i in range(n):
    msgs, tools, kw, agp = conv()
    try:
        want = tmpl.render(messages=msgs, tools=tools, documents=None, add_generation_prompt=agp, **{**toks, **kw}); werr = None
    except Exception as e:
        want = None; werr = f'{type(e).__name__}: {e}'
    json.dump(msgs, open(os.path.join(TMP, 'fuzz_tpl_m.json'), 'w'), ensure_ascii=False)
    cmd = [BIN, 'template', '--template', os.path.join(TPL, fname), '--messages', os.path.join(TMP, 'fuzz_tpl_m.json'), '--kwargs', json.dumps(kw)]
    if tools is not None:
        json.dump(tools, open(os.path.join(TMP, 'fuzz_tpl_t.json'), 'w'), ensure_ascii=False); cmd += ['--tools', os.path.join(TMP, 'fuzz_tpl_t.json')]
    if not agp: cmd.append('--no-generation-prompt')
    if 'bos_token' in toks: cmd += ['--bos', toks['bos_token']]
    if 'eos_token' in toks: cmd += ['--eos', toks['eos_token']]
    p = subprocess.run(cmd, capture_output=True)
    got = p.stdout.decode('utf-8', 'replace') if p.returncode == 0 else None
    gerr = p.stderr.decode()[:200] if p.returncode != 0 else None
    if werr and gerr: errs_both += 1; continue
    if got != want:
        bad += 1
        if bad <= 5:
            print('MISMATCH', i, json.dumps({'messages': msgs, 'tools': bool(tools), 'kw': kw, 'agp': agp}, ensure_ascii=False)[:600])
            print('  want', repr(want)[:800] if want is not None else werr)
            print('  got ', repr(got)[:800] if got is not None else gerr)
            if want and got:
                k = next((j for j in range(min(len(want), len(got))) if want[j] != got[j]), min(len(want), len(got)))
                print('  first diff at', k, repr(want[max(0,k-60):k+60]), '|', repr(got[max(0,k-60):k+60]))
print(f'{name}: {bad} of {n} differ ({errs_both} raise in both)')
