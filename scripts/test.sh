#!/usr/bin/env bash
# The one command that builds hearth and passes its tests on a fresh Debian machine:
#   scripts/test.sh            install deps, fetch test data, build (-Werror), run every CPU test
#   scripts/test.sh --asan     the same build with AddressSanitizer + UBSan, unit/oracle/tok/chat tests
# CUDA tests (label `cuda`) need a GPU and run through bench/gpu.sh on the device machine instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-default}
bash scripts/install-deps.sh
[ -x scripts/fetch-tokenizers.sh ] && bash scripts/fetch-tokenizers.sh
[ -x tests/server/setup.sh ] && bash tests/server/setup.sh
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc # compile the CUDA backend wherever the toolkit exists
fi
jobs=$(nproc 2>/dev/null || echo 2)
if [ "$mode" = "--asan" ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DHEARTH_SANITIZE=ON -DHEARTH_CUDA=OFF -DHEARTH_WERROR=ON
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -L 'unit|oracle|tok|chat|server_c' -j"$jobs"
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHEARTH_WERROR=ON
  cmake --build build -j"$jobs"
  ctest --test-dir build --output-on-failure -LE cuda -j"$jobs"
fi
