#!/usr/bin/env bash
# bench/cores_check.sh — a short device call for the co-resident gate/up default (HEARTH_GEMV_CORES, bench/NOTES.md
# round 22): build, the CUDA kernel and model tests (test_cuda_ops with the shape forced on every size, test_cuda_model's
# groups; the decode-stack entries left out), then tg128 on the 3B with the default and with HEARTH_GEMV_CORES=0 in two
# interleaved rounds, under a deadline (CHECK_DEADLINE_S from the start, default 300). Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${CHECK_DEADLINE_S:-300}
STACK_TARGETS="hearth_cli test_cuda_ops test_cuda_model" . bench/stack_build.sh
mk_models 3b
( cd $B && timeout 150 ctest -R 'test_cuda_ops|test_cuda_model' -E stack --output-on-failure >"$OUT/ctest.log" 2>&1
  echo "ctest rc $?" )
wait
grep -E "tests passed|Failed|\*\*\*|Not Run" "$OUT/ctest.log" | head -20
for r in 1 2; do
  for v in def c0; do
    [ "$(left)" -gt 25 ] || { echo "deadline: skipped $v r$r"; continue; }
    s=$v:; [ $v = c0 ] && s=c0:HEARTH_GEMV_CORES=0
    echo "3b $v r$r $(tg_bench 3b $s $r)"
  done
done
