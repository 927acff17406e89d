#!/usr/bin/env bash
# The Python wheel (maturin, through python/gputrace_build.py, the backend python/pyproject.toml
# names: it builds libgputrace.so into maturin's data directory first).
#   scripts/wheel.sh build [DIR]   builds it into DIR (default .whl-gputrace/) with pip, after
#                                  installing the build's requirements (maturin, cargo-zigbuild,
#                                  ziglang) from PyPI into target/wheel-tools/; then builds the
#                                  sdist and checks that it holds the library's packages
#   scripts/wheel.sh test [DIR]    installs DIR's wheel into a fresh virtual environment with pip
#                                  and tests the installed copy: the glibc baseline of both
#                                  binaries, `gputrace report` on a bundled trace (identical to
#                                  the source build's), `python -m gputrace`, the fake-CUDA
#                                  end-to-end tests with the installed library and `gputrace run`,
#                                  and a `pip install --target` layout
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${2:-.whl-gputrace}
TOOLS=target/wheel-tools
PIPQ=(-q --disable-pip-version-check --root-user-action=ignore)

build() {
  [ -x "$TOOLS/bin/python" ] || python3 -m venv "$TOOLS"
  local reqs
  mapfile -t reqs < <("$TOOLS/bin/python" -c '
import tomllib
with open("python/pyproject.toml", "rb") as f:
    print(*tomllib.load(f)["build-system"]["requires"], sep="\n")')
  "$TOOLS/bin/python" -m pip install "${PIPQ[@]}" "${reqs[@]}"
  mkdir -p "$DIR"
  rm -f "$DIR"/gputrace-*.whl
  local t0=$SECONDS log=target/wheel-build.log
  # pip -v passes on the backend's output (cargo's, the ELF checks): kept in $log.
  if ! "$TOOLS/bin/python" -m pip wheel -v --disable-pip-version-check --no-build-isolation \
    --no-deps -w "$DIR" ./python >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "wheel.sh: the build failed; its whole output is in $log" >&2
    exit 1
  fi
  grep -E '^ *(gputrace_build:|Finished)' "$log"
  local whl
  whl=$(one_wheel)
  echo "wheel: $whl, $(stat -c %s "$whl") bytes, built in $((SECONDS - t0)) s"
  echo "== the sdist (no compiling): maturin's, with the library's packages added"
  rm -f "$DIR"/gputrace-*.tar.gz
  (cd python && "$OLDPWD/$TOOLS/bin/python" -c '
import sys, gputrace_build
print(gputrace_build.build_sdist(sys.argv[1]))' "$OLDPWD/$DIR") 2>>"$log"
  local sd=("$DIR"/gputrace-*.tar.gz) listing
  listing=$(tar tzf "${sd[0]}")
  for f in interpose/Cargo.toml interpose/src/lib.rs cupti-sys/Cargo.toml analyzer/Cargo.toml \
    format/Cargo.toml gputrace_build.py; do
    grep -q "^gputrace-[^/]*/$f\$" <<<"$listing" || {
      echo "wheel.sh: the sdist lacks $f" >&2
      exit 1
    }
  done
  echo "sdist: ${sd[0]}, $(stat -c %s "${sd[0]}") bytes"
}

one_wheel() {
  local w=("$DIR"/gputrace-*.whl)
  if [ "${#w[@]}" != 1 ] || [ ! -f "${w[0]}" ]; then
    echo "wheel.sh: expected one gputrace wheel in $DIR, found: ${w[*]}" >&2
    exit 1
  fi
  echo "${w[0]}"
}

test_wheel() {
  local whl
  whl=$(one_wheel)
  echo "testing $whl ($(stat -c %s "$whl") bytes)"
  tmp=$(mktemp -d)  # global: the EXIT trap removes it
  trap 'rm -rf "$tmp"' EXIT
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/python" -m pip install "${PIPQ[@]}" --no-index "$whl"
  local g=$tmp/venv/bin/gputrace lib
  lib=$(echo "$tmp"/venv/lib/python3*/site-packages/gputrace/libgputrace.so)

  echo "== glibc baseline (gputrace_build.py check; maturin checked the command's libraries)"
  python3 python/gputrace_build.py check "$g" "$lib"
  echo "== the same, read by objdump -T: newest GLIBC_ version must be 2.17 or older"
  local f newest
  for f in "$g" "$lib"; do
    newest=$(objdump -T "$f" | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sort -uV | tail -1)
    echo "$(basename "$f"): $newest"
    if [ "$(printf '%s\n' "$newest" GLIBC_2.17 | sort -V | tail -1)" != GLIBC_2.17 ]; then
      echo "FAIL: $f needs $newest" >&2
      exit 1
    fi
  done

  echo "== gputrace report on a bundled trace: the installed copy prints what the source build prints"
  cargo build -q -p gputrace-analyzer --bin gputrace
  local ex=examples/torch-mlp.gtrace
  diff <("$g" report "$ex") <(target/debug/gputrace report "$ex")
  diff <("$g" report --json "$ex") <(target/debug/gputrace report --json "$ex")
  "$g" report "$ex" | sed -n 2p
  echo "== python -m gputrace runs the installed command"
  diff <("$tmp/venv/bin/python" -m gputrace report "$ex") <("$g" report "$ex")
  "$tmp/venv/bin/python" -c 'import gputrace, sys
assert gputrace.library() == sys.argv[1], gputrace.library()' "$(realpath "$lib")"

  echo "== fake-CUDA end-to-end tests with the installed libgputrace.so and gputrace run"
  GPUTRACE_LIB=$lib GPUTRACE_BIN=$g cargo test -p gputrace-tests

  echo "== the wheel's metadata carries the README and both licence texts"
  # Read whole before grep -q (which stops early: a pipe under pipefail would fail then).
  local meta listing
  meta=$(unzip -p "$whl" '*.dist-info/METADATA')
  listing=$(unzip -l "$whl")
  grep -q "^Description-Content-Type: text/markdown" <<<"$meta" \
    || { echo "FAIL: no README in the wheel's metadata" >&2; exit 1; }
  for f in LICENSE LICENSE-MIT; do
    grep -q "dist-info/.*$f\$" <<<"$listing" || { echo "FAIL: $f not in the wheel" >&2; exit 1; }
  done
  echo "== pip install --target: the command finds the library in the package beside bin/"
  python3 -m pip install "${PIPQ[@]}" --no-index --target "$tmp/site" "$whl"
  (cd "$tmp" && env -u GPUTRACE_LIB "$tmp/site/bin/gputrace" run -o "$tmp/traces" -- true)
  PYTHONPATH=$tmp/site python3 -m gputrace --version
  echo "== without cargo: pip stops with one clear line"
  local nocargo=$tmp/nocargo.log
  if env PATH=/usr/bin:/bin "$PWD/$TOOLS/bin/python" -m pip wheel -q --disable-pip-version-check \
    --no-build-isolation --no-deps -w "$tmp/none" ./python >"$nocargo" 2>&1 \
    || ! grep -q "cargo not found; install the wheel instead" "$nocargo"; then
    cat "$nocargo" >&2
    echo "FAIL: without cargo the build should stop with 'cargo not found; install the wheel instead'" >&2
    exit 1
  fi
  grep -m1 "cargo not found" "$nocargo"
  echo "wheel: all checks passed"
}

case ${1:-} in
  build) build ;;
  test) test_wheel ;;
  *)
    sed -n '2,11p' "$0" >&2
    exit 2
    ;;
esac
