#!/usr/bin/env bash
# bench/gpu.sh — one call on the GPU machine: build the CUDA backend, run its tests (label cuda)
# and the decode/prefill benchmarks; every log goes to $OUT (the device tool brings it back).
#
# The device has no package registry: the jansson/pcre2/utf8proc .debs travel in .deps/ (git-ignored,
# name it in `carry`); fetch them here once with
#   mkdir -p .deps && cd .deps && apt-get download libjansson-dev libjansson4 libpcre2-dev \
#     libpcre2-8-0 libutf8proc-dev libutf8proc2
# Usage: bench/gpu.sh [tests|bench|all] [bench_cuda args: all|3b|0.5b|gemv]
set -uo pipefail
what=${1:-all}
bargs=${2:-all}
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p .deps/root
  for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done
fi
PREFIX=$ROOT/.deps/root/usr
export LD_LIBRARY_PATH=$PREFIX/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv;
  nvcc --version | tail -1; git log --oneline -1 2>/dev/null; } 2>&1 | tee "$OUT/machine.txt"
t0=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT/cmake.log" 2>&1 ||
  { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" --target test_cuda_ops bench_cuda >"$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
if [ "$what" = all ] || [ "$what" = tests ]; then
  build-gpu/tests/cuda/test_cuda_ops 2>&1 | tee "$OUT/test.log" | grep -v "^  \(matmul\|rope\|gather\)" ; rc=${PIPESTATUS[0]}
  grep -E "FAIL|CHECK failed" "$OUT/test.log" | head -40
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  build-gpu/tests/cuda/bench_cuda $bargs 2>&1 | tee "$OUT/bench.log" || rc=1
fi
exit $rc
