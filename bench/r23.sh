#!/usr/bin/env bash
# bench/r23.sh — round 23's device call (bench/NOTES.md "Round 23"): two Release builds at once, the tree as it is
# (build-gpu/stack: the deterministic norm prologue, GEMV_NDET=1) and the same tree with -DGEMV_NDET=0 (build-gpu/ndet0:
# the arrival-order float atomics of rounds 6-22); both hold the split-K GEMM that stores one slice per split. Then:
# the CUDA tests on the first build (test_cuda_ops with its new repeat group and the HEARTH_GEMV_QKV4 entry,
# test_cuda_model with the decode-stack entries), the repeat group on the second (it should fail there: the test can
# fail), tg128 on the 3B for {NDET 1, 0} x {default, HEARTH_GEMV_QKV4=1} in two interleaved rounds, greedy ids of
# repeated runs, the 0.5B, and the 3B's whole table. Under a deadline (R23_DEADLINE_S from the start, default 540).
# GEMV_NDET and HEARTH_GEMV_QKV4 were dropped after this call: to rerun it, apply bench/patches/round23-knobs.patch onto
# c8ce3da (tests at 2215c22).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R23_DEADLINE_S:-540}
OUT=${OUT:-/tmp/hearth-r23-out}
mkdir -p "$OUT"
. bench/deps.sh
H=build-gpu/stack/hearth
. bench/call_lib.sh
TG="hearth_cli test_cuda_ops test_cuda_model"
cmake_build build-gpu/stack "$TG" & P1=$!
cmake_build build-gpu/ndet0 "$TG" -DGEMV_NDET=0 & P0=$!
wait $P1 || { echo "build 1 failed"; tail -30 "$OUT/build-stack.log"; exit 1; }
wait $P0 || { echo "build 0 failed"; tail -30 "$OUT/build-ndet0.log"; }
wait
echo "built at $(( $(date +%s) - T0 )) s"
B1=build-gpu/stack B0=build-gpu/ndet0
mk_models 3b 0.5b
( cd $B1 && timeout 200 ctest -j3 -R 'test_cuda_ops|test_cuda_model' --output-on-failure >"$OUT/ctest.log" 2>&1
  echo "ctest rc $?" )
grep -E "tests passed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest.log" | head -20
grep -E "repeats differ" "$OUT/ctest.log" | sort | uniq | head -12
grep -E "CHECK failed|REQUIRE failed|gpu error|repeat:" "$OUT/ctest.log" | sort | uniq -c | head -30
( HEARTH_GEMV_CORES=13 HEARTH_GEMV_WE_MIN=0 timeout 60 $B1/tests/cuda/test_cuda_ops fused >"$OUT/fused-cores.log" 2>&1
  echo "ndet1 fused with CORES=13 rc $?" )
grep -E "CHECK failed|REQUIRE|error|NON-FINITE" "$OUT/fused-cores.log" | head -12
( timeout 60 $B0/tests/cuda/test_cuda_ops repeat >"$OUT/repeat-ndet0.log" 2>&1; echo "ndet0 repeat rc $?" )
grep -E "repeats differ|CHECK failed" "$OUT/repeat-ndet0.log" | head -20
echo "tests done at $(( $(date +%s) - T0 )) s"
wait # the checkpoints
for r in 1 2; do
  for b in 1 0; do
    for v in def q4; do
      [ "$(left)" -gt 60 ] || { echo "deadline: skipped $b $v r$r"; continue; }
      s=n$b$v:; [ $v = q4 ] && s=n$b$v:HEARTH_GEMV_QKV4=1
      bb=$([ $b = 1 ] && echo $B1 || echo $B0)
      echo "3b ndet$b $v r$r $(H=$bb/hearth tg_bench 3b $s $r)"
    done
  done
done
for m in 3b 0.5b; do
  [ "$(left)" -gt 50 ] || { echo "deadline: skipped ids $m"; continue; }
  for r in 1 2 3; do H=$B1/hearth ids_run base: $m "$OUT/ids-1-$m-$r.txt"; done
  for r in 2 3; do ids_diff "$OUT/ids-1-$m-1.txt" "$OUT/ids-1-$m-$r.txt" "ndet1 $m, run $r against run 1"; done
done
if [ "$(left)" -gt 40 ]; then
  for r in 1 2; do H=$B0/hearth ids_run base: 3b "$OUT/ids-0-3b-$r.txt"; done
  ids_diff "$OUT/ids-0-3b-1.txt" "$OUT/ids-0-3b-2.txt" "ndet0 3b, run 2 against run 1"
fi
for v in n1def: n1q4:HEARTH_GEMV_QKV4=1; do
  [ "$(left)" -gt 30 ] || { echo "deadline: skipped 0.5b $v"; continue; }
  echo "0.5b ${v%%:*} $(H=$B1/hearth tg_bench 0.5b $v 1)"
done
[ "$(left)" -gt 30 ] && echo "0.5b n0def $(H=$B0/hearth tg_bench 0.5b n0def: 1)"
if [ "$(left)" -gt 70 ]; then
  timeout $(( $(left) - 10 )) $B1/hearth bench --model /tmp/hearth-bench-3b --backend cuda -p 71,512,1570 -n 128 -r 3 \
    --tg-ctx 71 --batch 32 >"$OUT/table-3b.txt" 2>&1
  echo "3b whole table (ndet1, default):"; grep -E '^\| (pp|tg)' "$OUT/table-3b.txt"
fi
echo "done at $(( $(date +%s) - T0 )) s"
