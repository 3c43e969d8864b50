#!/usr/bin/env bash
# bench/fnorm-ab.sh — one device call (session 38, issue 36): the split-K finish with the rmsnorm after it folded into
# one launch (matmul_q4.cu, "The finish and the rmsnorm after it"), A/B by HEARTH_FINISH_NORM=0 (two launches, the old
# way) in one build. Builds this tree, makes the 3B and 0.5B checkpoints, runs test_cuda_ops finish_norm then all its
# groups, then `hearth bench -p 128 -n 64 -r 2 --batch 16,32` per model and setting in interleaved rounds, then ctest -L
# cuda (bar test_cuda_ops), by priority within END seconds (570): finish_norm, A/B round 1, all of test_cuda_ops,
# round 2, ctest. Run on the GPU machine from the repository root with .deps carried:
#   timeout 590 bash bench/fnorm-ab.sh   (logs in $OUT; END: the seconds the script plans its parts into)
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
END=${END:-570}; left() { echo $(( END - ($(date +%s) - t0) )); }
timeout 60 $B/tests/cuda/test_cuda_ops finish_norm >"$O/test_fn.log" 2>&1; el "test_cuda_ops finish_norm rc $?"
grep -E "finish \+ rmsnorm|FAIL|fail" "$O/test_fn.log" | head -30 | tee -a "$O/progress.txt"
wait $mk
# old: the finish and the norm as two launches; new: folded; ads96 / ads192: new, and x16 / x32 attention on
# attn_decode_smem (a block a query head, keys in shared memory) instead of the split-key kernel, at most 96 / 192
# keys a pass (bench-only knobs HEARTH_ADS_MAX, HEARTH_ADS_C)
declare -A CFG=([old]="HEARTH_FINISH_NORM=0" [new]="HEARTH_NONE=1" [ads96]="HEARTH_ADS_MAX=32 HEARTH_ADS_C=96"
  [ads192]="HEARTH_ADS_MAX=32 HEARTH_ADS_C=192")
b() { local tag=$1; shift; timeout 90 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
round() {
  for mc in "3b old" "3b new" "3b ads96" "3b ads192" "05 old" "05 new"; do
    set -- $mc
    [ "$(left)" -gt 40 ] || return
    b "$1 $2 r$r" ${CFG[$2]} $H bench --model /tmp/m-$1 --backend cuda -p 128 -n 64 -r 2 --batch 16,32
  done
}
r=1; round; el "ab round 1"
[ "$(left)" -gt 100 ] && { timeout $(( $(left) - 60 )) $B/tests/cuda/test_cuda_ops >"$O/test_ops.log" 2>&1
  el "test_cuda_ops (all groups) rc $? $(tail -1 "$O/test_ops.log")"; grep -iE "fail|mismatch" "$O/test_ops.log" | head -8 | tee -a "$O/progress.txt"; }
[ "$(left)" -gt 160 ] && { r=2; round; el "ab round 2"; }
if [ "$(left)" -gt 30 ]; then
  (cd $B && timeout $(( $(left) - 5 )) ctest -L cuda -j4 -E test_cuda_ops --output-on-failure) >"$O/ctest.log" 2>&1
  el "ctest -L cuda (bar test_cuda_ops) rc $?: $(grep -E 'tests passed|tests failed' "$O/ctest.log")"; grep -E "\(Failed|SEGFAULT|Timeout" "$O/ctest.log" | head | tee -a "$O/progress.txt"
fi
el done
