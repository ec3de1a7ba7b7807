"""Replay mode in real Chromium: ``python -m server replay FILE`` drives the same dashboard from a
recording of a real run; gauges move, the command controls are disabled and refused, and the REPLAY
banner plays, pauses, seeks and changes speed. In local mode and logged in as an operator."""

from __future__ import annotations

import pytest

from tests.conftest import DEFAULT_CONFIG
from tests.e2e.modes import E2EReplay, write_config
from tests.server.gateway.recording.real_run import record_driven_run

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SPEED = ".gauge[data-channel=linear_m_s] .v"


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return record_driven_run(tmp_path_factory.mktemp("run"), drive_s=6.0)


@pytest.fixture
def replay(recording, tmp_path, mode):
    """The replay, in local mode or with users (conftest.py's ``mode``)."""
    proc = E2EReplay(recording, write_config(tmp_path, "replay", mode, {}, DEFAULT_CONFIG), "--paused")
    proc.set_mode(mode)
    proc.start()
    yield proc
    proc.kill()


def speed_text(dash) -> str:
    return dash.page.locator(SPEED).inner_text()


def test_replay_drives_the_dashboard_and_refuses_commands(replay, recording, open_dashboard, wait_for):
    dash = open_dashboard(replay)
    page = dash.page
    banner = page.locator("#replay-banner")
    banner.wait_for(state="visible")
    # the banner shows before the first replay status fills it ("—", 0:00 / 0:00 on a loaded machine)
    page.wait_for_function("(name) => document.querySelector('#replay-banner').innerText.includes(name)",
                           arg=recording.name)
    assert "REPLAY" in banner.inner_text()
    page.wait_for_function("() => document.body.classList.contains('replay-mode')")
    for sel in ("#btn-start", "#btn-stop", "#btn-reset", "#estop", "#acq-apply"):
        assert page.locator(sel).is_disabled(), sel
    assert page.evaluate("() => document.querySelector('#joystick').inert")

    # play from the start: the recorded drive moves the speed gauge, then the e-stop shows
    page.click("#replay-play")
    page.wait_for_function(f"() => parseFloat(document.querySelector('{SPEED}').textContent) > 0.1", timeout=20000)
    dash.wait_badge("running", 20)
    dash.wait_badge("estop", 30)
    page.wait_for_function("() => document.querySelector('#events').textContent.includes('→ estop')")

    # pause: the button says so and the server's clock stops
    page.click("#replay-play")
    wait_for(lambda: not replay.get("/api/replay")[1]["playing"], 10, "paused")
    page.wait_for_function("() => document.querySelector('#replay-play').textContent.startsWith('Play')")
    at = replay.get("/api/replay")[1]["position_t"]
    assert replay.get("/api/replay")[1]["position_t"] == at

    # the page cannot command the robot: the server says so too
    # (with the page's CSRF token, as the page would send it: the replay refuses it, not the trust layer)
    reply = page.evaluate("""async () => {
        const token = document.querySelector('meta[name="csrf-token"]').content;
        const r = await fetch('/api/start', {method: 'POST', headers: {'X-CSRF-Token': token}});
        return [r.status, (await r.json()).error.code]; }""")
    assert reply == [409, "replay"]
    res = page.evaluate("() => window.teleop.session.command('start')")
    assert res["ok"] is False and res["error"]["code"] == "replay"
    assert not dash.console_errors() or all("409" in c[1] for c in dash.console_errors())


def test_seek_and_speed_from_the_banner(replay, open_dashboard, wait_for):
    dash = open_dashboard(replay)
    page = dash.page
    page.locator("#replay-banner").wait_for(state="visible")
    st = replay.get("/api/replay")[1]
    # seek to the middle with the slider: the page reloads at the new position
    # (wait for that reload itself: a wait on the old page can pass just before it goes away)
    with page.expect_navigation(timeout=15000):
        page.evaluate("""() => { const s = document.querySelector('#replay-seek'); s.value = '500';
                                 s.dispatchEvent(new Event('input')); s.dispatchEvent(new Event('change')); }""")
    wait_for(lambda: abs(replay.get("/api/replay")[1]["position_t"] - (st["start_t"] + st["duration_s"] / 2)) < 0.2,
             10, "the replay at the middle")
    page.wait_for_load_state()
    dash.wait_connected(1)
    page.wait_for_function("(t) => window.teleop.session.latest && Math.abs(window.teleop.session.latest.t - t) < 0.2",
                           arg=st["start_t"] + st["duration_s"] / 2, timeout=10000)
    readout = page.locator("#replay-banner [data-field=time]").inner_text()
    mid = int(st["duration_s"] / 2)
    assert readout.startswith(f"0:{mid:02d}") or readout.startswith(f"0:{mid - 1:02d}"), readout
    # speed
    page.select_option("#replay-speed", "5")
    wait_for(lambda: replay.get("/api/replay")[1]["speed"] == 5.0, 10, "5x")
