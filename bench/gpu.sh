#!/usr/bin/env bash
# bench/gpu.sh — one call on the GPU machine: build the CUDA backend, run its tests (label cuda)
# and the decode/prefill benchmarks; every log goes to $OUT (the device tool brings it back).
#
# The device has no package registry: the jansson/pcre2/utf8proc .debs travel in .deps/ (git-ignored,
# name it in `carry`); fetch them here once with
#   mkdir -p .deps && cd .deps && apt-get download libjansson-dev libjansson4 libpcre2-dev \
#     libpcre2-8-0 libutf8proc-dev libutf8proc2
# Usage: bench/gpu.sh [tests|bench|all|e2e|full] [bench_cuda args: all|3b|0.5b|gemv]
#   full: ONE cmake build (-j nproc), then by priority under a deadline (DEADLINE_S, default 380 s
#   from the start): test_cuda_ops, bench_cuda breakdown, e2e 3B + 0.5B, ctest -L cuda, bench_cuda 3b/0.5b/gemv
#   (CTEST_FIRST=1: ctest right after test_cuda_ops; E2E_ARGS: hearth bench arguments; BENCH_PARTS)
#   tests: kernel tests (standalone build) + ctest -L cuda (full build); bench: tests/cuda/bench_cuda;
#   all: both; e2e: full build + `hearth bench --backend cuda` W1/W2 on mkmodel checkpoints (MODELS="3b 0.5b")
set -uo pipefail
what=${1:-all}
bargs=${2:-all}
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. bench/deps.sh # PREFIX, LD_LIBRARY_PATH
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv;
  nvcc --version | tail -1; git log --oneline -1 2>/dev/null; } 2>&1 | tee "$OUT/machine.txt"
t0=$(date +%s)
if [ "$what" = full ]; then
  end=$(( t0 + ${DEADLINE_S:-380} ))
  left() { echo $(( end - $(date +%s) )); }
  # run NAME SECONDS CMD...: time-boxed to min(SECONDS, time left - 5); skipped when under 15 s remain
  run() { local n=$1 s=$2; shift 2; local l; l=$(left); [ "$l" -lt 15 ] && { echo "SKIP $n (deadline)"; return 1; }
    [ "$s" -gt $(( l - 5 )) ] && s=$(( l - 5 )); local a; a=$(date +%s); timeout "$s" "$@"; local r=$?
    echo "== $n: rc $r, $(( $(date +%s) - a )) s"; return $r; }
  B=build-gpu/cmake
  if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF \
       -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT/cmake.log" 2>&1 &&
       cmake --build $B -j"$(nproc)" >>"$OUT/cmake.log" 2>&1; }; then
    echo "full build failed"; grep -E "error|Error" "$OUT/cmake.log" | head -30; exit 1
  fi
  echo "build: $(( $(date +%s) - t0 )) s"
  if [ -n "${SASS:-}" ] && command -v cuobjdump >/dev/null; then # disassembly of the named .cu files' objects
    for f in $SASS; do o=$(find $B -name "$f.cu.o" | head -1); [ -n "$o" ] && cuobjdump -sass "$o" >"$OUT/$f.sass" 2>&1; done
  fi
  rc=0
  run test_cuda_ops 60 $B/tests/cuda/test_cuda_ops >"$OUT/test.log" 2>&1 || rc=1
  grep -vE "^  (matmul|rope|gather)" "$OUT/test.log" | tail -25
  # the fast group with the launch shapes only large models take forced on (ctest's test_cuda_ops.fast_we0 / fast_cores)
  for kv in HEARTH_TEST_GEMV=whole HEARTH_TEST_GEMV=cores; do
    run "test_cuda_ops fast $kv" 40 env "$kv" $B/tests/cuda/test_cuda_ops fast >"$OUT/test-${kv#*=}.log" 2>&1 || rc=1
    tail -1 "$OUT/test-${kv#*=}.log"
  done
  if [ -n "${CTEST_FIRST:-}" ]; then # accuracy first (test_cuda_model, test_oracle_cuda.*)
    (cd $B && run ctest 150 ctest -L cuda -E test_cuda_ops --output-on-failure) >"$OUT/ctest.log" 2>&1 || rc=1
    grep -E "Test +#|tests passed|tests failed|CHECK|FAIL|on cuda|step|== " "$OUT/ctest.log" | tail -40
  fi
  run breakdown 45 $B/tests/cuda/bench_cuda breakdown 2>&1 | tee "$OUT/bench.log"
  for m in ${MODELS:-3b 0.5b}; do
    case $m in 0.5b) cfg=configs/qwen2.5-0.5b-instruct.json ;; 3b) cfg=configs/qwen2.5-3b-instruct.json ;; esac
    dir=/tmp/hearth-bench-$m
    [ -f "$dir/model.safetensors" ] || run mkmodel-$m 90 $B/hearth mkmodel --config "$cfg" --out "$dir" >/dev/null
    # shellcheck disable=SC2086
    run e2e-$m 120 $B/hearth bench --model "$dir" --backend cuda ${E2E_ARGS:--p 71,512,1570 -n 128 -r 3 --tg-ctx 71,1570 --batch 8,32} \
      2>&1 | tee -a "$OUT/e2e.log" || rc=1
  done
  if [ -z "${CTEST_FIRST:-}" ]; then
    (cd $B && run ctest 150 ctest -L cuda -E test_cuda_ops --output-on-failure) >"$OUT/ctest.log" 2>&1 || rc=1
    grep -E "Test +#|tests passed|tests failed|CHECK|FAIL|on cuda|== " "$OUT/ctest.log" | tail -30
  fi
  for p in ${BENCH_PARTS:-3b 0.5b gemv}; do run bench-$p 60 $B/tests/cuda/bench_cuda "$p" 2>&1 | tee -a "$OUT/bench.log"; done
  if [ -n "${PROFILE:-}" ] && command -v ncu >/dev/null; then
    # hardware counters (clocks left alone) for the kernels named in PROFILE (a regex), in the program
    # PROFILE_APP names: gemv (bench_cuda gemv) or model (hearth bench, 3B: pp1570 then 4 decode steps);
    # PROFILE_SKIP launches of those kernels skipped first; PROFILE_SECTIONS or the default set
    case ${PROFILE_APP:-model} in
      gemv) app="$B/tests/cuda/bench_cuda gemv" ;;
      *) app="$B/hearth bench --model /tmp/hearth-bench-3b --backend cuda -p ${PROFILE_PP:-1570} -n 4 -r 1" ;;
    esac
    secs=${PROFILE_SECTIONS:-"--section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis"}
    # shellcheck disable=SC2086
    run ncu "${PROFILE_S:-120}" ncu --clock-control none -k "regex:${PROFILE}" --launch-skip "${PROFILE_SKIP:-0}" \
      --launch-count "${PROFILE_N:-12}" $secs $app >"$OUT/ncu.txt" 2>&1
    grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issued Warp|No Eligible|Warp Cycles Per Issued|Stall|gpu__time" "$OUT/ncu.txt" | head -${PROFILE_LINES:-150}
  fi
  echo "total: $(( $(date +%s) - t0 )) s"
  exit $rc
fi
# A standalone build of just what the CUDA tests and benchmarks need (the CUDA files, the CPU
# backend they are checked against, base/ and quant/): other modules' work in progress in the same
# tree cannot break it. (The full CMake build is `cmake -DCMAKE_CUDA_ARCHITECTURES=90 ...`.)
B=${BDIR:-build-gpu}
mkdir -p "$B/obj"
rm -f "$B"/obj/*.o
NV="nvcc ${NVXTRA:-} -std=c++17 -O3 -lineinfo -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90 -Werror=all-warnings -Iinclude -Isrc"
CC="gcc -std=c11 -O2 -D_GNU_SOURCE -fno-strict-aliasing -DHEARTH_HAVE_CUDA=1 -Iinclude -Isrc -Itests"
{
  for f in src/backend/cuda/*.cu; do $NV -c "$f" -o "$B/obj/cu_$(basename "$f" .cu).o" & done
  for f in src/base/*.c src/quant/*.c src/backend/backend.c src/backend/cpu/*.c; do
    fl=""
    case "$f" in
      *_avx512.c) fl="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c -mavx2" ;;
      *_avx2.c) fl="-mavx2 -mfma -mf16c -mavxvnni" ;;
    esac
    $CC $fl -c "$f" -o "$B/obj/c_$(basename "$f" .c).o" &
  done
  wait
  LIBS="-L/usr/local/cuda/lib64 -lcudart_static -lstdc++ -lm -lpthread -ldl -lrt"
  $CC tests/cuda/test_cuda_ops.c "$B"/obj/*.o -o "$B/test_cuda_ops" $LIBS &&
  $CC tests/cuda/bench_cuda.c "$B"/obj/*.o -o "$B/bench_cuda" $LIBS
} >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
[ -x "$B/bench_cuda" ] || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
if [ "$what" = all ] || [ "$what" = tests ]; then
  timeout 80 $B/test_cuda_ops 2>&1 | tee "$OUT/test.log" | grep -v "^  \(matmul\|rope\|gather\)" ; rc=${PIPESTATUS[0]}
  grep -E "FAIL|CHECK failed" "$OUT/test.log" | head -40
fi
if [ "$what" = all ] || [ "$what" = tests ] || [ "$what" = e2e ]; then
  # the full library (jansson etc. from .deps): `ctest -L cuda` runs test_cuda_ops, test_cuda_model
  # and tests/model's oracle checks on the GPU (test_oracle_cuda.*)
  if cmake -S . -B build-gpu/cmake -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF \
       -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT/cmake.log" 2>&1 &&
     cmake --build build-gpu/cmake -j"$(nproc)" >>"$OUT/cmake.log" 2>&1; then
    if [ "$what" != e2e ]; then
      (cd build-gpu/cmake && timeout 150 ctest -L cuda -E test_cuda_ops --output-on-failure) 2>&1 | tee "$OUT/ctest.log" |
        grep -E "Test +#|tests passed|tests failed|CHECK|FAIL|on cuda" ; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    fi
  else
    echo "full build failed (see cmake.log)"; grep -E "error|Error" "$OUT/cmake.log" | head -20; rc=1
  fi
fi
if [ "$what" = e2e ]; then
  # W1/W2 through the public CLI on random-weight checkpoints of the real configs
  H=build-gpu/cmake/hearth
  for m in ${MODELS:-3b 0.5b}; do
    case $m in 0.5b) cfg=configs/qwen2.5-0.5b-instruct.json ;; 3b) cfg=configs/qwen2.5-3b-instruct.json ;; esac
    dir=/tmp/hearth-bench-$m
    [ -f "$dir/model.safetensors" ] || timeout 120 "$H" mkmodel --config "$cfg" --out "$dir" >/dev/null
    timeout 150 "$H" bench --model "$dir" --backend cuda -p 71,512,1570 -n 128 -r 3 --tg-ctx 71,1570 --batch 8,32 \
      2>&1 | tee -a "$OUT/e2e.log" || rc=1
  done
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  : >"$OUT/bench.log"
  # one process per part, each time-boxed, so that a failure in one still leaves the others' numbers
  parts=$bargs; [ "$bargs" = all ] && parts="3b 0.5b gemv breakdown"
  for p in $parts; do
    case $p in 3b) tl=120 ;; 0.5b) tl=70 ;; breakdown*) tl=60 ;; *) tl=50 ;; esac
    timeout $tl $B/bench_cuda "$p" 2>&1 | tee -a "$OUT/bench.log" || rc=1
  done
fi
exit $rc
