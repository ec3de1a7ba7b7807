"""Issue 20 §2 over the emulated link: the real server (all its processes) in the robot's namespace, logged in,
its operator (``otto``, holding the control lease) in the operator's namespace, stamping its commands as the
dashboard does (tests/stamped_client.py).

No timing is asserted as a figure (bench/bench_link.py prints those): what is asserted is what the operator
must be able to rely on, with bounds an order of magnitude from the measured values so that a loaded machine
cannot fail them — and the old code failed each one (telemetry ages climbing to 10 s, a link-loss stop after
every start, commands sent during a blackout applied after it).
"""

from __future__ import annotations

import asyncio
import statistics
import time

import aiohttp
import msgspec
import pytest

import linkemu
from linkemu.traffic import BulkFlow
from tests.stamped_client import StampedClient

pytestmark = [pytest.mark.timeout(300), pytest.mark.e2e]

OPERATOR = "otto"


def take_lease(srv) -> None:
    status, body = srv.post("/api/lease/take", {}, headers=srv.auth_headers(OPERATOR))
    assert status == 200, body


async def operator_session(srv, body):
    async with aiohttp.ClientSession() as http, http.ws_connect(srv.ws_url + "/ws/telemetry",
                                                                headers=srv.auth_headers(OPERATOR)) as ws:
        client = StampedClient(ws)
        try:
            await client.synced(timeout_s=60)
            return await body(client)
        finally:
            await client.close()


async def beat(client: StampedClient, stop: asyncio.Event, period_s: float = 0.1) -> None:
    """Heartbeats from now on (as the dashboard does from the moment it sends start)."""
    while not stop.is_set():
        await client.send("heartbeat")
        try:
            await asyncio.wait_for(stop.wait(), period_s)
        except asyncio.TimeoutError:
            pass


def link_loss_events(client: StampedClient) -> list[dict]:
    return [e for _, e in client.events if e.get("trigger") == "link_loss"]


def test_4g_with_a_competing_download_starts_drive_and_telemetry_stays_young(linked_server) -> None:
    """Main: every start ended in a link-loss stop 0.5 s later, telemetry ages climbed ~0.25 s a second to 10 s
    and an e-stop reached the operator up to 7.8 s after it latched.

    ``command_timeout_s`` is 1 s here, as docs/networks.md advises for such a link, and the downlink (operator →
    robot) loses nothing: the download fills the uplink's 250 ms queue, the round trip reaches 0.4–1.4 s, and a
    command lost on the downlink holds every later one on the TCP socket until its retransmission, about one RTO
    (≥ the round trip) later. At 2 % loss that is a real gap in the commands the robot gets, longer than 1 s now
    and then (a fresh-clone run on a loaded machine stopped on it once in four drives: "no command or heartbeat
    for 1.006 s"): a link-loss stop the robot must make, by chance, so no test of this property can hold with
    it. What this test is about — the stop after every start, telemetry queued by size rather than age — needs
    no loss; the uplink keeps its 2 % (the telemetry, the acks and the download cross it), and bench/bench_link.py
    counts the link-loss stops with loss. The governor's stop is set out of the way: this test is about link
    loss (the governor has its own)."""
    four_g = linkemu.PROFILES["4g"]
    no_downlink_loss = msgspec.structs.replace(four_g, name="4g-no-downlink-loss",
                                               downlink=msgspec.structs.replace(four_g.downlink, loss=0.0))
    srv = linked_server(no_downlink_loss, config_overrides={"safety": {"command_timeout_s": 1.0,
                                                                       "governor": {"stop_delay_s": 3.0}}})
    take_lease(srv)

    async def body(c: StampedClient):
        for _ in range(4):
            stop = asyncio.Event()
            beats = asyncio.create_task(beat(c, stop))
            start = await c.call("start", timeout_s=60)
            assert start["type"] == "ack", start
            for _ in range(60):  # 3 s of driving at 20 Hz
                await c.send("speed", linear=0.2, angular=0.1)
                await asyncio.sleep(0.05)
            stop.set()
            await beats
            stopped = await c.call("stop", timeout_s=60)
            assert stopped["type"] == "ack", stopped
            if stopped["state"] == "estop":  # another cause (this machine's load: a control-loop stall): reset
                assert not link_loss_events(c), link_loss_events(c)
                await c.call("reset", timeout_s=60)
            await c.until(lambda: c.snapshots and c.snapshots[-1][1]["state"] == "idle", 60)
        t0 = time.time()
        estop = await c.call("estop", timeout_s=60)
        estop_shown_s = time.time() - t0
        ages = [arrived - snap["t"] for arrived, snap in c.snapshots]
        return ages, estop, estop_shown_s

    with BulkFlow(srv.link, "uplink") as flow:
        ages, estop, estop_shown_s = srv.call_in_operator(asyncio.run, operator_session(srv, body))
    assert flow.received_bytes > 0  # the download competed
    events = srv.get("/api/events?limit=500")[1]["events"]
    assert not [e for e in events if e["trigger"] == "link_loss"], [e for e in events if e["kind"] == "safety"]
    assert estop["type"] == "ack" and estop["state"] == "estop", estop
    third = len(ages) // 3
    early, late = statistics.median(ages[:third]), statistics.median(ages[-third:])
    print(f"telemetry ages p50 {statistics.median(ages) * 1e3:.0f} ms, max {max(ages) * 1e3:.0f} ms "
          f"({len(ages)} snapshots); e-stop shown after {estop_shown_s * 1e3:.0f} ms")
    assert late < early + 0.5, (early, late)  # not growing (main: +0.25 s every second)
    assert max(ages) < 3.0, max(ages)  # bounded (main: 10 s)
    assert estop_shown_s < 5.0, estop_shown_s  # main: up to 7.8 s behind the queued snapshots
    stats = srv.get("/api/telemetry")[1]
    assert stats["expired"] >= 0


def test_a_3_s_blackout_while_driving_stops_the_robot_and_nothing_sent_before_or_during_it_is_applied_after(
        linked_server) -> None:
    """After the blackout both ends retransmit on their backed-off timers (RTO doubling from ~0.3 s: 4.5 s, then
    9.3 s if that one is lost on this 2 % loss link), so the server's writer can be stuck past the default 10 s
    stall limit and the socket aborted before the replies this test reads come back: the limit is raised here (a
    socket aborted by it is its own test, tests/server/test_hostile_clients.py), and the burst too, so that the
    ~185 messages sent into the dark, arriving at once, are all answered by id."""
    srv = linked_server("4g", config_overrides={"server": {"writer_stall_s": 60.0},
                                                "telemetry": {"command_burst": 1000}})
    take_lease(srv)

    async def body(c: StampedClient):
        stop = asyncio.Event()
        beats = asyncio.create_task(beat(c, stop))
        assert (await c.call("start", timeout_s=60))["type"] == "ack"
        for _ in range(50):  # 1 s at 50 Hz
            await c.send("speed", linear=0.2, angular=0.0)
            await asyncio.sleep(0.02)
        dark_from = max(c.sent)  # ids up to here were sent before the blackout
        srv.link.blackout(3.0)
        t_end = time.monotonic() + 3.0
        while time.monotonic() < t_end:  # the operator keeps driving into the dark
            await c.send("speed", linear=0.3, angular=0.0)
            await asyncio.sleep(0.02)
        dark_to = max(c.sent)
        stop.set()
        await beats
        await c.until(lambda: all(i in c.replies for i in range(dark_from - 5, dark_to + 1)
                                  if c.sent[i]["type"] == "speed"), 120)
        return [c.replies[i] for i in range(dark_from + 1, dark_to + 1) if c.sent[i]["type"] == "speed"]

    replies = srv.call_in_operator(asyncio.run, operator_session(srv, body))
    # every command sent into the dark reached the server after it (TCP retransmitted it) and none was applied:
    # dropped as stale by the runtime, or refused (the e-stop latched, the lease ended with the link)
    applied = [r for r in replies if r["type"] == "ack" and "dropped" not in r]
    assert replies and not applied, applied
    state = srv.state()
    assert state["state"] == "estop" and state["cause"]["trigger"] == "link_loss", state
    events = srv.get("/api/events?limit=500")[1]["events"]
    latched = [e for e in events if e["trigger"] == "link_loss"][0]
    assert all(abs(v) < 1e-9 for v in state["command"].values()), state["command"]
    assert state["setpoint"]["linear"] == 0.0, state["setpoint"]
    assert latched["state_after"] == "estop"
    assert srv.post("/api/speed", {"linear": 0.2, "angular": 0.0}, headers=srv.auth_headers(OPERATOR))[0] == 409


def test_a_0_4_s_stall_drops_the_buffered_commands_older_than_the_limit_and_applies_the_rest_in_order(
        linked_server) -> None:
    # max_command_age_s 0.15 (not 0.3): a client this machine's load delays by 0.1-0.2 s after the stall begins
    # still sends commands that wait long enough to be dropped (4g's own delay is 40-80 ms: never dropped)
    srv = linked_server("4g", config_overrides={"safety": {"command_timeout_s": 2.0, "max_command_age_s": 0.15},
                                                "telemetry": {"command_burst": 1000}})
    take_lease(srv)

    async def body(c: StampedClient):
        stop = asyncio.Event()
        beats = asyncio.create_task(beat(c, stop))
        assert (await c.call("start", timeout_s=60))["type"] == "ack"
        for _ in range(25):
            await c.send("speed", linear=0.1, angular=0.0)
            await asyncio.sleep(0.02)
        srv.link.stall(0.4, direction="downlink")
        first = max(c.sent) + 1
        for _ in range(20):  # 0.4 s of commands into the stall
            await c.send("speed", linear=0.2, angular=0.0)
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        for _ in range(10):  # and after it
            await c.send("speed", linear=0.2, angular=0.0)
            await asyncio.sleep(0.02)
        last = max(c.sent)
        await c.until(lambda: all(i in c.replies for i in range(first, last + 1) if c.sent[i]["type"] == "speed"),
                      120)
        # still running, read while the heartbeats go on: a snapshot newer than the last reply (once they stop,
        # the 2 s link timeout runs; closing a session over this link on a loaded machine has taken that long)
        seen = len(c.snapshots)
        await c.until(lambda: len(c.snapshots) > seen, 60)
        state = c.snapshots[-1][1]["state"]
        stop.set()
        await beats
        replies = [(c.sent[i]["seq"], c.replies[i]) for i in range(first, last + 1) if c.sent[i]["type"] == "speed"]
        return replies, state, link_loss_events(c)

    replies, state, link_losses = srv.call_in_operator(asyncio.run, operator_session(srv, body))
    dropped = [seq for seq, r in replies if r.get("dropped") == "stale"]
    applied = [seq for seq, r in replies if r["type"] == "ack" and "dropped" not in r]
    assert dropped, replies  # the oldest ones of the burst
    assert applied and applied == sorted(applied), replies  # the rest, in order
    assert min(dropped) < min(applied), (dropped, applied)  # the first of the stall waited longest: dropped
    assert state == "running" and not link_losses, (state, link_losses)  # dropped commands are no link loss


def test_chromium_over_bad_shows_the_link_panel_and_the_governor_badge(linked_server, operator_browser) -> None:
    """The dashboard on the ``bad`` link (150 ms each way, 1 Mbit/s, 5 % loss): the link panel shows a measured round
    trip, the telemetry socket's retransmissions (its loss estimate) and a verdict that is not "good", the page's
    stamps are synced; once it drives (start: its stamped
    heartbeats feed the governor, round trip ≥ 300 ms > 250 ms) the top bar says the speed is capped; and once the
    link recovers (``lan``) the badge goes away."""
    from tests.linkemu.plugin import log_in

    srv = linked_server("bad", config_overrides={"safety": {"command_timeout_s": 2.0,
                                                            "governor": {"recover_s": 1.0, "stop_delay_s": 5.0}}})
    browser = operator_browser(srv.link)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    log_in(page, srv, user=OPERATOR)
    page.locator("#lease-take").click(timeout=60_000)
    page.wait_for_function("() => document.querySelector('#lease-panel').innerText.includes('You drive')",
                           timeout=60_000)
    page.wait_for_function("() => document.querySelector('#link-panel [data-field=sync]').innerText === 'synced'",
                           timeout=60_000)
    page.wait_for_function("() => ['degraded', 'bad'].includes("
                           "document.querySelector('#link-panel [data-field=verdict]').innerText)", timeout=60_000)
    rtt = float(page.locator("#link-panel [data-field=rtt]").inner_text())
    assert rtt >= 2 * 0.150 * 1000, rtt  # crossed the link both ways
    # the loss estimate: the robot's TCP resends part of the telemetry at 5 % loss (the page cannot see it itself)
    page.wait_for_function("() => parseFloat(document.querySelector('#link-panel [data-field=tcp_retrans]')"
                           ".innerText) > 0", timeout=60_000)
    page.locator("#btn-start").click(timeout=30_000)
    page.wait_for_function("() => !document.querySelector('#governor-badge').hidden", timeout=60_000)
    assert "speed capped: link" in page.locator("#governor-badge").inner_text()
    assert srv.state()["state"] == "running"  # slow control, not a stop
    srv.link.set_profile("lan")
    page.wait_for_function("() => document.querySelector('#governor-badge').hidden", timeout=60_000)
    assert not errors, errors
    context.close()
