#!/bin/sh
# Builds the Debian package tether_VERSION_ARCH.deb into OUTDIR from a tether
# binary (the static release build: `make deb` passes it).
#
#   packaging/deb/build-deb.sh BIN OUTDIR
#
# The tree is what `make install PREFIX=/usr` lays out (units and udev rules
# under /lib, as bookworm's packages still place them), man pages gzipped,
# the example config a conffile. Depends: is computed from the binary by
# dpkg-shlibdeps (libc6, libdbus-1-3, libbluetooth3, libmosquitto1, …);
# Recommends: bluez. VERSION comes from `git describe`: a tag vX.Y.Z gives
# X.Y.Z (X.Y.Z+N.gHASH past it); without tags, the binary's own version and
# the commit: 0.1.0~gitDATE.HASH (sorting before a release 0.1.0). The package
# is built with --root-owner-group (no fakeroot needed) and is
# reproducible for a given commit (SOURCE_DATE_EPOCH = the commit's time).
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 BIN OUTDIR" >&2
    exit 64
fi
bin=$(readlink -f "$1")
out=$(readlink -f "$2")
here=$(cd "$(dirname "$0")/../.." && pwd)
deb=$here/packaging/deb

[ -x "$bin" ] || { echo "$0: $bin is not an executable" >&2; exit 66; }

hash=$(git -C "$here" rev-parse --short=10 HEAD)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
if described=$(git -C "$here" describe --tags --match 'v[0-9]*' 2>/dev/null); then
    version=$(printf '%s\n' "$described" | sed -e 's/^v//' -e 's/-\([0-9]*\)-g\([0-9a-f]*\)$/+\1.g\2/')
else
    version="$("$bin" --version)~git$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d%H%M%S).$hash"
fi
arch=$(dpkg --print-architecture)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/root

make -C "$here" --no-print-directory install DESTDIR="$stage" PREFIX=/usr TETHER_BIN="$bin" \
    GEN_DIR="$work/gen" UNITDIR=/lib/systemd/system UDEVRULESDIR=/lib/udev/rules.d >"$work/install.log" 2>&1 || {
    cat "$work/install.log" >&2
    exit 1
}
[ -e "$stage/usr/share/man/man1/tether.1" ] || { echo "$0: no man pages (make man needs a Swift toolchain)" >&2; exit 1; }
gzip -9n "$stage"/usr/share/man/man1/*.1 "$stage"/usr/share/man/man5/*.5

doc=$stage/usr/share/doc/tether
install -D -m 0644 "$deb/copyright" "$doc/copyright"
{
    printf 'tether (%s) unstable; urgency=medium\n\n' "$version"
    printf '  * Built from commit %s.\n\n' "$(git -C "$here" rev-parse HEAD)"
    printf ' -- Tether developers <tether@example.org>  %s\n' "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"

install -D -m 0644 "$deb/lintian-overrides" "$stage/usr/share/lintian/overrides/tether"

mkdir -p "$stage/DEBIAN"
install -m 0755 "$deb/postinst" "$deb/prerm" "$deb/postrm" "$stage/DEBIAN/"
echo /etc/tether/tether.toml > "$stage/DEBIAN/conffiles"

# dpkg-shlibdeps wants a debian/control beside it.
mkdir -p "$work/debian"
printf 'Source: tether\n\nPackage: tether\nArchitecture: any\n' > "$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O -eroot/usr/bin/tether 2>"$work/shlibdeps.log" | sed -n 's/^shlibs:Depends=//p') || {
    cat "$work/shlibdeps.log" >&2
    exit 1
}
[ -n "$depends" ] || { echo "$0: dpkg-shlibdeps found no dependencies" >&2; cat "$work/shlibdeps.log" >&2; exit 1; }

(cd "$stage" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
installed=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: tether
Version: $version
Architecture: $arch
Maintainer: Tether developers <tether@example.org>
Installed-Size: $installed
Depends: $depends, systemd (>= 247)
Recommends: bluez
Suggests: mosquitto-clients
Section: net
Priority: optional
Description: keeps a Nordic BLE telemetry dongle awake and connected
 Tether is a daemon for Linux gateways: it finds a Nordic UART Service
 dongle through BlueZ (bluetoothd over D-Bus), connects, subscribes to its
 notifications and polls it so that it never falls asleep, reconnects
 within bounded retry windows after every drop, and writes every reading
 to a durable log in /var/lib/tether.
 .
 tether forward delivers the readings to an MQTT broker, at least once,
 from that log. Both run as sandboxed systemd services (tether.service,
 tether@NAME.service, tether-forward.service); tether status and tether
 reconnect steer them.
CONTROL

mkdir -p "$out"
file=$out/tether_${version}_${arch}.deb
rm -f "$out"/tether_*_"$arch".deb  # one package in OUTDIR: the one just built
find "$stage" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --root-owner-group -Zxz --build "$stage" "$file" >/dev/null
echo "$file"
