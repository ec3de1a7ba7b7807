"""Liveness is tied to the lease (issue 19 §3), on the real server: only the principal that holds control —
the lease holder, the implicit local operator in local mode, a console that took control — keeps the robot
alive; anyone else's heartbeats, however they arrive, do not."""

from __future__ import annotations

import asyncio
import threading

import pytest

from server.console import Console
from tests.conftest import ServerProc, wait_until
from tests.server.gateway.auth.test_real_server import auth_server, client_for, take  # noqa: F401 - fixtures
from tests.server.test_processes import socket_path

pytestmark = pytest.mark.server

TIMEOUT_S = 0.5


def heartbeats(beat, stop: threading.Event, period_s: float = 0.05) -> threading.Thread:
    def run() -> None:
        while not stop.is_set():
            try:
                beat()
            except Exception:  # noqa: BLE001 - a refused heartbeat is the point
                pass
            stop.wait(period_s)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def stopped_by_link_loss(srv: ServerProc, headers: dict | None = None) -> dict:
    state = wait_until(lambda: (s := srv.get("/api/state", headers=headers or {})[1])["state"] != "running" and s,
                       20, "the robot stopped")
    assert state["state"] == "estop" and state["cause"]["trigger"] == "link_loss", state
    return state


async def test_a_non_holders_heartbeats_do_not_keep_the_robot_alive(auth_server) -> None:  # noqa: F811
    srv, _ = auth_server({"olga": "operator", "otto": "operator"}, safety={"command_timeout_s": TIMEOUT_S})
    client, http = await client_for(srv)
    async with http:
        otto, olga = await client.login("otto"), await client.login("olga")
        await take(client, otto)
        assert (await client.request("POST", "/api/start", otto, json_body={}))[0] == 200
        codes: list[int] = []
        stop = asyncio.Event()

        async def olga_beats() -> None:  # the second operator, logged in, no lease: over HTTP and the websocket
            ws = await client.ws(olga)
            try:
                while not stop.is_set():
                    codes.append((await client.request("POST", "/api/heartbeat", olga, json_body={}))[0])
                    await ws.send_json({"type": "heartbeat"})
                    await asyncio.sleep(0.05)
            finally:
                await ws.close()

        beats = asyncio.create_task(olga_beats())
        try:  # the holder goes silent
            await asyncio.to_thread(stopped_by_link_loss, srv, {"Cookie": otto.cookie})
        finally:
            stop.set()
            await beats
        assert codes and set(codes) == {409}, codes  # lease_held: the gateway refuses them …


def test_a_runtime_client_without_control_does_not_keep_the_robot_alive(server_factory) -> None:
    """… and so does the runtime, whoever talks to its socket (main: any client's heartbeat counted, and this
    console kept the robot running while the gateway's operator was silent)."""
    srv = server_factory({"safety": {"command_timeout_s": TIMEOUT_S}})
    con = Console(socket_path(srv))
    stop = threading.Event()
    try:
        assert srv.post("/api/start")[0] == 200  # the local operator (local mode's implicit holder) starts …
        heartbeats(lambda: con.call("heartbeat"), stop)  # … and goes silent; the console beats without control
        stopped_by_link_loss(srv)
    finally:
        stop.set()
        con.close()


def link_age_s(srv: ServerProc) -> float:
    return srv.state()["link"]["age_s"]


def renews(srv: ServerProc, beat) -> bool:
    """Whether ``beat()`` renews the link: once the link is 2 s old, a heartbeat that counts brings its age back
    under that (a condition with deadlines, not a timing: the snapshots say how old the link is)."""
    old = wait_until(lambda: (a := link_age_s(srv)) >= 2.0 and a, 30, "a link 2 s old")
    beat()
    seq = srv.state()["seq"]  # may be older than the heartbeat (it publishes nothing): wait for a later one
    return wait_until(lambda: (s := srv.state())["seq"] > seq + 1 and s, 10, "a later snapshot")["link"]["age_s"] < old


def test_a_console_that_takes_control_keeps_it_alive_and_gives_it_back(server_factory) -> None:
    srv = server_factory({"safety": {"command_timeout_s": 60}})
    con = Console(socket_path(srv))
    try:
        assert srv.post("/api/start")[0] == 200
        assert renews(srv, lambda: srv.post("/api/heartbeat"))  # the local operator holds control
        assert con.take_control()["holder"] == "console"
        assert renews(srv, lambda: con.call("heartbeat"))
        assert not renews(srv, lambda: srv.post("/api/heartbeat"))  # the gateway's operator holds it no more
    finally:
        con.close()  # the console's claim goes with its connection: the local operator holds control again
    assert wait_until(lambda: renews(srv, lambda: srv.post("/api/heartbeat")), 60, "the gateway's control back")
