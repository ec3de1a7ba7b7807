"""Shared fixtures: the real server in a subprocess on an ephemeral port, and waiting with deadlines."""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Callable

import pytest
import tomli_w

# the link emulator's fixtures (link_factory, linked_server, operator_browser) for every test directory
pytest_plugins = ["tests.linkemu.plugin"]

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = "config/rover-sim.toml"
START_TIMEOUT_S = 60.0  # a deadline, not a figure: a loaded 2-core CI box has taken over 30 s


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def wait_until(predicate: Callable[[], Any], timeout_s: float = 10.0, message: str = "condition",
               interval_s: float | None = None) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned) or fail after ``timeout_s``.

    Every ``interval_s`` when given; by default every 10 ms at first, slowing to every 50 ms (a poll is
    usually an HTTP request: at 100 Hz for a wait of seconds, client and server spent ~7 % of a core on it)."""
    deadline = time.monotonic() + timeout_s
    step = 0.01 if interval_s is None else interval_s
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
        time.sleep(step)
        if interval_s is None:
            step = min(step * 1.5, 0.05)


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (as aiohttp binds: SO_REUSEADDR, so TIME_WAIT is no
    obstacle; a listener is)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


#: every ServerProc made during the current test (cleared before each), and every one still running (a module's
#: shared server): their output's tail is attached to a failing test's report, so a flake in CI says what the
#: server saw
_SERVERS: list["ServerProc"] = []
_LIVE: "weakref.WeakSet[ServerProc]" = weakref.WeakSet()

_LISTENING = re.compile(r"teleop listening on https?://\S+?:(\d+)")


class ServerProc:
    """``python -m server`` as a child process, talked to over real HTTP."""

    host = "127.0.0.1"  # where the tests reach it (tests/linkemu/plugin.py's LinkedServer: across a link)

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []
        self._ready = threading.Event()
        _SERVERS.append(self)  # its log goes into the report of a test that fails (pytest_runtest_makereport)
        _LIVE.add(self)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "server", "--config", str(self.config_path), "--port", str(self.port),
                "--log-level", "INFO"]

    def start(self) -> "ServerProc":
        # a restart: the last process's pump thread ends first. Its "the output ended" wake-up checked that its
        # process was still the current one and then set the event, and a start in between (after a kill)
        # cleared the event before that set: the new start woke at once and said the hub "did not start"
        # (a fresh-clone run)
        if (previous := getattr(self, "_pump_thread", None)) is not None:
            previous.join(10)
        self._ready.clear()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # its three interpreters compile the sources once, not every start
        self.proc = subprocess.Popen(
            self.command(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        self._listening = False
        self._pump_thread = threading.Thread(target=self._pump, args=(self.proc,), daemon=True)
        self._pump_thread.start()
        t0 = time.monotonic()
        if not self._ready.wait(START_TIMEOUT_S) or not self._listening or self.proc.poll() is not None:
            out = "".join(self.output[-40:])
            self.kill()
            raise RuntimeError(f"{self.what} did not start:\n{out}")
        if (starts := os.environ.get("TELEOP_TEST_STARTS")):  # where the suite starts servers (docs/development.md)
            with open(starts, "a") as f:
                f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\t{self.what}\t{time.monotonic() - t0:.2f}\n")
        return self

    what = "server"

    def _pump(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output.append(line)
            if (m := _LISTENING.search(line)):  # a child's log line may share the line: take the port only
                self.port = int(m.group(1))
                self._listening = True
                self._ready.set()
        if proc is self.proc:  # (start() joins this thread before it starts another process)
            self._ready.set()  # the output ended: it exited (a config error) — no need to wait out the deadline

    def log_line(self, predicate: "str | Callable[[str], bool]", timeout_s: float = 30.0) -> str:
        """The first line of the server's output with ``predicate`` in it (or true of it), waiting for it: the
        output is read from the server's pipe by a thread, so a line logged before an answer may come after it."""
        test = (lambda line: predicate in line) if isinstance(predicate, str) else predicate
        return wait_until(lambda: next((line for line in list(self.output) if test(line)), None), timeout_s,
                          f"a line {predicate!r} in the {self.what}'s log")

    def drain(self, timeout_s: float = 10.0) -> list[str]:
        """Once the process has exited: wait until its whole output has been read; returns it."""
        thread = getattr(self, "_pump_thread", None)
        if thread is not None:
            thread.join(timeout_s)
        return self.output

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM and wait (its output read to the end); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            code = self.proc.returncode if self.proc else 0
            self.drain()
            return code
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("server did not exit within %s s of SIGTERM" % timeout_s)
        self.drain()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> "ServerProc":
        """Kill and start again on the same port. The launcher's children (the gateway holding the port, the
        runtime) die on their own once it is gone (PR_SET_PDEATHSIG), a moment later: the new gateway must not
        meet the old one still listening (exit 3, "cannot listen"), so wait until the port is free."""
        self.kill()
        if self.port and self.host == "127.0.0.1":
            wait_until(lambda: port_free(self.host, self.port), 30, f"port {self.port} to be free after the kill")
        # the old output's end (its children hold the pipe a moment longer): a pump that ends while start() is
        # swapping self.proc would take itself for the new one's and wake start() before it listens
        old = getattr(self, "_pump_thread", None)
        if old is not None:
            old.join(30)
            assert not old.is_alive(), "the killed server's output did not end within 30 s"
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
#: the stall stop (loop.max_stall_s, 0.1 s by default) at 1 s: on a loaded machine (three workers, a browser) a tick
#: of the runtime was 0.135-0.16 s late now and then, and a test about a rule, a mission or a page got a stall e-stop
#: it did not ask for. The stall stop is tested where it is the subject (tests/server/test_lifecycle.py: a frozen
#: runtime; tests/server/runtime/test_loop.py: the limit itself). No spin tail before each tick (loop.spin_us, 200 by
#: default): it trims ~0.1 ms off the loop's jitter, which no test asserts, at ~2 % of a core per running server,
#: spun at real-time priority on a machine the suite keeps busy (the sleep-then-spin wait has its own test in
#: tests/server/runtime/test_loop.py; `make bench` measures the profile's own setting)
TEST_DEFAULTS = {"debug": {"routes": True}, "video": {"enabled": False}, "loop": {"max_stall_s": 1.0, "spin_us": 0.0}}



async def next_of(ws, kind: str, timeout_s: float = 10.0) -> dict:
    """The next text message of ``kind`` on an aiohttp websocket (others skipped), within ``timeout_s``."""
    import aiohttp

    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no {kind!r} message within {timeout_s} s")
        msg = await asyncio.wait_for(ws.receive(), remaining)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        data = json.loads(msg.data)
        if data["type"] == kind:
            return data

@pytest.fixture
def server_factory(tmp_path: Path):
    started: list[ServerProc] = []

    def make(config_overrides: dict | None = None, config: str = DEFAULT_CONFIG) -> ServerProc:
        base = tomllib.loads((REPO / config).read_text())
        # no users unless a test adds some (a users file in the checkout must not turn login on), and no state
        # from the checkout's state/ (a magnetometer calibration left there by a run steered later rovers)
        hermetic = {"auth": {"users_file": str(tmp_path / "users.json")},
                    "server": {"state_dir": str(tmp_path / "state")}}
        merged = deep_merge(deep_merge(deep_merge(base, TEST_DEFAULTS), hermetic), config_overrides or {})
        path = tmp_path / f"config-{len(started)}.toml"
        path.write_text(tomli_w.dumps(merged))
        proc = ServerProc(path)
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.kill()


def module_server(tmp_path_factory, overrides: dict | None = None, config: str = DEFAULT_CONFIG) -> ServerProc:
    """A started server for a module's tests to share (issue 19 §7: one start instead of one a test), with the
    tests' defaults and no users; the module's fixture kills it and resets it between tests as they need."""
    directory = tmp_path_factory.mktemp("shared-server")
    base = tomllib.loads((REPO / config).read_text())
    hermetic = {"auth": {"users_file": str(directory / "users.json")}, "server": {"state_dir": str(directory / "state")}}
    path = directory / "config.toml"
    path.write_text(tomli_w.dumps(deep_merge(deep_merge(deep_merge(base, TEST_DEFAULTS), hermetic), overrides or {})))
    return ServerProc(path).start()


@pytest.fixture
def server(server_factory) -> ServerProc:
    """The default simulated rover with debug routes on."""
    return server_factory()


@pytest.fixture
def wait_for():
    return wait_until


# ---------------------------------------------------------------------- tiers (issue 19 §7)
#: what in a test module's source means it starts processes (the real server, replay, an emulator, the CLI)
_PROCESS_MARKS = ("server_factory", "subprocess.", "Popen(", "multiprocessing", "E2EServer", "E2EReplay",
                  "skip_unless_links",  # a module that builds emulated links (namespaces, a delay-line process)
                  "real_run", "ServerProc(")
_MODULE_TIER: dict[str, str] = {}


def _module_tier(path: Path) -> str:
    key = str(path)
    if key not in _MODULE_TIER:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            text = ""
        _MODULE_TIER[key] = "server" if any(m in text for m in _PROCESS_MARKS) else "unit"
    return _MODULE_TIER[key]


_LINK_FIXTURES = ("link_factory", "linked_server", "operator_browser")


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (servers, browsers, tools: each is waited for)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _SERVERS.clear()
    cpu_log = os.environ.get("TELEOP_TEST_CPU")  # where the suite's CPU goes (docs/development.md)
    t0, c0, start = time.monotonic(), _cpu_s() if cpu_log else 0.0, time.time()
    try:
        return (yield)
    finally:
        _SERVERS.clear()
        if cpu_log:  # a module's shared server ends in its last test's teardown: counted there
            with open(cpu_log, "a") as f:
                f.write(f"{item.nodeid}\t{time.monotonic() - t0:.2f}\t{_cpu_s() - c0:.2f}\t{start:.2f}\t"
                        f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if report.failed:
        alive = [srv for srv in list(_LIVE) if srv not in _SERVERS and srv.proc is not None and srv.proc.poll() is None]
        for n, srv in enumerate([*_SERVERS, *alive]):
            tail = "".join(srv.output[-80:])
            if tail:
                report.sections.append((f"{srv.what} {n} log (last 80 lines)", tail))
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets one tier: ``e2e`` (tests/e2e: Chromium), ``server`` (it starts the real server or another
    process: its fixtures reach ``server_factory`` or the link emulator's, or its module starts processes), else
    ``unit`` (in
    process). ``make test-fast`` runs ``-m unit``; ``make test`` (CI) runs all three. A test marked by hand
    keeps its mark. Across the tiers, ``link`` marks the link emulator's tests (tests/linkemu, or a test on its
    fixtures: network namespaces, root): ``-m link`` runs them."""
    for item in items:
        path = Path(str(item.fspath))
        if "linkemu" in path.parts or any(f in getattr(item, "fixturenames", ()) for f in _LINK_FIXTURES):
            item.add_marker(pytest.mark.link)
        if any(item.get_closest_marker(m) for m in ("unit", "server", "e2e")):
            continue
        if "e2e" in path.parts:
            item.add_marker(pytest.mark.e2e)
        elif (any(f in getattr(item, "fixturenames", ()) for f in ("server_factory", *_LINK_FIXTURES))
              or _module_tier(path) == "server"):  # the link's namespaces and delay lines are processes
            item.add_marker(pytest.mark.server)
        else:
            item.add_marker(pytest.mark.unit)
    items[:] = _longest_files_first(items)


#: each test file's wall seconds in a measured run (scripts/file-durations.py writes it)
FILE_DURATIONS = Path(__file__).with_name("file-durations.txt")


def _longest_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The tests, a file's together and in its order, the files longest first (tests/file-durations.txt; a file
    not listed after those, in collection order). The workers take whole files in this order (``--dist loadfile
    --no-loadscope-reorder``, Makefile): a long file started last kept one worker busy ~110 s after the other
    two had finished (xdist's own order puts the files with the most tests first, and most long files have one
    or a few)."""
    seconds: dict[str, float] = {}
    if FILE_DURATIONS.exists():
        for line in FILE_DURATIONS.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                secs, name = line.split()
                seconds[name] = float(secs)
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = sorted(by_file, key=lambda name: -seconds.get(name, 0.0))  # stable: the unlisted keep their order
    return [item for name in order for item in by_file[name]]
