#!/usr/bin/env bash
# tests/server/make-gemma4-fixture.sh HEARTH_BIN OUT_DIR — OUT_DIR/tiny-gemma4 for gemma4.test.mjs, assembled at
# test time (nothing committed): a random Gemma 4 E-style model (tiny-gemma4-config.json: PLE, KV sharing,
# double-wide MLP, both layer types, 262,145 rows: the real 262,144 plus one, since the test tokenizer
# is Gemma 3's with the Gemma 4 chat tokens written in and keeps its <image_soft_token> at id 262,144,
# which the load-time vocabulary check rightly refuses against 262,144 rows) + the real Gemma 4 tokenizer + the real
# Gemma 4 -it chat template (as chat_template.jinja). Sources as in make-fixtures.sh.
set -euo pipefail
bin=${1:?usage: make-gemma4-fixture.sh HEARTH_BIN OUT_DIR}
out=${2:?usage: make-gemma4-fixture.sh HEARTH_BIN OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
tok="${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers/gemma4"
tmpl="${HEARTH_CHAT_TEMPLATES:-${HEARTH_SHARED:-$here/../../../shared}/data/chat-templates}/gemma-4-it.jinja"
for f in "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$tmpl"; do
  [ -f "$f" ] || { echo "make-gemma4-fixture: missing $f (the tokenizer: scripts/fetch-tokenizers.sh; the template: ../shared, hence the label shared)" >&2; exit 1; }
done
mkdir -p "$out"
"$bin" mkmodel --config "$here/tiny-gemma4-config.json" --out "$out/tiny-gemma4" --seed 3
cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$out/tiny-gemma4/"
cp "$tmpl" "$out/tiny-gemma4/chat_template.jinja"
