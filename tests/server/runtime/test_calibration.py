"""Calibration workflows over the API: the magnetometer run (turn, sample, fit, store, apply, reload)
and the UWB range calibration from (raw, true) pairs; the state file and its failure modes."""

from __future__ import annotations

import doctest
import json
import math
from pathlib import Path

import numpy as np
import pytest

import server.runtime.calibration
from robotics.estimation.magcal import fit_magnetometer
from server.runtime.behaviours.heading import HeadingBehavior
from server.runtime.settings import HeadingConfig
from server.runtime.behaviours.magcal import MagCalibrationBehavior
from server.runtime.calibration import parse_state, read_state_file, write_state_file
from server.runtime.estimation import ACC, GYRO, MAG, EstimationStage
from tests.conftest import ServerProc, wait_until
from tests.server.runtime.test_heading import (CLEAN_MAG, FAST, angle_error_deg, compass_deg, run_behavior,
                                       true_heading_deg)
from tests.server.test_stop_paths import Heartbeat

pytestmark = pytest.mark.timeout(180)

# the default profile's magnetometer iron ([driver.magnetometer])
HARD_IRON_UT = [4.0, -2.5, 1.5]
SOFT_IRON = [1.03, 0.97, 1.0]
ANCHORS = np.array([[0.0, 0.0, 2.5], [6.0, 0.0, 2.5], [6.0, 4.0, 2.5], [0.0, 4.0, 2.5]])
TAG_HEIGHT_M = 0.15
RANGES = [f"uwb_range_{i}_m" for i in range(4)]


@pytest.fixture(scope="module")
def table_server(tmp_path_factory):
    """One running server for the bad-input tables (a long link timeout keeps it running)."""
    import tomllib

    import tomli_w

    from tests.conftest import DEFAULT_CONFIG, REPO, TEST_DEFAULTS, deep_merge

    base = tomllib.loads((REPO / DEFAULT_CONFIG).read_text())
    state_dir = tmp_path_factory.mktemp("state")
    cfg = deep_merge(deep_merge(base, TEST_DEFAULTS), {"safety": {"command_timeout_s": 60.0},
                                                        "server": {"state_dir": str(state_dir)}})
    path = tmp_path_factory.mktemp("cfg") / "calibration-tables.toml"
    path.write_text(tomli_w.dumps(cfg))
    srv = ServerProc(path).start()
    assert srv.post("/api/start")[0] == 200
    yield srv
    srv.kill()


def test_docstring_examples() -> None:
    assert doctest.testmod(server.runtime.calibration).failed == 0


def heading_error(srv: ServerProc) -> float:
    s = srv.state()
    return angle_error_deg(s["values"]["heading_deg"], compass_deg(s["truth"]["yaw"]))


def state_file(tmp_path: Path) -> Path:
    return tmp_path / "calibration.json"


# ---------------------------------------------------------------------- magnetometer
def test_magnetometer_calibration_run_fits_stores_applies_and_reloads(server_factory, tmp_path) -> None:
    srv = server_factory({"driver": {"time_scale": FAST}, "server": {"state_dir": str(tmp_path)},
                          "safety": {"command_timeout_s": 5.0}})  # not a link-loss test: a loaded heartbeat thread
    wait_until(lambda: srv.state()["values"]["heading_deg"] is not None, 5, "a heading")
    before = heading_error(srv)
    assert abs(before) > 3.0  # the profile's iron pulls the uncalibrated compass off
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        end = run_behavior(srv, "/api/calibration/magnetometer", None)
        assert end["trigger"] == "behavior_end" and end["values"]["outcome"] == "calibrated", end
        result = end["values"]["result"]
        assert result["method"] == "horizontal_ellipse" and result["samples"] > 300
        assert result["offset_ut"][:2] == pytest.approx(HARD_IRON_UT[:2], abs=0.3)
        ratio = result["scale"][0] / result["scale"][1]
        assert ratio == pytest.approx(SOFT_IRON[1] / SOFT_IRON[0], rel=0.01)
        cal = srv.get("/api/calibration")[1]
        assert cal["magnetometer"]["offset_ut"] == result["offset_ut"]
        assert cal["active"]["magnetometer"]["offset_ut"] == pytest.approx(result["offset_ut"])
        wait_until(lambda: abs(heading_error(srv)) < 2.0, 5, "a calibrated heading")
        # …and the closed loop now steers the distorted sensor to within the tolerance
        end = run_behavior(srv, "/api/heading", {"heading_deg": 200.0})
        assert end["values"]["outcome"] == "reached"
        assert abs(angle_error_deg(true_heading_deg(srv), 200.0)) <= 5.0
    saved = wait_until(lambda: read_state_file(state_file(tmp_path)), 5, "the state file")
    assert saved["magnetometer"]["offset_ut"] == result["offset_ut"]
    assert json.loads(state_file(tmp_path).read_text())["version"] == 1

    srv.restart()  # the same config: the state file is loaded at start-up
    cal = srv.get("/api/calibration")[1]
    assert cal["magnetometer"]["offset_ut"] == result["offset_ut"] and cal["ignored_file_reason"] is None
    assert cal["active"]["magnetometer"]["offset_ut"] == pytest.approx(result["offset_ut"])
    assert "calibrations loaded from" in "".join(srv.output)
    wait_until(lambda: abs(heading_error(srv)) < 2.0, 5, "a calibrated heading after the restart")


def test_magnetometer_calibration_refused_unless_running(server_factory, tmp_path) -> None:
    srv = server_factory({"server": {"state_dir": str(tmp_path)}})
    status, body = srv.post("/api/calibration/magnetometer")
    assert status == 409 and body["error"]["code"] == "not_running"


def test_stop_cancels_the_magnetometer_run_and_stores_nothing(server_factory, tmp_path) -> None:
    srv = server_factory({"driver": {"time_scale": FAST}, "server": {"state_dir": str(tmp_path)},
                          "safety": {"command_timeout_s": 5.0}})  # not a link-loss test: a loaded heartbeat thread
    assert srv.post("/api/start")[0] == 200
    with Heartbeat(srv):
        assert srv.post("/api/calibration/magnetometer")[0] == 200
        wait_until(lambda: (srv.state()["behavior"] or {}).get("samples", 0) > 20, 10, "samples being taken")
        assert srv.post("/api/stop")[0] == 200
        wait_until(lambda: srv.state()["state"] == "idle", 5, "stopped")
    ev = [e for e in srv.get("/api/events?limit=1000")[1]["events"] if e["trigger"] == "behavior_cancel"]
    assert ev and ev[-1]["values"]["name"] == "magnetometer_calibration"
    assert srv.get("/api/calibration")[1]["magnetometer"] is None
    assert not state_file(tmp_path).exists()


@pytest.mark.parametrize("body, code", [
    ({"revolutions": 0.5}, "out_of_limits"),
    ({"rate_rad_s": 100.0}, "out_of_limits"),
    ({"rate_rad_s": "slow"}, "wrong_type"),
    ({"turns": 2}, "unknown_field"),
])
def test_fail__magnetometer_calibration_bad_input(table_server: ServerProc, body: dict, code: str) -> None:
    status, reply = table_server.post("/api/calibration/magnetometer", body)
    assert status == 422 and reply["error"]["code"] == code, reply
    assert table_server.state()["behavior"] is None


def test_fit_magnetometer_planar_and_full_ellipsoid() -> None:
    rng = np.random.default_rng(0)
    offset, semi = np.array([4.0, -2.5, 1.5]), np.array([26.0, 24.0, 43.0])
    yaw = np.linspace(0, 2.5 * math.pi, 400)
    level = np.column_stack([np.cos(yaw) * semi[0], np.sin(yaw) * semi[1], -np.full(yaw.size, semi[2])]) + offset
    cal = fit_magnetometer(level + 0.3 * rng.standard_normal(level.shape))
    assert cal["method"] == "horizontal_ellipse"
    assert cal["offset_ut"][:2] == pytest.approx(offset[:2], abs=0.1) and cal["offset_ut"][2] == 0.0
    assert cal["scale"][0] * semi[0] == pytest.approx(cal["scale"][1] * semi[1], rel=0.01)
    u = rng.normal(size=(500, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    cal = fit_magnetometer(u * semi + offset)
    assert cal["method"] == "ellipsoid" and cal["offset_ut"] == pytest.approx(offset, abs=1e-6)


STILL = {"angular_rad_s": 0.0, "linear_m_s": 0.0}


def test_magnetometer_run_without_field_samples_fails_with_the_reason() -> None:
    st = EstimationStage(available=ACC + GYRO + MAG)
    stored: list = []
    b = MagCalibrationBehavior(st, 1.0, 0.5, 60.0, 1.0, stored.append)
    out = b.update(STILL, 0.01, 0.0)
    for _ in range(1000):  # the encoders turn, but no magnetometer value ever arrives
        if out is None:
            break
        assert out.angular >= 0.0
        st.odom_yaw_rad += 0.01
        out = b.update(STILL, 0.01, 0.0)
    assert out is None and b.outcome.startswith("failed: too few magnetometer samples"), b.outcome
    assert not stored and st.attitude.mag_offset_ut is None


def test_magnetometer_run_times_out_when_the_rover_does_not_turn() -> None:
    st = EstimationStage(available=ACC + GYRO + MAG)
    b = MagCalibrationBehavior(st, 1.0, 0.5, 2.0, 1.0, lambda r: None)
    outs = [b.update(STILL, 0.01, 0.0) for _ in range(250)]
    assert None in outs and b.outcome.startswith("failed: timeout"), b.outcome


def test_heading_fails_without_a_heading_estimate() -> None:
    st = EstimationStage(available=ACC + GYRO + MAG)  # never fed: heading NaN
    settings = HeadingConfig(settle_s=0.1)
    b = HeadingBehavior(st, 90.0, settings, 2.0, 1.0)
    outs = [b.update(STILL, 0.01, 0.0) for _ in range(20)]
    assert None in outs and b.outcome == "failed: no heading from the estimator"


@pytest.mark.parametrize("samples", [np.zeros((5, 3)), np.tile([1.0, 2.0, 3.0], (50, 1)),
                                     np.column_stack([np.linspace(0, 1, 50)] * 2 + [np.zeros(50)])])
def test_fail__fit_magnetometer_needs_a_turn(samples) -> None:
    with pytest.raises(ValueError):
        fit_magnetometer(samples)


# ---------------------------------------------------------------------- UWB ranges
UWB_DISTORTED = {"driver": {**CLEAN_MAG, "uwb": {"distortion": [0.1, 1.02, 0.005], "sigma_m": 0.01,
                                                 "nlos_probability": 0.0, "dropout_probability": 0.0}}}
SPOTS = [(1.5, 2.0), (3.0, 2.0), (4.5, 2.5), (5.5, 3.5), (5.5, 0.5), (0.5, 3.5), (2.5, 2.0), (4.0, 3.5),
         (1.5, 0.3), (3.0, 3.7), (5.7, 2.0), (3.5, 1.6)]


def measurement_at(srv: ServerProc, x: float, y: float) -> dict:
    """Teleport and return the first snapshot whose UWB measurement was taken there."""
    assert srv.post("/api/debug/driver", {"teleport": [x, y, 0.0]})[0] == 200
    expected = np.linalg.norm(ANCHORS - [x, y, TAG_HEIGHT_M], axis=1)

    def fresh() -> dict:
        s = srv.state()
        true = s["truth"].get("uwb_true_m")
        return s if true is not None and np.allclose(true, expected, atol=1e-9) else {}

    return wait_until(fresh, 5, f"a UWB measurement at ({x}, {y})")


def fix_errors(srv: ServerProc, spots) -> np.ndarray:
    errs = []
    for x, y in spots:
        s = measurement_at(srv, x, y)
        errs.append(math.hypot(s["values"]["uwb_x_m"] - x, s["values"]["uwb_y_m"] - y))
    return np.array(errs)


def test_uwb_range_calibration_from_pairs(server_factory, tmp_path) -> None:
    srv = server_factory({**UWB_DISTORTED, "server": {"state_dir": str(tmp_path)}})
    pairs = []
    for x, y in SPOTS:
        s = measurement_at(srv, x, y)
        pairs += [[s["values"][n], true] for n, true in zip(RANGES, s["truth"]["uwb_true_m"])]
    check = [(2.0, 1.2), (4.2, 2.9), (1.2, 2.8)]
    before = fix_errors(srv, check)
    status, body = srv.post("/api/calibration/uwb", {"pairs": pairs, "degree": 2})
    assert status == 200, body
    uwb = body["uwb"]
    assert uwb["pairs"] == len(pairs) and uwb["degree"] == 2 and len(uwb["coefficients"]) == 3
    assert uwb["rms_after_m"] < 0.02 < 0.1 < uwb["rms_before_m"]
    raw = np.array([p[0] for p in pairs])
    true = np.array([p[1] for p in pairs])
    assert np.polyval(uwb["coefficients"], raw) == pytest.approx(true, abs=0.04)
    after = fix_errors(srv, check)
    print(f"\nUWB ranges rms {uwb['rms_before_m']} m -> {uwb['rms_after_m']} m, coefficients {uwb['coefficients']}; "
          f"fix error before {before.round(3)} m, after {after.round(3)} m")
    assert before.mean() > 0.05 and after.max() < 0.03
    cal = srv.get("/api/calibration")[1]
    assert cal["uwb"]["coefficients"] == uwb["coefficients"]
    assert cal["active"]["uwb_range_correction"] == pytest.approx(uwb["coefficients"])
    saved = wait_until(lambda: read_state_file(state_file(tmp_path)), 5, "the state file")
    assert saved["uwb"]["coefficients"] == uwb["coefficients"] and saved["magnetometer"] is None

    srv.restart()
    assert srv.get("/api/calibration")[1]["active"]["uwb_range_correction"] == pytest.approx(uwb["coefficients"])
    assert fix_errors(srv, check[:1]).max() < 0.03


UWB_BAD = [
    ({}, "missing_field"),
    ({"pairs": []}, "wrong_type"),
    ({"pairs": "1,2"}, "wrong_type"),
    ({"pairs": [[1.0, 2.0, 3.0]]}, "wrong_type"),
    ({"pairs": [[1.0, "2"]]}, "wrong_type"),
    ({"pairs": [[1.0, True]]}, "wrong_type"),
    ({"pairs": [[-1.0, 2.0]]}, "out_of_limits"),
    ({"pairs": [[1, 1]] * 2001}, "out_of_limits"),
    ({"pairs": [[1.0, 1.0], [2.0, 2.0]], "degree": 5}, "out_of_limits"),
    ({"pairs": [[1.0, 1.0], [2.0, 2.0]], "degree": "2"}, "wrong_type"),
    ({"pairs": [[1.0, 1.0], [1.0, 1.1], [1.0, 0.9]]}, "invalid"),  # one distinct raw range: no degree-2 fit
    ({"pairs": [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], "offset": 1}, "unknown_field"),
]


@pytest.mark.parametrize("body, code", UWB_BAD)
def test_fail__uwb_calibration_bad_input(table_server: ServerProc, body: dict, code: str) -> None:
    status, reply = table_server.post("/api/calibration/uwb", body)
    assert status == 422 and reply["error"]["code"] == code, reply
    assert table_server.get("/api/calibration")[1]["uwb"] is None


@pytest.mark.parametrize("raw, status, code", [
    (b'{"pairs": [[1e400, 2.0]]}', 422, "not_finite"),
    (b'{"pairs": [[NaN, 2.0]]}', 400, "malformed"),
    (b"[[1, 1]]", 400, "malformed"),
])
def test_fail__uwb_calibration_bad_body(table_server: ServerProc, raw: bytes, status: int, code: str) -> None:
    got, reply = table_server.request("POST", "/api/calibration/uwb", raw=raw)
    assert got == status and reply["error"]["code"] == code


def test_uwb_calibration_needs_anchors(server_factory, tmp_path) -> None:
    srv = server_factory({"uwb": {"anchors": []}, "driver": {"uwb": {"enabled": False}},
                          "server": {"state_dir": str(tmp_path)}})
    status, body = srv.post("/api/calibration/uwb", {"pairs": [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]})
    assert status == 409 and body["error"]["code"] == "unavailable"


# ---------------------------------------------------------------------- the state file
@pytest.mark.parametrize("content, reason", [
    ("{not json", "not valid JSON"),
    ('{"version": 7}', "version"),
    ('{"version": 1, "magnetometer": {"offset_ut": [1, 2, 3], "scale": [1, -1, 1]}}', "scale"),
    ('{"version": 1, "uwb": {"coefficients": []}}', "uwb.coefficients"),
    ("[]", "not a JSON object"),
])
def test_bad_state_file_is_named_and_ignored(server_factory, tmp_path, content: str, reason: str) -> None:
    state_file(tmp_path).write_text(content)
    srv = server_factory({"server": {"state_dir": str(tmp_path)}})
    cal = srv.get("/api/calibration")[1]
    assert reason in cal["ignored_file_reason"] and cal["magnetometer"] is None and cal["uwb"] is None
    log = "".join(srv.output)
    assert str(state_file(tmp_path)) in log and "ignoring it" in log
    wait_until(lambda: any(e["trigger"] == "calibration_ignored" and str(state_file(tmp_path)) in e["message"]
                           for e in srv.get("/api/events?limit=100")[1]["events"]), 5, "the event naming the file")
    assert srv.post("/api/start")[0] == 200  # the robot is usable, uncalibrated
    # the next calibration replaces the bad file with a good one
    assert srv.post("/api/calibration/uwb", {"pairs": [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]})[0] == 200
    assert wait_until(lambda: read_state_file(state_file(tmp_path)), 5, "a good state file")["uwb"] is not None


def test_state_file_round_trip(tmp_path) -> None:
    path = tmp_path / "sub" / "calibration.json"
    assert read_state_file(path) is None
    cal = {"magnetometer": {"offset_ut": [1.0, 2.0, 0.0], "scale": [1.0, 1.0, 1.0], "method": "horizontal_ellipse"},
           "uwb": None}
    write_state_file(path, cal)
    assert read_state_file(path) == cal
    assert [p.name for p in path.parent.iterdir()] == ["calibration.json"]  # no temporary file left


@pytest.mark.parametrize("obj", [{"version": 1, "magnetometer": "x"}, {"version": 1, "uwb": {"coefficients": [1, "a"]}},
                                 {"version": 1, "magnetometer": {"offset_ut": [1, 2, math.nan], "scale": [1, 1, 1]}}])
def test_fail__parse_state(obj) -> None:
    with pytest.raises(ValueError):
        parse_state(obj)
