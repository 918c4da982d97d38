#!/usr/bin/env bash
# Writes packaging/text-order.ld: a linker script that gathers the code
# `tether run` executes into an output section of its own, inserted before
# .text. The host's release link passes it to GNU ld (-T). A line names the
# input section that holds an executed function, found by its address in the
# profiled link's map (packaging/text-order-sections.py): the function's own
# section where it has one (.text.SYMBOL); then, whole, the objects built
# without sections per function (the standard library's and _Concurrency's
# non-public code, libdispatch) whose code ran. The daemon then faults in the
# code it runs in a row instead of one or two functions on each of ~100 pages
# of 64 KiB scattered over an 11 MB binary (docs/development.md, "The code
# layout").
#
# The functions that run while online come first: what an idle daemon runs
# every second (the keep-alive) and what every reading runs sit together on a
# few pages, so each wake-up touches few pages (and TLB entries) of code; the
# start-up, connect and stop code follows, in the order callgrind first lists
# it. In first-seen order alone, the online code was spread over ~100 pages
# among the start-up code.
#
#   packaging/text-order.sh [SECONDS]        (make text-order; needs valgrind)
#
# It runs the release binary under callgrind against the simulator: start-up,
# config, the connect, subscribing, SECONDS (default 20) online with a 1 s
# keep-alive and 10 notifications/s, then 6 s online with no notifications
# (the idle daemon), one drop and its reconnect, `tether reconnect`, and the
# stop; then a second, short start-up with a config that draws a warning.
# The online part is dumped on its own (callgrind_control --dump), so its
# functions can be told from the rest. Both runs use the shipped example
# config (config/tether.toml).
# A function that moved or was renamed since the file was written is simply
# placed with the rest: the file goes stale gradually, never wrong. Regenerate
# it after large changes and compare `make bench BENCH=footprint` before and
# after.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
command -v valgrind >/dev/null || { echo "$0: needs valgrind (apt-get install valgrind)" >&2; exit 1; }

work=$(mktemp -d /tmp/tether-text-order.XXXXXX)
cleanup() { kill "${daemon:-}" "${sim:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# Profile a release binary linked with an empty order: valgrind takes only
# functions in .text for code, so none may sit in the ordered section. Nor
# with packaging/writable-rodata.ld: valgrind 3.19 crashes (SIGSEGV in its
# own code) reading a binary with that output section; the names are the same
# without it. SwiftPM relinks only when an object changed, hence the removals;
# the binary is removed again afterwards, so the next `make release` links the
# new order.
bin_dir=$(swift build -c release --show-bin-path)
bin=$bin_dir/tether
dev_bin=$bin_dir/tether-dev
printf 'SECTIONS { .text.tether : { } }\nINSERT BEFORE .text;\n' > "$work/empty.ld"
printf 'SECTIONS { .data.swift_rodata : { } }\nINSERT BEFORE .data;\n' > "$work/no-writable-rodata.ld"
rm -f "$bin"
make --no-print-directory -s release TEXT_ORDER="$work/empty.ld" WRITABLE_RODATA="$work/no-writable-rodata.ld" >&2
# Linked once more, alone, for its link map: which input section holds each function.
rm -f "$bin"
make --no-print-directory -s release TEXT_ORDER="$work/empty.ld" WRITABLE_RODATA="$work/no-writable-rodata.ld" \
    SWIFT_BUILD_FLAGS="--product tether -Xlinker -Map=$work/link.map" >&2
[ -x "$bin" ] && [ -x "$dev_bin" ] && [ -s "$work/link.map" ] || { echo "$0: no $bin, $dev_bin or link map after make release" >&2; exit 1; }
# valgrind cannot read the DWARF the release build carries; the symbols are enough.
objcopy --strip-debug "$bin" "$work/tether"
rm -f "$bin"

readings_per_second=10
"$dev_bin" simulate --spawn-bus "$work/bus" --sleep-after 3s --notify-rate "$readings_per_second" >/dev/null 2>"$work/sim.log" &
sim=$!
for _ in $(seq 50); do [ -s "$work/bus/address" ] && break; sleep 0.1; done
[ -s "$work/bus/address" ] || { echo "$0: the simulator did not start" >&2; cat "$work/sim.log" >&2; exit 1; }
# The shipped example config (every key an operator is likely to set), with
# the simulator's address and timings and a scratch directory: the parser
# runs once per key, and a key the profile's config lacked left its code
# unordered, a 64 KiB window each (about 0.25 MiB for `enabled = true`).
sed -e 's|^address = .*|address = "AA:BB:CC:DD:EE:FF"|' \
    -e 's|^interval = "5s".*|interval = "1s"|' -e 's|^timeout = "3s".*|timeout = "800ms"|' \
    -e 's|^sleep_after = .*|sleep_after = "3s"|' -e "s|^directory = .*|directory = \"$work/readings\"|" \
    -e 's|^\[keepalive\]|[keepalive]\nenabled = true|' -e 's|^\[dongle\]|[dongle]\nnotify_path = "start-notify"|' \
    config/tether.toml > "$work/tether.toml"
# The same with a setting that draws a warning at start (a silence limit
# turned off), for a second, short run: the warning's path (locating the key,
# logging it with metadata) is start-up code too.
sed -e 's|^silence_limit = .*|silence_limit = "off"|' "$work/tether.toml" > "$work/warning.toml"
export DBUS_SYSTEM_BUS_ADDRESS
DBUS_SYSTEM_BUS_ADDRESS=$(cat "$work/bus/address")
# notify_rate N: the simulated dongle's notifications a second from now on.
notify_rate() {
    busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" call io.tether.Simulator /io/tether/Simulator \
        io.tether.Simulator1 SetNotifyRate d "$1"
}
# profile NAME CONFIG SECONDS: `tether run` under callgrind until SECONDS
# online (for the long run: the online part dumped on its own, then a drop
# through `tether reconnect`), and SIGTERM.
profile() {
    valgrind --tool=callgrind --demangle=no --dump-instr=no --compress-strings=no --compress-pos=no \
        --callgrind-out-file="$work/$1.callgrind" "$work/tether" run --config "$2" 2>"$work/$1.log" &
    daemon=$!
    for _ in $(seq 600); do grep -q "→ online" "$work/$1.log" && break; sleep 0.1; done
    grep -q "→ online" "$work/$1.log" || { echo "$0: the daemon did not come online" >&2; tail -20 "$work/$1.log" >&2; exit 1; }
    if [ "$1" = main ]; then
        # Start-up and connect in $1.callgrind.1; online (readings, then idle) in .2.
        sleep 3
        callgrind_control --dump=start-up "$daemon" >/dev/null
        sleep "$3"
        notify_rate 0
        sleep 6
        callgrind_control --dump=online "$daemon" >/dev/null
        # Online again after the reconnect needs readings.
        notify_rate "$readings_per_second"
        "$work/tether" reconnect --wait --timeout 60s >/dev/null || echo "$0: tether reconnect failed (the order still holds the rest)" >&2
        sleep 3
    else
        sleep "$3"
    fi
    kill -TERM "$daemon"
    wait "$daemon" || true
    daemon=
}
profile main "$work/tether.toml" "$seconds"
profile warning "$work/warning.toml" 2

# Functions of the tether binary callgrind saw run ("fn=" under "ob=" of the
# binary), without callgrind's recursion suffix ('2): first those of the online
# dump, then the rest in first-seen order; and the input sections that hold
# them (packaging/text-order-sections.py).
[ -s "$work/main.callgrind.1" ] && [ -s "$work/main.callgrind.2" ] ||
    { echo "$0: callgrind_control --dump wrote no start-up or online profile" >&2; exit 1; }
functions_run() {
    awk -v bin="$work/tether" '
        /^ob=/ { inside = (substr($0, 4) == bin) }
        /^fn=/ && inside { name = substr($0, 4); sub(/\047[0-9]+$/, "", name); if (!(name in seen)) { seen[name] = 1; print name } }
    ' "$@"
}
functions_run "$work/main.callgrind.2" "$work/main.callgrind.1" "$work/main.callgrind" "$work/warning.callgrind" > "$work/executed"
online=$(functions_run "$work/main.callgrind.2" | wc -l)
echo "$0: $online functions ran online, placed first" >&2
nm "$work/tether" > "$work/nm"
python3 packaging/text-order-sections.py "$work/nm" "$work/link.map" "$work/executed" > "$work/sections"
count=$(wc -l < "$work/sections")
[ "$count" -gt 500 ] || { echo "$0: only $count input sections seen; not writing packaging/text-order.ld" >&2; exit 1; }
{
    echo "/* Written by packaging/text-order.sh (make text-order): the code \`tether run\` executes (its functions'"
    echo "   sections, then whole objects built without them), gathered before .text so the daemon touches few"
    echo "   pages of code. Stale names are harmless. */"
    echo "SECTIONS {"
    echo "  .text.tether : {"
    cat "$work/sections"
    echo "    /* Functions without a symbol, which no name can order: value witnesses a type's VWT points at,"
    echo "       closure contexts' destroy functions (.Lobjectdestroy), key path accessors. All of them, about 20 KiB;"
    echo "       left in .text, each run one faulted in a 64 KiB window of code nothing else used. */"
    echo "    *(.text..L*)"
    echo "  }"
    echo "}"
    echo "INSERT BEFORE .text;"
} > "$work/order.ld"
mv "$work/order.ld" packaging/text-order.ld
echo "packaging/text-order.ld: $count input sections" >&2
