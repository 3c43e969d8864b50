#!/usr/bin/env bash
# bench/stack_abl.sh — where the persistent decode stack's time goes: bench/stack.sh's build, then tg on the 3B (and
# one 0.5B run) with HEARTH_DS_TIME=1 (block 0's stage times per layer) and each HEARTH_DS_ABL knob (1 no weight
# copies, 2 no step math, 4 barriers without waiting, 8 no attention; sums combine). Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/stack_build.sh
mk_models ${ABL_MODELS:-3b 0.5b}
wait
for m in ${ABL_MODELS:-3b 0.5b}; do
  for k in ${ABL_LIST:-0 1 2 3 4 8 12 15}; do
    [ $m = 0.5b ] && [ $k != 0 ] && continue
    HEARTH_DECODE_STACK=1 HEARTH_DS_TIME=1 HEARTH_DS_ABL=$k timeout 90 $H bench --model /tmp/hearth-bench-$m --backend cuda -p 71 -n 64 -r 2 --tg-ctx 71 \
      >"$OUT/abl-$m-$k.txt" 2>&1
    echo "== $m abl=$k rc $? $(grep -E '^\| tg' "$OUT/abl-$m-$k.txt" | head -1)"
    sed -n '/decode_stack: block 0/,/layer /p' "$OUT/abl-$m-$k.txt" | tail -20
  done
done
