#!/usr/bin/env bash
# bench/x32-ab2.sh — one device call (session 36, issue 36): rope and the cache write in the QKV GEMM's split-K
# finish, A/B by its bench-only switch (HEARTH_QKV_SPLIT=1: norm_matmul + rope_kv_write), on the 3B and the 0.5B,
# and the whole table (x1..x32, pp128, pp1570) of the tree for bench/RESULTS.md. AB_OFF names another switch (call
# 5: AB_OFF=HEARTH_FINISH1=1, the scalar split-K finishes).
# Builds this tree, makes the 3B and 0.5B checkpoints, runs test_cuda_ops (all groups), then `hearth bench -p 128
# -n 64 -r 2 --batch 16,32` per configuration and model in interleaved rounds, the table, then ctest -L cuda (bar
# test_cuda_ops) in the time left. Run on the GPU machine from the repository root with .deps carried:
#   timeout 570 bash bench/x32-ab2.sh   (logs in $OUT)
set -uo pipefail
O=${OUT:-/tmp/o}; mkdir -p "$O"
. bench/deps.sh
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/progress.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$O/progress.txt"
git log --oneline -1 | tee -a "$O/progress.txt"
B=/tmp/b; H=$B/hearth
( cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" && cmake --build $B -j"$(nproc)" ) >"$O/build.log" 2>&1 || { el "build failed"; grep -B2 -A8 " error" "$O/build.log" | head -40; exit 1; }
el built
( [ -f /tmp/m-3b/model.safetensors ] || $H mkmodel --config configs/qwen2.5-3b-instruct.json --out /tmp/m-3b >/dev/null 2>&1
  [ -f /tmp/m-05/model.safetensors ] || $H mkmodel --config configs/qwen2.5-0.5b-instruct.json --out /tmp/m-05 >/dev/null 2>&1; echo mk >>"$O/progress.txt" ) &
mk=$!
timeout 90 $B/tests/cuda/test_cuda_ops >"$O/test_ops.log" 2>&1; el "test_cuda_ops (all groups) rc $? $(tail -1 "$O/test_ops.log")"
grep -iE "fail|mismatch" "$O/test_ops.log" | head -8 | tee -a "$O/progress.txt"
wait $mk
b() { local tag=$1; shift; timeout 90 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
for r in 1 2; do
  for m in 3b 05; do
    b "$m new r$r" HEARTH_NONE=1 $H bench --model /tmp/m-$m --backend cuda -p 128 -n 64 -r 2 --batch 16,32
    b "$m old r$r" ${AB_OFF:-HEARTH_QKV_SPLIT=1} $H bench --model /tmp/m-$m --backend cuda -p 128 -n 64 -r 2 --batch 16,32
  done
done
el ab
b "3b table" HEARTH_NONE=1 $H bench --model /tmp/m-3b --backend cuda -p 128,1570 -n 128 -r 3 --batch 8,12,24
el table
left=$(( 560 - ($(date +%s) - t0) ))
if [ $left -gt 30 ]; then
  (cd $B && timeout $left ctest -L cuda -j4 -E test_cuda_ops --output-on-failure) >"$O/ctest.log" 2>&1
  el "ctest -L cuda (bar test_cuda_ops) rc $?: $(grep -E 'tests passed|tests failed' "$O/ctest.log")"; grep -E "\(Failed|SEGFAULT|Timeout" "$O/ctest.log" | head | tee -a "$O/progress.txt"
fi
el done
