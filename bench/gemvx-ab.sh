#!/usr/bin/env bash
# bench/gemvx-ab.sh — one device call (session 39, issue 36): decode batches of 2-8 sequences with the GEMV declining
# matrices whose x (n rows × K f16, held in shared memory) passes HEARTH_GEMV_XMAX bytes, which then take the
# tensor-core GEMM (as 9+ rows do). Why: the 3B's x8 step (2.98 ms) is slower than its x16 step (2.33 ms); the down
# projection's x at 8 rows is 176 KB, one GEMV block an SM. Builds this tree into B (reused on a warm machine), makes
# the 3B and 0.5B checkpoints, runs `hearth bench -p 16 -n 64 -r 2 --batch 2,4,6,8` per model and setting in two
# interleaved rounds. Run on the GPU machine from the repository root with .deps carried:
#   timeout 590 bash bench/gemvx-ab.sh   (logs in $OUT; B: build dir, /tmp/b; XMAXS: the settings, bytes)
set -uo pipefail
O=${OUT:-/tmp/o}; mkdir -p "$O"
. bench/deps.sh
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/progress.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$O/progress.txt"
B=${B:-/tmp/b}; H=$B/hearth
( cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" && cmake --build $B -j"$(nproc)" --target hearth_cli ) >"$O/build.log" 2>&1 ||
  { el "build failed"; grep -B2 -A8 " error" "$O/build.log" | head -40; exit 1; }
el built
[ -f /tmp/m-3b/model.safetensors ] || $H mkmodel --config configs/qwen2.5-3b-instruct.json --out /tmp/m-3b >/dev/null 2>&1
[ -f /tmp/m-05/model.safetensors ] || $H mkmodel --config configs/qwen2.5-0.5b-instruct.json --out /tmp/m-05 >/dev/null 2>&1
el "models made"
END=${END:-560}; left() { echo $(( END - ($(date +%s) - t0) )); }
b() { local tag=$1; shift; timeout 120 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
for r in 1 2; do
  for x in ${XMAXS:-inf 98304 49152 16384}; do
    for m in 3b 05; do
      [ "$(left)" -gt 20 ] || break 3
      if [ "$x" = inf ]; then e=HEARTH_NONE=1; else e=HEARTH_GEMV_XMAX=$x; fi
      b "$m x$x r$r" $e $H bench --model /tmp/m-$m --backend cuda -p 16 -n 64 -r 2 --batch 2,4,6,8
    done
  done
done
el done
