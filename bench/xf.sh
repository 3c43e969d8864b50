#!/usr/bin/env bash
# bench/xf.sh — one device call for HEARTH_GEMV_XF (gemv_q4.cu's x-first instances; bench/NOTES.md round 22) on top of
# the default HEARTH_GEMV_CORES rule: build, test_cuda_ops' fast and fused groups with the x-first instances and the
# co-resident shapes forced on, greedy ids of the variants against the default (x-first changes no sum, so they must be
# equal), tg128 A/B rounds on mkmodel checkpoints of the real 3B and 0.5B configs, then (XF_FULL=1, while time is left)
# the issue's whole W1/W2 table at the default. Everything runs under timeouts and a deadline (XF_DEADLINE_S from the
# start, default 540). Logs in $OUT. HEARTH_GEMV_XF exists only with bench/patches/round22-knobs.patch applied.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
left() { echo $(( ${XF_DEADLINE_S:-540} - ($(date +%s) - T0) )); }
STACK_TARGETS="hearth_cli test_cuda_ops" . bench/stack_build.sh
for m in 3b 0.5b; do
  [ -f /tmp/hearth-bench-$m/model.safetensors ] ||
    timeout 120 $H mkmodel --config configs/qwen2.5-$m-instruct.json --out /tmp/hearth-bench-$m >/dev/null &
done
( HEARTH_GEMV_XF=3 HEARTH_GEMV_CORES=13 HEARTH_GEMV_WE_MIN=0 timeout 200 $B/tests/cuda/test_cuda_ops fast fused \
    >"$OUT/ops-xf.log" 2>&1; echo "test_cuda_ops fast fused (xf 3, cores 13, we 0) rc $?" ) &
wait
grep -E "passed|failed|FAIL" "$OUT/ops-xf.log" | tail -5
run_env() { # NAME:ENV,ENV -> runs the rest of the command line with those variables set
  local spec=$1; shift
  local envs=${spec#*:}
  [ "$envs" = "$spec" ] && envs=""
  env ${envs//,/ } "$@"
}
ids=$(seq 11 81 | tr '\n' ' ')
for m in 3b 0.5b; do
  for v in def: xf:HEARTH_GEMV_XF=3 c0:HEARTH_GEMV_CORES=0; do
    run_env "$v" timeout 60 $H run --model /tmp/hearth-bench-$m --backend cuda --prompt-ids "$ids" -n 100 --ids --ignore-eos \
      >"$OUT/ids-$m-${v%%:*}.txt" 2>"$OUT/ids-$m-${v%%:*}.err"
  done
  for v in xf c0; do
    python3 - "$OUT/ids-$m-$v.txt" "$OUT/ids-$m-def.txt" "$m $v" <<'PY'
import sys
a = open(sys.argv[1]).read().split(); b = open(sys.argv[2]).read().split()
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print(f"ids {sys.argv[3]} against the default: {len(a)} vs {len(b)} tokens, first difference at {n}")
PY
  done
done
tg() { # model variant round -> prints the tg128 tok/s
  run_env "$2" timeout 90 $H bench --model /tmp/hearth-bench-$1 --backend cuda -p 71 -n 128 -r 5 --tg-ctx 71 \
    >"$OUT/bench-$1-${2%%:*}-$3.txt" 2>&1
  grep -E '^\| tg' "$OUT/bench-$1-${2%%:*}-$3.txt" | head -1 | awk -F'|' '{print $3}' | tr -d ' '
}
for r in 1 2; do
  vs=${XF_VARIANTS:-"def: xf3:HEARTH_GEMV_XF=3 xf1:HEARTH_GEMV_XF=1 xf2:HEARTH_GEMV_XF=2 c0:HEARTH_GEMV_CORES=0"}
  [ $r = 2 ] && vs=${XF_VARIANTS2:-"def: xf3:HEARTH_GEMV_XF=3 c0:HEARTH_GEMV_CORES=0"}
  for v in $vs; do
    [ "$(left)" -gt 40 ] || { echo "deadline: skipped 3b $v r$r"; continue; }
    echo "3b ${v%%:*} r$r $(tg 3b "$v" $r)"
  done
  for v in def: xf3:HEARTH_GEMV_XF=3; do
    [ "$(left)" -gt 30 ] || { echo "deadline: skipped 0.5b $v r$r"; continue; }
    echo "0.5b ${v%%:*} r$r $(tg 0.5b "$v" $r)"
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
