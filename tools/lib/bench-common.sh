# Shared by the snapshot benchmark drivers (source it): a scratch directory and
# a fixture pid that are cleaned up on any exit (the fixture is SIGKILLed, so
# it never outlives an interrupted run), starting a fixture and waiting for
# its ready line, and median().
# bench_init NAME: makes $TMP (/tmp/NAME.XXXXXX) and installs the traps; the
# caller sets FIXTURE_PID while a fixture runs.

bench_cleanup() {
  if [ -n "${FIXTURE_PID:-}" ]; then
    kill -KILL "$FIXTURE_PID" 2>/dev/null || true
    wait "$FIXTURE_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}

bench_init() {
  TMP=$(mktemp -d "/tmp/$1.XXXXXX")
  FIXTURE_PID=
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

# start_fixture READY_FILE CMD...: runs CMD in the background (stdout to
# READY_FILE, stderr to READY_FILE.err), sets FIXTURE_PID and waits up to
# $READY_TIMEOUT s (default 300) for its JSON line with "ready": true. Calls the
# script's die() if CMD exits first or is late.
start_fixture() {
  local ready=$1 deadline
  shift
  "$@" > "$ready" 2> "$ready.err" &
  FIXTURE_PID=$!
  deadline=$((SECONDS + ${READY_TIMEOUT:-300}))
  until grep -q '"ready": *true' "$ready" 2>/dev/null; do
    kill -0 "$FIXTURE_PID" 2>/dev/null || { cat "$ready.err" >&2; die "$1 exited before its ready line"; }
    [ $SECONDS -lt $deadline ] || die "$1 not ready after ${READY_TIMEOUT:-300}s"
    sleep 0.1
  done
}

# stop_fixture: SIGKILLs and reaps the running fixture.
stop_fixture() {
  kill -KILL "$FIXTURE_PID" 2>/dev/null || true
  wait "$FIXTURE_PID" 2>/dev/null || true
  FIXTURE_PID=
}

# median FILE: median of the numbers in FILE, one per line.
median() {
  python3 -c 'import sys,statistics; print("%.3f" % statistics.median(float(l) for l in open(sys.argv[1]) if l.strip()))' "$1"
}
