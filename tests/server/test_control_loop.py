"""The control loop without its thread: ticks driven by hand with an injected time."""

from __future__ import annotations

from drivers.sim import SimDriver
from server.config import load_config
from server.control_loop import ControlLoop
from server.controller import Limits, RoverController
from server.safety import SafetyConfig, State, Supervisor

WORLD = {"size_m": [6.0, 4.0]}


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_loop(clock: Clock | None = None) -> ControlLoop:
    cfg = load_config(None, overrides={"safety": {"command_timeout_s": 60.0}})
    driver = SimDriver({"time_scale": 1.0}, WORLD, seed=1)
    driver.open()
    return ControlLoop(driver, Supervisor(SafetyConfig.from_config(cfg)),
                       RoverController(Limits.from_config(cfg), 0.05, 0.3, 20.0), publish_every=1,
                       clock=clock or Clock())


def test_snapshot_is_one_record_never_a_mix_of_two_moments() -> None:
    """Another thread changing the supervisor between records must not show in a snapshot half-way:
    the snapshot is the record built under the lock (issue 8, item 10)."""
    loop = make_loop()
    loop._tick(100.0, 0.01, False)
    loop.start_robot()
    loop.set_speed(0.3, 0.0)
    loop._tick(100.01, 0.01, False)
    snap = loop.snapshot()
    assert snap["state"] == "running" and snap["setpoint"]["linear"] == 0.3
    # a change made outside a request (as if another thread were half-way through one)…
    loop.supervisor.state = State.ESTOP
    after = loop.snapshot()
    # …is not mixed into the record: state and setpoint still belong together
    assert (after["state"], after["setpoint"]["linear"], after["seq"]) == ("running", 0.3, snap["seq"])


def test_every_request_publishes_a_consistent_record() -> None:
    loop = make_loop()
    loop._tick(100.0, 0.01, False)
    loop.start_robot()
    loop.set_speed(0.2, 0.1, source="websocket")
    s = loop.snapshot()
    assert (s["state"], s["setpoint"]) == ("running", {"linear": 0.2, "angular": 0.1, "source": "websocket"})
    loop.estop("test")
    s = loop.snapshot()
    assert s["state"] == "estop" and s["cause"]["trigger"] == "operator_estop"
    assert s["setpoint"] == {"linear": 0.0, "angular": 0.0, "source": None}
