#!/usr/bin/env bash
# bench/cores.sh — one device call for HEARTH_GEMV_CORES (gemv_q4.cu; bench/NOTES.md round 22): decode GEMV shapes
# chosen so that each kernel's blocks fit beside the previous kernel's and prefetch deeper. Builds, runs test_cuda_ops'
# fast and fused groups with the co-resident shapes forced on every size, compares greedy ids with the knob on and
# off, then times tg128 on mkmodel checkpoints of the real 3B and 0.5B configs: every variant of CORES_VARIANTS once,
# then the baseline and the two fastest 3B variants again. Every command runs under a timeout. Logs in $OUT.
# Variants are NAME:ENV[,ENV...] (ENV = VAR=VALUE); "base" is the product path. Round 22 ran it with the knobs of
# bench/patches/round22-knobs.patch applied (`git apply` it first: bit 2 and HEARTH_GEMV_TRIG_GU exist only there).
set -uo pipefail
cd "$(dirname "$0")/.."
STACK_TARGETS="hearth_cli test_cuda_ops" . bench/stack_build.sh
mk_models 3b 0.5b
( HEARTH_GEMV_CORES=${CORES_TEST_BITS:-15} HEARTH_GEMV_WE_MIN=0 HEARTH_GEMV_TRIG_GU=3 timeout 200 $B/tests/cuda/test_cuda_ops fast fused \
    >"$OUT/ops-cores.log" 2>&1; echo "test_cuda_ops fast fused (cores ${CORES_TEST_BITS:-15}) rc $?" ) &
wait
grep -E "passed|failed|FAIL" "$OUT/ops-cores.log" | tail -5
for m in 3b 0.5b; do
  for v in base: co:HEARTH_GEMV_CORES=${CORES_IDS_BITS:-7}; do
    ids_run "$v" $m "$OUT/ids-$m-${v%%:*}.txt"; echo "run $m ${v%%:*} rc $?"
  done
  ids_diff "$OUT/ids-$m-co.txt" "$OUT/ids-$m-base.txt" "$m co against base"
done
V3=${CORES_VARIANTS:-"base: c3:HEARTH_GEMV_CORES=3 c7:HEARTH_GEMV_CORES=7 c7t2:HEARTH_GEMV_CORES=7,HEARTH_GEMV_TRIG_GU=2 c7t4:HEARTH_GEMV_CORES=7,HEARTH_GEMV_TRIG_GU=4 c7t6:HEARTH_GEMV_CORES=7,HEARTH_GEMV_TRIG_GU=6 c5:HEARTH_GEMV_CORES=5 c6:HEARTH_GEMV_CORES=6"}
: >"$OUT/tg3b.txt"
for v in $V3; do
  t=$(tg_bench 3b "$v" 1); echo "3b ${v%%:*} r1 $t"; echo "$t $v" >>"$OUT/tg3b.txt"
done
V05=${CORES_VARIANTS_05:-"base: c0:HEARTH_GEMV_CORES=0"}
for v in $V05; do echo "0.5b ${v%%:*} r1 $(tg_bench 0.5b "$v" 1)"; done
best=$(grep -v ' base:$' "$OUT/tg3b.txt" | sort -rn | head -2 | awk '{print $2}')
for v in base: $best; do echo "3b ${v%%:*} r2 $(tg_bench 3b "$v" 2)"; done
for v in $V05; do echo "0.5b ${v%%:*} r2 $(tg_bench 0.5b "$v" 2)"; done
# CORES_STACK=1: the decode stack's shared-memory cap question of round 21 (bench/stack_smem.sh's runs, 3B tg128)
if [ "${CORES_STACK:-0}" = 1 ]; then
  for kb in 164 228; do
    echo "3b stack smem $kb $(tg_bench 3b "stack$kb:HEARTH_DECODE_STACK=1,HEARTH_DS_SMEM_KB=$kb" 1)"
  done
fi
