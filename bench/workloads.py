#!/usr/bin/env python3
"""bench/workloads.py — the product workloads of ../shared/docs/benchmarks.md through the HTTP API.

The Python twin of bench/workloads.mjs, for machines without node (the GPU machine has python3 and
no node). Standard library only: one keep-alive connection per worker thread.

  python3 bench/workloads.py --url http://127.0.0.1:8080 --model NAME [--embed-model NAME]
      [--data ../shared/data/workloads/classify.json] [--w w3,w4,w5,w5s,w6] [--concurrency 32]
      [--n 400] [--records FILE] [--repeat 3] [--labels yes,no]

W3   warm-prefix TTFT: the long record + question 1, then the same record + question 2 (streamed);
     time from sending the second request to its first content chunk (median of --repeat).
W3c  cold TTFT of the long record + question 1 (first request only; meaningful on a fresh server).
W4   classify-40x4: instruction + 10 descriptions per chat request, 40 output tokens, 4 in flight.
W5   classify-400: one /v1/completions per description (instruction + "Transaction: " + description
     + question), 1 output token with logprobs 2, --concurrency in flight.
W5s  classify-400 as ONE label-scoring request: the 400 prompts in one /v1/completions with the
     extension field "labels" (README, "Label scoring").
W6   embed: --records FILE (a JSON list of strings) or 10,000 generated records of 50-300 tokens,
     in requests of --embed-batch inputs (default 2,048), 2 in flight.
Prints one markdown table: wall time and items/s per workload (the best of --repeat for W4/W5/W6,
with the spread).
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))


class Client:
    """One keep-alive HTTP connection (per thread)."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80
        self.conn = None

    def post(self, path, body, stream=False):
        data = json.dumps(body).encode()
        for attempt in (0, 1):  # one reconnect when a kept-alive connection was closed
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
            try:
                self.conn.request('POST', path, body=data, headers={'Content-Type': 'application/json'})
                r = self.conn.getresponse()
                break
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        if r.status != 200:
            text = r.read().decode(errors='replace')
            raise RuntimeError(f'{path}: {r.status} {text[:300]}')
        if stream:
            return r
        out = json.loads(r.read())
        return out


def pool(items, n, fn, url):
    """Runs fn(client, item, index) over items with n worker threads; raises the first error."""
    nxt = [0]
    lock = threading.Lock()
    errors = []

    def worker():
        c = Client(url)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(items) or errors:
                return
            try:
                fn(c, items[i], i)
            except Exception as e:  # noqa: BLE001 — reported after the pool ends
                errors.append(e)
                return

    ts = [threading.Thread(target=worker) for _ in range(min(n, len(items)))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def ttft(c, model, messages):
    t0 = time.perf_counter()
    r = c.post('/v1/chat/completions', {'model': model, 'messages': messages, 'stream': True,
                                         'max_tokens': 8, 'temperature': 0}, stream=True)
    first = None
    for raw in r:
        line = raw.decode().strip()
        if first is not None or not line.startswith('data: {'):
            continue
        d = (json.loads(line[6:]).get('choices') or [{}])[0].get('delta') or {}
        if d.get('content') or d.get('reasoning_content') or d.get('tool_calls'):
            first = (time.perf_counter() - t0) * 1000
    return first


def gen_records(data, n, seed=1234):
    """n deterministic records of 50-300 tokens (benchmarks.md, W6) built from the classify descriptions.

    Sized in characters, ~1.9 a token for these descriptions: with the Qwen3 tokenizer, 500 records measured
    59-276 tokens, mean 154. (Until session 29 they were sized in words at an assumed 1.3 tokens a word; the
    descriptions run ~3.8, so records averaged ~490 tokens and 46 % of them passed 512, where sentence-transformers
    truncates: the two sides did not embed the same text.)"""
    items = [it['description'] for it in data['items']]
    out = []
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0x7fffffff
        budget = 120 + x % 340  # characters
        parts, k, size = [], i, 0
        while size < budget:
            parts.append(items[k % len(items)])
            size += len(parts[-1]) + 1
            k = k * 7 + 3
        text = ' '.join(parts)[:budget].rsplit(' ', 1)[0]
        out.append(f'record {i}: {text}')
    return out


def spread(xs):
    return f'best {min(xs):.3f}, median {statistics.median(xs):.3f}, max {max(xs):.3f} s' if len(xs) > 1 else ''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--url', default='http://127.0.0.1:8080')
    ap.add_argument('--model', required=True)
    ap.add_argument('--embed-model')
    ap.add_argument('--data', default=os.path.join(HERE, '../../shared/data/workloads/classify.json'))
    ap.add_argument('--w', default='w3,w4,w5')
    ap.add_argument('--concurrency', type=int, default=32)
    ap.add_argument('--n', type=int, default=400)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--records')
    ap.add_argument('--n-records', type=int, default=10000)
    ap.add_argument('--embed-batch', type=int, default=2048)
    ap.add_argument('--labels', default='yes,no')
    a = ap.parse_args()
    data = json.load(open(a.data))
    which = a.w.split(',')
    rows = []
    c = Client(a.url)
    if 'w3c' in which:
        q = data['long_questions']
        ms = ttft(c, a.model, [{'role': 'user', 'content': data['long_record'] + q[0]}])
        rows.append(('W3 cold TTFT (first request)', f'{ms:.1f} ms', ''))
    if 'w3' in which:
        q = data['long_questions']
        ttft(c, a.model, [{'role': 'user', 'content': data['long_record'] + q[0]}])
        warm = [ttft(c, a.model, [{'role': 'user', 'content': data['long_record'] + q[1 + i % (len(q) - 1)]}])
                for i in range(a.repeat)]
        rows.append(('W3 warm-prefix TTFT', f'{statistics.median(warm):.1f} ms',
                     f'median of {len(warm)}: ' + ', '.join(f'{x:.1f}' for x in warm)))
    if 'w4' in which:
        chunks = [data['items'][k * 10:k * 10 + 10] for k in range(4)]
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()

            def one(cl, ch, _i):
                lst = '\n'.join(f'{i + 1}. {it["description"]}' for i, it in enumerate(ch))
                cl.post('/v1/chat/completions', {
                    'model': a.model, 'temperature': 0, 'max_tokens': 40, 'ignore_eos': True,
                    'messages': [{'role': 'system', 'content': data['instruction']},
                                 {'role': 'user', 'content': f'For each transaction answer yes or no, one per line.\n{lst}'}]})
            pool(chunks, 4, one, a.url)
            ts.append(time.perf_counter() - t0)
        rows.append(('W4 classify-40x4', f'{min(ts):.3f} s', f'{40 / min(ts):.1f} descriptions/s; {spread(ts)}'))
    items = data['items'][:a.n]
    prompts = [f'{data["instruction"]}\nTransaction: {it["description"]}{data["question"]}' for it in items]
    if 'w5' in which:
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            pool(prompts, a.concurrency, lambda cl, p, _i: cl.post('/v1/completions', {
                'model': a.model, 'max_tokens': 1, 'temperature': 0, 'logprobs': 2, 'prompt': p}), a.url)
            ts.append(time.perf_counter() - t0)
        rows.append((f'W5 classify-{len(prompts)} ({a.concurrency} in flight)', f'{min(ts):.3f} s',
                     f'{len(prompts) / min(ts):.1f} descriptions/s; {spread(ts)}'))
    if 'w5s' in which:
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            out = c.post('/v1/completions', {'model': a.model, 'max_tokens': 1, 'temperature': 0,
                                             'prompt': prompts, 'labels': a.labels.split(',')})
            ts.append(time.perf_counter() - t0)
            if len(out.get('choices', [])) != len(prompts):
                raise RuntimeError(f'W5s: {len(out.get("choices", []))} choices for {len(prompts)} prompts')
        rows.append((f'W5s classify-{len(prompts)}, one label-scoring request', f'{min(ts):.3f} s',
                     f'{len(prompts) / min(ts):.1f} descriptions/s; {spread(ts)}'))
    if 'w6' in which:
        if not a.embed_model:
            sys.exit('--embed-model NAME is required for w6')
        recs = json.load(open(a.records)) if a.records else gen_records(data, a.n_records)
        batches = [recs[i:i + a.embed_batch] for i in range(0, len(recs), a.embed_batch)]
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()

            def emb(cl, b, _i):
                out = cl.post('/v1/embeddings', {'model': a.embed_model, 'input': b, 'encoding_format': 'base64'})
                if len(out['data']) != len(b):
                    raise RuntimeError('W6: wrong number of embeddings')
            pool(batches, 2, emb, a.url)
            ts.append(time.perf_counter() - t0)
        rows.append((f'W6 embed-{len(recs)} ({a.embed_batch} a request)', f'{min(ts):.3f} s',
                     f'{len(recs) / min(ts):.1f} records/s; {spread(ts)}'))
    print('| workload | time | rate |\n| --- | --- | --- |')
    for r in rows:
        print(f'| {" | ".join(r)} |')


if __name__ == '__main__':
    main()
