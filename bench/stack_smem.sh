#!/usr/bin/env bash
# bench/stack_smem.sh — a short device call: the decode stack's tg128 on the 3B by shared-memory cap (HEARTH_DS_SMEM_KB:
# the rest of the SM is L1), against the per-layer chain, with block 0's stage times at the default (largest) block. Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/stack_build.sh
M=/tmp/hearth-bench-3b
mk_models 3b; wait
for kb in ${SMEM_LIST:-164 228}; do
  HEARTH_DECODE_STACK=1 HEARTH_DS_SMEM_KB=$kb timeout 60 $H bench --model $M --backend cuda -p 71 -n 128 -r 3 --tg-ctx 71 >"$OUT/smem-$kb.txt" 2>&1
  echo "smem $kb rc $? $(grep -E '^\| tg' "$OUT/smem-$kb.txt" | head -1) $(grep -i error "$OUT/smem-$kb.txt" | head -1)"
done
HEARTH_DECODE_STACK=0 timeout 60 $H bench --model $M --backend cuda -p 71 -n 128 -r 3 --tg-ctx 71 >"$OUT/chain.txt" 2>&1
echo "chain rc $? $(grep -E '^\| tg' "$OUT/chain.txt" | head -1)"
HEARTH_DECODE_STACK=1 HEARTH_DS_TIME=1 timeout 60 $H bench --model $M --backend cuda -p 71 -n 64 -r 1 --tg-ctx 71 >"$OUT/time.txt" 2>&1
sed -n '/decode_stack: block 0/,/layer /p' "$OUT/time.txt"
