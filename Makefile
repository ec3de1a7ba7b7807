# teleop — two commands: `make run` and `make test`. Both create .venv when missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# PROFILE=scara → config/scara-sim.toml; PROFILE=stewart → config/stewart-sim.toml; a name with a dash is the
# file itself (PROFILE=scara-faulhaber → config/scara-faulhaber.toml); CONFIG=FILE overrides both
PROFILE ?= rover
CONFIG ?= config/$(PROFILE)$(if $(findstring -,$(PROFILE)),,-sim).toml
ARGS   ?=

.PHONY: run test test-fast bench browser network-tools lint clean help emulate fleet

help:
	@echo "make run    - set up .venv and start the server on the simulator (http://127.0.0.1:8080)"
	@echo "             PROFILE=scara | stewart | scara-faulhaber for an arm or a platform (default rover)"
	@echo "make test   - set up .venv, Chromium and the network tools, run every test and the layer contracts"
	@echo "make test-fast - the unit tier only (in process: no server processes, no browser), and the contracts"
	@echo "make bench  - run the benchmarks and print the figures"
	@echo "make fleet  - a Zenoh router, a hub and N=3 simulated robots (two rovers, a SCARA); prints the hub's URL"
	@echo "make emulate - the server on an emulated Firmata board (EMULATOR=faulhaber_ascii: FAULHABER drives;"
	@echo "             EMULATOR=mavlink: an ArduPilot rover over MAVLink, EMULATOR_ARGS=\"--tcp 127.0.0.1:5760\" for TCP)"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
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

test: $(STAMP) browser network-tools
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(ARGS)

# the unit tier (tests/conftest.py gives every test a tier: unit, server, e2e): seconds, not the suite's minutes
test-fast: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -m unit -p no:cacheprovider $(ARGS)

bench: $(STAMP)
	$(BIN)/python bench/run_all.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache test-output .import_linter_cache
