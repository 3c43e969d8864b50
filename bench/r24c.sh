#!/usr/bin/env bash
# bench/r24c.sh — round 24 call 3 (bench/NOTES.md "Round 24"): the final tree (GEMV_NW_HINT 0 by default, GEMV_DEFER gone
# to bench/patches/round24-defer.patch) and the same tree built with -DHEARTH_L2_HINTS=0 (no cache-hinted instruction
# anywhere): every CUDA test of the first, tg128 A/B of the tree, the tree with HEARTH_L2_HINT=0 (the hinted
# instructions with a zero fraction) and the unhinted build, the whole tables of both models, three greedy 3B runs.
# Deadline R24C_DEADLINE_S (default 470).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R24C_DEADLINE_S:-470}
OUT=${OUT:-/tmp/hearth-r24c-out}
mkdir -p "$OUT"
. bench/deps.sh
B1=build-gpu/f1 B0=build-gpu/f0 H=build-gpu/f1/hearth
. bench/call_lib.sh
cmake_build $B1 "hearth_cli test_cuda_ops test_cuda_model" & P1=$!
cmake_build $B0 "hearth_cli" -DHEARTH_L2_HINTS=0 & P0=$!
wait $P1 || { echo "build f1 failed"; tail -30 "$OUT/build-f1.log"; exit 1; }
echo "built f1 at $(( $(date +%s) - T0 )) s"
mk_models 3b 0.5b
ctest_cuda $B1
wait $P0 || { echo "build f0 failed"; tail -20 "$OUT/build-f0.log"; }
echo "tests done, f0 built at $(( $(date +%s) - T0 )) s"
wait # the checkpoints
ab() { # ROUND MODEL
  local v
  for v in "f1:" "f1:HEARTH_L2_HINT=0" "f0:"; do
    [ "$(left)" -gt 60 ] || { echo "deadline: skipped $2 $v r$1"; continue; }
    local bb=build-gpu/${v%%:*} spec=${v#*:}
    echo "$2 ${v%%:*}${spec:+ $spec} r$1 $(H=$bb/hearth tg_bench $2 "${v%%:*}$( [ -n "$spec" ] && echo rt):$spec" $1)"
  done
}
ab 1 3b
for m in 3b 0.5b; do
  [ "$(left)" -gt 90 ] || { echo "deadline: skipped the $m table"; continue; }
  timeout 150 $H bench --model /tmp/hearth-bench-$m --backend cuda -p 71,512,1570 -n 128 -r 3 \
    --tg-ctx 71,1570 --batch 8,32 >"$OUT/table-$m.txt" 2>&1
  echo "$m whole table:"; grep -E '^\| (pp|tg)' "$OUT/table-$m.txt"
done
ab 2 3b
ab 1 0.5b
for r in 1 2 3; do
  [ "$(left)" -gt 15 ] || { echo "deadline: skipped ids $r"; continue; }
  ids_run base: 3b "$OUT/ids-3b-$r.txt"
done
for r in 2 3; do [ -f "$OUT/ids-3b-$r.txt" ] && ids_diff "$OUT/ids-3b-1.txt" "$OUT/ids-3b-$r.txt" "3b, run $r against run 1"; done
echo "done at $(( $(date +%s) - T0 )) s"
