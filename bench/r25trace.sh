#!/usr/bin/env bash
# bench/r25trace.sh — prepared for the next session (bench/NOTES.md "Round 24", next session item 2; not run yet): the
# in-graph timeline (bench/trace.sh's -DHEARTH_TRACE=1 build) of main against main + bench/patches/round24-defer.patch,
# both models, to see where the deferred norm's ~1 µs per norm kernel went (the `pro` and release columns of the norm
# kernels and of the kernels after them). Prepare the patched tree here, in the carried .deps:
#   rm -rf .deps/r25defer && mkdir -p .deps/r25defer && git archive HEAD | tar -x -C .deps/r25defer &&
#   (cd .deps/r25defer && patch -p1 < ../../bench/patches/round24-defer.patch)
# then on the GPU machine, .deps carried: bash bench/r25trace.sh (~3 min). Logs: $OUT/trace-{main,defer}-{3b,0.5b}.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${R25_DEADLINE_S:-400}
OUT=${OUT:-/tmp/hearth-r25-out}
mkdir -p "$OUT"
. bench/deps.sh
H=build-gpu/tmain/hearth
. bench/call_lib.sh
[ -f .deps/r25defer/src/backend/cuda/gemv_q4.cu ] || { echo "prepare .deps/r25defer first (see the header)"; exit 1; }
cmake_build build-gpu/tmain hearth_cli -DHEARTH_TRACE=1 & P0=$!
cmake_build build-gpu/tdefer hearth_cli -DHEARTH_TRACE=1 .deps/r25defer & P1=$!
wait $P0 || { echo "trace build of main failed"; tail -20 "$OUT/build-tmain.log"; exit 1; }
mk_models 3b 0.5b
wait $P1 || { echo "trace build of the patched tree failed"; tail -20 "$OUT/build-tdefer.log"; exit 1; }
wait
echo "built at $(( $(date +%s) - T0 )) s"
for m in 0.5b 3b; do
  for b in main defer; do
    [ "$(left)" -gt 30 ] || { echo "deadline: skipped $m $b"; continue; }
    timeout 60 build-gpu/t$b/hearth bench --model /tmp/hearth-bench-$m --backend cuda -p 71 -n 64 -r 2 --tg-ctx 71 \
      >"$OUT/trace-$b-$m.txt" 2>&1
    echo "== $m $b (rc $?): $(grep -E '^\| tg' "$OUT/trace-$b-$m.txt" | head -1)"
    grep -E "^\| (#|[0-9])" "$OUT/trace-$b-$m.txt" | sed -n "1,14p"
  done
done
echo "done at $(( $(date +%s) - T0 )) s"
