# bench/deps.sh — sourced by the GPU-machine scripts (gpu.sh, ab.sh, trace.sh) from the repository root: the
# machine has no package registry, so the jansson/pcre2/utf8proc .debs travel in .deps/ (git-ignored; gpu.sh's
# header says how to fetch them). Unpacked once into .deps/root (scripts may start together: each unpacks aside
# and one rename wins); sets PREFIX for cmake and LD_LIBRARY_PATH for the binaries.
if ls .deps/*.deb >/dev/null 2>&1 && [ ! -f .deps/root/.done ]; then
  tmp=$(mktemp -d .deps/unpack.XXXX)
  for f in .deps/*.deb; do dpkg -x "$f" "$tmp"; done
  touch "$tmp/.done"
  mv -T "$tmp" .deps/root 2>/dev/null || rm -rf "$tmp"
fi
PREFIX=$PWD/.deps/root/usr
export LD_LIBRARY_PATH=$PREFIX/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
