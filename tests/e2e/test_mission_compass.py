"""The top bar's disturbed-compass badge in real Chromium, on the real server with the field profile's steel (issue 23).

``config/rover-field.toml`` puts steel dipoles in the yard (a pipe under the floor across y = 4.6 m) and turns the
estimator's disturbance check on; the magnetometer calibration is the profile's own iron, stored in the state file
as a calibration turn would leave it (the check runs only on a calibrated compass). The rover starts over the
pipe: the ``mag_disturbed`` channel reads 1 and the badge says so in words; moved to the clean spot where the
profile calibrates, the channel clears after ``mag_recover_s`` and the badge goes; back over the pipe, it comes back.
In local mode and logged in as an operator (``modes.py``).
"""

from __future__ import annotations

import json
import math

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

BADGE = "#compass-badge"
TEXT = "compass disturbed — heading from gyro + odometry"
OVER_THE_PIPE = [2.5, 4.6]   # config/rover-field.toml: "pipe under the floor, middle" at (2.5, 4.6, -0.35) m
CLEAN_SPOT = [1.5, 2.0]      # the profile's start: no steel within 1.4 m


def field_overrides(directory) -> dict:
    state = {"version": 1, "magnetometer": {"offset_ut": [4.0, -2.5, 0.5], "scale": [1 / 1.03, 1 / 0.97, 1.0]}}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "calibration-field.json").write_text(json.dumps(state))
    return {"server": {"state_dir": str(directory)}, "driver": {"start_pose": [*OVER_THE_PIPE, 90.0]}}


def channel(srv) -> float:
    return srv.state()["values"].get("mag_disturbed", math.nan)


def teleport(srv, xy: list[float]) -> None:
    yaw = srv.state()["truth"]["yaw"]
    status, body = srv.post("/api/debug/driver", {"teleport": [*xy, yaw]})
    assert status == 200, (status, body)


def test_the_top_bar_says_while_the_compass_is_disturbed(dashboard_server, open_dashboard, tmp_path, wait_for):
    srv = dashboard_server(field_overrides(tmp_path / "state"), config="config/rover-field.toml")
    dash = open_dashboard(srv)
    page = dash.page
    badge = page.locator(BADGE)
    wait_for(lambda: channel(srv) == 1.0, 30, "the disturbance check to flag the field over the pipe")
    page.wait_for_function("s => !document.querySelector(s).hidden", arg=BADGE, timeout=20000)
    assert badge.inner_text().strip() == TEXT  # words, not only a colour
    assert badge.get_attribute("role") == "status" and badge.get_attribute("aria-live") == "polite"
    box = badge.bounding_box()
    assert box and box["width"] > 0 and box["height"] > 0
    estop = page.locator("#estop").bounding_box()
    assert estop["width"] >= 44 and estop["height"] >= 44  # the badge squeezes nothing off the bar
    dash.screenshot(f"compass-disturbed-{srv.mode}.png", full_page=False)

    teleport(srv, CLEAN_SPOT)
    wait_for(lambda: channel(srv) == 0.0, 30, "the field clean again away from the steel")
    page.wait_for_function("s => document.querySelector(s).hidden", arg=BADGE, timeout=20000)
    assert not badge.is_visible()

    teleport(srv, OVER_THE_PIPE)  # and it says so again the next time
    wait_for(lambda: channel(srv) == 1.0, 30, "the disturbance flagged again")
    page.wait_for_function("s => !document.querySelector(s).hidden", arg=BADGE, timeout=20000)
    assert not dash.console_errors(), dash.console_errors()
