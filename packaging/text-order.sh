#!/usr/bin/env bash
# Writes packaging/text-order.ld: a linker script that gathers the functions
# `tether run` executes (one input section, .text.SYMBOL, a line, in the order
# callgrind first lists them) into an output section of their own, inserted
# before .text. The host's release link passes it to GNU ld (-T). The daemon
# then faults in under 1 MiB of code in a row instead of one or two functions
# on each of ~100 pages of 64 KiB scattered over an 11 MB binary
# (docs/development.md, "Footprint").
#
#   packaging/text-order.sh [SECONDS]        (make text-order; needs valgrind)
#
# It runs the release binary under callgrind against the simulator: start-up,
# config, the connect, subscribing, SECONDS (default 20) online with a 1 s
# keep-alive and 10 notifications/s, one drop and its reconnect, `tether
# reconnect`, and the stop. A function that moved or was renamed since the
# file was written is simply placed with the rest: the file goes stale
# gradually, never wrong. Regenerate it after large changes and compare
# `make bench BENCH=footprint` before and after.
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
[ -x "$bin" ] && [ -x "$dev_bin" ] || { echo "$0: no $bin or $dev_bin after make release" >&2; exit 1; }
# valgrind cannot read the DWARF the release build carries; the symbols are enough.
objcopy --strip-debug "$bin" "$work/tether"
rm -f "$bin"

"$dev_bin" simulate --spawn-bus "$work/bus" --sleep-after 3s --notify-rate 10 >/dev/null 2>"$work/sim.log" &
sim=$!
for _ in $(seq 50); do [ -s "$work/bus/address" ] && break; sleep 0.1; done
[ -s "$work/bus/address" ] || { echo "$0: the simulator did not start" >&2; cat "$work/sim.log" >&2; exit 1; }
cat > "$work/tether.toml" <<TOML
[dongle]
address = "AA:BB:CC:DD:EE:FF"
[keepalive]
interval = "1s"
timeout = "800ms"
sleep_after = "3s"
[readings]
directory = "$work/readings"
TOML
export DBUS_SYSTEM_BUS_ADDRESS
DBUS_SYSTEM_BUS_ADDRESS=$(cat "$work/bus/address")
valgrind --tool=callgrind --demangle=no --dump-instr=no --compress-strings=no --compress-pos=no \
    --callgrind-out-file="$work/callgrind.out" "$work/tether" run --config "$work/tether.toml" 2>"$work/daemon.log" &
daemon=$!
online() { grep -c "→ online" "$work/daemon.log" 2>/dev/null || true; }
for _ in $(seq 600); do [ "$(online)" -ge 1 ] && break; sleep 0.1; done
[ "$(online)" -ge 1 ] || { echo "$0: the daemon did not come online" >&2; tail -20 "$work/daemon.log" >&2; exit 1; }
sleep "$seconds"
"$work/tether" reconnect --wait --timeout 60s >/dev/null || echo "$0: tether reconnect failed (the order still holds the rest)" >&2
sleep 3
kill -TERM "$daemon"
wait "$daemon" || true
daemon=

# Functions of the tether binary callgrind saw run ("fn=" under "ob=" of the
# binary), without callgrind's recursion suffix ('2), that the binary defines.
nm "$work/tether" | awk '$2 ~ /^[tTwW]$/ {print $3}' | sort -u > "$work/defined"
awk -v bin="$work/tether" '
    /^ob=/ { inside = (substr($0, 4) == bin) }
    /^fn=/ && inside { name = substr($0, 4); sub(/\047[0-9]+$/, "", name); if (!(name in seen)) { seen[name] = 1; print name } }
' "$work/callgrind.out" > "$work/executed"
awk 'NR == FNR { defined[$0] = 1; next } ($0 in defined) { print "    *(.text." $0 ")" }' "$work/defined" "$work/executed" > "$work/sections"
count=$(wc -l < "$work/sections")
[ "$count" -gt 500 ] || { echo "$0: only $count functions seen; not writing packaging/text-order.ld" >&2; exit 1; }
{
    echo "/* Written by packaging/text-order.sh (make text-order): the functions \`tether run\` executes,"
    echo "   gathered before .text so the daemon touches few pages of code. Stale names are harmless. */"
    echo "SECTIONS {"
    echo "  .text.tether : {"
    cat "$work/sections"
    echo "    /* Functions without a symbol (value witnesses a type's VWT points at), which no name can order: all of them, a few KiB. */"
    echo "    *(.text..L__unnamed_*)"
    echo "  }"
    echo "}"
    echo "INSERT BEFORE .text;"
} > "$work/order.ld"
mv "$work/order.ld" packaging/text-order.ld
echo "packaging/text-order.ld: $count functions" >&2
