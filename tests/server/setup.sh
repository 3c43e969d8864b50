#!/usr/bin/env bash
# tests/server/setup.sh — installs the server tests' node dependencies (the official `openai`
# client, pinned in package-lock.json) into tests/server/node_modules. Needs npm and the registry;
# scripts/test.sh calls it before the build. The fixture models are made later, by CTest
# (server.fixtures runs make-fixtures.sh with the freshly built hearth binary).
set -euo pipefail
cd "$(dirname "$0")"
if [ -f node_modules/openai/package.json ] &&
   [ "$(node -p "require('./node_modules/openai/package.json').version")" = \
     "$(node -p "require('./package-lock.json').packages['node_modules/openai'].version")" ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
