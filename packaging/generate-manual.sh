#!/bin/sh
# Writes tether's man pages (mdoc roff) for the binary BIN into OUTDIR:
# tether.1 and one page per subcommand (tether.run.1, tether.status.1, …).
#
#   packaging/generate-manual.sh BIN OUTDIR [DATE]
#
# The pages come from the ArgumentParser definitions, through
# swift-argument-parser's own generator: its GenerateManual package plugin.
# Run as designed (`swift package plugin generate-manual`), the plugin first
# builds every product of the package in release mode and documents those
# binaries; `make install TETHER_BIN=…` (and the tests) must document the given
# binary without a release build. So the plugin is used here only to build its
# generator tool (`--help` builds the tool and prints its usage), and the tool
# is then run on BIN, exactly as the plugin would run it. The tool asks BIN for
# `--experimental-dump-help` and turns that JSON into mdoc.
#
# DATE (yyyy-mm-dd) goes into the pages; default: SOURCE_DATE_EPOCH's date, else
# the commit's (packaging/version.sh --epoch: from git, or from a `git archive`
# tree's packaging/archive-info), so that rebuilding the pages from the same
# sources gives the same files.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 BIN OUTDIR [DATE]" >&2
    exit 64
fi
bin=$1
out=$2
swift=${SWIFT:-swift}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -x "$bin" ]; then
    echo "$0: $bin is not an executable" >&2
    exit 66
fi

if [ $# -ge 3 ] && [ -n "$3" ]; then
    date=$3
elif [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
    date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%F)
else
    date=$(date -u -d "@$("$here/packaging/version.sh" --epoch)" +%F)
fi

# Build the generator (about 10 s the first time, then a no-op) and find it:
# SwiftPM puts plugin tools among the host's debug products, as
# `generate-manual-tool` (SwiftPM 6) or `generate-manual` (5.x).
# It has a scratch directory of its own: `swift test` holds .build's lock for
# the whole test run, so the packaging tests' `make install` would wait for
# ever on a SwiftPM command using .build.
scratch=${MANUAL_SCRATCH:-$here/.build/manual-generator}
cd "$here"
if ! log=$("$swift" package --scratch-path "$scratch" plugin generate-manual --help 2>&1); then
    printf '%s\n' "$log" >&2
    echo "$0: could not build swift-argument-parser's generate-manual tool" >&2
    exit 70
fi
bindir=$("$swift" build --scratch-path "$scratch" --show-bin-path)
tool=
for name in generate-manual-tool generate-manual; do
    if [ -x "$bindir/$name" ] && [ -f "$bindir/$name" ]; then
        tool=$bindir/$name
        break
    fi
done
if [ -z "$tool" ]; then
    echo "$0: swift package plugin generate-manual built no tool in $bindir" >&2
    exit 70
fi

rm -rf "$out"
mkdir -p "$out"
"$tool" "$bin" --multi-page --date "$date" --section 1 --output-directory "$out"

# A page per subcommand is the generator's choice; tether.1 must be among them.
if [ ! -s "$out/tether.1" ]; then
    echo "$0: the generator wrote no tether.1 into $out" >&2
    exit 70
fi

# A blank line in a help text's discussion reaches the page as an empty input
# line, which groff warns about (and lintian reports): mdoc's paragraph break
# is .Pp.
for page in "$out"/*.1; do
    sed -i 's/^$/.Pp/' "$page"
done
