"""The gateway and the hub map their start-up errors alike (server/gateway/serve.py ``run_served``): an address
already in use is exit 3 with a message that says so, for both processes, run as their commands are."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.conftest import REPO
from tests.server.fleet.fleetkit import free_port, hub_keys


def busy_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_gateway_on_a_port_in_use_exits_3_saying_so(tmp_path) -> None:
    sock, port = busy_port()
    with sock:
        proc = run(["server.gateway", "--socket", str(tmp_path / "none.sock"), "--host", "127.0.0.1",
                    "--port", str(port), "--set", f"server.state_dir={tmp_path / 'state'}"])
    assert proc.returncode == 3, proc.stderr
    assert "gateway cannot listen" in proc.stderr and "address already in use" in proc.stderr, proc.stderr


def test_the_hub_on_a_port_in_use_exits_3_saying_so(tmp_path) -> None:
    private, _ = hub_keys(tmp_path)
    config = tmp_path / "hub.toml"
    config.write_text(f'[hub]\nkey_file = "{private}"\nrouter = ["tcp/127.0.0.1:{free_port()}"]\n'
                      f'[server]\nstate_dir = "{tmp_path / "state"}"\n')
    sock, port = busy_port()
    with sock:
        proc = run(["server", "hub", "--config", str(config), "--host", "127.0.0.1", "--port", str(port)])
    assert proc.returncode == 3, proc.stderr
    assert "hub cannot listen" in proc.stderr and "address already in use" in proc.stderr, proc.stderr
