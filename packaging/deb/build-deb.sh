#!/bin/sh
# Builds the Debian package tether_VERSION_ARCH.deb into OUTDIR from a tether
# binary (the static release build: `make deb` passes it).
#
#   [ARCH=arm64 DOC_BIN=… STRIP=…] packaging/deb/build-deb.sh BIN OUTDIR
#
# The tree is what `make install PREFIX=/usr` lays out (units and udev rules
# under /lib, as bookworm's packages still place them), man pages gzipped,
# the example config a conffile. Depends: is computed from the binary by
# dpkg-shlibdeps (libc6, libdbus-1-3, libbluetooth3, …) with libmosquitto1 and libssl3,
# which `tether forward` loads with dlopen (dpkg-shlibdeps cannot see it), or,
# for a fully static binary (a musl cross build), is systemd alone;
# Recommends: bluez; Suggests: polkitd (uart-reattach asks it). VERSION is packaging/version.sh's (the file VERSION and
# the commit: 0.1.0~gitDATE.HASH before the tag v0.1.0, 0.1.0 at it,
# 0.1.0+N.gHASH past it), which the binary was built with and says too
# (`tether --version`); a binary that says otherwise was built from another
# tree and is refused. It works in a tree from `git archive` as in a checkout.
# ARCH (default: this machine's) is the package's architecture; DOC_BIN, a
# binary that runs here, writes the man pages and completions when BIN is for
# another architecture; STRIP strips BIN. The package is built with
# --root-owner-group (no fakeroot needed) and is reproducible for a given
# commit (SOURCE_DATE_EPOCH = the commit's time).
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

version=$("$here/packaging/version.sh")
commit=$("$here/packaging/version.sh" --commit)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$("$here/packaging/version.sh" --epoch)}
export SOURCE_DATE_EPOCH
host_arch=$(dpkg --print-architecture)
arch=${ARCH:-$host_arch}
doc_bin=${DOC_BIN:-$bin}
strip=${STRIP:-strip}

# The binary was built with the version (the TetherVersion build plugin runs
# the same script): if it says another, it is from another tree or commit.
# A binary for another architecture cannot run here: DOC_BIN, built from the
# same tree for this machine, answers for it.
answering=$bin
[ "$arch" = "$host_arch" ] || answering=$doc_bin
said=$("$answering" --version 2>&1) || { echo "$0: $answering --version failed: $said" >&2; exit 1; }
if [ "$said" != "$version" ]; then
    echo "$0: $answering says version $said, but this tree is $version (packaging/version.sh):" \
        "it was built from another commit; rebuild it (make release) or give one built from this tree" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/root

make -C "$here" --no-print-directory install DESTDIR="$stage" PREFIX=/usr TETHER_BIN="$bin" \
    ARCH="$arch" DOC_BIN="$doc_bin" STRIP="$strip" \
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
    if [ -n "$commit" ]; then
        printf '  * Built from commit %s.\n\n' "$commit"
    else
        printf '  * Built from a source tree whose commit is not known.\n\n'
    fi
    printf ' -- Tether developers <tether@example.org>  %s\n' "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"

install -D -m 0644 "$deb/lintian-overrides" "$stage/usr/share/lintian/overrides/tether"

mkdir -p "$stage/DEBIAN"
install -m 0755 "$deb/postinst" "$deb/prerm" "$deb/postrm" "$stage/DEBIAN/"
echo /etc/tether/tether.toml > "$stage/DEBIAN/conffiles"

# A dynamically linked binary (the native build) gets its Depends: from
# dpkg-shlibdeps, which wants a debian/control beside it. A fully static one
# (the musl cross build: no program interpreter) depends on no library.
if LC_ALL=C readelf -l "$stage/usr/bin/tether" | grep -q 'Requesting program interpreter'; then
    mkdir -p "$work/debian"
    printf 'Source: tether\n\nPackage: tether\nArchitecture: any\n' > "$work/debian/control"
    depends=$(cd "$work" && dpkg-shlibdeps -O -eroot/usr/bin/tether 2>"$work/shlibdeps.log" | sed -n 's/^shlibs:Depends=//p') || {
        cat "$work/shlibdeps.log" >&2
        exit 1
    }
    [ -n "$depends" ] || { echo "$0: dpkg-shlibdeps found no dependencies" >&2; cat "$work/shlibdeps.log" >&2; exit 1; }
    # libmosquitto1 and libssl3 (for the handshake's verify result): loaded
    # with dlopen by `tether forward`, so not in the ELF.
    depends="$depends, libmosquitto1, libssl3, "
else
    depends=
    {
        echo "# A fully static binary, on purpose: the musl cross build (docs/development.md,"
        echo "# \"Building for arm64\") links the C library, libdbus, libbluetooth, libmosquitto"
        echo "# and OpenSSL in, as no Debian library of that architecture matches musl."
        echo "tether: statically-linked-binary [usr/bin/tether]"
    } >> "$stage/usr/share/lintian/overrides/tether"
fi

(cd "$stage" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
installed=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: tether
Version: $version
Architecture: $arch
Maintainer: Tether developers <tether@example.org>
Installed-Size: $installed
Depends: ${depends}systemd (>= 247)
Recommends: bluez
Suggests: mosquitto-clients, polkitd
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
