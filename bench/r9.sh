#!/usr/bin/env bash
# bench/r9.sh — round 9's device call (bench/NOTES.md, "Round 9"): gpu.sh's build, tests and short e2e,
# the kernel and model tests again with the register-ring GEMV (HEARTH_GEMV_LDR=1), then e2e tg128 A/B
# runs of this round's knobs and bench_cuda gemv with both rings. On the GPU machine, in a carried copy:
#   bash bench/r9.sh        (about 5 minutes; logs under $OUT)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
CTEST_FIRST=1 BENCH_PARTS=gemv DEADLINE_S=200 E2E_ARGS="-p 71 -n 128 -r 3 --tg-ctx 71,1570 --batch 8" \
  bash bench/gpu.sh full >"$OUT/full.txt" 2>&1
grep -E "passed|failed|FAIL|Test +#|^\| tg|== |^build" "$OUT/full.txt" | grep -v "^ok"
B=build-gpu/cmake
export LD_LIBRARY_PATH=$ROOT/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
# a build with a 2-step register ring (fewer registers: ~110 instead of ~128), beside the tests
cmake -S . -B build-gpu/ldr2 -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$ROOT/.deps/root/usr" -DCMAKE_CUDA_FLAGS=-DGEMV_LDR=2 >"$OUT/ldr2.log" 2>&1 &&
  (cmake --build build-gpu/ldr2 -j12 --target hearth >>"$OUT/ldr2.log" 2>&1 &)
echo "== register ring: tests"
HEARTH_GEMV_LDR=1 timeout 60 $B/tests/cuda/test_cuda_ops >"$OUT/test_ldr.log" 2>&1; echo "test_cuda_ops LDR rc $?"
grep -E "passed|FAIL" "$OUT/test_ldr.log" | tail -5
(cd $B && HEARTH_GEMV_LDR=1 timeout 120 ctest -L cuda -E test_cuda_ops --output-on-failure) >"$OUT/ctest_ldr.log" 2>&1
grep -E "tests passed|tests failed|Failed|FAIL" "$OUT/ctest_ldr.log" | tail -8
echo "== bench_cuda gemv: smem ring vs register ring"
timeout 30 $B/tests/cuda/bench_cuda gemv >"$OUT/gemv_smem.txt" 2>&1
HEARTH_GEMV_LDR=1 timeout 30 $B/tests/cuda/bench_cuda gemv >"$OUT/gemv_ldr.txt" 2>&1
paste -d'#' "$OUT/gemv_smem.txt" "$OUT/gemv_ldr.txt" | tail -25
tg() { # model, environment...
  local m=$1; shift
  echo "$m $* $(env "$@" timeout 40 $B/hearth bench --model /tmp/hearth-bench-"$m" --backend cuda -p 71 -n 128 -r 3 \
    --tg-ctx 71 2>&1 | grep -E '^\| tg128 ')"
}
for i in $(seq 90); do [ -x build-gpu/ldr2/hearth ] && break; sleep 1; done
for m in 0.5b 3b; do
  tg $m X=1
  tg $m HEARTH_GEMV_XPRED=0
  tg $m HEARTH_GEMV_LDR=1
  tg $m HEARTH_GEMV_LDR=1 HEARTH_GEMV_XPRED=0
  tg $m HEARTH_GEMV_WE_MIN=5
  tg $m HEARTH_GEMV_LDR=1 HEARTH_GEMV_WE_MIN=5
  [ -x build-gpu/ldr2/hearth ] && B=build-gpu/ldr2 tg $m HEARTH_GEMV_LDR=1
  tg $m X=1
done 2>&1 | tee "$OUT/ab.txt"
