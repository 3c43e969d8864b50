#!/usr/bin/env bash
# bench/ab.sh — one device call for a change to the CUDA backend: gpu.sh's build, tests, e2e and GEMV micro-
# benchmarks of the tree as is, a baseline build beside it (AB_BASE: a directory of .cu/.cuh files copied over the
# tree's src/backend/cuda/, e.g. a previous commit's, or a whole source tree such as `git archive main`), test_cuda_ops on the baseline, tg128 A/B on both models in
# interleaved rounds, and (AB_TRACE=1) bench/trace.sh's timeline of the tree. About 4-5 minutes; logs in $OUT.
# AB_VARIANTS: space-separated name:CMAKE_CUDA_FLAGS builds of the tree (flags joined by commas), each tested and
# timed like the baseline (about a minute more each). AB_ENVS: space-separated name:VAR=value,VAR=value runs of the
# tree's own build with those environment variables (runtime knobs: no build, only the timing rounds).
#   AB_BASE=.ab-base bash bench/ab.sh
#   AB_BASE=.ab-base AB_VARIANTS="v1:-DMY_SWITCH=1" bash bench/ab.sh   (a -D switch the experiment's code reads)
#   AB_ENVS="x:MY_KNOB=1" bash bench/ab.sh   (a variable the experiment's code reads; the product reads none)
# The device tool brings back at most 8 files of $OUT, and ab.sh writes ~15 (with the trace): in a device call, point
# OUT at a scratch folder and tar it into the tool's folder, e.g.
#   R=$OUT; export OUT=/tmp/o; AB_BASE=.ab-base bash bench/ab.sh >$OUT/ab_all.txt 2>&1; tar czf $R/logs.tgz -C $OUT .
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/hearth-gpu-out}
mkdir -p "$OUT"
. bench/deps.sh # PREFIX, LD_LIBRARY_PATH (before gpu.sh starts beside the builds below)
CTEST_FIRST=1 BENCH_PARTS=gemv DEADLINE_S=${AB_DEADLINE_S:-240} E2E_ARGS=${AB_E2E:-"-p 71,1570 -n 128 -r 3 --tg-ctx 71,1570 --batch 32"} \
  bash bench/gpu.sh full >"$OUT/full.txt" 2>&1 &
full=$!
pids=()
rm -f build-gpu/base/hearth # a binary left by an earlier call on a warm machine is never timed by mistake
if [ -n "${AB_BASE:-}" ] && [ -d "$AB_BASE" ]; then
  rm -rf /tmp/ab-base && mkdir -p /tmp/ab-base
  if [ -f "$AB_BASE/CMakeLists.txt" ]; then # a whole tree (e.g. `git archive main`): the baseline is that tree
    cp -r "$AB_BASE"/. /tmp/ab-base/
  else # a folder of .cu/.cuh files over this tree's src/backend/cuda
    tar --exclude=./build-gpu --exclude=./.deps --exclude=./.ab-base -cf - . | tar -x -C /tmp/ab-base
    cp "$AB_BASE"/*.cu* /tmp/ab-base/src/backend/cuda/ # .cu and .cuh
  fi
  ( cmake -S /tmp/ab-base -B build-gpu/base -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT/build-base.log" 2>&1 &&
    cmake --build build-gpu/base -j4 --target hearth_cli test_cuda_ops >>"$OUT/build-base.log" 2>&1 || echo "base build failed" ) &
  pids+=($!)
fi
read -r -a variants <<<"${AB_VARIANTS:-}"
for v in "${variants[@]}"; do
  n=${v%%:*} f=${v#*:}
  case $v in *:*) ;; *) echo "AB_VARIANTS: $v has no ':flags'"; continue ;; esac
  case $n in cmake|base|trace) echo "AB_VARIANTS: $n is a reserved build name"; continue ;; esac
  rm -f "build-gpu/$n/hearth"
  ( cmake -S . -B "build-gpu/$n" -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX" "-DCMAKE_CUDA_FLAGS=${f//,/ }" >"$OUT/build-$n.log" 2>&1 &&
    cmake --build "build-gpu/$n" -j4 --target hearth_cli test_cuda_ops >>"$OUT/build-$n.log" 2>&1 || echo "build $n failed" ) &
  pids+=($!)
done
[ "${AB_TRACE:-0}" = 1 ] && { TRACE_STAGE=build TRACE_JOBS=4 bash bench/trace.sh & pids+=($!); }
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
wait $full
grep -E "passed|failed|FAIL|^\| (tg|pp)|== |^build" "$OUT/full.txt" | grep -v "^ok"
names=(cmake)
declare -A bdir envs
bdir[cmake]=cmake
for n in base "${variants[@]%%:*}"; do
  [ -x "build-gpu/$n/hearth" ] || continue
  timeout 60 "build-gpu/$n/tests/cuda/test_cuda_ops" >"$OUT/test-$n.log" 2>&1
  echo "$n test_cuda_ops rc $? $(grep -E 'passed' "$OUT/test-$n.log" | tail -1)"
  names+=("$n")
  bdir[$n]=$n
done
read -r -a envruns <<<"${AB_ENVS:-}"
for v in "${envruns[@]}"; do
  n=${v%%:*}
  [ -n "${bdir[$n]:-}" ] && { echo "AB_ENVS: $n is taken"; continue; }
  names+=("$n")
  bdir[$n]=cmake
  envs[$n]=${v#*:}
done
tg() { # run name, model
  local -a e=()
  [ -n "${envs[$1]:-}" ] && IFS=, read -r -a e <<<"${envs[$1]}"
  echo "$1 $2 $(env "${e[@]}" timeout 40 "build-gpu/${bdir[$1]}/hearth" bench --model /tmp/hearth-bench-"$2" --backend cuda \
    -p 71 -n 128 -r 3 --tg-ctx 71 2>&1 | grep -E '^\| tg128 ')"
}
for m in 0.5b 3b; do
  for r in $(seq "${AB_ROUNDS:-2}"); do for b in "${names[@]}"; do tg "$b" $m; done; done
done 2>&1 | tee "$OUT/ab.txt"
[ "${AB_TRACE:-0}" = 1 ] && TRACE_STAGE=run bash bench/trace.sh
exit 0
