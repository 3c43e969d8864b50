#!/usr/bin/env bash
# bench/cpu_ab.sh — interleaved A/B of two hearth CPU builds and llama.cpp on this machine (issue 35 item 1):
# per round, for each model, `hearth bench` of the old binary, of the new binary (both kernel sets unless
# SETS says otherwise) and llama-bench, one after the other, so that a load change hits all of them alike.
#
#   OLD=/tmp/hearth-old NEW=build-cpu/hearth bash bench/cpu_ab.sh [ROUNDS]
#
# Environment: Q05 / Q3B (hearth checkpoints, default /tmp/q05 /tmp/q3b), GG05 / GG3B (llama.cpp GGUFs,
# default /tmp/gg/qwen2.5-{0.5b,3b}-q4_0.gguf: bench/peer-gguf.sh MODEL /tmp/gg), LLAMA (llama-bench, default
# /tmp/llcpu/bin/llama-bench: `bench/peer-bin.sh /tmp/llcpu`; `bench/peer-bin.sh /tmp/llhas haswell` for SETS=avx2),
# SETS ("default avx2": HEARTH_CPU for the hearth runs; "default" = the cpuid choice), MODELS ("0.5b 3b").
# Prints one line per run with the load average; the medians over rounds are left to the reader.
set -uo pipefail
ROUNDS=${1:-3}
OLD=${OLD:?OLD=path of the old hearth binary}
NEW=${NEW:-build-cpu/hearth}
Q05=${Q05:-/tmp/q05}
Q3B=${Q3B:-/tmp/q3b}
GG05=${GG05:-/tmp/gg/qwen2.5-0.5b-q4_0.gguf}
GG3B=${GG3B:-/tmp/gg/qwen2.5-3b-q4_0.gguf}
LLAMA=${LLAMA:-/tmp/llcpu/bin/llama-bench}
SETS=${SETS:-"default avx2"}
MODELS=${MODELS:-"0.5b 3b"}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus"
load() { cut -d' ' -f1-3 /proc/loadavg; }
for r in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    case $m in
      0.5b) hm=$Q05; gg=$GG05; hargs="-p 512 -n 128"; largs="-p 512 -n 128" ;;
      3b) hm=$Q3B; gg=$GG3B; hargs="-p 64 -n 64"; largs="-p 64 -n 64" ;;
      *) echo "unknown model $m" >&2; exit 2 ;;
    esac
    for s in $SETS; do
      for b in old new; do
        bin=$OLD; [ $b = new ] && bin=$NEW
        env=(); [ "$s" != default ] && env=(HEARTH_CPU="$s")
        out=$(env "${env[@]}" "$bin" bench --model "$hm" --threads 2 $hargs -r 3 --probe 2>&1 |
          grep -E '^\| (pp|tg)|floor' | sed -E 's/ +/ /g' | tr '\n' ' ')
        echo "r$r $m hearth-$b $s load=$(load) $out"
      done
    done
    out=$(LD_LIBRARY_PATH=$(dirname "$LLAMA") "$LLAMA" -m "$gg" -t 2 $largs -r 3 2>&1 | grep -E ' (pp|tg)[0-9]+ ' |
      awk -F'|' '{print $(NF-2) $(NF-1)}' | sed -E 's/ +/ /g' | tr '\n' ' ')
    echo "r$r $m llama.cpp load=$(load) $out"
  done
done
