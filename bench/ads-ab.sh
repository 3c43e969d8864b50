#!/usr/bin/env bash
# bench/ads-ab.sh — one device call (session 39, issue 36): batched-decode attention past 8 rows on attn_decode_smem
# (a block a query head) against the split-key attn_decode, at three contexts, by the bench-only knobs
# HEARTH_ADS_MAX / HEARTH_ADS_LEN in one build. Builds this tree (CUDA, no server) into B, makes the 3B checkpoint,
# runs `hearth bench -p 128 -n 64 -r 2 --tg-ctx L --batch 16,32` per setting and context in interleaved rounds, and
# test_cuda_ops fast after the first round, by priority within END seconds. Settings: off (HEARTH_ADS_MAX=8: the
# split-key kernel past 8 rows, the choice before session 39), rule (the default: attn_decode_smem past 8 rows while
# every row is at most ADS_SHORT_LEN keys), anylen (HEARTH_ADS_LEN=100000: at every length, what a longer threshold
# would cost). Run on the GPU machine from the repository root with .deps carried:
#   timeout 590 bash bench/ads-ab.sh   (logs in $OUT; B: build dir, /tmp/b; CTXS: contexts, "71 448 1570")
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
[ -f /tmp/m-05/model.safetensors ] || $H mkmodel --config configs/qwen2.5-0.5b-instruct.json --out /tmp/m-05 >/dev/null 2>&1
el "model made"
END=${END:-560}; left() { echo $(( END - ($(date +%s) - t0) )); }
declare -A CFG=([off]="HEARTH_ADS_MAX=8" [rule]="HEARTH_NONE=1" [anylen]="HEARTH_ADS_LEN=100000")
b() { local tag=$1; shift; timeout 120 env "$@" 2>&1 | grep -E "^\| (tg|pp)" | tr -s ' ' | sed "s/^/$tag /" | tee -a "$O/ab.txt"; }
round() {
  for L in ${CTXS:-71 448 1570}; do
    for s in off rule anylen; do
      [ "$(left)" -gt 30 ] || return
      b "ctx$L $s r$r" ${CFG[$s]} $H bench --model /tmp/m-3b --backend cuda -p 128 -n 64 -r 2 --tg-ctx "$L" --batch 16,32
    done
  done
}
r=1; round; el "round 1"
[ "$(left)" -gt 120 ] && { timeout 90 $B/tests/cuda/test_cuda_ops fast >"$O/test_ops.log" 2>&1
  el "test_cuda_ops fast rc $? $(tail -1 "$O/test_ops.log")"; grep -iE "fail|mismatch" "$O/test_ops.log" | head -8 | tee -a "$O/progress.txt"; }
# the 0.5B (hd 64, 14 heads: x32 takes 192 keys a pass, x16 256) at the short context, off / rule, twice
for r in 1 2; do for s in off rule; do
  [ "$(left)" -gt 150 ] && b "05 ctx71 $s r$r" ${CFG[$s]} $H bench --model /tmp/m-05 --backend cuda -p 128 -n 64 -r 2 --batch 16,32
done; done
[ "$(left)" -gt 150 ] && { r=2; round; el "round 2"; }
el done
