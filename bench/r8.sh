#!/usr/bin/env bash
# bench/r8.sh — the first device call of round 8 (bench/NOTES.md, "Branch cuda-r8"): the usual build, tests and
# e2e of bench/gpu.sh, then e2e decode A/B runs of this round's knobs and of a GEMV_MINB=3 build, all on the
# mkmodel checkpoints gpu.sh made. On the GPU machine, in a carried copy of the tree:
#   bash bench/r8.sh        (about 5 minutes; logs under $OUT)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
CTEST_FIRST=1 BENCH_PARTS=gemv DEADLINE_S=200 E2E_ARGS="-p 71 -n 128 -r 3 --tg-ctx 71,1570 --batch 8" \
  bash bench/gpu.sh full >"$OUT/full.txt" 2>&1
grep -E "passed|failed|FAIL|Test +#|^\| tg|== " "$OUT/full.txt" | grep -v "^ok"
# three blocks of 8 warps per SM (fewer registers each): whether the next kernel's blocks then fit beside
PREFIX=$ROOT/.deps/root/usr
cmake -S . -B build-gpu/minb3 -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_CUDA_FLAGS=-DGEMV_MINB=3 >"$OUT/minb3.log" 2>&1 &&
  cmake --build build-gpu/minb3 -j"$(nproc)" >>"$OUT/minb3.log" 2>&1 || echo "minb3 build failed"
export LD_LIBRARY_PATH=$PREFIX/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
tg() { # binary, model, environment...
  local h=$1 m=$2; shift 2
  echo "$m $* $(env "$@" timeout 40 "$h" bench --model /tmp/hearth-bench-"$m" --backend cuda -p 71 -n 128 -r 3 \
    --tg-ctx 71 2>&1 | grep -E '^\| tg128 ')"
}
for m in 0.5b 3b; do
  tg build-gpu/cmake/hearth $m X=1
  tg build-gpu/cmake/hearth $m HEARTH_GEMV_NW16=0
  tg build-gpu/cmake/hearth $m HEARTH_ATTN_OLD=1
  tg build-gpu/cmake/hearth $m HEARTH_ATTN_NS=2
  [ -x build-gpu/minb3/hearth ] && tg build-gpu/minb3/hearth $m X=1
  [ -x build-gpu/minb3/hearth ] && tg build-gpu/minb3/hearth $m HEARTH_GEMV_PER_SM=2
done 2>&1 | tee "$OUT/ab.txt"
