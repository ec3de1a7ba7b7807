"""Serve an emulated device on a pseudo-terminal, in-process (tests) or standalone (``python -m``).

The device models in this package are deterministic: they take the time as an
argument (``receive(data, now_s)``, ``advance(now_s)``) and never read a clock.
This runner is the one place that does: a thread reads the pty master, hands
the bytes and ``time.monotonic()`` to the device and writes what it answers.

What the runner emulates of the OS side (hardware-protocols §3.2–3.3):

* the slave is put in raw mode at once (a fresh pty is cooked: ``\\r`` would
  become ``\\n`` and 0x03 would raise SIGINT);
* **host open and close are visible**: with no process holding the slave,
  reading the master fails with EIO. The runner polls then, and calls
  ``device.host_opened(now)`` when a host appears — an Arduino resets on
  open (DTR), so the Firmata board reboots and sends its banner again;
* **unplug**: :meth:`PtyRunner.unplug` closes the master; the host's next read
  raises ``SerialException`` and its writes fail with EIO, as with a USB
  adapter pulled out. :meth:`PtyRunner.replug` makes a new pty and points
  the same symlink (:attr:`PtyRunner.port`) at it, so a driver reconnecting to
  the path it was given finds the device again.

A device whose clock runs with no host (``runs_without_host = True``: a vehicle drives on when its
radio link dies) is advanced while the port is closed or unplugged, its output lost.

Every chunk the host writes is logged with its arrival time (``rx_log``) so a
test can wait for given bytes on the wire ("the stop bytes arrived").
"""

from __future__ import annotations

import errno
import logging
import os
import pty
import select
import signal
import tempfile
import threading
import time
import tty
from typing import Callable, Protocol

logger = logging.getLogger(__name__)

#: how often the runner looks for a host while none holds the slave
_NO_HOST_POLL_S = 0.005
#: the longest the runner sleeps when the device has nothing scheduled
_IDLE_POLL_S = 0.02


class Device(Protocol):
    """What the runner drives; all times are host seconds passed in."""

    def host_opened(self, now_s: float) -> None: ...

    def receive(self, data: bytes, now_s: float) -> None: ...

    def advance(self, now_s: float) -> bytes: ...

    def next_wakeup_s(self, now_s: float) -> float: ...


class WireRunner:
    """What every runner shares (this one and :mod:`sim.devices.net`'s): the device under ``lock``, the
    thread that serves it, the log of what the host wrote (``rx_log``, :meth:`wait_for`). A subclass opens its
    transport in :meth:`_open_transport`, closes it in :meth:`_close_transport` and serves it in :meth:`_serve`."""

    kind = "wire"

    def __init__(self, device: Device, name: str = "emulator", clock: Callable[[], float] = time.monotonic) -> None:
        self.device = device
        self.name = name
        self.clock = clock
        self.lock = threading.RLock()
        self.rx_log: list[tuple[float, bytes]] = []
        self.rx_event = threading.Condition(self.lock)
        self._thread: threading.Thread | None = None
        self._running = False

    # lifecycle -------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Open the transport and serve it; returns :attr:`port` (what a driver opens)."""
        self._open_transport()
        self._running = True
        self._thread = threading.Thread(target=self._serve, name=f"{self.kind}-{self.name}", daemon=True)
        self._thread.start()
        return self.port

    def stop(self) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        self._close_transport()

    # waiting on the wire -----------------------------------------------------
    def received(self) -> bytes:
        with self.lock:
            return b"".join(chunk for _, chunk in self.rx_log)

    def wait_for(self, needle: bytes, timeout_s: float = 5.0, since: int = 0) -> float:
        """Wait until ``needle`` has been received (in log entries from index ``since``); its arrival time.

        Raises ``TimeoutError`` naming the bytes; used by tests to wait for bytes on the wire.
        """
        deadline = time.monotonic() + timeout_s
        with self.rx_event:
            while True:
                buf = b""
                for t, chunk in self.rx_log[since:]:
                    buf += chunk
                    if needle in buf:
                        return t
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: {needle!r} not received within {timeout_s} s")
                self.rx_event.wait(min(left, 0.05))

    # what a subclass provides ------------------------------------------------
    port: str = ""

    def _open_transport(self) -> None:
        raise NotImplementedError

    def _close_transport(self) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        raise NotImplementedError


class PtyRunner(WireRunner):
    """One device on one pty; ``port`` is a stable symlink to the current slave.

    Use as a context manager or call :meth:`start` / :meth:`stop`. ``lock``
    guards the device: hold it (``with runner.lock:``) to inject a fault from
    another thread.
    """

    kind = "pty"

    def __init__(self, device: Device, name: str = "emulator", clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(device, name, clock)
        self._dir = tempfile.mkdtemp(prefix="teleop-pty-")
        self.port = os.path.join(self._dir, name)
        self._master: int | None = None
        self._gen = 0  # bumped whenever the master changes: a fd number can be reused by the next pty
        self._slave_keep: int | None = None
        self._host = False
        self._out = bytearray()
        self.opens = 0

    def _open_transport(self) -> None:
        self._make_pty()

    def _close_transport(self) -> None:
        self._close_master()
        try:
            os.unlink(self.port)
            os.rmdir(self._dir)
        except OSError:
            pass

    def unplug(self) -> None:
        """Close the master: the host sees the port vanish (EIO), as with a pulled USB cable."""
        with self.lock:
            self._close_master()
            try:
                os.unlink(self.port)
            except OSError:
                pass

    def replug(self) -> str:
        """A new pty behind the same :attr:`port` path (the device keeps its state; it resets on open)."""
        with self.lock:
            self._close_master()
            self._make_pty()
        return self.port

    @property
    def slave_path(self) -> str:
        return os.path.realpath(self.port)

    @property
    def host_connected(self) -> bool:
        return self._host

    # internals ---------------------------------------------------------------
    def _make_pty(self) -> None:
        master, slave = pty.openpty()
        tty.setraw(slave)
        os.set_blocking(master, False)
        path = os.ttyname(slave)
        os.close(slave)  # the host opens it; while nobody holds it the master reads EIO
        self._gen += 1
        self._master = master
        self._host = False
        self._out.clear()
        tmp = self.port + ".new"
        try:
            os.unlink(tmp)
        except OSError:
            pass
        os.symlink(path, tmp)
        os.replace(tmp, self.port)

    def _close_master(self) -> None:
        if self._master is not None:
            try:
                os.close(self._master)
            except OSError:
                pass
            self._gen += 1
            self._master = None
            self._host = False

    def _serve(self) -> None:
        while self._running:
            gen, master = self._gen, self._master
            if master is None:
                self._advance_alone()
                time.sleep(_NO_HOST_POLL_S)
                continue
            now = self.clock()
            with self.lock:
                wake = self.device.next_wakeup_s(now)
            timeout = _NO_HOST_POLL_S if not self._host else min(_IDLE_POLL_S, max(0.0, wake - now))
            want_write = [master] if self._out and self._host else []
            try:
                readable, writable, _ = select.select([master], want_write, [], timeout)
            except (OSError, ValueError):  # closed under us by unplug()
                continue
            if gen != self._gen:  # unplugged or replugged while we waited: start over on the new master
                continue
            if not readable and not self._host:
                # select timed out on a master with no EIO: a host holds the slave now
                self._host_opened()
            data = b""
            if readable:
                try:
                    with self.lock:  # unplug()/replug() hold it: the fd cannot be closed or reused mid-read
                        if gen != self._gen:
                            continue
                        data = os.read(master, 4096)
                except BlockingIOError:
                    data = b""
                except OSError as err:
                    if gen != self._gen or err.errno == errno.EBADF:  # closed (and maybe reopened) under us
                        continue
                    if err.errno == errno.EIO:
                        if self._host:
                            logger.debug("%s: host closed the port", self.name)
                        self._host = False
                        self._out.clear()
                        self._advance_alone()
                        time.sleep(_NO_HOST_POLL_S)
                        continue
                    raise
                if data and not self._host:
                    self._host_opened()
            now = self.clock()
            with self.lock:
                if gen != self._gen:
                    continue
                if data:
                    self.rx_log.append((now, data))
                    self.rx_event.notify_all()
                    self.device.receive(data, now)
                out = self.device.advance(now)
            if out and self._host:
                self._out.extend(out)
            if self._out and self._host:
                try:
                    with self.lock:
                        if gen != self._gen:
                            continue
                        n = os.write(master, bytes(self._out))
                    del self._out[:n]
                except BlockingIOError:
                    pass
                except OSError:
                    self._out.clear()

    def _advance_alone(self) -> None:
        """No host on the line: a device that lives on without one (a vehicle keeps driving when its radio link
        dies; ``runs_without_host = True``) still advances, its output lost; a board without power does not."""
        if getattr(self.device, "runs_without_host", False):
            with self.lock:
                self.device.advance(self.clock())

    def _host_opened(self) -> None:
        self._host = True
        self.opens += 1
        with self.lock:
            self.device.host_opened(self.clock())


def serve_forever(device: Device, name: str) -> None:
    """The ``python -m sim.devices.…`` entry point: print the port, serve until Ctrl-C."""
    serve_runner(PtyRunner(device, name))


def serve_runner(runner: WireRunner) -> None:
    """Serve ``runner`` (a pty's or :mod:`sim.devices.net`'s) until Ctrl-C, after printing where it is: the pty's
    slave (and its stable symlink), or the port a driver opens (``tcp:HOST:PORT`` …)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # Ctrl-C and SIGTERM are taken by sigwait below, never by a handler: a process-directed signal that the
    # kernel handed to the serving thread left the main thread asleep in time.sleep (Python runs handlers in the
    # main thread only), and the emulator did not stop (a fresh-clone run). Blocked before the thread starts, so
    # it inherits the mask.
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    runner.start()
    try:
        slave = getattr(runner, "slave_path", None)
        where = f"{slave} (symlink {runner.port})" if slave else f"{runner.port} (the driver's port)"
        print(f"{runner.name} emulator on {where}; Ctrl-C to stop", flush=True)
        signal.sigwait(stops)
    finally:
        runner.stop()
