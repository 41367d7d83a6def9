# Shared by tools/run-fuzzers.sh (CI's short run) and tools/fuzz-long.sh (source it).
# fuzz_build: configures and builds the libFuzzer targets (clang, ASan+UBSan) into
#   $FUZZ_BUILD ($OOMSNAP_FUZZ_BUILD, default build-fuzz).
# fuzz_run_all SECONDS [NAME...]: runs every target (or only the NAMEd ones) for SECONDS with a per-input timeout of
#   $OOMSNAP_FUZZ_TIMEOUT seconds (default 10) on its corpus in
#   $FUZZ_BUILD/fuzz-corpus/NAME (kept between runs, so coverage accumulates; seeds from
#   tests/fuzz/seeds/NAME when there are any),
#   prints one summary line per target and returns non-zero when any target found
#   a crash, a leak, a slow input or ran out of memory. Reproducers land in
#   $FUZZ_BUILD (-artifact_prefix). Run from the checkout's top directory.

FUZZ_BUILD=$(realpath -m "${OOMSNAP_FUZZ_BUILD:-build-fuzz}")
FUZZ_TIMEOUT=${OOMSNAP_FUZZ_TIMEOUT:-10}

fuzz_build() {
  . tools/ccache-env.sh
  CC=clang CXX=clang++ cmake -S . -B "$FUZZ_BUILD" -DOOMSNAP_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$FUZZ_BUILD" -j"$(nproc)" --target fuzzers
}

# _fuzz_count DIR GLOB: how many files DIR holds matching GLOB.
_fuzz_count() { find "$1" -maxdepth 1 -type f -name "$2" 2>/dev/null | wc -l; }

fuzz_run_all() {
  local seconds=$1 failed=0 f name corpus seeds log before_c before_l before_t before_o start end rc
  shift
  local only=" $* "
  mkdir -p "$FUZZ_BUILD/fuzz-corpus"
  for f in "$FUZZ_BUILD"/tests/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    [ "$only" = "  " ] || [[ "$only" == *" $name "* ]] || continue
    corpus="$FUZZ_BUILD/fuzz-corpus/$name"
    log="$FUZZ_BUILD/$name.log"
    mkdir -p "$corpus"
    # Seeds kept in the tree (tests/fuzz/seeds/NAME) are read, never written.
    seeds=
    [ -d "tests/fuzz/seeds/$name" ] && seeds="tests/fuzz/seeds/$name"
    echo "fuzz: $name for ${seconds}s (${FUZZ_TIMEOUT}s per input)"
    # Artifacts from earlier runs stay; count only what this run adds.
    before_c=$(_fuzz_count "$FUZZ_BUILD" 'crash-*'); before_l=$(_fuzz_count "$FUZZ_BUILD" 'leak-*')
    before_t=$(_fuzz_count "$FUZZ_BUILD" 'timeout-*'); before_o=$(_fuzz_count "$FUZZ_BUILD" 'oom-*')
    start=$(date +%s.%N)
    rc=0
    "$f" -max_total_time="$seconds" -timeout="$FUZZ_TIMEOUT" -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$FUZZ_BUILD/" "$corpus" $seeds > "$log" 2>&1 || rc=$?
    end=$(date +%s.%N)
    # One line per target, to paste into docs/testing.md: executions, wall seconds,
    # inputs in the corpus after the run, findings of this run.
    awk -v name="$name" -v start="$start" -v end="$end" -v corpus="$(_fuzz_count "$corpus" '*')" \
        -v c=$(( $(_fuzz_count "$FUZZ_BUILD" 'crash-*') - before_c )) \
        -v l=$(( $(_fuzz_count "$FUZZ_BUILD" 'leak-*') - before_l )) \
        -v t=$(( $(_fuzz_count "$FUZZ_BUILD" 'timeout-*') - before_t )) \
        -v o=$(( $(_fuzz_count "$FUZZ_BUILD" 'oom-*') - before_o )) -v rc="$rc" '
      /^stat::number_of_executed_units:/ { execs = $2 }
      END { s = end - start
            printf "fuzz: %s: %d execs in %.0f s (%.0f/s), corpus %d inputs, crashes %d, leaks %d, timeouts %d, ooms %d, exit %d\n",
                   name, execs, s, (s > 0 ? execs / s : 0), corpus, c, l, t, o, rc }' "$log"
    if [ "$rc" != 0 ]; then
      tail -40 "$log"
      echo "fuzz: $name FAILED (log: $log)" >&2
      failed=1
    fi
  done
  return "$failed"
}
