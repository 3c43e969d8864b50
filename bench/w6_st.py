#!/usr/bin/env python3
"""bench/w6_st.py — W6's peer: sentence-transformers (bf16, on the GPU) embedding the same records that
bench/workloads.py sends to hearth, at a few batch sizes, best one reported (../shared/docs/benchmarks.md).

  python3 bench/w6_st.py --model DIR --data classify.json [--n-records 10000] [--batch-sizes 64,128,256,512]
      [--hearth-table FILE] [--url URL --embed-model NAME]

DIR is the checkpoint hearth serves: `hearth mkmodel --config configs/qwen3-embedding-0.6b.json --embedding`
plus the Qwen3-Embedding tokenizer files (bench/http-gpu.sh makes it). It holds no sentence-transformers
files, and the GPU machine cannot fetch any, so this script lays them out beside links to the checkpoint in
a temporary directory, as Qwen3-Embedding-0.6B ships them: Transformer -> Pooling (last token) ->
Normalize, max_seq_length 512. The checkpoint directory itself is left unchanged (hearth serves it with
its default pooling, the last token: the same model on both sides).

--hearth-table (default $OUT/workloads.txt when it exists): workloads.py's table, whose W6 row gives
hearth's time; the ratio is printed under the sentence-transformers rows. --url/--embed-model: a live
hearth server to compare vectors with (cosine per record over the first 64 records; int4 against bf16,
so close to 1, not equal). Records: workloads.gen_records, the function hearth's side uses.
"""
import argparse
import base64
import json
import os
import re
import struct
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault('HF_HUB_OFFLINE', '1')  # nothing can be fetched on the GPU machine
os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')

MAX_LEN = 512


def st_dir(model_dir):
    """A directory that sentence-transformers loads as Qwen3-Embedding: links to DIR's files + module configs."""
    d = tempfile.mkdtemp(prefix='hearth-w6-st-')
    for f in os.listdir(model_dir):
        if f.endswith(('.json', '.safetensors', '.jinja', '.txt', '.model')):
            os.symlink(os.path.abspath(os.path.join(model_dir, f)), os.path.join(d, f))
    cfg = json.load(open(os.path.join(model_dir, 'config.json')))
    os.makedirs(os.path.join(d, '1_Pooling'))
    os.makedirs(os.path.join(d, '2_Normalize'))
    with open(os.path.join(d, 'modules.json'), 'w') as f:
        json.dump([{'idx': 0, 'name': '0', 'path': '', 'type': 'sentence_transformers.models.Transformer'},
                   {'idx': 1, 'name': '1', 'path': '1_Pooling', 'type': 'sentence_transformers.models.Pooling'},
                   {'idx': 2, 'name': '2', 'path': '2_Normalize', 'type': 'sentence_transformers.models.Normalize'}], f)
    with open(os.path.join(d, '1_Pooling', 'config.json'), 'w') as f:
        json.dump({'word_embedding_dimension': cfg['hidden_size'], 'pooling_mode_cls_token': False,
                   'pooling_mode_mean_tokens': False, 'pooling_mode_max_tokens': False,
                   'pooling_mode_mean_sqrt_len_tokens': False, 'pooling_mode_weightedmean_tokens': False,
                   'pooling_mode_lasttoken': True, 'include_prompt': True}, f)
    with open(os.path.join(d, 'sentence_bert_config.json'), 'w') as f:
        json.dump({'max_seq_length': MAX_LEN, 'do_lower_case': False}, f)
    return d


def hearth_vectors(url, model, recs):
    body = json.dumps({'model': model, 'input': recs, 'encoding_format': 'base64'}).encode()
    req = urllib.request.Request(url + '/v1/embeddings', body, {'Content-Type': 'application/json'})
    out = json.loads(urllib.request.urlopen(req, timeout=600).read())
    vs = []
    for d in out['data']:
        b = base64.b64decode(d['embedding'])
        vs.append(struct.unpack(f'<{len(b) // 4}f', b))
    return vs


def hearth_seconds(path):
    """hearth's W6 time from workloads.py's markdown table, or None."""
    if not path or not os.path.exists(path):
        return None, None
    for line in open(path):
        m = re.match(r'\|\s*(W6 embed-\d+[^|]*)\|\s*([0-9.]+) s', line)
        if m:
            return float(m.group(2)), m.group(1).strip()
    return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', required=True)
    ap.add_argument('--data', default=os.path.join(HERE, '../../shared/data/workloads/classify.json'))
    ap.add_argument('--n-records', type=int, default=10000)
    ap.add_argument('--records')
    ap.add_argument('--batch-sizes', default='64,128,256,512')
    ap.add_argument('--hearth-table', default=os.path.join(os.environ.get('OUT', '/nonexistent'), 'workloads.txt'))
    ap.add_argument('--url')
    ap.add_argument('--embed-model')
    a = ap.parse_args()
    try:
        from workloads import gen_records  # the records hearth's side embeds
    except ImportError:
        sys.exit('w6_st.py needs bench/workloads.py beside it (gen_records)')
    import torch
    from sentence_transformers import SentenceTransformer

    recs = json.load(open(a.records)) if a.records else gen_records(json.load(open(a.data)), a.n_records)
    d = st_dir(a.model)
    st = SentenceTransformer(d, device='cuda')
    st = st.to(torch.bfloat16)  # bf16 weights and activations (loaded as stored, then cast: any version's API)
    st.max_seq_length = MAX_LEN
    tok = st.tokenizer
    n_tok = sum(len(ids) for ids in tok(recs, truncation=True, max_length=MAX_LEN)['input_ids'])
    try:
        attn = st[0].auto_model.config._attn_implementation
    except Exception:  # noqa: BLE001 — only reported
        attn = '?'
    print(f'sentence-transformers on {torch.cuda.get_device_name(0)}: {len(recs)} records, {n_tok} tokens '
          f'({n_tok / len(recs):.0f} a record), bf16, attention {attn}', file=sys.stderr)
    rows, best = [], None
    for bs in [int(x) for x in a.batch_sizes.split(',')]:
        st.encode(recs[:2 * bs], batch_size=bs, convert_to_numpy=True)  # warm-up: kernels, allocator
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        emb = st.encode(recs, batch_size=bs, convert_to_numpy=True)  # sorted by length inside: its best setting
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
        assert emb.shape[0] == len(recs)
        rows.append((f'W6 sentence-transformers bf16, batch {bs}', f'{t:.3f} s',
                     f'{len(recs) / t:.1f} records/s, {n_tok / t:.0f} tokens/s'))
        if best is None or t < best[1]:
            best = (bs, t, emb)
    print('| workload | time | rate |\n| --- | --- | --- |')
    for r in rows:
        print(f'| {" | ".join(r)} |')
    hs, hname = hearth_seconds(a.hearth_table)
    if hs:
        print(f'| {hname} (hearth, {a.hearth_table}) | {hs:.3f} s | {len(recs) / hs:.1f} records/s, {n_tok / hs:.0f} tokens/s; '
              f'{best[1] / hs:.2f}x sentence-transformers at its best batch ({best[0]}) |')
    if a.url and a.embed_model:
        k = min(64, len(recs))
        hv = hearth_vectors(a.url, a.embed_model, recs[:k])
        cos = [float(sum(x * y for x, y in zip(hv[i], best[2][i]))) for i in range(k)]
        print(f'hearth vs sentence-transformers, first {k} records: cosine min {min(cos):.4f}, mean {sum(cos) / k:.4f}')


if __name__ == '__main__':
    main()
