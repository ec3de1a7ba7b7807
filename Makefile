# teleop — two commands: `make run` and `make test`. Both create .venv when missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
# the set-up installs exactly the lock file's pins (hashes checked), so a clone a month from now gets what CI passed
# with; `make lock` resolves pyproject.toml again (docs/development.md)
LOCK   := requirements.lock
# the installer: uv (its pin and hashes in UV_LOCK), installed into .venv by pip; it installs the lock in ~3 s
# where pip took ~40 s of CPU (unpacking and byte-compiling every package: Python compiles what it imports)
UV_LOCK := scripts/uv-installer.lock
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCK) $(UV_LOCK) | cksum | cut -d' ' -f1)
# PROFILE=scara → config/scara-sim.toml; PROFILE=stewart → config/stewart-sim.toml; a name with a dash is the
# file itself (PROFILE=scara-faulhaber → config/scara-faulhaber.toml); CONFIG=FILE overrides both
PROFILE ?= rover
CONFIG ?= config/$(PROFILE)$(if $(findstring -,$(PROFILE)),,-sim).toml
ARGS   ?=
# Python keeps no bytecode cache when PYTHONDONTWRITEBYTECODE is set (some images set it): every interpreter the
# suite starts (three a server, ~390 servers) compiled the project's sources again, ~0.7 s of CPU a server
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast bench browser network-tools lint clean help emulate fleet lock

help:
	@echo "make run    - set up .venv and start the server on the simulator (http://127.0.0.1:8080)"
	@echo "             PROFILE=scara | stewart | scara-faulhaber for an arm or a platform (default rover)"
	@echo "make test   - set up .venv, Chromium and the network tools, run every test and the layer contracts"
	@echo "make test-fast - the unit tier only (in process: no server processes, no browser), and the contracts"
	@echo "make bench  - run the benchmarks and print the figures"
	@echo "make lock   - resolve pyproject.toml's dependencies again into requirements.lock (LOCK_ARGS=--upgrade: newest)"
	@echo "make fleet  - a Zenoh router, a hub and N=3 simulated robots (two rovers, a SCARA); prints the hub's URL"
	@echo "make emulate - the server on an emulated Firmata board (EMULATOR=faulhaber_ascii: FAULHABER drives;"
	@echo "             EMULATOR=mavlink: an ArduPilot rover over MAVLink, EMULATOR_ARGS=\"--tcp 127.0.0.1:5760\" for TCP)"

$(STAMP): pyproject.toml $(LOCK) $(UV_LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --require-hashes -r $(UV_LOCK)
	$(BIN)/uv pip install -q --python $(BIN)/python --require-hashes -r $(LOCK)
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps --no-build-isolation -e .
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m server --config $(CONFIG) $(ARGS)

# `make emulate`: a device emulator on a pseudo-terminal (sim/devices/) and the server driving it
# through the real serial driver, as with hardware (docs/hardware.md). The emulator stops with the server.
EMULATOR ?= firmata
EMULATOR_ARGS ?=
EMULATOR_CONFIG_firmata := config/rover-firmata.toml
EMULATOR_CONFIG_faulhaber_ascii := config/rover-faulhaber.toml
EMULATOR_CONFIG_mavlink := config/rover-mavlink.toml
# the emulator's module in sim/devices/ when it is not named as EMULATOR (a pty by default; --tcp/--udp-out/--udp-in)
EMULATOR_MODULE_mavlink := mavlink_vehicle
emulate: CONFIG = $(EMULATOR_CONFIG_$(EMULATOR))

emulate: $(STAMP)
	@test -n "$(CONFIG)" || { echo "make emulate: no profile for EMULATOR=$(EMULATOR); give CONFIG=..." >&2; exit 2; }
	@out=$$(mktemp); \
	$(BIN)/python -m sim.devices.$(or $(EMULATOR_MODULE_$(EMULATOR)),$(EMULATOR)) $(EMULATOR_ARGS) >$$out & emu=$$!; \
	trap 'kill $$emu 2>/dev/null; rm -f $$out' EXIT INT TERM; \
	for i in $$(seq 100); do port=$$(sed -n 's/^.* emulator on \([^ ]*\) .*$$/\1/p' $$out); \
		[ -n "$$port" ] && break; kill -0 $$emu 2>/dev/null || break; sleep 0.1; done; \
	[ -n "$$port" ] || { echo "make emulate: the $(EMULATOR) emulator did not start" >&2; exit 1; }; \
	cat $$out; \
	$(BIN)/python -m server --config $(CONFIG) --set driver.port=$$port $(ARGS)

# `make fleet N=3`: router, hub and N robots on loopback (docs/fleet.md)
N ?= 3
fleet: $(STAMP)
	$(BIN)/python -m server.hub.demo --robots $(N)

browser:
	@bash scripts/install-browser.sh

# ip/tc (iproute2) and nft (nftables) for the link emulator (linkemu/, docs/networks.md)
network-tools:
	@sh scripts/install-network-tools.sh

# the suite in four pytest-xdist processes, a test file to a worker (its module's server and fixtures stay one),
# the longest files first (tests/file-durations.txt; xdist's own order puts the files with the most tests first):
# ~9 min where one process takes 29-31 (docs/development.md, "Workers"); WORKERS=0: one process
WORKERS ?= 4
test: $(STAMP) browser network-tools
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder $(ARGS)

# the unit tier (tests/conftest.py gives every test a tier: unit, server, e2e): about a minute in the same
# workers, not the suite's minutes (one process: ~4.5 min, most of it waiting out drivers' timeouts)
test-fast: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -m unit -p no:cacheprovider -n $(WORKERS) --dist loadfile --no-loadscope-reorder $(ARGS)

bench: $(STAMP)
	$(BIN)/python bench/run_all.py $(ARGS)

# `make lock`: pyproject.toml's dependencies resolved again into requirements.lock (make run/test) and
# requirements-run.lock (the Dockerfile: no test tools), for CPython 3.11 on x86_64 Linux. Pins still allowed
# by pyproject.toml are kept; LOCK_ARGS=--upgrade moves every package to its newest allowed release.
UV_VERSION ?= 0.13.9
LOCK_ARGS ?=
LOCK_FLAGS := --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header -q $(LOCK_ARGS)
lock:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# the pinned uv from its hashes; a new UV_VERSION (not in UV_LOCK yet) by its version, once
	@if grep -q '^uv==$(UV_VERSION) ' $(UV_LOCK); then \
		$(BIN)/python -m pip install -q --disable-pip-version-check --require-hashes -r $(UV_LOCK); \
	else $(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION); fi
	$(BIN)/uv pip compile pyproject.toml --extra test scripts/lock-build.in $(LOCK_FLAGS) -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml scripts/lock-build.in $(LOCK_FLAGS) -o requirements-run.lock
	@echo "uv==$(UV_VERSION)" | $(BIN)/uv pip compile - $(LOCK_FLAGS) --no-annotate -o $(UV_LOCK).tmp
	@{ echo "# uv, the installer of the set-up (Makefile): pip installs it from these hashes, then it installs requirements.lock"; \
	   echo "# (make lock writes this file from UV_VERSION)"; cat $(UV_LOCK).tmp; } > $(UV_LOCK) && rm $(UV_LOCK).tmp
	@echo "lock: requirements.lock, requirements-run.lock and $(UV_LOCK) written; 'make test' installs and checks them"

clean:
	rm -rf $(VENV) .pytest_cache test-output .import_linter_cache
