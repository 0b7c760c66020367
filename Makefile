# pushwoosh-agent: `make run` starts the emulator and the agent; `make test` runs every test.
SWIFT      ?= swift
SWIFTFLAGS ?= -Xswiftc -warnings-as-errors
# Release binaries carry the Swift runtime: measured, they start to READY=1 in 29 ms instead
# of 40 ms and peak at 34 MiB instead of 39 MiB, and the service needs no toolchain at run time.
# No RUNPATH $ORIGIN (--disable-local-rpath): nothing of ours is a shared library, and with it
# ld.so first looked for each of libinih, libsystemd, libmicrohttpd, libcurl, libm, libstdc++,
# libgcc_s and libc next to the binary (18 failed openat per start, 69 -> 51 in all).
# The C++ library the Swift runtime needs is linked in as well (libstdc++.a, Debian's
# libstdc++-12-dev): measured with 1,000 stored flags, ld.so then does 9,885 symbol relocations
# instead of 11,549, READY=1 comes 6.9% sooner and each process has ~73 KiB fewer private pages.
# The static Swift runtime asks for -lstdc++; a directory holding only libstdc++.a, first in the
# linker's search path, makes that the archive (without the archive `make release` stops, rather
# than link the shared library unnoticed).
# Linked by the toolchain's lld, which lays the functions listed in Benchmarks/pushwoosh-agentd.order
# (those the agent runs, hottest first; Benchmarks/hot-functions writes it from a profile) together
# at the start of the code: measured with 1,000 flags and 256 clients, the agent's resident code
# pages went from 7.0 to 3.4 MiB and its peak RSS from 22.1 to 19.5 MiB (docs/performance.md).
# Its ~38,000 relative relocations are packed (DT_RELR, glibc >= 2.36): 900 KiB of relocation
# entries the dynamic loader read at every start become 7.5 KiB (peak RSS 19.5 -> 18.7 MiB).
# The project's modules are compiled with function sections, so each of its hot functions moves on
# its own (without, a file's non-public functions share one section and move together).
STATIC_CXX_DIR = $(CURDIR)/.build/static-libstdc++
HOT_FUNCTIONS  = $(CURDIR)/Benchmarks/pushwoosh-agentd.order
RELEASEFLAGS ?= --static-swift-stdlib --disable-local-rpath -Xlinker -L$(STATIC_CXX_DIR) \
	-Xswiftc -use-ld=lld -Xlinker --symbol-ordering-file=$(HOT_FUNCTIONS) -Xlinker --no-warn-symbol-ordering \
	-Xlinker -z -Xlinker pack-relative-relocs -Xswiftc -Xfrontend -Xswiftc -function-sections
PREFIX     ?= /usr/local
BIN         = $(shell $(SWIFT) build -c release --show-bin-path 2>/dev/null)
DEBUG_BIN   = $(shell $(SWIFT) build --show-bin-path 2>/dev/null)
# The Python virtual environment of the Python client's and the OpenFeature tests
# (scripts/make-venv, requirements-dev.txt).
VENV       ?= $(CURDIR)/.build/venv

.PHONY: deps vm-deps build release test run install clean fault-test fuzz soak soak-real soak-seeds bench hot-functions deb systemd-test python-venv python-test ofrep-test lab-schema-test

deps:
	@scripts/install-deps

build: deps
	$(SWIFT) build $(SWIFTFLAGS)

release: deps
	@mkdir -p $(STATIC_CXX_DIR); a=$$(cc -print-file-name=libstdc++.a); \
	  if [ -f "$$a" ]; then ln -sf "$$a" $(STATIC_CXX_DIR)/libstdc++.a; \
	  else echo "make release: no libstdc++.a (Debian's libstdc++-12-dev; make deps installs it)" >&2; exit 1; fi
	$(SWIFT) build -c release $(RELEASEFLAGS) $(SWIFTFLAGS)

# The Swift tests run one at a time (--no-parallel, ~90 s): on 2 cores, tests that wait on real
# processes held both of Swift Testing's cooperative threads and starved the async emulator tests'
# timing checks.
test: deps
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	$(SWIFT) test --skip-build --no-parallel
	scripts/lab-test-curl "$(DEBUG_BIN)"
	scripts/lab-test-node "$(DEBUG_BIN)"
	$(MAKE) --no-print-directory python-test
	$(MAKE) --no-print-directory ofrep-test
	$(MAKE) --no-print-directory lab-schema-test

python-venv: deps
	@scripts/make-venv "$(VENV)"

# The Python client and pytest plugin (clients/python): mypy --strict, then its tests against
# the debug binaries.
python-test: python-venv
	$(SWIFT) build $(SWIFTFLAGS)
	cd clients/python && "$(VENV)/bin/python" -m mypy --strict
	cd clients/python && "$(VENV)/bin/python" -m pytest -q -p no:cacheprovider --pushwoosh-bin "$(DEBUG_BIN)"

# docs/http.md F with OpenFeature's own Python SDK and OFREP provider, prometheus-client and
# promtool against the debug build (Tests/python, in the same venv).
ofrep-test: python-venv
	$(SWIFT) build $(SWIFTFLAGS)
	PUSHWOOSH_BIN="$(DEBUG_BIN)" "$(VENV)/bin/python" -m pytest -q -p no:cacheprovider Tests/python --ignore=Tests/python/test_lab_schema.py

# The running lab held to its OpenAPI document, docs/lab-openapi.json (docs/lab.md "The contract"):
# the served document is the file, a scripted session's every answer is valid against it, and
# schemathesis sends every operation valid and invalid requests (no 5xx, every answer as the
# document says). About half a minute.
lab-schema-test: python-venv
	$(SWIFT) build $(SWIFTFLAGS)
	PUSHWOOSH_BIN="$(DEBUG_BIN)" "$(VENV)/bin/python" -m pytest -q -p no:cacheprovider Tests/python/test_lab_schema.py

# `make run CLOCK=controlled` runs the device on a clock that advance-clock moves;
# `AGENT_CONF='[Agent]\nUserId=alice'` appends configuration lines (a later key wins).
# Only what the demo runs: the packages it needs (install-deps --run) and its three binaries.
run: export CLOCK := $(CLOCK)
run: export AGENT_CONF := $(AGENT_CONF)
run:
	@scripts/install-deps --run
	$(SWIFT) build $(SWIFTFLAGS) --product pushwoosh-agentd
	$(SWIFT) build $(SWIFTFLAGS) --product pushwoosh-emulator
	$(SWIFT) build $(SWIFTFLAGS) --product pushwoosh-agentctl
	@setpriv --pdeathsig TERM -- scripts/run-demo "$(DEBUG_BIN)"

install: release
	@PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" SYSTEMD_UNIT_DIR="$(SYSTEMD_UNIT_DIR)" scripts/install "$(BIN)"

clean:
	rm -rf .build

vm-deps:
	@scripts/install-vm-deps

# The Debian package: the static release build, staged by scripts/install,
# built with dpkg-deb and checked with lintian. DEB_DIR/pushwoosh-agent_VERSION_amd64.deb.
DEB_DIR ?= .build/deb
DEB      = $(DEB_DIR)/pushwoosh-agent_$(shell sed -n '1s/^pushwoosh-agent (\(.*\)).*/\1/p' packaging/debian/changelog)_$(shell dpkg --print-architecture).deb
deb: release vm-deps
	scripts/build-deb "$(BIN)" "$(DEB_DIR)"

# The service under a real systemd 252: boots a QEMU VM (TCG, no network
# device) whose PID 1 is this machine's systemd, installs the package in it and checks
# the lifecycle, then reboots it and checks that state survived and purge is clean.
# Needs root. Results in .build/systemd-test/results.txt; about 7 minutes with the package build.
systemd-test: release vm-deps
	scripts/build-deb "$(BIN)" "$(DEB_DIR)"
	scripts/systemd-test "$(BIN)" "$(DEB)"

# Fault suite (docs/testing.md): 1,000 SIGKILLs during refreshes and writes, then a full and a
# read-only state directory (needs root for tmpfs mounts). About 5 minutes.
fault-test: build
	scripts/fault-kill9 "$(DEBUG_BIN)"
	scripts/fault-disk "$(DEBUG_BIN)"
	scripts/fault-connections "$(DEBUG_BIN)"

# libFuzzer on the line framer, the JSON-RPC parser and the server response parser:
# FUZZ_SECONDS per target (default 200, so 10 minutes in all).
fuzz:
	Fuzz/run

# `make soak DURATION=10m AGENTS=1 [SOAK_ARGS="--seed 7 --refresh 15s"]`: the soak runner with release builds.
soak: release
	$(BIN)/pushwoosh-soak --duration $(or $(DURATION),10m) --agents $(or $(AGENTS),1) --bin $(BIN) --report $(or $(REPORT),soak-report) $(SOAK_ARGS)

# `make soak-real [DAYS=7] [AGENTS=3]`: the soak with the SDK's real timings on controlled device
# clocks (docs/device-clock.md H), DAYS device days at 2000 device seconds per real second (~1 min
# for 1). Coverage is required (docs/soak.md): under DAYS=1 or AGENTS=3 it is refused with exit 3
# (SOAK_ARGS=--no-require-coverage runs it anyway). REPORT/report.html is the page to look at.
soak-real: release
	$(BIN)/pushwoosh-soak --real-timings --device-days $(or $(DAYS),7) --agents $(or $(AGENTS),3) --bin $(BIN) --report $(or $(REPORT),soak-report) --junit $(or $(JUNIT),$(or $(REPORT),soak-report)/junit.xml) $(SOAK_ARGS)

# `make soak-seeds [SEEDS="1 2 3"] [RANDOM_SEEDS=50] [DURATION=120s] [AGENTS=3] [JOBS=4]`: the soak
# runner once per seed of Tests/soak/seeds.txt (seeds that once failed stay there), plus
# RANDOM_SEEDS more; fails if any run fails. Results in .build/soak-seeds/results.txt.
soak-seeds: release
	RANDOM_SEEDS="$(RANDOM_SEEDS)" DURATION="$(DURATION)" AGENTS="$(AGENTS)" JOBS="$(JOBS)" scripts/soak-seeds "$(BIN)" $(SEEDS)

# Benchmarks (Benchmarks/README.md): release build, then every measurement in one run (~4 min),
# written to Benchmarks/results/latest.md and .json. BENCH_ARGS passes options, e.g.
# `make bench BENCH_ARGS="--idle-seconds 10 --duration 1"` for a quick look.
BENCH_ARGS ?=
# Benchmarks/pushwoosh-agentd.order from a callgrind profile of the release agent (~1 minute).
# SwiftPM does not know the file is an input of the link: the binary is removed to be linked again.
hot-functions: release
	Benchmarks/hot-functions
	rm -f "$(BIN)/pushwoosh-agentd"
	$(SWIFT) build -c release $(RELEASEFLAGS) $(SWIFTFLAGS)

bench: release
	@scripts/install-deps wrk
	timeout 600 $(BIN)/pushwoosh-bench --bin $(BIN) --out Benchmarks/results/latest $(BENCH_ARGS)
