"""MAVLink's network links as pyserial ports, so one :class:`drivers.serial.link.SerialLink` carries every link.

A vehicle is reached by serial (a telemetry radio, USB), by UDP (``udpin:`` we listen — ArduPilot SITL and
most companion computers send to a ground station's port 14550 —; ``udpout:`` we send to a vehicle that
listens) or by TCP (``tcp:`` we connect; SITL serves 5760). :func:`port_url` turns pymavlink's spelling into a
pyserial URL handled here (``udpin://``, ``udpout://``, ``tcp://``; registered in
``serial.protocol_handler_packages``, hardware-protocols §3.1 "custom handler"), so the driver keeps the
serial drivers' reader thread, writer thread, stop lane and counters for every link.

Why not pyserial's ``socket://`` for TCP: its ``in_waiting`` is 0 or 1, so the link's reader took a 65-byte
frame one byte per ``select`` + ``recv``. Here ``in_waiting`` is the kernel's count (``FIONREAD``), and a
datagram is read whole (UDP: one datagram is one or more whole MAVLink frames).

>>> port_url("udpin:0.0.0.0:14550"), port_url("tcp:127.0.0.1:5760"), port_url("/dev/ttyACM0")
('udpin://0.0.0.0:14550', 'tcp://127.0.0.1:5760', '/dev/ttyACM0')
>>> port_url("udp:127.0.0.1:14550")           # mavutil's "udp:" listens
'udpin://127.0.0.1:14550'
"""

from __future__ import annotations

import errno
import fcntl
import select
import socket
import struct
import termios
import time
import urllib.parse

import serial
from serial.serialutil import PortNotOpenError, SerialBase, SerialException

_SCHEMES = {"udpin": "udpin", "udp": "udpin", "udpout": "udpout", "tcp": "tcp"}
#: the largest UDP datagram read (MAVLink frames are ≤ 280 bytes; a datagram may carry several)
_DATAGRAM = 65535

if __name__ not in serial.protocol_handler_packages:
    serial.protocol_handler_packages.append(__name__)


def port_url(url: str) -> str:
    """pymavlink's ``udpin:host:port`` / ``udpout:`` / ``udp:`` / ``tcp:`` as this package's pyserial URL;
    anything else (a device path, a pyserial URL) unchanged."""
    scheme, sep, rest = url.partition(":")
    if sep and scheme.lower() in _SCHEMES and not rest.startswith("//"):
        return f"{_SCHEMES[scheme.lower()]}://{rest}"
    return url


def _address(url: str, scheme: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != scheme or parts.port is None:
        raise SerialException(f"expected {scheme}://HOST:PORT, not {url!r}")
    return parts.hostname or "0.0.0.0", parts.port


class _SocketPort(SerialBase):
    """What the three schemes share: a socket read with ``select`` and the port's timeout."""

    scheme = ""
    _sock: socket.socket | None = None

    def _reconfigure_port(self, *args, **kwargs) -> None:  # baud rates and parity mean nothing here
        pass

    def _update_rts_state(self) -> None:
        pass

    def _update_dtr_state(self) -> None:
        pass

    def _require(self) -> socket.socket:
        if not self.is_open or self._sock is None:
            raise PortNotOpenError()
        return self._sock

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self.is_open = False
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def fileno(self) -> int:
        return self._require().fileno()

    def _readable(self, timeout: float | None) -> bool:
        sock = self._require()
        try:
            ready, _, _ = select.select([sock], [], [], timeout)
        except (OSError, ValueError) as err:  # closed under us
            raise SerialException(f"{self.portstr}: {err}") from err
        return bool(ready)

    def _pending(self) -> int:
        buf = fcntl.ioctl(self._require().fileno(), termios.FIONREAD, b"\0\0\0\0")
        return struct.unpack("i", buf)[0]

    def reset_input_buffer(self) -> None:
        pass

    def reset_output_buffer(self) -> None:
        pass


class UdpPort(_SocketPort):
    """``udpin://host:port`` binds and answers whoever last sent to it; ``udpout://host:port`` sends there.
    A datagram is one read (its leftover kept for the next); a write before any peer is known is dropped
    (counted in :attr:`dropped_writes`), as mavutil's udpin does."""

    dropped_writes = 0

    def open(self) -> None:
        if self._port is None:
            raise SerialException("Port must be configured before it can be used.")
        self.scheme = urllib.parse.urlsplit(self.portstr).scheme
        host, port = _address(self.portstr, self.scheme)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            if self.scheme == "udpin":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                self._peer: tuple[str, int] | None = None
            else:
                sock.bind(("0.0.0.0", 0))
                self._peer = (socket.gethostbyname(host), port)
        except OSError as err:
            sock.close()
            raise SerialException(f"could not open {self.portstr}: {err}") from err
        self._sock = sock
        self._rest = b""
        self.is_open = True

    @property
    def in_waiting(self) -> int:
        self._require()
        return len(self._rest) or self._pending()

    def read(self, size: int = 1) -> bytes:
        if not self._rest:
            if not self._readable(self._timeout):
                return b""
            try:
                data, addr = self._require().recvfrom(_DATAGRAM)
            except BlockingIOError:
                return b""
            except OSError as err:
                if err.errno in (errno.ECONNREFUSED, errno.EINTR):  # an ICMP unreachable for an earlier send
                    return b""
                raise SerialException(f"{self.portstr}: read failed: {err}") from err
            if self.scheme == "udpin":
                self._peer = addr
            self._rest = data
        out, self._rest = self._rest[:size], self._rest[size:]
        return out

    def write(self, data: bytes) -> int:
        sock = self._require()
        if self._peer is None:
            self.dropped_writes += 1
            return len(data)
        try:
            return sock.sendto(bytes(data), self._peer)
        except OSError as err:
            if err.errno in (errno.ECONNREFUSED, errno.ENOBUFS, errno.EAGAIN):
                return len(data)  # a datagram link loses datagrams; the heartbeat watch tells a dead one
            raise SerialException(f"{self.portstr}: write failed: {err}") from err


class TcpPort(_SocketPort):
    """``tcp://host:port``: a client connection; the peer closing it is a lost port (``SerialException``)."""

    connect_timeout_s = 2.0

    def open(self) -> None:
        if self._port is None:
            raise SerialException("Port must be configured before it can be used.")
        host, port = _address(self.portstr, "tcp")
        try:
            sock = socket.create_connection((host, port), timeout=self.connect_timeout_s)
        except OSError as err:
            raise SerialException(f"could not open {self.portstr}: {err}") from err
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self._write_timeout if self._write_timeout else None)
        self._sock = sock
        self.is_open = True

    @property
    def in_waiting(self) -> int:
        self._require()
        return self._pending()

    def read(self, size: int = 1) -> bytes:
        if not self._readable(self._timeout):
            return b""
        try:
            data = self._require().recv(max(1, size))
        except (BlockingIOError, socket.timeout):
            return b""
        except OSError as err:
            raise SerialException(f"{self.portstr}: read failed: {err}") from err
        if not data:
            raise SerialException(f"{self.portstr}: the peer closed the connection")
        return data

    def write(self, data: bytes) -> int:
        sock = self._require()
        start = time.monotonic()
        try:
            sock.sendall(bytes(data))
        except OSError as err:
            raise SerialException(f"{self.portstr}: write failed after {time.monotonic() - start:.2f} s: {err}") \
                from err
        return len(data)


__all__ = ["TcpPort", "UdpPort", "port_url"]
