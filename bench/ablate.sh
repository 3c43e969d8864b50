#!/usr/bin/env bash
# bench/ablate.sh — where a decode GEMV's time goes. Builds the standalone CUDA test/bench binaries four
# times (GEMV_ABLATE 0..3 in src/backend/cuda/gemv_q4.cu: full; no weight bytes from memory; no x
# prologue; no epilogue; ABLATE_VARIANTS picks others, e.g. "0 1 4 5 6": no conversion, no x reads in the loop) and prints, per variant, `bench_cuda gemv` and the decode-step breakdowns of
# both models. The differences to the full kernel are what each stage costs. On the GPU machine:
#   bash bench/ablate.sh            (about 2 minutes; build logs under $OUT/ablate)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT/ablate"
vs=${ABLATE_VARIANTS:-0 1 2 3} # GEMV_ABLATE values to build (gemv_q4.cu lists them)
for v in $vs; do
  (OUT=$OUT/ablate/b$v BDIR=build-ab$v NVXTRA=-DGEMV_ABLATE=$v bash bench/gpu.sh bench none >/dev/null 2>&1) &
done
wait
names=("full kernel" "no weight bytes (zero-filled ring)" "no x prologue" "no epilogue" "no int4 conversion"
  "no x reads in the step loop" "no conversion, no x reads" "no mma" "the loop's skeleton (1, 4, 5, 7)"
  "no weight bytes, no mma (1, 7)")
for v in $vs; do
  echo "== GEMV_ABLATE=$v: ${names[$v]}"
  if [ ! -x "build-ab$v/bench_cuda" ]; then echo "build failed (see $OUT/ablate/b$v/build.log)"; continue; fi
  timeout 60 "build-ab$v/bench_cuda" gemv | grep '^| [0-9]'
  for b in breakdown breakdown0.5b; do
    timeout 60 "build-ab$v/bench_cuda" "$b" | sed -n '/@71, fused/,/argmax/p' | grep -E 'median|gemv'
  done
done
