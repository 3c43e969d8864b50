#!/usr/bin/env bash
# bench/w5-cpu.sh — W5 (classify-400: one /v1/completions per record, 1 token with logprobs, 32 in flight) and
# W5s on the CPU, hearth serve and llama-server side by side on this machine (issue 35's W5 bar: hearth >= 6x
# llama-server's records/s). Rounds alternate the engines; each round starts each server fresh (cold prefix cache).
#
#   bench/w5-cpu.sh HEARTH_BIN LLAMA_BIN_DIR [ROUNDS]
#
# Models: a `hearth mkmodel` of configs/qwen2.5-0.5b-instruct.json (made under $W when absent, with the Qwen
# tokenizer from scripts/fetch-tokenizers.sh and the chat template from ../shared) and the Q4_0 GGUF of the same
# shapes from ../shared/peers/llama.cpp/make-gguf.sh through bench/peer-gguf.sh ($GGUF, default
# $W/qwen2.5-0.5b-q4_0.gguf). LLAMA_BIN_DIR: the peer's bin/ as bench/peer-bin.sh copies it (its symlinks restored; a
# second argument keeps one CPU variant, e.g. haswell beside HEARTH_CPU=avx2).
# Environment: W (/tmp/w5cpu), THREADS (2), PARALLEL (32: hearth's --parallel), LLAMA_NP ("1 4 32": llama-server's
# -np, each run in every round; issue 31 quotes -np 4, and on 2 cores llama-server is fastest with few slots, so the
# ratio is taken against its best run of the round), GGUF.
set -euo pipefail
H=${1:?hearth binary}; LB=${2:?llama.cpp bin folder}; ROUNDS=${3:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${W:-/tmp/w5cpu}; T=${THREADS:-2}; P=${PARALLEL:-32}; LNP=${LLAMA_NP:-1 4 32}
GGUF=${GGUF:-$W/qwen2.5-0.5b-q4_0.gguf}
TOK=${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers/qwen3
DATA=$ROOT/../shared/data/workloads/classify.json
mkdir -p "$W"
M=$W/q05
if [ ! -f "$M/model.safetensors" ]; then
  "$H" mkmodel --config "$ROOT/configs/qwen2.5-0.5b-instruct.json" --out "$M" >/dev/null
  cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$M/"
  cp "$ROOT/../shared/data/chat-templates/qwen2.5-instruct.jinja" "$M/chat_template.jinja"
fi
[ -f "$GGUF" ] || bash "$ROOT/bench/peer-gguf.sh" qwen2.5-0.5b "$W" >/dev/null
up() { for _ in $(seq 1 600); do curl -sf "localhost:$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
echo "# $(date -u +%FT%TZ) $(git -C "$ROOT" rev-parse --short HEAD) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "$(nproc) cpus, threads $T, parallel $P; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | engine | W5 s | W5 records/s | W5s s |"
echo "|---|---|---:|---:|---:|"
for r in $(seq 1 "$ROUNDS"); do
  "$H" serve --model q05="$M" --threads "$T" --parallel "$P" --ctx 2048 --port 8397 >"$W/hearth.log" 2>&1 &
  pid=$!; up 8397 || { tail "$W/hearth.log"; exit 1; }
  out=$(node "$ROOT/bench/workloads.mjs" --url http://127.0.0.1:8397 --model q05 --data "$DATA" --w w5,w5s --concurrency 32)
  kill $pid; wait $pid 2>/dev/null || true
  w5=$(echo "$out" | grep '^| W5 ' | awk -F'|' '{print $3}' | tr -d ' s'); w5s=$(echo "$out" | grep '^| W5s' | awk -F'|' '{print $3}' | tr -d ' s')
  echo "| $r | hearth | $w5 | $(awk -v t="$w5" 'BEGIN{printf "%.1f", 400/t}') | $w5s |"
  best=
  for np in $LNP; do
    LD_LIBRARY_PATH=$LB "$LB/llama-server" -m "$GGUF" -t "$T" -np "$np" -c $((np * 2048)) --port 8398 >"$W/llama.log" 2>&1 &
    pid=$!; up 8398 || { tail "$W/llama.log"; exit 1; }
    out=$(node "$ROOT/bench/workloads.mjs" --url http://127.0.0.1:8398 --model q05 --data "$DATA" --w w5 --concurrency 32)
    kill $pid; wait $pid 2>/dev/null || true
    lw5=$(echo "$out" | grep '^| W5 ' | awk -F'|' '{print $3}' | tr -d ' s')
    echo "| $r | llama-server Q4_0 -np $np | $lw5 | $(awk -v t="$lw5" 'BEGIN{printf "%.1f", 400/t}') | - |"
    best=$(awk -v a="${best:-1e9}" -v b="$lw5" 'BEGIN{print (b < a ? b : a)}')
  done
  echo "| $r | ratio: llama-server's best / hearth W5 | $(awk -v l="$best" -v h="$w5" 'BEGIN{printf "%.2fx", l/h}') | | |"
done
