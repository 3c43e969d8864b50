#!/usr/bin/env bash
# bench/r24b.sh — round 24 call 2 (bench/NOTES.md "Round 24"): (a) the tree (GEMV_DEFER=1: the rmsnorm's 1 / rms applied
# in the emit, one barrier in the prologue) against the same tree built with -DGEMV_DEFER=0: every CUDA test on the first
# (ctest -L cuda -E oracle), tg128 A/B in interleaved rounds on both models, three greedy runs of the 3B; (b) round 23's
# NDET tree (2215c22, exactly the one that stopped; prepared in the carried .deps/r24ndet: rm -rf .deps/r24ndet &&
# mkdir -p .deps/r24ndet && git archive 2215c22 | tar -x -C .deps/r24ndet, then main's GEMV_NW_HINT switch around its
# norm-weight cp.async) built with the hint (as it stopped) and without: test_cuda_ops fused with the 11-warp gate/up
# forced. Deadline R24B_DEADLINE_S (default 540).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R24B_DEADLINE_S:-540}
OUT=${OUT:-/tmp/hearth-r24b-out}
mkdir -p "$OUT"
. bench/deps.sh
B1=build-gpu/d1 B0=build-gpu/d0 N1=build-gpu/n1 N0=build-gpu/n0 H=build-gpu/d1/hearth
. bench/call_lib.sh
cmake_build $B1 "hearth_cli test_cuda_ops test_cuda_model" & P1=$!
cmake_build $B0 "hearth_cli test_cuda_ops" -DGEMV_DEFER=0 & P0=$!
cmake_build $N1 test_cuda_ops "" .deps/r24ndet & Q1=$!
cmake_build $N0 test_cuda_ops -DGEMV_NW_HINT=0 .deps/r24ndet & Q0=$!
wait $P1 || { echo "build d1 failed"; grep -E "error" "$OUT/build-d1.log" | head; tail -30 "$OUT/build-d1.log"; exit 1; }
wait $P0 || { echo "build d0 failed"; tail -20 "$OUT/build-d0.log"; }
echo "built d at $(( $(date +%s) - T0 )) s"
mk_models 3b 0.5b
ctest_cuda $B1
wait $Q1 || { echo "build n1 failed"; tail -20 "$OUT/build-n1.log"; }
wait $Q0 || { echo "build n0 failed"; tail -20 "$OUT/build-n0.log"; }
echo "built n, tests done at $(( $(date +%s) - T0 )) s"
for b in n1 n0; do
  ( HEARTH_GEMV_CORES=13 HEARTH_GEMV_WE_MIN=0 timeout 60 build-gpu/$b/tests/cuda/test_cuda_ops fused >"$OUT/ndet-$b.log" 2>&1; echo "ndet $b fused (cores 13, we_min 0) rc $?" )
  grep -E "illegal|gpu error|CHECK failed|passed|failed" "$OUT/ndet-$b.log" | sort | uniq -c | head -6
done
wait # the checkpoints
tg_specs 40 3b:$B1:1 3b:$B0:1 3b:$B0:2 3b:$B1:2 0.5b:$B1:1 0.5b:$B0:1
for r in 1 2 3; do
  [ "$(left)" -gt 20 ] || { echo "deadline: skipped ids $r"; continue; }
  H=$B1/hearth ids_run base: 3b "$OUT/ids-3b-$r.txt"
done
for r in 2 3; do [ -f "$OUT/ids-3b-$r.txt" ] && ids_diff "$OUT/ids-3b-1.txt" "$OUT/ids-3b-$r.txt" "defer1 3b, run $r against run 1"; done
echo "done at $(( $(date +%s) - T0 )) s"
