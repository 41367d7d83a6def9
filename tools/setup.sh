#!/usr/bin/env bash
# Installs the Debian (bookworm) packages oomsnap builds and tests with.
# Idempotent: apt runs only when something is missing.
# python3-yaml: tests/unit/deploy/deploy_test.cpp parses deploy/daemonset.yaml with PyYAML.
# libpython3-dev: tests/fixtures/python/embed_host.c embeds CPython through libpython3.11.so.
# openjdk-17-jdk-headless: the Java fixture's javac, the host JVM and jcmd (the oracle).
# libseccomp-dev, libcap-dev: the capture process's system-call allow-list and capability drop.
# xz-utils: the build unpacks the committed vmlinux/vmlinux.h.xz.
# libsystemd-dev: sd_notify (READY, STATUS, WATCHDOG) when the agent runs as a systemd service.
# libcli11-dev: the command line of every subcommand (header-only).
# python3-jsonschema: tools/validate-record.py holds every record and snapshot the tests
#   produce to docs/record.schema.json (tests/common/record_schema.h).
# groff-base: DocsMan.* render the man pages (docs/man/) with groff's warnings on.
# python3-docutils, python3-sympy: a real program nobody here wrote, for the CPython
#   reader (tests/fixtures/python/realprogram.py).
# ccache: the builds (tools/build.sh, the ASan unit build, the fuzzers) compile through it,
#   its cache in $OOMSNAP_CACHE/ccache, so a fresh clone recompiles only what changed.
# debootstrap: tools/fetch-python-rootfs.sh builds the bullseye/trixie/sid root file
#   systems whose CPython interpreters (Debian's python3.9, python3.13, python3.14) the
#   tests run with chroot.
# prometheus: tests/integration/agent_http_test.cpp scrapes the agent with a real
#   Prometheus of its own (own port and storage) and checks a scrape with promtool.
#   Its postinst starts a service only where an init system runs one (none in CI
#   containers, where policy-rc.d refuses); the tests never use that service or port 9090.
set -euo pipefail
PKGS=(build-essential cmake pkg-config clang llvm bpftool libbpf-dev libelf-dev zlib1g-dev
      libcapstone-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev libspdlog-dev
      libfmt-dev libtomlplusplus-dev libboost-dev libboost-system-dev libgtest-dev googletest
      libclang-rt-14-dev python3 python3-yaml ca-certificates qemu-system-x86 busybox-static
      debootstrap libpython3-dev openjdk-17-jdk-headless libseccomp-dev libcap-dev libsystemd-dev
      xz-utils prometheus ccache libcli11-dev python3-docutils python3-sympy python3-jsonschema
      groff-base)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
