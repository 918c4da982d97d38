#!/usr/bin/env bash
# Footprint of `tether run` against the simulator: RSS and CPU after a minute
# online with a 1 s keep-alive. Prints figures; asserts nothing.
#   bench/footprint.sh [SECONDS] [NOTIFY_RATE]      (KEEPALIVE=off: no polling, to see the idle floor)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
rate=${2:-10}
# tether runs the daemon; tether-dev (built next to it) the simulator.
bin=${TETHER_BIN:-$(swift build -c release --show-bin-path)/tether}
dev_bin=${TETHER_DEV_BIN:-$(dirname "$bin")/tether-dev}
[ -x "$bin" ] && [ -x "$dev_bin" ] || swift build -c release
work=$(mktemp -d /tmp/tether-footprint.XXXXXX)
cleanup() { kill "${daemon:-}" "${sim:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$dev_bin" simulate --spawn-bus "$work/bus" --sleep-after "$([ "${KEEPALIVE:-on}" = off ] && echo 1h || echo 3s)" --notify-rate "$rate" >/dev/null 2>"$work/sim.log" &
sim=$!
for _ in $(seq 50); do [ -s "$work/bus/address" ] && break; sleep 0.1; done
address=$(cat "$work/bus/address")
cat > "$work/tether.toml" <<TOML
[dongle]
address = "AA:BB:CC:DD:EE:FF"
[keepalive]
enabled = $([ "${KEEPALIVE:-on}" = off ] && echo false || echo true)
interval = "1s"
timeout = "800ms"
sleep_after = "3s"
[readings]
directory = "$work/readings"
TOML
DBUS_SYSTEM_BUS_ADDRESS=$address "$bin" run --config "$work/tether.toml" 2>"$work/daemon.log" &
daemon=$!
for _ in $(seq 100); do grep -q "→ online" "$work/daemon.log" 2>/dev/null && break; sleep 0.1; done

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
# Context switches per thread ("tid count" lines): each one is a wake-up.
# Threads come and go (Dispatch's pool), so deltas are taken per thread.
switches() {
  for t in /proc/$daemon/task/*; do
    awk -v tid="${t##*/}" '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print tid, n}' "$t/status" 2>/dev/null
  done
}
cpu0=$(cpu); switches > "$work/sw0"
sleep "$seconds"
cpu1=$(cpu); switches > "$work/sw1"
wakeups=$(awk 'NR == FNR {before[$1] = $2; next} {total += $2 - (($1 in before) ? before[$1] : 0)} END {print total}' "$work/sw0" "$work/sw1")
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$daemon/status")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$daemon/status")
readings=$( (cat "$work"/readings/*.jsonl 2>/dev/null || true) | wc -l)
printf 'tether run, %ss online, keep-alive %s, %s notifications/s\n' "$seconds" "$([ "${KEEPALIVE:-on}" = off ] && echo off || echo 1s)" "$rate"
calc() { awk "BEGIN {print $1}"; }
printf '  RSS            %6.1f MiB (VmHWM %.1f MiB)\n' "$(calc "$rss/1024")" "$(calc "$hwm/1024")"
printf '  CPU            %6.3f s over %ss\n' "$(calc "($cpu1-$cpu0)/$ticks")" "$seconds"
printf '  wake-ups       %6.1f /s (context switches of threads alive at the end)\n' "$(calc "$wakeups/$seconds")"
printf '  readings       %6d\n' "$readings"
