#!/usr/bin/env bash
# bench/r25.sh — round 25 call 1 (bench/NOTES.md "Round 25"): the weight ring on bulk copies and mbarriers
# (-DGEMV_BULK=1) against the tree (cp.async ring). Every CUDA test on the bulk build, the oracle entries included
# (the first run of test_oracle_cuda since round 7); test_cuda_ops on the tree; tg128 in interleaved rounds.
# Deadline R25_DEADLINE_S (default 480).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R25_DEADLINE_S:-480}
OUT=${OUT:-/tmp/hearth-r25-out}
mkdir -p "$OUT"
. bench/deps.sh
H=build-gpu/v0/hearth
. bench/call_lib.sh
T="hearth_cli test_cuda_ops test_cuda_model test_oracle"
cmake_build build-gpu/v0 "$T" & P0=$!
cmake_build build-gpu/vk "$T" -DGEMV_BULK=1 & P1=$!
wait $P0 || { echo "build v0 failed"; tail -30 "$OUT/build-v0.log"; exit 1; }
mk_models 3b 0.5b
wait $P1 || { echo "build vk failed"; tail -30 "$OUT/build-vk.log"; }
echo "built at $(( $(date +%s) - T0 )) s"
echo "== test_cuda_ops fast, bulk build (a hang here would be an mbarrier phase never completed)"
( timeout 60 build-gpu/vk/tests/cuda/test_cuda_ops fast >"$OUT/ops-vk.log" 2>&1; echo "vk test_cuda_ops fast rc $?" )
grep -E "illegal|gpu error|CHECK failed|passed|failed" "$OUT/ops-vk.log" | sort | uniq -c | head -4
echo "== ctest -L cuda, bulk build"
( cd build-gpu/vk && timeout 240 ctest -j3 -L cuda --output-on-failure >"$OUT/ctest-vk.log" 2>&1; echo "ctest rc $?" )
grep -E "tests passed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest-vk.log" | head -20
grep -E "CHECK failed|REQUIRE failed|gpu error|illegal" "$OUT/ctest-vk.log" | sort | uniq -c | head -12
grep -E "greedy steps equal|teacher-forced" "$OUT/ctest-vk.log" | head -12
echo "tests done at $(( $(date +%s) - T0 )) s"
wait # the checkpoints
V=build-gpu
tg_specs 25 3b:$V/v0:1 3b:$V/vk:1 3b:$V/vk:2 3b:$V/v0:2 0.5b:$V/v0:1 0.5b:$V/vk:1
[ "$(left)" -gt 50 ] && echo "3b vk HEARTH_GEMV_RING=4 $(H=$V/vk/hearth tg_bench 3b r4:HEARTH_GEMV_RING=4 1)"
echo "== ctest -L cuda, tree"
[ "$(left)" -gt 70 ] && ctest_cuda build-gpu/v0 $(( $(left) - 20 ))
echo "done at $(( $(date +%s) - T0 )) s"
