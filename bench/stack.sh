#!/usr/bin/env bash
# bench/stack.sh — one device call for the persistent decode stack (decode_stack.cu): build, the CUDA tests, greedy
# ids with the stack on and off on mkmodel checkpoints of the real 3B and 0.5B configs, and tg128 in interleaved
# rounds (HEARTH_DECODE_STACK=1 turns the stack on, 0 is the per-layer chain). Every command runs under a timeout (a grid-barrier deadlock
# must not eat the call). Logs in $OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-stack-out}
mkdir -p "$OUT"
. bench/deps.sh
B=build-gpu/stack
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$PREFIX" ${STACK_FLAGS:+"-DCMAKE_CUDA_FLAGS=$STACK_FLAGS"} >"$OUT/build.log" 2>&1 &&
  cmake --build $B -j16 --target hearth_cli test_cuda_model test_cuda_ops >>"$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
H=$B/hearth
for m in 3b 0.5b; do
  cfg=configs/qwen2.5-$m-instruct.json; [ $m = 0.5b ] && cfg=configs/qwen2.5-0.5b-instruct.json
  [ -f /tmp/hearth-bench-$m/model.safetensors ] || timeout 120 $H mkmodel --config $cfg --out /tmp/hearth-bench-$m >/dev/null &
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
