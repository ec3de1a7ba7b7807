"""The video endpoints and the navigation panel in real Chromium against the real server."""

from __future__ import annotations

import pytest

from tests.e2e.clocks import WallClockStepper

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

VIDEO = {"video": {"enabled": True, "width": 320, "height": 240, "fps": 15}}


def test_mjpeg_renders_in_a_plain_img(server_factory, browser, wait_for) -> None:
    srv = server_factory(VIDEO)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(srv.url + "/login")  # a page of the server's own origin: a foreign one may not embed it
        page.set_content(f'<img id="cam" src="{srv.url}/video.mjpeg" alt="camera">')
        page.wait_for_function("() => document.getElementById('cam').naturalWidth > 0", timeout=15000)
        size = page.evaluate("() => [document.getElementById('cam').naturalWidth, document.getElementById('cam').naturalHeight]")
        assert size == [320, 240]
    finally:
        context.close()


def test_video_panel_streams_and_shows_fps_and_latency(dashboard_server, open_dashboard, wait_for) -> None:
    """With the server's wall clock stepped an hour at every pong (WallClockStepper), as an NTP step would: the
    picture's age is on the robot's monotonic clock (the frame's ``mono_t`` or the strip in the picture, against
    the pong's ``server_mono``), so it stays a fraction of a second, never hours."""
    srv = dashboard_server(VIDEO)
    stepper = WallClockStepper()
    dash = open_dashboard(srv, setup=stepper.setup)
    stepper.tolerate(dash)
    page = dash.page
    # the panel picks its transport by itself (WebRTC, then H.264 over the websocket, then JPEG: docs/video.md);
    # whichever it took, ten decoded frames are shown (WebRTC's size is its tier's: docs/video.md)
    page.wait_for_function(
        "() => { const v = window.teleopVideo; if (!v) return false; const s = v.stats();"
        " return ['webrtc', 'h264', 'jpeg'].includes(s.transport) && s.frames >= 10 && s.width > 0; }",
        timeout=45000)
    # and the server counts this page among its viewers
    # (each poll pumps Playwright: the proxy forwards the server's messages only then, and a page that hears
    # nothing for 3 s closes its socket)
    wait_for(lambda: page.wait_for_timeout(50) or len(srv.get("/api/video")[1]["clients"]) >= 1, 15,
             "the page listed as a viewer")
    overlay = page.inner_text("#video-panel")
    assert "fps" in overlay and "ms" in overlay
    stepper.wait_steps(page, 3, wait_for)
    ages = []
    for _ in range(10):  # across pongs and their steps
        page.wait_for_function("() => Number.isFinite(window.teleopVideo.stats().latencyMs)", timeout=30000)
        ages.append(page.evaluate("() => window.teleopVideo.stats().latencyMs"))
        page.wait_for_timeout(200)
    assert all(-1_000 < a < 30_000 for a in ages), f"picture ages {ages} ms: from wall-clock stamps"
    assert not dash.console_errors()


def test_the_first_picture_after_a_reconnect_is_marked(dashboard_server, open_dashboard) -> None:
    """Issue 20 §4: the dashboard's socket drops and comes back; the video restarts, and its first picture says
    it is one (the scene may have jumped), for 2 s. An observer records what the panel showed."""
    srv = dashboard_server(VIDEO)
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_function("() => window.teleopVideo && window.teleopVideo.stats().frames >= 10", timeout=45000)
    assert page.is_hidden(".vp-reconnected")  # the first picture of all is not a reconnect
    page.evaluate("""() => {
        const el = document.querySelector('.vp-reconnected');
        window.__marks = [];
        new MutationObserver(() => { if (!el.hidden) window.__marks.push(el.textContent); })
            .observe(el, {attributes: true, childList: true, characterData: true, subtree: true});
        window.__epoch = window.teleop.session.epoch;
        window.teleop.session.ws.close();
    }""")
    page.wait_for_function("() => window.teleop.session.epoch > window.__epoch", timeout=45000)  # a new hello
    page.wait_for_function("() => window.__marks.length > 0", timeout=45000)
    marks = page.evaluate("() => window.__marks")
    assert all(m.startswith("RECONNECTED · new picture") for m in marks), marks
    assert page.evaluate("() => window.teleopVideo.stats().reconnectMarks") == 1
    page.wait_for_function("() => document.querySelector('.vp-reconnected').hidden", timeout=30000)  # for a while


def test_navigation_panel_follows_the_estimator(dashboard_server, open_dashboard, wait_for) -> None:
    # the heading behaviour runs on the page's heartbeats; not a watchdog test: a late heartbeat on a loaded
    # machine must not end the run before the form is checked (the profile's 0.5 s did once)
    srv = dashboard_server({"safety": {"command_timeout_s": 5.0}})
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_selector("#navigation-panel .nav-compass")
    robot = srv.get("/api/robot")[1]
    assert page.locator("#navigation-panel .nav-map .anchor").count() == len(robot["uwb"]["anchors"]) == 4
    heading = srv.state()["values"]["heading_deg"]
    page.wait_for_function(
        "h => { const t = document.querySelector('.nav-compass .nav-readout.big'); "
        "return t && Math.abs(parseFloat(t.textContent) - h) < 3; }", arg=heading, timeout=10000)
    assert page.locator("#navigation-panel .nav-map .estimate").get_attribute("visibility") == "visible"
    # the heading form reports the server's refusal inline (the robot is idle)
    page.fill("#heading-input", "180")
    page.click("#heading-form button[type=submit]")
    page.wait_for_function("() => document.getElementById('nav-status').classList.contains('error')")
    assert "not_running" in page.inner_text("#nav-status")
    # once running, the command is accepted and the compass shows the target
    assert srv.post("/api/start")[0] == 200
    page.click("#heading-form button[type=submit]")
    wait_for(lambda: (srv.state().get("behavior") or {}).get("name") == "heading", 10, "heading behaviour running")
    page.wait_for_function("() => document.querySelector('.nav-compass .target').getAttribute('visibility') === 'visible'")
    srv.post("/api/estop")
    # Chromium logs the refused request we provoked above as a network error; nothing else may appear
    unexpected = [c for c in dash.console_errors() if not (c[2].endswith("/api/heading") and "409" in c[1])]
    assert not unexpected, unexpected
