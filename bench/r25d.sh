#!/usr/bin/env bash
# bench/r25d.sh — round 25 call 4 (bench/NOTES.md "Round 25"): the n = 1 instances' prologue divisions written out
# (GEMV_N1_FOLD) and the rope pairing by shifts (GEMV_HD_SHIFT), against 43ba6f8's kernels (both 0). Every CUDA test on
# the tree (both on) and on the fold-only build; tg128 interleaved; the whole table of the fastest. Deadline
# R25D_DEADLINE_S (default 470).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R25D_DEADLINE_S:-470}
OUT=${OUT:-/tmp/hearth-r25d-out}
mkdir -p "$OUT"
. bench/deps.sh
H=build-gpu/v0/hearth
. bench/call_lib.sh
T="hearth_cli test_cuda_ops test_cuda_model test_oracle"
cmake_build build-gpu/v0 "$T" & P0=$!
cmake_build build-gpu/vf "$T" -DGEMV_HD_SHIFT=0 & P1=$!
cmake_build build-gpu/va "hearth_cli" "-DGEMV_N1_FOLD=0 -DGEMV_HD_SHIFT=0" & P2=$!
wait $P0 || { echo "build v0 failed"; tail -30 "$OUT/build-v0.log"; exit 1; }
mk_models 3b 0.5b
wait $P1 || echo "build vf failed"
wait $P2 || echo "build va failed"
echo "built at $(( $(date +%s) - T0 )) s"
for b in v0 vf; do
  ( cd build-gpu/$b && timeout 100 ctest -j3 -L cuda >"$OUT/ctest-$b.log" 2>&1; echo "$b ctest rc $?" )
  grep -E "tests passed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest-$b.log" | head -8
done
echo "tests done at $(( $(date +%s) - T0 )) s"
wait
V=build-gpu
tg_specs 25 3b:$V/v0:1 3b:$V/vf:1 3b:$V/va:1 3b:$V/va:2 3b:$V/vf:2 3b:$V/v0:2 0.5b:$V/v0:1 0.5b:$V/va:1 | tee "$OUT/tg.txt"
whole_tables $V/$(fastest_3b "$OUT/tg.txt") 80 3b 0.5b
echo "done at $(( $(date +%s) - T0 )) s"
