# bench/stack_build.sh — sourced by bench/stack*.sh from the repository root: OUT, the unpacked .debs (deps.sh), and a
# Release build in build-gpu/stack of the targets given (default hearth_cli; STACK_FLAGS: extra CMAKE_CUDA_FLAGS).
# Sets B (the build folder) and H (the hearth binary); sources bench/call_lib.sh (cmake_build, left, run_env, mk_models,
# ids_run, ids_diff, tg_bench); exits the caller when the build fails (log $OUT/build-stack.log).
OUT=${OUT:-/tmp/hearth-stack-out}
mkdir -p "$OUT"
. bench/deps.sh
B=build-gpu/stack
H=$B/hearth
. bench/call_lib.sh
cmake_build $B "${STACK_TARGETS:-hearth_cli}" "${STACK_FLAGS:-}" || { echo "build failed"; tail -30 "$OUT/build-stack.log"; exit 1; }
