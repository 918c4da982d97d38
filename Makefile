# Tether: build, test and demo on Debian 12. `make test` and `make demo`
# install what they need (as root, with apt-get) before building.

SWIFT      ?= swift
PREFIX     ?= /usr/local
DESTDIR    ?=
# The build needs the -dev packages; the tests also run systemd-analyze
# (systemd), udevadm (udev), man (man-db, for verify's Documentation= check),
# useradd (passwd) and setpriv (util-linux) for the D-Bus policy test, and
# mosquitto (the broker) for the MQTT client's tests, dpkg-dev (dpkg-shlibdeps)
# and lintian for the Debian package's.
APT_PACKAGES = libstdc++-12-dev libdbus-1-dev libbluetooth-dev libmosquitto-dev libssl-dev mosquitto mosquitto-clients dbus-daemon pkg-config systemd udev man-db passwd util-linux dpkg-dev lintian prometheus-node-exporter prometheus curl python3-seccomp python3-jsonschema

# Where `make install` puts things ($(DESTDIR) is prepended to each). With
# PREFIX=/usr they are Debian's own places; with the default /usr/local,
# systemd, udev, systemd-sysusers, man, bash-completion, zsh and fish still
# find the files (D-Bus needs /etc, see below).
BINDIR        ?= $(PREFIX)/bin
DATADIR       ?= $(PREFIX)/share
MANDIR        ?= $(DATADIR)/man
SYSCONFDIR    ?= /etc
UNITDIR       ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR   ?= $(PREFIX)/lib/sysusers.d
UDEVRULESDIR  ?= $(PREFIX)/lib/udev/rules.d
# dbus-daemon reads policies from /usr/share/dbus-1/system.d and
# /etc/dbus-1/system.d only (not from /usr/local/share): for any PREFIX but
# /usr the policy goes to $(SYSCONFDIR)/dbus-1/system.d, or the daemon could
# not own its bus name.
DBUSPOLICYDIR ?= $(if $(filter /usr,$(PREFIX)),$(DATADIR)/dbus-1/system.d,$(SYSCONFDIR)/dbus-1/system.d)
# polkitd reads rules from /usr/share/polkit-1/rules.d and /etc/polkit-1/rules.d only.
POLKITRULESDIR ?= $(if $(filter /usr,$(PREFIX)),$(DATADIR)/polkit-1/rules.d,$(SYSCONFDIR)/polkit-1/rules.d)
BASHCOMPDIR   ?= $(DATADIR)/bash-completion/completions
# Debian's zsh reads /usr/share/zsh/vendor-completions, and of /usr/local only
# /usr/local/share/zsh/site-functions.
ZSHCOMPDIR    ?= $(if $(filter /usr,$(PREFIX)),$(DATADIR)/zsh/vendor-completions,$(DATADIR)/zsh/site-functions)
FISHCOMPDIR   ?= $(DATADIR)/fish/vendor_completions.d
# The drop-in that gives the units the metrics textfile directory, and the alert
# rules (docs/operations.md, "Metrics").
EXAMPLESDIR   ?= $(DATADIR)/doc/tether/examples
# The reading record's JSON Schema (docs/operations.md, "The reading record"):
# data a consumer may validate against, so not under doc/ (which a minimal
# system may leave out).
SCHEMADIR     ?= $(DATADIR)/tether

# The Debian architecture to build and package for: `make deb ARCH=arm64`.
# The host's (dpkg --print-architecture, the default) is built natively: the
# Swift runtime linked in statically, Debian's C libraries dynamically. Any
# other is cross-compiled with a Swift SDK, SWIFT_SDK (for arm64 the Swift
# Static Linux SDK's aarch64-swift-linux-musl: a fully static binary), and
# stripped with that architecture's STRIP. packaging/check-arch.sh stops the
# build at once, saying what to install, when either is missing
# (docs/development.md, "Building for arm64").
HOST_ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo unknown)
ARCH      ?= $(HOST_ARCH)
SWIFT_SDK_FOR_arm64 = aarch64-swift-linux-musl
SWIFT_SDK_FOR_amd64 = x86_64-swift-linux-musl
SWIFT_SDK ?= $(if $(filter $(HOST_ARCH),$(ARCH)),,$(SWIFT_SDK_FOR_$(ARCH)))
STRIP_FOR_arm64 = aarch64-linux-gnu-strip
STRIP_FOR_amd64 = x86_64-linux-gnu-strip
STRIP ?= $(if $(filter $(HOST_ARCH),$(ARCH)),strip,$(STRIP_FOR_$(ARCH)))
# A cross build makes the product binary only: tether-dev and tether-dst are
# development tools, run where they are built.
# SWIFT_BUILD_FLAGS: more for that build, e.g. the static libraries a musl link
# needs beyond what pkg-config names (-Xlinker -lssl -Xlinker -lcrypto).
SWIFT_BUILD_FLAGS ?=
# RELEASE_PRODUCTS: which products the host's release build makes. Empty (the
# default): all of them, tether-dev included (make bench runs the release
# simulator beside the release daemon). `--product tether` builds only what
# the package holds, in under half the time from nothing: make test and
# make check-tarball build that way.
RELEASE_PRODUCTS ?=
# The host's release build lays the code `tether run` executes out together
# (docs/development.md, "Footprint"):
# - public functions internalized at link (every caller is in this link), so
#   --gc-sections drops the ones nothing calls (0.4 MB of the binary);
# - every function in its own section, and TEXT_ORDER (a linker script that
#   `make text-order` writes) gathering the ones the daemon runs into one
#   output section, so it faults in under 1 MiB of code in a row instead of
#   64 KiB pages all over an 11 MB .text;
# - GNU ld, for that script and for packed relative relocations (DT_RELR,
#   glibc >= 2.36): 9 KiB of them instead of 1 MiB of RELA entries that the
#   loader reads at every start;
# - RELRO, as gold gave by default: with WRITABLE_RODATA, the second script,
#   putting the writable .rodata input sections Swift emits after it;
# - no exported symbols (nothing loads the executable as a library);
# - unwind tables only for the C++ that throws (UNWIND_TABLES, the third
#   script; it says why Swift code needs none): 1.9 MB less binary;
# - libstdc++ (toml++ under TOMLKit, and the Swift runtime) from libstdc++.a:
#   only the functions used, laid out with the rest, instead of mapping and
#   relocating all of libstdc++.so and running its iostream set-up.
#   STATIC_CXX_DIR holds a libstdc++.so that is a linker script naming the
#   archive, found before the toolchain's own through the -L given to swiftc.
# SwiftPM neither recompiles nor relinks when only these flags change: after
# changing them, remove .build/*/release (a release build from nothing: ~3 min).
TEXT_ORDER     = packaging/text-order.ld
WRITABLE_RODATA = packaging/writable-rodata.ld
UNWIND_TABLES  = packaging/unwind-tables.ld
STATIC_CXX_DIR = $(CURDIR)/.build/static-libstdc++
LAYOUT_FLAGS = -Xswiftc -Xfrontend -Xswiftc -function-sections -Xswiftc -Xfrontend -Xswiftc -internalize-at-link -Xcc -ffunction-sections -Xcxx -ffunction-sections \
               -Xswiftc -use-ld=bfd -Xswiftc -L$(STATIC_CXX_DIR) \
               -Xlinker -T -Xlinker $(abspath $(TEXT_ORDER)) -Xlinker -T -Xlinker $(abspath $(WRITABLE_RODATA)) -Xlinker -T -Xlinker $(abspath $(UNWIND_TABLES)) \
               -Xlinker -z -Xlinker pack-relative-relocs -Xlinker -z -Xlinker relro -Xlinker --no-export-dynamic
RELEASE_FLAGS = -c release $(if $(SWIFT_SDK),--swift-sdk $(SWIFT_SDK) --product tether,--static-swift-stdlib $(LAYOUT_FLAGS) $(RELEASE_PRODUCTS)) $(SWIFT_BUILD_FLAGS)

# The tether binary that `install`, `man` and `completions` use. Empty (the
# default): build one with `swift build -c release`. Given, e.g.
#   make install DESTDIR=/tmp/root PREFIX=/usr TETHER_BIN=.build/debug/tether
# it is installed as is and nothing is built (the tests do this).
TETHER_BIN ?=
BIN = $(or $(TETHER_BIN),$(shell $(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)/tether)
BIN_PREREQ = $(if $(TETHER_BIN),,release)
# The binary whose ArgumentParser definitions give the man pages and the
# completions: it must run here, so for another ARCH it is a debug build for
# this machine, from the same sources (the same pages).
DOC_BIN ?= $(if $(filter $(HOST_ARCH),$(ARCH)),$(BIN),$(shell $(SWIFT) build --show-bin-path)/tether)
DOC_BIN_PREREQ = $(if $(filter $(HOST_ARCH),$(ARCH)),$(BIN_PREREQ),doc-bin)

# Generated files (man pages, completions, rewritten units) and check-units'
# scratch tree.
GEN_DIR   ?= .build/packaging
CHECK_DIR ?= .build/check-units
UNITS     = systemd/tether.service systemd/tether@.service systemd/tether-forward.service systemd/tether-forward@.service systemd/tether-serdev-rebind@.service
# `systemd-analyze security` scores 0.0 (best) to 10.0; --threshold= takes
# ten times that, so 20 is "overall exposure at most 2.0".
SECURITY_THRESHOLD ?= 20

.PHONY: deb all build release test demo soak e2e fuzz deps clean dst dst-selftest
.PHONY: install uninstall man completions check-units check-arch doc-bin check-tarball

all: build

# Installs the Debian packages the build and the tests need, if any is missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" -ne 0 ]; then echo "run as root, or: sudo apt-get install$$missing" >&2; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

build: deps
	$(SWIFT) build

# The Swift runtime and Foundation are linked in statically, so the installed
# binary runs on a gateway without the toolchain (only glibc, libdbus-1 and
# libbluetooth from Debian are needed there, and libmosquitto1 for `tether forward`).
release: deps check-arch $(if $(SWIFT_SDK),,static-libstdc++)
	@# SwiftPM relinks only when an object changed, not when a linker script did.
	@bin="$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)/tether"; \
	for script in "$(TEXT_ORDER)" "$(WRITABLE_RODATA)" "$(UNWIND_TABLES)"; do [ ! "$$script" -nt "$$bin" ] || rm -f "$$bin"; done
	$(SWIFT) build $(RELEASE_FLAGS)

# The linker script LAYOUT_FLAGS points at: libstdc++.a, wherever the
# toolchain's clang finds it (libstdc++-12-dev on Debian 12).
.PHONY: static-libstdc++
static-libstdc++:
	@archive=$$("$$(dirname "$$(realpath "$$(command -v $(SWIFT))")")/clang" -print-file-name=libstdc++.a); \
	case "$$archive" in /*) ;; *) echo "libstdc++.a not found: apt-get install libstdc++-12-dev" >&2; exit 1;; esac; \
	mkdir -p "$(STATIC_CXX_DIR)"; \
	echo "INPUT($$archive)" > "$(STATIC_CXX_DIR)/libstdc++.so.new"; \
	cmp -s "$(STATIC_CXX_DIR)/libstdc++.so.new" "$(STATIC_CXX_DIR)/libstdc++.so" && rm "$(STATIC_CXX_DIR)/libstdc++.so.new" || \
	  mv "$(STATIC_CXX_DIR)/libstdc++.so.new" "$(STATIC_CXX_DIR)/libstdc++.so"

# Rewrites TEXT_ORDER from a callgrind run of `tether run` against the
# simulator (packaging/text-order.sh; needs valgrind). Commit the result.
.PHONY: text-order
text-order: deps
	flock /tmp/tether-build.lock packaging/text-order.sh

# For ARCH other than the host's: the SDK (when building) and the strip
# program must be here, or the build stops at once saying what to install.
check-arch:
	@packaging/check-arch.sh "$(ARCH)" "$(HOST_ARCH)" "$(SWIFT_SDK)" "$(STRIP)" "$(SWIFT)" "$(if $(TETHER_BIN),prebuilt,build)"

# DOC_BIN for a cross build: this machine's debug build of tether.
doc-bin:
	$(SWIFT) build --product tether

# Serial: the integration tests measure timing (poll gaps, reconnect delays)
# and each starts its own dbus-daemon and simulator; on two cores they must
# not compete with each other.
# The Debian package is built first (a release build of tether alone): its
# test checks it. With TETHER_DEB_DIR set in the environment, the package
# already there is the one checked and none is built (CI passes the one
# check-tarball made from HEAD: a second release build would cost ~4 minutes).
test: deps
	$(if $(TETHER_DEB_DIR),@ls "$(TETHER_DEB_DIR)"/tether_*.deb > /dev/null 2>&1 || { echo "make test: TETHER_DEB_DIR=$(TETHER_DEB_DIR) holds no tether_*.deb" >&2; exit 1; }; \
	  echo "make test: checking the package in $(TETHER_DEB_DIR) (TETHER_DEB_DIR)",$(MAKE) --no-print-directory deb RELEASE_PRODUCTS="--product tether")
	$(SWIFT) build --build-tests
	TETHER_DEB_DIR="$(abspath $(or $(TETHER_DEB_DIR),$(DEB_DIR)))" $(SWIFT) test --skip-build --no-parallel

# The demo and the soak are in tether-dev, the development tools (`swift build`
# builds it next to tether, which they start for `tether run`).
demo: build
	$$($(SWIFT) build --show-bin-path)/tether-dev demo

# Chaos soak against the simulator (`tether-dev soak --help`): random faults for
# DURATION, then its invariants; exits non-zero on any violation. As root it
# also fills the readings directory (a tmpfs it mounts). CI runs DURATION=2m.
DURATION ?= 10m
soak: build
	$$($(SWIFT) build --show-bin-path)/tether-dev soak --duration $(DURATION)

# Deterministic simulation (docs/development.md, "Deterministic simulation"): the
# daemon from the D-Bus message up (its session, link service, supervisor and
# readings log) on virtual time against the simulated bluetoothd, through an
# in-process bus daemon, with a model of the disk; faults chosen by seed;
# invariants checked as things happen. By default 183 seeds of 2
# simulated days (a simulated year), DST_JOBS at a time; exits 1 on the first
# violation with its replay command. DST_SEEDS=N runs N seeds; DST_SEED=S
# replays one and prints its trace (DST_TRACE=full: polls and readings too);
# DST_DAYS=D simulated days per seed; DST_FIRST_SEED=S the first seed.
DST_SEEDS ?= 183
DST_DAYS  ?= 2
DST_JOBS  ?= 2
DST_BIN_DIR = $(shell $(SWIFT) build -c release --show-bin-path)
dst: deps
	flock /tmp/tether-build.lock $(SWIFT) build -c release --product tether-dst
	DST_SEEDS=$(DST_SEEDS) DST_DAYS=$(DST_DAYS) DST_JOBS=$(DST_JOBS) $(DST_BIN_DIR)/tether-dst

# Planted bugs for `make dst-selftest`: each is compiled in by
# -DDST_BUG_<NAME> (an `#if` in the file named) and must be caught by the
# default seed budget. Adding one: a line here and an `#if DST_BUG_<NAME>`.
DST_BUGS += INPROGRESS_NOT_CANCELLED      # Sources/LinkCore/LinkFailure+BlueZError.swift
DST_BUGS += STARTNOTIFY_INPROGRESS_FAILS  # Sources/LinkCore/BlueZReplies.swift
DST_BUGS += ESCALATION_WITHOUT_DEADLINE   # Sources/LinkCore/EscalationRun.swift
DST_BUGS += WINDOW_WITHOUT_ATTEMPT_BOUND  # Sources/LinkPolicy/ReconnectPolicy.swift
DST_BUGS += LINK_READY_IGNORES_GATT       # Sources/LinkSupervisor/LinkObservation.swift
DST_BUGS += CONNECTS_REMOVED_OBJECT       # Sources/LinkSupervisor/Supervisor+Attempts.swift
DST_BUGS += WRITE_NOT_ROLLED_BACK         # Sources/Readings/ReadingLog.swift
DST_BUGS += SEQ_REUSED_AFTER_RESTART      # Sources/Readings/ReadingLog.swift
DST_BUGS += TORN_TAIL_KEPT                # Sources/Readings/LogTailRecovery.swift
DST_BUGS += NO_KEEPALIVE_AFTER_RECONNECT  # Sources/LinkSupervisor/Supervisor+KeepAlive.swift
DST_BUGS += ONLINE_AFTER_SILENCE          # Sources/LinkSupervisor/Supervisor+Session.swift
DST_BUGS += STATUS_CHANGED_UNTOLD         # Sources/LinkSupervisor/Supervisor+KeepAlive.swift
DST_BUGS += SIGNAL_FROM_NON_OWNER         # Sources/TetherDaemon/Link/LinkService+Readings.swift
DST_BUGS += OLD_ANSWER_ACTS               # Sources/LinkSupervisor/Supervisor+Attempts.swift
DST_BUGS += SYNC_FLAG_LOST                 # Sources/Readings/RecordFormat.swift
DST_BUGS += STATUS_WALL_AGES               # Sources/TetherDaemon/Link/LinkService+ControlAPI.swift
DST_BUGS += STEPS_BEFORE_CONTROLLER_VERDICT  # Sources/LinkSupervisor/Supervisor+Escalation.swift
# A bug counts as caught only if the seed that caught it passes without it
# (a violation of the code as it is would otherwise pass for a catch).
# Each bug builds in its own scratch directory (the flags differ, and a
# rebuild after a change to the sources is then incremental).
DST_BUG_BUILD ?= .build-dst-bug
dst-selftest: deps
	flock /tmp/tether-build.lock $(SWIFT) build -c release --product tether-dst
	@set -u; escaped=""; mkdir -p "$(DST_BUG_BUILD)"; \
	for bug in $(DST_BUGS); do \
	  scratch="$(DST_BUG_BUILD)/$$bug"; \
	  flock /tmp/tether-build.lock $(SWIFT) build -c release --product tether-dst --scratch-path "$$scratch" \
	    -Xswiftc -DDST_BUG_$$bug > "$$scratch.build.log" 2>&1 || { cat "$$scratch.build.log"; exit 1; }; \
	  bin=$$($(SWIFT) build -c release --scratch-path "$$scratch" --show-bin-path); \
	  out=$$(DST_SEEDS=$(DST_SEEDS) DST_DAYS=$(DST_DAYS) DST_JOBS=$(DST_JOBS) "$$bin/tether-dst" 2>&1); rc=$$?; \
	  caught=$$(printf '%s\n' "$$out" | grep -m1 '^VIOLATION'); \
	  seed=$$(printf '%s\n' "$$caught" | sed -n 's/^VIOLATION seed=\([0-9]*\).*/\1/p'); \
	  if [ $$rc -eq 1 ] && [ -n "$$seed" ] && ! DST_SEED=$$seed DST_DAYS=$(DST_DAYS) "$(DST_BIN_DIR)/tether-dst" >/dev/null 2>&1; then \
	    echo "DST_BUG_$$bug: NOT JUDGED: seed $$seed fails without the bug too (make dst DST_SEED=$$seed)"; escaped="$$escaped $$bug"; \
	  elif [ $$rc -eq 1 ] && [ -n "$$caught" ]; then \
	    echo "DST_BUG_$$bug: caught: $$caught"; \
	  else \
	    echo "DST_BUG_$$bug: ESCAPED (exit $$rc)"; escaped="$$escaped $$bug"; \
	  fi; \
	done; \
	if [ -n "$$escaped" ]; then echo "dst-selftest: planted bugs not caught:$$escaped" >&2; exit 1; fi; \
	echo "dst-selftest: every planted bug was caught"

# End-to-end against the real bluetoothd and the kernel's Bluetooth stack in
# a QEMU guest, with a Bumble dongle on an emulated controller (see
# Tests/E2E/README.md). Installs its own packages; about 5 minutes with set-up.
# E2E_ONLY=link-drop,... picks scenarios; E2E_OUT is where the logs go.
e2e: deps
	Tests/E2E/run.sh

# libFuzzer targets (Fuzz/README.md): D-Bus messages, BlueZ properties, config
# files, readings-log recovery; FUZZ_SECONDS per target. Non-zero on a crash.
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) Fuzz/run.sh

clean:
	rm -rf .build .build-fuzz .build-dst-bug

# Man pages from the ArgumentParser definitions: tether.1 and one page per
# subcommand, by swift-argument-parser's GenerateManual plugin's tool
# (packaging/generate-manual.sh says why it runs the tool itself).
man: $(DOC_BIN_PREREQ)
	SWIFT=$(SWIFT) packaging/generate-manual.sh "$(DOC_BIN)" $(GEN_DIR)/man

# Shell completions, from the binary's ArgumentParser definitions.
completions: $(DOC_BIN_PREREQ)
	@mkdir -p $(GEN_DIR)/completions
	@# bash-completion sources the file: the generator's #! line is noise (lintian says so).
	"$(DOC_BIN)" --generate-completion-script bash | sed '1{/^#!/d}' > $(GEN_DIR)/completions/tether.bash
	"$(DOC_BIN)" --generate-completion-script zsh  > $(GEN_DIR)/completions/_tether
	"$(DOC_BIN)" --generate-completion-script fish > $(GEN_DIR)/completions/tether.fish

# Installs the binary, the units (their ExecStart pointing at $(BINDIR)/tether),
# the sysusers.d file, the D-Bus policy, the udev rules, the man pages (the
# commands', generated, and tether.toml(5), the config file's, written by hand
# in packaging/man), the completions and, unless one is there already, the
# example config. It starts
# nothing and creates no user: see the hint it prints. The binary is stripped
# (install -s): symbols are a quarter of it, and a gateway does not need them.
# A prebuilt binary (TETHER_BIN=…) installs without a Swift toolchain: the
# completions come from the binary itself, and the man pages are generated
# when $(SWIFT) is here, else taken from $(GEN_DIR)/man if they were copied
# there (`make man` where a toolchain is), else left out with a warning.
install: $(BIN_PREREQ) $(if $(TETHER_BIN),,man) completions
	@if [ -n "$(TETHER_BIN)" ]; then \
	  if command -v "$(SWIFT)" >/dev/null 2>&1; then \
	    $(MAKE) --no-print-directory man TETHER_BIN="$(TETHER_BIN)" GEN_DIR="$(GEN_DIR)" SWIFT="$(SWIFT)" ARCH="$(ARCH)"; \
	  elif ls $(GEN_DIR)/man/*.1 >/dev/null 2>&1; then \
	    echo "no $(SWIFT) here: installing the man pages already in $(GEN_DIR)/man"; \
	  else \
	    echo "warning: no man pages installed: $(SWIFT) is not here to generate them from $(TETHER_BIN);" \
	      "run 'make man TETHER_BIN=…' where a toolchain is and copy $(GEN_DIR)/man here, or install the Debian package" >&2; \
	  fi; \
	fi
	install -D -s --strip-program="$(STRIP)" -m 0755 "$(BIN)" "$(DESTDIR)$(BINDIR)/tether"
	@set -e; for unit in $(UNITS); do \
	  name=$$(basename $$unit); \
	  sed 's|^ExecStart=[^ ]*/tether |ExecStart=$(BINDIR)/tether |' $$unit > $(GEN_DIR)/$$name; \
	  grep -q '^ExecStart=$(BINDIR)/tether ' $(GEN_DIR)/$$name || { echo "$$unit: no ExecStart to rewrite" >&2; exit 1; }; \
	  echo "install -D -m 0644 $(GEN_DIR)/$$name $(DESTDIR)$(UNITDIR)/$$name"; \
	  install -D -m 0644 $(GEN_DIR)/$$name "$(DESTDIR)$(UNITDIR)/$$name"; \
	done
	install -D -m 0644 systemd/bluetooth-restart.conf "$(DESTDIR)$(UNITDIR)/bluetooth.service.d/tether.conf"
	install -D -m 0644 systemd/tether.sysusers "$(DESTDIR)$(SYSUSERSDIR)/tether.conf"
	install -D -m 0644 systemd/io.tether.Tether.conf "$(DESTDIR)$(DBUSPOLICYDIR)/io.tether.Tether.conf"
	install -D -m 0644 udev/70-tether.rules "$(DESTDIR)$(UDEVRULESDIR)/70-tether.rules"
	sed 's|"/usr/bin/tether"|"$(BINDIR)/tether"|' polkit/60-tether.rules > $(GEN_DIR)/60-tether.rules
	install -D -m 0644 $(GEN_DIR)/60-tether.rules "$(DESTDIR)$(POLKITRULESDIR)/60-tether.rules"
	install -D -m 0644 systemd/metrics-textfile.conf "$(DESTDIR)$(EXAMPLESDIR)/metrics-textfile.conf"
	install -D -m 0644 config/tether-alerts.yml "$(DESTDIR)$(EXAMPLESDIR)/tether-alerts.yml"
	install -D -m 0644 docs/reading.schema.json "$(DESTDIR)$(SCHEMADIR)/reading.schema.json"
	install -D -m 0644 packaging/man/tether.toml.5 "$(DESTDIR)$(MANDIR)/man5/tether.toml.5"
	@set -e; for page in $(GEN_DIR)/man/*.1; do \
	  [ -e "$$page" ] || continue; \
	  echo "install -D -m 0644 $$page $(DESTDIR)$(MANDIR)/man1/$$(basename $$page)"; \
	  install -D -m 0644 $$page "$(DESTDIR)$(MANDIR)/man1/$$(basename $$page)"; \
	done
	install -D -m 0644 $(GEN_DIR)/completions/tether.bash "$(DESTDIR)$(BASHCOMPDIR)/tether"
	install -D -m 0644 $(GEN_DIR)/completions/_tether "$(DESTDIR)$(ZSHCOMPDIR)/_tether"
	install -D -m 0644 $(GEN_DIR)/completions/tether.fish "$(DESTDIR)$(FISHCOMPDIR)/tether.fish"
	@if [ -e "$(DESTDIR)$(SYSCONFDIR)/tether/tether.toml" ]; then \
	  echo "keeping $(DESTDIR)$(SYSCONFDIR)/tether/tether.toml (the example is config/tether.toml)"; \
	else \
	  echo "install -D -m 0644 config/tether.toml $(DESTDIR)$(SYSCONFDIR)/tether/tether.toml"; \
	  install -D -m 0644 config/tether.toml "$(DESTDIR)$(SYSCONFDIR)/tether/tether.toml"; \
	fi
	@if [ -z "$(DESTDIR)" ]; then \
	  echo; \
	  echo "Next: set dongle.address in $(SYSCONFDIR)/tether/tether.toml, then"; \
	  echo "  systemd-sysusers tether.conf && systemctl daemon-reload && udevadm control --reload"; \
	  echo "  systemctl enable --now tether.service     # or tether@NAME.service with $(SYSCONFDIR)/tether/NAME.toml"; \
	  echo "  systemctl enable --now tether-forward.service   # with an [mqtt] table: the readings to a broker"; \
	fi

# The Debian package (packaging/deb/build-deb.sh): tether_VERSION_ARCH.deb in
# DEB_DIR, from the static release binary (or TETHER_BIN), with the man pages,
# completions, units, sysusers.d, D-Bus policy, udev rules and the example
# config as a conffile; Depends: from dpkg-shlibdeps. `lintian` checks it
# (the tests run it; the warnings kept are in packaging/deb/lintian-overrides).
# VERSION is packaging/version.sh's, which `tether --version` says too.
DEB_DIR ?= .build/deb
deb: check-arch $(BIN_PREREQ) $(DOC_BIN_PREREQ)
	@ARCH="$(ARCH)" DOC_BIN="$(DOC_BIN)" STRIP="$(STRIP)" packaging/deb/build-deb.sh "$(BIN)" $(DEB_DIR)

# `make deb` and `make install` in a tree from `git archive HEAD` (no .git, as
# in a release tarball), built from scratch in CHECK_TARBALL_DIR under the
# build lock (so run it without holding that lock): the package's version, and
# `tether --version` of the binary in it, must be the one this checkout gives,
# and lintian must find no error and no warning. It packs HEAD: commit first.
# A release build from nothing: minutes, so not in `make test`; CI runs it.
CHECK_TARBALL_DIR ?= .build/check-tarball
check-tarball: deps
	packaging/check-tarball.sh "$(CHECK_TARBALL_DIR)"

# Removes what `install` installed, except the config (and the readings in
# /var/lib/tether, the user and the groups): those are the admin's.
uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/tether"
	rm -f "$(DESTDIR)$(UNITDIR)/tether.service" "$(DESTDIR)$(UNITDIR)/tether@.service"
	rm -f "$(DESTDIR)$(UNITDIR)/tether-forward.service" "$(DESTDIR)$(UNITDIR)/tether-forward@.service" \
	  "$(DESTDIR)$(UNITDIR)/tether-serdev-rebind@.service"
	rm -f "$(DESTDIR)$(UNITDIR)/bluetooth.service.d/tether.conf"
	rmdir "$(DESTDIR)$(UNITDIR)/bluetooth.service.d" 2>/dev/null || true
	rm -f "$(DESTDIR)$(SYSUSERSDIR)/tether.conf"
	rm -f "$(DESTDIR)$(DBUSPOLICYDIR)/io.tether.Tether.conf"
	rm -f "$(DESTDIR)$(UDEVRULESDIR)/70-tether.rules"
	rm -f "$(DESTDIR)$(POLKITRULESDIR)/60-tether.rules"
	rm -f "$(DESTDIR)$(EXAMPLESDIR)/metrics-textfile.conf" "$(DESTDIR)$(EXAMPLESDIR)/tether-alerts.yml"
	rm -f "$(DESTDIR)$(SCHEMADIR)/reading.schema.json"
	rmdir "$(DESTDIR)$(SCHEMADIR)" 2>/dev/null || true
	rm -f "$(DESTDIR)$(MANDIR)/man1/tether.1" "$(DESTDIR)$(MANDIR)/man1/tether".*.1
	rm -f "$(DESTDIR)$(MANDIR)/man5/tether.toml.5"
	rm -f "$(DESTDIR)$(BASHCOMPDIR)/tether" "$(DESTDIR)$(ZSHCOMPDIR)/_tether" "$(DESTDIR)$(FISHCOMPDIR)/tether.fish"
	@if [ -e "$(DESTDIR)$(SYSCONFDIR)/tether/tether.toml" ]; then \
	  echo "kept $(DESTDIR)$(SYSCONFDIR)/tether/tether.toml"; \
	fi

# Checks every unit with systemd-analyze:
#  - security --offline=yes: overall exposure at most 2.0 (SECURITY_THRESHOLD);
#  - verify, on the units as installed: into $(CHECK_DIR)/root (PREFIX=/usr)
#    with the debug binary (or TETHER_BIN). verify insists that ExecStart's
#    binary exists, and `verify --root=` would also want all of systemd's own
#    units under that root, so it runs on copies of the installed units whose
#    ExecStart points at the binary in the staging tree. MANPATH points `man`
#    at the staged man pages, which verify checks for Documentation=.
#    --recursive-errors=no: only these units count, not the host's
#    bluetooth.service or dbus.service.
check-units: $(if $(TETHER_BIN),,build)
	@set -e; for unit in $(UNITS); do \
	  report=$$(systemd-analyze security --offline=yes --threshold=$(SECURITY_THRESHOLD) $$unit 2>&1) \
	    || { printf '%s\n' "$$report"; echo "$$unit: overall exposure above $(SECURITY_THRESHOLD)/10 or not assessed" >&2; exit 1; }; \
	  echo "$$unit: $$(printf '%s\n' "$$report" | grep 'Overall exposure level')"; \
	done
	rm -rf $(CHECK_DIR) && mkdir -p $(CHECK_DIR)/units
	$(MAKE) --no-print-directory install DESTDIR="$(abspath $(CHECK_DIR))/root" PREFIX=/usr \
	  GEN_DIR="$(CHECK_DIR)/gen" TETHER_BIN="$(abspath $(or $(TETHER_BIN),$(shell $(SWIFT) build --show-bin-path)/tether))" \
	  > $(CHECK_DIR)/install.log || { cat $(CHECK_DIR)/install.log; exit 1; }
	@set -e; for unit in $(UNITS); do \
	  name=$$(basename $$unit); \
	  sed 's|^ExecStart=/usr/bin/tether |ExecStart=$(abspath $(CHECK_DIR))/root/usr/bin/tether |' \
	    $(CHECK_DIR)/root/usr/lib/systemd/system/$$name > $(CHECK_DIR)/units/$$name; \
	done
	MANPATH="$(abspath $(CHECK_DIR))/root/usr/share/man" systemd-analyze verify --recursive-errors=no \
	  $(addprefix $(CHECK_DIR)/units/,$(notdir $(UNITS)))
	@echo "check-units: every unit passes security (exposure at most $(SECURITY_THRESHOLD)/10) and verify"

# Benchmarks against the simulator, side by side with a Python peer (bleak +
# bleak-retry-connector, and paho-mqtt for forwarding: bench/peer_bleak.py,
# installed into BENCH_VENV): footprint, ingest, keepalive, recovery, startup, waiting,
# forward (against Debian's mosquitto; bench/run.py says what each
# measures). Prints one table per benchmark and writes the figures to
# .build/bench/results.json; asserts nothing. One of them: make bench BENCH=ingest.
# The runs hold /tmp/tether-build.lock so no build on this machine distorts them.
BENCH                    ?=
BENCH_VENV               ?= .build/bench-venv
BENCH_FOOTPRINT_DURATION ?= 60s
BENCH_INGEST_DURATION    ?= 60s
BENCH_INGEST_RATES       ?= 2000,20000
BENCH_NOTIFY_PATHS       ?= start-notify,acquire-notify
BENCH_KEEPALIVE_DURATION ?= 10m
BENCH_KEEPALIVE_RATE     ?= 20000
BENCH_DROPS              ?= 50
BENCH_FORWARD_DURATION   ?= 20s
BENCH_METRICS_DURATION   ?= 30s
BENCH_WAITING_DURATION   ?= 60s
.PHONY: bench
bench: deps
	flock /tmp/tether-build.lock $(MAKE) --no-print-directory deb
	@command -v python3 >/dev/null || { echo "bench needs python3" >&2; exit 1; }
	@[ -x $(BENCH_VENV)/bin/pip ] || python3 -m venv $(BENCH_VENV) || { \
	  echo "python3 -m venv failed: install python3-venv (apt-get install python3-venv)" >&2; exit 1; }
	@$(BENCH_VENV)/bin/python -c 'import bleak, bleak_retry_connector, paho.mqtt' 2>/dev/null || \
	  $(BENCH_VENV)/bin/pip install -q bleak bleak-retry-connector paho-mqtt
	flock /tmp/tether-build.lock env TETHER_BIN="$(BIN)" TETHER_DEB_DIR="$(abspath $(DEB_DIR))" PEER_PYTHON="$(abspath $(BENCH_VENV))/bin/python" \
	  BENCH_FOOTPRINT_DURATION=$(BENCH_FOOTPRINT_DURATION) BENCH_INGEST_DURATION=$(BENCH_INGEST_DURATION) \
	  BENCH_INGEST_RATES=$(BENCH_INGEST_RATES) BENCH_NOTIFY_PATHS=$(BENCH_NOTIFY_PATHS) BENCH_KEEPALIVE_DURATION=$(BENCH_KEEPALIVE_DURATION) \
	  BENCH_KEEPALIVE_RATE=$(BENCH_KEEPALIVE_RATE) BENCH_FORWARD_DURATION=$(BENCH_FORWARD_DURATION) \
	  BENCH_DROPS=$(BENCH_DROPS) BENCH_METRICS_DURATION=$(BENCH_METRICS_DURATION) BENCH_WAITING_DURATION=$(BENCH_WAITING_DURATION) python3 bench/run.py $(BENCH)
