#!/usr/bin/env bash
# Builds hearth if needed (Release) and runs it: scripts/run.sh serve (the default model, pulled
# into the Hugging Face cache on the first start), or scripts/run.sh serve --model DIR|ORG/NAME
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$root/build/hearth" ]; then
  bash "$root/scripts/install-deps.sh"
  cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$root/build" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
fi
exec "$root/build/hearth" "$@"
