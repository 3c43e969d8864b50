#!/usr/bin/env bash
# bench/gemm.sh — one call on the GPU machine for the prefill GEMM (issue 36 item 2): build only what it needs, check
# the wgmma kernel's SASS (HGMMA), run the probe tests/cuda/bench_gemm (correctness of the mma.sync and wgmma kernels
# against the exact SIMT kernel, row invariance, timings), then test_cuda_ops' wgmma and fused groups. Every log goes
# to $OUT.
# Usage (from the repository root, .deps/ carried as for gpu.sh): bash bench/gemm.sh [quick]
# Exit status: the probe's (0 all correct, 1 a correctness failure, 2 the wgmma kernel does not run here), or 3 when
# the build failed.
set -uo pipefail
OUT=${OUT:-/tmp/hearth-gpu-out}
B=${HB_BUILD:-/tmp/hb}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
. bench/deps.sh # PREFIX, LD_LIBRARY_PATH
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nvcc --version | tail -1;
  git log --oneline -1 2>/dev/null; } 2>&1 | tee "$OUT/machine.txt"
t0=$(date +%s)
if ! { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DHEARTH_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT/cmake.log" 2>&1 &&
     cmake --build "$B" -j"$(nproc)" --target bench_gemm test_cuda_ops >>"$OUT/cmake.log" 2>&1; }; then
  echo "build failed"; grep -E "error|Error" "$OUT/cmake.log" | head -30; exit 3
fi
echo "build: $(( $(date +%s) - t0 )) s"
obj=$B/CMakeFiles/hearth_cuda_sm90a.dir/src/backend/cuda/sm90a/gemm_wgmma.cu.o
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$obj" >"$OUT/gemm_wgmma.sass" 2>&1
  echo "SASS: $(grep -c HGMMA "$OUT/gemm_wgmma.sass") HGMMA, $(grep -c 'HMMA' "$OUT/gemm_wgmma.sass") HMMA," \
       "$(grep -cE 'LDL|STL' "$OUT/gemm_wgmma.sass") local loads/stores in gemm_wgmma.cu.o"
else
  echo "SASS: no cuobjdump on this machine"
fi
# by priority under a deadline (DEADLINE_S from the start, default 570 s: the device tool's 600 s call): the probe,
# then the ctest groups (each time-boxed to what is left)
end=$(( t0 + ${DEADLINE_S:-570} ))
left() { echo $(( end - $(date +%s) )); }
timeout $(( $(left) - 10 )) "$B/tests/cuda/bench_gemm" ${1:-} >"$OUT/bench_gemm.log" 2>&1
rc=$?
echo "bench_gemm: rc $rc ($(( $(date +%s) - t0 )) s from the start)"
grep -E "FAIL|wgmma kernel|row invariance|first element|non-finite|failures|^\| " "$OUT/bench_gemm.log" | head -200
for g in wgmma fused; do
  l=$(left)
  [ "$l" -lt 30 ] && { echo "SKIP test_cuda_ops $g (deadline)"; continue; }
  timeout $(( l - 5 )) "$B/tests/cuda/test_cuda_ops" $g >"$OUT/test_cuda_ops.$g.log" 2>&1
  echo "test_cuda_ops $g: rc $? ($(tail -1 "$OUT/test_cuda_ops.$g.log"))"
  grep -B2 -A2 "CHECK failed" "$OUT/test_cuda_ops.$g.log" | head -20
done
exit $rc
