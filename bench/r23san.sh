#!/usr/bin/env bash
# bench/r23san.sh — round 23 call 5 (bench/NOTES.md): where the NDET prologue's illegal instruction is. Prepare the tree that
# stops first, here (it travels in the carried, git-ignored .deps): rm -rf .deps/r23src && mkdir -p .deps/r23src &&
# git archive 2215c22 | tar -x -C .deps/r23src. Then on the GPU machine, .deps carried: bash bench/r23san.sh (~60 s + the
# sanitizer run). Output in $OUT: the build log, the sanitizer report, the SASS of the 11-warp gate/up instance.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hearth-r23san-out}; mkdir -p "$OUT"
. bench/deps.sh
H=""
. bench/call_lib.sh
B=/tmp/bs
cmake_build $B test_cuda_ops -lineinfo .deps/r23src
echo "build rc $? at $SECONDS s"
T=$B/tests/cuda/test_cuda_ops
timeout 100 compute-sanitizer --kernel-name kns=gemv_q4 --print-limit 2 $T repeat >$OUT/san.txt 2>&1
echo "sanitizer rc $? at $SECONDS s"
grep -E 'Illegal|illegal|at 0x|gemv_q4.cu:|ptx.cuh:|Invalid|ERROR SUMMARY' $OUT/san.txt | head -16
F=_Z14gemv_q4_kernelI6__halfLi1ELi1ELi2ELi11ELi4EEv9gemv_args
cuobjdump -sass -fun $F $T >$OUT/sass.txt 2>&1; echo "sass lines $(wc -l <$OUT/sass.txt)"
pc=$(grep -m1 -oE 'at 0x[0-9a-f]+' $OUT/san.txt | sed 's/at 0x//')
[ -n "$pc" ] && python3 - "$pc" "$OUT/sass.txt" <<'PY'
import sys, re
pc = int(sys.argv[1], 16); lines = open(sys.argv[2]).read().splitlines()
idx = [i for i, l in enumerate(lines) if re.search(r'/\*%04x\*/' % pc, l)]
for i in idx[:1]:
    print("\n".join(lines[max(0, i - 24):i + 6]))
print("createpolicy / cache-hint instructions:", sum('CCTL' in l or 'POLICY' in l.upper() or 'LDGSTS' in l for l in lines))
PY
