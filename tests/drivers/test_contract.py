"""The driver contract: one test class every driver must pass (python-can's back2back idea).

The checks themselves are :mod:`drivers.check.contract` (``python -m drivers.check`` runs the same ones
against a user's driver); this class is their pytest adapter: each test calls one check with the hooks
below. To add a driver, subclass :class:`DriverContract`, override the ``driver`` fixture to return an
*unopened* driver (a serial one talking to its device emulator over a pty or ``socket://``), and override
the hooks where the defaults do not fit (how to inject a fault, which channels show motion, how to settle).
"""

from __future__ import annotations

import json
import math

import pytest

from drivers.base import Driver, Frame
from drivers.check import contract
from drivers.errors import DriverCommandError, DriverConfigError, DriverOpenError
from drivers.registry import driver_class
from drivers.sim import SimDriver


class DriverContract:
    """Behaviour every driver shares. Not collected itself (no ``Test`` prefix)."""

    #: the period passed to ``read``, s
    read_dt_s = 0.01
    #: reads to let a command show in the frame, or fade after a halt
    settle_reads = 60
    #: after a halt, the motion must fall under this fraction of the moving motion
    stopped_fraction = 0.05

    # ---- hooks ---------------------------------------------------------
    @pytest.fixture
    def driver(self) -> Driver:
        raise NotImplementedError("a DriverContract subclass provides the driver fixture")

    @pytest.fixture
    def opened(self, driver: Driver):
        """Open and active: writes reach the outputs."""
        with contract.opened(driver):
            yield driver

    def moving_command(self, driver: Driver) -> dict[str, float]:
        """Every actuator at half its positive limit."""
        return contract.moving_command(driver)

    def motion(self, driver: Driver, frame: Frame) -> float:
        """How much the robot moves, from the frame: the largest |speed| channel."""
        return contract.motion(driver, frame)

    def inject_fault(self, driver: Driver, kind: str | None) -> None:
        """Make reads fail (``"read_error"``, ``"timeout"``) or heal them (``None``)."""
        contract.debug_faults(driver, kind)

    def settle(self, driver: Driver) -> Frame:
        return contract.settle_by_count(driver, self.read_dt_s, self.settle_reads)

    def bench(self) -> contract.Bench:
        """The hooks as the checks take them."""
        return contract.Bench(read_dt_s=self.read_dt_s, stopped_fraction=self.stopped_fraction,
                              moving_command=self.moving_command, motion=self.motion, settle=self.settle,
                              inject_fault=self.inject_fault, find=driver_class)

    def run(self, name: str, driver: Driver, *param) -> None:
        try:
            contract.by_name(name).fn(self.bench(), driver, *param)
        except contract.Skip as why:
            pytest.skip(str(why))

    # ---- lifecycle -----------------------------------------------------
    def test_registered_under_its_name(self, driver):
        self.run("registered_under_its_name", driver)

    def test_declared_capabilities_are_backed_by_their_methods(self, driver):
        self.run("declared_capabilities_are_backed_by_their_methods", driver)

    def test_fail__a_driver_without_reconnect_refuses_it(self, driver):
        self.run("a_driver_without_reconnect_refuses_it", driver)

    def test_open_close_lifecycle(self, driver):
        self.run("open_close_lifecycle", driver)

    def test_lifecycle_states(self, driver):
        self.run("lifecycle_states", driver)

    def test_write_dropped_while_closed(self, driver):
        self.run("write_dropped_while_closed", driver)

    def test_write_dropped_while_inactive_nothing_moves(self, driver):
        self.run("write_dropped_while_inactive_nothing_moves", driver)

    # ---- description ---------------------------------------------------
    def test_channels_are_well_formed(self, driver):
        self.run("channels_are_well_formed", driver)

    def test_actuators_are_well_formed(self, driver):
        self.run("actuators_are_well_formed", driver)

    def test_default_acquisition_is_every_channel(self, driver):
        self.run("default_acquisition_is_every_channel", driver)

    # ---- reading and writing -------------------------------------------
    def test_read_returns_every_active_channel_as_a_finite_float(self, opened):
        self.run("read_returns_every_active_channel_as_a_finite_float", opened)

    def test_write_then_read_moves(self, opened):
        self.run("write_then_read_moves", opened)

    @pytest.mark.parametrize("bad", contract.BAD_WRITES)
    def test_fail__write_beyond_limits_or_not_finite_writes_nothing(self, opened, bad):
        self.run("write_beyond_limits_or_not_finite_writes_nothing", opened, bad)

    def test_every_value_carries_its_sample_time(self, opened):
        self.run("every_value_carries_its_sample_time", opened)

    def test_fail__write_to_an_unknown_actuator(self, opened):
        self.run("write_to_an_unknown_actuator", opened)

    # ---- halt ----------------------------------------------------------
    def test_halt_zeroes_the_outputs(self, opened):
        self.run("halt_zeroes_the_outputs", opened)

    def test_halt_holds_until_activated_again(self, opened):
        self.run("halt_holds_until_activated_again", opened)

    def test_halt_never_raises_closed_or_faulted(self, driver):
        self.run("halt_never_raises_closed_or_faulted", driver)

    def test_halt_from_another_thread_while_reading(self, opened):
        self.run("halt_from_another_thread_while_reading", opened)

    # ---- acquisition ---------------------------------------------------
    @pytest.mark.parametrize("rate", contract.BAD_RATES)
    def test_fail__set_acquisition_bad_rate_changes_nothing(self, driver, rate):
        self.run("set_acquisition_bad_rate_changes_nothing", driver, rate)

    @pytest.mark.parametrize("extra", contract.BAD_CHANNELS)
    def test_fail__set_acquisition_bad_channels_changes_nothing(self, driver, extra):
        self.run("set_acquisition_bad_channels_changes_nothing", driver, extra)

    def test_ok__set_acquisition_returns_what_was_achieved(self, driver):
        self.run("set_acquisition_returns_what_was_achieved", driver)

    def test_inactive_channels_are_omitted_from_the_frame(self, opened):
        self.run("inactive_channels_are_omitted_from_the_frame", opened)

    # ---- faults --------------------------------------------------------
    def test_read_error_fault_makes_reads_raise_until_cleared(self, opened):
        self.run("read_error_fault_makes_reads_raise_until_cleared", opened)

    def test_timeout_fault_raises_driver_timeout_error(self, opened):
        self.run("timeout_fault_raises_driver_timeout_error", opened)


def test_the_adapter_runs_every_check_of_the_contract():
    """A check added to drivers/check/contract.py is a test here too (the user's check and ours stay one)."""
    adapted = {name for name in vars(DriverContract) if name.startswith("test_")}
    for check in contract.CHECKS:
        assert any(name.endswith(check.name) for name in adapted), f"DriverContract has no test for {check.name}"


# ======================================================================== the simulator
WORLD = {
    "size_m": [6.0, 4.0],
    "boxes": [{"center": [4.5, 1.0], "size": [0.4, 0.4], "yaw_deg": 20}],
    "ramps": [{"center": [1.5, 3.2], "size": [1.0, 0.8], "slope_deg": 10}],
}
TRUTH_KEYS = {"x", "y", "yaw", "roll", "pitch", "z", "collided", "collisions", "sim_time_s"}


class TestSimDriver(DriverContract):
    @pytest.fixture
    def driver(self) -> SimDriver:
        return SimDriver({"time_scale": 1.0}, WORLD, seed=3)

    def make(self, settings: dict | None = None, world: dict | None = None, seed: int = 3) -> SimDriver:
        d = SimDriver(settings or {}, world or WORLD, seed=seed)
        d.open()
        d.activate()
        return d

    # ---- description ---------------------------------------------------
    def test_channel_names_the_server_expects(self, driver):
        assert [c.name for c in driver.channels()] == [
            "wheel_left_rad_s", "wheel_right_rad_s", "encoder_left_ticks", "encoder_right_ticks",
            "linear_m_s", "angular_rad_s", "range_front_m", "battery_v", "current_left_a", "current_right_a",
        ]
        battery = {c.name: c for c in driver.channels()}["battery_v"]
        assert (battery.warn_low, battery.crit_low, battery.unit) == (11.0, 10.5, "V")

    def test_rangers_from_settings_become_channels(self):
        d = SimDriver({"rangers": [{"name": "front"}, {"name": "left", "y_m": 0.1, "yaw_deg": 90},
                                   {"name": "right", "y_m": -0.1, "yaw_deg": -90, "max_range_m": 2.0}]}, WORLD)
        specs = {c.name: c for c in d.channels()}
        assert {"range_front_m", "range_left_m", "range_right_m"} <= set(specs)
        assert specs["range_right_m"].max == 2.0 and specs["range_right_m"].widget == "bar"

    def test_actuator_limits_are_the_wheel_speed_limit(self, driver):
        assert driver.actuators() == {"wheel_left": (-20.0, 20.0), "wheel_right": (-20.0, 20.0)}

    def test_flat_rover_keys_as_the_server_passes_them(self):
        d = SimDriver({"name": "sim", "wheel_radius_m": 0.04, "track_m": 0.25, "time_scale": 2.0}, WORLD)
        assert (d.params.wheel_radius_m, d.params.track_m, d.time_scale) == (0.04, 0.25, 2.0)
        with pytest.raises(ValueError, match="track_m"):
            SimDriver({"track_m": 0.25, "rover": {"track_m": 0.3}}, WORLD)

    @pytest.mark.parametrize(
        "settings",
        [{"time_scale": 0}, {"time_scale": -1}, {"rate_hz": 0}, {"start_pose": [1, 2]}, {"bogus": 1},
         {"rover": {"bogus": 1}}, {"rangers": [{"name": "Front"}]}, {"max_read_dt_s": 0}],
    )
    def test_fail__bad_settings(self, settings):
        with pytest.raises(ValueError):
            SimDriver(settings, WORLD)

    def test_fail__start_pose_in_a_box_refuses_to_open(self):
        d = SimDriver({"start_pose": [4.5, 1.0, 0.0]}, WORLD)
        with pytest.raises(DriverOpenError):
            d.open()
        assert not d.is_open

    # ---- time and motion -----------------------------------------------
    def test_time_scale_runs_faster_than_real_time(self):
        d = self.make({"time_scale": 50.0})
        for _ in range(100):
            frame = d.read(0.01)  # 1 s of loop time
        assert frame.t == pytest.approx(50.0) and frame.truth["sim_time_s"] == pytest.approx(50.0)

    def test_frame_truth_carries_the_pose_and_collisions(self):
        d = self.make({"start_pose": [1.0, 2.0, 90.0]})
        frame = d.read(0.01)
        assert TRUTH_KEYS <= set(frame.truth)
        assert (frame.truth["x"], frame.truth["y"]) == (1.0, 2.0)
        assert frame.truth["yaw"] == pytest.approx(math.pi / 2)
        assert frame.truth["collided"] is False and frame.truth["collisions"] == 0
        json.dumps(frame.truth)

    def test_driving_into_the_wall_is_reported_in_truth(self):
        d = self.make({"start_pose": [5.0, 2.0, 0.0], "time_scale": 10.0})
        d.write({"wheel_left": 20.0, "wheel_right": 20.0})
        for _ in range(50):
            frame = d.read(0.01)
        assert frame.truth["collided"] is True and frame.truth["collisions"] == 1
        assert frame.truth["x"] <= 6.0 - 0.15 + 1e-9
        assert frame.truth["contact_point"][0] == pytest.approx(6.0, abs=1e-3)
        assert frame.values["range_front_m"] == pytest.approx(0.02)  # under the sonar's minimum
        assert frame.values["current_left_a"] > 2.0  # stalled

    def test_write_keeps_the_other_wheel(self):
        d = self.make()
        d.write({"wheel_left": 20.0, "wheel_right": -5.0})
        assert d.command == (20.0, -5.0)
        d.write({"wheel_right": 3.0})
        assert d.command == (20.0, 3.0)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, "x", 99.0])
    def test_fail__bad_write_keeps_the_last_command(self, bad):
        d = self.make()
        d.write({"wheel_left": 5.0, "wheel_right": 5.0})
        with pytest.raises(DriverCommandError):
            d.write({"wheel_left": bad, "wheel_right": 0.0})
        assert d.command == (5.0, 5.0)

    def test_held_values_keep_their_old_sample_time(self):
        d = self.make({"rate_hz": 100.0})
        d.set_acquisition(1.0, ["linear_m_s", "battery_v"])
        first = d.read(0.01).sample_t
        later = [d.read(0.01).sample_t for _ in range(5)]  # 50 ms of a 1 s sampling period
        assert all(s == first for s in later)

    def test_from_config_takes_shared_keys_from_the_profile(self):
        profile = {"robot": {"wheel_radius_m": 0.04, "track_m": 0.25}, "loop": {"rate_hz": 200.0},
                   "uwb": {"anchors": [[0.0, 0.0, 2.0], [6.0, 0.0, 2.0], [6.0, 4.0, 2.0]], "tag_height_m": 0.1},
                   "sim": {"world": WORLD}}
        d = SimDriver.from_config({"name": "sim", "seed": 2, "uwb": {"sigma_m": 0.01}}, profile)
        assert (d.params.wheel_radius_m, d.params.track_m) == (0.04, 0.25)
        assert d.get_acquisition().rate_hz == 200.0
        assert "uwb_range_2_m" in {c.name for c in d.channels()}

    @pytest.mark.parametrize("table, key", [
        ({"seed": "x"}, "seed"), ({"bogus": 1}, "bogus"), ({"time_scale": 0}, "time_scale"),
        ({"rate_hz": 5000}, "rate_hz"), ({"noise": "off"}, "noise"), ({"start_pose": [1, 2]}, "start_pose"),
        ({"max_read_dt_s": -1}, "max_read_dt_s"), ({"rover": {"tau_s": 0}}, "rover.tau_s"),
        ({"rover": {"battery": {"initial_soc": 2}}}, "rover.battery.initial_soc"),
        ({"rangers": [{"name": "front"}, {"name": "Left"}]}, "rover.rangers[1].name"),
        ({"imu": {"acc_sigma_m_s2": -1}}, "imu.acc_sigma_m_s2"), ({"imu": {"lever_arm_m": [0, 0]}}, "imu.lever_arm_m"),
        ({"magnetometer": {"dip_deg": 95}}, "magnetometer.dip_deg"),
        ({"magnetometer": {"soft_iron": [1, [1, 0, 0], 1]}}, "magnetometer"),
        ({"uwb": {"anchors": [[0, 0, 2]] * 3, "sigma_m": float("nan")}}, "uwb.sigma_m"),
    ])
    def test_fail__from_config_names_the_key(self, table, key):
        with pytest.raises(DriverConfigError) as err:
            SimDriver.from_config(table, {"sim": {"world": WORLD}})
        assert err.value.key == key

    def test_halt_zeroes_the_stored_command_at_once(self):
        d = self.make()
        d.write({"wheel_left": 5.0, "wheel_right": 5.0})
        d.halt()
        assert d.command == (0.0, 0.0)

    def test_reopen_replays_the_same_seeded_run(self):
        def run(d: SimDriver) -> list[dict]:
            d.write({"wheel_left": 8.0, "wheel_right": 6.0})
            return [d.read(0.01).values for _ in range(100)]

        d = self.make()
        first = run(d)
        d.close()
        d.open()
        d.activate()
        assert run(d) == first
        assert run(self.make(seed=4)) != first

    def test_noise_off_gives_exact_ranges(self):
        d = self.make({"noise": False, "start_pose": [1.0, 2.0, 0.0]}, {"size_m": [4.0, 4.0]})
        assert d.read(0.01).values["range_front_m"] == pytest.approx(4.0 - 1.15)

    # ---- acquisition rate ----------------------------------------------
    def test_values_are_sampled_at_the_acquisition_rate_and_held(self):
        d = self.make({"rate_hz": 100.0})
        d.write({"wheel_left": 10.0, "wheel_right": 10.0})
        d.set_acquisition(10.0, ["encoder_left_ticks", "linear_m_s"])
        ticks = [d.read(0.01).values["encoder_left_ticks"] for _ in range(100)]  # 1 s at 100 Hz
        changes = sum(1 for a, b in zip(ticks, ticks[1:]) if a != b)
        assert changes == pytest.approx(10, abs=1)

    def test_every_read_samples_when_the_rate_matches_the_loop_despite_jitter(self):
        d = self.make({"rate_hz": 100.0})
        d.write({"wheel_left": 10.0, "wheel_right": 10.0})
        ticks = [d.read(0.01 + (0.002 if i % 2 else -0.002)).values["encoder_left_ticks"] for i in range(100)]
        assert all(b > a for a, b in zip(ticks[20:], ticks[21:]))

    # ---- debug hooks ---------------------------------------------------
    def test_debug_forces_and_releases_the_battery_voltage(self):
        d = self.make()
        state = d.debug({"battery_v": 10.0})
        assert state["battery_v"] == 10.0
        assert d.read(0.01).values["battery_v"] == 10.0
        d.debug({"battery_v": None})
        assert d.read(0.01).values["battery_v"] > 12.0

    def test_debug_battery_voltage_survives_reopen(self):
        d = SimDriver({}, WORLD)
        d.debug({"battery_v": 9.5})
        d.open()
        assert d.read(0.01).values["battery_v"] == 9.5

    def test_debug_teleport_moves_the_rover(self):
        d = self.make({"noise": False}, {"size_m": [4.0, 4.0]})
        state = d.debug({"teleport": [2.0, 1.0, math.pi / 2]})
        assert state["pose"] == pytest.approx([2.0, 1.0, math.pi / 2])
        frame = d.read(0.01)
        assert (frame.truth["x"], frame.truth["y"]) == (2.0, 1.0)
        assert frame.values["range_front_m"] == pytest.approx(4.0 - 1.0 - 0.15)

    @pytest.mark.parametrize(
        "command",
        [{"fault": "melt"}, {"teleport": [4.5, 1.0, 0.0]}, {"teleport": [1.0]}, {"battery_v": "high"},
         {"nope": 1}, {"fault": "read_error", "teleport": [4.5, 1.0, 0.0]}],
    )
    def test_fail__bad_debug_commands_change_nothing(self, command):
        d = self.make()
        before = d.debug({})
        with pytest.raises(ValueError):
            d.debug(command)
        assert d.debug({}) == before

    def test_open_error_fault_makes_open_raise(self):
        d = SimDriver({}, WORLD)
        d.debug({"fault": "open_error"})
        with pytest.raises(DriverOpenError):
            d.open()
        d.debug({"fault": None})
        d.open()
        assert d.is_open

    def test_pose_snapshot_for_other_threads(self):
        d = SimDriver({"start_pose": [1.0, 2.0, 0.0]}, WORLD)
        assert d.pose_snapshot() == {}
        d.open()
        d.activate()
        snap = d.pose_snapshot()
        assert snap == {"x": 1.0, "y": 2.0, "z": 0.0, "yaw": 0.0, "pitch": 0.0, "roll": 0.0, "t": 0.0}
        d.write({"wheel_left": 10.0, "wheel_right": 10.0})
        frame = d.read(0.5)
        snap["x"] = -1.0  # a copy: the caller cannot disturb the driver
        assert d.pose_snapshot()["x"] == frame.truth["x"] > 1.0
        assert d.pose_snapshot()["t"] == frame.t
        d.debug({"teleport": [2.0, 2.0, 0.0]})
        assert d.pose_snapshot()["x"] == 2.0

    def test_camera_source_renders_the_sim_world(self, opened):
        cam = opened.camera_source({"width": 160, "height": 120, "fps": 30, "render_process": False})
        cam.open()
        try:
            frame, capture_t = cam.read()
            assert frame.shape == (120, 160, 3) and capture_t > 0
        finally:
            cam.close()
        assert opened.sim is not None and opened.sim.sim_time_s == 0.0


# ======================================================================== the simulator with every sensor
SENSOR_SETTINGS = {
    "imu": {"acc_sigma_m_s2": 0.05, "gyro_sigma_rad_s": 0.003, "gyro_bias_rad_s": [0.0, 0.0, 0.004]},
    "magnetometer": {"hard_iron_ut": [4.0, -2.5, 1.5], "noise_ut": 0.3},
    # no dropouts here: the contract wants every value finite (a dropout is a NaN, see tests/sim)
    "uwb": {"anchors": [[0.0, 0.0, 2.5], [6.0, 0.0, 2.5], [6.0, 4.0, 2.5], [0.0, 4.0, 2.5]], "sigma_m": 0.05},
}


class TestSimDriverWithSensors(DriverContract):
    """The same contract with the IMU, magnetometer and UWB on (their noise included)."""

    @pytest.fixture
    def driver(self) -> SimDriver:
        return SimDriver({"time_scale": 1.0, **SENSOR_SETTINGS}, WORLD, seed=3)

    def motion(self, driver: Driver, frame: Frame) -> float:
        """Wheels and body twist only: the gyro's bias and noise are not motion."""
        names = ("wheel_left_rad_s", "wheel_right_rad_s", "linear_m_s", "angular_rad_s")
        return max((abs(frame.values[n]) for n in names if n in frame.values), default=0.0)

    def test_sensor_channels_are_described(self, driver):
        names = [c.name for c in driver.channels()]
        assert names[-13:] == [f"imu_acc_{a}_m_s2" for a in "xyz"] + [f"imu_gyro_{a}_rad_s" for a in "xyz"] + \
            [f"mag_{a}_ut" for a in "xyz"] + [f"uwb_range_{i}_m" for i in range(4)]
