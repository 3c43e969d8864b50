#!/usr/bin/env bash
# bench/r24d.sh — round 24 call 4 (bench/NOTES.md "Round 24"): the two hinted reads left beside the weight rings, each
# unhinted in a build of its own: the QKV emit's bias loads (-DGEMV_BIAS_HINT=0) and attn_o's Wo copy (-DATTN_O_HINT=0,
# the same cp.async form as the norm-weight copy that stopped kernels). test_cuda_ops on both, tg128 in interleaved
# rounds against the tree. Deadline R24D_DEADLINE_S (default 400).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R24D_DEADLINE_S:-400}
OUT=${OUT:-/tmp/hearth-r24d-out}
mkdir -p "$OUT"
. bench/deps.sh
H=build-gpu/v0/hearth
. bench/call_lib.sh
cmake_build build-gpu/v0 "hearth_cli" & P0=$!
cmake_build build-gpu/vb "hearth_cli test_cuda_ops" -DGEMV_BIAS_HINT=0 & P1=$!
cmake_build build-gpu/va "hearth_cli test_cuda_ops" -DATTN_O_HINT=0 & P2=$!
wait $P0 || { echo "build v0 failed"; tail -30 "$OUT/build-v0.log"; exit 1; }
mk_models 3b 0.5b
wait $P1 || { echo "build vb failed"; tail -20 "$OUT/build-vb.log"; }
wait $P2 || { echo "build va failed"; tail -20 "$OUT/build-va.log"; }
echo "built at $(( $(date +%s) - T0 )) s"
for b in vb va; do
  ( timeout 90 build-gpu/$b/tests/cuda/test_cuda_ops >"$OUT/ops-$b.log" 2>&1; echo "$b test_cuda_ops rc $?" )
  grep -E "illegal|gpu error|CHECK failed|passed|failed" "$OUT/ops-$b.log" | sort | uniq -c | head -4
done
echo "tests done at $(( $(date +%s) - T0 )) s"
wait # the checkpoints
V=build-gpu
tg_specs 25 3b:$V/v0:1 3b:$V/vb:1 3b:$V/va:1 3b:$V/va:2 3b:$V/vb:2 3b:$V/v0:2 0.5b:$V/v0:1 0.5b:$V/vb:1 0.5b:$V/va:1
echo "done at $(( $(date +%s) - T0 )) s"
