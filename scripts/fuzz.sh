#!/usr/bin/env bash
# scripts/fuzz.sh — builds the libFuzzer targets (fuzz/fuzz_*.c; clang, ASan + UBSan over the whole
# library) in build-fuzz/ and runs each for a bounded time on its committed seeds. Any crash, leak,
# UBSan report, slow unit (-timeout) or memory blow-up (-rss_limit_mb) fails the script; the input
# that did it is left in build-fuzz/fuzz-artifacts/<target>/ (reproduce: build-fuzz/fuzz/<target> FILE).
#   HEARTH_FUZZ_SECONDS   seconds per target (default 60)
#   HEARTH_FUZZ_TARGETS   the targets to run (default: every fuzz/fuzz_*.c)
# Corpora: fuzz/corpus/<target>/ is read only (seeds from fuzz/make-seeds.py); what a run discovers
# goes to build-fuzz/fuzz-corpus/<target>/ and is reused by the next run on this machine. The Jinja
# and request targets also read the real chat templates when the shared data directory has them.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${HEARTH_FUZZ_SECONDS:-60}
bash scripts/install-deps.sh # clang
[ -x scripts/fetch-tokenizers.sh ] && bash scripts/fetch-tokenizers.sh # fuzz_tok_encode loads qwen3's
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHEARTH_FUZZ=ON -DHEARTH_SANITIZE=ON \
  -DHEARTH_CUDA=OFF -DHEARTH_WERROR=ON >/dev/null
targets=${HEARTH_FUZZ_TARGETS:-$(cd fuzz && ls fuzz_*.c | sed 's/\.c$//')}
# shellcheck disable=SC2086
cmake --build build-fuzz -j"$(nproc 2>/dev/null || echo 2)" --target $targets
shared=${HEARTH_SHARED:-$PWD/../shared}
export HEARTH_SHARED=$shared
failed=()
for t in $targets; do
  work=build-fuzz/fuzz-corpus/$t art=build-fuzz/fuzz-artifacts/$t/
  mkdir -p "$work" "$art"
  extra=()
  if [ "$t" = fuzz_chat_jinja ] && [ -d "$shared/data/chat-templates" ]; then extra+=("$shared/data/chat-templates"); fi
  echo "fuzz.sh: $t for ${secs}s"
  # detect_leaks: a leak is a failure; -timeout: one input running 10 s is a hang
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "build-fuzz/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=2048 \
      -artifact_prefix="$art" -print_final_stats=1 "$work" "fuzz/corpus/$t" "${extra[@]}" \
      >"build-fuzz/fuzz-$t.log" 2>&1; then
    failed+=("$t")
    echo "fuzz.sh: $t FAILED — last lines of build-fuzz/fuzz-$t.log:" >&2
    tail -60 "build-fuzz/fuzz-$t.log" >&2
    ls -l "$art" >&2
  else
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "build-fuzz/fuzz-$t.log" | tr '\n' ' '
    echo
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: all targets ran ${secs}s without a finding"
