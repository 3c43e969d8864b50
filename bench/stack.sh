#!/usr/bin/env bash
# bench/stack.sh — one device call for the persistent decode stack (decode_stack.cu): build, the CUDA tests, greedy
# ids with the stack on and off on mkmodel checkpoints of the real 3B and 0.5B configs, and tg128 in interleaved
# rounds (HEARTH_DECODE_STACK=1 turns the stack on, 0 is the per-layer chain). Every command runs under a timeout (a grid-barrier deadlock
# must not eat the call). Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
STACK_TARGETS="hearth_cli test_cuda_model test_cuda_ops" . bench/stack_build.sh
for m in 3b 0.5b; do
  [ -f /tmp/hearth-bench-$m/model.safetensors ] ||
    timeout 120 $H mkmodel --config configs/qwen2.5-$m-instruct.json --out /tmp/hearth-bench-$m >/dev/null &
done
( cd $B && timeout ${STACK_CTEST_S:-240} ctest -L cuda -E test_cuda_ops --output-on-failure >"$OUT/ctest.log" 2>&1; echo "ctest rc $?" ) &
wait
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | head
ids=$(seq 11 81 | tr '\n' ' ')
for m in ${STACK_MODELS:-3b 0.5b}; do
  for s in 1 0; do
    HEARTH_DECODE_STACK=$s timeout 60 $H run --model /tmp/hearth-bench-$m --backend cuda --prompt-ids "$ids" -n 200 --ids --ignore-eos \
      >"$OUT/ids-$m-$s.txt" 2>"$OUT/ids-$m-$s.err"; echo "run $m stack=$s rc $?"
  done
  python3 - "$OUT/ids-$m-1.txt" "$OUT/ids-$m-0.txt" <<'PY'
import sys
a = open(sys.argv[1]).read().split(); b = open(sys.argv[2]).read().split()
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print(f"ids: {len(a)} vs {len(b)} tokens, first difference at {n}")
PY
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
