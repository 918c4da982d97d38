#!/usr/bin/env bash
# Footprint of `tether run` against the simulator: RSS and CPU after a minute
# online with a 1 s keep-alive. Prints figures; asserts nothing.
#   bench/footprint.sh [SECONDS] [NOTIFY_RATE]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
rate=${2:-10}
bin=${TETHER_BIN:-$(swift build -c release --show-bin-path)/tether}
[ -x "$bin" ] || swift build -c release
work=$(mktemp -d /tmp/tether-footprint.XXXXXX)
cleanup() { kill "${daemon:-}" "${sim:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$bin" simulate --spawn-bus "$work/bus" --sleep-after 3s --notify-rate "$rate" >/dev/null 2>"$work/sim.log" &
sim=$!
for _ in $(seq 50); do [ -s "$work/bus/address" ] && break; sleep 0.1; done
address=$(cat "$work/bus/address")
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
DBUS_SYSTEM_BUS_ADDRESS=$address "$bin" run --config "$work/tether.toml" 2>"$work/daemon.log" &
daemon=$!
for _ in $(seq 100); do grep -q "→ online" "$work/daemon.log" 2>/dev/null && break; sleep 0.1; done

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
# Context switches of every thread: each one is a wake-up.
switches() { cat /proc/$daemon/task/*/status | awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n}'; }
cpu0=$(cpu); sw0=$(switches)
sleep "$seconds"
cpu1=$(cpu); sw1=$(switches)
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$daemon/status")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$daemon/status")
readings=$(cat "$work"/readings/*.jsonl 2>/dev/null | wc -l)
printf 'tether run, %ss online, keep-alive 1s, %s notifications/s\n' "$seconds" "$rate"
calc() { awk "BEGIN {print $1}"; }
printf '  RSS            %6.1f MiB (VmHWM %.1f MiB)\n' "$(calc "$rss/1024")" "$(calc "$hwm/1024")"
printf '  CPU            %6.3f s over %ss\n' "$(calc "($cpu1-$cpu0)/$ticks")" "$seconds"
printf '  wake-ups       %6.1f /s (context switches, all threads)\n' "$(calc "($sw1-$sw0)/$seconds")"
printf '  readings       %6d\n' "$readings"
