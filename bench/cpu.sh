#!/usr/bin/env bash
# bench/cpu.sh — W1/W2 on the CPU (issue 7): Qwen2.5-0.5B and 3B random-weight checkpoints of the
# real configs, 2 threads, prefill 71/512/1570 and decode 128 tokens, with the bandwidth probe.
#
#   bench/cpu.sh [BUILD_DIR] [ROUNDS]
#
# Makes the checkpoints under ${HEARTH_BENCH_DIR:-/tmp} when absent (0.5B ~0.9 GiB, 3B ~5.8 GiB),
# then runs `hearth bench` ROUNDS times per model (default 3; each run itself takes the median of
# -r repetitions) so that the spread between runs on a shared, noisy machine is visible.
# Environment: THREADS (2), REPS (3), MODELS ("0.5b 3b"), HEARTH_CPU (scalar|avx2 to cap the ISA).
set -euo pipefail
BUILD=${1:-build-cpu}
ROUNDS=${2:-3}
DIR=${HEARTH_BENCH_DIR:-/tmp}
mkdir -p "$DIR"
THREADS=${THREADS:-2}
REPS=${REPS:-3}
MODELS=${MODELS:-"0.5b 3b"}
HEARTH="$BUILD/hearth"
[ -x "$HEARTH" ] || { echo "no $HEARTH: build first (cmake --build $BUILD --target hearth_cli)" >&2; exit 1; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus, threads $THREADS"
for m in $MODELS; do
  case $m in
    0.5b) cfg=configs/qwen2.5-0.5b-instruct.json; out=$DIR/hearth-bench-q05; pp=71,512,1570 ;;
    3b) cfg=configs/qwen2.5-3b-instruct.json; out=$DIR/hearth-bench-q3b; pp=71,512,1570 ;;
    *) echo "unknown model $m" >&2; exit 2 ;;
  esac
  [ -f "$out/model.safetensors" ] || "$HEARTH" mkmodel --config "$cfg" --out "$out" >&2
  for r in $(seq 1 "$ROUNDS"); do
    echo "## $m round $r (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    "$HEARTH" bench --model "$out" --threads "$THREADS" -p "$pp" -n 128 -r "$REPS" --probe
  done
done
