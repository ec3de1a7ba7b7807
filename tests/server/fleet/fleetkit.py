"""Test support for the fleet: a Zenoh router as a child process (``python -m server router``, on a loopback port
of its own, killed and restarted by the tests), the hub's keys, and a bare Zenoh client that speaks for the hub
(signed) or for a hostile neighbour (unsigned, or signed with another key)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import zenoh
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from server.gateway.fleet.keys import FleetKeys, RobotKeys
from server.gateway.fleet.link import zenoh_config
from server.gateway.fleet.trust import Signer, new_keypair

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RouterProc:
    """``python -m server router --listen tcp/127.0.0.1:<port>``; the same port across restarts."""

    def __init__(self, port: int | None = None, args: list[str] | None = None) -> None:
        self.port = port or free_port()
        self.args = args or []
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"tcp/127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> "RouterProc":
        ready = threading.Event()
        cmd = [sys.executable, "-m", "server", "router", *(self.args or ["--listen", self.endpoint])]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))

        def pump(proc: subprocess.Popen) -> None:
            for line in proc.stdout:
                self.output.append(line)
                if "teleop router listening" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=pump, args=(self.proc,), daemon=True).start()
        if not ready.wait(timeout_s) or self.proc.poll() is not None:
            raise RuntimeError("router did not start:\n" + "".join(self.output[-30:]))
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def restart(self) -> "RouterProc":
        self.kill()
        return self.start()


def hub_keys(tmp: Path) -> tuple[Path, Path]:
    private, public = tmp / "hub.key", tmp / "hub.pub"
    if not private.exists():
        new_keypair(private, public)
    return private, public


class ZClient:
    """A bare Zenoh client on the router: the hub's voice (``signer``) or a neighbour's (None: unsigned)."""

    def __init__(self, endpoint: str, fleet: str, signer: Signer | None = None, **tls: str) -> None:
        self.fleet = fleet
        self.keys = FleetKeys(fleet)
        self.signer = signer
        self.session = zenoh.open(zenoh_config("client", connect=[endpoint], **tls))
        self.received: dict[str, list[Any]] = {}
        self.live: dict[str, bool] = {}
        self._lock = threading.Lock()
        self.subs = [self.session.declare_subscriber(f"teleop/{fleet}/**", self._on_sample),
                     self.session.liveliness().declare_subscriber(f"teleop/{fleet}/*/alive", self._on_live,
                                                                  history=True)]

    def _on_sample(self, sample: zenoh.Sample) -> None:
        key = str(sample.key_expr)
        with self._lock:
            self.received.setdefault(key, []).append(json.loads(sample.payload.to_bytes()))

    def _on_live(self, sample: zenoh.Sample) -> None:
        self.live[str(sample.key_expr).split("/")[2]] = sample.kind == zenoh.SampleKind.PUT

    def samples(self, robot: str, leaf: str) -> list[Any]:
        with self._lock:
            return list(self.received.get(f"teleop/{self.fleet}/{robot}/{leaf}", []))

    def rpc(self, robot: str, op: str, *, user: str = "alice", role: str = "operator", session: str = "s1",
            signer: Signer | None | bool = True, timeout_s: float = 10.0, raw: bytes | None = None,
            attachment: bytes | None = None, **fields: Any) -> dict[str, Any] | None:
        """One request; the robot's reply as a dict (None: no reply)."""
        req = {"op": op, "fleet": self.fleet, "robot": robot, "user": user, "role": role, "session": session,
               **fields}
        use = self.signer if signer is True else (signer or None)
        if raw is not None:
            payload, sig = raw, attachment
        elif use is not None:
            payload, sig = use.sign(req)
        else:
            payload, sig = json.dumps(req).encode(), attachment
        for reply in self.session.get(RobotKeys(self.fleet, robot).rpc, payload=payload, attachment=sig,
                                      timeout=timeout_s):
            if reply.ok is not None:
                return json.loads(reply.ok.payload.to_bytes())
        return None

    def close(self) -> None:
        self.session.close()


def foreign_signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


def wait(predicate, timeout_s: float = 30.0, what: str = "condition", interval_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def hub_config(tmp: Path, router: "RouterProc", fleet: str, private: Path, users: dict[str, str] | None = None,
               **hub: Any) -> Path:
    """A hub's TOML file (its own users file; users: name → role, password ``pw-<name>-12345``)."""
    import tomli_w

    users_file = tmp / "hub-users.json"
    for name, role in (users or {}).items():
        subprocess.run([sys.executable, "-m", "server", "users", "--file", str(users_file), "add", name, "--role",
                        role, "--password-stdin"], input=f"pw-{name}-12345\n", text=True, check=True, cwd=REPO,
                       capture_output=True)
    path = tmp / "hub.toml"
    path.write_text(tomli_w.dumps({
        "server": {"host": "127.0.0.1", "port": 0},
        "auth": {"users_file": str(users_file)},
        "hub": {"router": [router.endpoint], "fleet": fleet, "key_file": str(private),
                "events_dir": str(tmp / "fleet-events"), **hub}}))
    return path


def hub_proc(config: Path):
    from tests.conftest import ServerProc

    class HubProc(ServerProc):
        what = "hub"

        def command(self) -> list[str]:
            return [sys.executable, "-m", "server", "hub", "--config", str(self.config_path), "--port", "0"]

        def _pump(self, proc: subprocess.Popen) -> None:
            for line in proc.stdout:
                self.output.append(line)
                if m := re.search(r"teleop hub listening on http://\S+?:(\d+)", line):
                    self.port = int(m.group(1))
                    self._listening = True
                    self._ready.set()
            self._ready.set()

    return HubProc(config)


def login(srv, name: str) -> dict[str, str]:
    status, body = srv.post("/api/auth/login", {"username": name, "password": f"pw-{name}-12345", "bearer": True})
    assert status == 200, body
    return {"Authorization": f"Bearer {body['token']}"}


class Repeat:
    """``fn()`` every ``period_s`` from a thread until the block ends (a hub's or a page's heartbeats); a call that
    fails (the router or the hub is gone) is tried again next period, as the real senders do."""

    def __init__(self, fn, period_s: float = 0.1) -> None:
        self.fn, self.period_s = fn, period_s
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop_flag.is_set():
            try:
                self.fn()
            except Exception:  # noqa: BLE001 - the far end is gone for now
                pass
            self.stop_flag.wait(self.period_s)

    def __enter__(self) -> "Repeat":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_flag.set()
        self.thread.join(5)
