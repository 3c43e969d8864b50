#!/usr/bin/env bash
# bench/ads-ab.sh — one device call (session 39, issue 36): batched-decode attention past 8 rows on attn_decode_smem
# (a block a query head) against the split-key attn_decode, at three contexts, by the bench-only knobs
# HEARTH_ADS_MAX / HEARTH_ADS_C in one build. Builds this tree (CUDA, no server) into B, makes the 3B checkpoint,
# then runs `hearth bench -p 128 -n 64 -r 2 --tg-ctx L --batch 16,32` per setting and context in interleaved rounds,
# by priority within END seconds. Run on the GPU machine from the repository root with .deps carried:
#   timeout 590 bash bench/ads-ab.sh   (logs in $OUT; B: build dir, /tmp/b; CTXS: contexts, "71 512 1570")
set -uo pipefail
O=${OUT:-/tmp/o}; mkdir -p "$O"
. bench/deps.sh
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/progress.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$O/progress.txt"
B=${B:-/tmp/b}; H=$B/hearth
( cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" && cmake --build $B -j"$(nproc)" --target hearth_cli test_cuda_ops ) >"$O/build.log" 2>&1 ||
  { el "build failed"; grep -B2 -A8 " error" "$O/build.log" | head -40; exit 1; }
el built
[ -f /tmp/m-3b/model.safetensors ] || $H mkmodel --config configs/qwen2.5-3b-instruct.json --out /tmp/m-3b >/dev/null 2>&1
el "model made"
END=${END:-560}; left() { echo $(( END - ($(date +%s) - t0) )); }
# off: main's choice (x9-x32 on the split-key kernel); c96 / c192: x9-x32 on attn_decode_smem with at most 96 / 192
# keys a pass (x1-x8 capped the same way: the tg line of c96 is not main's)
declare -A CFG=([off]="HEARTH_NONE=1" [c96]="HEARTH_ADS_MAX=32 HEARTH_ADS_C=96" [c192]="HEARTH_ADS_MAX=32 HEARTH_ADS_C=192")
b() { local tag=$1; shift; timeout 120 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
round() {
  for L in ${CTXS:-71 512 1570}; do
    for s in off c96 c192; do
      [ "$(left)" -gt 30 ] || return
      b "ctx$L $s r$r" ${CFG[$s]} $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --tg-ctx "$L" --batch 16,32
    done
  done
}
r=1; round; el "round 1"
[ "$(left)" -gt 150 ] && { r=2; round; el "round 2"; }
el done
