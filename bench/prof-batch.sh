#!/usr/bin/env bash
# bench/prof-batch.sh — one device call (session 35): where a batched 3B decode step goes. Builds this tree, makes
# the 3B checkpoint, runs `hearth bench` at x1/x8/x32, then ncu (gpu__time_duration, dram bytes, grid sizes) over a
# short x8 and x32 run; the CSVs come back gzipped for bench/kernel_times.py. Run on the GPU machine from the
# repository root with .deps carried (bench/deps.sh):   timeout 560 bash bench/prof-batch.sh   (logs in $OUT)
set -uo pipefail
O=${OUT:-/tmp/o}; mkdir -p "$O"
. bench/deps.sh
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/progress.txt"; }
B=/tmp/b; H=$B/hearth
( cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" && cmake --build $B -j"$(nproc)" --target hearth_cli ) >"$O/build.log" 2>&1 || { el "build failed"; grep -B2 -A8 " error" "$O/build.log" | head -40; exit 1; }
el built
[ -f /tmp/m-3b/model.safetensors ] || $H mkmodel --config configs/qwen2.5-3b-instruct.json --out /tmp/m-3b >/dev/null 2>&1
el mkmodel
timeout 120 $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --batch 1,8,16,32 2>&1 | tee "$O/bench.txt" | grep -E "^\|" >>"$O/progress.txt"
el bench
M=gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
for bs in 32 8; do
  left=$(( 540 - ($(date +%s) - t0) )); [ $left -gt 30 ] || break
  timeout $left ncu --csv --metrics $M $H bench --model /tmp/m-3b --backend cuda -p 128 -n 3 -r 1 --batch $bs >"$O/ncu_3b$bs.csv" 2>"$O/ncu$bs.err"
  el "ncu x$bs rc $?"; gzip -f "$O/ncu_3b$bs.csv"
done
el done
