#!/bin/sh
# Prepares the systemd guest's root (an overlay: the host's / below a tmpfs),
# run by vm/init in a chroot before systemd starts: installs the previous
# release's Debian package with dpkg -i as an operator did (the first check,
# systemd-upgrade, upgrades it to this tree's while it runs, as a gateway is
# upgraded; every later check is of the upgraded gateway), writes the
# operator's config and secrets as the previous release's docs said, the metrics
# drop-ins docs/operations.md tells operators to install, and the e2e units
# (units/), and points systemd at e2e.target (the kernel command line says
# systemd.unit=e2e.target). Its output goes to OUT/prepare.log.
set -eux
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
project=/run/e2e/project
here=$project/Tests/E2E/systemd

deb="" previous=""
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        e2e.deb=*) deb="$project/${arg#e2e.deb=}" ;;
        e2e.previous_deb=*) previous="$project/${arg#e2e.previous_deb=}" ;;
    esac
done
[ -f "$deb" ] || { echo "no package: e2e.deb=$deb" >&2; exit 1; }
[ -f "$previous" ] || { echo "no previous release's package: e2e.previous_deb=$previous" >&2; exit 1; }

# The host's fstab names the host's disks: the guest has none.
: > /etc/fstab
# The host may be a container: its marker would make systemd believe the
# guest is one too (and then ignore the kernel command line).
rm -f /.dockerenv /run/.containerenv
# And its policy-rc.d (exit 101: "no service actions") would keep the
# package's maintainer scripts from restarting the units, as no gateway does.
rm -f /usr/sbin/policy-rc.d
hostname e2e-systemd 2>/dev/null || true
echo e2e-systemd > /etc/hostname

# No man-db index rebuild under emulation (its dpkg trigger checks this file).
rm -f /var/lib/man-db/auto-update

# The previous release's package, as on a gateway (its postinst creates the
# users); systemd-upgrade installs $deb over it.
dpkg -i "$previous"
dpkg -s tether | sed -n 's/^Version: /installed tether /p'
printf '%s\n' "$deb" > /etc/e2e-upgrade-deb

# bluetoothd starts only once the dongle holds hci1 (see units/): not by
# itself when the adapters appear, nor through D-Bus activation.
rm -f /etc/systemd/system/bluetooth.target.wants/bluetooth.service /etc/systemd/system/dbus-org.bluez.service

# The dongle is found by its service (its address is the emulated
# controller's); the keep-alive and the retry windows are short for the test.
cat > /etc/tether/tether.toml <<'TOML'
[bluez]
adapter = "hci0"

[dongle]
service_uuid = "6e400001-b5a3-f393-e0a9-e50e24dcca9e"

[keepalive]
interval = "2s"
timeout = "2s"
sleep_after = "8s"
# Every keep-alive waits for bluetoothd's answer: systemd-bluetooth-hang needs
# Tether's verdict on a hung bluetoothd (at most 2 + 2 + 3 s) before
# bluetooth.service's watchdog restarts it (10 s after its last pet, which the
# check makes the moment of the hang).
confirm_every = "0s"

[reconnect]
initial_backoff = "500ms"
max_backoff = "4s"
connect_timeout = "10s"
window = "20s"
window_attempts = 4
cooldown = "15s"
escalate = ["rfkill-unblock"]

[readings]
flush_interval = "500ms"

[mqtt]
url = "mqtt://127.0.0.1"
batch = 1
# (mosquitto here takes anyone: the file is here for the upgrade's checks.)
username = "gw-e2e"
password_file = "/etc/tether/mqtt.password"

[metrics]
textfile = "/var/lib/prometheus/node-exporter/tether.prom"
forward_textfile = "/var/lib/prometheus/node-exporter/tether-forward.prom"
interval = "2s"
TOML

# An instance for a controller of its own, by address, and that
# controller's dongle: the keep-alive and retry windows of the test, and
# the steps (with anything else for [reconnect]) in $4.
# instance_config NAME ADAPTER DONGLE RECONNECT_LINES
instance_config() {
    cat > "/etc/tether/$1.toml" <<TOML
[bluez]
adapter = "$2"

[dongle]
address = "$3"

[keepalive]
interval = "2s"
timeout = "2s"
sleep_after = "8s"

[reconnect]
initial_backoff = "500ms"
max_backoff = "4s"
connect_timeout = "10s"
window = "20s"
window_attempts = 4
cooldown = "15s"
$4

[readings]
flush_interval = "500ms"
TOML
}
# Instance "usb" (tether@usb), for the systemd-usb-reset check: the USB
# controller, its dongle, and the usb-reset step.
instance_config usb 00:AA:01:04:00:01 00:AA:01:04:00:02 'escalate = ["usb-reset"]'
# Instance "uart" (tether@uart), for the uart-* checks: the UART controller
# (Bumble on a pseudo-terminal, attached by e2e-uart-attach.service), its
# dongle, and uart-reattach restarting that unit (the shipped polkit rule
# lets user tether restart it because this file names it).
instance_config uart 00:AA:01:06:00:01 00:AA:01:06:00:02 'escalate = ["power-cycle", "hci-reset", "uart-reattach"]
uart_unit = "e2e-uart-attach.service"'
# Instance "paired" (tether@paired, not started here): a dongle that pairs
# with a passkey, its file made as the previous release's docs said (0640,
# group tether), which this release no longer reads: systemd-upgrade checks
# that the upgrade says so, with the fix.
cat > /etc/tether/paired.toml <<'TOML'
[dongle]
address = "00:AA:01:05:00:02"
pairing = "passkey-file"
passkey_file = "/etc/tether/paired.passkey"
TOML
# (The chroot has no /dev/stdin: the docs' `install … /dev/stdin` in two steps.)
printf '123456\n' > /etc/tether/paired.passkey
chgrp tether /etc/tether/paired.passkey && chmod 0640 /etc/tether/paired.passkey
# The broker's password as the previous release's docs said (0400, owner tether-forward).
printf '%s\n' 'e2e-secret' > /etc/tether/mqtt.password
chown tether-forward /etc/tether/mqtt.password && chmod 0400 /etc/tether/mqtt.password

# Metrics, as docs/operations.md's "Metrics" section says.
for unit in tether tether-forward; do
    install -D -m 0644 /usr/share/doc/tether/examples/metrics-textfile.conf \
        "/etc/systemd/system/$unit.service.d/metrics-textfile.conf"
done
# (A tmpfs: the overlay over 9p does not take ACLs; a gateway's ext4 does.)
mkdir -p /var/lib/prometheus/node-exporter
mount -t tmpfs -o mode=0755 tmpfs /var/lib/prometheus/node-exporter
setfacl -m u:tether:rwx,u:tether-forward:rwx /var/lib/prometheus/node-exporter

# For the groups checks: bob, an operator of the previous release (group
# tether: the readings, Reconnect and, then, /dev/rfkill); the upgrade must
# add him to tether-admin (systemd-upgrade), and keep his Reconnect without
# write access to /dev/rfkill (systemd-operator). alice, a reader of this
# release (group tether only), is added after the upgrade (systemd-upgrade).
useradd -M -N -G tether -s /bin/sh bob

# The e2e units and drop-ins.
cp "$here"/units/*.service "$here"/units/*.target /etc/systemd/system/
for dropin in "$here"/units/*.conf; do
    name=$(basename "$dropin" .conf)     # e.g. bluetooth.service-e2e
    unit=${name%-e2e}
    install -D -m 0644 "$dropin" "/etc/systemd/system/$unit.d/e2e.conf"
done
echo prepared
