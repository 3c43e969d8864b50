#!/usr/bin/env bash
# bench/cpu_pairs.sh — A/B of two hearth binaries in interleaved pairs, order alternated per pair, on one model;
# prints every pair and the median of the pairs' ratios (new / old) with their range. For changes smaller than
# this VM's drift (memory bandwidth moves by ~30 % within minutes), which unpaired medians cannot see.
#
#   bench/cpu_pairs.sh OLD NEW [PAIRS] [THREADS] [MODEL]        # defaults: 8 pairs, 2 threads, /tmp/q3b
#   ARGS="-p 16 -n 128" bench/cpu_pairs.sh ... /tmp/q05        # hearth bench arguments (default -p 16 -n 64)
#   ROW='^\| tg32x4' ARGS="-p 16 -n 32 --batch 4" bench/cpu_pairs.sh ...   # which table row to read
# HEARTH_CPU and other environment pass through to both binaries. Remember: in a build folder the executable is
# `make hearth_cli` (`make hearth` builds only the library).
set -euo pipefail
OLD=${1:?old binary}; NEW=${2:?new binary}; N=${3:-8}; T=${4:-2}; M=${5:-/tmp/q3b}
ARGS=${ARGS:-"-p 16 -n 64"}; ROW=${ROW:-'^\| tg'}
cmp -s "$OLD" "$NEW" && echo "warning: $OLD and $NEW are the same file contents" >&2
for i in $(seq 1 "$N"); do
  if [ $((i % 2)) = 1 ]; then order="$OLD $NEW"; else order="$NEW $OLD"; fi
  for b in $order; do
    # shellcheck disable=SC2086
    v=$("$b" bench --model "$M" --threads "$T" $ARGS -r 1 2>&1 | grep -E "$ROW" | head -1 | awk -F'|' '{print $3}' | tr -d ' ')
    if [ "$b" = "$OLD" ]; then ro=$v; else rn=$v; fi
  done
  echo "$ro $rn"
done | python3 -c '
import sys, statistics as s
p = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
r = sorted(n / o for o, n in p)
print("pairs (old/new):", " ".join(f"{o:.1f}/{n:.1f}" for o, n in p))
print(f"median old {s.median([o for o, _ in p]):.2f} new {s.median([n for _, n in p]):.2f}  paired ratio {s.median(r):.3f} [{r[0]:.3f}..{r[-1]:.3f}]")'
