#!/bin/sh
# gen-vmlinux-h.sh BPFTOOL BTF OUT: dump BTF as C (atomically, so a failed
# dump never leaves a truncated header behind).
set -eu
"$1" btf dump file "$2" format c > "$3.tmp"
mv "$3.tmp" "$3"
