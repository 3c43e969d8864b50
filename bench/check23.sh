#!/usr/bin/env bash
# bench/check23.sh — round 23's closing device call (bench/NOTES.md "Round 23"): the final tree's Release build and, at
# once, a copy of it with the split-K change reverted (bench/patches/round23-det-splitk.patch: float atomics), test_cuda_ops
# only; then every CUDA test of the final tree (the repeat group, the decode-stack entries), the repeat group on the
# reverted copy (it should fail there), greedy ids of three runs per model, tg128 on the 3B (two tg-only runs, and
# from a one-token context: llama-bench's tg128 starts from an empty one), the whole tables. Deadline CHECK_DEADLINE_S.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${CHECK_DEADLINE_S:-540}
OUT=${OUT:-/tmp/hearth-check23-out}
mkdir -p "$OUT"
. bench/deps.sh
B1=build-gpu/stack H=$B1/hearth
. bench/call_lib.sh
OLD=/tmp/hearth-old-splitk
rm -rf $OLD && mkdir -p $OLD && git ls-files -z | xargs -0 cp --parents -t $OLD
( cd $OLD && git apply -R "$OLDPWD/bench/patches/round23-det-splitk.patch" ) || echo "revert failed"
cmake_build $B1 "hearth_cli test_cuda_ops test_cuda_model" & P1=$!
cmake_build $OLD/build test_cuda_ops "" $OLD & P0=$!
wait $P1 || { echo "build failed"; tail -30 "$OUT/build-stack.log"; exit 1; }
wait $P0 || { echo "old build failed"; tail -20 "$OUT/build-build.log"; }
echo "built at $(( $(date +%s) - T0 )) s"
mk_models 3b 0.5b
( cd $B1 && timeout 200 ctest -j3 -L cuda --output-on-failure >"$OUT/ctest.log" 2>&1; echo "ctest rc $?" )
grep -E "tests passed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest.log" | head -20
grep -E "repeats differ" "$OUT/ctest.log" | head -8
grep -E "CHECK failed|REQUIRE failed|gpu error" "$OUT/ctest.log" | sort | uniq -c | head -12
( timeout 60 $OLD/build/tests/cuda/test_cuda_ops repeat >"$OUT/repeat-old.log" 2>&1; echo "old split-K repeat rc $?" )
grep -E "repeats differ" "$OUT/repeat-old.log" | head -8
echo "tests done at $(( $(date +%s) - T0 )) s"
wait
for m in 3b 0.5b; do
  [ "$(left)" -gt 60 ] || { echo "deadline: skipped ids $m"; continue; }
  for r in 1 2 3; do ids_run base: $m "$OUT/ids-$m-$r.txt"; done
  for r in 2 3; do ids_diff "$OUT/ids-$m-1.txt" "$OUT/ids-$m-$r.txt" "$m, run $r against run 1"; done
done
for r in 1 2; do [ "$(left)" -gt 40 ] && echo "3b tg128 (ctx 71, tg-only) r$r $(tg_bench 3b base: $r)"; done
if [ "$(left)" -gt 40 ]; then
  timeout 60 $H bench --model /tmp/hearth-bench-3b --backend cuda -p 8 -n 128 -r 5 --tg-ctx 1 >"$OUT/tg-ctx1.txt" 2>&1
  echo "3b tg128 from a one-token context: $(grep -E '^\| tg' "$OUT/tg-ctx1.txt" | head -1)"
fi
for m in 3b 0.5b; do
  [ "$(left)" -gt 50 ] || { echo "deadline: skipped table $m"; continue; }
  timeout $(( $(left) - 10 )) $H bench --model /tmp/hearth-bench-$m --backend cuda -p 71,512,1570 -n 128 -r 3 \
    --tg-ctx 71,1570 --batch 8,32 >"$OUT/table-$m.txt" 2>&1
  echo "$m whole table:"; grep -E '^\| (pp|tg)' "$OUT/table-$m.txt"
done
echo "done at $(( $(date +%s) - T0 )) s"
