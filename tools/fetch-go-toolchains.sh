#!/usr/bin/env bash
# Fetch Debian's Go toolchains (golang-1.N-go + golang-1.N-src) into a cache,
# using a private apt configuration so the system's sources are never touched.
# Usage: tools/fetch-go-toolchains.sh [1.19 1.21 ...]   (default: tools/go-versions)
# Result: $OOMSNAP_CACHE/go/1.N/bin/go (GOROOT = $OOMSNAP_CACHE/go/1.N)
set -euo pipefail
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
VERSIONS=("$@")
. "$(dirname "${BASH_SOURCE[0]}")/lib/go-versions.sh"
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=("${GO_VERSIONS[@]}")

APTDIR=$CACHE/apt
GODIR=$CACHE/go
mkdir -p "$APTDIR"/{lists/partial,archives/partial,etc} "$GODIR"

missing=()
for v in "${VERSIONS[@]}"; do
  # Complete = the go command, the runtime sources and the assembler headers.
  [ -x "$GODIR/$v/bin/go" ] && [ -f "$GODIR/$v/src/runtime/mprof.go" ] &&
    [ -f "$GODIR/$v/pkg/include/textflag.h" ] || missing+=("$v")
done
[ ${#missing[@]} -eq 0 ] && { echo "go toolchains cached: ${VERSIONS[*]}"; exit 0; }

# The machine's own Debian mirror (tools/lib/debian-mirror.sh), never a host
# name of ours: users have their own mirrors and proxies.
# shellcheck source=tools/lib/debian-mirror.sh
. "$(dirname "$0")/lib/debian-mirror.sh"
MIRROR=$(debian_mirror)
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
: > "$APTDIR/etc/sources.list"
for suite in bookworm bookworm-backports trixie trixie-backports sid; do
  echo "deb [signed-by=$KEYRING] $MIRROR $suite main" >> "$APTDIR/etc/sources.list"
done
APTOPTS=(-o Dir::Etc::SourceList="$APTDIR/etc/sources.list"
         -o Dir::Etc::SourceParts=/dev/null
         -o Dir::State::Lists="$APTDIR/lists"
         -o Dir::Cache::Archives="$APTDIR/archives"
         -o Dir::Cache::pkgcache="$APTDIR/pkgcache.bin"
         -o Dir::Cache::srcpkgcache="$APTDIR/srcpkgcache.bin"
         -o APT::Architecture=amd64 -o Debug::NoLocking=1 -q)
apt-get "${APTOPTS[@]}" update >/dev/null

for v in "${missing[@]}"; do
  work=$(mktemp -d)
  ( cd "$work" && apt-get "${APTOPTS[@]}" -o APT::Sandbox::User=root download "golang-$v-go" "golang-$v-src" >/dev/null )
  root=$work/root
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$root"; done
  # The -go package ships /usr/lib/go-1.N with symlinks into /usr/share/go-1.N (the -src package).
  rm -rf "$GODIR/$v.tmp"; mkdir -p "$GODIR/$v.tmp"
  cp -a "$root/usr/lib/go-$v/." "$GODIR/$v.tmp/"
  # The -go package links into the -src package's tree (/usr/share/go-1.N):
  # replace every link that leaves the GOROOT by a copy of its target, so the
  # cached GOROOT is self-contained.
  while IFS= read -r l; do
    t=$(readlink "$l")
    rel=${l#"$GODIR/$v.tmp"}
    case "$t" in
      /*) src=$root$t ;;
      *) src=$(realpath -m "$root/usr/lib/go-$v$(dirname "$rel")/$t") ;;
    esac
    case "$src" in "$root"/*) ;; *) continue ;; esac
    rm "$l"; cp -a "$src" "$l"
  done < <(find "$GODIR/$v.tmp" -type l)
  "$GODIR/$v.tmp/bin/go" version >/dev/null
  rm -rf "$GODIR/$v"; mv "$GODIR/$v.tmp" "$GODIR/$v"
  rm -rf "$work"
  echo "go $v: $("$GODIR/$v/bin/go" version)"
done
