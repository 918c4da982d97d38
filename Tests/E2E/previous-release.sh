#!/bin/sh
# Builds the Debian package of the previous release (the commit named in
# Tests/E2E/previous-release) from `git archive` of that commit, as a release
# tarball would be built, into DIR/COMMIT/, and prints the package's path.
# A package already built there for that commit is reused: a release build
# from nothing takes minutes (about 2 with --product tether, which that
# release's Makefile takes through SWIFT_BUILD_FLAGS; 6 for all products).
#
#   Tests/E2E/previous-release.sh DIR
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 64
fi
here=$(cd "$(dirname "$0")/../.." && pwd -P)
commit=$(grep -v -e '^#' -e '^$' "$here/Tests/E2E/previous-release" | head -n 1)
case "$commit" in
    *[!0-9a-f]*|"") echo "$0: Tests/E2E/previous-release names no commit" >&2; exit 65 ;;
esac
mkdir -p "$1"
dir=$(cd "$1" && pwd -P)/$commit
for deb in "$dir"/deb/tether_*.deb; do
    if [ -f "$deb" ]; then
        echo "$deb"
        exit 0
    fi
done
if ! git -C "$here" cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "$0: the previous release's commit $commit is not in this clone (a shallow clone?): git fetch --unshallow" >&2
    exit 66
fi
rm -rf "$dir"
mkdir -p "$dir/src"
git -C "$here" archive --format=tar "$commit" | tar -x -C "$dir/src"
started=$(date +%s)
if ! flock /tmp/tether-build.lock make -C "$dir/src" --no-print-directory deb DEB_DIR="$dir/deb" SWIFT_BUILD_FLAGS="--product tether" > "$dir/deb.log" 2>&1; then
    tail -n 40 "$dir/deb.log" >&2
    echo "$0: make deb of the previous release $commit failed (log: $dir/deb.log)" >&2
    rm -rf "$dir/deb"
    exit 1
fi
# Only the package is kept: the tree and its build are a release build's worth of disk.
rm -rf "$dir/src"
echo "previous release $commit: make deb $(($(date +%s) - started)) s" >&2
ls "$dir"/deb/tether_*.deb
