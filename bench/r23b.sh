#!/usr/bin/env bash
# bench/r23b.sh — round 23's last device call (bench/NOTES.md "Round 23", call 4): the tree (GEMV_DSUM=1: the norm
# prologue's per-token sum of squares in an f64 shared slot) and the same tree built with -DGEMV_DSUM=0 (f32 slots, main
# before this change), at once. The CUDA tests on the first (the repeat group with the decode norm shapes back), the
# repeat group on the second (should fail at several tokens), tg128 A/B in two interleaved rounds on both models, greedy
# ids of three runs per build on the 3B and of the tree on the 0.5B. Deadline R23B_DEADLINE_S (default 480).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R23B_DEADLINE_S:-480}
OUT=${OUT:-/tmp/hearth-r23b-out}
mkdir -p "$OUT"
. bench/deps.sh
B1=build-gpu/stack B0=build-gpu/dsum0 H=build-gpu/stack/hearth
. bench/call_lib.sh
TG="hearth_cli test_cuda_ops test_cuda_model"
cmake_build $B1 "$TG" & P1=$!
cmake_build $B0 "$TG" -DGEMV_DSUM=0 & P0=$!
wait $P1 || { echo "build 1 failed"; tail -30 "$OUT/build-stack.log"; exit 1; }
wait $P0 || { echo "build 0 failed"; tail -30 "$OUT/build-dsum0.log"; }
echo "built at $(( $(date +%s) - T0 )) s"
mk_models 3b 0.5b
( cd $B1 && timeout 200 ctest -j3 -L cuda -E oracle --output-on-failure >"$OUT/ctest.log" 2>&1; echo "ctest rc $?" )
grep -E "tests passed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest.log" | head -20
grep -E "repeats differ" "$OUT/ctest.log" | head -12
grep -E "CHECK failed|REQUIRE failed|gpu error|illegal" "$OUT/ctest.log" | sort | uniq -c | head -12
( timeout 60 $B0/tests/cuda/test_cuda_ops repeat >"$OUT/repeat-dsum0.log" 2>&1; echo "dsum0 repeat rc $?" )
grep -E "repeats differ" "$OUT/repeat-dsum0.log" | head -12
echo "tests done at $(( $(date +%s) - T0 )) s"
wait # the checkpoints
for r in 1 2; do
  for m in 3b 0.5b; do
    for b in 1 0; do
      [ "$(left)" -gt 100 ] || { echo "deadline: skipped $m $b r$r"; continue; }
      bb=$([ $b = 1 ] && echo $B1 || echo $B0)
      echo "$m dsum$b r$r $(H=$bb/hearth tg_bench $m d$b: $r)"
    done
  done
done
for b in 1 0; do
  bb=$([ $b = 1 ] && echo $B1 || echo $B0)
  for m in 3b 0.5b; do
    [ $b = 0 ] && [ $m = 0.5b ] && continue
    [ "$(left)" -gt 40 ] || { echo "deadline: skipped ids $b $m"; continue; }
    for r in 1 2 3; do H=$bb/hearth ids_run base: $m "$OUT/ids-$b-$m-$r.txt"; done
    for r in 2 3; do ids_diff "$OUT/ids-$b-$m-1.txt" "$OUT/ids-$b-$m-$r.txt" "dsum$b $m, run $r against run 1"; done
    ids_diff "$OUT/ids-$b-$m-2.txt" "$OUT/ids-$b-$m-3.txt" "dsum$b $m, run 3 against run 2"
  done
done
echo "done at $(( $(date +%s) - T0 )) s"
