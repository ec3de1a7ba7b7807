"""The fleet tests' router: ``python -m server router`` on a loopback port of its own (killed and restarted by the
tests that need it)."""

import pytest

from tests.server.fleet.fleetkit import RouterProc


@pytest.fixture
def router():
    r = RouterProc().start()
    yield r
    r.kill()
