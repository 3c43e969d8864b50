#!/usr/bin/env bash
# bench/trace.sh — the in-graph timeline of one decode step on the GPU machine (bench/NOTES.md, round 10):
# a -DHEARTH_TRACE=1 build of the CLI (src/backend/cuda/trace.cu) times tg64 after 71 tokens on the mkmodel
# checkpoints of the 0.5B and the 3B and prints, per GEMV and attention launch, when its blocks entered, when
# its wait released, and when each stage after it (x in shared memory, first ring step landed, last step
# multiplied, partial tiles reduced, outputs written, end) was done. Logs: $OUT/trace-<model>.txt.
#   bash bench/trace.sh                 build, then run (about 2 minutes)
#   TRACE_STAGE=build|run bash bench/trace.sh   one half (e.g. build beside bench/gpu.sh, run after it)
#   TRACE_FLAGS=-DMY_SWITCH=1 bash bench/trace.sh   more CUDA flags for the trace build (an experiment's own switch)
#   MODELS="e4b 12b" bash bench/trace.sh   other mkmodel checkpoints (0.5b 3b e2b e4b 12b; default "0.5b 3b")
# After each table: the kernels grouped by label (launches, µs after the wait release summed over the step, µs of
# boundary before them), and the step's span.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
. bench/deps.sh # PREFIX, LD_LIBRARY_PATH
B=build-gpu/trace
stage=${TRACE_STAGE:-all}
if [ "$stage" != run ]; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_CUDA_FLAGS="-DHEARTH_TRACE=1 ${TRACE_FLAGS:-}" >"$OUT/build-trace.log" 2>&1 &&
    cmake --build $B -j"${TRACE_JOBS:-$(nproc)}" --target hearth_cli >>"$OUT/build-trace.log" 2>&1 ||
    { echo "trace build failed"; tail -n 20 "$OUT/build-trace.log"; exit 1; }
fi
[ "$stage" = build ] && exit 0
for m in ${MODELS:-0.5b 3b}; do
  case $m in
  0.5b) cfg=configs/qwen2.5-0.5b-instruct.json ;;
  3b) cfg=configs/qwen2.5-3b-instruct.json ;;
  e2b | e4b | 12b) cfg=configs/gemma-4-$m-it.json ;;
  *) echo "unknown model $m"; continue ;;
  esac
  dir=/tmp/hearth-bench-$m
  [ -f "$dir/model.safetensors" ] || timeout 120 $B/hearth mkmodel --config "$cfg" --out "$dir" >/dev/null
  tg() { timeout 60 $B/hearth bench --model "$dir" --backend cuda -p 71 -n 64 -r 2 --tg-ctx 71 >"$OUT/trace-$m.txt" 2>&1; }
  tg
  rc=$?
  echo "== timeline $m (rc $rc; the whole table in trace-$m.txt)"
  grep -E "^\| (#|[0-9])" "$OUT/trace-$m.txt" | sed -n "1,12p;\$p"
  echo "-- by label: launches, µs after the release (sum), µs of boundary before them (sum)"
  grep -E "^\| [0-9]" "$OUT/trace-$m.txt" | awk -F'|' '{ k = $3; gsub(/^ +| +$/, "", k); n[k]++; e[k] += $14; b[k] += $7;
      span = $6 + $14 } END { for (k in n) printf "%-44s %4d %9.1f %9.1f\n", k, n[k], e[k], b[k];
      printf "%-44s      %9.1f (first release to last end)\n", "step span", span }' | sort -k1,1
done
