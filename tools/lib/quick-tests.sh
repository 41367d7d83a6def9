#!/usr/bin/env bash
# `tools/test.sh --quick [BASE]`: while working, in a few minutes, the unit
# tests plus the tests of what the change touched, with the build and the
# caches as they are (no setup, no fetches; tools/test.sh, without --quick, is
# the whole suite).
#
# The change: what differs from BASE (default HEAD: the uncommitted edits and
# untracked files), or the last commit when nothing does. Its files select
# tests:
#   - a changed test file: the suites it defines (TEST/TEST_F/TEST_P names);
#   - a changed source folder: the suites that exercise it (the table below);
#   - a change to the build itself (CMake, bpf/, skel/, vmlinux/): every test.
# The guest-kernel tests (AgentCgroupV2, minutes each) run only when their own
# test file changed.
# Env: QUICK_PRINT=1 prints the ctest regexes instead of running them;
#      QUICK_FILES="a b ..." takes these paths as the change (for tests of this script).
set -euo pipefail
cd "$(dirname "$0")/../.."
BASE=${1:-HEAD}

changed_files() {
  if [ -n "${QUICK_FILES:-}" ]; then
    tr ' ' '\n' <<<"$QUICK_FILES"
    return
  fi
  local files
  files=$( { git diff --name-only "$BASE"; git ls-files --others --exclude-standard; } | sort -u)
  [ -n "$files" ] || files=$(git diff --name-only HEAD~1 HEAD)
  echo "$files"
}

# Source folder -> the ctest name pattern of the suites that exercise it.
suites_of_folder() {
  case "$1" in
    userspace/base/*) echo 'Go|Python|Java|Capture|Snapshot|Remote|Chunk|Proc|Target|Agent|Sink|Show|Safe|Log|Text' ;;
    userspace/go/*) echo 'Go|SnapshotCli' ;;
    userspace/python/*) echo 'Python' ;;
    userspace/java/*) echo 'Java|HotSpot|G1' ;;
    userspace/elf/*) echo 'Elf|Go|Python|Java' ;;
    userspace/core/*) echo 'Go|Python|Java|Capture|Snapshot|Remote|Chunk|Proc|Target' ;;
    userspace/capture/*) echo 'Capture|Sandbox|SnapshotCli|Agent' ;;
    userspace/agent/*) echo 'Agent|Bpf|Memcg|MemoryStat|Cgroup|Sink|Policy|Victim|Incident|Exit|Http|Metrics|Pod|Config|Systemd' ;;
    userspace/cli/*) echo 'Show|SnapshotCli|Cli|RunScript' ;;
    tests/fixtures/go/*) echo 'Go' ;;
    tests/fixtures/python/*) echo 'Python' ;;
    tests/fixtures/java/*) echo 'Java' ;;
    tools/*|deploy/*) echo 'RunScript|Deploy|Evaluate' ;;
    CMakeLists.txt|*/CMakeLists.txt|cmake/*|bpf/*|skel/*|vmlinux/*) echo '.' ;;
    *) echo '' ;;
  esac
}

patterns=()
while IFS= read -r f; do
  [ -n "$f" ] || continue
  case "$f" in
    tests/unit/*.cpp|tests/integration/*.cpp)
      [ -f "$f" ] || continue
      # The suites the file defines; parameterised ones are named Prefix/Suite.Test.
      while IFS= read -r suite; do patterns+=("$suite"); done < <(
        grep -ohE '^TEST(_F|_P)?\(\s*[A-Za-z0-9_]+' "$f" | sed -E 's/^TEST(_F|_P)?\(\s*//' | sort -u)
      ;;
    *)
      p=$(suites_of_folder "$f")
      [ -z "$p" ] || patterns+=("$p")
      ;;
  esac
done < <(changed_files)

regex=$(printf '%s\n' "${patterns[@]}" | sort -u | paste -sd'|')
# The guest-kernel tests take minutes each: only when their own file changed.
exclude='^$'
case "|$regex|" in *'|AgentCgroupV2|'*) ;; *) exclude='AgentCgroupV2' ;; esac
if [ "${QUICK_PRINT:-0}" = 1 ]; then
  echo "$regex"
  echo "excluding: $exclude"
  exit 0
fi
tools/build.sh
BUILD=${OOMSNAP_BUILD:-build}
cd "$BUILD"
echo "tools/test.sh --quick: the unit tests${regex:+, and the tests matching '$regex'}" >&2
ctest --output-on-failure -j2 --timeout 900 -L unit
[ -z "$regex" ] || ctest --output-on-failure -j2 --timeout 900 -LE unit -R "$regex" -E "$exclude"
