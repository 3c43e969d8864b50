#!/usr/bin/env bash
# bench/r25b.sh — round 25 call 2 (bench/NOTES.md "Round 25"): prefetch_next, the decode GEMV asking for the next
# GEMV's weights into L2 (gate/up for down_proj, down_proj for the next layer's q/k/v) at ring step HEARTH_GEMV_PF of
# its first unit. One build; the CUDA tests with the hint on (results must not change); tg128 of the step choices in
# interleaved rounds. Deadline R25B_DEADLINE_S (default 480).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R25B_DEADLINE_S:-480}
OUT=${OUT:-/tmp/hearth-r25b-out}
mkdir -p "$OUT"
. bench/deps.sh
H=build-gpu/v0/hearth
. bench/call_lib.sh
cmake_build build-gpu/v0 "hearth_cli test_cuda_ops test_cuda_model test_oracle" || { echo "build failed"; tail -30 "$OUT/build-v0.log"; exit 1; }
mk_models 3b 0.5b
echo "built at $(( $(date +%s) - T0 )) s"
echo "== ctest -L cuda with HEARTH_GEMV_PF=2"
( cd build-gpu/v0 && HEARTH_GEMV_PF=2 timeout 200 ctest -j3 -L cuda --output-on-failure >"$OUT/ctest.log" 2>&1; echo "ctest rc $?" )
grep -E "tests passed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest.log" | head -20
grep -E "CHECK failed|REQUIRE failed|gpu error|illegal" "$OUT/ctest.log" | sort | uniq -c | head -12
echo "tests done at $(( $(date +%s) - T0 )) s"
wait # the checkpoints
for r in 1 2; do
  for v in off:HEARTH_GEMV_PF=-1 pf0:HEARTH_GEMV_PF=0 pf2:HEARTH_GEMV_PF=2 pf4:HEARTH_GEMV_PF=4 pfend:HEARTH_GEMV_PF=99; do
    [ "$(left)" -gt 25 ] || { echo "deadline: skipped 3b $v r$r"; continue; }
    echo "3b ${v%%:*} r$r $(tg_bench 3b "$v" $r)"
  done
done
for v in off:HEARTH_GEMV_PF=-1 pf2:HEARTH_GEMV_PF=2 pfend:HEARTH_GEMV_PF=99; do
  [ "$(left)" -gt 25 ] || { echo "deadline: skipped 0.5b $v"; continue; }
  echo "0.5b ${v%%:*} r1 $(tg_bench 0.5b "$v" 1)"
done
echo "done at $(( $(date +%s) - T0 )) s"
