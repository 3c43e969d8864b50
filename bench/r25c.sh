#!/usr/bin/env bash
# bench/r25c.sh — round 25 call 3 (bench/NOTES.md "Round 25"): the decode GEMV's n = 1 instances (GEMV_N1, the
# tree's default) against one instance for every n (-DGEMV_N1=0). Every CUDA test on the tree; tg128 in interleaved
# rounds; then the whole table of the faster build on both models. Deadline R25C_DEADLINE_S (default 540).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R25C_DEADLINE_S:-540}
OUT=${OUT:-/tmp/hearth-r25c-out}
mkdir -p "$OUT"
. bench/deps.sh
H=build-gpu/v0/hearth
. bench/call_lib.sh
cmake_build build-gpu/v0 "hearth_cli test_cuda_ops test_cuda_model test_oracle" & P0=$!
cmake_build build-gpu/vn "hearth_cli" -DGEMV_N1=0 & P1=$!
wait $P0 || { echo "build v0 failed"; tail -30 "$OUT/build-v0.log"; exit 1; }
mk_models 3b 0.5b
wait $P1 || { echo "build vn failed"; tail -30 "$OUT/build-vn.log"; }
echo "built at $(( $(date +%s) - T0 )) s"
( cd build-gpu/v0 && timeout 200 ctest -j3 -L cuda --output-on-failure >"$OUT/ctest.log" 2>&1; echo "ctest rc $?" )
grep -E "tests passed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest.log" | head -20
grep -E "CHECK failed|REQUIRE failed|gpu error|illegal" "$OUT/ctest.log" | sort | uniq -c | head -12
echo "tests done at $(( $(date +%s) - T0 )) s"
wait # the checkpoints
V=build-gpu
tg_specs 25 3b:$V/v0:1 3b:$V/vn:1 3b:$V/vn:2 3b:$V/v0:2 0.5b:$V/v0:1 0.5b:$V/vn:1 | tee "$OUT/tg.txt"
whole_tables $V/$(fastest_3b "$OUT/tg.txt") 80 3b 0.5b
echo "done at $(( $(date +%s) - T0 )) s"
