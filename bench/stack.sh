#!/usr/bin/env bash
# bench/stack.sh — one device call for the persistent decode stack (decode_stack.cu): build, the CUDA tests, greedy
# ids with the stack on and off on mkmodel checkpoints of the real 3B and 0.5B configs, and tg128 in interleaved
# rounds (HEARTH_DECODE_STACK=1 turns the stack on, 0 is the per-layer chain). Every command runs under a timeout (a grid-barrier deadlock
# must not eat the call). Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
STACK_TARGETS="hearth_cli test_cuda_model test_cuda_ops" . bench/stack_build.sh
mk_models 3b 0.5b
( cd $B && timeout ${STACK_CTEST_S:-240} ctest -L cuda -E test_cuda_ops --output-on-failure >"$OUT/ctest.log" 2>&1; echo "ctest rc $?" ) &
wait
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | head
for m in ${STACK_MODELS:-3b 0.5b}; do
  for s in 1 0; do
    ids_run stack$s:HEARTH_DECODE_STACK=$s $m "$OUT/ids-$m-$s.txt" 200; echo "run $m stack=$s rc $?"
  done
  ids_diff "$OUT/ids-$m-1.txt" "$OUT/ids-$m-0.txt" "$m stack against the chain"
done
for r in 1 2; do
  for m in ${STACK_MODELS:-3b 0.5b}; do
    for s in 1 0; do
      HEARTH_DECODE_STACK=$s timeout 90 $H bench --model /tmp/hearth-bench-$m --backend cuda -p 71 -n 128 -r 3 --tg-ctx 71 \
        >"$OUT/bench-$m-$s-$r.txt" 2>&1
      echo "round $r $m stack=$s rc $? $(grep -E '^\| tg' "$OUT/bench-$m-$s-$r.txt" | head -1)"
    done
  done
done
