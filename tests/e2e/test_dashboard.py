"""The operator dashboard in real Chromium against the real server (python -m server).

Every wait has a deadline and waits for a condition; nothing sleeps and hopes.
Screenshots go to test-output/.
"""

from __future__ import annotations

import math

import pytest

from tests.e2e.modes import ADMIN

TABLET = {"width": 800, "height": 1280}

pytestmark = pytest.mark.e2e

LINK_LOSS_DEADLINE_S = 5.0   # 0.5 s link timeout + a controlled stop, with generous slack
# for tests about driving from the page, not about the watchdog (which has its own tests here and in
# tests/server/test_stop_paths.py): on a loaded machine a page's heartbeat can come later than the profile's
# 0.5 s and the link-loss stop would end the drive these tests watch
DRIVE_LINK = {"safety": {"command_timeout_s": 5.0}}


# ---------------------------------------------------------------------- helpers

def api(server, path: str):
    status, body = server.get(path)
    assert status == 200, (path, status, body)
    return body


def display_scale(spec: dict) -> float:
    return 180.0 / math.pi if spec.get("unit") == "rad" else 1.0


def widget_selectors(spec: dict) -> list[str]:
    """Where a channel is shown: a gauge card unless it is plot-only, a plot legend entry if plotted."""
    out = []
    if spec.get("widget") != "plot":
        out.append(".gauge")
    if spec.get("plot") or spec.get("widget") == "plot":
        out.append(".plot-series")
    return out


def displayed(dash, spec: dict) -> float | None:
    """The value a channel's widget shows, back in SI; None for "—"."""
    name = spec["name"]
    if spec.get("widget") == "plot":
        text = dash.widget_text(name, ".plot-series").split()
        text = [t for t in text if t.replace(".", "", 1).lstrip("-").isdigit() or t == "—"]
        raw = text[0] if text else "—"
    else:
        raw = dash.page.locator(f'.gauge[data-channel="{name}"] .gauge-value .v').inner_text().strip()
    if raw in ("—", ""):
        return None
    if raw in ("ON", "OFF"):
        return 1.0 if raw == "ON" else 0.0
    return float(raw) / display_scale(spec)

def widgets_follow(dash, server, robot: dict, wait_for) -> None:
    """Each channel's widget shows what /api/state says, within the channel's resolution (or both show none)."""
    for spec in robot["channels"]:
        tol = max(2 * 10 ** -int(spec.get("decimals", 2)), 0.02 * (spec["max"] - spec["min"]))

        def matches(spec=spec, tol=tol):
            shown = displayed(dash, spec)
            actual = server_state(server)["values"].get(spec["name"])
            if actual is None or shown is None:
                return shown is None and actual is None
            return abs(shown - actual) <= tol

        wait_for(matches, 10.0, f"the {spec['name']} widget to show the simulator's value")


def server_state(server) -> dict:
    return api(server, "/api/state")


def speed_text(dash) -> float:
    return float(dash.page.locator('.gauge[data-channel="linear_m_s"] .gauge-value .v').inner_text())


def assert_no_nonzero_speed(messages: list[dict]) -> None:
    bad = [m for m in messages if m["type"] in ("speed", "start")
           and (m["type"] == "start" or (m.get("linear") or 0) != 0 or (m.get("angular") or 0) != 0)]
    assert not bad, f"the page sent motion it was not asked for: {bad[:5]}"


def test_start_and_joystick_drag_drive_the_rover_and_release_stops_it(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server(DRIVE_LINK)
    dash = open_dashboard(server)
    dash.click_start()

    dash.press_joystick(0.0, 0.8)
    wait_for(lambda: server_state(server)["values"]["linear_m_s"] > 0.05, 5.0, "the rover to move forward")
    dash.page.wait_for_function(
        "() => parseFloat(document.querySelector('.gauge[data-channel=linear_m_s] .v').textContent) > 0.05")
    assert dash.page.locator("#joystick.held").count() == 1
    dash.page.wait_for_function("() => document.querySelector('#drive-source').textContent === 'joystick'")
    dash.screenshot("dashboard-driving.png")

    dash.release_mouse()
    wait_for(lambda: server_state(server)["setpoint"]["linear"] == 0.0, 5.0, "a zero setpoint after release")
    wait_for(lambda: abs(server_state(server)["values"]["linear_m_s"]) < 0.01, 5.0, "the rover to stop")
    dash.page.wait_for_function(
        "() => Math.abs(parseFloat(document.querySelector('.gauge[data-channel=linear_m_s] .v').textContent)) < 0.02")
    # released, the page keeps the link alive with heartbeats: the link's age falls back twice after the rover
    # came to rest (no setpoint is sent then), and the robot stays running
    renewals = []

    def renewed() -> bool:
        state = server_state(server)
        assert state["state"] == "running", state
        age = state["link"]["age_s"]
        if renewals and age < renewals[-1][0]:
            renewals.append((age, True))
        else:
            renewals.append((age, False))
        return sum(r for _, r in renewals) >= 2

    wait_for(renewed, 10.0, "two heartbeats from the page after release")
    assert dash.console_errors() == [], dash.console_errors()


def test_keyboard_drives_while_held(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server(DRIVE_LINK)
    dash = open_dashboard(server)
    dash.click_start()
    dash.page.locator("#joystick").focus()
    dash.page.keyboard.down("KeyW")
    wait_for(lambda: server_state(server)["values"]["linear_m_s"] > 0.05, 5.0, "W to drive forward")
    dash.page.keyboard.up("KeyW")
    wait_for(lambda: server_state(server)["setpoint"]["linear"] == 0.0, 5.0, "releasing W to command zero")
    dash.page.keyboard.down("ArrowLeft")
    wait_for(lambda: server_state(server)["setpoint"]["angular"] > 0.0, 5.0, "Left to turn left (positive yaw rate)")
    dash.page.keyboard.up("ArrowLeft")
    wait_for(lambda: server_state(server)["setpoint"]["angular"] == 0.0, 5.0, "releasing Left to command zero")


# ---------------------------------------------------------------------- tests

def test_page_loads_without_console_errors_and_every_channel_has_a_live_widget(dashboard_server, open_dashboard,
                                                                                wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    robot = api(server, "/api/robot")
    assert robot["channels"], "the profile has no channels"

    for spec in robot["channels"]:
        for sel in widget_selectors(spec):
            assert dash.page.locator(f'{sel}[data-channel="{spec["name"]}"]').count() == 1, \
                f"no {sel} widget for channel {spec['name']}"

    # each widget follows the simulator: what it shows matches /api/state within the channel's resolution
    widgets_follow(dash, server, robot, wait_for)

    # status: idle badge, connection figures filled in, events and acquisition loaded
    dash.wait_badge("idle")
    dash.page.wait_for_function("() => document.querySelector('#connection [data-field=rtt]').textContent.endsWith('ms')")
    assert dash.page.locator("#acq-channels input[type=checkbox]").count() == len(
        api(server, "/api/acquisition")["available"])
    assert dash.page.locator("#conn-banner").is_hidden()
    assert dash.page.locator("#estop-banner").is_hidden()

    # the panels are drawn at most every 100 ms (main.js RENDER_PERIOD_MS) whatever the telemetry rate: counted in
    # the page over 30 messages of an idle robot (no state change, so no render without the wait)
    seen = dash.js("""async () => {
        const s = window.teleop.stats, m0 = s.messages, r0 = s.renders, t0 = performance.now();
        while (s.messages < m0 + 30) await new Promise((resolve) => setTimeout(resolve, 20));
        return {messages: s.messages - m0, renders: s.renders - r0, ms: performance.now() - t0};
    }""")
    assert 1 <= seen["renders"] <= seen["ms"] / 100 + 2, seen

    # every control has an accessible name and can take keyboard focus
    unnamed = dash.js("""() => [...document.querySelectorAll('button, input, select, [role=application]')]
        .filter((el) => !(el.getAttribute('aria-label') || (el.labels && el.labels.length) || el.textContent.trim()))
        .map((el) => el.outerHTML.slice(0, 80))""")
    assert unnamed == [], unnamed
    assert dash.js("document.querySelector('#joystick').tabIndex") == 0
    if server.login:
        # an operator: the admin's settings say so on the page instead of being refused with a 403
        dash.lease_says(f"Signed in as {dash.user} (operator).")
        dash.page.wait_for_function("() => document.querySelector('#acq-status').textContent.includes('needs an admin')")
        assert dash.page.locator("#acq-apply").is_disabled()
        assert dash.page.locator("#magcal-button").is_disabled()
        assert "needs an admin" in dash.page.get_attribute("#magcal-button", "title")
    assert dash.console_errors() == [], dash.console_errors()


def test_estop_button_latches_and_reset_after_confirmation_clears_it(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    dash.click_start()
    dash.page.click("#estop")
    wait_for(lambda: server_state(server)["state"] == "estop", 5.0, "the E-STOP button to latch the e-stop")
    dash.wait_badge("estop")
    banner = dash.page.locator("#estop-banner")
    banner.wait_for(state="visible")
    cause = server_state(server)["cause"]
    assert cause["trigger"] in banner.inner_text()
    assert "E-STOP" in dash.page.locator("#state-badge").inner_text().upper()
    # the event log shows it too
    dash.page.locator(f"#events .event-trigger:text-is('{cause['trigger']}')").first.wait_for()

    dash.page.click("#btn-reset")
    dialog = dash.page.locator("#reset-dialog")
    dialog.wait_for(state="visible")
    assert server_state(server)["state"] == "estop", "opening the dialog must not reset"
    dash.page.click("#reset-cancel")
    dialog.wait_for(state="hidden")
    assert server_state(server)["state"] == "estop", "cancel must not reset"

    dash.page.click("#btn-reset")
    dash.page.click("#reset-confirm")
    wait_for(lambda: server_state(server)["state"] == "idle", 5.0, "the confirmed reset to clear the e-stop")
    dash.wait_badge("idle")
    banner.wait_for(state="hidden")
    dialog.wait_for(state="hidden")


def test_estop_goes_over_http_when_the_socket_cannot_carry_it(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    dash.click_start()
    # the socket cannot carry the e-stop (as if it had just died): the button's second path is POST /api/estop,
    # sent at once through api.js (under login with the page's token, which the teardown checks). Heartbeats still
    # go: with none, the link-loss stop (0.5 s) latched first on a loaded machine, and the cause was not the button's
    dash.js("""() => { const s = window.teleop.session, send = s.send.bind(s);
                       s.send = (msg) => msg.type === "estop" ? false : send(msg); }""")
    dash.page.click("#estop")
    wait_for(lambda: server_state(server)["state"] == "estop", 5.0, "the HTTP e-stop to latch")
    # the e-stop latches before its body is read; the reason follows (server/gateway/commands.py, note_reason)
    wait_for(lambda: "dashboard E-STOP button" in server_state(server)["cause"]["message"], 10.0,
             "the e-stop's reason noted")
    sent = [r for r in dash.sent if r["method"] == "POST" and r["path"] == "/api/estop"]
    assert len(sent) == 1 and (sent[0]["csrf"] != "") == server.login, sent
    assert dash.page.locator("#command-error").is_hidden()


def test_space_key_latches_estop_even_with_a_button_focused(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    dash.click_start()
    dash.page.wait_for_function("() => !document.querySelector('#btn-stop').disabled")
    dash.page.locator("#btn-stop").focus()   # Space must not "click" Stop (a controlled stop)
    dash.page.keyboard.press("Space")
    wait_for(lambda: server_state(server)["state"] == "estop", 5.0, "Space to latch the e-stop")
    assert server_state(server)["cause"]["category"] == 0
    dash.page.locator("#estop-banner").wait_for(state="visible")


def test_reset_refused_while_the_cause_persists_shows_why(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    dash.click_start()
    status, body = server.post("/api/debug/driver", json={"battery_v": 10.0})
    assert status == 200, body
    wait_for(lambda: server_state(server)["state"] == "estop", 5.0, "a flat battery to e-stop the rover")
    dash.page.locator("#estop-banner").wait_for(state="visible")
    assert "battery" in dash.page.locator("#estop-banner").inner_text().lower()
    # the battery gauge is in its critical zone (crit_low 10.5 V)
    dash.page.locator('.gauge[data-channel="battery_v"].zone-crit').wait_for()

    dash.page.click("#btn-reset")
    dash.page.click("#reset-confirm")
    err = dash.page.locator("#reset-error")
    err.wait_for(state="visible")
    status, refused = server.post("/api/reset")
    assert status == 409, refused
    assert refused["error"]["code"] in err.inner_text()
    assert server_state(server)["state"] == "estop"
    dash.page.locator("#command-error").wait_for(state="visible")

    status, body = server.post("/api/debug/driver", json={"battery_v": None})
    assert status == 200, body
    # confirm again once the cause is gone
    dash.page.click("#reset-confirm")
    wait_for(lambda: server_state(server)["state"] == "idle", 5.0, "reset to succeed once the battery recovers")
    dash.page.locator("#reset-dialog").wait_for(state="hidden")


def _drive(dash, server, wait_for):
    dash.click_start()
    dash.press_joystick(0.0, 0.8)
    wait_for(lambda: server_state(server)["values"]["linear_m_s"] > 0.05, 5.0, "the rover to move")


def _stopped_by_link_loss(server) -> bool:
    s = server_state(server)
    if s["state"] == "estop":
        return s["cause"]["trigger"] == "link_loss"
    return s["setpoint"]["linear"] == 0.0 and abs(s["values"]["linear_m_s"]) < 0.01


def test_hiding_the_tab_while_driving_stops_the_rover(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    _drive(dash, server, wait_for)
    epoch = dash.epoch()
    # Headless Chromium keeps every page "visible", so emulate the tab switch the way the
    # browser reports it: visibilityState becomes "hidden" and visibilitychange fires.
    # The page's own clock stamps the moment, so a 20 Hz speed command that left just
    # before it is not counted as sent after it.
    hidden_at = dash.js("""() => {
        const t = performance.timeOrigin + performance.now();
        Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
        document.dispatchEvent(new Event('visibilitychange'));
        return t;
    }""")
    wait_for(lambda: _stopped_by_link_loss(server), LINK_LOSS_DEADLINE_S, "the rover to stop after the tab is hidden")
    wait_for(lambda: server_state(server)["state"] == "estop", LINK_LOSS_DEADLINE_S,
             "the link-loss e-stop (the hidden page sends no heartbeats)")
    assert server_state(server)["cause"]["trigger"] == "link_loss"
    after = [m for m in dash.sent_since(epoch) if m["t"] >= hidden_at]
    # exactly one zero speed, then silence (the mouse is still down on the joystick)
    assert [m["type"] for m in after] == ["speed"], after
    assert after[0]["linear"] == 0 and after[0]["angular"] == 0


def test_window_losing_focus_while_driving_stops_the_rover(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    _drive(dash, server, wait_for)
    # a real blur: stop emulating focus for every page, then bring another page to the front
    cdp = dash.context.new_cdp_session(dash.page)
    cdp.send("Emulation.setFocusEmulationEnabled", {"enabled": False})
    other = dash.context.new_page()
    other.bring_to_front()
    dash.page.wait_for_function("() => !document.hasFocus()")
    wait_for(lambda: server_state(server)["state"] == "estop", LINK_LOSS_DEADLINE_S,
             "the link-loss stop after the window lost focus")
    assert server_state(server)["cause"]["trigger"] == "link_loss"
    dash.page.wait_for_function("() => document.querySelector('#drive-hint').textContent.includes('not focused')")


def test_closing_the_page_while_driving_stops_the_rover(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    _drive(dash, server, wait_for)
    dash.page.close(run_before_unload=True)
    wait_for(lambda: _stopped_by_link_loss(server), LINK_LOSS_DEADLINE_S, "the rover to stop after the page closed")
    wait_for(lambda: server_state(server)["state"] == "estop", LINK_LOSS_DEADLINE_S, "the link-loss e-stop")
    assert server_state(server)["cause"]["trigger"] == "link_loss"


def test_acquisition_panel_applies_settings_and_shows_server_validation(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server, user=ADMIN)  # acquisition is an admin's setting (docs/security.md)
    page = dash.page
    acq = api(server, "/api/acquisition")
    page.wait_for_function("() => document.querySelectorAll('#acq-channels input').length > 0")

    page.fill("#acq-rate", str(acq["max_rate_hz"] * 10))
    page.click("#acq-apply")
    err = page.locator("#acq-error")
    err.wait_for(state="visible")
    assert "rate_hz" in err.inner_text()
    assert page.get_attribute("#acq-rate", "aria-invalid") == "true"
    assert api(server, "/api/acquisition")["rate_hz"] == acq["rate_hz"], "a refused setting changes nothing"

    page.fill("#acq-rate", "50")
    page.click("#acq-apply")
    err.wait_for(state="hidden")
    wait_for(lambda: api(server, "/api/acquisition")["rate_hz"] == 50.0, 5.0, "the new rate to be applied")
    page.wait_for_function("() => document.querySelector('#acq-status').textContent.startsWith('applied')")


def test_tablet_layout_fits_and_touch_drives(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server, viewport=TABLET, has_touch=True)
    page = dash.page
    assert page.evaluate("document.documentElement.scrollWidth") <= TABLET["width"], "horizontal scrolling on a tablet"
    box = page.locator("#estop").bounding_box()
    assert box and box["y"] + box["height"] <= TABLET["height"] and box["x"] + box["width"] <= TABLET["width"]
    assert box["width"] >= 44 and box["height"] >= 44, "E-STOP too small to hit with a finger"

    dash.page.click("#btn-start")
    dash.wait_badge("running")
    cx, cy, r = dash.joystick_center()
    cdp = dash.context.new_cdp_session(page)

    def touch(kind: str, x: float, y: float) -> None:
        points = [] if kind == "touchEnd" else [{"x": x, "y": y, "id": 1}]
        cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})

    touch("touchStart", cx, cy)
    for i in range(1, 6):
        touch("touchMove", cx, cy - r * 0.12 * i)
    wait_for(lambda: server_state(server)["values"]["linear_m_s"] > 0.05, 5.0, "a touch drag to drive")
    dash.screenshot("dashboard-tablet.png", full_page=False)
    touch("touchEnd", 0, 0)
    wait_for(lambda: server_state(server)["setpoint"]["linear"] == 0.0, 5.0, "lifting the finger to command zero")
    assert dash.console_errors() == [], dash.console_errors()


def test_gamepad_stick_drives_and_button_1_latches_estop(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    dash.click_start()
    # Headless Chromium has no gamepads: stand one in for navigator.getGamepads(), as the
    # Gamepad API would report it, and announce it with the real event name.
    dash.js("""() => {
        const pad = { connected: true, index: 0, id: 'test pad', mapping: 'standard',
                      axes: [0, 0, 0, 0], buttons: Array.from({length: 17}, () => ({pressed: false, value: 0})) };
        window.__pad = pad;
        navigator.getGamepads = () => [pad];
        window.dispatchEvent(new Event('gamepadconnected'));
    }""")
    dash.js("() => { window.__pad.axes[1] = -0.8; }")          # stick forward
    wait_for(lambda: server_state(server)["values"]["linear_m_s"] > 0.05, 5.0, "the stick to drive forward")
    dash.page.wait_for_function("() => document.querySelector('#drive-source').textContent === 'gamepad'")
    dash.js("() => { window.__pad.axes[1] = 0.05; }")          # back inside the dead zone
    wait_for(lambda: server_state(server)["setpoint"]["linear"] == 0.0, 5.0, "a centred stick to command zero")
    dash.js("() => { window.__pad.buttons[1] = {pressed: true, value: 1}; }")
    wait_for(lambda: server_state(server)["state"] == "estop", 5.0, "gamepad button 1 to latch the e-stop")


# Below: the tests with a configuration of their own, after those that share the module's server (one shared server
# runs at a time, so a configuration that comes back after another is a new start).
def test_a_page_whose_link_went_while_driving_sends_zero_first_and_one_that_was_watching_sends_nothing(
        dashboard_server, open_dashboard, wait_for):
    server = dashboard_server({"safety": {"command_timeout_s": 10.0, "governor": {"enabled": False}}})
    watcher = open_dashboard(server, take_lease=False)  # a second page, only watching
    dash = open_dashboard(server)
    _drive(dash, server, wait_for)  # the mouse stays down on the joystick
    for page in (dash, watcher):
        epoch = page.epoch()
        page.js("() => window.teleop.session.ws.close()")  # the link goes; the page reconnects by itself
        page.wait_connected(epoch + 1)
    assert server_state(server)["state"] == "running"  # the long timeout: no link-loss stop in between
    driver_sent = [m for m in dash.sent_since(dash.epoch()) if m["type"] in ("speed", "heartbeat")]  # commands
    assert driver_sent and driver_sent[0]["type"] == "speed", driver_sent
    assert driver_sent[0]["linear"] == 0 and driver_sent[0]["angular"] == 0, driver_sent
    wait_for(lambda: server_state(server)["setpoint"]["linear"] == 0.0, 5.0, "the zero speed in force")
    assert [m for m in watcher.sent_since(1) if m["type"] == "speed"] == [], watcher.sent_since(1)


def test_server_restart_page_reconnects_and_does_not_move_the_robot(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server(fresh=True)   # it is killed
    dash = open_dashboard(server)
    _drive(dash, server, wait_for)          # the mouse stays down on the joystick throughout

    server.kill()
    dash.page.locator("#conn-banner").wait_for(state="visible", timeout=10000)
    dash.page.wait_for_function("() => document.body.classList.contains('disconnected')")
    dash.page.wait_for_function("() => document.querySelector('#gauges-panel').classList.contains('stale')")
    dash.page.wait_for_function("() => !document.querySelector('#joystick').classList.contains('held')")
    assert dash.page.locator("#btn-start").is_disabled()

    server.restart()
    if server.login:
        # sessions and the lease live in the gateway's memory (docs/security.md): the page goes to the
        # login page; logged in again, the operator takes the lease again and grabs the joystick again
        # while the robot is idle (the press must not carry over when it starts)
        dash.page.wait_for_url(server.url + "/login?next=**", timeout=30000)
        dash.log_in()
        dash.take_lease()
        epoch = dash.epoch()
        dash.press_joystick(0.0, 0.8)
    else:
        epoch = dash.wait_connected(min_epoch=2, timeout_s=30)
    dash.page.locator("#conn-banner").wait_for(state="hidden")
    dash.wait_badge("idle")
    s = server_state(server)
    assert s["state"] == "idle" and s["setpoint"] == {"linear": 0.0, "angular": 0.0, "source": None}

    # Someone starts the robot over HTTP; the page, still with the mouse held down on the
    # joystick, heartbeats (it is visible and focused) but must not resume driving.
    status, body = server.post("/api/start")
    assert status == 200, body
    dash.move_mouse_by(10, -60)
    wait_for(lambda: sum(m["type"] == "heartbeat" for m in dash.sent_since(epoch)) >= 10, 10.0,
             "the reconnected page to heartbeat the running robot")
    dash.move_mouse_by(-10, -50)
    wait_for(lambda: sum(m["type"] == "heartbeat" for m in dash.sent_since(epoch)) >= 15, 10.0, "more heartbeats")
    assert_no_nonzero_speed(dash.sent_since(epoch))
    s = server_state(server)
    assert s["state"] == "running" and s["setpoint"] == {"linear": 0.0, "angular": 0.0, "source": None}
    assert abs(s["values"]["linear_m_s"]) < 0.01

    # acting again works: release, press again
    dash.release_mouse()
    dash.press_joystick(0.0, 0.8)
    wait_for(lambda: server_state(server)["values"]["linear_m_s"] > 0.05, 15.0, "a fresh press to drive")
    dash.release_mouse()
