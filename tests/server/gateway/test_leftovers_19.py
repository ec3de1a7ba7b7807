"""Issue 19's leftovers at the gateway, in process on a fake runtime: /healthz through a link gap, stopping the
always-on recording (the black box) is for an admin."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from server.gateway.auth import AUTH_KEY
from server.gateway.observability.health import HealthMonitor
from server.gateway.observability.metrics import Metrics
from server.gateway.observability.setup import Observability
from server.gateway.telemetry import TelemetryHub
from tests.server.gateway.fake_runtime import FakeRuntime, description, gateway

pytestmark = pytest.mark.unit


async def test_healthz_follows_the_runtime_not_the_raw_link() -> None:
    """A link being re-established while the runtime lives is no runtime down (main: /healthz failed for up to
    LINK_GRACE_S, the raw ``connected``)."""
    rt = FakeRuntime(description())
    rt.start()
    health = HealthMonitor()
    obs = Observability(web.Application(), rt, TelemetryHub(), lambda: {}, Metrics(), health)
    health.update_from_snapshot({"state": "running", "rate_hz": 100.0, "measured_hz": 100.0})
    rt.connected = False  # the link dropped; the runtime lives (down_since stays None for the grace)
    assert not rt.down
    await obs.sample()
    assert health.check()[1]["checks"]["runtime"]["ok"] is True
    rt.down_since = 0.0  # now it is down
    await obs.sample()
    assert health.check()[1]["checks"]["runtime"]["ok"] is False


@pytest.fixture
def logged_in(tmp_path):
    from tests.server.gateway.auth.client import CHEAP_HASHER, make_users

    return lambda: gateway(tmp_path, users=make_users, hasher=CHEAP_HASHER,
                           tables={"recording": {"dir": str(tmp_path / "rec"), "always_on": True}})


async def test_stopping_the_black_box_is_for_an_admin(logged_in) -> None:
    async with logged_in() as (client, _rt):
        svc = client.server.app[AUTH_KEY]

        def bearer(user: str, lease: bool = True) -> dict[str, str]:
            token, session = svc.sessions.create(user, via="bearer", remote="127.0.0.1")
            if lease:
                svc.lease.take(session.id, user, force=True)
            return {"Authorization": f"Bearer {token}"}

        vera = bearer("vera", lease=False)

        async def status() -> dict:
            return await (await client.get("/api/recordings/status", headers=vera)).json()

        # the always-on one: the writer thread opens its file after start-up, so wait for it (CI once asked first)
        deadline = asyncio.get_running_loop().time() + 20.0
        while not (st := await status())["recording"]:
            assert asyncio.get_running_loop().time() < deadline, f"the always-on recording never started: {st}"
            await asyncio.sleep(0.05)
        assert st["name"] is None
        otto = bearer("otto")
        r = await client.post("/api/recordings/stop", json={}, headers=otto)
        assert r.status == 403 and (await r.json())["error"]["code"] == "forbidden"
        assert (await status())["recording"] is True
        # a named recording: its lease holder stops it (the always-on one resumes)
        assert (await client.post("/api/recordings/start", json={"name": "run"}, headers=otto)).status == 200
        assert (await client.post("/api/recordings/stop", json={}, headers=otto)).status == 200
        ada = bearer("ada")
        assert (await client.post("/api/recordings/stop", json={}, headers=ada)).status == 200
