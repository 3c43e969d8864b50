#!/usr/bin/env bash
# bench/wg-small.sh — one device call (session 35): the wgmma GEMM from 9 rows with a 32-token tile (decode batches
# of 9..32 sequences), tested and A/B'd by environment against the old dispatch (HEARTH_GEMM_WG_MIN=64: the mma.sync
# kernel below 64 rows) and the 64-token tile (HEARTH_GEMM_NT32=0), interleaved, then ncu of the x32 step's kernels.
# Run on the GPU machine from the repository root with .deps carried:   timeout 560 bash bench/wg-small.sh
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
timeout 100 $B/tests/cuda/test_cuda_ops wgmma fast fused >"$O/tops.log" 2>&1; el "test_cuda_ops wgmma fast fused rc $? $(tail -1 "$O/tops.log")"
grep -iE "fail|mismatch" "$O/tops.log" | head -5 | tee -a "$O/progress.txt"
wait $mk
(cd $B && timeout 150 ctest -L cuda -j4 -E test_cuda_ops --output-on-failure) >"$O/ctest.log" 2>&1
el "ctest -L cuda (bar test_cuda_ops) rc $?: $(grep -E 'tests passed|tests failed' "$O/ctest.log")"; grep -E "\(Failed|SEGFAULT|Timeout" "$O/ctest.log" | head | tee -a "$O/progress.txt"
b() { local tag=$1; shift; timeout 90 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
for r in 1 2; do
  b "new r$r" $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --batch 8,12,16,24,32
  b "old r$r" HEARTH_GEMM_WG_MIN=64 $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --batch 8,12,16,24,32
  b "nt64 r$r" HEARTH_GEMM_NT32=0 $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --batch 16,32
done
el ab
b "new pp" $H bench --model /tmp/m-3b --backend cuda -p 1570,40 -n 0 -r 3
b "old pp" HEARTH_GEMM_WG_MIN=64 $H bench --model /tmp/m-3b --backend cuda -p 1570,40 -n 0 -r 3
el pp
left=$(( 530 - ($(date +%s) - t0) ))
if [ $left -gt 30 ]; then
  timeout $left ncu --csv --metrics gpu__time_duration.sum -k regex:"gemm_wg_kernel|gemm_finish|attn_decode|rmsnorm|rope_kv|silu_mul|gemm_q4_kernel" \
    $H bench --model /tmp/m-3b --backend cuda -p 16 -n 3 -r 1 --batch 32 >"$O/ncu32.csv" 2>"$O/ncu.err"
  el "ncu $?"; gzip -f "$O/ncu32.csv"
fi
el done
