#!/usr/bin/env bash
# Builds the e2e guest's initramfs: busybox-static, the modules that virtio-9p
# and the overlay root (e2e.mode=systemd) need from Debian's kernel, and vm/init. Usage: build-initramfs.sh KERNEL_VERSION OUTPUT
set -euo pipefail
version=$1
output=$2
here=$(cd "$(dirname "$0")" && pwd)
modules=/lib/modules/$version
[ -d "$modules" ] || { echo "no $modules: install linux-image-amd64" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,proc,sys,dev,modules}
cp /bin/busybox "$work/bin/busybox"
cp "$here/init" "$work/init"

# modules.dep lists each module's dependencies; walk them depth-first so
# every module comes after what it needs, each once.
declare -A seen=()
order=()
add() {
    local name=$1 path deps dep
    path=$(modinfo -k "$version" -F filename "$name" 2>/dev/null) || { echo "module $name not found" >&2; exit 1; }
    [ "$path" = "(builtin)" ] && return
    [ -n "${seen[$path]:-}" ] && return
    seen[$path]=1
    deps=$(modinfo -k "$version" -F depends "$name" | tr ',' ' ')
    for dep in $deps; do add "$dep"; done
    cp "$path" "$work/modules/"
    order+=("$(basename "$path")")
}
for module in virtio_pci 9pnet_virtio 9p overlay; do add "$module"; done
printf '%s\n' "${order[@]}" > "$work/modules.order"

(cd "$work" && find . | cpio -o -H newc --quiet) | gzip -1 > "$output.tmp"
mv "$output.tmp" "$output"
