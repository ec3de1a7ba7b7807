"""The dashboard subscribes to what it shows (issue 20 §5), delta-encoded, and its gauges and plots still follow
the simulator. Real Chromium, real server, local and logged-in modes."""

from __future__ import annotations

import pytest

from tests.e2e.test_dashboard import api, widgets_follow

pytestmark = pytest.mark.e2e


def test_dashboard_subscribes_and_its_gauges_and_plots_follow_the_delta_stream(dashboard_server, open_dashboard,
                                                                                wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    robot = api(server, "/api/robot")
    names = sorted(c["name"] for c in robot["channels"])

    # it subscribed: the server shows its channel set, rate and encoding
    wait_for(lambda: dash.js("() => window.teleop.session.subscribed !== null"), 20.0, "the subscription's ack")

    def mine():
        status, body = server.as_admin("GET", "/api/telemetry")  # an admin's diagnostics
        assert status == 200, body
        clients = body["per_client"]
        subs = [c for c in clients if c["subscription"] is not None]
        return subs[0] if len(subs) == 1 else None

    entry = wait_for(mine, 10.0, "the dashboard's subscription in GET /api/telemetry")
    sub = entry["subscription"]
    assert sub["channels"] == names and sub["fields"] == "*" and sub["encoding"] == "delta", sub
    assert sub["rate_hz"] == min(20, robot["telemetry_rate_hz"])
    wait_for(lambda: dash.js("() => window.teleop.session.deltas.patches") > 20, 20.0, "deltas applied")
    assert dash.js("() => window.teleop.session.deltas.orphans") == 0
    assert dash.js("() => window.teleop.session.deltas.keyframes") >= 1

    # the gauges and the plots' legends follow the simulator through the rebuilt snapshots
    widgets_follow(dash, server, robot, wait_for)
    seq0 = dash.js("() => window.teleop.session.latest.seq")
    wait_for(lambda: dash.js("() => window.teleop.session.latest.seq") > seq0 + 10, 10.0, "new snapshots")
    latest = dash.js("() => window.teleop.session.latest")
    assert set(latest["values"]) == set(names) and {"loop", "link", "state", "t"} <= set(latest)

    # the user plots other channels: the plots rebuild with them and their values arrive
    dash.js("() => window.teleop.plots.setChannels(['battery_v', 'current_left_a'])")
    assert dash.page.locator(".plot-series").count() == 2
    wait_for(lambda: dash.widget_text("battery_v", ".plot-series").split()[-2] not in ("—",), 10.0,
             "the new plot's value")
    assert set(mine()["subscription"]["channels"]) >= {"battery_v", "current_left_a"}
    assert dash.console_errors() == [], dash.console_errors()


def test_the_operator_chooses_the_plotted_channels_and_the_choice_is_kept(dashboard_server, open_dashboard, wait_for):
    server = dashboard_server()
    dash = open_dashboard(server)
    page = dash.page
    page.locator("#plot-pick summary").click()
    boxes = page.locator("#plot-pick-list input[type=checkbox]")
    boxes.first.wait_for(timeout=20000)
    default = sorted(dash.js("() => window.teleop.plots.channels()"))
    assert default and sorted(b.get_attribute("value") for b in boxes.all() if b.is_checked()) == default
    extra = next(b.get_attribute("value") for b in boxes.all() if not b.is_checked())
    page.locator(f'#plot-pick-list input[value="{extra}"]').check()
    page.locator(f'#plot-pick-list input[value="{default[0]}"]').uncheck()
    chosen = sorted({*default[1:], extra})
    assert sorted(dash.js("() => window.teleop.plots.channels()")) == chosen
    wait_for(lambda: dash.widget_text(extra, ".plot-series").split()[-1] not in ("—",), 10.0,
             "the newly plotted channel's value")
    # more than 16 lines are refused with a note, the charts unchanged
    for b in boxes.all():
        if len(dash.js("() => window.teleop.plots.channels()")) >= 16:
            break
        if not b.is_checked():
            b.check()
    full = sorted(dash.js("() => window.teleop.plots.channels()"))
    spare = [b for b in boxes.all() if not b.is_checked()]
    assert len(full) == 16 and spare, (full, len(spare))  # the rover has more channels than that
    spare[0].click()
    assert not spare[0].is_checked() and "At most 16" in page.inner_text("#plot-pick-note")
    assert sorted(dash.js("() => window.teleop.plots.channels()")) == full
    # the choice is kept across a reload (per robot profile), and "Robot's default" goes back
    page.reload()
    page.wait_for_function("n => window.teleop && window.teleop.plots.channels().length === n", arg=len(full),
                           timeout=20000)
    assert sorted(dash.js("() => window.teleop.plots.channels()")) == full
    page.locator("#plot-pick summary").click()
    page.locator("#plot-pick-reset").click()
    assert sorted(dash.js("() => window.teleop.plots.channels()")) == default
    page.reload()
    page.wait_for_function("() => window.teleop && window.teleop.plots.channels().length > 0", timeout=20000)
    assert sorted(dash.js("() => window.teleop.plots.channels()")) == default
    assert dash.console_errors() == [], dash.console_errors()
