"""FAULHABER program generation (issue 13 item 8): the sequence line by line, and a run on the emulator."""

from __future__ import annotations

import math
import threading

import pytest

from drivers.errors import DriverError
from drivers.faulhaber.axis import AxisConfig, AxisMode
from drivers.faulhaber.driver import FaulhaberAsciiDriver
from drivers.faulhaber.program import ProgramError, ProgramRunner, generate_program
from sim.devices.faulhaber_ascii import AsciiLine, DriveConfig, LineConfig
from sim.devices.pty import PtyRunner
from tests.conftest import wait_until

AXES = {
    "q1": AxisConfig("q1", node=1, mode=AxisMode.POSITION, counts_per_rev=2048, gear_ratio=10.0,
                     max_speed_rad_s=3.0, max_accel_rad_s2=20.0, min_rad=-2.5, max_rad=2.5),
    "q2": AxisConfig("q2", node=2, mode=AxisMode.POSITION, counts_per_rev=2048, gear_ratio=10.0,
                     max_speed_rad_s=3.0, max_accel_rad_s2=20.0, min_rad=-2.5, max_rad=2.5),
}
MOTION = [(0.0, {"q1": 0.0, "q2": 0.0}), (1.0, {"q1": 0.5, "q2": -0.25}), (2.0, {"q1": 1.0}),
          (2.5, {"q1": 1.0, "q2": 0.0})]


def counts(rad: float) -> int:
    return round(rad / (2 * math.pi) * 10 * 2048)


def segment_rpm(d: float, T: float, ac_rev_s2: int) -> int:
    """The same trapezoid, computed here from scratch: d = v·T − v²/a at the drive's integer AC."""
    a = ac_rev_s2 * 2 * math.pi / 10.0
    v = (a * T - math.sqrt(a * a * T * T - 4 * a * d)) / 2
    return math.ceil(v / (2 * math.pi) * 60 * 10)


def test_the_sequence_line_by_line():
    ac = round(20.0 / (2 * math.pi) * 10)  # 32 rev/s² at the motor
    sp = round(3.0 / (2 * math.pi) * 60 * 10)  # 286 rpm
    assert (ac, sp) == (32, 286)
    expected = [
        # set-up, node by node
        f"1SP{sp}", f"1AC{ac}", f"1DEC{ac}", "1EN",
        f"2SP{sp}", f"2AC{ac}", f"2DEC{ac}", "2EN",
        # to the start pose
        "1LA0", "1M", "2LA0", "2M",
        # 0 → 1 s
        f"1SP{segment_rpm(0.5, 1.0, ac)}", f"1LA{counts(0.5)}", "1M",
        f"2SP{segment_rpm(0.25, 1.0, ac)}", f"2LA{counts(-0.25)}", "2M",
        # 1 → 2 s: only q1 is given
        f"1SP{segment_rpm(0.5, 1.0, ac)}", f"1LA{counts(1.0)}", "1M",
        # 2 → 2.5 s: q1 stays, q2 returns
        f"2SP{segment_rpm(0.25, 0.5, ac)}", "2LA0", "2M",
    ]
    program = generate_program(MOTION, AXES)
    assert program.text().splitlines() == expected
    assert program.text().endswith("\n")
    assert [s.t_s for s in program.steps] == [0.0, 1.0, 2.0]
    assert dict(program.steps[-1].targets) == {"q2": 0.0}


@pytest.mark.parametrize(
    "motion, match",
    [
        ([], "at least one waypoint"),
        ([(0.0, {"q1": 0.0})], "missing: q2"),
        ([(0.0, {"q1": 0.0, "q2": 0.0}), (0.0, {"q1": 1.0})], "times must increase"),
        ([(0.0, {"q1": 0.0, "q2": 0.0}), (1.0, {"q3": 1.0})], "unknown joint 'q3'"),
        ([(0.0, {"q1": 0.0, "q2": 0.0}), (1.0, {"q1": 3.0})], "outside"),
        ([(0.0, {"q1": 0.0, "q2": 0.0}), (1.0, {"q1": math.nan})], "finite"),
        ([(-1.0, {"q1": 0.0, "q2": 0.0})], "time must be"),
        ([(0.0, {"q1": 0.0, "q2": 0.0}), (0.1, {"q1": 2.0})], r"segment 1 .*q1 cannot move"),
        ([(0.0, {"q1": -2.4, "q2": 0.0}), (1.2, {"q1": 2.4})], r"segment 1 .*more than its max_speed"),
    ],
)
def test_fail__motions_that_cannot_become_a_program(motion, match):
    with pytest.raises(ProgramError, match=match):
        generate_program(motion, AXES)


@pytest.fixture
def drives():
    line = AsciiLine(LineConfig([DriveConfig(1, counts_per_rev=2048), DriveConfig(2, counts_per_rev=2048)]))
    with PtyRunner(line, "faulhaber") as runner:
        table = {"port": runner.port, "xonxoff": False, "axes": {
            name: {"node": a.node, "mode": "position", "counts_per_rev": 2048, "gear_ratio": 10.0,
                   "max_speed_rad_s": 3.0, "max_accel_rad_s2": 20.0, "min_rad": -2.5, "max_rad": 2.5}
            for name, a in AXES.items()}}
        driver = FaulhaberAsciiDriver.from_config(table, {})
        driver.open()
        driver.activate()
        reader_stop = threading.Event()

        def control_loop() -> None:  # the driver is read by its control loop while a program runs
            while not reader_stop.wait(0.01):
                try:
                    driver.read(0.01)
                except DriverError:
                    return

        t = threading.Thread(target=control_loop, daemon=True)
        t.start()
        try:
            yield runner, line, driver
        finally:
            reader_stop.set()
            t.join(2)
            driver.close()


def test_the_program_runs_on_the_emulated_drives(drives):
    runner, line, driver = drives
    program = generate_program(MOTION, AXES)
    ProgramRunner(driver).run(program, reach_tolerance_rad=1e-4, reach_timeout_s=20)
    # the runner returns when the encoders read the targets; a drive may still settle by a count
    wait_until(lambda: line.drives[1].motor.counts == counts(1.0) and line.drives[2].motor.counts == 0
               and line.drives[1].motor.reached and line.drives[2].motor.reached, message="drives settled")
    sent = [text for _, text in line.lines]
    for expected in program.lines():
        assert expected in sent  # every program line reached the drives as written
    wait_until(lambda: abs(driver.positions()["q1"] - 1.0) < 1e-3, message="q1 read back at 1 rad")


def test_a_halt_stops_the_program(drives):
    runner, line, driver = drives
    program = generate_program([(0.0, {"q1": 0.0, "q2": 0.0}), (1.0, {"q1": 0.5}), (5.0, {"q1": 1.0})], AXES)
    pr = ProgramRunner(driver)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            pr.run(program)
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            errors.append(err)

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: pr.lines_sent >= len(program.setup) + len(program.start.lines) + 3,
               message="the first segment sent")
    driver.halt()
    t.join(10)
    assert errors and isinstance(errors[0], DriverError) and "halted" in str(errors[0])
    assert not line.drives[1].motor.enabled


@pytest.mark.parametrize("t_s", [1e300, 1e308, 86_400.5])
def test_fail__a_waypoint_beyond_a_day_is_refused_not_an_overflow(t_s: float):
    """Issue 18: ``t_s = [0, 1e300]`` made ``a²·T²`` infinite and the rpm's ``math.ceil`` an OverflowError,
    which closed the runtime's API connection."""
    with pytest.raises(ProgramError, match="more than 86400 s after the first"):
        generate_program([(0.0, {"q1": 0.0, "q2": 0.0}), (t_s, {"q1": 0.1})], AXES)


@pytest.mark.parametrize("d, T, a", [(1.0, 1e300, 10.0), (1e-300, 1.0, 10.0), (0.5, 86_400.0, 1e-300)])
def test_ok__the_segment_speed_stays_finite_at_the_extremes(d: float, T: float, a: float):
    from drivers.faulhaber.program import _segment_speed

    v = _segment_speed(d, T, a)
    assert v is None or (math.isfinite(v) and v >= 0.0)


@pytest.mark.parametrize("T", [1e-308, 5e-324])
def test_fail__a_segment_too_short_for_any_trapezoid(T: float):
    from drivers.faulhaber.program import _segment_speed

    assert _segment_speed(0.1, T, 10.0) is None
    with pytest.raises(ProgramError, match="cannot move"):
        generate_program([(0.0, {"q1": 0.0, "q2": 0.0}), (T, {"q1": 0.1})], AXES)
