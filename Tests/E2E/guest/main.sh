#!/bin/sh
# PID 1 of the e2e guest after switch_root (the host's / read-only, tmpfs on
# /run, /tmp and /var/lib/bluetooth, the output share on /tmp/e2e-out). Runs
# the scenarios, records their exit status where the host can read it, and
# powers the guest off so QEMU exits.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
out=/tmp/e2e-out
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
hostname e2e-guest

python3 -u "$(dirname "$0")/scenarios.py" "$out"
echo $? > "$out/exit-status"
sync
exec busybox poweroff -f
