#!/usr/bin/env bash
# Print the struct offsets of a CPython build's internals (x86_64, default
# build), read from its own headers by compiling tools/cpython-offsets.c.
# Usage: tools/dump-cpython-offsets.sh <include-dir> <arch-include-dir>
#   e.g. tools/dump-cpython-offsets.sh /usr/include/python3.11 /usr/include/x86_64-linux-gnu/python3.11
#        tools/dump-cpython-offsets.sh ~/.pyenv/versions/3.12.1/include/python3.12 ~/.pyenv/versions/3.12.1/include/python3.12
# Output: "name value" lines on stdout; the pyconfig.h actually used on stderr.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 <include-dir> <arch-include-dir>" >&2; exit 2; }
INC=$(realpath "$1")
ARCH=$(realpath "$2")
[ -f "$INC/Python.h" ] || { echo "no Python.h in $INC" >&2; exit 1; }
[ -d "$INC/internal" ] || { echo "no internal/ headers in $INC" >&2; exit 1; }
[ -f "$ARCH/pyconfig.h" ] || { echo "no pyconfig.h in $ARCH" >&2; exit 1; }
SRC=$(cd "$(dirname "$0")" && pwd)/cpython-offsets.c
CC=${CC:-gcc}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Debian's <inc>/pyconfig.h is a wrapper doing
# `#include <x86_64-linux-gnu/python3.N/pyconfig.h>`: make that resolve to
# this build's arch dir rather than the host's /usr/include, through a link
# in a private dir (not -I of the tree's usr/include: in a root file system
# that would put its libc headers before the host's and mix two glibcs).
EXTRA=()
case "$ARCH" in
  */x86_64-linux-gnu/python3.*)
    mkdir -p "$work/inc/x86_64-linux-gnu"
    ln -s "$ARCH" "$work/inc/x86_64-linux-gnu/$(basename "$ARCH")"
    EXTRA=(-I"$work/inc") ;;
esac
FLAGS=(-std=gnu11 -O0 -w -DPy_BUILD_CORE -I"$INC" -I"$ARCH" "${EXTRA[@]}")
# Report which pyconfig.h the preprocessor really used (guards against the
# host's /usr/include winning for an extracted tree).
"$CC" "${FLAGS[@]}" -M "$SRC" | tr ' \\' '\n\n' | grep -E 'pyconfig\.h$' | sort -u | sed 's/^/# pyconfig: /' >&2 || true
"$CC" "${FLAGS[@]}" "$SRC" -o "$work/cpython-offsets"
"$work/cpython-offsets"
