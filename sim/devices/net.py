"""Serve an emulated device over UDP or TCP, as :class:`sim.devices.pty.PtyRunner` serves one on a pty.

Network links are how most MAVLink vehicles meet a ground station (ArduPilot SITL sends UDP to a GCS's
port 14550 and serves TCP on 5760; a companion computer's router forwards UDP), so the MAVLink emulator
runs on these as well as on a pty. Same model as the pty runner: a thread owns the socket and the clock,
hands ``receive(data, now)`` and ``advance(now)`` to the device (which never reads a clock), writes what
it answers, logs what the host sent (``rx_log``, ``wait_for``) and takes ``lock`` for fault injection.

* :class:`UdpRunner`: ``listen=(host, port)`` answers whoever sent last (the driver's port is
  ``udpout:host:port``); ``send_to=(host, port)`` sends there from a port of its own, as SITL does to a
  GCS (the driver's port is ``udpin:host:port``). :attr:`url` is the driver's port either way.
* :class:`TcpRunner`: listens on ``host:port`` (0: any free port) and serves one client at a time; a new
  client is ``device.host_opened``; :meth:`TcpRunner.unplug` drops the client (the driver sees the peer
  close, as a pulled cable) and keeps listening.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from typing import Callable

from sim.devices.pty import Device, WireRunner

logger = logging.getLogger(__name__)

_IDLE_POLL_S = 0.02


class _SocketRunner(WireRunner):
    """The loop both runners share: wait for input or the device's next wake-up, feed it, send its output."""

    kind = "net"
    url = ""

    @property
    def port(self) -> str:
        """What a driver's ``port`` key takes to reach the device."""
        return self.url

    def _got(self, data: bytes) -> None:
        now = self.clock()
        with self.lock:
            self.rx_log.append((now, data))
            self.rx_event.notify_all()
            self.device.receive(data, now)

    def _tick(self) -> bytes:
        now = self.clock()
        with self.lock:
            return self.device.advance(now)

    def _timeout(self) -> float:
        now = self.clock()
        with self.lock:
            wake = self.device.next_wakeup_s(now)
        return min(_IDLE_POLL_S, max(0.0, wake - now))


class UdpRunner(_SocketRunner):
    def __init__(self, device: Device, name: str = "emulator", *, listen: tuple[str, int] | None = None,
                 send_to: tuple[str, int] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if (listen is None) == (send_to is None):
            raise ValueError("give listen=(host, port) or send_to=(host, port)")
        super().__init__(device, name, clock)
        self.listen, self.send_to = listen, send_to
        self._sock: socket.socket | None = None
        self.peer: tuple[str, int] | None = send_to

    def _open_transport(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if self.listen is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(self.listen)
            host, port = sock.getsockname()
            self.url = f"udpout:{host}:{port}"
        else:
            sock.bind(("127.0.0.1", 0))
            self.url = f"udpin:{self.send_to[0]}:{self.send_to[1]}"
        sock.setblocking(False)
        self._sock = sock

    def _close_transport(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        opened = False
        while self._running:
            try:
                readable, _, _ = select.select([sock], [], [], self._timeout())
            except (OSError, ValueError):
                return
            if readable:
                try:
                    data, addr = sock.recvfrom(65535)
                except (BlockingIOError, ConnectionRefusedError):
                    data = b""
                except OSError:
                    return
                if data:
                    if self.listen is not None:
                        self.peer = addr
                    if not opened:
                        opened = True
                        with self.lock:
                            self.device.host_opened(self.clock())
                    self._got(data)
            out = self._tick()
            if out and self.peer is not None:
                try:
                    sock.sendto(out, self.peer)
                except OSError:  # nobody listening yet (ICMP unreachable): UDP loses it, as on a real link
                    pass


class TcpRunner(_SocketRunner):
    def __init__(self, device: Device, name: str = "emulator", host: str = "127.0.0.1", port: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(device, name, clock)
        self.host, self.want_port = host, port
        self._server: socket.socket | None = None
        self._client: socket.socket | None = None
        self.opens = 0

    def _open_transport(self) -> None:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((self.host, self.want_port))
        srv.listen(1)
        srv.setblocking(False)
        self._server = srv
        host, port = srv.getsockname()
        self.url = f"tcp:{host}:{port}"

    def _close_transport(self) -> None:
        self.unplug()
        if self._server is not None:
            self._server.close()
            self._server = None

    def unplug(self) -> None:
        """Close the client's connection (it sees the peer close); the next client is served."""
        with self.lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except OSError:
                pass

    @property
    def host_connected(self) -> bool:
        return self._client is not None

    def _serve(self) -> None:
        out = bytearray()
        while self._running:
            srv, client = self._server, self._client
            if srv is None:
                return
            socks = [srv] + ([client] if client is not None else [])
            try:
                readable, _, _ = select.select(socks, [], [], self._timeout())
            except (OSError, ValueError):
                continue  # the client was closed under us (unplug)
            if srv in readable:
                try:
                    new, _ = srv.accept()
                except OSError:
                    new = None
                if new is not None:
                    new.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self.unplug()
                    with self.lock:
                        self._client = new
                    self.opens += 1
                    out.clear()
                    with self.lock:
                        self.device.host_opened(self.clock())
                    client = new
            if client is not None and client in readable:
                try:
                    data = client.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    if self._client is client:
                        self.unplug()
                    client = None
                else:
                    self._got(data)
            produced = self._tick()
            if client is not None and client is self._client:
                out += produced
                if out:
                    try:
                        client.sendall(bytes(out))
                    except OSError:
                        self.unplug()
                    out.clear()


__all__ = ["TcpRunner", "UdpRunner"]
