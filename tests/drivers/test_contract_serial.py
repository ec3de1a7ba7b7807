"""The one driver contract (tests/drivers/test_contract.py) run against the serial drivers, over a pty,
each talking to its device emulator: firmata, faulhaber-ascii and faulhaber-mcv3.

Hooks that differ from the simulator's:

* ``settle`` reads at the loop period until the motion has been steady for 10
  reads (a real device moves in real time; the contract's fixed read count
  assumes a simulated clock);
* ``inject_fault`` drives the *emulator* (garbage, ``Unknown command``, a
  drive fault, silence) and waits until the driver has seen it; clearing it
  heals the emulator and calls the driver's ``reconnect()`` — a serial
  driver's fault sticks until then.
"""

from __future__ import annotations

import time

import pytest

from drivers.check import contract

from drivers import registry
from drivers.base import Driver, Frame
from drivers.errors import DriverError
from drivers.faulhaber.driver import FaulhaberAsciiDriver, FaulhaberMcV3Driver
from drivers.firmata.driver import FirmataDriver
from sim.devices.faulhaber_ascii import AsciiLine, DriveConfig, LineConfig
from sim.devices.faulhaber_mcv3 import McV3Bus, McV3BusConfig, McV3DriveConfig
from sim.devices.firmata import BoardConfig, FirmataBoard
from sim.devices.pty import PtyRunner
from tests.conftest import wait_until
from tests.drivers.test_contract import DriverContract
from tests.drivers.test_faulhaber_driver import WHEELS
from tests.drivers.test_firmata_driver import TABLE as FIRMATA_TABLE

class SerialContract(DriverContract):
    steady_reads = 10
    settle_timeout_s = 10.0

    def settle(self, driver: Driver) -> Frame:
        """Read every ``read_dt_s`` until the motion changed by < 1 % (of its size, or 0.01) for 10 reads."""
        return contract.settle_until_steady(driver, self.motion, self.read_dt_s, self.steady_reads,
                                            self.settle_timeout_s)

    def heal(self, driver: Driver) -> None:
        """After the emulator is healed: the driver's fault sticks until it reconnects."""
        if driver.is_open:
            driver.reconnect(timeout_s=10.0)


# ====================================================================== firmata
class TestFirmataContract(SerialContract):
    #: the board is a thread of this test process: on a loaded machine it once sent nothing for 0.3 s (the
    #: staleness limit here then) in a check about halting; staleness is the subject of one check only
    #: (timeout_fault_raises_driver_timeout_error), which waits this out, and of tests/drivers/test_firmata_driver.py
    STALE_S = 2.0

    @pytest.fixture
    def runner(self):
        board = FirmataBoard(BoardConfig(firmware="FirmataExpress"))
        with PtyRunner(board, "firmata") as r:
            r.board = board
            yield r

    @pytest.fixture
    def driver(self, runner) -> FirmataDriver:
        d = FirmataDriver.from_config({**FIRMATA_TABLE, "port": runner.port, "stale_s": self.STALE_S}, {})
        self.runner = runner
        yield d
        d.close()

    def inject_fault(self, driver: Driver, kind: str | None) -> None:
        board, runner = self.runner.board, self.runner
        if kind is None:
            with runner.lock:
                board.inject("clear")
            self.heal(driver)
        elif kind == "read_error":
            before = driver.health().get("invalid_frames", 0)
            with runner.lock:
                board.inject("garbage", now_s=time.monotonic(), count=2000)
                burst_end_t = board._wire_free_t  # the burst leaves the board's wire at this time
            wait_until(lambda: driver.health()["invalid_frames"] >= before + 8, message="garbage received")
            # the whole burst written to the line before the check goes on: a clear then finds no garbage in
            # flight in the emulator (what is in the port's buffer a reconnect discards, as on a real line)
            def written_out() -> bool:
                with runner.lock:
                    return not any(t <= burst_end_t for t, _ in board._out) and not runner._out

            wait_until(written_out, message="the garbage burst written out")
        elif kind == "timeout":
            with runner.lock:
                board.inject("silent")
            wait_until(lambda: (driver.health().get("silent_s") or 0) > self.STALE_S, message="the board silent")
        else:
            raise ValueError(kind)


# ====================================================================== FAULHABER
class FaulhaberContract(SerialContract):
    driver_class: type = FaulhaberAsciiDriver

    def make_device(self):
        raise NotImplementedError

    @pytest.fixture
    def runner(self):
        dev = self.make_device()
        with PtyRunner(dev, self.driver_class.name) as r:
            r.dev = dev
            yield r

    @pytest.fixture
    def driver(self, runner):
        d = self.driver_class.from_config({"port": runner.port, "xonxoff": False, "axes": WHEELS,
                                           "reply_timeout_s": 0.3}, {})
        self.runner = runner
        yield d
        d.close()

    read_error_fault = "unknown"

    def inject_fault(self, driver: Driver, kind: str | None) -> None:
        dev, runner = self.runner.dev, self.runner
        if kind is None:
            with runner.lock:
                dev.inject("clear")
            self.heal(driver)
            return
        with runner.lock:
            dev.inject(self.read_error_fault if kind == "read_error" else "silent")
        wait_until(lambda: driver.health()["fault"] is not None, message=f"the driver sees {kind}")


class TestFaulhaberAsciiContract(FaulhaberContract):
    driver_class = FaulhaberAsciiDriver

    def make_device(self):
        return AsciiLine(LineConfig([DriveConfig(1), DriveConfig(2)]))


class TestFaulhaberMcV3Contract(FaulhaberContract):
    driver_class = FaulhaberMcV3Driver
    read_error_fault = "fault"  # the drive enters FAULT; configure() on reconnect resets it

    def make_device(self):
        return McV3Bus(McV3BusConfig([McV3DriveConfig(1), McV3DriveConfig(2)]))


def test_registry_lines_name_the_classes():
    for name in ("firmata", "faulhaber-ascii", "faulhaber-mcv3"):
        target = registry.DRIVERS[name]
        cls = registry.driver_class(name)
        assert cls.name == name and f"{cls.__module__}:{cls.__qualname__}" == target
    assert issubclass(registry.driver_class("firmata"), Driver)
    with pytest.raises(DriverError):
        registry.driver_class("serial")
