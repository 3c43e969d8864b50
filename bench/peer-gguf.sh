#!/usr/bin/env bash
# bench/peer-gguf.sh MODEL OUT_DIR — the peer's Q4_0 GGUF of MODEL (qwen2.5-0.5b | qwen2.5-3b) in OUT_DIR, through
# ../shared/peers/llama.cpp/make-gguf.sh; when that script's own llama-quantize cannot load (the shared bin/ with its
# symlinks flattened, see bench/peer-bin.sh), the f16 GGUF it left is quantized with a restored copy instead.
set -euo pipefail
MODEL=${1:?qwen2.5-0.5b or qwen2.5-3b}; OUT=${2:?OUT_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER=$ROOT/../shared/peers/llama.cpp
mkdir -p "$OUT"
[ -f "$OUT/$MODEL-q4_0.gguf" ] && { echo "$OUT/$MODEL-q4_0.gguf"; exit 0; }
if ! bash "$PEER/make-gguf.sh" "$MODEL" "$OUT" >/dev/null 2>"$OUT/$MODEL-make-gguf.err"; then
  [ -f "$OUT/$MODEL-f16.gguf" ] || { cat "$OUT/$MODEL-make-gguf.err" >&2; exit 1; }
  bin=$(bash "$ROOT/bench/peer-bin.sh" "$OUT/peer")
  LD_LIBRARY_PATH="$bin" "$bin/llama-quantize" "$OUT/$MODEL-f16.gguf" "$OUT/$MODEL-q4_0.gguf" Q4_0 >/dev/null 2>&1
  rm -f "$OUT/$MODEL-f16.gguf"
fi
rm -f "$OUT/$MODEL-make-gguf.err"
echo "$OUT/$MODEL-q4_0.gguf"
