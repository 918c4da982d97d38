#!/bin/sh
# PID 1 of a power-cut boot (Tests/E2E/guest/powercut.py): as main.sh, but
# most boots end with the host killing QEMU, not with a poweroff.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
out=/tmp/e2e-out
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
hostname e2e-guest

python3 -u "$(dirname "$0")/powercut.py" "$out"
echo $? > "$out/exit-status"
sync
exec busybox poweroff -f
