#!/usr/bin/env bash
# bench/peer-bin.sh — a runnable copy of the llama.cpp peer's bin/ (../shared/peers/llama.cpp/bin) for the side-by-side
# scripts (cpu_ab.sh's LLAMA, w5-cpu.sh's LLAMA_BIN_DIR).
#
#   bench/peer-bin.sh OUT_DIR [VARIANT]
#
# Why a copy: the shared folder can arrive with its library symlinks flattened into small text files that name their
# targets (libllama.so.0 holding "libllama.so.0.0.0"), which the loader rejects ("file too short"); this restores
# them. VARIANT keeps one CPU backend (`libggml-cpu-VARIANT.so`) and drops the others, which is how a run caps the
# peer to the same ISA level as `HEARTH_CPU` caps hearth: `haswell` beside `HEARTH_CPU=avx2`, `zen4` on a Xeon whose
# `sapphirerapids` variant dies with SIGILL (sessions 27 and 33). Prints OUT_DIR/bin.
set -euo pipefail
OUT=${1:?OUT_DIR}; VARIANT=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${PEER_BIN:-$ROOT/../shared/peers/llama.cpp/bin}
[ -d "$SRC" ] || { echo "peer-bin: no $SRC" >&2; exit 1; }
rm -rf "$OUT/bin"
mkdir -p "$OUT"
cp -r "$SRC" "$OUT/bin"
chmod -R u+w "$OUT/bin"
cd "$OUT/bin"
for f in *; do
  [ -L "$f" ] && continue
  # a flattened symlink: a few bytes of text naming another file of this folder
  if [ "$(stat -c %s "$f")" -lt 256 ] && ! grep -q -P '[^\x20-\x7e]' "$f" 2>/dev/null; then
    t=$(cat "$f")
    if [ -e "$t" ] && [ "$t" = "$(basename "$t")" ]; then rm "$f"; ln -s "$t" "$f"; fi
  fi
done
if [ -n "$VARIANT" ]; then
  [ -e "libggml-cpu-$VARIANT.so" ] || { echo "peer-bin: no libggml-cpu-$VARIANT.so" >&2; exit 1; }
  for f in libggml-cpu-*.so; do [ "$f" = "libggml-cpu-$VARIANT.so" ] || rm -f "$f"; done
fi
echo "$OUT/bin"
