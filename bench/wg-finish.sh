#!/usr/bin/env bash
# bench/wg-finish.sh — one device call (session 35): the wgmma GEMM's split-K summed by each tile's last split (no
# gemm_finish launch), tested, then A/B'd by environment against
# HEARTH_GEMM_FINISH=1 (the finish launch), interleaved, on the 3B's decode batches and prefill.
# Run on the GPU machine from the repository root with .deps carried:   timeout 400 bash bench/wg-finish.sh
set -uo pipefail
O=${OUT:-/tmp/o}; mkdir -p "$O"
. bench/deps.sh
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/progress.txt"; }
B=/tmp/b; H=$B/hearth
( cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" && cmake --build $B -j"$(nproc)" ) >"$O/build.log" 2>&1 || { el "build failed"; grep -B2 -A8 " error" "$O/build.log" | head -40; exit 1; }
el built
( [ -f /tmp/m-3b/model.safetensors ] || $H mkmodel --config configs/qwen2.5-3b-instruct.json --out /tmp/m-3b >/dev/null 2>&1; echo mk3b >>"$O/progress.txt" ) &
mk=$!
timeout 60 $B/tests/cuda/test_cuda_ops wgmma fast fused >"$O/tops.log" 2>&1; el "test_cuda_ops wgmma fast fused rc $? $(tail -1 "$O/tops.log")"
grep -iE "FAIL|mismatch" "$O/tops.log" | head -5 | tee -a "$O/progress.txt"
wait $mk
(cd $B && timeout 90 ctest -L cuda -j4 -E test_cuda_ops --output-on-failure) >"$O/ctest.log" 2>&1
el "ctest -L cuda rc $?: $(grep -E 'tests passed|tests failed' "$O/ctest.log")"; grep -E "\(Failed|SEGFAULT|Timeout" "$O/ctest.log" | head | tee -a "$O/progress.txt"
b() { local tag=$1; shift; timeout 60 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
for r in 1 2; do
  b "new r$r" $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --batch 8,16,32
  b "finish r$r" HEARTH_GEMM_FINISH=1 $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --batch 8,16,32
done
el ab
b "new pp" $H bench --model /tmp/m-3b --backend cuda -p 1570,40 -n 0 -r 3
b "finish pp" HEARTH_GEMM_FINISH=1 $H bench --model /tmp/m-3b --backend cuda -p 1570,40 -n 0 -r 3
el done
