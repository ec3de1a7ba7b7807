"""Vision on the dashboard, in real Chromium against the real server: the marker overlay drawn over the
video from the pipeline's results (and its switch), the markers and the marker fix on the map, and the
go-to-marker form with the server's refusals."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# sensor_stale_s: on a loaded machine (two cores, a browser, other suites) the pipeline's results can age past
# the profile's 0.5 s, and go_to_marker then answers `unavailable` (stale vision) before any refusal these
# tests are about; nothing here tests the staleness limit itself. command_timeout_s: the approach runs on the
# page's heartbeats, and a late one on a loaded machine stopped it by link loss (nor is the watchdog tested here)
VISION = {"video": {"enabled": True, "fps": 10}, "vision": {"enabled": True},
          "safety": {"sensor_stale_s": 2.0, "command_timeout_s": 5.0}}
MARKER_0 = "#video-panel .vp-vision g.vp-marker[data-id='0']:not([display])"


def points(text: str) -> list[tuple[float, float]]:
    return [tuple(float(v) for v in p.split(",")) for p in text.split()]


def test_marker_overlay_is_drawn_over_the_video_and_can_be_switched_off(dashboard_server, open_dashboard,
                                                                        wait_for) -> None:
    srv = dashboard_server(VISION)
    wait_for(lambda: (srv.get("/api/vision")[1].get("latest") or {}).get("markers"), 30, "a marker in view")
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_selector(MARKER_0, timeout=20000)
    assert page.get_attribute("#video-panel .vp-switch", "aria-pressed") == "true"
    assert page.locator("#video-panel .vp-vision").get_attribute("viewBox") == "0 0 640 480"
    # the outline is the pipeline's own corners (the rover is idle: every frame sees the same ones)
    latest = srv.get("/api/vision")[1]["latest"]["markers"][0]
    drawn = points(page.get_attribute(MARKER_0 + " polygon", "points"))
    assert len(drawn) == 4
    assert all(abs(a - b) < 1.5 for p, q in zip(drawn, latest["corners"]) for a, b in zip(p, q)), (drawn, latest)
    assert page.locator(MARKER_0 + " line").count() == 3  # its axes
    assert page.text_content(MARKER_0 + " text").startswith("0 · ")
    assert wait_for(lambda: srv.get("/api/vision")[1]["overlay_clients"] == 1, 10, "the page's overlay socket")
    # the switch closes the socket and hides the drawing; on again, it comes back
    page.click("#video-panel .vp-switch")
    assert page.get_attribute("#video-panel .vp-switch", "aria-pressed") == "false"
    page.wait_for_function("() => document.querySelector('#video-panel svg.vp-vision').hidden")
    wait_for(lambda: srv.get("/api/vision")[1]["overlay_clients"] == 0, 10, "the overlay socket closed")
    page.click("#video-panel .vp-switch")
    page.wait_for_function("() => !document.querySelector('#video-panel svg.vp-vision').hidden", timeout=15000)
    # the choice is remembered across a reload
    page.click("#video-panel .vp-switch")
    page.reload()
    dash.wait_connected()
    page.wait_for_selector("#video-panel .vp-switch:not([hidden])", timeout=15000)
    assert page.get_attribute("#video-panel .vp-switch", "aria-pressed") == "false"
    assert not dash.console_errors()


def test_the_map_shows_the_markers_in_view_and_the_marker_fix(dashboard_server, open_dashboard, wait_for) -> None:
    srv = dashboard_server(VISION)
    wait_for(lambda: (srv.state().get("estimation") or {}).get("marker_fix"), 30, "a marker fix")
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_selector("#navigation-panel .nav-map g.marker[data-id='0']")
    assert page.locator("#navigation-panel .nav-map g.marker").count() == 6
    page.wait_for_selector("#navigation-panel .nav-map g.marker.in-view[data-id='0']", timeout=15000)
    assert page.locator("#navigation-panel .nav-map g.marker.in-view").count() == 1  # only marker 0 ahead
    page.wait_for_function(
        "() => document.querySelector('#navigation-panel .marker-fix').getAttribute('visibility') === 'visible'",
        timeout=15000)
    fix = srv.state()["estimation"]["marker_fix"]
    transform = page.get_attribute("#navigation-panel .marker-fix", "transform")
    x, y = (float(v) for v in transform[len("translate("):-1].split())
    assert abs(x - fix["x_m"]) < 0.3 and abs(y - fix["y_m"]) < 0.3
    assert not dash.console_errors()


def test_go_to_marker_form_reports_refusals_and_starts_the_approach(dashboard_server, open_dashboard, wait_for) -> None:
    srv = dashboard_server(VISION)
    wait_for(lambda: (srv.state().get("external") or {}).get("vision", {}).get("fresh"), 30, "vision")
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_selector("#marker-form")
    assert page.locator("#marker-select option").count() == 7  # nearest + the six of the map
    page.click("#marker-form button[type=submit]")
    page.wait_for_function("() => document.getElementById('nav-status').classList.contains('error')")
    assert "not_running" in page.inner_text("#nav-status")
    assert srv.post("/api/start")[0] == 200
    page.select_option("#marker-select", "2")  # the west wall, behind the rover
    page.click("#marker-form button[type=submit]")
    page.wait_for_function("() => document.getElementById('nav-status').textContent.includes('not_in_view')")
    page.select_option("#marker-select", "0")
    page.fill("#marker-standoff", "2.5")
    page.click("#marker-form button[type=submit]")
    # the form's answer, soon replaced by the behaviour's progress from telemetry ("go_to_marker 0 %")
    page.wait_for_function("() => /driving to marker 0|go_to_marker/.test(document.getElementById('nav-status')"
                           ".textContent)")
    wait_for(lambda: (srv.state().get("behavior") or {}).get("name") == "go_to_marker"
             or any(e["trigger"] == "behavior_end" for e in srv.get("/api/events?limit=50")[1]["events"]),
             10, "the approach started")
    # Chromium logs each refused request (the 409s above) as a failed resource; nothing else may be an error
    assert not [c for c in dash.console_errors() if "/api/go_to_marker" not in c[2]]
