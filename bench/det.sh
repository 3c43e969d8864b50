#!/usr/bin/env bash
# bench/det.sh — a device call for run-to-run determinism (bench/NOTES.md round 22, "Next session" 1; written in
# session 18, never run): two Release builds, main as it is (build-gpu/stack) and main with
# bench/patches/round23-det-splitk.patch applied (build-gpu/det: the prefill GEMM's split-K partials stored one slice per
# split and summed in order instead of float atomics). For each build: the CUDA tests, greedy ids of three runs per model
# (printed: where runs 2 and 3 first differ from run 1), then pp71/pp512/tg128/x32 on the 3B. The decode norm's
# shared float atomics (gemv_q4.cu ss_add) are in both builds, so if the patched build's runs still differ, that sum
# is the rest. Logs in $OUT. Run it from a clean tree: it applies the patch in place and reverts it at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
STACK_TARGETS="hearth_cli test_cuda_ops test_cuda_model" . bench/stack_build.sh
B0=$B
git apply bench/patches/round23-det-splitk.patch || { echo "the patch does not apply"; exit 1; }
trap 'git apply -R bench/patches/round23-det-splitk.patch' EXIT
B1=build-gpu/det
cmake -S . -B $B1 -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT/build-det.log" 2>&1 &&
  cmake --build $B1 -j16 --target hearth_cli test_cuda_ops test_cuda_model >>"$OUT/build-det.log" 2>&1 ||
  { echo "patched build failed"; tail -30 "$OUT/build-det.log"; exit 1; }
mk_models 3b 0.5b
wait
for v in 0 1; do
  b=$([ $v = 0 ] && echo $B0 || echo $B1); h=$b/hearth
  ( cd $b && timeout 150 ctest -R 'test_cuda_ops|test_cuda_model' -E stack >"$OUT/ctest-$v.log" 2>&1; echo "build $v ctest rc $?" )
  grep -E "tests passed|Failed" "$OUT/ctest-$v.log" | head -5
  for m in 3b 0.5b; do
    for r in 1 2 3; do H=$h ids_run base: $m "$OUT/ids-$v-$m-$r.txt"; done
    for r in 2 3; do ids_diff "$OUT/ids-$v-$m-1.txt" "$OUT/ids-$v-$m-$r.txt" "build $v $m, run $r against run 1"; done
  done
  timeout 120 $h bench --model /tmp/hearth-bench-3b --backend cuda -p 71,512 -n 128 -r 3 --tg-ctx 71 --batch 32 \
    >"$OUT/bench-$v.txt" 2>&1
  echo "build $v 3b:"; grep -E '^\| (pp|tg)' "$OUT/bench-$v.txt"
done
