#!/bin/sh
# Stops a build for another architecture at once, before anything compiles,
# when what it needs is not here: the Swift SDK that cross-compiles for it and
# the strip program that handles its binaries. For the host's architecture it
# says nothing and succeeds. The Makefile runs it (`make deb ARCH=arm64`).
#
#   packaging/check-arch.sh ARCH HOST_ARCH SWIFT_SDK STRIP SWIFT build|prebuilt
#
# `prebuilt`: TETHER_BIN names the binary, so no SDK is needed, only STRIP.
# docs/development.md, "Building for arm64", is the route these messages point at.
set -eu

if [ $# -ne 6 ]; then
    echo "usage: $0 ARCH HOST_ARCH SWIFT_SDK STRIP SWIFT build|prebuilt" >&2
    exit 64
fi
arch=$1 host=$2 sdk=$3 strip=$4 swift=$5 mode=$6

[ "$arch" = "$host" ] && exit 0

fail() {
    printf '%s\n' "$@" >&2
    exit 69  # EX_UNAVAILABLE
}

if [ -z "$sdk" ]; then
    fail "make: ARCH=$arch: no Swift SDK is known for that architecture (this machine is $host)." \
        "Known: ARCH=arm64 (SWIFT_SDK=aarch64-swift-linux-musl) and ARCH=amd64 (x86_64-swift-linux-musl);" \
        "for another, name the SDK yourself: make deb ARCH=$arch SWIFT_SDK=<an id from 'swift sdk list'>."
fi

if [ "$mode" = build ]; then
    installed=$("$swift" sdk list 2>&1 || true)
    if ! printf '%s\n' "$installed" | grep -qx "$sdk"; then
        version=$("$swift" --version 2>/dev/null | sed -n 's/.*Swift version \([0-9][0-9.]*\).*/\1/p' | head -n 1)
        fail "make: ARCH=$arch needs the Swift SDK '$sdk', and this toolchain has none by that name." \
            "'$swift sdk list' says: $(printf '%s' "$installed" | tr '\n' ' ')" \
            "" \
            "Install the Swift Static Linux SDK (musl) that matches this toolchain, Swift ${version:-?}:" \
            "  $swift sdk install <the SDK's .artifactbundle.tar.gz for Swift ${version:-?}> --checksum <its checksum>" \
            "(both are on swift.org's install page, under 'Static Linux SDK'); then '$swift sdk list' shows $sdk." \
            "Tether's C libraries must be there for $arch too, as static musl libraries that pkg-config finds:" \
            "libdbus-1, libbluetooth, libmosquitto and OpenSSL (PKG_CONFIG_PATH, PKG_CONFIG_SYSROOT_DIR)." \
            "docs/development.md, 'Building for arm64', has the whole route; it is untested here."
    fi
fi

if ! command -v "$strip" >/dev/null 2>&1; then
    fail "make: ARCH=$arch: '$strip' is not here to strip the $arch binary (the host's strip cannot)." \
        "Debian: apt-get install binutils-$(echo "$sdk" | sed 's/-swift-linux-musl//; s/_/-/g')-linux-gnu, or name another: STRIP=…"
fi
