#!/usr/bin/env bash
# bench/xf.sh — one device call for HEARTH_GEMV_XF (gemv_q4.cu's x-first instances; bench/NOTES.md round 22) on top of
# the default HEARTH_GEMV_CORES rule: build, test_cuda_ops' fast and fused groups with the x-first instances and the
# co-resident shapes forced on, greedy ids of the variants against the default (x-first changes no sum, so they must be
# equal), tg128 A/B rounds on mkmodel checkpoints of the real 3B and 0.5B configs, then (XF_FULL=1, while time is left)
# the issue's whole W1/W2 table at the default. Everything runs under timeouts and a deadline (XF_DEADLINE_S from the
# start, default 540). Logs in $OUT. HEARTH_GEMV_XF exists only with bench/patches/round22-knobs.patch applied.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s) DEADLINE_S=${XF_DEADLINE_S:-540}
STACK_TARGETS="hearth_cli test_cuda_ops" . bench/stack_build.sh
mk_models 3b 0.5b
( HEARTH_GEMV_XF=3 HEARTH_GEMV_CORES=13 HEARTH_GEMV_WE_MIN=0 timeout 200 $B/tests/cuda/test_cuda_ops fast fused \
    >"$OUT/ops-xf.log" 2>&1; echo "test_cuda_ops fast fused (xf 3, cores 13, we 0) rc $?" ) &
wait
grep -E "passed|failed|FAIL" "$OUT/ops-xf.log" | tail -5
for m in 3b 0.5b; do
  for v in def: xf:HEARTH_GEMV_XF=3 c0:HEARTH_GEMV_CORES=0; do ids_run "$v" $m "$OUT/ids-$m-${v%%:*}.txt"; done
  for v in xf c0; do ids_diff "$OUT/ids-$m-$v.txt" "$OUT/ids-$m-def.txt" "$m $v against the default"; done
done
for r in 1 2; do
  vs=${XF_VARIANTS:-"def: xf3:HEARTH_GEMV_XF=3 xf1:HEARTH_GEMV_XF=1 xf2:HEARTH_GEMV_XF=2 c0:HEARTH_GEMV_CORES=0"}
  [ $r = 2 ] && vs=${XF_VARIANTS2:-"def: xf3:HEARTH_GEMV_XF=3 c0:HEARTH_GEMV_CORES=0"}
  for v in $vs; do
    [ "$(left)" -gt 40 ] || { echo "deadline: skipped 3b $v r$r"; continue; }
    echo "3b ${v%%:*} r$r $(tg_bench 3b "$v" $r)"
  done
  for v in def: xf3:HEARTH_GEMV_XF=3; do
    [ "$(left)" -gt 30 ] || { echo "deadline: skipped 0.5b $v r$r"; continue; }
    echo "0.5b ${v%%:*} r$r $(tg_bench 0.5b "$v" $r)"
  done
done
if [ "${XF_FULL:-0}" = 1 ]; then
  for m in 3b 0.5b; do
    [ "$(left)" -gt 90 ] || { echo "deadline: skipped the full table of $m"; continue; }
    run_env "${XF_FULL_ENV:-def:}" timeout $(( $(left) - 5 )) $H bench --model /tmp/hearth-bench-$m --backend cuda \
      -p 71,512,1570 -n 128 -r 3 --tg-ctx 71,1570 --batch 8,32 >"$OUT/full-$m.txt" 2>&1
    echo "full $m rc $?"; grep -E '^\| (pp|tg)' "$OUT/full-$m.txt"
  done
fi
