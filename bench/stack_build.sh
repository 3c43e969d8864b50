# bench/stack_build.sh — sourced by bench/stack*.sh from the repository root: OUT, the unpacked .debs (deps.sh), and a
# Release build in build-gpu/stack of the targets given (default hearth_cli; STACK_FLAGS: extra CMAKE_CUDA_FLAGS).
# Sets B (the build folder) and H (the hearth binary); exits the caller when the build fails. Then sources
# bench/call_lib.sh (run_env, mk_models, ids_run, ids_diff, tg_bench).
OUT=${OUT:-/tmp/hearth-stack-out}
mkdir -p "$OUT"
. bench/deps.sh
B=build-gpu/stack
H=$B/hearth
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$PREFIX" ${STACK_FLAGS:+"-DCMAKE_CUDA_FLAGS=$STACK_FLAGS"} >"$OUT/build.log" 2>&1 &&
  cmake --build $B -j16 --target ${STACK_TARGETS:-hearth_cli} >>"$OUT/build.log" 2>&1 ||
  { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
. bench/call_lib.sh
