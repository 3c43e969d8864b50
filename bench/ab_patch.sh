#!/usr/bin/env bash
# bench/ab_patch.sh — a lean device call for one CUDA change given as a patch file (e.g. an experiment's commit:
# `git show <commit> > .gpu/x.patch`, .gpu carried; the device's copy has no .git): A = this tree,
# B = a copy of it with AB_PATCH applied, both built on the device; then AB_TESTS (a ctest -R regex) on B, greedy ids
# of A and B compared over 100 tokens (the patch must not change a bit unless it says so), and tg128 of A and B
# interleaved, AB_ROUNDS rounds, on mkmodel checkpoints of AB_MODELS (0.5b 3b e2b e4b 12b; kept in
# /tmp/hearth-bench-<model> as bench/trace.sh keeps them). bench/ab.sh is the heavy form (gpu.sh's whole table beside).
# About 5-6 minutes for two small models; the 12B's mkmodel alone takes ~2. Logs in $OUT.
#   AB_PATCH=.gpu/pa1.patch AB_MODELS="e4b e2b" bash bench/ab_patch.sh
#   AB_TESTS='test_cuda_ops\.(fused|twins|graph_gemma4)|test_oracle_cuda\.gemma' (the default)
# A script that tees itself through a process substitution waits on named pids only (bench/NOTES.md, lesson 12).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
[ -f "${AB_PATCH:-}" ] || { echo "AB_PATCH: no such file: ${AB_PATCH:-}"; exit 2; }
. bench/deps.sh # PREFIX, LD_LIBRARY_PATH
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
git log --oneline -1 2>/dev/null || true
SRC_B=/tmp/ab-patch-src
rm -rf "$SRC_B" && mkdir -p "$SRC_B"
tar --exclude=./build-gpu --exclude=./.deps --exclude=./.git -cf - . | tar -x -C "$SRC_B"
(cd "$SRC_B" && { git apply "$ROOT/$AB_PATCH" 2>/dev/null || patch -p1 -s <"$ROOT/$AB_PATCH"; }) ||
  { echo "AB_PATCH does not apply"; exit 2; }
CM=(-DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90
  -DCMAKE_PREFIX_PATH="$PREFIX" -DHEARTH_BENCH_TOOLS=OFF)
BA=build-gpu/ab-a BB=build-gpu/ab-b
rm -f $BA/hearth $BB/hearth # a binary left by an earlier call on a warm machine is never timed by mistake
(cmake -S . -B $BA "${CM[@]}" >"$OUT/build-a.log" 2>&1 &&
  cmake --build $BA -j8 --target hearth_cli >>"$OUT/build-a.log" 2>&1 || echo "A build failed") &
pa=$!
(cmake -S "$SRC_B" -B $BB "${CM[@]}" >"$OUT/build-b.log" 2>&1 &&
  cmake --build $BB -j8 --target hearth_cli test_cuda_ops test_oracle >>"$OUT/build-b.log" 2>&1 || echo "B build failed") &
pb=$!
wait $pa
el "A built"
cfg() {
  case $1 in
  0.5b) echo configs/qwen2.5-0.5b-instruct.json ;;
  3b) echo configs/qwen2.5-3b-instruct.json ;;
  e2b | e4b | 12b) echo "configs/gemma-4-$1-it.json" ;;
  esac
}
read -r -a models <<<"${AB_MODELS:-e4b e2b}"
mk=()
for m in "${models[@]}"; do
  c=$(cfg "$m")
  [ -n "$c" ] || { echo "AB_MODELS: unknown model $m"; exit 2; }
  [ -f /tmp/hearth-bench-$m/model.safetensors ] ||
    { timeout 300 $BA/hearth mkmodel --config "$c" --out /tmp/hearth-bench-$m >/dev/null 2>&1 & mk+=($!); }
done
wait $pb
el "B built"
[ -x $BA/hearth ] && [ -x $BB/hearth ] || exit 1
(cd $BB && timeout 120 ctest -R "${AB_TESTS:-test_cuda_ops\.(fused|twins|graph_gemma4)|test_oracle_cuda\.gemma}" \
  --output-on-failure 2>&1 | tail -6)
el "B tested"
for p in "${mk[@]}"; do wait "$p"; done
el "models made"
for m in "${models[@]}"; do
  for t in a b; do
    timeout 90 build-gpu/ab-$t/hearth run --model /tmp/hearth-bench-$m --backend cuda --prompt-ids "$(seq -s ' ' 2 40)" \
      -n 100 --ids --ignore-eos >"$OUT/ids-$m-$t.txt" 2>/dev/null
  done
  if cmp -s "$OUT/ids-$m-a.txt" "$OUT/ids-$m-b.txt"; then echo "ids $m: A = B ($(wc -w <"$OUT/ids-$m-a.txt") words)"
  else echo "ids $m: A != B"; fi
done
for _ in $(seq "${AB_ROUNDS:-2}"); do
  for m in "${models[@]}"; do
    for t in a b; do
      echo "$t $m $(timeout 90 build-gpu/ab-$t/hearth bench --model /tmp/hearth-bench-$m --backend cuda -p 16 -n 128 -r 2 \
        2>&1 | grep -E '^\| tg128 ')"
    done
  done
done 2>&1 | tee "$OUT/ab.txt"
el "done"
