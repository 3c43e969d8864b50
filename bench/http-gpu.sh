#!/usr/bin/env bash
# bench/http-gpu.sh — the product workloads W3–W6 through HTTP on the GPU machine (one device call):
# builds hearth with the server and the CUDA backend, makes the Qwen2.5-3B and Qwen3-Embedding-0.6B
# shaped checkpoints with the real tokenizers, serves them, runs bench/workloads.py (the machine has
# python3, no node), restarts the server to time W3 from the disk prefix cache, and, when
# bench/w6_st.py exists, runs sentence-transformers on the same records in the same call.
#
# Carry: .deps (jansson, pcre2, utf8proc, libmicrohttpd and its gnutls chain as .debs; see
# bench/deps.sh; the server's share, fetched in session 38 with `cd .deps && apt-get download libmicrohttpd12
# libmicrohttpd-dev libgnutls30 libnettle8 libhogweed6 libtasn1-6 libidn2-0 libunistring2 libp11-kit0 libffi8
# libgmp10`) and .gpu/wl (prepared here by `bench/http-gpu.sh prepare`: the Qwen tokenizer
# files, the Qwen2.5 chat template and classify.json, which the device cannot fetch).
#   bench/http-gpu.sh prepare            # on this machine, before the device call
#   bash bench/http-gpu.sh [W]           # on the device; W defaults to w3c,w3,w4,w5,w5s,w6
# Environment: B (build dir, /tmp/hearth-http), PARALLEL (32), PREFILL_CHUNK (unset: the default),
#   N_RECORDS (10000), SERVE_ARGS (extra `hearth serve` arguments), HEARTH_PROFILE=1 (each server prints
#   where its time went into $OUT/serve.log at shutdown: base/prof.h), NO_ST=1 (skip sentence-transformers).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if [ "${1:-}" = prepare ]; then
  tok=${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers
  mkdir -p .gpu/wl
  cp "$tok/qwen3/tokenizer.json" "$tok/qwen3/tokenizer_config.json" .gpu/wl/
  mkdir -p .gpu/wl/embed && cp "$tok/qwen3-embed/tokenizer.json" "$tok/qwen3-embed/tokenizer_config.json" .gpu/wl/embed/
  cp ../shared/data/chat-templates/qwen2.5-instruct.jinja .gpu/wl/chat_template.jinja
  cp ../shared/data/workloads/classify.json .gpu/wl/
  du -sh .gpu/wl
  exit 0
fi
W=${1:-w3c,w3,w4,w5,w5s,w6}
OUT=${OUT:-/tmp/hearth-http-out}
mkdir -p "$OUT"
. bench/deps.sh
B=${B:-/tmp/hearth-http}
t0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; git log --oneline -1; } | tee "$OUT/machine.txt"
if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_WERROR=OFF -DHEARTH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT/cmake.log" 2>&1 && cmake --build $B -j"$(nproc)" --target hearth_cli >>"$OUT/cmake.log" 2>&1; }; then
  echo "build failed"; grep -E "error|Error|Could not" "$OUT/cmake.log" | head -20; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
H=$B/hearth
M3=/tmp/hearth-wl-3b E6=/tmp/hearth-wl-emb
if [ ! -f $M3/model.safetensors ]; then
  $H mkmodel --config configs/qwen2.5-3b-instruct.json --out $M3 >/dev/null && cp .gpu/wl/tokenizer.json .gpu/wl/tokenizer_config.json .gpu/wl/chat_template.jinja $M3/
fi
if [ ! -f $E6/model.safetensors ]; then
  $H mkmodel --config configs/qwen3-embedding-0.6b.json --out $E6 --embedding >/dev/null && cp .gpu/wl/embed/* $E6/
fi
KVD=/tmp/hearth-wl-kv
rm -rf $KVD; mkdir -p $KVD
serve() {
  # shellcheck disable=SC2086
  $H serve --backend cuda --model q3b=$M3 --embedding-model emb=$E6 --port 8391 --parallel "${PARALLEL:-32}" \
    --kv-cache-dir $KVD ${PREFILL_CHUNK:+--prefill-chunk $PREFILL_CHUNK} ${SERVE_ARGS:-} >>"$OUT/serve.log" 2>&1 &
  SPID=$!
  for _ in $(seq 1 600); do curl -sf localhost:8391/health >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not come up"; tail -20 "$OUT/serve.log"; return 1
}
stop() { kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; }
ts=$(date +%s%N); serve || exit 1
echo "start to /health: $(( ($(date +%s%N) - ts) / 1000000 )) ms"
python3 bench/workloads.py --url http://127.0.0.1:8391 --model q3b --embed-model emb --data .gpu/wl/classify.json \
  --w "$W" --n-records "${N_RECORDS:-10000}" --embed-batch "${EMBED_BATCH:-2048}" 2>&1 | tee "$OUT/workloads.txt"
stop
if [[ $W == *w3* ]]; then # restart: the record's KV comes back from the disk cache
  serve || exit 1
  echo "after a restart with --kv-cache-dir:"
  python3 bench/workloads.py --url http://127.0.0.1:8391 --model q3b --data .gpu/wl/classify.json --w w3c 2>&1 | tee -a "$OUT/workloads.txt"
  stop
fi
if [[ $W == *w6* ]] && [ -f bench/w6_st.py ] && [ -z "${NO_ST:-}" ]; then
  python3 bench/w6_st.py --model $E6 --data .gpu/wl/classify.json --n-records "${N_RECORDS:-10000}" 2>&1 | tee "$OUT/w6_st.txt"
fi
echo "total: $(( $(date +%s) - t0 )) s"
