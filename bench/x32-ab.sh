#!/usr/bin/env bash
# bench/x32-ab.sh — one device call (session 36, issue 36): four changes to the batched decode step, A/B by the
# bench-only switches they carry (HEARTH_ATTN_NS=ceil: attn_decode's old split count; HEARTH_SPLIT=old: the wgmma
# GEMM's split-K without the residency cap; HEARTH_SWIGLU_SPLIT=1: gate/up finish and silu_mul as two launches;
# HEARTH_GEMM_PDL=0: the wgmma GEMM launched without programmatic stream serialization). "main" sets all four (the
# vectorised rmsnorm has no switch), "-x" leaves one out of the new build.
# Builds this tree, makes the 3B checkpoint, runs test_cuda_ops (all groups), then `hearth bench -p 128 -n 64 -r 2
# --batch 16,32` per configuration in interleaved rounds, then ctest -L cuda (bar test_cuda_ops) in the time left. Run on the GPU machine from the repository root with .deps carried:
#   timeout 570 bash bench/x32-ab.sh   (logs in $OUT)
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
( [ -f /tmp/m-3b/model.safetensors ] || $H mkmodel --config configs/qwen2.5-3b-instruct.json --out /tmp/m-3b >/dev/null 2>&1; echo mk3b >>"$O/progress.txt" ) &
mk=$!
timeout 90 $B/tests/cuda/test_cuda_ops >"$O/test_ops.log" 2>&1; el "test_cuda_ops (all groups) rc $? $(tail -1 "$O/test_ops.log")"
grep -iE "fail|mismatch" "$O/test_ops.log" | head -8 | tee -a "$O/progress.txt"
wait $mk
declare -A CFG=(
  [main]="HEARTH_ATTN_NS=ceil HEARTH_SPLIT=old HEARTH_SWIGLU_SPLIT=1 HEARTH_GEMM_PDL=0"
  [new]="HEARTH_NONE=1"
  [-ns]="HEARTH_ATTN_NS=ceil"
  [-split]="HEARTH_SPLIT=old"
  [-swi]="HEARTH_SWIGLU_SPLIT=1"
  [-pdl]="HEARTH_GEMM_PDL=0"
)
b() { local tag=$1; shift; timeout 90 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
for r in 1 2; do
  for c in main new -ns -split -swi -pdl; do
    [ $(( $(date +%s) - t0 )) -lt ${AB_END:-420} ] || break 2
    b "$c r$r" ${CFG[$c]} $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --batch 16,32
  done
done
el ab
left=$(( 560 - ($(date +%s) - t0) ))
if [ $left -gt 30 ]; then
  (cd $B && timeout $left ctest -L cuda -j4 -E test_cuda_ops --output-on-failure) >"$O/ctest.log" 2>&1
  el "ctest -L cuda (bar test_cuda_ops) rc $?: $(grep -E 'tests passed|tests failed' "$O/ctest.log")"; grep -E "\(Failed|SEGFAULT|Timeout" "$O/ctest.log" | head | tee -a "$O/progress.txt"
fi
el done
