#!/bin/sh
# `make check-tarball`: proves that a tree from `git archive HEAD` (no .git,
# as a release tarball) builds and installs as a checkout does.
#
#   packaging/check-tarball.sh DIR
#
# In DIR/src, from scratch: `make deb` (a release build of the packaged
# product alone, RELEASE_PRODUCTS="--product tether", under the build lock)
# and `make install` into DIR/root. The package's Version, `tether --version`
# of the binary in it and of the one installed must all be the version this
# checkout gives (packaging/version.sh, from git; the tarball's comes from
# packaging/archive-info); lintian must find no error and no warning. Prints
# the package's size and installed size. HEAD is what is packed: uncommitted
# changes are not in it.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 64
fi
here=$(cd "$(dirname "$0")/.." && pwd -P)
mkdir -p "$1"
dir=$(cd "$1" && pwd -P)
src=$dir/src

fail() {
    echo "check-tarball: FAIL: $*" >&2
    exit 1
}

expected=$("$here/packaging/version.sh")
if [ -n "$(git -C "$here" status --porcelain --untracked-files=no)" ]; then
    echo "check-tarball: note: uncommitted changes are not in the archive (it packs HEAD)"
fi
rm -rf "$src" "$dir/deb" "$dir/root" "$dir/unpacked"
mkdir -p "$src"
git -C "$here" archive --format=tar HEAD | tar -x -C "$src"
[ ! -e "$src/.git" ] || fail "the archive has a .git"
from_archive=$("$src/packaging/version.sh")
[ "$from_archive" = "$expected" ] || fail "the tarball's version is $from_archive, the checkout's $expected"
echo "check-tarball: $src from git archive HEAD, version $from_archive"

start=$(date +%s)
if ! flock /tmp/tether-build.lock make -C "$src" --no-print-directory deb DEB_DIR="$dir/deb" RELEASE_PRODUCTS="--product tether" > "$dir/deb.log" 2>&1; then
    tail -n 40 "$dir/deb.log" >&2
    fail "make deb in the tarball's tree (log: $dir/deb.log)"
fi
echo "check-tarball: make deb: $(($(date +%s) - start)) s (a release build from nothing)"
deb=$(ls "$dir"/deb/tether_*.deb)
version=$(dpkg-deb -f "$deb" Version)
[ "$version" = "$expected" ] || fail "the package's Version is $version, expected $expected"
dpkg-deb -x "$deb" "$dir/unpacked"
said=$("$dir/unpacked/usr/bin/tether" --version)
[ "$said" = "$expected" ] || fail "the packaged tether --version says $said, expected $expected"
echo "check-tarball: $(basename "$deb"): $(stat -c %s "$deb") bytes, Installed-Size $(dpkg-deb -f "$deb" Installed-Size) KiB"

lintian_out=$(lintian --fail-on error,warning "$deb" 2>&1) || { printf '%s\n' "$lintian_out" >&2; fail "lintian"; }
if printf '%s\n' "$lintian_out" | grep -q '^[EW]:'; then
    printf '%s\n' "$lintian_out" >&2
    fail "lintian reports errors or warnings"
fi
echo "check-tarball: lintian: no error, no warning"

# make install from the same tree: the release binary is built already.
if ! flock /tmp/tether-build.lock make -C "$src" --no-print-directory install DESTDIR="$dir/root" PREFIX=/usr RELEASE_PRODUCTS="--product tether" > "$dir/install.log" 2>&1; then
    tail -n 40 "$dir/install.log" >&2
    fail "make install in the tarball's tree (log: $dir/install.log)"
fi
said=$("$dir/root/usr/bin/tether" --version)
[ "$said" = "$expected" ] || fail "the installed tether --version says $said, expected $expected"
for file in usr/share/man/man1/tether.1 usr/share/man/man5/tether.toml.5 usr/lib/systemd/system/tether.service etc/tether/tether.toml; do
    [ -e "$dir/root/$file" ] || fail "make install did not install /$file"
done
echo "check-tarball: make install: binary, units, man pages and config in place"
echo "check-tarball: OK ($expected)"
