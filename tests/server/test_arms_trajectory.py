"""Trajectory runs through the real server (issue 13 item 6): the six series of the Stewart paper run in the
simulator one after the other with their reports computed, an arm's uploads (JSON and CSV), cancellation, the
report's plot, and hostile or broken uploads refused with nothing changed.

The simulators run 4 × faster than real time (``time_scale``): the runs and the controllers keep time in the
robot's own clock, so a 10 s series takes 2.5 s here and tracks as it would in real time, in 40 ms steps.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from robotics.trajectory import STEWART_SERIES, scara_demo, stewart_series
from tests.conftest import ServerProc, wait_until

pytestmark = pytest.mark.timeout(180)

FAST = {"safety": {"command_timeout_s": 60.0}, "driver": {"time_scale": 4.0}}
# the six series' moving axes (seeds/003; robotics.trajectory)
MOVING = {"vertical": ["z_m"], "up_left": ["y_m", "z_m"], "down_right": ["x_m", "z_m"], "roll": ["roll_rad"],
          "pitch": ["pitch_rad"], "yaw": ["yaw_rad"]}


def run_and_report(srv: ServerProc, body=None, raw: bytes | None = None, content_type: str = "application/json",
                   timeout_s: float = 60.0) -> dict:
    status, reply = srv.request("POST", "/api/trajectory", body=body, raw=raw,
                                headers={"content-type": content_type} if raw is not None else None)
    assert status == 200, reply
    assert reply["trajectory"]["phase"] == "approach"
    wait_until(lambda: srv.get("/api/trajectory")[1]["run"]["phase"] in ("done", "cancelled", "failed"),
               timeout_s=timeout_s, interval_s=0.05, message="the run to end")
    status, report = srv.get("/api/trajectory/report")
    assert status == 200, report
    return report


def test_the_six_paper_series_run_in_the_simulator_with_their_reports(server_factory) -> None:
    srv = server_factory(FAST, config="config/stewart-sim.toml")
    status, reply = srv.get("/api/trajectory/report")
    assert (status, reply["error"]["code"]) == (404, "not_found")
    assert srv.get("/api/trajectory")[1]["series"] == list(STEWART_SERIES)
    assert srv.post("/api/start")[0] == 200
    home = srv.get("/api/robot")[1]["geometry"]["home"]
    figures = {}
    for name in STEWART_SERIES:
        report = run_and_report(srv, {"series": name})
        assert report["outcome"] == "finished" and report["label"] == name
        assert report["moving_axes"] == MOVING[name]
        assert report["samples"] >= 250 and report["dropped"] == 0  # 10 s in 40 ms steps, and the settling
        series = stewart_series(name, [home["x_m"], home["y_m"], home["z_m"]], [0.0, 0.0, 0.0])
        t = np.asarray(report["series"]["t_s"])
        assert list(report["series"]["commanded"]) == MOVING[name]  # the plot's series: the moving axes
        for axis in MOVING[name]:  # what was commanded is the series
            assert report["series"]["commanded"][axis] == pytest.approx(
                np.interp(np.minimum(t, series.times_s[-1]), series.times_s, series.column(axis)), abs=1e-6)
        # The servos lag (a few mm, tenths of a degree: the figures printed below); late ticks on a loaded
        # machine make longer steps and more lag, so the bounds only catch what is plainly wrong (a wrong axis,
        # sign or unit would be off by the amplitude: 60–100 mm, 20–25°).
        for axis, d in report["deviation"].items():
            assert set(d) == {"mean", "mean_abs", "rms", "max_abs"}
            scale = 1000.0 if axis.endswith("_m") else math.degrees(1.0)
            if axis in MOVING[name]:
                assert 0.0 < d["rms"] * scale < 20.0 and abs(d["mean"]) * scale < 3.0, (name, axis, d)
            else:
                assert d["max_abs"] * scale < 10.0, (name, axis, d)
        assert report["saturation"]["samples"] == 0
        figures[name] = {a: round(report["deviation"][a]["rms"] * (1000 if a.endswith("_m") else 57.2958), 3)
                         for a in MOVING[name]}
    print("rms deviation (mm or °) per series at 40 ms steps:", figures)
    assert srv.state()["state"] == "running"


def test_arm_uploads_in_json_and_csv_cancel_and_the_report_plot(server_factory) -> None:
    srv = server_factory(FAST, config="config/scara-sim.toml")
    assert srv.post("/api/start")[0] == 200
    demo = scara_demo(points=600)  # 6 s: uploaded in several parts (a runtime frame holds 64 KiB)
    report = run_and_report(srv, {"trajectory": demo.to_json()})
    assert report["outcome"] == "finished" and report["points"] == 600 and report["label"] == "upload"
    assert report["deviation"]["q1_rad"]["rms"] < math.radians(5.0)  # the lag (0.4° unloaded); a wrong axis: 20°+
    csv = "t_s,q2_rad,q1_rad\n0,1.0,0.0\n1,1.5,0.2\n2,1.5,-0.2\n"  # columns in any order
    report = run_and_report(srv, raw=csv.encode(), content_type="text/csv")
    assert report["points"] == 3 and report["axes"] == ["q1_rad", "q2_rad"]
    assert report["series"]["commanded"]["q2_rad"][-1] == pytest.approx(1.5)
    status, svg = srv.get("/api/trajectory/report.svg")
    root = ET.fromstring(svg)  # well-formed SVG: one plot per moving axis, commanded and achieved lines
    assert root.tag.endswith("svg") and svg.count(b"<polyline") >= 4 and b"RMS deviation" in svg
    # a long run, cancelled halfway
    assert srv.post("/api/trajectory", {"series": "scara_demo"})[0] == 200
    wait_until(lambda: (r := srv.get("/api/trajectory")[1]["run"])["phase"] == "run" and r["progress"] > 0.1,
               message="a tenth of the run")
    assert srv.state()["behavior"]["name"] == "trajectory"
    status, reply = srv.get("/api/trajectory/report")
    assert (status, reply["error"]["code"]) == (409, "trajectory_running")
    assert srv.post("/api/trajectory/cancel", {})[0] == 200
    report = srv.get("/api/trajectory/report")[1]
    assert report["outcome"] == "cancelled: cancelled by the operator" and report["samples"] > 0
    status, reply = srv.post("/api/trajectory/cancel", {})
    assert (status, reply["error"]["code"]) == (409, "conflict")
    # a long upload (1.3 MB of CSV: many TCP segments, and 100-odd parts to the runtime) arrives whole
    long = scara_demo(points=30_000, dt_s=0.001)
    rows = zip(long.times_s.tolist(), long.values.tolist())
    text = "t_s,q1_rad,q2_rad\n" + "".join(f"{t},{a},{b}\n" for t, (a, b) in rows)
    status, reply = srv.request("POST", "/api/trajectory", raw=text.encode(), headers={"content-type": "text/csv"})
    assert status == 200 and reply["trajectory"]["points"] == 30_000, reply
    assert reply["trajectory"]["duration_s"] == pytest.approx(29.999)
    assert srv.post("/api/trajectory/cancel", {})[0] == 200


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    """One running arm for the table of broken uploads."""
    import tomllib

    import tomli_w

    from tests.conftest import REPO, TEST_DEFAULTS, deep_merge

    cfg = deep_merge(deep_merge(tomllib.loads((REPO / "config/scara-sim.toml").read_text()), TEST_DEFAULTS), FAST)
    path = tmp_path_factory.mktemp("cfg") / "arm.toml"
    path.write_text(tomli_w.dumps(cfg))
    srv = ServerProc(path).start()
    assert srv.post("/api/start")[0] == 200
    yield srv
    srv.kill()


BAD_UPLOADS = [
    (b'{"trajectory": {"t_s": [0, 1], "q1_rad": [0, 9], "q2_rad": [1, 1]}}', "application/json", 422,
     "beyond_limits"),
    (b'{"trajectory": {"t_s": [0, 1], "q1_rad": [0, true], "q2_rad": [1, 1]}}', "application/json", 422, "invalid"),
    (b'{"trajectory": {"t_s": [0, 1], "q1_rad": [0, 1e999], "q2_rad": [1, 1]}}', "application/json", 422,
     "invalid"),
    (b'{"trajectory": {"t_s": [1, 0], "q1_rad": [0, 0], "q2_rad": [1, 1]}}', "application/json", 422, "invalid"),
    (b'{"trajectory": [1, 2]}', "application/json", 422, "missing_field"),
    (b'{"series": "vertical"}', "application/json", 422, "invalid"),  # the platform's, not the arm's
    (b'{"series": "scara_demo", "extra": 1}', "application/json", 422, "unknown_field"),
    (b'{"trajectory": ' + b"[" * 5000 + b"]" * 5000 + b"}", "application/json", 400, "malformed"),
    (b"t_s,q1_rad,q2_rad\n0,0,1\n1,zero,1\n", "text/csv", 422, "invalid"),
    (b"t_s,q1_rad\n0,0\n", "text/csv", 422, "invalid"),
    (b"\xff\xfe garbage", "text/csv", 400, "malformed"),
    (b"not json", "application/json", 400, "malformed"),
    # counted before they are decoded: millions of objects out of a few megabytes
    (b"t_s,q1_rad,q2_rad\n" + b"\n" * 300_000, "text/csv", 422, "out_of_limits"),
    (b'{"trajectory": {"t_s": [' + b"0," * 2_000_000 + b'0]}}', "application/json", 422, "out_of_limits"),
]


@pytest.mark.parametrize("raw, content_type, status, code", BAD_UPLOADS, ids=[f"{c}-{i}" for i, (_r, _t, _s, c)
                                                                             in enumerate(BAD_UPLOADS)])
def test_fail__broken_uploads_are_refused_and_change_nothing(arm, raw, content_type, status, code) -> None:
    srv = arm
    before = {k: srv.state()[k] for k in ("state", "cause", "setpoint", "behavior")}
    got, reply = srv.request("POST", "/api/trajectory", raw=raw, headers={"content-type": content_type})
    assert (got, reply["error"]["code"]) == (status, code), reply
    assert {k: srv.state()[k] for k in ("state", "cause", "setpoint", "behavior")} == before


def test_fail__an_oversize_upload_is_refused_before_it_is_read(server_factory) -> None:
    srv = server_factory(FAST, config="config/scara-sim.toml")
    big = b'{"trajectory": {"t_s": [' + b"0," * (9 * 1024 * 1024) + b"0]}}"
    status, reply = srv.request("POST", "/api/trajectory", raw=big, headers={"content-type": "application/json"})
    assert (status, reply["error"]["code"]) == (413, "too_large")
    assert srv.state()["state"] == "idle"
