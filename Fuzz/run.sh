#!/bin/sh
# Builds the libFuzzer targets in Fuzz/ and runs each for FUZZ_SECONDS (`make
# fuzz`). Prints one summary line per target; exits non-zero if any target
# found a crash, a leak, a time-out or ran out of memory, with the saved input's
# path in the output. See Fuzz/README.md.
#
#   FUZZ_SECONDS  seconds per target (default 60)
#   FUZZ_TARGETS  targets to run, space-separated (default: all four)
#   FUZZ_TIMEOUT  seconds one input may take before it counts as a hang (default 10)
#   FUZZ_BUILD_LOCK, FUZZ_CPU_LOCK
#                 flock(1) files held while building and while fuzzing, so that
#                 other builds and benchmarks on the machine wait (and vice versa);
#                 empty: no locking
set -eu

cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_TARGETS=${FUZZ_TARGETS:-dbus-message bluez config reading-log}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}
FUZZ_BUILD_LOCK=${FUZZ_BUILD_LOCK-/tmp/tether-build.lock}
FUZZ_CPU_LOCK=${FUZZ_CPU_LOCK-/tmp/tether-cpu.lock}
SCRATCH=.build-fuzz

locked() {
    lock=$1
    shift
    if [ -n "$lock" ] && command -v flock >/dev/null; then flock "$lock" "$@"; else "$@"; fi
}

# -sanitize=fuzzer instruments for coverage and links libFuzzer (from the Swift
# toolchain: nothing to install); -parse-as-library because libFuzzer drives the
# program. The C and C++ flags reach toml++ inside TOMLKit, so the config
# fuzzer sees its coverage and ASan checks it too. Release: an optimised build
# runs several times faster and keeps Swift's runtime checks (only assert() goes).
echo "fuzz: building (swift build --package-path Fuzz --scratch-path $SCRATCH)"
mkdir -p "$SCRATCH"
locked "$FUZZ_BUILD_LOCK" "$SWIFT" build --package-path Fuzz --scratch-path "$SCRATCH" -c release \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -use-ld=lld \
    -Xcc -fsanitize=fuzzer-no-link,address -Xcxx -fsanitize=fuzzer-no-link,address \
    > "$SCRATCH/build.log" 2>&1 || { cat "$SCRATCH/build.log"; echo "fuzz: build failed" >&2; exit 1; }
BIN="$SCRATCH/release"

executable() {
    case $1 in
        dbus-message) echo FuzzDBusMessage ;;
        bluez) echo FuzzBlueZ ;;
        config) echo FuzzConfig ;;
        reading-log) echo FuzzReadingLog ;;
        *) echo "fuzz: unknown target $1 (dbus-message, bluez, config, reading-log)" >&2; exit 2 ;;
    esac
}

# The value of the last "name: value" statistic in libFuzzer's output.
stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1; }
field() { grep -E '^#[0-9]+' "$2" | tail -n 1 | sed -n "s/.* $1: \([^ ]*\).*/\1/p"; }

# Let ASan and libFuzzer report crashes: Swift's own backtracer would run
# under ASan (and trip it), and it is a child process that would inherit, and
# hold on to, the CPU lock.
export SWIFT_BACKTRACE=enable=no
# Leaks fail the run, except TOMLKit's own (Fuzz/lsan.supp says which and why).
export LSAN_OPTIONS="suppressions=$PWD/Fuzz/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

failed=""
for target in $FUZZ_TARGETS; do
    exe=$(executable "$target")
    corpus="$SCRATCH/corpus/$target"   # new inputs go here (git-ignored), the seeds stay as they are
    artifacts="$SCRATCH/artifacts/$target/"
    log="$SCRATCH/logs/$target.log"
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    dict=""
    [ -f "Fuzz/Dictionaries/$target.dict" ] && dict="-dict=Fuzz/Dictionaries/$target.dict"
    echo "fuzz: $target for ${FUZZ_SECONDS}s (log: $log)"
    status=0
    # shellcheck disable=SC2086 # $dict is one word or none
    locked "$FUZZ_CPU_LOCK" "$BIN/$exe" -max_total_time="$FUZZ_SECONDS" -timeout="$FUZZ_TIMEOUT" \
        -max_len=16384 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts" $dict \
        "$corpus" "Fuzz/Corpus/$target" > "$log" 2>&1 || status=$?
    runs=$(stat number_of_executed_units "$log")
    speed=$(stat average_exec_per_sec "$log")
    added=$(stat new_units_added "$log")
    rss=$(stat peak_rss_mb "$log")
    crasher=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    outcome="ok"
    if [ "$status" -ne 0 ] || [ -n "$crasher" ]; then
        kind=$(grep -m 1 -oE 'PROPERTY VIOLATED|arguments to dbus_[a-z_]+\(\) were incorrect|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-z-]+|Fatal error|ALARM: working on the last Unit|out-of-memory' "$log" || true)
        outcome="FAILED (exit $status${kind:+, $kind})${crasher:+ input: $crasher}"
        failed="$failed $target"
    fi
    printf '%-12s runs %s, %s exec/s, cov %s, ft %s, corpus %s (+%s new), peak rss %s MB: %s\n' \
        "$target" "${runs:-?}" "${speed:-?}" "$(field cov "$log")" "$(field ft "$log")" "$(field corp "$log")" \
        "${added:-?}" "${rss:-?}" "$outcome"
    if [ -n "$crasher" ] || [ "$status" -ne 0 ]; then
        echo "---- last lines of $log:"
        tail -n 40 "$log"
        [ -n "$crasher" ] && echo "---- reproduce: $BIN/$exe $crasher"
    fi
done

if [ -n "$failed" ]; then
    echo "fuzz: FAILED:$failed" >&2
    exit 1
fi
echo "fuzz: no crash, leak or time-out in $(echo $FUZZ_TARGETS | wc -w) target(s)"
