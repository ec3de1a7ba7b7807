"""Shared fixtures: the real server in a subprocess on an ephemeral port, and waiting with deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest
import tomli_w

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = "config/rover-sim.toml"
START_TIMEOUT_S = 30.0


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def wait_until(predicate: Callable[[], Any], timeout_s: float = 10.0, message: str = "condition",
               interval_s: float = 0.01) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned) or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (AssertionError, KeyError, OSError, ValueError) as exc:  # not ready yet
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {message}"
                                 + (f" (last error: {last_exc!r})" if last_exc else ""))
        time.sleep(interval_s)


class ServerProc:
    """``python -m server`` as a child process, talked to over real HTTP."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> "ServerProc":
        self._ready.clear()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server", "--config", str(self.config_path), "--port", str(self.port),
             "--log-level", "INFO"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        if not self._ready.wait(START_TIMEOUT_S) or self.proc.poll() is not None:
            out = "".join(self.output[-40:])
            self.kill()
            raise RuntimeError(f"server did not start:\n{out}")
        return self

    def _pump(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output.append(line)
            if "teleop listening on http://" in line:
                self.port = int(line.strip().rsplit(":", 1)[1])
                self._ready.set()

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("server did not exit within %s s of SIGTERM" % timeout_s)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> "ServerProc":
        self.kill()
        return self.start()

    # ---- HTTP helpers
    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None, timeout_s: float = 10.0) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        hdrs = {"content-type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                payload = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            payload = err.read()
            status = err.code
        try:
            return status, json.loads(payload) if payload else None
        except ValueError:
            return status, payload

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> tuple[int, Any]:  # noqa: A002 - mirrors requests
        return self.request("POST", path, body=json, **kw)

    def put(self, path: str, json: Any = None, **kw: Any) -> tuple[int, Any]:  # noqa: A002
        return self.request("PUT", path, body=json, **kw)

    def state(self) -> dict[str, Any]:
        status, body = self.get("/api/state")
        assert status == 200, body
        return body


# debug routes on (fault injection, event-loop blocking); video off unless a test turns it on (saves CPU)
TEST_DEFAULTS = {"debug": {"routes": True}, "video": {"enabled": False}}


@pytest.fixture
def server_factory(tmp_path: Path):
    started: list[ServerProc] = []

    def make(config_overrides: dict | None = None, config: str = DEFAULT_CONFIG) -> ServerProc:
        base = tomllib.loads((REPO / config).read_text())
        # no users unless a test adds some (a users file in the checkout must not turn login on)
        hermetic = {"auth": {"users_file": str(tmp_path / "users.json")}}
        merged = deep_merge(deep_merge(deep_merge(base, TEST_DEFAULTS), hermetic), config_overrides or {})
        path = tmp_path / f"config-{len(started)}.toml"
        path.write_text(tomli_w.dumps(merged))
        proc = ServerProc(path)
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.kill()


@pytest.fixture
def server(server_factory) -> ServerProc:
    """The default simulated rover with debug routes on."""
    return server_factory()


@pytest.fixture
def wait_for():
    return wait_until
