"""The recorder: every snapshot, event, command and setting to MCAP, off the event loop.

The gateway calls the ``record_*`` methods from its event loop (or any thread). They
only append to a bounded in-memory queue and return: no I/O, no lock held across
I/O, no waiting. A writer thread drains the queue into the current MCAP file; it
wakes once per ``flush_s``, or early when a backlog builds up, not once per message
(50 thread wake-ups a second would each contend for the GIL with the event loop). When
the queue is full (the disk is slower than the robot for a while), snapshots and
frames are dropped and counted; events, commands and settings have a reserve on top
of ``queue_size`` so they survive a burst of telemetry.

Crash safety: every ``flush_s`` the writer closes the current MCAP chunk and flushes
it to the OS (``mcap.Writer.flush``), so a ``kill -9`` loses at most that much and
the file reads back with the ``mcap`` stream reader up to the last chunk.
:func:`server.gateway.recording.recovery.recover_directory` then rewrites such files with a
summary and index at the next start.

I/O errors (disk full, EFBIG, EIO, a directory removed underneath) end the current
recording cleanly: the state becomes ``error`` with the reason in ``status()``, the
queue is discarded, ``record_*`` calls become no-ops until a recording is started
again. Nothing is raised to the caller.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, BinaryIO, Callable

import orjson
from mcap.writer import CompressionType, Writer

from server.gateway.recording import topics
from server.gateway.recording.config import RecordingConfig
from server.gateway.recording.files import AUTO_NAME, DirectoryLock, check_name, file_name, prune
from server.gateway.recording.reader import SAFETY_MARK, safety_event_count
from server.gateway.recording.recovery import recover_directory

log = logging.getLogger(__name__)

#: extra queue room for events, commands and settings when snapshots fill ``queue_size``
CONTROL_RESERVE = 1024
#: wake the writer early when this much is waiting (else it wakes every ``flush_s``)
WAKE_ITEMS = 256
WAKE_BYTES = 1024 * 1024
_COMPRESSION = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}
_BULK = frozenset({topics.TELEMETRY, topics.IMAGE})

# queue items: (topic, log_time_ns, payload, enqueued_monotonic); control items use topic None
_Item = tuple[Any, int, Any, float]


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def _ns(t_s: float) -> int:
    return int(round(t_s * 1e9))


class Recorder:
    """Records a run to MCAP files in ``cfg.dir``. Call :meth:`start` once, :meth:`close` at the end.

    ``robot`` is the robot description (``GET /api/robot``): its ``name``, ``profile``
    and channel names go into each file's metadata and telemetry schema, and the whole
    description is kept so a replay can serve it. ``clock`` gives unix time in seconds.
    """

    def __init__(self, cfg: RecordingConfig, robot: dict[str, Any] | None = None,
                 *, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.dir = Path(cfg.dir)
        self.clock = clock
        self._robot = dict(robot or {})
        self._lock = threading.Lock()  # guards the queue's byte count and drop counters, never held across I/O
        self._queue: collections.deque[_Item] = collections.deque()
        self._pending_bytes = 0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._dir_lock = DirectoryLock(self.dir)
        self._accepting = False
        self._last_frame_t = -float("inf")
        self.recovered: list[dict[str, Any]] = []
        # counters (written by producers under _lock, or by the writer thread alone)
        self.dropped = 0
        self.dropped_by_topic: dict[str, int] = {}
        self.total_bytes = 0
        self.total_messages = 0
        self.pruned: list[str] = []
        #: what pruning deleted, for the gateway's audit (``{"file", "bytes", "named", "safety_events"}``);
        #: appended by the writer thread, drained by the gateway
        self.pruned_log: collections.deque[dict[str, Any]] = collections.deque(maxlen=1024)
        # the writer thread's file state
        self._state = "idle"  # idle | recording | error | closed
        self._error: str | None = None
        self._name: str | None = None
        self._named = False
        #: a named recording was asked for and not stopped since (the writer thread opens it a moment later)
        self.named_requested = False
        self._session = ""
        self._part = 0
        self._path: Path | None = None
        self._stream: BinaryIO | None = None
        self._writer: Writer | None = None
        self._channel_ids: dict[str, int] = {}
        self._seq: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._file_messages = 0
        self._file_safety_events = 0
        self._flushed_messages = 0
        self._file_opened_t = 0.0  # by self.clock: file age for rotation (a test can inject time)
        self._last_flush_mono = 0.0
        self._last_flush_t: float | None = None
        self._last_write_lag_s = 0.0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> list[dict[str, Any]]:
        """Create the directory, take its lock, repair unfinished files, start the writer thread
        (and the always-on recording if configured). Blocking (recovery reads files): call it
        before serving, or via ``asyncio.to_thread``. Returns what recovery did."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock.acquire()
        try:
            self.recovered = recover_directory(self.dir)
        except OSError as err:  # recovery is best effort; recording can still go on
            log.error("recovery of %s failed: %s", self.dir, err)
            self.recovered = [{"file": None, "action": "failed", "error": str(err)}]
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._thread.start()
        if self.cfg.always_on:
            self.start_recording(None)
        return self.recovered

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish the current file and stop the writer (blocks up to ``timeout_s``)."""
        self._accepting = False
        self._control(("shutdown", None))
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("recorder thread did not finish within %.1f s", timeout_s)
        self._dir_lock.release()

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """:meth:`close` for coroutines (the join runs off the event loop)."""
        import asyncio
        await asyncio.to_thread(self.close, timeout_s)

    @property
    def started(self) -> bool:
        """True between :meth:`start` and :meth:`close` (the writer thread runs)."""
        return self._thread is not None and self._thread.is_alive()

    def set_robot(self, robot: dict[str, Any]) -> None:
        """A new robot description (e.g. after the runtime reconnected); written to the current file too."""
        self._control(("robot", dict(robot)))

    # ------------------------------------------------------------------ named recordings
    def start_recording(self, name: str | None = None) -> str:
        """Start recording to a new file (finishing the current one). ``name=None`` is the
        automatic recording. Returns the new file's name. ``ValueError`` for a bad name."""
        if name is not None:
            check_name(name)
            if name == AUTO_NAME:
                raise ValueError(f"recording name {AUTO_NAME!r} is reserved for the always-on recording")
        now = self.clock()
        file = file_name(now, name or AUTO_NAME, 0)
        self._accepting = True
        self.named_requested = name is not None
        self._control(("open", (name, now, file)))
        return file

    def stop_recording(self) -> None:
        """Stop the current recording. After a named recording the always-on one resumes (if configured)."""
        self.named_requested = False
        self._control(("stop", None))

    # ------------------------------------------------------------------ producers (never block)
    def record_snapshot(self, data: bytes | str, t: float | None = None) -> bool:
        """A telemetry snapshot, already serialised to JSON (the bytes the dashboard gets).
        ``t`` is its unix time (the snapshot's ``t``); now if omitted. False if not recorded."""
        if not self._accepting:
            return False
        if isinstance(data, str):
            data = data.encode()
        return self._put(topics.TELEMETRY, _ns(self.clock() if t is None else t), data)

    def record_event(self, event: dict[str, Any]) -> bool:
        """A safety event or notice (``Event.to_json()``); its ``wall_t`` is the log time.
        A change of state (``state_before != state_after``) also goes to ``/teleop/state``."""
        if not self._accepting:
            return False
        wall_t = event.get("wall_t")
        t = wall_t if isinstance(wall_t, (int, float)) else self.clock()
        ok = self._put(topics.EVENTS, _ns(t), _dumps(event))
        before, after = event.get("state_before"), event.get("state_after")
        if before != after:
            self._put(topics.STATE, _ns(t), _dumps({
                "t": t, "state": after, "previous": before,
                "trigger": event.get("trigger"), "message": event.get("message")}))
        return ok

    def record_command(self, command: str, body: dict[str, Any] | None, *, accepted: bool,
                       principal: str | None = None, source: str | None = None, state: str | None = None,
                       error: dict[str, Any] | None = None, t: float | None = None) -> bool:
        """An operator command, accepted or refused (``error`` is the ``{code, message}`` sent back)."""
        if not self._accepting:
            return False
        t = self.clock() if t is None else t
        return self._put(topics.COMMANDS, _ns(t), _dumps({
            "t": t, "command": command, "body": body, "accepted": accepted, "principal": principal,
            "source": source, "state": state, "error": error}))

    def record_settings(self, kind: str, settings: dict[str, Any], *, principal: str | None = None,
                        t: float | None = None) -> bool:
        """A settings change (``kind`` = ``acquisition``, ``video``, …) as applied."""
        if not self._accepting:
            return False
        t = self.clock() if t is None else t
        return self._put(topics.SETTINGS, _ns(t), _dumps(
            {"t": t, "kind": kind, "settings": settings, "principal": principal}))

    def record_frame(self, jpeg: bytes, t: float | None = None, *, frame_id: str = "camera",
                     fmt: str = "jpeg") -> bool:
        """A camera frame (compressed bytes), kept when ``video_frames`` is on and at most
        ``video_fps`` per second. The base64/JSON encoding happens on the writer thread."""
        if not (self._accepting and self.cfg.video_frames):
            return False
        t = self.clock() if t is None else t
        if t - self._last_frame_t < 1.0 / self.cfg.video_fps:
            return False
        self._last_frame_t = t
        return self._put(topics.IMAGE, _ns(t), (bytes(jpeg), frame_id, fmt))

    def _put(self, topic: str, log_ns: int, payload: Any) -> bool:
        size = len(payload[0]) if isinstance(payload, tuple) else len(payload)
        bulk = topic in _BULK
        q = self._queue
        with self._lock:
            limit = self.cfg.queue_size if bulk else self.cfg.queue_size + CONTROL_RESERVE
            if len(q) >= limit or (bulk and self._pending_bytes + size > self.cfg.queue_bytes):
                self.dropped += 1
                self.dropped_by_topic[topic] = self.dropped_by_topic.get(topic, 0) + 1
                return False
            self._pending_bytes += size
            q.append((topic, log_ns, payload, time.monotonic()))
            wake = len(q) >= WAKE_ITEMS or self._pending_bytes >= WAKE_BYTES
        if wake:  # otherwise the writer drains on its flush timer: ~1 wake-up per flush_s instead of 50 per second
            self._wake.set()
        return True

    def _control(self, op: tuple[str, Any]) -> None:
        with self._lock:
            self._queue.append((None, 0, op, time.monotonic()))
        self._wake.set()

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """What the dashboard and ``/metrics`` show; cheap, callable from any thread."""
        q = self._queue
        try:
            oldest = q[0][3] if q else None
        except IndexError:
            oldest = None
        lag = max(time.monotonic() - oldest, self._last_write_lag_s) if oldest is not None else 0.0
        with self._lock:  # producers may add a key
            dropped_by_topic = dict(self.dropped_by_topic)
        return {
            "state": self._state,
            "recording": self._state == "recording",
            "name": self._name if self._named else None,
            "file": self._path.name if self._path is not None else None,
            "dir": str(self.dir),
            "bytes": self._file_bytes(),
            "total_bytes": self.total_bytes + self._file_bytes(),
            "messages": self._file_messages,
            "total_messages": self.total_messages,
            "messages_by_topic": dict(self._counts),
            "flushed_messages": self._flushed_messages,
            "last_flush_t": self._last_flush_t,
            "queue": len(q),
            "queue_bytes": self._pending_bytes,
            "lag_s": round(lag, 4),
            "dropped": self.dropped,
            "dropped_by_topic": dropped_by_topic,
            "pruned_files": len(self.pruned),
            "error": self._error,
        }

    def _file_bytes(self) -> int:
        stream = self._stream
        if stream is None:
            return 0
        try:
            return stream.tell()
        except (OSError, ValueError):
            return 0

    # ------------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        flush_s = self.cfg.flush_s
        q = self._queue
        while True:
            timeout = flush_s
            if self._writer is not None:
                timeout = max(0.0, self._last_flush_mono + flush_s - time.monotonic())
            self._wake.wait(timeout)
            self._wake.clear()
            shutdown = False
            try:
                while q:
                    topic, log_ns, payload, enq = q.popleft()
                    if topic is None:
                        shutdown = self._handle_control(*payload) or shutdown
                        continue
                    size = len(payload[0]) if isinstance(payload, tuple) else len(payload)
                    with self._lock:
                        self._pending_bytes -= size
                    if self._writer is not None:
                        self._write(topic, log_ns, payload)
                        self._last_write_lag_s = time.monotonic() - enq
                        if self._file_messages % 32 == 0:  # tell() is a syscall: not after every message
                            self._maybe_rotate()
                if self._writer is not None:
                    if time.monotonic() - self._last_flush_mono >= flush_s:
                        self._flush()
                    self._maybe_rotate()
                if not q:
                    self._last_write_lag_s = 0.0
            except OSError as err:
                self._fail(err)
            except Exception as err:  # a bug must end the recording, not the process or the caller
                log.exception("recorder failed")
                self._fail(err)
            if shutdown:
                self._finish()
                self._state = "closed"
                return

    def _handle_control(self, op: str, arg: Any) -> bool:
        if op == "open":
            name, start_t, file = arg
            self._finish(keep_accepting=True)
            self._session = uuid.uuid4().hex[:12]
            self._part = 0
            self._open(name, start_t, file)
        elif op == "stop":
            was_named = self._named
            self._finish()
            if was_named and self.cfg.always_on:
                now = self.clock()
                self._session = uuid.uuid4().hex[:12]
                self._part = 0
                self._open(None, now, file_name(now, AUTO_NAME, 0))
            else:
                self._accepting = False
        elif op == "robot":
            self._robot = arg
            if self._writer is not None:
                self._writer.add_metadata(topics.METADATA_NAME, self._metadata(self._named, self._name))
        elif op == "shutdown":
            return True
        return False

    def _metadata(self, named: bool, name: str | None) -> dict[str, str]:
        robot = self._robot
        return {
            "name": name or AUTO_NAME,
            "named": "true" if named else "false",
            "session": self._session,
            "part": str(self._part),
            "started_t": repr(self.clock()),
            "robot": str(robot.get("name", "")),
            "profile": str(robot.get("profile", "")),
            "robot_json": orjson.dumps(robot, option=orjson.OPT_SERIALIZE_NUMPY).decode(),
        }

    def _channel_names(self) -> list[str]:
        out = []
        for c in self._robot.get("channels", []) or []:
            name = c.get("name") if isinstance(c, dict) else c
            if isinstance(name, str):
                out.append(name)
        return out

    def _open(self, name: str | None, start_t: float, file: str) -> None:
        self._name = name or AUTO_NAME
        self._named = name is not None
        path = self.dir / file
        if path.exists():  # two starts within a second: keep both
            stem = path.stem
            i = 1
            while path.exists():
                path = self.dir / f"{stem}.{i}.mcap"
                i += 1
        try:
            stream = open(path, "wb")
            writer = Writer(stream, chunk_size=self.cfg.chunk_bytes, compression=_COMPRESSION[self.cfg.compression])
            writer.start(profile="", library=topics.LIBRARY)
            writer.add_metadata(topics.METADATA_NAME, self._metadata(self._named, name))
            ids = {}
            channels = self._channel_names()
            for topic in topics.TOPICS:
                if topic == topics.IMAGE and not self.cfg.video_frames:
                    continue
                schema_name, schema = topics.schema_for(topic, channels)
                sid = writer.register_schema(schema_name, "jsonschema", _dumps(schema))
                ids[topic] = writer.register_channel(topic, "json", sid)
            stream.flush()
        except OSError as err:
            self._path = path
            self._fail(err)
            return
        self._path, self._stream, self._writer = path, stream, writer
        self._channel_ids = ids
        self._seq = dict.fromkeys(ids, 0)
        self._counts = dict.fromkeys(ids, 0)
        self._file_messages = self._flushed_messages = self._file_safety_events = 0
        self._last_flush_mono = time.monotonic()
        self._file_opened_t = self.clock()
        self._state, self._error = "recording", None
        self._accepting = True
        log.info("recording to %s", path)

    def _write(self, topic: str, log_ns: int, payload: Any) -> None:
        if topic == topics.IMAGE:
            payload = topics.encode_image(payload[0], log_ns, payload[1], payload[2])
        if topic == topics.EVENTS and SAFETY_MARK in payload:
            self._file_safety_events += 1
        self._seq[topic] += 1
        self._writer.add_message(self._channel_ids[topic], log_time=log_ns, data=payload, publish_time=log_ns,
                                 sequence=self._seq[topic])
        self._counts[topic] += 1
        self._file_messages += 1
        self.total_messages += 1

    def _flush(self) -> None:
        self._writer.flush()
        if self.cfg.fsync:
            os.fsync(self._stream.fileno())
        self._last_flush_mono = time.monotonic()
        self._last_flush_t = self.clock()
        self._flushed_messages = self._file_messages

    def _maybe_rotate(self) -> None:
        if (self._file_bytes() >= self.cfg.rotate_bytes
                or self.clock() - self._file_opened_t >= self.cfg.rotate_s):
            self._rotate()

    def _rotate(self) -> None:
        name = self._name if self._named else None
        self._finish(keep_accepting=True)
        if self._state == "error":
            return  # finishing failed (disk full): stay stopped with that error
        self._part += 1
        now = self.clock()
        self._open(name, now, file_name(now, name or AUTO_NAME, self._part))

    def _finish(self, keep_accepting: bool = False) -> None:
        """Write the summary and close the file (errors become the error state)."""
        writer, stream, path = self._writer, self._stream, self._path
        if writer is None:
            return
        try:
            writer.add_metadata(topics.EVENTS_METADATA_NAME, {"safety_events": str(self._file_safety_events)})
            writer.finish()
            stream.flush()
            if self.cfg.fsync:
                os.fsync(stream.fileno())
            self.total_bytes += stream.tell()
            stream.close()
        except OSError as err:
            self._fail(err)
            return
        self._writer = self._stream = None
        self._flushed_messages = self._file_messages
        log.info("finished %s (%d messages)", path.name, self._file_messages)
        if not keep_accepting:
            self._state = "idle"
            self._accepting = False
        self._prune()

    def _prune(self) -> None:
        keep = {self._path} if self._writer is not None and self._path is not None else set()
        try:
            deleted = prune(self.dir, self.cfg.budget_bytes, keep=keep, keep_named=self.cfg.keep_named,
                            safety_events=safety_event_count)
        except OSError as err:
            log.warning("pruning %s failed: %s", self.dir, err)
            return
        self.pruned.extend(d["file"] for d in deleted)
        self.pruned_log.extend(deleted)

    def _fail(self, err: BaseException) -> None:
        """Stop recording after an I/O error: close what can be closed, discard the queue."""
        self._accepting = False
        if isinstance(err, OSError) and err.errno is not None:
            name = errno.errorcode.get(err.errno, str(err.errno))
            what = {errno.ENOSPC: "disk full", errno.EFBIG: "file too large", errno.EDQUOT: "disk quota exceeded",
                    errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}.get(err.errno,
                                                                                          err.strerror or "I/O error")
            message = f"{what} ({name}) writing {self._path}; recording stopped"
        else:
            message = f"{type(err).__name__}: {err}; recording stopped"
        self._state, self._error = "error", message
        log.error("%s", message)
        stream = self._stream
        self._writer = self._stream = None
        if stream is not None:
            try:
                stream.close()
            except (OSError, ValueError):
                pass  # the buffered tail cannot be written either; recovery repairs the file on the next start
        discarded = 0
        with self._lock:
            kept = collections.deque(item for item in self._queue if item[0] is None)
            discarded = len(self._queue) - len(kept)
            self._queue.clear()
            self._queue.extend(kept)
            self._pending_bytes = 0
            self.dropped += discarded
