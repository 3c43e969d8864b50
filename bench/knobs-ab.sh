#!/usr/bin/env bash
# bench/knobs-ab.sh — one device call (session 34): one build of this tree, then the bench-only knobs HEARTH_PDL_PLAIN=1
# (the plain path launched with PDL) and HEARTH_GEMV_RING4=1 (a 4-step ring for whole-tile GEMV shapes) A/B by
# environment: test_cuda_ops and ctest -L cuda with them on, 3B pp1570 / tg / x8 / x32, 12B and E4B tg128, then ncu
# of a 3B x32 step. Run on the GPU machine from the repository root, .deps carried (bench/deps.sh):
#   timeout 480 bash bench/knobs-ab.sh   (logs in $OUT)
set -uo pipefail
O=${OUT:-/tmp/o}; mkdir -p "$O"
. bench/deps.sh
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/progress.txt"; }
B=/tmp/b; H=$B/hearth
( cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" && cmake --build $B -j"$(nproc)" ) >"$O/build.log" 2>&1 || { el "build failed"; grep -B2 -A8 " error" "$O/build.log" | head -40; exit 1; }
el built
( for m in qwen2.5-3b-instruct:3b gemma-4-e4b-it:e4b gemma-4-12b-it:12b; do
    [ -f /tmp/m-${m##*:}/model.safetensors ] || $H mkmodel --config configs/${m%%:*}.json --out /tmp/m-${m##*:} >/dev/null 2>&1
    echo "mk ${m##*:}" >>"$O/progress.txt"; done ) &
mk=$!
export HEARTH_PDL_PLAIN=1
timeout 60 $B/tests/cuda/test_cuda_ops >"$O/tops.log" 2>&1; el "test_cuda_ops (pdl) rc $? $(grep -E 'passed|failed' "$O/tops.log" | tail -1)"
HEARTH_GEMV_RING4=1 HEARTH_TEST_GEMV=whole timeout 40 $B/tests/cuda/test_cuda_ops fast >"$O/tops4.log" 2>&1; el "fast ring4 whole rc $? $(tail -1 "$O/tops4.log")"
(cd $B && timeout 100 ctest -L cuda -j3 -E test_cuda_ops --output-on-failure) >"$O/ctest.log" 2>&1
el "ctest (pdl) rc $?: $(grep -E 'tests passed|tests failed' "$O/ctest.log")"; grep -E "\(Failed|SEGFAULT|Timeout" "$O/ctest.log" | head | tee -a "$O/progress.txt"
unset HEARTH_PDL_PLAIN
wait $mk; el mkmodel
b() { local tag=$1; shift; timeout 90 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
for r in 1 2; do
  b "3b off r$r" $H bench --model /tmp/m-3b --backend cuda -p 1570 -n 64 -r 2 --batch 8,32
  b "3b pdl r$r" HEARTH_PDL_PLAIN=1 $H bench --model /tmp/m-3b --backend cuda -p 1570 -n 64 -r 2 --batch 8,32
done
b "3b ring4" HEARTH_GEMV_RING4=1 $H bench --model /tmp/m-3b --backend cuda -p 1570 -n 64 -r 2 --batch 8,32
el 3b
b "12b off" $H bench --model /tmp/m-12b --backend cuda -p 16 -n 128 -r 2
b "12b ring4" HEARTH_GEMV_RING4=1 $H bench --model /tmp/m-12b --backend cuda -p 16 -n 128 -r 2
b "12b pdl+ring4" HEARTH_PDL_PLAIN=1 HEARTH_GEMV_RING4=1 $H bench --model /tmp/m-12b --backend cuda -p 16 -n 128 -r 2
el 12b
b "e4b off" $H bench --model /tmp/m-e4b --backend cuda -p 16 -n 128 -r 3
b "e4b ring4" HEARTH_GEMV_RING4=1 $H bench --model /tmp/m-e4b --backend cuda -p 16 -n 128 -r 3
b "12b ring4 b" HEARTH_GEMV_RING4=1 $H bench --model /tmp/m-12b --backend cuda -p 16 -n 128 -r 2
b "12b off b" $H bench --model /tmp/m-12b --backend cuda -p 16 -n 128 -r 2
el "ab done"
left=$(( 430 - ($(date +%s) - t0) ))
if command -v ncu >/dev/null && [ $left -gt 40 ]; then
  HEARTH_PDL_PLAIN=1 timeout $left ncu --csv --metrics gpu__time_duration.sum $H bench --model /tmp/m-3b --backend cuda -p 16 -n 2 -r 1 --batch 32 >"$O/ncu_3b32.csv" 2>"$O/ncu.err"
  el "ncu $?"; gzip -f "$O/ncu_3b32.csv"
fi
el done
