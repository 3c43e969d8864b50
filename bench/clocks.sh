#!/usr/bin/env bash
# bench/clocks.sh — the GPU's SM clock, power and throttle reasons while tg128 runs on the mkmodel 0.5B and 3B
# (bench/NOTES.md, round 16: every stage of the decode kernels costs 1-2 µs, several times its instruction count;
# a clock held below its maximum under the weight stream would explain part of it). Samples nvidia-smi every 50 ms
# beside `hearth bench`, then prints min / median / max of the SM clock over the run and the throttle reasons seen.
# Needs a built CLI (B, default build-gpu/cmake) and the checkpoints of bench/gpu.sh (made if missing).
#   bash bench/clocks.sh            logs in $OUT/clocks-<model>.csv
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
B=${B:-build-gpu/cmake}
command -v nvidia-smi >/dev/null || { echo "clocks: no nvidia-smi"; exit 0; }
nvidia-smi --query-gpu=clocks.max.sm,clocks.max.mem,power.limit --format=csv
for m in 0.5b 3b; do
  case $m in 0.5b) cfg=configs/qwen2.5-0.5b-instruct.json ;; 3b) cfg=configs/qwen2.5-3b-instruct.json ;; esac
  dir=/tmp/hearth-bench-$m
  [ -f "$dir/model.safetensors" ] || timeout 120 "$B/hearth" mkmodel --config "$cfg" --out "$dir" >/dev/null
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader,nounits -lms 50 >"$OUT/clocks-$m.csv" 2>/dev/null &
  smi=$!
  sleep 0.5
  echo "$m $(timeout 60 "$B/hearth" bench --model "$dir" --backend cuda -p 71 -n 128 -r 5 --tg-ctx 71 2>&1 | grep -E '^\| tg128 ')"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  # samples taken while the GPU was busy (power above a quarter of the run's largest draw)
  pmax=$(awk -F', ' '$4 > m { m = $4 } END { print m + 0 }' "$OUT/clocks-$m.csv")
  awk -F', ' -v p="$pmax" '$4 > p / 4 { print $2 }' "$OUT/clocks-$m.csv" | sort -n >"$OUT/clocks-$m.busy"
  n=$(wc -l <"$OUT/clocks-$m.busy")
  [ "$n" -gt 0 ] || { echo "$m: no busy samples"; continue; }
  echo "$m: $n busy samples, SM clock MHz min $(head -1 "$OUT/clocks-$m.busy") median $(sed -n "$(((n + 1) / 2))p" \
    "$OUT/clocks-$m.busy") max $(tail -1 "$OUT/clocks-$m.busy"), max power $pmax W; throttle reasons (count):" \
    "$(awk -F', ' -v p="$pmax" '$4 > p / 4 { print $6 }' "$OUT/clocks-$m.csv" | sort | uniq -c | tr '\n' ' ')"
done
