"""Commands that cannot go stale (issue 20 §2) and the latency governor (§3), on the real server over real
websockets, in local mode (the emulated-link versions, logged in: tests/linkemu/test_networks.py).

The client shifts its stamps itself (``age_s``: a command stamped as sent that long ago, as if it had sat in a
queue; ``clock_offset_s``: a client clock an hour off), which makes every case here deterministic: nothing
depends on how fast this machine is, only on ages far from the limits (0.3 s limit, commands 0 or 2 s old).
"""

from __future__ import annotations

import asyncio
import math

import aiohttp
import pytest

from tests.conftest import ServerProc, wait_until
from tests.stamped_client import StampedClient

pytestmark = pytest.mark.timeout(120)


async def connect(srv: ServerProc, http: aiohttp.ClientSession, **kw) -> StampedClient:
    ws = await http.ws_connect(srv.ws_url + "/ws/telemetry")
    client = StampedClient(ws, **kw)
    await client.synced()
    return client


def run(srv: ServerProc, body, **kw):
    async def go():
        async with aiohttp.ClientSession() as http:
            client = await connect(srv, http, **kw)
            try:
                return await body(client)
            finally:
                await client.close()
    return asyncio.run(go())


def setpoint(srv: ServerProc) -> dict:
    return srv.state()["setpoint"]


def per_client(srv: ServerProc) -> list[dict]:
    status, body = srv.get("/api/telemetry")
    assert status == 200, body
    return body["per_client"]


def test_a_stale_speed_is_dropped_and_counted_a_fresh_one_applied_whatever_the_client_clock(server_factory) -> None:
    """A client clock an hour off (either way) still gets the ages right: the server measured the offset."""
    srv = server_factory({"safety": {"command_timeout_s": 5.0}})
    assert srv.post("/api/start")[0] == 200
    for n, clock_offset_s in enumerate((0.0, 3600.0, -3600.0), start=1):
        linear = 0.1 * n

        async def body(c: StampedClient):
            stale = await c.call("speed", linear=0.5, angular=0.0, age_s=2.0)
            assert stale["type"] == "ack" and stale.get("dropped") == "stale", stale
            assert setpoint(srv)["linear"] != 0.5  # not applied
            fresh = await c.call("speed", linear=linear, angular=0.0)
            assert fresh["type"] == "ack" and "dropped" not in fresh, fresh
            return per_client(srv)

        stats = run(srv, body, clock_offset_s=clock_offset_s)
        assert wait_until(lambda: math.isclose(setpoint(srv)["linear"], linear), 10, "the fresh speed applied")
        mine = [s for s in stats if s.get("synced")]
        assert len(mine) == 1 and mine[0]["stale_dropped"] == 1 and mine[0]["reordered_dropped"] == 0, stats
        assert abs(mine[0]["offset_ms"] / 1000 - clock_offset_s) < 1.0, mine  # the offset, measured
        tcp = mine[0]["tcp"]  # what the server's kernel measures of the socket (sent with every sync)
        assert tcp is not None and tcp["rtt_ms"] >= 0 and tcp["rttvar_ms"] >= 0 and tcp["retrans"] >= 0, mine
        # a fresh command's age, the hour measured away: what is left is the sync's error (half a round trip at
        # most), so a few tenths of a millisecond below zero on a loaded machine (-0.3 ms in a fresh-clone run)
        assert -100 < mine[0]["command_age_ms"] < 1000, mine
    link = srv.state()["link"]
    assert link["stale_dropped"] == 3 and link["max_command_age_s"] == 0.3, link
    status, body = srv.get("/api/telemetry")
    assert body["commands_dropped"] == {"stale": 3}, body


def test_replayed_or_reordered_commands_are_dropped_and_counted(server_factory) -> None:
    srv = server_factory({"safety": {"command_timeout_s": 5.0}})

    async def body(c: StampedClient):
        await c.call("start")
        a = await c.call("speed", linear=0.1, angular=0.0, seq=10)
        replayed = await c.call("speed", linear=0.4, angular=0.0, seq=10)
        older = await c.call("speed", linear=0.4, angular=0.0, seq=9)
        newer = await c.call("speed", linear=0.15, angular=0.0, seq=11)
        return a, replayed, older, newer, per_client(srv)

    a, replayed, older, newer, stats = run(srv, body)
    assert "dropped" not in a and "dropped" not in newer, (a, newer)
    assert replayed.get("dropped") == "reordered" and older.get("dropped") == "reordered", (replayed, older)
    assert wait_until(lambda: math.isclose(setpoint(srv)["linear"], 0.15), 10, "the newer speed applied")
    assert [s["reordered_dropped"] for s in stats if s.get("synced")] == [2], stats
    status, body = srv.get("/api/telemetry")
    assert body["commands_dropped"].get("reordered") == 2, body


def test_unstamped_and_unsynced_clients_keep_arrival_time_rules(server_factory) -> None:
    """curl and old scripts send no stamps; a socket that never answered a sync has no offset: its sent_t (2 s
    old on its clock) cannot be read and is ignored, and the command applies on arrival."""
    srv = server_factory({"safety": {"command_timeout_s": 5.0}})

    async def go():
        async with aiohttp.ClientSession() as http, http.ws_connect(srv.ws_url + "/ws/telemetry") as ws:
            c = StampedClient(ws, answer_sync=False)
            try:
                await c.call("start")
                plain = await c.call("speed", linear=0.1, angular=0.0, stamp=False)
                unsynced = await c.call("speed", linear=0.12, angular=0.0, age_s=2.0)
                return plain, unsynced, per_client(srv)
            finally:
                await c.close()

    plain, unsynced, stats = asyncio.run(go())
    assert "dropped" not in plain and "dropped" not in unsynced, (plain, unsynced)
    assert wait_until(lambda: math.isclose(setpoint(srv)["linear"], 0.12), 10, "applied on arrival")
    assert stats[0]["synced"] is False and stats[0]["unsynced_commands"] == 1, stats  # start and plain: unstamped
    assert srv.post("/api/speed", {"linear": 0.05, "angular": 0.0})[0] == 200  # HTTP: arrival-time rules


def test_stale_heartbeats_do_not_keep_the_robot_alive(server_factory) -> None:
    """A stop path: heartbeats that arrive but were sent longer than command_timeout_s ago (a link that delivers
    late) must not hold off the link-loss stop; fresh ones do.

    The timeout is 2 s (not 0.5): with 0.5 a loaded machine once stopped the robot by link loss during the fresh
    heartbeats (a fresh-clone run), a gap of the test's own making; the stale ones are 3 s old, past it either way."""
    srv = server_factory({"safety": {"command_timeout_s": 2.0}})

    async def body(c: StampedClient):
        await c.call("start")
        for _ in range(60):  # 3 s of fresh heartbeats, longer than the timeout: it keeps running
            await c.send("heartbeat")
            await asyncio.sleep(0.05)
        running = srv.state()["state"]
        while srv.state()["state"] == "running":  # now only stale ones (each 3 s old)
            await c.send("heartbeat", age_s=3.0)
            await asyncio.sleep(0.05)
        # one-way: no ack tells the gateway of a dropped heartbeat; the runtime's per-stream counts do
        assert wait_until(lambda: any(s.get("synced") and s["stale_dropped"] >= 1 for s in per_client(srv)), 10,
                          "the dropped heartbeats in this client's counts"), per_client(srv)
        return running

    assert run(srv, body) == "running"
    state = srv.state()
    assert state["state"] == "estop" and state["cause"]["trigger"] == "link_loss", state
    assert state["link"]["stale_dropped"] >= 1, state["link"]
    assert sum(d["stale"] for d in state["link"]["dropped_by_stream"].values()) == state["link"]["stale_dropped"]


BAD_STAMPS = [('"seq": "7"', "wrong_type"), ('"seq": -1', "out_of_limits"), ('"seq": true', "wrong_type"),
              ('"sent_t": "now"', "wrong_type"), ('"seq": 1152921504606846976', "out_of_limits"),
              ('"seq": 1, "sent_t": 1e999', "out_of_limits"), ('"seq": 1.5', "wrong_type")]


def test_bad_stamps_are_refused_with_the_field_named_and_change_nothing(server_factory) -> None:
    srv = server_factory({"safety": {"command_timeout_s": 5.0}})

    async def body(c: StampedClient):
        await c.call("start")
        replies = []
        for n, (bad, _) in enumerate(BAD_STAMPS, start=100):
            await c.ws.send_str(f'{{"type": "speed", "id": {n}, "linear": 0.3, "angular": 0.0, {bad}}}')
            replies.append(await c.reply(n))
        return replies

    for (bad, code), reply in zip(BAD_STAMPS, run(srv, body)):
        assert reply["type"] == "error" and reply["error"]["code"] == code, (bad, reply)
        field = "seq" if "seq" in bad and "sent_t" not in bad else "sent_t"
        assert field in reply["error"]["message"], (bad, reply)
    assert setpoint(srv)["linear"] == 0.0
    assert srv.state()["link"]["stale_dropped"] == 0


GOVERNOR = {"safety": {"command_timeout_s": 5.0, "max_command_age_s": 5.0,
                       "governor": {"delay_s": 0.25, "hold_s": 0.3, "floor_delay_s": 0.6, "floor": 0.3,
                                    "recover_delay_s": 0.15, "recover_s": 0.5, "stop_delay_s": 1.0}}}


def test_the_governor_caps_speed_on_a_slow_link_and_lifts_it_when_it_recovers(server_factory) -> None:
    srv = server_factory(GOVERNOR)

    async def drive(c: StampedClient, age_s: float, seconds: float) -> None:
        for _ in range(int(seconds / 0.05)):
            await c.send("speed", linear=0.4, angular=0.2, age_s=age_s)
            await asyncio.sleep(0.05)

    async def body(c: StampedClient):
        await c.call("start")
        await drive(c, 0.0, 0.5)
        free = srv.state()
        await drive(c, 0.6, 1.5)  # 600 ms of delay: the floor
        capped = srv.state()
        await drive(c, 0.0, 2.0)  # recovered for longer than recover_s
        lifted = srv.state()
        return free, capped, lifted, list(c.events)

    free, capped, lifted, events = run(srv, body)
    assert free["link"]["governor"]["state"] == "ok" and math.isclose(free["setpoint"]["linear"], 0.4), free
    gov = capped["link"]["governor"]
    assert gov["state"] == "capped" and math.isclose(gov["scale"], 0.3, abs_tol=0.01), gov
    assert math.isclose(capped["setpoint"]["linear"], 0.12, abs_tol=0.01), capped["setpoint"]
    assert math.isclose(capped["setpoint"]["angular"], 0.06, abs_tol=0.01), capped["setpoint"]
    assert lifted["link"]["governor"]["state"] == "ok", lifted["link"]
    assert math.isclose(lifted["setpoint"]["linear"], 0.4), lifted["setpoint"]
    triggers = [e["trigger"] for _, e in events]
    assert "governor_capped" in triggers and "governor_lifted" in triggers, triggers
    assert lifted["state"] == "running"


def test_the_governor_stops_the_robot_when_the_delay_stays_past_its_stop_threshold(server_factory) -> None:
    """A stop path (the governor's controlled stop): the real server, the robot stopped and its outputs at zero."""
    srv = server_factory(GOVERNOR)

    async def body(c: StampedClient):
        await c.call("start")
        for _ in range(40):
            await c.send("speed", linear=0.3, angular=0.0)
            await asyncio.sleep(0.05)
        while srv.state()["state"] == "running":
            await c.send("speed", linear=0.3, angular=0.0, age_s=1.5)
            await asyncio.sleep(0.05)

    run(srv, body)
    state = wait_until(lambda: (s := srv.state())["state"] == "idle" and s, 20, "the controlled stop completed")
    assert state["link"]["governor"]["state"] == "stop", state["link"]
    events = srv.get("/api/events?limit=50")[1]["events"]
    stop = [e for e in events if e["trigger"] == "latency"]
    assert stop and stop[0]["state_after"] == "stopping", events
    assert all(abs(v) < 1e-9 for v in state["command"].values()), state["command"]
    assert srv.post("/api/speed", {"linear": 0.2, "angular": 0.0})[0] == 409  # nothing moves until a new start


def test_the_governor_caps_an_arms_joint_speed_on_a_slow_link(server_factory) -> None:
    """Issue 20 §3 for arms: a SCARA jogged over a link 600 ms slow moves at the floor's share of its speed (the
    simulated joint's measured rate), and back at full speed once the link recovers."""
    srv = server_factory(GOVERNOR, config="config/scara-sim.toml")

    async def jog(c: StampedClient, age_s: float, seconds: float, q1: float) -> None:
        for _ in range(int(seconds / 0.05)):
            await c.send("jog", q1_rad_s=q1, q2_rad_s=0.0, age_s=age_s, stamp=True)
            await asyncio.sleep(0.05)

    async def settled(c: StampedClient, age_s: float, q1: float, governor: str, rate: float) -> dict:
        """Jog on until a snapshot shows the governor's state and the joint's measured rate (a deadline, not a
        figure: one snapshot on a loaded machine caught the measured rate at -0.03 with the cap in force), and
        return it; the last one if the deadline passes (the asserts below then say what it showed)."""
        deadline = asyncio.get_running_loop().time() + 10.0
        while True:
            await c.send("jog", q1_rad_s=q1, q2_rad_s=0.0, age_s=age_s, stamp=True)
            state = srv.state()
            if (state["link"]["governor"]["state"] == governor
                    and math.isclose(state["values"]["q1_rad_s"], rate, abs_tol=0.05)) \
                    or asyncio.get_running_loop().time() > deadline:
                return state
            await asyncio.sleep(0.05)

    async def body(c: StampedClient):
        await c.call("start")
        await jog(c, 0.0, 1.0, 0.5)
        free = await settled(c, 0.0, 0.5, "ok", 0.5)
        await jog(c, 0.6, 1.5, -0.5)  # 600 ms of delay: the floor (30 %)
        capped = await settled(c, 0.6, -0.5, "capped", -0.15)
        await jog(c, 0.0, 2.0, 0.5)
        lifted = await settled(c, 0.0, 0.5, "ok", 0.5)
        await c.call("stop")
        return free, capped, lifted

    free, capped, lifted = run(srv, body)
    assert free["link"]["governor"]["state"] == "ok"
    assert math.isclose(free["values"]["q1_rad_s"], 0.5, abs_tol=0.05), free["values"]
    assert capped["link"]["governor"]["state"] == "capped", capped["link"]
    assert math.isclose(capped["values"]["q1_rad_s"], -0.15, abs_tol=0.05), capped["values"]
    assert lifted["link"]["governor"]["state"] == "ok", lifted["link"]
    assert math.isclose(lifted["values"]["q1_rad_s"], 0.5, abs_tol=0.05), lifted["values"]
