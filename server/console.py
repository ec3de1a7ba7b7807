"""``python -m server.console``: talk to the robot runtime without the gateway.

A small client of the runtime API (docs/runtime-api.md) for a person at a terminal:
send commands, watch snapshots and events. It finds the runtime's socket from the
profile (``[server] runtime_socket``) or ``--socket``.

Examples::

    python -m server.console --socket /tmp/teleop-x/runtime.sock call start
    python -m server.console --socket ... call setpoint '{"setpoint": {"linear": 0.2, "angular": 0}}'
    python -m server.console --socket ... watch --count 5      # five snapshots, one line each
    python -m server.console --socket ...                      # interactive: type "help"

Remember the link rule: while running, the robot stops by itself unless a command or a
``heartbeat`` arrives every ``safety.command_timeout_s`` (``keepalive`` in the interactive
console sends one every 0.2 s) from **the holder of control**. The console holds it only once it
takes it explicitly: ``control`` in the interactive console, ``--control`` before ``call``. It takes
it from the gateway's operator (whose commands then keep nothing alive) until the console quits;
the gateway gets it back then.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import socket
import sys
import threading
import time
from typing import Any

from server.runtime_api import protocol


class Console:
    """A blocking runtime API client: one reader thread, requests matched to replies by id."""

    def __init__(self, socket_path: str, timeout_s: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(socket_path)
        self.timeout_s = timeout_s
        self.ids = itertools.count(1)
        self.replies: dict[int, dict[str, Any]] = {}
        self.cond = threading.Condition()
        self.on_notify = lambda header, payload: None
        self.principal: str | None = None  # set by take_control: the requests' principal
        header, _ = protocol.read_frame_sync(self.sock)
        if header.get("type") != "hello" or header.get("protocol") != protocol.PROTOCOL:
            raise ConnectionError(f"not a teleop runtime: {header}")
        if header.get("version") != protocol.VERSION:
            raise ConnectionError(f"runtime API version {header.get('version')}, this console speaks {protocol.VERSION}")
        self.hello = header
        self.sock.sendall(protocol.encode({"type": "hello", "version": protocol.VERSION, "client": "console"}))
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                header, payload = protocol.read_frame_sync(self.sock)
                if header.get("type") == "response":
                    with self.cond:
                        self.replies[header.get("id")] = header
                        self.cond.notify_all()
                else:
                    self.on_notify(header, payload)
        except (EOFError, OSError, protocol.ProtocolError):
            with self.cond:
                self.closed = True
                self.cond.notify_all()

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The result, or raises ``RuntimeError`` with the runtime's error."""
        req_id = next(self.ids)
        header = {"type": "request", "id": req_id, "method": method, "params": params or {}}
        if self.principal is not None:
            header["principal"] = self.principal
        self.sock.sendall(protocol.encode(header))
        deadline = time.monotonic() + self.timeout_s
        with self.cond:
            while req_id not in self.replies:
                if self.closed:
                    raise ConnectionError("the runtime closed the connection")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no answer to {method} within {self.timeout_s:g} s")
                self.cond.wait(left)
            reply = self.replies.pop(req_id)
        if "error" in reply:
            err = reply["error"]
            raise RuntimeError(f"{err.get('status')} {err.get('code')}: {err.get('message')}")
        return reply["result"]

    def take_control(self, principal: str = "console") -> dict[str, Any]:
        """Hold control (the robot's link-loss watchdog counts this console's commands) until this connection
        closes or someone else takes it."""
        result = self.call("control", {"principal": principal})
        self.principal = principal
        return result

    def close(self) -> None:
        """End the connection now (a plain ``close`` waits for the reader thread's ``recv``: the runtime would
        not see the end, nor give control back, until this process exits)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def summary(snap: dict[str, Any]) -> str:
    v = snap.get("values") or {}
    sp = snap.get("setpoint") or {}
    parts = [f"#{snap.get('seq')}", snap.get("state", "?")]
    if snap.get("cause"):
        parts.append(f"({snap['cause']['trigger']}: {snap['cause']['message']})")
    parts.append("setpoint " + " ".join(f"{k}={val}" for k, val in sp.items() if val is not None))
    for key in ("linear_m_s", "angular_rad_s", "range_front_m", "battery_v"):
        if v.get(key) is not None:
            parts.append(f"{key}={v[key]:.3f}")
    return "  ".join(parts)


HELP = """commands:
  state | events [N] | describe | acquisition
  start | stop | estop [reason] | reset | heartbeat
  speed LINEAR ANGULAR [TTL]     (rover setpoint, m/s and rad/s)
  control                        (take control: only the holder's commands keep the robot alive)
  keepalive on|off               (a heartbeat every 0.2 s)
  watch on|off                   (print snapshots and events as they come)
  call METHOD [JSON-PARAMS]      (any runtime API method)
  quit"""


def interactive(console: Console) -> int:
    watching = {"on": False}
    keepalive = {"on": False}

    def notify(header: dict[str, Any], payload: bytes) -> None:
        if not watching["on"]:
            return
        if header.get("type") == "snapshot":
            print("  " + summary(json.loads(payload)), flush=True)
        elif header.get("type") == "event":
            e = header["data"]
            print(f"  event {e['trigger']}: {e['message']}", flush=True)

    def beat() -> None:
        while True:
            time.sleep(0.2)
            if keepalive["on"]:
                try:
                    console.call("heartbeat")
                except (RuntimeError, OSError, TimeoutError):
                    pass

    console.on_notify = notify
    threading.Thread(target=beat, daemon=True).start()
    console.call("subscribe", {"topics": ["snapshot", "event"]})
    print(f"connected to the runtime (pid {console.hello.get('pid')}, robot {console.hello['robot']['name']!r}); "
          "type help")
    for line in sys.stdin:
        words = shlex.split(line)
        if not words:
            continue
        cmd, args = words[0], words[1:]
        try:
            if cmd in ("quit", "exit"):
                return 0
            if cmd == "help":
                print(HELP)
            elif cmd == "watch":
                watching["on"] = args[:1] != ["off"]
            elif cmd == "control":
                print(console.take_control(args[0] if args else "console"))
            elif cmd == "keepalive":
                keepalive["on"] = args[:1] != ["off"]
            elif cmd == "speed":
                params: dict[str, Any] = {"setpoint": {"linear": float(args[0]), "angular": float(args[1])},
                                          "source": "console"}
                if len(args) > 2:
                    params["ttl_s"] = float(args[2])
                print(console.call("setpoint", params))
            elif cmd == "estop":
                print(console.call("estop", {"reason": " ".join(args)} if args else {}))
            elif cmd == "state":
                print(summary(console.call("state")))
            elif cmd == "events":
                for e in console.call("events", {"limit": int(args[0]) if args else 20})["events"]:
                    print(f"  {e['trigger']}: {e['message']} ({e['state_before']} → {e['state_after']})")
            elif cmd == "call":
                print(json.dumps(console.call(args[0], json.loads(args[1]) if len(args) > 1 else {}), indent=1))
            else:
                print(json.dumps(console.call(cmd), indent=1))
        except (RuntimeError, ValueError, IndexError, TimeoutError) as err:
            print(f"error: {err}")
        except ConnectionError as err:
            print(f"error: {err}")
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m server.console", description=__doc__.split("\n\n")[1],
                                epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", help="the runtime's socket (default: [server] runtime_socket of --config)")
    p.add_argument("--config", help="the profile to read the socket path from")
    sub = p.add_subparsers(dest="mode")
    c = sub.add_parser("call", help="one request; prints the result as JSON")
    c.add_argument("--control", action="store_true", help="take control first (for start, setpoint, heartbeat)")
    c.add_argument("method")
    c.add_argument("params", nargs="?", default="{}", help="JSON object")
    w = sub.add_parser("watch", help="print snapshots (one line each) and events")
    w.add_argument("--count", type=int, default=0, help="stop after this many snapshots (0: until Ctrl-C)")
    args = p.parse_args(argv)
    path = args.socket
    if path is None and args.config:
        from server.config import load_config

        path = load_config(args.config, tables=("server",)).server.runtime_socket or None
    if not path:
        p.error("give --socket (python -m server prints it at start-up) or a --config with [server] runtime_socket")
    try:
        console = Console(path)
    except (OSError, ConnectionError) as err:
        print(f"cannot reach the runtime at {path}: {err}", file=sys.stderr)
        return 1
    try:
        if args.mode == "call":
            try:
                if args.control:
                    console.take_control()
                print(json.dumps(console.call(args.method, json.loads(args.params)), indent=1))
            except RuntimeError as err:
                print(err, file=sys.stderr)
                return 1
            return 0
        if args.mode == "watch":
            done = threading.Event()
            count = [0]

            def notify(header: dict[str, Any], payload: bytes) -> None:
                if done.is_set():  # --count reached: what comes before the socket closes is not printed
                    return
                if header.get("type") == "snapshot":
                    print(summary(json.loads(payload)), flush=True)
                    count[0] += 1
                    if args.count and count[0] >= args.count:
                        done.set()
                elif header.get("type") == "event":
                    print(f"event {header['data']['trigger']}: {header['data']['message']}", flush=True)

            console.on_notify = notify
            console.call("subscribe", {"topics": ["snapshot", "event"]})
            try:
                while not done.wait(0.2) and not console.closed:
                    pass
            except KeyboardInterrupt:
                pass
            return 0
        return interactive(console)
    finally:
        console.close()


if __name__ == "__main__":
    sys.exit(main())
