"""The control loop without its thread: ticks driven by hand on an injected clock (issue 9, item 8).

Tick order, deadline accounting, the stall trigger and the stop-mode transitions, on the real
sim driver, supervisor and rover controller."""

from __future__ import annotations

import time

import pytest

from drivers.base import DriverState
from drivers.sim import SimDriver
from server.config import load_config
from server.runtime.controllers.rover import Limits, RoverController, RoverSetpoint
from server.runtime.loop import ControlLoop, Schedule
from server.runtime.stage import Stage
from server.runtime.supervisor import Refused, State, Supervisor

WORLD = {"size_m": [6.0, 4.0]}
PERIOD = 0.01


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class DoubleTilt(Stage):
    """A stage (estimator) deriving ``tilt_rad`` from the battery reading, so a test can steer a
    derived channel that a rule watches."""

    name = "tilt_stage"

    def __init__(self) -> None:
        self.tilt = 0.0
        self.calls = 0

    def process(self, values: dict[str, float], dt_s: float, now: float) -> None:
        self.calls += 1
        values["tilt_rad"] = self.tilt


RULES = [{"name": "battery_low", "channel": "battery_v", "below": 10.5, "when": "running", "category": 1},
         {"name": "obstacle_front", "channel": "range_front_m", "below": 0.3, "when": "moving_forward"}]


def make_loop(clock: Clock, overrides: dict | None = None) -> ControlLoop:
    cfg = load_config(None, overrides={"safety": {"command_timeout_s": 60.0, "rules": RULES}, **(overrides or {})})
    driver = SimDriver({"time_scale": 1.0, "noise": False}, WORLD, seed=1)
    driver.open()
    # sample times on the same clock as the loop
    sup = Supervisor(cfg.safety, cfg.loop.max_consecutive_overruns, cfg.loop.max_stall_s)
    return ControlLoop(driver, sup, RoverController(Limits(), 0.05, 0.3, 20.0), rate_hz=1 / PERIOD, publish_every=1,
                       clock=clock)


def tick(loop: ControlLoop, clock: Clock, late: float = 0.0, skipped: int = 0) -> None:
    clock.t += PERIOD + late
    loop.run_tick(clock.t, late, PERIOD + late, skipped)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def loop(clock: Clock) -> ControlLoop:
    lp = make_loop(clock)
    clock.t = time.monotonic()  # the sim driver stamps its samples with time.monotonic(): start the clock there
    tick(lp, clock)
    return lp


def drive(loop: ControlLoop, clock: Clock, linear: float = 0.3) -> None:
    loop.start_robot()
    loop.set_setpoint(RoverSetpoint(linear, 0.0))
    for _ in range(30):
        tick(loop, clock)


# ---------------------------------------------------------------- the schedule
def test_schedule_skips_and_counts_missed_deadlines() -> None:
    s = Schedule(PERIOD, start=0.0)
    assert s.due(0.010) == (0.0, 0.010, 0)
    s.advance()
    late, dt, skipped = s.due(0.0552)  # deadline 0.02, 35.2 ms late: 0.03, 0.04 and 0.05 passed
    assert skipped == 3 and late == pytest.approx(0.0352) and dt == pytest.approx(0.0452)
    s.advance()
    assert s.next_t == pytest.approx(0.06)  # no burst to catch up


@pytest.mark.parametrize("spin_s", [0.0, 0.002])
def test_wait_sleeps_until_the_spin_tail_then_spins_to_the_deadline(monkeypatch, spin_s: float) -> None:
    from server.runtime import timing

    now = [0.0]
    slept: list[float] = []
    reads = []

    def clock() -> float:
        reads.append(now[0])
        now[0] += 0.0001  # every read takes 0.1 ms: the spin ends
        return now[0]

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    monkeypatch.setattr(timing.time, "sleep", sleep)
    s = Schedule(PERIOD, start=0.0)
    s.advance()  # the next deadline: 10 ms
    woke = s.wait(clock, spin_s)
    assert woke >= s.next_t  # never before the deadline
    assert slept == [pytest.approx(s.next_t - 0.0001 - spin_s)]  # slept up to the tail, spun the rest
    spun = len(reads) - 2  # reads after the sleep's, before the one that saw the deadline
    assert (spun > 5) == (spin_s > 0), reads


def test_overruns_and_missed_ticks_are_counted(loop: ControlLoop, clock: Clock) -> None:
    before = (loop.stats.missed, loop.stats.overruns, loop.stats.ticks)
    tick(loop, clock, late=0.025, skipped=2)
    assert (loop.stats.missed, loop.stats.overruns, loop.stats.ticks) == (before[0] + 2, before[1] + 1, before[2] + 1)


# ---------------------------------------------------------------- tick order
def test_stages_run_before_the_supervisor_in_the_same_tick(clock: Clock) -> None:
    loop = make_loop(clock, {"safety": {"command_timeout_s": 60.0, "rules": [
        {"name": "tilt", "channel": "tilt_rad", "above": 0.26, "when": "always"}]}})
    stage = DoubleTilt()
    loop.stages.append(stage)
    clock.t = time.monotonic()
    tick(loop, clock)
    drive(loop, clock)
    assert loop.supervisor.state is State.RUNNING
    stage.tilt = 0.4
    tick(loop, clock)  # the stage derives the crossing value; the rule sees it in this very tick
    assert loop.supervisor.state is State.ESTOP and loop.supervisor.cause.rule == "tilt"
    assert loop.driver.state is DriverState.INACTIVE  # and the outputs were cut in that tick too


def test_the_write_follows_the_mode_decided_in_the_same_tick(loop: ControlLoop, clock: Clock) -> None:
    drive(loop, clock)
    assert loop.driver.command[0] > 0  # wheels commanded
    loop.driver.debug({"battery_v": 10.0})  # the battery rule (category 1: ramp, then cut)
    tick(loop, clock)
    assert loop.supervisor.state is State.ESTOP
    assert loop.controller.linear < 0.3  # ramping down from this tick on, not tracking


# ---------------------------------------------------------------- stop-mode transitions
def test_category_0_cuts_once_per_cause(loop: ControlLoop, clock: Clock) -> None:
    drive(loop, clock)
    halts = loop.halt_count
    loop.estop("test")
    assert loop.halt_count == halts + 1
    for _ in range(5):
        tick(loop, clock)
    assert loop.halt_count == halts + 1  # not again every tick
    assert [e.trigger for e in loop.events].count("outputs_zero") == 1


def test_category_1_ramps_then_cuts_at_zero(loop: ControlLoop, clock: Clock) -> None:
    drive(loop, clock, 0.4)
    loop.driver.debug({"battery_v": 10.0})
    speeds = []
    for _ in range(60):
        tick(loop, clock)
        speeds.append(loop.controller.linear)
    assert speeds[0] > 0 and speeds == sorted(speeds, reverse=True) and speeds[-1] == 0.0
    assert loop.driver.state is DriverState.INACTIVE  # cut once at zero
    assert any(e.trigger == "outputs_zero" for e in loop.events)


def test_controlled_stop_ramps_to_idle_and_deactivates(loop: ControlLoop, clock: Clock) -> None:
    drive(loop, clock)
    loop.stop_robot()
    assert loop.supervisor.state is State.STOPPING
    for _ in range(60):
        tick(loop, clock)
    assert loop.supervisor.state is State.IDLE and loop.driver.state is DriverState.INACTIVE


def test_a_tick_later_than_max_stall_s_is_a_stall(loop: ControlLoop, clock: Clock) -> None:
    drive(loop, clock)
    tick(loop, clock, late=0.5, skipped=50)  # one frozen half second: a single overrun
    assert loop.supervisor.state is State.ESTOP and loop.supervisor.cause.trigger == "stall"
    assert loop.stats.overruns == 1  # max_consecutive_overruns (10) would never have fired


def test_a_late_tick_under_max_stall_s_is_not(loop: ControlLoop, clock: Clock) -> None:
    drive(loop, clock)
    tick(loop, clock, late=0.05, skipped=5)
    assert loop.supervisor.state is State.RUNNING


def test_setpoint_beyond_the_limits_is_refused_by_the_runtime(loop: ControlLoop, clock: Clock) -> None:
    from server.errors import ValidationError

    loop.start_robot()
    with pytest.raises(ValidationError, match="outside the limits"):
        loop.set_setpoint(RoverSetpoint(5.0, 0.0))
    assert loop.setpoint == RoverSetpoint()


def test_setpoint_refused_unless_running(loop: ControlLoop) -> None:
    with pytest.raises(Refused, match="start it first"):
        loop.set_setpoint(RoverSetpoint(0.1, 0.0))


# ---------------------------------------------------------------- snapshots
def test_snapshot_is_one_record_never_a_mix_of_two_moments(loop: ControlLoop, clock: Clock) -> None:
    """Another thread changing the supervisor between records must not show in a snapshot half-way:
    the snapshot is the record built under the lock (issue 8, item 10)."""
    loop.start_robot()
    loop.set_setpoint(RoverSetpoint(0.3, 0.0))
    tick(loop, clock)
    snap = loop.snapshot()
    assert snap["state"] == "running" and snap["setpoint"]["linear"] == 0.3
    loop.supervisor.state = State.ESTOP  # as if another thread were half-way through a request
    after = loop.snapshot()
    assert (after["state"], after["setpoint"]["linear"], after["seq"]) == ("running", 0.3, snap["seq"])


def test_every_request_publishes_a_consistent_record(loop: ControlLoop) -> None:
    loop.start_robot()
    loop.set_setpoint(RoverSetpoint(0.2, 0.1), source="websocket")
    s = loop.snapshot()
    assert (s["state"], s["setpoint"]) == ("running", {"linear": 0.2, "angular": 0.1, "source": "websocket"})
    loop.estop("test")
    s = loop.snapshot()
    assert s["state"] == "estop" and s["cause"]["trigger"] == "operator_estop"
    assert s["setpoint"] == {"linear": 0.0, "angular": 0.0, "source": None}


def test_raise_priority_applies_to_the_calling_thread_and_the_threads_it_starts() -> None:
    """The runtime's threads other than the control loop run at niceness -10 (runtime/timing.py: a GIL held by a
    thread waiting in a busy machine's run queue stalled the control loop); refused without the privilege, it
    says so and changes nothing."""
    import os
    import threading

    from server.runtime.timing import RUNTIME_NICE, raise_priority

    seen: dict[str, object] = {}
    ours = os.getpriority(os.PRIO_PROCESS, 0)

    def runtime_main() -> None:  # a thread of its own: the niceness stays out of the test process
        before = os.getpriority(os.PRIO_PROCESS, 0)
        seen["granted"] = raise_priority()
        seen["main"] = os.getpriority(os.PRIO_PROCESS, 0)
        child = threading.Thread(target=lambda: seen.update(child=os.getpriority(os.PRIO_PROCESS, 0)))
        child.start()
        child.join()
        seen["before"] = before

    t = threading.Thread(target=runtime_main)
    t.start()
    t.join()
    if seen["granted"] == f"nice {RUNTIME_NICE}":
        assert seen["main"] == seen["child"] == RUNTIME_NICE
    else:  # no CAP_SYS_NICE: normal priority, unchanged
        assert str(seen["granted"]).startswith("normal") and seen["main"] == seen["child"] == seen["before"]
    assert os.getpriority(os.PRIO_PROCESS, 0) == ours  # per thread: this one is untouched
