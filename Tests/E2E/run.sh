#!/usr/bin/env bash
# `make e2e`: Tether against the real BlueZ stack, in a QEMU guest.
#
# Installs what it needs (apt packages, a venv with Bumble for the dongle),
# builds tether (debug, as `make test` does) and the guest's initramfs, boots
# Debian's own kernel under TCG with the host's / shared read-only over 9p,
# runs Tests/E2E/guest/scenarios.py there, and prints one line per scenario.
# Exit status: 0 if every scenario passed; 1 otherwise (the guest's logs stay
# in $E2E_OUT); 2 if the guest never reported; 3 if every failure was the
# test stack's own (a set-up failure: btvirt's controllers, the dongle,
# bluetoothd, a vhci controller), which says nothing about Tether.
#
# A second boot runs systemd as PID 1 with the Debian package installed
# (Tests/E2E/systemd/): udev, journald, dbus-daemon, bluetooth.service, the
# dongle, mosquitto, node_exporter and tether-forward as units, and the
# systemd-* checks; its logs go to $E2E_OUT/systemd.
#
# The power-cut boots (Tests/E2E/vm/powercut.py, guest/powercut.py) write the
# readings and the forwarder's cursor to an ext4 virtio disk and are killed
# (SIGKILL to QEMU) at seeded random moments, E2E_CUTS times (default 10),
# then booted once more to check and sum up; logs in $E2E_OUT/power-cut.
#
# The clock boot (Tests/E2E/guest/clock_unsynced.py) starts the guest with
# its clock at 1970 (QEMU's -rtc base=) and a TLS broker whose certificate
# is valid from today (made here, on the host); logs in $E2E_OUT/clock.
#
# Environment: E2E_OUT (default .build/e2e/out), E2E_ONLY (comma-separated
# scenario names), E2E_BOOTS (scenarios, systemd, power-cut, comma-separated,
# both = scenarios,systemd, or all, the default), E2E_CUTS, E2E_SEED (the
# power-cut delays' seed), E2E_TIMEOUT
# (seconds for each boot, default 1200), SWIFT (default swift), E2E_TETHER (a
# tether binary built elsewhere, e.g. another worktree's, instead of building
# this tree's; the scenarios boot only), E2E_DEB (a package of this tree's HEAD
# made already, e.g. by make check-tarball, for the systemd boot to install).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=$root/.build/e2e
out=${E2E_OUT:-$work/out}
swift=${SWIFT:-swift}
timeout=${E2E_TIMEOUT:-2400}
# E2E_BOOTS: scenarios (the guest script as PID 1), clock (the guest started
# at 1970), systemd (systemd as PID 1 with the Debian package installed),
# power-cut (the guest killed again and again), a comma-separated list of
# those, both (scenarios and systemd) or all (the default).
boots=${E2E_BOOTS:-all}
case "$boots" in
    all) boots="scenarios clock systemd power-cut" ;;
    both) boots="scenarios systemd" ;;
    *) boots=${boots//,/ } ;;
esac
for b in $boots; do
    case "$b" in scenarios|clock|systemd|power-cut) ;; *) echo "e2e: E2E_BOOTS: no boot named $b" >&2; exit 2 ;; esac
done
wants() { case " $boots " in *" $1 "*) return 0 ;; esac; return 1; }
bumble_version=0.0.236

packages="qemu-system-x86 linux-image-amd64 busybox-static bluez bluez-test-tools python3-venv cpio kmod"
# The systemd boot's units come from the host's root: the broker, the
# exporter, the subscriber, curl for the scrape and setfacl for the textfile
# directory, as docs/operations.md tells operators.
packages="$packages systemd dbus mosquitto mosquitto-clients prometheus-node-exporter curl acl"
# polkitd: the package's rule lets the service restart the UART controller's
# unit (uart-reattach, the uart-* checks).
packages="$packages polkitd"
# The power-cut boot's disk: mkfs.ext4 on a file. The clock boot's broker
# certificate: openssl.
packages="$packages e2fsprogs openssl"
missing=""
for package in $packages; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing="$missing $package"
done
if [ -n "$missing" ]; then
    [ "$(id -u)" = 0 ] || { echo "e2e needs these Debian packages:$missing (run as root to install them)" >&2; exit 2; }
    echo "e2e: installing$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

mkdir -p "$work"
if ! "$work/venv/bin/python" -c "import bumble, socket; socket.AF_BLUETOOTH" 2>/dev/null; then
    rm -rf "$work/venv"
    echo "e2e: creating the Bumble venv"
    # Debian's python3: one built elsewhere (pyenv, say) may lack AF_BLUETOOTH,
    # which the dongle's HCI user-channel socket needs.
    /usr/bin/python3 -m venv "$work/venv"
    "$work/venv/bin/pip" install -q "bumble==$bumble_version"
fi

echo "e2e: the dongle's self-test (in process, Bumble's emulated controllers)"
# Bounded: a self-test that hangs must fail the run, not hold it until CI's limit.
timeout --kill-after=10 300 "$work/venv/bin/python" Tests/E2E/peripheral/selftest.py | tail -n 1

if [ -n "${E2E_TETHER:-}" ]; then
    # The host's / is the guest's /: an absolute path works as it is.
    tether=$(realpath "$E2E_TETHER")
    echo "e2e: using $tether"
else
    echo "e2e: building tether"
    flock /tmp/tether-build.lock "$swift" build -q
    # Paths in the guest are relative to the project, which it mounts elsewhere.
    tether=$(realpath --relative-to="$root" "$("$swift" build --show-bin-path)/tether")
fi

kernel=$(ls /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -n 1)
[ -n "$kernel" ] || { echo "e2e: no /boot/vmlinuz-*-amd64 (linux-image-amd64)" >&2; exit 2; }
version=${kernel#/boot/vmlinuz-}
Tests/E2E/vm/build-initramfs.sh "$version" "$work/initramfs.gz"

deb=""
if wants systemd; then
    # The systemd boot installs the Debian package as a gateway would, made
    # from this tree (after `make test` the release build is already there).
    if [ -n "${E2E_DEB:-}" ]; then
        # CI's check-tarball made this tree's package already (from HEAD):
        # a second release build would cost it ~4 minutes.
        deb=$E2E_DEB
        echo "e2e: using the Debian package $deb"
    else
        echo "e2e: building the Debian package (make deb)"
        deb=$(flock /tmp/tether-build.lock make -C "$root" --no-print-directory deb | tail -n 1)
    fi
    [ -f "$deb" ] || { echo "e2e: no package at '$deb' (E2E_DEB or make deb)" >&2; exit 2; }
    deb=$(realpath --relative-to="$root" "$deb")
    # The boot starts as a gateway of the previous release and is upgraded
    # (systemd-upgrade): that release's package, built once from git archive
    # of its commit (Tests/E2E/previous-release) and kept in .build/e2e.
    echo "e2e: the previous release's package (Tests/E2E/previous-release.sh)"
    previous=$(Tests/E2E/previous-release.sh "$root/.build/e2e/previous") \
        || { echo "e2e: no package of the previous release to upgrade from" >&2; exit 2; }
    previous=$(realpath --relative-to="$root" "$previous")
    echo "e2e: upgrading from $previous to $deb"
fi

rm -rf "$out"
mkdir -p "$out"

# boot NAME OUTDIR KERNEL_ARGS [QEMU_ARGS...]: one QEMU boot; its console
# goes to OUTDIR/console.log and, filtered, to stdout. The guest powers itself
# off when its checks end; the timeout is for a guest that hangs.
boot() {
    local name=$1 dir=$2 args=$3
    shift 3
    mkdir -p "$dir"
    echo "e2e: booting $version under QEMU (TCG, 2 vCPUs, 1 GiB) for the $name; console in $dir/console.log"
    local started
    started=$(date +%s)
    set +e
    timeout --foreground "$timeout" qemu-system-x86_64 -accel tcg,thread=multi -smp 2 -m 1024 \
        -nographic -no-reboot -net none -kernel "$kernel" -initrd "$work/initramfs.gz" \
        -append "console=ttyS0 quiet panic=-1 $args" \
        -fsdev local,id=root,path=/,readonly=on,security_model=none,multidevs=remap \
        -device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
        -fsdev local,id=project,path="$root",readonly=on,security_model=none,multidevs=remap \
        -device virtio-9p-pci,fsdev=project,mount_tag=project \
        -fsdev local,id=out,path="$dir",security_model=none \
        -device virtio-9p-pci,fsdev=out,mount_tag=out "$@" \
        </dev/null 2>&1 | tee "$dir/console.log" | grep --line-buffered -E '^\[ *[0-9.]+\] |e2e-init' || true
    qemu_status=${PIPESTATUS[0]}
    set -e
    wall=$(( $(date +%s) - started ))
}

# report DIR NAME: the boot's results, one line per scenario or check.
report() {
    python3 - "$1" "$qemu_status" "$wall" "$2" <<'PY'
import json, sys
from pathlib import Path
out, qemu_status, wall, name = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
try:
    report = json.loads((out / "results.json").read_text())
except (OSError, ValueError):
    print(f"{name}: FAIL the guest left no results (qemu exit {qemu_status}); see {out}/console.log")
    sys.exit(2)
results = report["results"]
for result in results:
    figures = " ".join(f"{k}={v}" for k, v in result["figures"].items())
    line = f"{'PASS' if result['passed'] else 'FAIL'} {result['name']:<28} {result['seconds']:>6.1f}s  {figures}"
    print(line + (f"  -- {result['detail']}" if result["detail"] else ""))
# The checks the guest meant to run ("planned"): a guest that died, or a
# harness that raised, between two of them leaves results that all passed
# but are not all. After a failure that ended the run they are only listed.
ran = {r["name"] for r in results}
missing = [n for n in report.get("planned", []) if n not in ran]
ended_early = any(not r["passed"] for r in results)
for n in missing:
    print(f"{'NOT RUN' if ended_early else 'FAIL'} {n:<28} did not run (see {out}/console.log)")
passed = all(r["passed"] for r in results) and not missing
setup = report.get("setup") or {}
for fault in setup.get("faults", []):
    print(f"{name}: set-up retried: {fault}")
print(f"{name}: {'PASS' if passed else 'FAIL'}: {sum(r['passed'] for r in results)}/{len(results) + len(missing)} "
      f"checks; guest {report['guest_seconds']} s, boot wall time {wall} s")
failed = [r for r in results if not r["passed"]]
for result in failed:
    if result.get("setup_failure"):
        print(f"{name}: SET-UP FAILURE in {result['name']}: the test stack did not come up; Tether was not tested there")
if failed and all(r.get("setup_failure") for r in failed):
    sys.exit(3)
sys.exit(0 if passed else 1)
PY
}

status=0
worst() { [ "$status" -ge "$1" ] || status=$1; }
if wants scenarios; then
    cmdline="e2e.script=Tests/E2E/guest/main.sh e2e.tether=$tether"
    cmdline="$cmdline e2e.python=.build/e2e/venv/bin/python${E2E_ONLY:+ e2e.only=$E2E_ONLY}"
    boot "scenarios" "$out" "$cmdline"
    report "$out" "e2e" || worst $?
fi
if wants clock; then
    # A gateway without a real-time clock: the guest starts at 1970. The
    # broker's certificate (a CA and a server certificate for localhost) is
    # made here with the host's clock, valid from now; e2e.epoch is the
    # host's time at launch, from which the guest sets its clock later.
    tls=$out/clock/tls
    mkdir -p "$tls"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=Tether e2e CA" \
        -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$tls/server.ext"
    openssl x509 -req -days 30 -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
        -extfile "$tls/server.ext" -out "$tls/server.crt" 2>/dev/null
    chmod 0644 "$tls"/*  # mosquitto may read them after dropping to its own user
    cmdline="e2e.script=Tests/E2E/guest/main.sh e2e.tether=$tether e2e.python=.build/e2e/venv/bin/python"
    boot "clock (guest clock at 1970)" "$out/clock" "$cmdline e2e.only=clock-unsynced e2e.epoch=$(date +%s)" \
        -rtc base=1970-01-01T00:00:00
    report "$out/clock" "e2e-clock" || worst $?
fi
if wants systemd; then
    # systemd 252 as PID 1, the package installed with dpkg -i (Tests/E2E/systemd/).
    boot "systemd checks" "$out/systemd" \
        "e2e.mode=systemd e2e.script=Tests/E2E/systemd/prepare.sh e2e.deb=$deb e2e.previous_deb=$previous systemd.unit=e2e.target systemd.show_status=false"
    report "$out/systemd" "e2e-systemd" || worst $?
fi
if wants power-cut; then
    # One boot after another on one ext4 disk, each but the last killed.
    dir=$out/power-cut
    mkdir -p "$dir"
    echo "e2e: power-cut: ${E2E_CUTS:-10} cuts of QEMU (TCG, 2 vCPUs, 1 GiB) with an ext4 virtio disk; consoles in $dir"
    started=$(date +%s)
    set +e
    python3 Tests/E2E/vm/powercut.py --kernel "$kernel" --initrd "$work/initramfs.gz" --project "$root" --out "$dir" \
        --cuts "${E2E_CUTS:-10}" ${E2E_SEED:+--seed "$E2E_SEED"} \
        --append "e2e.tether=$tether e2e.python=.build/e2e/venv/bin/python"
    qemu_status=$?
    set -e
    wall=$(( $(date +%s) - started ))
    if [ "$qemu_status" = 3 ] || [ "$qemu_status" = 2 ]; then
        report "$dir" "e2e-power-cut" || true
        worst "$qemu_status"
    else
        report "$dir" "e2e-power-cut" || worst $?
    fi
fi
if [ "$status" != 0 ]; then
    echo "e2e: logs (bluetoothd, btmon, tether, dongle, console; systemd/: journal, units) are in $out" >&2
fi
exit "$status"
