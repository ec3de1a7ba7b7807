"""The recordings panel and the REC indicator in real Chromium, on the real server: a named recording
started and stopped from the page, its CSV export (column chooser, time range), report, download and
a confirmed delete; a refused name; a full disk shown amber. In local mode and logged in (an operator
records; deleting is an admin's, who is asked nothing more right after logging in)."""

from __future__ import annotations

import csv
import io
import os
import subprocess

import pytest

from tests.e2e.modes import ADMIN

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

MAGIC = [0x89, 0x4D, 0x43, 0x41, 0x50]  # \x89MCAP


def fetch_text(page, href: str) -> tuple[int, str]:
    return tuple(page.evaluate("async (h) => { const r = await fetch(h); return [r.status, await r.text()]; }", href))


def test_record_export_report_and_delete_from_the_dashboard(dashboard_server, open_dashboard, tmp_path, wait_for):
    srv = dashboard_server({"recording": {"dir": str(tmp_path / "rec"), "flush_s": 0.2}}, fresh=True)
    dash = open_dashboard(srv)
    page = dash.page
    page.wait_for_function("() => document.querySelector('#rec-status').textContent.includes('Not recording')")
    assert page.locator("#rec-indicator").is_hidden()

    # a refused name: the server's message is shown, nothing starts
    page.fill("#rec-name", "../etc")
    page.click("#rec-start")
    page.locator("#rec-error").wait_for(state="visible")
    assert "recording name" in page.locator("#rec-error").inner_text()
    assert srv.get("/api/recordings/status")[1]["state"] == "idle"

    page.fill("#rec-name", "left-turns")
    page.click("#rec-start")
    page.wait_for_function("() => document.querySelector('#rec-indicator').textContent.startsWith('REC left-turns')")
    assert "rec-on" in page.locator("#rec-indicator").get_attribute("class")
    assert page.locator("#rec-error").is_hidden()
    assert srv.post("/api/start")[0] == 200
    assert srv.post("/api/estop")[0] == 200
    wait_for(lambda: srv.get("/api/recordings/status")[1]["flushed_messages"] > 100, 20, "two seconds recorded")
    page.wait_for_function("() => / · \\d+(\\.\\d)? KB/.test(document.querySelector('#rec-indicator').textContent)")
    page.click("#rec-stop")
    page.locator("#rec-indicator").wait_for(state="hidden")

    row = page.locator('#rec-list tr[data-file$="_left-turns_000.mcap"]')
    row.wait_for()
    file = row.get_attribute("data-file")
    info = srv.get(f"/api/recordings/{file}/info")[1]

    # CSV with a column chooser and a time range (seconds from the start)
    row.get_by_role("button", name="CSV…").click()
    dialog = page.locator("#rec-csv-dialog")
    dialog.wait_for(state="visible")
    assert page.locator("#rec-csv-download").get_attribute("aria-disabled") == "true"  # no column yet
    dialog.locator('input[value="battery_v"]').check()
    dialog.locator('input[value="state"]').check()
    page.fill("#rec-csv-from", "0.5")
    page.fill("#rec-csv-to", "1.5")
    href = page.locator("#rec-csv-download").get_attribute("href")
    assert page.locator("#rec-csv-download").get_attribute("aria-disabled") == "false"
    status, text = fetch_text(page, href)
    assert status == 200, text
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["t", "battery_v", "state"] and len(rows) > 20
    ts = [float(r[0]) for r in rows[1:]]
    assert info["start_t"] + 0.5 <= min(ts) and max(ts) < info["start_t"] + 1.5
    assert {r[2] for r in rows[1:]} <= {"idle", "running", "estop"} and all(float(r[1]) > 5 for r in rows[1:])
    page.fill("#rec-csv-to", "0.1")  # before "from": refused on the page
    page.locator("#rec-csv-error").wait_for(state="visible")
    assert page.locator("#rec-csv-download").get_attribute("aria-disabled") == "true"
    dialog.get_by_role("button", name="Cancel").click()
    dialog.wait_for(state="hidden")

    # the report and the file itself
    status, html = fetch_text(page, row.get_by_role("link", name="report").get_attribute("href"))
    assert status == 200 and "<svg" in html
    head = page.evaluate("""async (h) => { const r = await fetch(h);
                                           return Array.from(new Uint8Array(await r.arrayBuffer()).slice(0, 5)); }""",
                         row.get_by_role("link", name="⤓ mcap").get_attribute("href"))
    assert head == MAGIC

    # delete asks first; cancel keeps the file. Deleting is an admin's: an operator gets no delete button
    # (the server would answer 403), so under login an admin's dashboard deletes it
    if srv.login:
        assert row.get_by_role("button", name="CSV…").count() == 1
        assert row.get_by_role("button", name="delete…").count() == 0
        started = [f["url"] for f in dash.state_changing()]
        assert any(u.endswith("/api/recordings/start") for u in started), started  # the probe saw them
        admin = open_dashboard(srv, user=ADMIN, take_lease=False)
        page = admin.page
        row = page.locator(f'#rec-list tr[data-file="{file}"]')
    row.get_by_role("button", name="delete…").click()
    confirm = page.locator("#rec-delete-dialog")
    confirm.wait_for(state="visible")
    assert file in confirm.inner_text()
    confirm.get_by_role("button", name="Cancel").click()
    confirm.wait_for(state="hidden")
    assert file in [r["file"] for r in srv.get("/api/recordings")[1]["recordings"]]
    row.get_by_role("button", name="delete…").click()
    page.click("#rec-delete-confirm")
    confirm.wait_for(state="hidden")
    row.wait_for(state="detached")
    assert file not in [r["file"] for r in srv.get("/api/recordings")[1]["recordings"]]
    assert not (tmp_path / "rec" / file).exists()
    errors = [e for e in dash.console_errors() if not ("422" in e[1] and e[2].endswith("/api/recordings/start"))]
    assert not errors, errors  # the refused name's 422 was expected


def test_a_full_disk_shows_amber_on_the_dashboard(dashboard_server, open_dashboard, tmp_path, wait_for):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        srv = dashboard_server({"recording": {"dir": str(mnt / "rec"), "always_on": True, "flush_s": 0.05,
                                            "chunk_bytes": 4096, "compression": "none"}}, fresh=True)
        dash = open_dashboard(srv)
        page = dash.page
        page.wait_for_function("() => document.querySelector('#rec-indicator')?.classList.contains('rec-error')",
                               timeout=60000)
        text = page.locator("#rec-indicator").inner_text()
        assert "disk full" in text and "ENOSPC" in text
        assert "Press Record to try again" in page.locator("#rec-status").inner_text()
        dash.wait_badge("idle")  # the robot is unaffected
        page.click("#btn-start")
        dash.wait_badge("running")
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
