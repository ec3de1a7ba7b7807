"""The arm and platform dashboards in real Chromium against the real server (issue 13 item 9): the live scheme
renders and its bodies move when the telemetry changes (transform attributes only, the same strings the server
computes), panels chosen by profile, click-to-move in the SCARA workspace, the joint sliders, the platform's pose
panel, and the trajectory runner with its report and the FAULHABER program of the motion. Every test runs in local
mode and logged in as an operator holding the lease (conftest.py). Every wait has a deadline; screenshots go to
test-output/."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from robotics.description import body_transform, parse
from server.gateway.robot_svg import stewart_transforms
from tests.conftest import REPO

pytestmark = pytest.mark.e2e

LONG_LINK = {"safety": {"command_timeout_s": 60.0}}

TRANSFORMS = """sel => [...document.querySelectorAll(sel)].map(e => [e.id, e.getAttribute('transform')])"""
# the scheme's markup with every transform taken out: what must never change
SHAPE = """() => document.querySelector('#scheme-panel svg').outerHTML.replace(/ transform="[^"]*"/g, '')"""


def wait_transform(dash, element_id: str, value: str, timeout_s: float = 15.0) -> None:
    dash.page.wait_for_function(
        "([id, v]) => { const e = document.getElementById(id); return e && e.getAttribute('transform') === v; }",
        arg=[element_id, value], timeout=timeout_s * 1000)


def test_scara_scheme_follows_the_joints_and_only_its_transforms_change(dashboard_server, open_dashboard) -> None:
    srv = dashboard_server(LONG_LINK, config="config/scara-sim.toml")
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_function("() => window.teleopScheme && window.teleopScheme.svg")
    # panels by profile: the scheme, the arm and the trajectory runner; no joystick, no navigation
    for panel in ("#scheme-panel", "#arm-panel", "#trajectory-panel"):
        assert page.locator(panel).is_visible(), panel
    assert not page.locator("#joystick").is_visible()
    assert page.locator("#navigation-panel").count() == 0 and page.locator("#platform-panel").count() == 0
    page.wait_for_function("() => document.querySelector('#scheme-panel svg .workspace')")  # drawn after the arm
    box = page.evaluate("(() => { const b = document.querySelector('#scheme-panel svg #scene').getBBox();"
                        " return [b.width, b.height]; })()")
    assert box[0] > 400 and box[1] > 400  # drawn (mm): the arm and its workspace
    shape = page.evaluate(SHAPE)
    tree = parse((REPO / "config/bodies/scara.xml").read_text())
    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/joints", {"q1_rad": 0.6, "q2_rad": -1.1})[0] == 200
    # the browser's transforms are the server's strings for the same joint values
    wait_transform(dash, "body-1", body_transform(tree.bodies[1], 0.6))
    wait_transform(dash, "body-2", body_transform(tree.bodies[2], -1.1))
    assert page.evaluate(SHAPE) == shape  # nothing but transforms changed
    assert page.evaluate("window.teleopScheme.stats.changed") > 0
    dash.screenshot("arms-scara.png")
    assert not dash.console_errors()


def test_scara_click_to_move_and_joint_sliders(dashboard_server, open_dashboard) -> None:
    srv = dashboard_server(LONG_LINK, config="config/scara-sim.toml")
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_function("() => document.querySelector('#scheme-panel svg .workspace')")
    assert srv.post("/api/start")[0] == 200
    dash.wait_badge("running")
    # no speed from the drive keys to a robot whose commands (GET /api/robot) have none; the heartbeats go on
    assert "speed" not in srv.get("/api/robot")[1]["commands"]
    assert dash.js("document.body.classList.contains('no-speed')") and not page.locator("#lin-cap").is_visible()
    dash.js("""() => { const s = window.teleop.session, post = s.post.bind(s); window.posted = [];
                       s.post = (type, fields) => { window.posted.push(type); return post(type, fields); }; }""")
    page.keyboard.down("ArrowUp")
    page.wait_for_function("() => window.posted.filter(t => t === 'heartbeat').length >= 3", timeout=20_000)
    page.keyboard.up("ArrowUp")
    assert "speed" not in dash.js("window.posted"), dash.js("window.posted")
    # the screen point of the tool target (0.25, 0.2) m in the scheme's frame (mm, y up)
    x, y = page.evaluate("""() => {
        const scene = document.querySelector('#scheme-panel svg #scene');
        const p = new DOMPoint(250, 200).matrixTransform(scene.getScreenCTM());
        return [p.x, p.y]; }""")
    page.mouse.click(x, y)
    page.wait_for_function("() => document.querySelector('#arm-status').textContent.includes('accepted')")
    sp = srv.state()["setpoint"]
    assert sp["kind"] == "tool" and sp["elbow"] == 1 and sp["source"] == "websocket"
    assert (sp["x_m"], sp["y_m"]) == pytest.approx((0.25, 0.2), abs=0.003)  # within a pixel or so
    dash.wait_for(lambda: abs(srv.state()["values"]["tool_x_m"] - sp["x_m"]) < 1e-4, message="the tool there")
    # a click outside the reach is refused, with the reason shown, and changes nothing
    x, y = page.evaluate("""() => {
        const scene = document.querySelector('#scheme-panel svg #scene');
        const p = new DOMPoint(20, 10).matrixTransform(scene.getScreenCTM());
        return [p.x, p.y]; }""")
    page.mouse.click(x, y)
    page.wait_for_function("() => document.querySelector('#arm-status').textContent.includes('refused')")
    assert "unreachable" in page.locator("#arm-status").inner_text()
    assert srv.state()["setpoint"]["kind"] == "tool" and srv.state()["setpoint"]["x_m"] == sp["x_m"]
    # a slider sends a joint target when released
    page.locator("#q1-slider").evaluate(
        "el => { el.value = '30'; el.dispatchEvent(new Event('input')); el.dispatchEvent(new Event('change')); }")
    dash.wait_for(lambda: abs(srv.state()["values"]["q1_rad"] - math.radians(30.0)) < 1e-4, message="joint 1 at 30°")
    assert srv.state()["setpoint"]["kind"] == "joints"
    assert not dash.console_errors()


def test_stewart_pose_panel_and_scheme(dashboard_server, open_dashboard) -> None:
    srv = dashboard_server(LONG_LINK, config="config/stewart-sim.toml")
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_function("() => window.teleopScheme && window.teleopScheme.svg")
    assert page.locator("#platform-panel").is_visible() and page.locator("#arm-panel").count() == 0
    before = dict(page.evaluate(TRANSFORMS, "#scheme-panel .leg, #scheme-panel .platform"))
    assert len(before) == 14  # six legs and the platform, in two views
    shape = page.evaluate(SHAPE)
    assert srv.post("/api/start")[0] == 200
    dash.wait_badge("running")
    page.fill("#pose-form input[name=z_m]", "550")
    page.fill("#pose-form input[name=roll_rad]", "6")
    page.fill("#pose-form input[name=yaw_rad]", "-10")
    page.click("#pose-go")
    dash.wait_for(lambda: abs(srv.state()["values"]["yaw_rad"] + math.radians(10.0)) < 1e-5, message="the pose")
    geometry = srv.get("/api/robot")[1]["geometry"]
    elements = ("leg-1-top", "leg-4-front", "platform-top", "platform-front")

    def scheme_matches_the_pose() -> dict[str, str] | None:
        # the legs may still settle in the last digits: compare against the pose the server reports now,
        # until the browser's strings are the server's for one pose (a broken scheme.js never gets there)
        expected = stewart_transforms(geometry, srv.state()["values"])
        shown = dict(page.evaluate(TRANSFORMS, "#scheme-panel .leg, #scheme-panel .platform"))
        return expected if all(shown[e] == expected[e] for e in elements) else None

    expected = dash.wait_for(scheme_matches_the_pose, timeout_s=15.0, message="the scheme to show the pose")
    for element in elements:
        assert expected[element] != before[element]
    assert page.evaluate(SHAPE) == shape
    # beyond the stroke: refused, with the legs named on the panel
    page.fill("#pose-form input[name=z_m]", "900")
    page.click("#pose-go")
    page.wait_for_function("() => document.querySelector('#pose-status').textContent.includes('out_of_stroke')")
    assert re.search(r"leg \d at", page.locator("#pose-status").inner_text())
    dash.screenshot("arms-stewart.png")
    assert not dash.console_errors()


def test_a_form_cannot_be_submitted_before_its_module_has_bound_it(dashboard_server, open_dashboard) -> None:
    """CI once clicked Run while trajectory.js was still loading on a busy machine: the form submitted
    natively, the page reloaded and no run started. The submit button is served disabled and enabled
    only once the panel's module has taken the form over."""
    srv = dashboard_server(LONG_LINK, config="config/stewart-sim.toml")
    held: list = []
    dash = open_dashboard(srv, setup=lambda page: page.route("**/static/js/trajectory.js",
                                                                      lambda route: held.append(route)))
    page = dash.page
    while not held:  # the module's request, held back
        page.wait_for_timeout(20)
        assert page.evaluate("performance.now()") < 20000, "trajectory.js was never requested"
    run = page.locator("#trajectory-run")
    assert run.is_disabled()
    url = page.url
    page.focus("#trajectory-series")
    page.keyboard.press("Enter")  # implicit submission: blocked while the submit button is disabled
    run.click(force=True)
    assert page.url == url
    assert (srv.get("/api/trajectory")[1].get("run") or {}).get("phase") is None  # nothing was started
    held[0].continue_()
    page.wait_for_function("() => !document.querySelector('#trajectory-run').disabled")
    page.wait_for_function("() => !document.querySelector('[data-until-loaded]')")  # every panel's, in turn
    assert page.url == url
    assert not dash.console_errors()


def test_the_trajectory_runner_runs_a_series_and_shows_its_report(dashboard_server, open_dashboard) -> None:
    srv = dashboard_server({**LONG_LINK, "driver": {"time_scale": 4.0}}, config="config/stewart-sim.toml")
    dash = open_dashboard(srv)
    page = dash.page
    assert srv.post("/api/start")[0] == 200
    dash.wait_badge("running")
    page.select_option("#trajectory-series", "roll")
    page.click("#trajectory-run")
    page.wait_for_function("() => !document.querySelector('#trajectory-cancel').disabled")  # it runs
    page.wait_for_function("() => !document.querySelector('#trajectory-report').hidden", timeout=60000)
    row = page.locator('#trajectory-report tr[data-axis="roll_rad"]')
    assert row.count() == 1 and "°" in row.inner_text()
    page.wait_for_function("() => document.querySelector('#trajectory-plot').naturalWidth > 0")
    report = srv.get("/api/trajectory/report")[1]
    rms_deg = math.degrees(report["deviation"]["roll_rad"]["rms"])
    assert f"{rms_deg:.3f} °" in row.inner_text()
    dash.screenshot("arms-trajectory.png")
    assert not dash.console_errors()


def test_the_scara_demo_runs_from_the_page_and_its_faulhaber_program_downloads(dashboard_server,
                                                                             open_dashboard) -> None:
    """Issue 18: under login the Run button and the program link were refused (403 csrf_failed): nothing ran and
    the page said "no program for this motion"."""
    srv = dashboard_server({**LONG_LINK, "driver": {"time_scale": 4.0}}, config="config/scara-sim.toml")
    dash = open_dashboard(srv)
    page = dash.page
    page.click("#btn-start")  # from the page too: under login, it holds the lease
    dash.wait_badge("running")
    page.select_option("#trajectory-series", "scara_demo")
    page.click("#trajectory-run")
    page.wait_for_function("() => !document.querySelector('#trajectory-cancel').disabled")  # it runs
    page.wait_for_function("() => document.querySelector('#trajectory-phase').textContent.startsWith('scara_demo')")
    page.wait_for_function("() => !document.querySelector('#trajectory-report').hidden", timeout=60000)
    assert page.locator('#trajectory-report tr[data-axis="q1_rad"]').count() == 1
    with page.expect_download(timeout=30000) as download:
        page.click("#trajectory-program")
    assert download.value.suggested_filename == "faulhaber-scara_demo.txt"
    lines = Path(download.value.path()).read_text().split()
    assert lines[:2] == ["1SP" + lines[0][3:], "1AC" + lines[1][3:]] and "1M" in lines and "2M" in lines, lines[:12]
    page.wait_for_function("() => document.querySelector('#trajectory-status').textContent.includes('saved')")

    # a CSV file (sent as text/csv, with the token), cancelled; its program is the file's motion, not the series'
    page.select_option("#trajectory-series", "")
    # 60 s of motion (15 s at 4x): long enough that Cancel is still there when a loaded machine gets to it
    rows = "\n".join(f"{t:.1f},{0.3 * math.sin(t / 10):.4f},1.2" for t in range(61))
    page.set_input_files("#trajectory-file", files=[{"name": "sweep.csv", "mimeType": "text/csv",
                                                      "buffer": f"t_s,q1_rad,q2_rad\n{rows}\n".encode()}])
    page.click("#trajectory-run")
    page.wait_for_function("() => document.querySelector('#trajectory-status').textContent.startsWith('running upload')")
    page.wait_for_function("() => !document.querySelector('#trajectory-cancel').disabled")
    page.click("#trajectory-cancel")
    page.wait_for_function("() => document.querySelector('#trajectory-phase').textContent === 'upload: ended'")
    with page.expect_download(timeout=30000) as download:
        page.click("#trajectory-program")
    assert download.value.suggested_filename == "faulhaber-sweep.txt"
    assert Path(download.value.path()).read_text() != "\n".join(lines)
    assert not dash.console_errors()
