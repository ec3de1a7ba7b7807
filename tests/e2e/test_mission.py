"""The mission editor and the experiments panel in real Chromium, on the real server (issue 23).

Editing on the map (click to add, drag, right-click to delete), save and load as JSON and CSV; a
mission run in the simulator to its end with its per-leg results; pause, resume and cancel from the
page; a failed mission's reason; a viewer offered no run and refused by the server; an experiment run
from its panel with ours beside the paper's. In local mode and logged in as an operator holding the lease (``modes.py``).
"""

from __future__ import annotations

import json
import math

import pytest

from tests.e2e.modes import VIEWER

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

MAP = "#navigation-panel .nav-map"
# the page's 10 Hz heartbeat keeps a mission alive; on two loaded cores Chromium's timers have stalled past the
# 0.5 s link-loss timeout (a link_loss e-stop 0.8 s into a mission). The link-loss stop of a mission is the
# runtime's test (tests/server/runtime/test_mission.py); here the page is under test. For the same reason the
# latency governor is off: at a load average of 20 the page's stamped heartbeats arrived 1–2.9 s late and its
# stop ("link too slow to drive") ended the tests' missions; the governor's tests are tests/linkemu's. And a
# control-loop tick 0.154 s late (the 0.1 s stall limit) stopped a mission in a fresh-clone CI run while the
# machine was busy: the stall stop is the runtime's test (tests/server/runtime), the page's missions are these.
LONG_LINK = {"safety": {"command_timeout_s": 10.0, "governor": {"enabled": False}}, "loop": {"max_stall_s": 2.0}}


def to_client(page, x_m: float, y_m: float) -> tuple[float, float]:
    """The viewport point of world point (x, y) on the map (scrolled into view first)."""
    return tuple(page.evaluate(
        "([x, y]) => { const svg = document.querySelector('#navigation-panel .nav-map');"
        " const r = svg.getBoundingClientRect();"
        " if (r.top < 0 || r.bottom > innerHeight) svg.scrollIntoView({ block: 'center' });"
        " const p = new DOMPoint(x, y).matrixTransform(svg.querySelector(':scope > g').getScreenCTM());"
        " return [p.x, p.y]; }", [x_m, y_m]))


def plan(page) -> list[dict]:
    return page.evaluate("() => window.teleopMission.plan")


def ready(page, empty: bool = True) -> None:
    """The editor on the map, the page's first look at the server's mission done; ``empty``: the last test's
    mission, which a page opened after it shows (its plan, its legs), cleared from the editor."""
    page.wait_for_function("() => window.teleopMission && document.querySelector('#navigation-panel .mission')"
                           " && window.teleopMission.debug.settled", timeout=60000)
    if empty and plan(page):
        page.click("#mission-clear")
        page.wait_for_function("() => window.teleopMission.plan.length === 0", timeout=10000)


def events(srv) -> list:
    return [(e.get("trigger"), e.get("message")) for e in (srv.get("/api/events")[1] or {}).get("events", [])][-12:]


def click_run(page, srv) -> None:
    try:
        page.wait_for_function("() => !document.querySelector('#mission-run').disabled", timeout=30000)
        page.click("#mission-run", timeout=10000)
    except Exception:
        raise AssertionError(f"Run stays disabled: {page.evaluate('() => window.teleopMission.debug')}; "
                             f"events: {events(srv)}") from None


def wait_status(page, srv, kind: str, timeout_s: float) -> None:
    """Until the mission's status line is of ``kind`` (running, paused, ok, error); else what the server says."""
    try:
        page.wait_for_function("k => document.querySelector('#mission-status').dataset.kind === k", arg=kind,
                               timeout=timeout_s * 1000)
    except Exception:
        raise AssertionError(f"mission status not {kind}: {page.inner_text('#mission-status')!r}; "
                             f"server: {srv.get('/api/mission')[1]}; events: {events(srv)}") from None


def click_map(page, x_m: float, y_m: float) -> None:
    page.mouse.click(*to_client(page, x_m, y_m))


def close(a: dict, x: float, y: float, tol: float = 0.06) -> bool:
    return math.hypot(a["x_m"] - x, a["y_m"] - y) <= tol


def test_waypoints_are_added_dragged_deleted_saved_and_loaded(dashboard_server, open_dashboard, tmp_path):
    srv = dashboard_server(LONG_LINK)
    dash = open_dashboard(srv)
    page = dash.page
    ready(page)
    for x, y in [(1.5, 1.0), (3.0, 2.5), (4.5, 3.0)]:
        click_map(page, x, y)
    page.wait_for_function("() => window.teleopMission.plan.length === 3")
    wps = plan(page)
    assert all(close(w, x, y) for w, (x, y) in zip(wps, [(1.5, 1.0), (3.0, 2.5), (4.5, 3.0)])), wps
    assert page.locator(f"{MAP} .mission-wp").count() == 3
    assert page.locator("#mission-waypoints tbody tr").count() == 3
    points = page.locator(f"{MAP} .mission-plan").get_attribute("points").split()
    assert len(points) == 3

    # drag the second one to (2.0, 3.5): a press on a waypoint never adds one
    sx, sy = to_client(page, wps[1]["x_m"], wps[1]["y_m"])
    tx, ty = to_client(page, 2.0, 3.5)
    page.mouse.move(sx, sy)
    page.mouse.down()
    page.mouse.move(tx, ty, steps=8)
    page.mouse.up()
    wps = plan(page)
    assert len(wps) == 3 and close(wps[1], 2.0, 3.5), wps
    assert close(wps[0], 1.5, 1.0) and close(wps[2], 4.5, 3.0)
    row = page.locator('#mission-waypoints tbody tr[data-index="1"]')
    assert abs(float(row.locator('input[data-field="x_m"]').input_value()) - wps[1]["x_m"]) < 1e-9

    # the table sets a heading and a hold
    row.locator('input[data-field="heading_deg"]').fill("90")
    row.locator('input[data-field="heading_deg"]').dispatch_event("change")
    row.locator('input[data-field="hold_s"]').fill("1.5")
    row.locator('input[data-field="hold_s"]').dispatch_event("change")
    assert plan(page)[1]["heading_deg"] == 90 and plan(page)[1]["hold_s"] == 1.5

    # right-click deletes the first one
    page.mouse.click(*to_client(page, wps[0]["x_m"], wps[0]["y_m"]), button="right")
    page.wait_for_function("() => window.teleopMission.plan.length === 2")
    wps = plan(page)
    assert close(wps[0], 2.0, 3.5) and close(wps[1], 4.5, 3.0)
    assert page.locator("#mission-waypoints tbody tr").count() == 2
    assert page.locator(f"{MAP} .mission-wp text").all_text_contents() == ["1", "2"]
    # a click on one selects it (and adds none), Delete deletes it; a click on the map puts it back
    click_map(page, wps[1]["x_m"], wps[1]["y_m"])
    assert len(plan(page)) == 2  # a click on a waypoint adds none
    page.keyboard.press("Delete")
    page.wait_for_function("() => window.teleopMission.plan.length === 1")
    click_map(page, wps[1]["x_m"], wps[1]["y_m"])
    page.wait_for_function("() => window.teleopMission.plan.length === 2")
    wps = plan(page)

    # save as JSON (the POST body itself) and as CSV
    page.select_option("#mission-mode", "step")
    page.fill("#mission-speed", "0.15")
    with page.expect_download() as dl:
        page.click("#mission-save-json")
    saved = json.loads(open(dl.value.path()).read())
    assert saved == {"waypoints": wps, "speed_m_s": 0.15, "mode": "step"}
    with page.expect_download() as dl:
        page.click("#mission-save-csv")
    csv_text = open(dl.value.path()).read()
    lines = csv_text.strip().splitlines()
    assert lines[0].startswith("#") and "mode=step" in lines[0] and "speed_m_s=0.15" in lines[0]
    assert lines[1] == "x_m,y_m,heading_deg,hold_s" and len(lines) == 4

    # clear, load the CSV back: the same mission
    page.click("#mission-clear")
    page.wait_for_function("() => window.teleopMission.plan.length === 0")
    page.select_option("#mission-mode", "drive")
    csv_path = tmp_path / "mission.csv"
    csv_path.write_text(csv_text)
    page.set_input_files("#mission-load", str(csv_path))
    page.wait_for_function("() => window.teleopMission.plan.length === 2")
    assert plan(page) == wps
    assert page.input_value("#mission-mode") == "step" and float(page.input_value("#mission-speed")) == 0.15

    # a JSON file loads too; a broken one says what is wrong and changes nothing
    json_path = tmp_path / "other.json"
    json_path.write_text(json.dumps({"waypoints": [{"x_m": 1, "y_m": 1}], "mode": "drive"}))
    page.set_input_files("#mission-load", str(json_path))
    page.wait_for_function("() => window.teleopMission.plan.length === 1")
    bad = tmp_path / "bad.csv"
    bad.write_text("x_m,y_m\n1,2\n3,banana\n")
    page.set_input_files("#mission-load", str(bad))
    page.locator("#mission-error").wait_for(state="visible")
    assert "line 3" in page.inner_text("#mission-error") and "y_m" in page.inner_text("#mission-error")
    assert plan(page) == [{"x_m": 1, "y_m": 1}]
    assert not dash.console_errors(), dash.console_errors()


def mission_state(srv) -> dict:
    status, body = srv.get("/api/mission")
    assert status == 200, body
    return body


def stopped(srv) -> bool:
    s = srv.state()
    return abs(s["values"]["linear_m_s"]) < 0.01 and abs(s["setpoint"]["linear"]) < 1e-9


def plan_from_start(page, srv, offsets: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Waypoints clicked on the map at these offsets from where the rover stands (the truth)."""
    truth = srv.state()["truth"]
    points = [(round(truth["x"] + dx, 2), round(truth["y"] + dy, 2)) for dx, dy in offsets]
    for x, y in points:
        click_map(page, x, y)
    page.wait_for_function("n => window.teleopMission.plan.length === n", arg=len(points))
    return points


def test_a_mission_runs_in_the_sim_to_its_end_with_per_leg_results(dashboard_server, open_dashboard, wait_for):
    srv = dashboard_server(LONG_LINK)
    dash = open_dashboard(srv)
    page = dash.page
    ready(page)
    plan_from_start(page, srv, [(0.5, 0.0), (0.5, 0.4)])
    assert page.locator("#mission-run").is_disabled()  # idle: Start first
    assert "Start" in page.get_attribute("#mission-run", "title")
    dash.click_start()
    page.fill("#mission-speed", "0.25")
    click_run(page, srv)
    wait_status(page, srv, "ok", 120)
    assert "finished" in page.inner_text("#mission-status")
    rows = page.locator("#mission-legs tbody tr")
    wait_for(lambda: rows.count() == 2, 10, "both legs in the table")
    for i in range(2):
        row = rows.nth(i)
        assert row.get_attribute("data-outcome") == "reached"
        cells = row.locator("td").all_inner_texts()
        assert cells[0] == str(i + 1) and cells[3].endswith("cm") and cells[4].endswith("cm"), cells
    assert page.locator(f"{MAP} .mission-wp.reached").count() == 2
    # the report's links show once the page has fetched the report, after the outcome (mission.js: a request
    # later; a fresh-clone run read them hidden right after the status said finished)
    page.wait_for_selector("#mission-report", state="visible", timeout=30000)
    for cls in ("mission-driven", "mission-true"):
        assert len(page.locator(f"{MAP} .{cls}").get_attribute("points").split()) > 5, cls
    dash.screenshot(f"mission-{srv.mode}.png")
    status, text = page.evaluate("async (h) => { const r = await fetch(h); return [r.status, await r.text()]; }",
                                 page.locator("#mission-report a", has_text="legs CSV").get_attribute("href"))
    assert status == 200 and len(text.strip().splitlines()) == 3, text  # the header and a row per leg
    # the server agrees: finished, and the true pose is at the last waypoint within the bound
    m = mission_state(srv)["mission"]
    assert m["outcome"] == "finished", m
    truth = srv.state()["truth"]
    last = page.evaluate("() => window.teleopMission.plan.at(-1)")
    assert math.hypot(truth["x"] - last["x_m"], truth["y"] - last["y_m"]) < 0.15, (truth, last)
    assert stopped(srv) and srv.state()["state"] == "running"
    assert page.locator("#mission-waypoints tbody input").first.is_enabled()  # editable again
    unexpected = [c for c in dash.console_errors() if "/api/mission" not in c[2]]
    assert not unexpected, unexpected


def test_pause_resume_and_cancel_from_the_page(dashboard_server, open_dashboard, wait_for):
    srv = dashboard_server(LONG_LINK)
    dash = open_dashboard(srv)
    page = dash.page
    ready(page)
    plan_from_start(page, srv, [(1.2, 0.0)])
    dash.click_start()
    page.fill("#mission-speed", "0.12")
    click_run(page, srv)
    try:
        wait_for(lambda: (mission_state(srv)["mission"] or {}).get("phase") == "driving"
                 and srv.state()["values"]["linear_m_s"] > 0.05, 30, "the rover driving the mission")
    except AssertionError as err:
        raise AssertionError(f"{err}; mission: {mission_state(srv)}; state: {srv.state().get('values')}; "
                             f"page: {page.inner_text('#mission-status')!r}; events: {events(srv)}") from None

    page.locator("#mission-pause").click(timeout=10000)
    page.wait_for_function("() => document.querySelector('#mission-status').textContent.includes('PAUSED')",
                           timeout=15000)
    assert mission_state(srv)["mission"]["paused"] is True
    wait_for(lambda: stopped(srv), 15, "the rover stopped while paused")
    assert page.locator("#mission-resume").is_enabled() and page.locator("#mission-pause").is_disabled()
    assert page.locator("#mission-run").is_disabled()
    assert page.locator("#mission-waypoints tbody input").first.is_disabled()  # locked while one runs
    before = plan(page)
    click_map(page, 1.0, 1.0)  # a click on the map adds nothing either
    assert plan(page) == before
    progress = mission_state(srv)["mission"]["progress"]

    page.locator("#mission-resume").click(timeout=10000)
    wait_for(lambda: mission_state(srv)["mission"]["progress"] > progress + 0.05, 30, "the mission going on")
    assert "PAUSED" not in page.inner_text("#mission-status")

    page.locator("#mission-cancel").click(timeout=10000)
    wait_status(page, srv, "error", 20)
    assert "cancelled" in page.inner_text("#mission-status")
    body = mission_state(srv)
    assert body["running"] is False and body["mission"]["outcome"].startswith("cancelled"), body
    wait_for(lambda: stopped(srv), 15, "the rover stopped after the cancel")
    assert srv.state()["state"] == "running"
    assert page.locator("#mission-run").is_enabled(timeout=10000)
    unexpected = [c for c in dash.console_errors() if "/api/mission" not in c[2]]
    assert not unexpected, unexpected


def test_a_viewer_is_offered_no_mission_and_the_server_refuses_one(mode, dashboard_server, open_dashboard):
    srv = dashboard_server(LONG_LINK)
    if mode == "local":  # the page is the local admin: once running, Run is offered
        dash = open_dashboard(srv)
        ready(dash.page)
        plan_from_start(dash.page, srv, [(0.3, 0.0)])
        dash.click_start()
        dash.page.locator("#mission-run").wait_for(state="visible")
        dash.page.wait_for_function("() => !document.querySelector('#mission-run').disabled", timeout=10000)
        return
    dash = open_dashboard(srv, user=VIEWER, take_lease=False)
    page = dash.page
    ready(page)
    plan_from_start(page, srv, [(0.3, 0.0)])  # planning needs no role
    page.wait_for_function("() => document.querySelector('#mission-run').title.includes('operator')", timeout=10000)
    for button in ("#mission-run", "#mission-pause", "#mission-resume", "#mission-cancel"):
        assert page.locator(button).is_disabled(), button
    assert all(b.is_disabled() for b in page.locator("#experiments-panel .exp-run").all())
    # the server refuses the viewer's session whatever the page offers
    status, body = srv.request("POST", "/api/mission", body={"waypoints": [{"x_m": 3.3, "y_m": 2.0}]},
                               headers={**dash.session.headers(), "Origin": srv.url})
    assert status == 403, (status, body)
    assert mission_state(srv)["mission"] is None or mission_state(srv)["running"] is False


HEADING_QUICK = {"targets_deg": [45.0], "trials": 1, "methods": ["encoder"], "spot": None}


def test_an_experiment_runs_from_the_panel_with_the_papers_figures_beside(dashboard_server, open_dashboard):
    srv = dashboard_server(LONG_LINK)
    dash = open_dashboard(srv)
    page = dash.page
    item = page.locator('#experiments-panel .exp-item[data-name="heading_turns"]')
    item.wait_for(timeout=20000)
    assert page.locator("#experiments-panel .exp-item").count() == len(srv.get("/api/experiments")[1]["experiments"])
    dash.click_start()
    item.locator("summary").click()
    item.locator("textarea").fill(json.dumps(HEADING_QUICK))
    item.locator(".exp-run").click(timeout=10000)
    page.wait_for_function("() => document.querySelector('#exp-report').dataset.experiment === 'heading_turns'",
                           timeout=120000)
    assert "finished" in page.inner_text("#exp-status")
    compare = page.locator("#exp-report table.exp-compare").first
    text = compare.inner_text()
    assert "encoder" in text and "4.64" in text and "13.25" in text, text  # the paper's Table 3 figures
    ours = compare.locator("td.ours").first.inner_text()
    assert ours not in ("", "—")
    status, rep = srv.get(page.get_attribute("#exp-report-json", "href"))
    assert status == 200 and rep["experiment"] == "heading_turns", rep
    status, html = page.evaluate("async (h) => { const r = await fetch(h); return [r.status, await r.text()]; }",
                                 page.get_attribute("#exp-report-link", "href"))
    assert status == 200 and "4.64" in html, html[:300]
    page.locator("#experiments-panel").screenshot(path=str(dash.screenshot(f"experiments-{srv.mode}.png")))
    assert stopped(srv)


def test_a_snapshot_from_before_the_run_does_not_show_the_running_experiment_as_ended(dashboard_server,
                                                                                    open_dashboard):
    # CI once saw the report box claim heading_turns while it was in its first settle: a snapshot taken before
    # the run began reached the page after the POST's answer, and the page fetched and showed the report of the
    # run still going. Here that snapshot is handed to the panel on purpose, while the run goes on.
    srv = dashboard_server(LONG_LINK)
    dash = open_dashboard(srv)
    page = dash.page
    item = page.locator('#experiments-panel .exp-item[data-name="heading_turns"]')
    item.wait_for(timeout=20000)
    dash.click_start()
    item.locator("summary").click()
    item.locator("textarea").fill(json.dumps({**HEADING_QUICK, "trials": 3}))
    item.locator(".exp-run").click(timeout=10000)
    page.wait_for_function("() => document.querySelector('#exp-status').textContent.includes(' %')", timeout=20000)
    # the stale snapshot asks for the report (or finds the request a real late snapshot started in flight, and
    # that is awaited); one answered less than a second ago holds the next back: tried again until one is asked
    shown = page.evaluate("""async () => {
        for (let i = 0; i < 100; i++) {
            const asked = window.teleopExperiments.setState({state: "running", behavior: null});
            if (asked) {
                await asked;
                return document.querySelector('#exp-report').dataset.experiment ?? "none";
            }
            await new Promise((r) => setTimeout(r, 50));
        }
        return "no report was asked";
    }""")
    assert shown == "none", shown
    assert "ended" not in page.inner_text("#exp-status") and "finished" not in page.inner_text("#exp-status")
    page.locator("#exp-cancel").click(timeout=10000)
    page.wait_for_function("() => document.querySelector('#exp-report').dataset.experiment === 'heading_turns'",
                           timeout=60000)
    assert "cancelled" in page.inner_text("#exp-status")


def drawn_plan(page) -> list[tuple[float, float]]:
    """The planned path the map draws (the dashed polyline), as (x, y) points."""
    pts = page.locator(f"{MAP} .mission-plan").get_attribute("points").split()
    return [tuple(float(c) for c in p.split(",")) for p in pts]


def shows_plan(page, points: list[tuple[float, float]], timeout_s: float = 30.0) -> None:
    page.wait_for_function("n => document.querySelectorAll('#navigation-panel .nav-map .mission-wp').length === n",
                           arg=len(points), timeout=timeout_s * 1000)
    drawn = drawn_plan(page)
    assert len(drawn) == len(points) and all(math.hypot(a - x, b - y) < 1e-6 for (a, b), (x, y) in zip(drawn, points)), \
        (drawn, points)
    assert [(w["x_m"], w["y_m"]) for w in plan(page)] == points


def test_a_mission_started_over_http_is_drawn_with_its_plan_and_legs(mode, dashboard_server, open_dashboard, wait_for):
    """A mission this page did not send (curl, another client): the page draws its planned path and fills in the
    per-leg results as the legs end; a page opened after the start draws it too, and neither opening it nor hiding
    it ends the mission: a page that was not driving sends no speed (in local mode every page is an operator, and
    a zero speed from one would be an operator taking over)."""
    srv = dashboard_server(LONG_LINK)
    dash = open_dashboard(srv)
    page = dash.page
    ready(page)
    dash.click_start()
    wait_for(lambda: math.isfinite(srv.state()["values"].get("est_x_m") or math.nan), 20, "a position estimate")
    truth = srv.state()["truth"]
    points = [(round(truth["x"] + 0.5, 2), round(truth["y"], 2)), (round(truth["x"] + 0.5, 2), round(truth["y"] + 0.4, 2))]
    status, reply = srv.post("/api/mission", {"waypoints": [{"x_m": x, "y_m": y} for x, y in points],
                                              "speed_m_s": 0.25, "mode": "drive"})
    assert status == 200, reply
    shows_plan(page, points)
    assert page.input_value("#mission-mode") == "drive" and float(page.input_value("#mission-speed")) == 0.25
    assert page.locator("#mission-waypoints tbody input").first.is_disabled()  # locked: the plan being driven
    late = open_dashboard(srv, take_lease=False)  # another browser, opened after the start
    ready(late.page, empty=False)
    shows_plan(late.page, points)
    late.js("""() => {
        Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
        document.dispatchEvent(new Event('visibilitychange'));
    }""")  # the release runs in the event's handler: anything it sent is in the log below
    assert [m for m in late.sent_since(0) if m["type"] == "speed"] == [], late.sent_since(0)
    rows = page.locator("#mission-legs tbody tr")
    try:
        page.wait_for_function("() => document.querySelector('#mission-legs tbody tr')?.dataset.outcome === "
                               "'reached'", timeout=90000)
    except Exception as err:  # say what the server saw (a flake at load ~3 in a fresh clone had no clue)
        events = [(e["trigger"], e["message"]) for e in srv.get("/api/events?limit=30")[1]["events"]]
        raise AssertionError(f"first leg not shown reached: {err}; server: {mission_state(srv)}; "
                             f"events: {events}") from None
    wait_status(page, srv, "ok", 120)
    assert "finished" in page.inner_text("#mission-status")
    after = open_dashboard(srv, take_lease=False)  # another browser, opened after the end: the last one's plan, legs
    ready(after.page, empty=False)
    shows_plan(after.page, points)
    for p in (page, late.page, after.page):
        p.wait_for_function("() => document.querySelectorAll('#mission-legs tbody tr[data-outcome=\"reached\"]').length === 2",
                            timeout=20000)
        assert p.locator(f"{MAP} .mission-wp.reached").count() == 2
        assert len(p.locator(f"{MAP} .mission-driven").get_attribute("points").split()) > 5
    cells = rows.nth(1).locator("td").all_inner_texts()
    assert cells[0] == "2" and cells[3].endswith("cm"), cells
    assert mission_state(srv)["mission"]["outcome"] == "finished"
    # the plan stays on the map after the end, and is the editor's again
    shows_plan(page, points)
    assert page.locator("#mission-waypoints tbody input").first.is_enabled()
    for d in (dash, late, after):
        unexpected = [c for c in d.console_errors() if "/api/mission" not in c[2]]
        assert not unexpected, unexpected


# last: its own configuration (the module's tests share one server per configuration, one at a time, so the
# tests of one configuration run together)
def test_a_failed_mission_shows_its_reason(dashboard_server, open_dashboard, wait_for):
    # a corridor of 1 mm either side of the leg: the fused estimate leaves it within the first few centimetres
    srv = dashboard_server({**LONG_LINK, "mission": {"max_cross_track_m": 0.001}})
    dash = open_dashboard(srv)
    page = dash.page
    ready(page)
    plan_from_start(page, srv, [(0.8, 0.3)])
    dash.click_start()
    click_run(page, srv)
    wait_status(page, srv, "error", 60)
    text = page.inner_text("#mission-status")
    assert "failed: left the corridor of leg 0" in text, text
    m = mission_state(srv)["mission"]
    assert m["outcome"].startswith("failed: left the corridor"), m
    page.wait_for_function("() => document.querySelector('#mission-legs tbody tr')?.dataset.outcome.startsWith('failed')",
                           timeout=15000)
    assert page.locator(f"{MAP} .mission-wp.failed").count() == 1
    wait_for(lambda: stopped(srv), 15, "the rover stopped after the failure")
    assert srv.state()["state"] == "running"  # a failed mission stops the rover; it is not an e-stop
