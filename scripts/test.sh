#!/usr/bin/env bash
# The one command that builds hearth and passes its tests on a fresh Debian machine:
#   scripts/test.sh            install deps, fetch test data, build (-Werror), run every CPU test
#   scripts/test.sh --asan     the same build with AddressSanitizer + UBSan, unit/oracle/tok/chat/hub tests
# CUDA tests (label `cuda`) need a GPU and run through bench/gpu.sh on the device machine instead.
# Tests labelled `shared` read data only ../shared holds (the exact Qwen2.5 and Gemma 4 chat
# templates, $HEARTH_SHARED overrides the place); without it they are left out and counted as NOT
# run, never as passed. HEARTH_CUDA=OFF skips compiling the CUDA backend (.ci/run's fresh-clone run).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-default}
bash scripts/install-deps.sh
[ -x scripts/fetch-tokenizers.sh ] && bash scripts/fetch-tokenizers.sh
[ -x tests/server/setup.sh ] && bash tests/server/setup.sh
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc # compile the CUDA backend wherever the toolkit exists
fi
cuda=()
[ -n "${HEARTH_CUDA:-}" ] && cuda=(-DHEARTH_CUDA="$HEARTH_CUDA")
shared=${HEARTH_SHARED:-$(dirname "$PWD")/shared}
exclude=cuda
if [ ! -d "$shared/data" ]; then
  exclude='cuda|shared'
fi
# says how many `shared` tests were left out (after configuring, so the count is the build's own)
not_run() {
  [ "$exclude" = cuda ] && return 0
  local n
  # -FA: not the fixture-setup tests ctest would add (server.fixtures runs in the main suite anyway)
  n=$(ctest --test-dir "$1" -N -L shared -FA '.*' | sed -n 's/^Total Tests: //p')
  echo "scripts/test.sh: NOT RUN: ${n:-?} tests labelled 'shared' ($shared is absent; .ci/run runs them)"
}
jobs=$(nproc 2>/dev/null || echo 2)
if [ "$mode" = "--asan" ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DHEARTH_SANITIZE=ON -DHEARTH_CUDA=OFF -DHEARTH_WERROR=ON
  cmake --build build-asan -j"$jobs"
  not_run build-asan
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -L 'unit|oracle|tok|chat|server_c|hub' -LE "$exclude" -j"$jobs"
  not_run build-asan
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHEARTH_WERROR=ON "${cuda[@]}"
  cmake --build build -j"$jobs"
  not_run build
  ctest --test-dir build --output-on-failure -LE "$exclude" -j"$jobs"
  not_run build
fi
