#!/usr/bin/env bash
# Installs the Debian packages hearth builds and tests with. Idempotent.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libjansson-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev libcurl4-openssl-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# node + npm run the server tests with the official openai client and fetch the tokenizer packages.
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
