# bench/call_lib.sh — helpers the device call scripts share (sourced after OUT, H and, for cmake_build, PREFIX (bench/deps.sh)
# are set; by bench/stack_build.sh and the round 23-24 scripts). A variant is NAME:VAR=VALUE[,VAR=VALUE...] ("base:" runs
# with nothing set). H may be set per call (H=... tg_bench ...).

cmake_build() { # DIR TARGETS [CUDA_FLAGS] [SRC] -> a Release build of SRC (default .) in DIR; log $OUT/build-DIR's-name.log
  local log="$OUT/build-${1##*/}.log"
  cmake -S "${4:-.}" -B "$1" -DCMAKE_BUILD_TYPE=Release -DHEARTH_SERVER=OFF -DHEARTH_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX" ${3:+"-DCMAKE_CUDA_FLAGS=$3"} >"$log" 2>&1 && cmake --build "$1" -j16 --target $2 >>"$log" 2>&1
}
left() { # seconds left before DEADLINE_S (default 540) counted from T0 (set by the caller, else from sourcing this file)
  echo $(( ${DEADLINE_S:-540} - ($(date +%s) - ${T0:-$CALL_LIB_T0}) ))
}
CALL_LIB_T0=$(date +%s)
run_env() { # SPEC CMD... -> CMD with SPEC's variables set
  local spec=$1; shift
  local envs=${spec#*:}
  [ "$envs" = "$spec" ] && envs=""
  env ${envs//,/ } "$@"
}
mk_models() { # M... -> mkmodel checkpoints of configs/qwen2.5-M-instruct.json in /tmp/hearth-bench-M, in the background
  local m
  for m; do
    [ -f /tmp/hearth-bench-$m/model.safetensors ] ||
      timeout 120 $H mkmodel --config configs/qwen2.5-$m-instruct.json --out /tmp/hearth-bench-$m >/dev/null &
  done
}
ids_run() { # SPEC M FILE [N] -> N (100) greedy ids of model M after a fixed 71-token prompt, into FILE (stderr FILE.err)
  run_env "$1" timeout 60 $H run --model /tmp/hearth-bench-$2 --backend cuda --prompt-ids "$(seq 11 81 | tr '\n' ' ')" \
    -n "${4:-100}" --ids --ignore-eos >"$3" 2>"$3.err"
}
ids_diff() { # A B LABEL -> where two id files first differ
  python3 - "$1" "$2" "$3" <<'PY'
import sys
a = open(sys.argv[1]).read().split(); b = open(sys.argv[2]).read().split()
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print(f"ids {sys.argv[3]}: {len(a)} vs {len(b)} tokens, first difference at {n}")
PY
}
tg_bench() { # M SPEC ROUND -> prints tg128's median tok/s (of 5) after a 71-token prompt; log $OUT/bench-M-NAME-ROUND.txt
  local log="$OUT/bench-$1-${2%%:*}-$3.txt"
  run_env "$2" timeout 90 $H bench --model /tmp/hearth-bench-$1 --backend cuda -p 71 -n 128 -r 5 --tg-ctx 71 >"$log" 2>&1
  grep -E '^\| tg' "$log" | head -1 | awk -F'|' '{print $3}' | tr -d ' '
}
ctest_cuda() { # BUILD [TIMEOUT] -> ctest -L cuda -E oracle in BUILD (log $OUT/ctest.log): the summary and any failure lines
  ( cd "$1" && timeout "${2:-200}" ctest -j3 -L cuda -E oracle --output-on-failure >"$OUT/ctest.log" 2>&1; echo "ctest rc $?" )
  grep -E "tests passed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest.log" | head -20
  grep -E "CHECK failed|REQUIRE failed|gpu error|illegal" "$OUT/ctest.log" | sort | uniq -c | head -12
}
tg_specs() { # MIN_LEFT MODEL:BUILD:ROUND... -> tg128 (tg_bench) of each with BUILD's hearth, skipped under MIN_LEFT s left
  local min=$1 spec m b r; shift
  for spec; do
    IFS=: read -r m b r <<<"$spec"
    [ "$(left)" -gt "$min" ] || { echo "deadline: skipped $spec"; continue; }
    echo "$m ${b##*/} r$r $(H=$b/hearth tg_bench "$m" "${b##*/}:" "$r")"
  done
}
fastest_3b() { # TG_FILE -> the build whose 3B tg128 rounds (tg_specs' lines "3b BUILD rR TOK/S") add up highest
  awk '$1=="3b"{s[$2]+=$4} END{b=""; for (k in s) if (b=="" || s[k] > s[b]) b=k; print b}' "$1"
}
whole_tables() { # BUILD MIN_LEFT M... -> the issue's whole benchmark table of each model with BUILD's hearth ($OUT/table-M.txt)
  local b=$1 min=$2 m; shift 2
  for m; do
    [ "$(left)" -gt "$min" ] || { echo "deadline: no table for $m"; continue; }
    echo "== whole table, $m, build ${b##*/}"
    timeout $(( $(left) - 10 )) $b/hearth bench --model /tmp/hearth-bench-$m --backend cuda -p 71,512,1570 -n 128 -r 3 \
      --tg-ctx 71,1570 --batch 8,32 2>&1 | grep -E '^\| [pt]' | tee "$OUT/table-$m.txt"
  done
}
