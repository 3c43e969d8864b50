#!/usr/bin/env bash
# bench/cores_check.sh — a short device call for the co-resident gate/up default (HEARTH_GEMV_CORES, bench/NOTES.md
# round 22): build, the CUDA kernel and model tests (test_cuda_ops with the shape forced on every size, test_cuda_model's
# groups; the decode-stack entries left out), then tg128 on the 3B with the default and with HEARTH_GEMV_CORES=0 in two
# interleaved rounds, under a deadline (CHECK_DEADLINE_S from the start, default 300). Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
left() { echo $(( ${CHECK_DEADLINE_S:-300} - ($(date +%s) - T0) )); }
STACK_TARGETS="hearth_cli test_cuda_ops test_cuda_model" . bench/stack_build.sh
M=/tmp/hearth-bench-3b
[ -f $M/model.safetensors ] || timeout 120 $H mkmodel --config configs/qwen2.5-3b-instruct.json --out $M >/dev/null &
( cd $B && timeout 150 ctest -R 'test_cuda_ops|test_cuda_model' -E stack --output-on-failure >"$OUT/ctest.log" 2>&1
  echo "ctest rc $?" )
wait
grep -E "tests passed|Failed|\*\*\*|Not Run" "$OUT/ctest.log" | head -20
for r in 1 2; do
  for v in def c0; do
    [ "$(left)" -gt 25 ] || { echo "deadline: skipped $v r$r"; continue; }
    e=""; [ $v = c0 ] && e="HEARTH_GEMV_CORES=0"
    env $e timeout 60 $H bench --model $M --backend cuda -p 71 -n 128 -r 5 --tg-ctx 71 >"$OUT/bench-$v-$r.txt" 2>&1
    echo "3b $v r$r $(grep -E '^\| tg' "$OUT/bench-$v-$r.txt" | head -1)"
  done
done
