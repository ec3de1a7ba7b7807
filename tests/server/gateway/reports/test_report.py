"""Run reports against numpy: channel statistics, tracking deviation, SVG plots that parse, HTML."""

from __future__ import annotations

import doctest
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import robotics.tracking
import server.gateway.reports.report
import server.gateway.reports.svg
from robotics.tracking import deviation
from server.gateway.recording import Recorder, RecordingConfig, RecordingError
from server.gateway.reports import Pair, channel_stats, line_plot, report_html, run_report, tracking
from tests.server.gateway.recording.synthetic import ROBOT, record_run, snapshot

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_800_000_000.0


@pytest.mark.parametrize("module", [robotics.tracking, server.gateway.reports.report, server.gateway.reports.svg])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


def test_channel_stats_match_numpy():
    rng = np.random.default_rng(3)
    a = rng.normal(2.0, 0.5, 1000)
    b = a.copy()
    b[::7] = np.nan
    stats = channel_stats({"a": a, "b": b, "empty": np.array([np.nan, np.inf])})
    assert stats["a"] == {"samples": 1000, "missing": 0, "min": a.min(), "max": a.max(),
                          "mean": pytest.approx(a.mean()), "std": pytest.approx(a.std())}
    fb = b[np.isfinite(b)]
    assert stats["b"]["samples"] == fb.size and stats["b"]["missing"] == 143
    assert stats["b"]["mean"] == pytest.approx(fb.mean()) and stats["b"]["std"] == pytest.approx(fb.std())
    assert stats["empty"] == {"samples": 0, "missing": 2, "min": None, "max": None, "mean": None, "std": None}


def test_deviation_matches_numpy_per_axis():
    rng = np.random.default_rng(4)
    c = rng.normal(size=(500, 3))
    a = c + rng.normal(0.1, 0.2, size=(500, 3))
    d = deviation(c, a)
    diff = a - c
    np.testing.assert_allclose(d["mean"], diff.mean(axis=0))
    np.testing.assert_allclose(d["mean_abs"], np.abs(diff).mean(axis=0))
    np.testing.assert_allclose(d["rms"], np.sqrt((diff ** 2).mean(axis=0)))
    np.testing.assert_allclose(d["max_abs"], np.abs(diff).max(axis=0))
    assert d["rms"].shape == (3,)
    assert isinstance(deviation(c[:, 0], a[:, 0])["rms"], float)


@pytest.mark.parametrize("c,a,message", [
    (np.zeros(3), np.zeros(4), "same shape"),
    (np.zeros((0,)), np.zeros((0,)), "N >= 1"),
    (np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), r"\(N,\) or \(N, k\)"),
])
def test_deviation_refuses_bad_shapes(c, a, message):
    with pytest.raises(ValueError, match=message):
        deviation(c, a)


def test_tracking_skips_missing_samples_and_wraps_angles():
    c = np.array([350.0, 355.0, np.nan, 0.0])
    a = np.array([10.0, 354.0, 5.0, 359.0])
    fig = tracking(c, a, period=360.0)
    assert fig["samples"] == 3
    assert fig["max_abs"] == pytest.approx(20.0)  # 350 → 10 is 20° the short way, not 340°
    assert fig["mean"] == pytest.approx((20.0 - 1.0 - 1.0) / 3)
    assert tracking([np.nan], [1.0])["samples"] == 0


def test_svg_plot_is_well_formed_and_draws_every_series():
    t = np.linspace(0, 3600, 180_000)  # 1 h at 50 Hz
    y = np.sin(t / 100)
    y[1000:2000] = np.nan
    svg = line_plot(t, {"sin": y, "cos <&>": np.cos(t / 100)}, title="a & b", y_label="rad/s")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("width") == "800"
    groups = root.findall(f"{SVG}g")
    assert [g.find(f"{SVG}title").text for g in groups] == ["sin", "cos <&>"]
    polylines = groups[0].findall(f"{SVG}polyline")
    assert len(polylines) == 2  # split at the gap
    points = sum(len(p.get("points").split()) for g in groups for p in g.findall(f"{SVG}polyline"))
    assert points <= 2 * 2000 + 10  # decimated
    for g in groups:
        for p in g.findall(f"{SVG}polyline"):
            for xy in p.get("points").split():
                x, yy = map(float, xy.split(","))
                assert 64 <= x <= 784 and 28 <= yy <= 280
    assert len(svg) < 300_000


def test_svg_plot_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="'y' has 3 samples, t has 4"):
        line_plot(np.arange(4.0), {"y": np.arange(3.0)})


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    rec = Recorder(RecordingConfig(dir=str(d), queue_size=100_000), robot=ROBOT)
    rec.start()
    rec.start_recording("report")
    record_run(rec, 1000, T0)
    rec.close()
    (path,) = d.glob("*.mcap")
    return path


def test_run_report_statistics_and_tracking_match_numpy(recording):
    rep = run_report(recording, channels=["battery_v", "range_left_m", "linear_m_s"])
    snaps = [snapshot(i, T0 + i * 0.02) for i in range(1000)]
    battery = np.array([s["values"]["battery_v"] for s in snaps])
    ranges = np.array([np.nan if s["values"]["range_left_m"] is None else s["values"]["range_left_m"] for s in snaps])
    assert rep["stats"]["battery_v"]["mean"] == pytest.approx(battery.mean())
    assert rep["stats"]["battery_v"]["std"] == pytest.approx(battery.std())
    assert rep["stats"]["range_left_m"]["samples"] == 900 and rep["stats"]["range_left_m"]["missing"] == 100
    assert rep["stats"]["range_left_m"]["max"] == np.nanmax(ranges)
    by_name = {t["name"]: t for t in rep["tracking"]}
    # synthetic: measured linear = command + 0.01, wheels = command ± 0.1 rad/s
    assert by_name["linear speed"]["mean"] == pytest.approx(0.01)
    assert by_name["linear speed"]["rms"] == pytest.approx(0.01)
    assert by_name["turn rate"]["mean"] == pytest.approx(-0.02)
    assert by_name["left wheel speed"]["mean"] == pytest.approx(0.1)
    assert by_name["right wheel speed"]["mean"] == pytest.approx(-0.1)
    assert by_name["left wheel speed"]["samples"] == 1000
    assert by_name["heading"]["samples"] == 0 and by_name["heading"]["skipped"]  # no heading behaviour ran
    assert rep["robot"] == "test rover" and rep["samples"] == 1000
    for svg in rep["plots"].values():
        ET.fromstring(svg)
    assert "tracking: linear speed" in rep["plots"] and "battery_v" in rep["plots"]


def test_run_report_with_explicit_pairs_and_time_range(recording):
    rep = run_report(recording, channels=["battery_v"], pairs=[Pair("v", "setpoint.linear", "linear_m_s", "m/s")],
                     start_t=T0 + 1.0, end_t=T0 + 2.0, plots=False)
    assert rep["samples"] == 50 and rep["plots"] == {}
    assert rep["tracking"] == [{"name": "v", "unit": "m/s", "samples": 50, "mean": pytest.approx(0.01),
                                "mean_abs": pytest.approx(0.01), "rms": pytest.approx(0.01),
                                "max_abs": pytest.approx(0.01)}]
    with pytest.raises(RecordingError, match="unknown channel 'nope'"):
        run_report(recording, pairs=[Pair("x", "setpoint.linear", "nope")])
    with pytest.raises(RecordingError, match="unknown channel 'nope'"):
        run_report(recording, channels=["nope"])


def test_report_html_is_a_page_with_tables_and_plots(recording):
    html = report_html(run_report(recording, channels=["battery_v"]))
    assert html.startswith("<!doctype html>") and html.count("<svg") >= 2 and "RMS" in html
    assert math.isfinite(len(html))
