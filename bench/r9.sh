#!/usr/bin/env bash
# bench/r9.sh — round 9's A/B call (bench/NOTES.md, "Round 9"): gpu.sh's build, tests and short e2e of the
# tree as is, then variant builds of the decode GEMV (compile-time macros, so that no variant perturbs the
# others' register allocation), each run through test_cuda_ops and ctest -L cuda, then e2e tg128 of every
# build on both models, interleaved. On the GPU machine, in a carried copy of the tree:
#   bash bench/r9.sh        (about 6 minutes; logs under $OUT)
# R9_VARIANTS: space-separated name:CMAKE_CUDA_FLAGS pairs (flags without spaces), default "gps1:-DGEMV_GPS=1".
# R9_BASE=path/to/gemv_q4.cu adds a build with that file in place of the tree's (the previous round's kernel).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
PREFIX=$ROOT/.deps/root/usr
export LD_LIBRARY_PATH=$PREFIX/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
CTEST_FIRST=1 BENCH_PARTS=gemv DEADLINE_S=220 E2E_ARGS="-p 71 -n 128 -r 3 --tg-ctx 71,1570 --batch 8" \
  bash bench/gpu.sh full >"$OUT/full.txt" 2>&1 &
full=$!
# variants: name and CMAKE_CUDA_FLAGS
# (round 9 ran "gps2:-DGEMV_GPS=2" "ch4:-DGEMV_CHAINS=4" and both together, when GPS 1 was the default)
read -r -a variants <<<"${R9_VARIANTS:-gps1:-DGEMV_GPS=1}"
build() { # name flags [source dir]
  local n=$1 f=$2 src=${3:-.}
  cmake -S "$src" -B "build-gpu/$n" -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX" "-DCMAKE_CUDA_FLAGS=$f" >"$OUT/build-$n.log" 2>&1 &&
    cmake --build "build-gpu/$n" -j6 >>"$OUT/build-$n.log" 2>&1 || echo "build $n failed"
}
pids=()
for v in "${variants[@]}"; do build "${v%%:*}" "${v#*:}" & pids+=($!); done
if [ -n "${R9_BASE:-}" ] && [ -f "$R9_BASE" ]; then
  rm -rf /tmp/r9base && mkdir -p /tmp/r9base && tar --exclude=./build-gpu --exclude=./.deps -cf - . | tar -x -C /tmp/r9base
  cp "$R9_BASE" /tmp/r9base/src/backend/cuda/gemv_q4.cu
  build base "" /tmp/r9base & pids+=($!)
  variants+=("base:")
fi
wait "${pids[@]}"
wait $full
grep -E "passed|failed|FAIL|Test +#|^\| tg|== |^build" "$OUT/full.txt" | grep -v "^ok"
for v in "${variants[@]}"; do
  n=${v%%:*}
  [ -x "build-gpu/$n/hearth" ] || { echo "$n: no build"; continue; }
  timeout 60 "build-gpu/$n/tests/cuda/test_cuda_ops" >"$OUT/test-$n.log" 2>&1
  echo "$n test_cuda_ops rc $? $(grep -E 'passed' "$OUT/test-$n.log" | tail -1)"
  (cd "build-gpu/$n" && timeout 100 ctest -L cuda -E test_cuda_ops --output-on-failure) >"$OUT/ctest-$n.log" 2>&1
  echo "$n ctest: $(grep -E 'tests passed|tests failed' "$OUT/ctest-$n.log")"
done
tg() { # build, model, environment...
  local b=$1 m=$2; shift 2
  echo "$b $m $* $(env "$@" timeout 40 "build-gpu/$b/hearth" bench --model /tmp/hearth-bench-"$m" --backend cuda -p 71 \
    -n 128 -r 3 --tg-ctx 71 2>&1 | grep -E '^\| tg128 ')"
}
names=(cmake); for v in "${variants[@]}"; do [ -x "build-gpu/${v%%:*}/hearth" ] && names+=("${v%%:*}"); done
for m in 0.5b 3b; do
  for b in "${names[@]}"; do tg "$b" $m X=1; done
  for b in "${names[@]}"; do tg "$b" $m HEARTH_GEMV_RING=2; done
  tg cmake $m X=1
done 2>&1 | tee "$OUT/ab.txt"
for b in "${names[@]}"; do
  echo "== bench_cuda gemv: $b"; timeout 30 "build-gpu/$b/tests/cuda/bench_cuda" gemv 2>&1 | grep -E "^\| [03]"
done | tee "$OUT/gemv.txt"
