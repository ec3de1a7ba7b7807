"""The driver contract: every check a driver must pass, as plain functions, run by the project's tests and by you.

The project's one contract test class (``tests/drivers/test_contract.py``, python-can's back2back idea) is a
thin pytest adapter over :data:`CHECKS`: each of its tests calls one function here, with the hooks of its
subclass (how to settle, what motion is, how to inject a fault). ``python -m drivers.check`` runs the same
functions against a driver of yours on your bench (:mod:`drivers.check.__main__`), so "passes the contract"
means the same thing in both places.

A check takes a :class:`Bench` (the hooks) and a driver — unopened (``needs="driver"``) or opened and active
(``needs="opened"``: the runner opens, activates and closes it) — and raises ``AssertionError`` (or whatever the
driver raised) on failure. Checks that need a fault (``"read_error"``: reads fail; ``"timeout"``: the device goes
silent) call :attr:`Bench.inject_fault`; a bench without one skips them (:class:`Skip`).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from drivers.base import (TWIST_ACTUATORS, WIDGETS, Acquisition, Capability, ChannelSpec, Driver, DriverState, Frame,
                          JointLimits, MotionProgram, ProgramGenerator)
from drivers.errors import AcquisitionError, DriverCommandError, DriverError, DriverTimeoutError

MOTION_UNITS = ("rad/s", "m/s")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
#: the bad values a write must refuse (``"beyond"``: ten times the actuator's limit)
BAD_WRITES = ("beyond", math.nan, math.inf, "text", True)
#: the bad sampling rates ``set_acquisition`` must refuse
BAD_RATES = (0, -1.0, 1e-3, math.nan, math.inf, "fast", True, None, 1e9)
#: the bad channel lists it must refuse: an unknown name, a repeated one
BAD_CHANNELS = (("no_such_channel",), "duplicate")


class Skip(Exception):
    """The check cannot run on this bench (the reason says why and what would let it)."""


def moving_command(driver: Driver) -> dict[str, float]:
    """Every actuator at half its positive limit."""
    return {name: 0.5 * hi for name, (lo, hi) in driver.actuators().items()}


def motion(driver: Driver, frame: Frame) -> float:
    """How much the robot moves, from the frame: the largest |speed| channel (units rad/s, m/s)."""
    speed_channels = [c.name for c in driver.channels() if c.unit in MOTION_UNITS]
    return max((abs(frame.values[n]) for n in speed_channels if n in frame.values), default=0.0)


def settle_by_count(driver: Driver, read_dt_s: float = 0.01, reads: int = 60) -> Frame:
    """``reads`` reads of ``read_dt_s``: a simulator moves by the ``dt`` it is given."""
    frame = driver.read(read_dt_s)
    for _ in range(reads - 1):
        frame = driver.read(read_dt_s)
    return frame


def settle_until_steady(driver: Driver, motion_of: Callable[[Driver, Frame], float] = motion, read_dt_s: float = 0.01,
                        steady_reads: int = 10, timeout_s: float = 10.0) -> Frame:
    """Read every ``read_dt_s`` until the motion changed by < 1 % (of its size, or 0.01) for ``steady_reads``
    fresh samples: a real device moves in real time."""
    deadline = time.monotonic() + timeout_s
    frame = driver.read(read_dt_s)
    last = motion_of(driver, frame)
    last_t = max(frame.sample_t.values(), default=0.0)
    steady = 0
    while steady < steady_reads:
        if time.monotonic() > deadline:
            raise AssertionError(f"motion did not settle within {timeout_s} s (last {last})")
        time.sleep(read_dt_s)
        frame = driver.read(read_dt_s)
        sample_t = max(frame.sample_t.values(), default=0.0)
        if sample_t == last_t:
            continue  # a held value says nothing about settling: wait for a fresh sample
        m = motion_of(driver, frame)
        steady = steady + 1 if abs(m - last) <= max(0.01, 0.01 * abs(last)) else 0
        last, last_t = m, sample_t
    return frame


def debug_faults(driver: Driver, kind: str | None) -> None:
    """Faults through the driver's own test hooks (``debug({"fault": kind})``, as the simulator has them)."""
    driver.debug({"fault": kind})


@dataclass
class Bench:
    """How to exercise a driver: the hooks a ``DriverContract`` subclass overrides, or the check's options."""

    read_dt_s: float = 0.01
    #: after a halt, the motion must fall under this fraction of the moving motion
    stopped_fraction: float = 0.05
    moving_command: Callable[[Driver], dict[str, float]] = moving_command
    motion: Callable[[Driver, Frame], float] = motion
    settle: Callable[[Driver], Frame] = field(default=settle_by_count)
    #: ``(driver, "read_error" | "timeout" | None)``: make reads fail, or heal them (and reconnect); None: cannot
    inject_fault: Callable[[Driver, str | None], None] | None = None
    #: the registry's lookup (``drivers.registry.driver_class``), for the "found by its name" check
    find: Callable[[str], type] | None = None

    def fault(self, driver: Driver, kind: str | None) -> None:
        if self.inject_fault is None:
            raise Skip("no way to inject a fault on this bench (python -m drivers.check: --faults MODULE:FUNCTION "
                       "or --interactive)")
        self.inject_fault(driver, kind)


@contextmanager
def opened(driver: Driver) -> Iterator[Driver]:
    """Open and active (writes reach the outputs); closed afterwards."""
    driver.open()
    try:
        driver.activate()
        yield driver
    finally:
        driver.close()


# ============================================================================ the checks
@dataclass(frozen=True)
class Check:
    name: str
    fn: Callable[..., None]
    needs: str  # "driver" (unopened) or "opened" (open and active)
    params: tuple[Any, ...] = ()
    doc: str = ""


CHECKS: list[Check] = []


def check(needs: str = "driver", params: tuple[Any, ...] = ()) -> Callable:
    def register(fn: Callable[..., None]) -> Callable[..., None]:
        CHECKS.append(Check(fn.__name__, fn, needs, params, (fn.__doc__ or "").strip().split("\n")[0]))
        return fn
    return register


# ---- lifecycle ---------------------------------------------------------------
@check()
def registered_under_its_name(bench: Bench, driver: Driver) -> None:
    """The registry (built in, or the ``teleop.drivers`` entry points) finds the class by its ``name``."""
    if bench.find is None:
        raise Skip("no registry given")
    try:
        found = bench.find(driver.name)
    except DriverError as err:
        raise AssertionError(str(err)) from None
    assert found is type(driver), f"the registry's {driver.name!r} is {found.__module__}.{found.__qualname__}"


@check()
def declared_capabilities_are_backed_by_their_methods(bench: Bench, driver: Driver) -> None:
    """Every declared capability has its method (and only those): the runtime never probes."""
    caps = driver.capabilities
    assert isinstance(caps, frozenset) and all(isinstance(c, Capability) for c in caps), caps
    assert (type(driver).reconnect is not Driver.reconnect) == (Capability.RECONNECT in caps), \
        "reconnect() overridden ⇔ Capability.RECONNECT declared"
    if Capability.BODY_TWIST in caps:  # the twist controller writes exactly these
        assert set(driver.actuators()) == set(TWIST_ACTUATORS), driver.actuators()
    generator = driver.program_generator()
    assert (generator is not None) == (Capability.PROGRAMS in caps), "program_generator() ⇔ Capability.PROGRAMS"
    if generator is not None:
        assert isinstance(generator, ProgramGenerator)
        program = generator.generate([(0.0, {"j": 0.0}), (1.0, {"j": 0.2})], [JointLimits("j", -1.0, 1.0, 1.0, 5.0)])
        assert isinstance(program, MotionProgram) and program.lines == len(program.text.splitlines())


@check()
def a_driver_without_reconnect_refuses_it(bench: Bench, driver: Driver) -> None:
    """Without Capability.RECONNECT, ``reconnect()`` refuses (a DriverError saying so)."""
    if Capability.RECONNECT in driver.capabilities:
        raise Skip("this driver reconnects")
    try:
        driver.reconnect(0.1)
    except DriverError as err:
        assert "cannot reconnect" in str(err), err
    else:
        raise AssertionError("reconnect() returned")


@check()
def open_close_lifecycle(bench: Bench, driver: Driver) -> None:
    """Closed reads fail; open, read, close; closing twice is harmless; it opens again."""
    assert not driver.is_open
    _raises(DriverError, driver.read, bench.read_dt_s, what="a read of a closed driver")
    driver.open()
    try:
        assert driver.is_open
        driver.read(bench.read_dt_s)
    finally:
        driver.close()
    assert not driver.is_open
    driver.close()
    _raises(DriverError, driver.read, bench.read_dt_s, what="a read after close")
    driver.open()
    try:
        assert isinstance(driver.read(bench.read_dt_s), Frame)
    finally:
        driver.close()


@check()
def lifecycle_states(bench: Bench, driver: Driver) -> None:
    """closed → inactive → active → (deactivate, halt) → inactive → closed; a closed driver cannot activate."""
    assert driver.state is DriverState.CLOSED
    _raises(DriverError, driver.activate, what="activate() of a closed driver")
    driver.open()
    try:
        assert driver.state is DriverState.INACTIVE
        driver.activate()
        assert driver.state is DriverState.ACTIVE
        driver.deactivate()
        assert driver.state is DriverState.INACTIVE
        driver.activate()
        driver.halt()
        assert driver.state is DriverState.INACTIVE
    finally:
        driver.close()
    assert driver.state is DriverState.CLOSED


@check()
def write_dropped_while_closed(bench: Bench, driver: Driver) -> None:
    """A write to a closed driver is dropped (False) and counted."""
    assert driver.write(bench.moving_command(driver)) is False
    assert driver.dropped_writes == 1


@check()
def write_dropped_while_inactive_nothing_moves(bench: Bench, driver: Driver) -> None:
    """Open but not active: a write is dropped and nothing moves."""
    driver.open()
    try:
        assert driver.write(bench.moving_command(driver)) is False
        _still(bench, driver, bench.settle(driver))
    finally:
        driver.close()


# ---- description -----------------------------------------------------------------
@check()
def channels_are_well_formed(bench: Bench, driver: Driver) -> None:
    """Channels: unique lower_snake names, finite min < max, a known widget and kind, thresholds inside the range."""
    channels = driver.channels()
    assert channels, "a driver describes at least one channel"
    names = [c.name for c in channels]
    assert len(set(names)) == len(names), f"channel names repeat: {names}"
    for c in channels:
        assert isinstance(c, ChannelSpec), c
        assert NAME_RE.match(c.name), f"{c.name!r}: lower_case_with_underscores"
        assert math.isfinite(c.min) and math.isfinite(c.max) and c.min < c.max, f"{c.name}: min < max, finite"
        assert c.widget in WIDGETS, f"{c.name}: widget {c.widget!r} not in {WIDGETS}"
        assert c.kind in ("analog", "digital"), f"{c.name}: kind {c.kind!r}"
        for t in (c.warn_low, c.warn_high, c.crit_low, c.crit_high):
            assert t is None or c.min <= t <= c.max, f"{c.name}: threshold {t} outside [{c.min}, {c.max}]"
        if c.warn_low is not None and c.crit_low is not None:
            assert c.crit_low <= c.warn_low, c.name
        if c.warn_high is not None and c.crit_high is not None:
            assert c.warn_high <= c.crit_high, c.name
        json.dumps(c.to_json())


@check()
def actuators_are_well_formed(bench: Bench, driver: Driver) -> None:
    """Actuators: lower_snake names, finite limits, lo < hi."""
    actuators = driver.actuators()
    assert actuators, "a driver has at least one actuator"
    for name, (lo, hi) in actuators.items():
        assert NAME_RE.match(name), f"{name!r}: lower_case_with_underscores"
        assert math.isfinite(lo) and math.isfinite(hi) and lo < hi, f"{name}: ({lo}, {hi})"


@check()
def default_acquisition_is_every_channel(bench: Bench, driver: Driver) -> None:
    """The default acquisition covers every channel at a rate the driver supports."""
    acq = driver.get_acquisition()
    assert set(acq.channels) == {c.name for c in driver.channels()}, acq.channels
    assert 0 < acq.rate_hz <= driver.max_rate_hz, acq.rate_hz


# ---- reading and writing -------------------------------------------------------------
@check("opened")
def read_returns_every_active_channel_as_a_finite_float(bench: Bench, driver: Driver) -> None:
    """Every active channel, each a finite float; the frame time never goes back."""
    active = set(driver.get_acquisition().channels)
    last_t = -math.inf
    for _ in range(5):
        frame = driver.read(bench.read_dt_s)
        assert set(frame.values) == active, f"missing {active - set(frame.values)}, extra {set(frame.values) - active}"
        for name, value in frame.values.items():
            assert type(value) is float and math.isfinite(value), (name, value)
        assert math.isfinite(frame.t) and frame.t >= last_t
        last_t = frame.t


@check("opened")
def write_then_read_moves(bench: Bench, driver: Driver) -> None:
    """At rest before; a write while active moves it (the frame's motion channels show it)."""
    _still(bench, driver, driver.read(bench.read_dt_s))
    assert driver.write(bench.moving_command(driver)) is True
    moving = bench.motion(driver, bench.settle(driver))
    assert moving > 0.1, f"motion {moving:g} after {bench.moving_command(driver)}"


@check("opened", params=BAD_WRITES)
def write_beyond_limits_or_not_finite_writes_nothing(bench: Bench, driver: Driver, bad: Any) -> None:
    """A value beyond the limits, NaN, inf, text or a bool: DriverCommandError, and nothing moves."""
    name, (lo, hi) = next(iter(driver.actuators().items()))
    value = 10.0 * hi + 1.0 if bad == "beyond" else bad
    _raises(DriverCommandError, driver.write, {**bench.moving_command(driver), name: value}, what=f"{name}={value!r}")
    _still(bench, driver, bench.settle(driver))


@check("opened")
def every_value_carries_its_sample_time(bench: Bench, driver: Driver) -> None:
    """``sample_t`` has a finite host time for every value."""
    frame = driver.read(bench.read_dt_s)
    assert set(frame.sample_t) >= set(frame.values), set(frame.values) - set(frame.sample_t)
    assert all(math.isfinite(t) for t in frame.sample_t.values())


@check("opened")
def write_to_an_unknown_actuator(bench: Bench, driver: Driver) -> None:
    """An unknown actuator name is refused."""
    _raises(DriverError, driver.write, {"no_such_actuator": 0.0}, what="an unknown actuator")


# ---- halt --------------------------------------------------------------------------------
@check("opened")
def halt_zeroes_the_outputs(bench: Bench, driver: Driver) -> None:
    """Moving, then ``halt()``: the motion falls under ``stopped_fraction`` of what it was."""
    driver.write(bench.moving_command(driver))
    moving = bench.motion(driver, bench.settle(driver))
    driver.halt()
    after = bench.motion(driver, bench.settle(driver))
    assert after < bench.stopped_fraction * moving, f"motion {after:g} after halt (was {moving:g})"


@check("opened")
def halt_holds_until_activated_again(bench: Bench, driver: Driver) -> None:
    """After a halt, writes are dropped until ``activate()``; then they move it again."""
    driver.halt()
    assert driver.write(bench.moving_command(driver)) is False  # a command computed before the halt
    _still(bench, driver, bench.settle(driver))
    driver.activate()
    assert driver.write(bench.moving_command(driver)) is True
    moving = bench.motion(driver, bench.settle(driver))
    assert moving > 0.1, f"motion {moving:g} after activate and write"


@check()
def halt_never_raises_closed_or_faulted(bench: Bench, driver: Driver) -> None:
    """``halt()`` never raises: never opened, with reads failing, closed."""
    driver.halt()
    if bench.inject_fault is None:
        raise Skip("halted unopened without raising; the faulted part needs a fault (--faults or --interactive)")
    driver.open()
    bench.fault(driver, "read_error")
    try:
        _raises(DriverError, driver.read, bench.read_dt_s, what="a read with the fault in")
        driver.halt()
    finally:
        bench.fault(driver, None)
        driver.close()
    driver.halt()


@check("opened")
def halt_from_another_thread_while_reading(bench: Bench, driver: Driver) -> None:
    """200 halts from another thread while reading: none raises, and it stops."""
    driver.write(bench.moving_command(driver))
    errors: list[BaseException] = []

    def halter() -> None:
        try:
            for _ in range(200):
                driver.halt()
        except BaseException as err:  # noqa: BLE001 - any escape is the failure
            errors.append(err)

    t = threading.Thread(target=halter)
    t.start()
    for _ in range(50):
        driver.read(bench.read_dt_s)
    t.join(10)
    assert not errors, errors
    after = bench.motion(driver, bench.settle(driver))
    assert after < 0.05, f"motion {after:g} after the halts"


# ---- acquisition ---------------------------------------------------------------------------
@check(params=BAD_RATES)
def set_acquisition_bad_rate_changes_nothing(bench: Bench, driver: Driver, rate: Any) -> None:
    """A rate that is not a finite number in [min_rate_hz, max_rate_hz]: AcquisitionError, nothing changed."""
    before = driver.get_acquisition()
    _raises(AcquisitionError, driver.set_acquisition, rate, list(before.channels), what=f"rate_hz={rate!r}")
    assert driver.get_acquisition() == before


@check(params=BAD_CHANNELS)
def set_acquisition_bad_channels_changes_nothing(bench: Bench, driver: Driver, extra: Any) -> None:
    """An unknown or repeated channel: AcquisitionError, nothing changed."""
    before = driver.get_acquisition()
    channels = list(before.channels) + (list(before.channels[:1]) if extra == "duplicate" else list(extra))
    _raises(AcquisitionError, driver.set_acquisition, before.rate_hz, channels, what=f"channels {channels}")
    assert driver.get_acquisition() == before


@check()
def set_acquisition_returns_what_was_achieved(bench: Bench, driver: Driver) -> None:
    """50 Hz (or its maximum, if lower) on two channels: the returned Acquisition is what ``get_acquisition()`` says."""
    names = [c.name for c in driver.channels()]
    rate = min(50.0, driver.max_rate_hz)
    acq = driver.set_acquisition(rate, names[:2])
    assert isinstance(acq, Acquisition)
    assert acq == driver.get_acquisition()
    assert math.isclose(acq.rate_hz, rate, rel_tol=1e-6) and list(acq.channels) == names[:2], acq


@check("opened")
def inactive_channels_are_omitted_from_the_frame(bench: Bench, driver: Driver) -> None:
    """Channels not acquired are not in the frame; acquired again, they are."""
    names = [c.name for c in driver.channels()]
    driver.set_acquisition(driver.get_acquisition().rate_hz, names[:2])
    assert set(driver.read(bench.read_dt_s).values) == set(names[:2])
    driver.set_acquisition(driver.get_acquisition().rate_hz, names)
    assert set(driver.read(bench.read_dt_s).values) == set(names)


# ---- faults (need a way to inject them) ----------------------------------------------------------
@check("opened")
def read_error_fault_makes_reads_raise_until_cleared(bench: Bench, driver: Driver) -> None:
    """A fault makes reads raise, and keeps them raising until it is cleared (and the driver reconnected)."""
    driver.read(bench.read_dt_s)
    bench.fault(driver, "read_error")
    for _ in range(3):  # sticky
        _raises(DriverError, driver.read, bench.read_dt_s, what="a read with the fault in")
    bench.fault(driver, None)
    assert isinstance(driver.read(bench.read_dt_s), Frame)


@check("opened")
def timeout_fault_raises_driver_timeout_error(bench: Bench, driver: Driver) -> None:
    """A silent device is a DriverTimeoutError (not a hang, not another error); cleared, reads work again."""
    bench.fault(driver, "timeout")
    _raises(DriverTimeoutError, driver.read, bench.read_dt_s, what="a read of a silent device")
    bench.fault(driver, None)
    driver.read(bench.read_dt_s)


# ---------------------------------------------------------------------------- helpers
def _raises(kind: type[BaseException], fn: Callable[..., Any], *args: Any, what: str) -> BaseException:
    try:
        fn(*args)
    except kind as err:
        return err
    except Exception as err:  # noqa: BLE001 - the wrong error is the failure
        raise AssertionError(f"{what}: raised {type(err).__name__} ({err}), not {kind.__name__}") from err
    raise AssertionError(f"{what}: no {kind.__name__} raised")


def _still(bench: Bench, driver: Driver, frame: Frame) -> None:
    m = bench.motion(driver, frame)
    assert abs(m) <= 1e-9, f"it moves (motion {m:g}) when nothing may move it"


def by_name(name: str) -> Check:
    """The check called ``name``."""
    for c in CHECKS:
        if c.name == name:
            return c
    raise KeyError(name)


__all__ = ["BAD_CHANNELS", "BAD_RATES", "BAD_WRITES", "Bench", "CHECKS", "Check", "MOTION_UNITS", "Skip", "by_name",
           "debug_faults", "motion", "moving_command", "opened", "settle_by_count", "settle_until_steady"]
