#!/usr/bin/env bash
# bench/r9_final.sh — round 9's closing call: gpu.sh full (build, kernel and model tests, the whole e2e table
# of both models), then tg128 A/B of the ring-depth choice (the shape rule against 2 and 4 everywhere).
#   bash bench/r9_final.sh      (about 4 minutes on the GPU machine; logs under $OUT)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
CTEST_FIRST=1 BENCH_PARTS=gemv DEADLINE_S=300 bash bench/gpu.sh full >"$OUT/full.txt" 2>&1
grep -E "passed|failed|FAIL|Test +#|^\| |== |^build" "$OUT/full.txt" | grep -vE "^ok|^\|--"
export LD_LIBRARY_PATH=$ROOT/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
tg() { # model, environment...
  local m=$1; shift
  echo "$m $* $(env "$@" timeout 40 build-gpu/cmake/hearth bench --model /tmp/hearth-bench-"$m" --backend cuda -p 71 \
    -n 128 -r 3 --tg-ctx 71 2>&1 | grep -E '^\| tg128 ')"
}
for m in 0.5b 3b; do
  tg $m X=1
  tg $m HEARTH_GEMV_RING_FIT=0
  tg $m HEARTH_GEMV_RING=2
  tg $m X=1
done 2>&1 | tee "$OUT/ab.txt"
