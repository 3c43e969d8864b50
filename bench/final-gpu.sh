#!/usr/bin/env bash
# bench/final-gpu.sh — one device call (session 36): the final tree's CUDA tests and its decode table. Builds this
# tree, makes the 3B and 0.5B checkpoints, runs test_cuda_ops (all groups) and ctest -L cuda (bar test_cuda_ops), then
# `hearth bench -p 128 -n 128 -r 3 --batch 8,16,32` on both models, twice. Run on the GPU machine from the repository
# root with .deps carried:   timeout 570 bash bench/final-gpu.sh   (logs in $OUT)
set -uo pipefail
O=${OUT:-/tmp/o}; mkdir -p "$O"
. bench/deps.sh
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/progress.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$O/progress.txt"
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
(cd $B && timeout 150 ctest -L cuda -j4 -E test_cuda_ops --output-on-failure) >"$O/ctest.log" 2>&1
el "ctest -L cuda (bar test_cuda_ops) rc $?: $(grep -E 'tests passed|tests failed' "$O/ctest.log")"; grep -E "\(Failed|SEGFAULT|Timeout" "$O/ctest.log" | head | tee -a "$O/progress.txt"
b() { local tag=$1; shift; timeout 100 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/table.txt"; }
for r in 1 2; do
  for m in 3b 05; do
    [ $(( $(date +%s) - t0 )) -lt 480 ] || break 2
    b "$m r$r" HEARTH_NONE=1 $H bench --model /tmp/m-$m --backend cuda -p 128 -n 128 -r 3 --batch 8,16,32
  done
done
el done
