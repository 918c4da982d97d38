# Tether: build, test and demo on Debian 12. `make test` and `make demo`
# install what they need (as root, with apt-get) before building.

SWIFT      ?= swift
PREFIX     ?= /usr/local
DESTDIR    ?=
APT_PACKAGES = libdbus-1-dev libbluetooth-dev dbus-daemon pkg-config

.PHONY: all build release test demo deps clean

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

release: deps
	$(SWIFT) build -c release

# Serial: the integration tests measure timing (poll gaps, reconnect delays)
# and each starts its own dbus-daemon and simulator; on two cores they must
# not compete with each other.
test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build --no-parallel

demo: build
	$$($(SWIFT) build --show-bin-path)/tether demo

clean:
	rm -rf .build
