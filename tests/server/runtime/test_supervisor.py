"""The safety state machine, table-driven: every trigger × every state."""

from __future__ import annotations

import pytest

from server.runtime.supervisor import Inputs, Motion, OutputMode, Refused, Rule, SafetyConfig, State, Supervisor

OBSTACLE = Rule(name="obstacle_front", channel="range_front_m", below=0.30, when="moving_forward", category=0,
                message="obstacle ahead")
BATTERY = Rule(name="battery_low", channel="battery_v", below=10.5, when="always", category=1, message="battery low")
CFG = SafetyConfig(command_timeout_s=0.5, rules=[OBSTACLE, BATTERY])


def fwd(v: float) -> Motion:
    return Motion(abs(v) > 1e-3, v)
GOOD = {"range_front_m": 2.0, "battery_v": 12.4}


def supervisor_in(state: State, t: float = 10.0) -> Supervisor:
    """A supervisor brought to ``state`` through its public requests only."""
    s = Supervisor(CFG, max_consecutive_overruns=3)
    s.evaluate(Inputs(t, dict(GOOD), frame_t=t))
    if state is State.IDLE:
        pass
    elif state is State.RUNNING:
        s.request_start(t)
    elif state is State.STOPPING:
        s.request_start(t)
        s.request_stop(t)
    elif state is State.ESTOP:
        s.request_estop(t)
    elif state is State.FAULT:
        s.evaluate(Inputs(t, None, "boom"))
    assert s.state is state
    s.events.clear()
    return s


ALL = list(State)
T = 10.0

# trigger → (inputs at time t+dt, expected state for each starting state)
TRIGGERS = {
    "operator_estop": {
        State.IDLE: State.ESTOP, State.RUNNING: State.ESTOP, State.STOPPING: State.ESTOP,
        State.ESTOP: State.ESTOP, State.FAULT: State.ESTOP,
    },
    "link_loss": {
        State.IDLE: State.IDLE, State.RUNNING: State.ESTOP, State.STOPPING: State.STOPPING,
        State.ESTOP: State.ESTOP, State.FAULT: State.FAULT,
    },
    "rule_obstacle_moving_forward": {
        State.IDLE: State.IDLE, State.RUNNING: State.ESTOP, State.STOPPING: State.ESTOP,
        State.ESTOP: State.ESTOP, State.FAULT: State.FAULT,
    },
    "rule_battery_always": {
        State.IDLE: State.IDLE, State.RUNNING: State.ESTOP, State.STOPPING: State.ESTOP,
        State.ESTOP: State.ESTOP, State.FAULT: State.FAULT,
    },
    "driver_fault": {
        State.IDLE: State.FAULT, State.RUNNING: State.FAULT, State.STOPPING: State.FAULT,
        State.ESTOP: State.FAULT, State.FAULT: State.FAULT,
    },
    "overruns": {
        State.IDLE: State.IDLE, State.RUNNING: State.ESTOP, State.STOPPING: State.ESTOP,
        State.ESTOP: State.ESTOP, State.FAULT: State.FAULT,
    },
}


def fire(s: Supervisor, trigger: str) -> None:
    t = T + 0.01
    if trigger == "operator_estop":
        s.request_estop(t)
    elif trigger == "link_loss":
        t = T + CFG.command_timeout_s + 0.01
        s.evaluate(Inputs(t, dict(GOOD), frame_t=t, motion=fwd(0.2), stopped=False))
    elif trigger == "rule_obstacle_moving_forward":
        s.evaluate(Inputs(t, {**GOOD, "range_front_m": 0.2}, frame_t=t, motion=fwd(0.2), stopped=False))
    elif trigger == "rule_battery_always":
        s.evaluate(Inputs(t, {**GOOD, "battery_v": 10.0}, frame_t=t, stopped=False))
    elif trigger == "driver_fault":
        s.evaluate(Inputs(t, None, "read timeout"))
    elif trigger == "overruns":
        for i in range(s.max_consecutive_overruns):
            s.evaluate(Inputs(t + i * 1e-3, dict(GOOD), frame_t=t, overrun=True, stopped=False))


@pytest.mark.parametrize("trigger", list(TRIGGERS))
@pytest.mark.parametrize("start", ALL, ids=lambda s: s.value)
def test_trigger_in_state(trigger: str, start: State) -> None:
    s = supervisor_in(start, T)
    fire(s, trigger)
    assert s.state is TRIGGERS[trigger][start]
    if s.state is not start:
        assert s.events, "every transition is logged"
        ev = s.events[-1]
        assert ev.state_before == start.value and ev.state_after == s.state.value
    if s.state is State.ESTOP:
        assert s.cause is not None
        assert s.output_mode() in (OutputMode.CUT, OutputMode.RAMP, OutputMode.HOLD)


@pytest.mark.parametrize(
    "trigger, category, mode",
    [("operator_estop", 0, "cut"), ("link_loss", 1, "ramp"), ("rule_obstacle_moving_forward", 0, "cut"),
     ("rule_battery_always", 1, "ramp"), ("driver_fault", 0, "cut"), ("overruns", 0, "cut")],
)
def test_stop_category_per_trigger(trigger: str, category: int, mode: str) -> None:
    s = supervisor_in(State.RUNNING)
    fire(s, trigger)
    assert s.cause.category == category
    assert s.output_mode().value == mode


def test_first_cause_is_kept_when_more_triggers_follow() -> None:
    s = supervisor_in(State.RUNNING)
    fire(s, "rule_obstacle_moving_forward")
    fire(s, "operator_estop")
    assert s.cause.trigger == "rule" and s.cause.rule == "obstacle_front"


def test_link_stays_alive_with_heartbeats() -> None:
    s = supervisor_in(State.RUNNING)
    for i in range(1, 20):
        t = T + i * 0.2
        s.touch(t)
        s.evaluate(Inputs(t + 0.1, dict(GOOD), frame_t=t, motion=fwd(0.2), stopped=False))
    assert s.state is State.RUNNING


def test_ttl_expires_like_link_loss() -> None:
    s = supervisor_in(State.RUNNING)
    s.set_ttl(T, 0.1)
    s.touch(T)
    s.evaluate(Inputs(T + 0.15, dict(GOOD), frame_t=T + 0.15, motion=fwd(0.2), stopped=False))
    assert s.state is State.ESTOP
    assert s.cause.trigger == "link_loss" and "time-to-live" in s.cause.message


def test_reset_refused_while_battery_low() -> None:
    s = supervisor_in(State.RUNNING)
    fire(s, "rule_battery_always")
    with pytest.raises(Refused) as err:
        s.request_reset(T + 0.1)
    assert err.value.code == "cause_persists" and "battery_low" in err.value.message
    s.evaluate(Inputs(T + 0.2, dict(GOOD), frame_t=T + 0.2))
    s.request_reset(T + 0.2)
    assert s.state is State.IDLE


def test_reset_after_obstacle_is_allowed_once_stopped() -> None:
    """The obstacle rule applies only when moving forward: after the stop, reset works and reversing is possible."""
    s = supervisor_in(State.RUNNING)
    fire(s, "rule_obstacle_moving_forward")
    s.evaluate(Inputs(T + 0.1, {**GOOD, "range_front_m": 0.2}, frame_t=T + 0.1))
    s.request_reset(T + 0.1)
    s.request_start(T + 0.1)
    with pytest.raises(Refused):
        s.check_motion(T + 0.1, fwd(0.2))  # forward into the obstacle: refused
    s.check_motion(T + 0.1, fwd(-0.2))  # backing away: allowed


def test_reset_refused_while_driver_faulty() -> None:
    s = supervisor_in(State.FAULT)
    with pytest.raises(Refused) as err:
        s.request_reset(T)
    assert err.value.code == "cause_persists"
    s.evaluate(Inputs(T + 0.1, dict(GOOD), frame_t=T + 0.1))
    s.request_reset(T + 0.1)
    assert s.state is State.IDLE


def test_reset_never_restarts_motion() -> None:
    s = supervisor_in(State.ESTOP)
    s.request_reset(T)
    assert s.state is State.IDLE
    with pytest.raises(Refused) as err:
        s.check_motion(T, fwd(0.1))
    assert err.value.code == "not_running"


@pytest.mark.parametrize(
    "values, frame_age, driver_ok, problem",
    [
        ({**GOOD, "battery_v": 10.0}, 0.0, True, "battery_low"),
        (dict(GOOD), 5.0, True, "stale"),
        (dict(GOOD), 0.0, False, "driver not healthy"),
    ],
)
def test_fail__start_prechecks(values, frame_age, driver_ok, problem) -> None:
    s = Supervisor(CFG, max_consecutive_overruns=3)
    s.evaluate(Inputs(T, values, frame_t=T))
    if not driver_ok:
        s.driver_ok, s.driver_error = False, "port closed"
    with pytest.raises(Refused) as err:
        s.request_start(T + frame_age)
    assert err.value.code == "prestart_failed" and problem in err.value.message
    assert s.state is State.IDLE


def test_ok__start_prechecks() -> None:
    s = Supervisor(CFG, max_consecutive_overruns=3)
    s.evaluate(Inputs(T, dict(GOOD), frame_t=T))
    s.request_start(T)
    assert s.state is State.RUNNING


@pytest.mark.parametrize("state", [State.IDLE, State.STOPPING, State.ESTOP, State.FAULT], ids=lambda s: s.value)
def test_speed_refused_unless_running(state: State) -> None:
    s = supervisor_in(state)
    with pytest.raises(Refused):
        s.check_motion(T, fwd(0.1))


def test_stopping_ends_idle_when_ramp_done() -> None:
    s = supervisor_in(State.STOPPING)
    s.evaluate(Inputs(T + 0.01, dict(GOOD), frame_t=T, motion=fwd(0.1), stopped=False))
    assert s.state is State.STOPPING
    s.evaluate(Inputs(T + 0.02, dict(GOOD), frame_t=T, stopped=True))
    assert s.state is State.IDLE


def test_rule_ignores_missing_value_but_start_reports_it() -> None:
    s = Supervisor(CFG, max_consecutive_overruns=3)
    s.evaluate(Inputs(T, {"battery_v": 12.0}, frame_t=T))
    with pytest.raises(Refused) as err:
        s.request_start(T)
    assert "range_front_m" in err.value.message
