#!/usr/bin/env bash
# Build the Go test fixtures (tests/fixtures/go/heapfixture) with every cached
# Go toolchain, in every binary flavour oomsnap must read, and the userfaultfd
# trap target (tests/fixtures/go/uffdtrap) in the default flavour.
#
# Usage: tools/build-go-fixtures.sh [--force] [--verify] [1.N ...]
#   default versions: tools/go-versions
# Toolchains: $OOMSNAP_CACHE/go/1.N (GOROOT), from tools/fetch-go-toolchains.sh.
# Output:     $OOMSNAP_CACHE/fixtures/go/1.N/<mode>/heapfixture
#   modes: default       go build                      (CGO_ENABLED=0)
#          pie           -buildmode=pie                (CGO_ENABLED=0)
#          stripped      -ldflags='-s -w'              (CGO_ENABLED=0)
#          pie-stripped  -buildmode=pie -ldflags='-s -w' (CGO_ENABLED=0)
#          cgo           (1.26 only) CGO_ENABLED=1 -tags cgofixture
#                        -ldflags=-linkmode=external
#             $OOMSNAP_CACHE/fixtures/go/1.N/default/uffdtrap
#               (-ldflags=-checklinkname=0 on 1.23+: it pulls runtime.mbuckets)
# Offline: GOTOOLCHAIN=local GOPROXY=off GO111MODULE=off, per-version GOCACHE
# $OOMSNAP_CACHE/gocache-1.N. Inlining stays on (no -gcflags=-l): the fixture
# has a site reached through an inlined helper.
# A fixture is rebuilt only when a source file, this script or the toolchain's
# VERSION file is newer than it, so re-runs are fast. --force rebuilds all.
# --verify then runs every selected fixture at -rate 1 -profile and checks its
# census against its own heap profile (tests/fixtures/go/check_profile.py).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/tools/build-go-fixtures.sh
CACHE=${OOMSNAP_CACHE:-/var/cache/oomsnap}
SRC=$ROOT/tests/fixtures/go/heapfixture
TRAP_SRC=$ROOT/tests/fixtures/go/uffdtrap
OUT=$CACHE/fixtures/go
MODES=(default pie stripped pie-stripped)
CGO_VERSION=1.26

force=0 verify=0
VERSIONS=()
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    --verify) verify=1 ;;
    -h|--help) sed -n '2,24p' "$SELF"; exit 0 ;;
    1.*) VERSIONS+=("$a") ;;
    *) echo "build-go-fixtures: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
. "$(dirname "${BASH_SOURCE[0]}")/lib/go-versions.sh"
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=("${GO_VERSIONS[@]}")

die() { echo "build-go-fixtures: error: $*" >&2; exit 1; }

missing=()
for v in "${VERSIONS[@]}"; do
  [ -x "$CACHE/go/$v/bin/go" ] || missing+=("$v")
done
if [ ${#missing[@]} -gt 0 ]; then
  die "Go toolchain(s) missing under $CACHE/go: ${missing[*]}
  fetch them with: OOMSNAP_CACHE=$CACHE tools/fetch-go-toolchains.sh ${missing[*]}"
fi
[ -f "$SRC/main.go" ] || die "fixture source not found: $SRC/main.go"
[ -f "$TRAP_SRC/main.go" ] || die "fixture source not found: $TRAP_SRC/main.go"

mkdir -p "$OUT"
# Serialize concurrent runs (several test runners may call this at once).
exec 9>"$OUT/.build.lock"
flock 9

# Keep the build hermetic: no user/global go env, no cross-compilation or
# experiment settings leaking in from the caller's environment.
unset GOROOT GOPATH GOFLAGS GOOS GOARCH GOEXPERIMENT GOAMD64 GODEBUG GOBIN \
      GOWORK GOPRIVATE GONOPROXY GONOSUMDB GOINSECURE GOVCS CGO_CFLAGS \
      CGO_CPPFLAGS CGO_CXXFLAGS CGO_LDFLAGS CC CXX 2>/dev/null || true
export GOTOOLCHAIN=local GOPROXY=off GO111MODULE=off GOFLAGS= GOENV=off \
       GOSUMDB=off GOTELEMETRY=off GOPATH=$CACHE/gopath

since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

inputs=("$SRC"/*.go "$SELF")
up_to_date() { # $1 output, rest: inputs
  local out=$1 f; shift
  [ -x "$out" ] || return 1
  for f in "$@"; do [ "$out" -nt "$f" ] || return 1; done
}

vdir=
cleanup() {
  rm -f "$OUT"/*/*/heapfixture.tmp.$$ "$OUT"/*/*/uffdtrap.tmp.$$
  [ -z "$vdir" ] || rm -rf "$vdir"
}
trap cleanup EXIT

start=$EPOCHREALTIME
built=0 skipped=0
for v in "${VERSIONS[@]}"; do
  goroot=$CACHE/go/$v
  go=$goroot/bin/go
  export GOROOT=$goroot GOCACHE=$CACHE/gocache-$v
  mkdir -p "$GOCACHE"
  extra=()
  case "$("$go" env GOVERSION 2>/dev/null)" in
    go$v|go$v.*) ;;
    *) die "$go is not Go $v ($("$go" version 2>&1)); re-fetch with tools/fetch-go-toolchains.sh $v" ;;
  esac
  # A GOROOT cached by an older tools/fetch-go-toolchains.sh has pkg/include as
  # a dangling symlink into the Debian -src package, and the assembler cannot
  # find textflag.h. Those headers are copies of src/runtime/*.h: point the
  # assembler there (no effect on the binaries).
  if [ ! -e "$goroot/pkg/include/textflag.h" ]; then
    [ -e "$goroot/src/runtime/textflag.h" ] || die "$goroot has neither pkg/include/textflag.h nor src/runtime/textflag.h"
    extra+=("-asmflags=all=-I=$goroot/src/runtime")
  fi
  modes=("${MODES[@]}")
  [ "$v" = "$CGO_VERSION" ] && modes+=(cgo)
  for mode in "${modes[@]}"; do
    dir=$OUT/$v/$mode
    out=$dir/heapfixture
    if [ $force = 0 ] && up_to_date "$out" "${inputs[@]}" "$goroot/VERSION"; then
      skipped=$((skipped + 1))
      continue
    fi
    args=(build -o "$out.tmp.$$")
    cgo=0
    case "$mode" in
      default) ;;
      pie) args+=(-buildmode=pie) ;;
      stripped) args+=("-ldflags=-s -w") ;;
      pie-stripped) args+=(-buildmode=pie "-ldflags=-s -w") ;;
      cgo) cgo=1; args+=(-tags cgofixture -ldflags=-linkmode=external) ;;
    esac
    mkdir -p "$dir"
    t0=$EPOCHREALTIME
    if ! (cd "$SRC" && CGO_ENABLED=$cgo "$go" "${args[@]}" "${extra[@]}" .); then
      rm -f "$out.tmp.$$"
      die "go $v ($mode) build failed"
    fi
    mv -f "$out.tmp.$$" "$out"
    built=$((built + 1))
    printf 'built %-5s %-13s %6ss  %s\n' "$v" "$mode" \
      "$(since "$t0")" "$out"
  done
  out=$OUT/$v/default/uffdtrap
  if [ $force = 0 ] && up_to_date "$out" "$TRAP_SRC"/*.go "$SELF" "$goroot/VERSION"; then
    skipped=$((skipped + 1))
    continue
  fi
  args=(build -o "$out.tmp.$$")
  [ "${v#1.}" -lt 23 ] || args+=(-ldflags=-checklinkname=0)
  mkdir -p "$OUT/$v/default"
  t0=$EPOCHREALTIME
  if ! (cd "$TRAP_SRC" && CGO_ENABLED=0 "$go" "${args[@]}" "${extra[@]}" .); then
    rm -f "$out.tmp.$$"
    die "go $v (uffdtrap) build failed"
  fi
  mv -f "$out.tmp.$$" "$out"
  built=$((built + 1))
  printf 'built %-5s %-13s %6ss  %s\n' "$v" "uffdtrap" "$(since "$t0")" "$out"
done
# Tests read our profiles with Go 1.26's `go tool pprof`, which 1.25+ builds on
# first use (minutes on 2 cores): build it now, into the same GOCACHE.
if [ -x "$CACHE/go/1.26/bin/go" ]; then
  GOROOT=$CACHE/go/1.26 GOCACHE=$CACHE/gocache-1.26 GOTOOLCHAIN=local GOFLAGS= \
    "$CACHE/go/1.26/bin/go" tool pprof -h >/dev/null 2>&1 || true
fi
printf 'build-go-fixtures: %d built, %d up to date, %ss total (%s)\n' \
  "$built" "$skipped" "$(since "$start")" "$OUT"

if [ $verify = 1 ]; then
  vdir=$(mktemp -d)
  bad=0
  for v in "${VERSIONS[@]}"; do
    modes=("${MODES[@]}")
    [ "$v" = "$CGO_VERSION" ] && modes+=(cgo)
    for mode in "${modes[@]}"; do
      if ! "$OUT/$v/$mode/heapfixture" -rate 1 -profile "$vdir/p.pb.gz" -exit-after 1ms >"$vdir/c.json" ||
         ! python3 "$ROOT/tests/fixtures/go/check_profile.py" "$vdir/c.json" "$vdir/p.pb.gz" "$mode"; then
        echo "build-go-fixtures: verify FAILED: $v $mode" >&2
        bad=1
      fi
    done
  done
  [ $bad = 0 ] || die "fixture verification failed"
fi
