# Shared by the snapshot benchmark drivers (source it): a scratch directory and
# a fixture pid that are cleaned up on any exit (the fixture is SIGKILLed, so
# it never outlives an interrupted run), and median().
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

# median FILE: median of the numbers in FILE, one per line.
median() {
  python3 -c 'import sys,statistics; print("%.3f" % statistics.median(float(l) for l in open(sys.argv[1]) if l.strip()))' "$1"
}
