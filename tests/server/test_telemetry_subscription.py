"""Per-client telemetry subscriptions on the real server (issue 20 §5): channels, rate, the delta encoding, and
refusals that change nothing. Rates are counted over windows of the server's own snapshot stamps (``t``), never
the test's wall clock."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from server.gateway.subscription import ALWAYS, apply
from tests.conftest import ServerProc, next_of

pytestmark = pytest.mark.timeout(120)

FIVE = ["linear_m_s", "angular_rad_s", "battery_v", "range_front_m", "heading_deg"]


async def subscribe(ws, **body) -> dict:
    await ws.send_str(json.dumps({"type": "subscribe", "id": "sub", **body}))
    return await _reply(ws, "sub")


async def _reply(ws, msg_id) -> dict:
    deadline = time.monotonic() + 10.0
    while True:
        msg = await asyncio.wait_for(ws.receive(), max(0.01, deadline - time.monotonic()))
        data = json.loads(msg.data)
        if data["type"] in ("ack", "error") and data.get("id") == msg_id:
            return data


def test_a_script_gets_five_channels_at_10_hz(server: ServerProc) -> None:
    """Only the five channels (and the fields every snapshot carries), at ~10 Hz of the server's 50: counted over
    2 s of the snapshots' own ``t``."""
    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.ws_url + "/ws/telemetry") as ws:
            await next_of(ws, "hello")
            ack = await subscribe(ws, channels=FIVE, rate_hz=10)
            assert ack["type"] == "ack" and ack["subscription"]["channels"] == sorted(FIVE), ack
            assert ack["subscription"]["rate_hz"] == 10
            ts: list[float] = []
            seqs: list[int] = []
            while len(ts) < 2 or ts[-1] - ts[0] < 3.0:
                m = await next_of(ws, "telemetry")
                d = m["data"]
                assert set(d["values"]) == set(FIVE), d["values"].keys()
                assert set(d) == {*ALWAYS, "values"}, sorted(d)
                ts.append(d["t"])
                seqs.append(d["seq"])
            # the first may be one that was already on its way: count within the server's own stamps after it
            ts, seqs = ts[1:], seqs[1:]
            span = ts[-1] - ts[0]
            rate = (len(ts) - 1) / span
            assert 5.0 <= rate <= 11.0, (rate, len(ts), span)  # low end: latest-wins drops on a loaded machine
            # decimated on a fixed 0.1 s schedule of the snapshots' own stamps: most go about a period apart. Not
            # every one: a late snapshot (a runtime that skipped ticks under load) is sent and the next comes on
            # schedule, sooner (a run in four workers saw one gap of two runtime snapshots among fives)
            gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
            assert gaps[len(gaps) // 2] >= 0.05, gaps
            _, stats = server.get("/api/telemetry")
            mine = [c for c in stats["per_client"] if c["subscription"] is not None]
            assert len(mine) == 1 and mine[0]["subscription"]["channels"] == sorted(FIVE)
            assert mine[0]["decimated"] > 0
    asyncio.run(go())


def test_without_subscribe_a_client_gets_full_snapshots(server: ServerProc) -> None:
    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.ws_url + "/ws/telemetry") as ws:
            hello = await next_of(ws, "hello")
            names = {c["name"] for c in hello["robot"]["channels"]}
            m = await next_of(ws, "telemetry")
            assert "encoding" not in m and {"loop", "truth", "setpoint"} <= set(m["data"])
            assert names <= set(m["data"]["values"])
            _, stats = server.get("/api/telemetry")
            assert [c["subscription"] for c in stats["per_client"]] == [None]
    asyncio.run(go())


BAD = [
    ({"channels": ["no_such_channel"]}, "invalid", "channels"),
    ({"channels": "linear_m_s"}, "wrong_type", "channels"),
    ({"channels": [1]}, "wrong_type", "channels"),
    ({"channels": ["x" * 200]}, "out_of_limits", "channels"),
    ({"channels": ["a"] * 1100}, "out_of_limits", "channels"),
    ({"fields": ["nope"]}, "invalid", "fields"),
    ({"fields": ["values"]}, "invalid", "fields"),
    ({"rate_hz": 0}, "out_of_limits", "rate_hz"),
    ({"rate_hz": 51}, "out_of_limits", "rate_hz"),
    ({"rate_hz": "10"}, "wrong_type", "rate_hz"),
    ({"rate_hz": True}, "wrong_type", "rate_hz"),
    ('"rate_hz": 1e999', "not_finite", "rate_hz"),  # decodes to infinity
    ({"encoding": "msgpack"}, "invalid", "encoding"),
    ({"encoding": 3}, "wrong_type", "encoding"),
    ({"keyframe_every": 0}, "out_of_limits", "keyframe_every"),
    ({"keyframe_every": 2.5}, "wrong_type", "keyframe_every"),
    ({"colour": "red"}, "unknown_field", "colour"),
]


def test_bad_subscribe_bodies_are_refused_and_change_nothing(server: ServerProc) -> None:
    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.ws_url + "/ws/telemetry") as ws:
            await next_of(ws, "hello")
            ack = await subscribe(ws, channels=FIVE, rate_hz=5)
            assert ack["type"] == "ack"
            for body, code, field in BAD:
                if isinstance(body, str):
                    await ws.send_str('{"type": "subscribe", "id": "sub", %s}' % body)
                    reply = await _reply(ws, "sub")
                else:
                    reply = await subscribe(ws, **body)
                assert reply["type"] == "error", (body, reply)
                assert reply["error"]["code"] == code and field in reply["error"]["message"], (body, reply)
            # NaN is no JSON: malformed, and nothing changed either
            await ws.send_str('{"type": "subscribe", "id": "sub", "rate_hz": NaN}')
            reply = await _reply(ws, None)  # not parsed: its id is not known
            assert reply["error"]["code"] == "malformed"
            _, stats = server.get("/api/telemetry")
            (mine,) = stats["per_client"]
            assert mine["subscription"]["channels"] == sorted(FIVE) and mine["subscription"]["rate_hz"] == 5
            assert mine["subscribes"] == 1
            m = await next_of(ws, "telemetry")
            assert set(m["data"]["values"]) == set(FIVE)
    asyncio.run(go())


def test_delta_stream_rebuilds_the_full_snapshots_exactly(server: ServerProc) -> None:
    """A delta client and a full-snapshot client side by side, at the server's full rate: every snapshot the delta
    client rebuilt equals the full client's snapshot of the same ``seq`` (the channels and fields it asked for);
    a keyframe comes every ``keyframe_every`` and after a resubscribe."""
    async def go() -> None:
        async with aiohttp.ClientSession() as s, \
                s.ws_connect(server.ws_url + "/ws/telemetry") as full, \
                s.ws_connect(server.ws_url + "/ws/telemetry") as delta:
            await next_of(full, "hello")
            await next_of(delta, "hello")
            ack = await subscribe(delta, channels="*", fields="*", encoding="delta", keyframe_every=25)
            assert ack["subscription"]["encoding"] == "delta"
            by_seq: dict[int, dict] = {}
            rebuilt: dict[int, dict] = {}
            keys: list[int] = []

            async def read_full() -> None:
                while len(rebuilt) < 120:
                    m = await next_of(full, "telemetry")
                    by_seq[m["data"]["seq"]] = m["data"]

            async def read_delta() -> None:
                state = None
                while len(rebuilt) < 120:
                    m = await next_of(delta, "telemetry")
                    if m.get("encoding") != "delta":
                        continue  # sent before the subscription took effect
                    if m.get("key"):
                        state = m["data"]
                        keys.append(len(rebuilt))
                    else:
                        assert state is not None, "a delta before any keyframe"
                        state = apply(state, m["data"], m.get("deleted", ()))
                    rebuilt[state["seq"]] = state

            await asyncio.wait_for(asyncio.gather(read_full(), read_delta()), 60)
            common = sorted(set(by_seq) & set(rebuilt))
            assert len(common) >= 20, (len(by_seq), len(rebuilt))
            for seq in common:
                assert rebuilt[seq] == by_seq[seq], seq
            assert len(keys) >= 3 and keys[0] == 0, keys
            # a resubscribe starts with a keyframe
            await subscribe(delta, channels=FIVE, fields=["loop"], encoding="delta")
            while True:
                m = await next_of(delta, "telemetry")
                if m.get("encoding") == "delta" and set(m["data"].get("values", {})) <= set(FIVE) \
                        and "truth" not in m["data"]:
                    break
            assert m.get("key") is True and set(m["data"]["values"]) == set(FIVE) and "loop" in m["data"]
    asyncio.run(go())


def test_a_reconnect_starts_with_a_keyframe(server: ServerProc) -> None:
    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            for _ in range(2):
                async with s.ws_connect(server.ws_url + "/ws/telemetry") as ws:
                    await next_of(ws, "hello")
                    await subscribe(ws, channels=FIVE, encoding="delta", rate_hz=20)
                    first = None
                    while first is None:
                        m = await next_of(ws, "telemetry")
                        if m.get("encoding") == "delta":
                            first = m
                    assert first.get("key") is True and set(first["data"]["values"]) == set(FIVE)
                    second = await next_of(ws, "telemetry")
                    assert second.get("encoding") == "delta" and not second.get("key")
                    assert set(second["data"]) >= {"seq", "t"}
    asyncio.run(go())
