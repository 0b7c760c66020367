# pushwoosh-agent: `make run` starts the emulator and the agent; `make test` runs every test.
SWIFT      ?= swift
SWIFTFLAGS ?= -Xswiftc -warnings-as-errors
PREFIX     ?= /usr/local
BIN         = $(shell $(SWIFT) build -c release --show-bin-path 2>/dev/null)
DEBUG_BIN   = $(shell $(SWIFT) build --show-bin-path 2>/dev/null)

.PHONY: deps build release test run install clean

deps:
	@scripts/install-deps

build: deps
	$(SWIFT) build $(SWIFTFLAGS)

release: deps
	$(SWIFT) build -c release $(SWIFTFLAGS)

test: deps
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	$(SWIFT) test --skip-build

run: build
	@scripts/run-demo "$(DEBUG_BIN)"

install: release
	@PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" SYSTEMD_UNIT_DIR="$(SYSTEMD_UNIT_DIR)" scripts/install "$(BIN)"

clean:
	rm -rf .build
