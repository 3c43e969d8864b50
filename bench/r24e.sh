#!/usr/bin/env bash
# bench/r24e.sh — round 24's last call (bench/NOTES.md "Round 24", call 5): the final tree (ATTN_O_HINT 0 by default)
# through every CUDA test and tg128 on both models; and the trace build's 0.5B stop of round 18 ("an illegal
# instruction" with attn_o on): a trace build of the tree against one with attn_o's copy hinted again
# (-DATTN_O_HINT=1). Deadline R24E_DEADLINE_S (default 260).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R24E_DEADLINE_S:-260}
OUT=${OUT:-/tmp/hearth-r24e-out}
mkdir -p "$OUT"
. bench/deps.sh
B=build-gpu/fin H=build-gpu/fin/hearth
. bench/call_lib.sh
cmake_build $B "hearth_cli test_cuda_ops test_cuda_model" & P0=$!
cmake_build build-gpu/tr0 hearth_cli -DHEARTH_TRACE=1 & P1=$!
cmake_build build-gpu/tr1 hearth_cli "-DHEARTH_TRACE=1 -DATTN_O_HINT=1" & P2=$!
wait $P0 || { echo "build fin failed"; tail -30 "$OUT/build-fin.log"; exit 1; }
mk_models 3b 0.5b
ctest_cuda $B 150
wait # builds and checkpoints
echo "built and tested at $(( $(date +%s) - T0 )) s"
for m in 3b 0.5b; do
  [ "$(left)" -gt 30 ] && echo "$m fin $(tg_bench $m fin: 1)"
done
for b in tr0 tr1; do
  [ "$(left)" -gt 25 ] || { echo "deadline: skipped trace $b"; continue; }
  timeout 40 build-gpu/$b/hearth bench --model /tmp/hearth-bench-0.5b --backend cuda -p 71 -n 64 -r 2 --tg-ctx 71 >"$OUT/trace-$b.txt" 2>&1
  echo "trace build $b, 0.5B, attn_o on: rc $? $(grep -m1 -iE 'illegal|error' "$OUT/trace-$b.txt" | head -c 160)"
  grep -E '^\| tg' "$OUT/trace-$b.txt" | head -1
done
echo "done at $(( $(date +%s) - T0 )) s"
