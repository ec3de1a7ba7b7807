"""The gateway's runtime client against a stand-in runtime on a real Unix socket (issue 18, item 1): a lost
link fails every request waiting on it at once and leaves nothing in ``_pending``; an e-stop that met a lost
link is sent again on the next one; a runtime whose process is gone is down, one that lives is not."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from server.runtime_api import protocol
from server.errors import ApiError, RuntimeDownError
from server.procutil import process_alive
from server.runtime_api.client import LinkLostError, RuntimeClient

pytestmark = pytest.mark.timeout(60)


class FakeRuntime:
    """Speaks the runtime API's handshake; ``hang`` is never answered; ``estop`` on a connection listed in
    ``drop_on_estop`` closes it unanswered (an e-stop lost in flight)."""

    def __init__(self, path: str, pid: int) -> None:
        self.path, self.pid = path, pid
        self.connections: list[asyncio.StreamWriter] = []
        self.drop_on_estop = {0}
        self.estops = 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self.serve, path=self.path)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = len(self.connections)
        self.connections.append(writer)
        writer.write(protocol.encode({"type": "hello", "protocol": protocol.PROTOCOL, "version": protocol.VERSION,
                                      "pid": self.pid, "robot": {"name": "fake"}}))
        try:
            while True:
                header, _ = await protocol.read_frame(reader)
                method = header.get("method")
                if header.get("type") != "request" or method == "hang":
                    continue
                if method == "estop":
                    if n in self.drop_on_estop:
                        writer.transport.abort()
                        return
                    self.estops += 1
                result = {"ok": True, "topics": []} if method == "subscribe" else {"state": "estop", "seq": 1}
                writer.write(protocol.encode({"type": "response", "id": header["id"], "result": result}))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    def drop(self) -> None:
        self.connections[-1].transport.abort()

    async def stop(self) -> None:
        self.server.close()
        for w in self.connections:
            w.transport.abort()


async def connected(tmp_path, pid: int | None = None) -> tuple[FakeRuntime, RuntimeClient]:
    fake = FakeRuntime(str(tmp_path / "rt.sock"), os.getpid() if pid is None else pid)
    await fake.start()
    rt = RuntimeClient(fake.path, request_timeout_s=20.0)
    rt.start()
    assert await rt.wait_connected(10)
    return fake, rt


async def wait_for(predicate, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():  # noqa: ASYNC110 - the client's own state, polled with a deadline
            await asyncio.sleep(0.01)


async def test_a_lost_link_fails_every_pending_request_at_once(tmp_path) -> None:
    fake, rt = await connected(tmp_path)
    try:
        hung = [asyncio.ensure_future(rt.request("hang")) for _ in range(3)]
        await wait_for(lambda: rt.pending() == 3)
        fake.drop()
        results = await asyncio.wait_for(asyncio.gather(*hung, return_exceptions=True), 5)  # not their 20 s timeout
        assert all(isinstance(r, LinkLostError) and r.code == "runtime_link_lost" for r in results), results
        assert rt.pending() == 0
        await wait_for(lambda: rt.connected and rt.connects == 2)
        assert not rt.down and rt.link_losses == 1
    finally:
        await rt.stop()
        await fake.stop()


async def test_a_request_that_does_not_encode_fails_before_it_is_registered(tmp_path) -> None:
    fake, rt = await connected(tmp_path)
    try:
        for params in ({"limit": 2 ** 70}, {"pad": "x" * (5 * 1024 * 1024)}):
            with pytest.raises(ApiError) as err:
                await rt.request("events", params)
            assert err.value.code == "too_large" and err.value.status == 413
            assert rt.pending() == 0
        assert (await rt.request("state"))["seq"] == 1  # the link carries on
    finally:
        await rt.stop()
        await fake.stop()


async def test_an_estop_lost_in_flight_is_retried_on_the_next_link(tmp_path) -> None:
    fake, rt = await connected(tmp_path)
    try:
        outcome = await rt.estop()
        assert outcome == {"state": "estop", "latch": "retried", "attempts": 2}, outcome
        assert fake.estops == 1 and rt.estops_retried == 1 and rt.pending() == 0
        await wait_for(lambda: rt.connected and rt.connects == 2)
        assert (await rt.estop())["latch"] == "confirmed"
    finally:
        await rt.stop()
        await fake.stop()


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that ran and was reaped."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


async def test_a_runtime_whose_process_is_gone_is_down_at_once(tmp_path, dead_pid: int) -> None:
    assert not process_alive(dead_pid) and process_alive(os.getpid())
    fake, rt = await connected(tmp_path, pid=dead_pid)
    try:
        fake.server.close()  # no reconnecting to it
        outcome = await rt.estop()  # the e-stop's connection drops: the runtime is dead, no retry
        assert outcome["latch"] == "runtime_down" and outcome["state"] == "fault", outcome
        await wait_for(lambda: rt.down)
        with pytest.raises(RuntimeDownError) as err:
            await rt.request("state")
        assert err.value.code == "runtime_down"
    finally:
        await rt.stop()
        await fake.stop()
