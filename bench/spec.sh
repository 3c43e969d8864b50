#!/usr/bin/env bash
# bench/spec.sh — prompt-lookup speculation (the CPU, or BACKEND=cuda): decode tok/s and draft acceptance with and without it,
# in interleaved rounds (off, on, off, on ...) so that a busy machine's drift hits both alike, and a check that
# both print the same ids. Usage: bench/spec.sh HEARTH_BIN MODEL_DIR [ROUNDS] [THREADS]
#   repetitive: prompt "1 .. 10", 512 tokens (a random-weight model falls into cycles under greedy decoding)
#   no-match:   1,500 distinct prompt ids, 128 tokens (few n-grams recur; the drafts that are tried fail)
#   batch 8:    hearth bench's tg128x8 (8 sequences after 71 synthetic prompt tokens, one step for all) with and
#               without --speculate 8 (its ids are checked by tests/unit/test_spec, not here)
set -euo pipefail
bin=$1 model=$2 rounds=${3:-5} threads=${4:-2}
rep=$(seq -s ' ' 1 10)
nomatch=$(python3 -c "print(' '.join(str(5000 + i * 37) for i in range(1500)))")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # name prompt n k round
  "$bin" run --model "$model" --backend "${BACKEND:-cpu}" --threads "$threads" --prompt-ids "$2" -n "$3" --ids --ignore-eos --speculate "$4" --stats \
    >"$tmp/$1.k$4.ids" 2>"$tmp/err"
  grep -o '([0-9.]* tok/s).*speculation .*' "$tmp/err" | sed "s/^/$1 k$4 round $5 /"
}
for r in $(seq 1 "$rounds"); do
  for k in 0 8; do run repetitive "$rep" 512 "$k" "$r"; done
  cmp -s "$tmp/repetitive.k0.ids" "$tmp/repetitive.k8.ids" || { echo "repetitive: ids differ" >&2; exit 1; }
  for k in 0 8; do run no-match "$nomatch" 128 "$k" "$r"; done
  cmp -s "$tmp/no-match.k0.ids" "$tmp/no-match.k8.ids" || { echo "no-match: ids differ" >&2; exit 1; }
  for k in 0 8; do
    "$bin" bench --model "$model" --backend "${BACKEND:-cpu}" --threads "$threads" -p 71 -n 128 -r 1 --batch 8 --speculate "$k" >"$tmp/b8" 2>&1
    echo "batch8 k$k round $r $(grep -o 'tg128x8[^|]*| *[0-9.]*' "$tmp/b8" | awk '{print $NF}') tok/s" \
      "$(grep -o 'speculation: .*' "$tmp/b8" || echo 'speculation off')"
  done
done
