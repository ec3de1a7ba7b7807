"""Reading recordings: list them, iterate their messages by time, export CSV, recent events.

A finished file is read through its MCAP summary and chunk index, so listing a
directory reads only each file's footer and summary, and a time range or a single
topic decompresses only the chunks that hold it (measured in bench/bench_recording.py:
opening a 1 h file and seeking costs milliseconds). A file without a summary (being
written, or left by a crash and not yet repaired) is read front to back with the
``mcap`` stream reader, up to its last complete chunk.

All times at this interface are unix seconds (floats); inside the files they are
nanoseconds (MCAP ``log_time``).
"""

from __future__ import annotations

import csv
import heapq
import io
import logging
import math
import struct
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, TextIO

import orjson
from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.opcode import Opcode
from mcap.reader import SeekingReader
from mcap.records import Channel, Chunk, ChunkIndex, Message, Metadata, Schema
from mcap.stream_reader import StreamReader, get_chunk_data_stream

from server.gateway.recording import topics as _topics
from server.gateway.recording.files import recording_files

log = logging.getLogger(__name__)

MAGIC = b"\x89MCAP0\r\n"
#: no record we write comes near this; a corrupt length field must not allocate gigabytes
RECORD_SIZE_LIMIT = 256 * 1024 * 1024
#: an MCAP record starts with its opcode and length; a message with channel id, sequence, log time
#: and publish time, then its data (MCAP spec, "Records")
_RECORD_HEAD = struct.Struct("<BQ")
_MESSAGE_HEAD = struct.Struct("<HIQ")
_MESSAGE_DATA = 2 + 4 + 8 + 8
#: how a safety event's JSON says so (orjson writes no spaces; a message that quotes it is escaped)
SAFETY_MARK = b'"kind":"safety"'
#: MCAP log times are unsigned 64-bit nanoseconds
_MAX_NS = 2**64 - 1
#: fields of a snapshot (docs/api.md) a CSV column path may start with
SNAPSHOT_FIELDS = frozenset({"seq", "t", "state", "cause", "setpoint", "command", "values", "truth", "behavior",
                             "link", "loop"})


class RecordingError(ValueError):
    """The file is not a readable recording, or a request on it is invalid (the message says which)."""


class Msg(NamedTuple):
    t: float  # log time, unix s
    topic: str
    data: bytes
    log_time_ns: int


def has_footer(path: Path) -> bool:
    """True when the file ends with the MCAP magic (it was finished)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, io.SEEK_END)
            if f.tell() < 2 * len(MAGIC):
                return False
            f.seek(-len(MAGIC), io.SEEK_END)
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def stream_records(f) -> Iterator[Any]:
    """Records of an MCAP stream up to the first incomplete or damaged one (no exception for a cut tail)."""
    try:
        yield from StreamReader(f, skip_magic=False, record_size_limit=RECORD_SIZE_LIMIT).records
    except McapError as err:  # EndOfFile for a cut tail, InvalidMagic, a record over the limit
        log.debug("stream ends at a damaged or cut record: %r", err)
    except Exception as err:  # a chunk cut mid-way fails inside the decompressor or the record parser
        log.debug("stream ends at a damaged record: %r", err)


class Recording:
    """One recording file, opened for reading. Use as a context manager."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._f = open(self.path, "rb")
        except OSError as err:
            raise RecordingError(f"cannot open {self.path.name}: {err.strerror}") from None
        self.complete = False
        self._reader: SeekingReader | None = None
        self.summary = None
        try:
            if self._f.read(len(MAGIC)) != MAGIC:
                raise RecordingError(f"{self.path.name} is not an MCAP file")
            if has_footer(self.path):
                self._f.seek(0)
                self._reader = SeekingReader(self._f, record_size_limit=RECORD_SIZE_LIMIT)
                self.summary = self._reader.get_summary()
                self.complete = self.summary is not None
        except RecordingError:
            self._f.close()
            raise
        except Exception as err:  # McapError, or a parse error of a damaged summary record
            log.info("%s has a damaged summary (%r); reading it front to back", self.path.name, err)
            self._reader, self.summary, self.complete = None, None, False
        self.metadata = self._read_metadata()

    # ------------------------------------------------------------------ context
    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ description
    def _read_metadata(self) -> dict[str, str]:
        found: dict[str, str] = {}
        if self._reader is not None and self.complete:
            try:
                for m in self._reader.iter_metadata():
                    if m.name == _topics.METADATA_NAME:
                        found = dict(m.metadata)
                return found
            except Exception as err:  # a damaged metadata index: fall back to the data section
                log.debug("metadata index unreadable: %r", err)
        self._f.seek(0)
        for rec in stream_records(self._f):
            if isinstance(rec, Metadata) and rec.name == _topics.METADATA_NAME:
                found = dict(rec.metadata)
            elif isinstance(rec, Message):
                break  # ours is written before the first message
        return found

    @property
    def robot(self) -> dict[str, Any]:
        """The robot description recorded with the file (``GET /api/robot`` at the time), or ``{}``."""
        try:
            robot = orjson.loads(self.metadata.get("robot_json", "{}"))
        except orjson.JSONDecodeError:
            return {}
        return robot if isinstance(robot, dict) else {}

    def channel_names(self) -> list[str]:
        return [c["name"] if isinstance(c, dict) else c for c in self.robot.get("channels", []) or []
                if isinstance(c, (dict, str))]

    def info(self) -> dict[str, Any]:
        """Start, end, duration, size, robot and message counts per topic (scans a file without summary)."""
        counts: dict[str, int] = {}
        start_ns = end_ns = None
        if self.complete:
            stats = self.summary.statistics
            for cid, n in (stats.channel_message_counts if stats else {}).items():
                ch = self.summary.channels.get(cid)
                if ch is not None:
                    counts[ch.topic] = counts.get(ch.topic, 0) + n
            if stats and stats.message_count:
                start_ns, end_ns = stats.message_start_time, stats.message_end_time
        else:
            for m in self.messages():
                counts[m.topic] = counts.get(m.topic, 0) + 1
                start_ns = m.log_time_ns if start_ns is None else min(start_ns, m.log_time_ns)
                end_ns = m.log_time_ns if end_ns is None else max(end_ns, m.log_time_ns)
        md = self.metadata
        try:
            size = self.path.stat().st_size
        except OSError:
            size = 0
        start_t = start_ns / 1e9 if start_ns is not None else _float(md.get("started_t"))
        end_t = end_ns / 1e9 if end_ns is not None else start_t
        return {
            "file": self.path.name,
            "name": md.get("name", ""),
            "named": md.get("named") == "true",
            "session": md.get("session", ""),
            "part": int(md["part"]) if md.get("part", "").isdigit() else 0,
            "start_t": start_t,
            "end_t": end_t,
            "duration_s": round(end_t - start_t, 3) if start_t is not None and end_t is not None else 0.0,
            "size_bytes": size,
            "robot": md.get("robot", ""),
            "profile": md.get("profile", ""),
            "counts": counts,
            "complete": self.complete,
        }

    # ------------------------------------------------------------------ messages
    def messages(self, topics: Iterable[str] | str | None = None, start_t: float | None = None,
                 end_t: float | None = None, *, reverse: bool = False) -> Iterator[Msg]:
        """Messages with ``start_t <= t < end_t`` in log-time order (``reverse`` for newest first).

        ``topics`` limits the topics (a finished file then decompresses only the chunks
        that hold them). Payloads are the raw JSON bytes as recorded."""
        wanted = {topics} if isinstance(topics, str) else (set(topics) if topics is not None else None)
        for v in (start_t, end_t):
            if v is not None and not math.isfinite(v):
                raise RecordingError(f"a time range needs finite times, not {v}")
        if start_t is not None and end_t is not None and end_t < start_t:
            raise RecordingError(f"end time {end_t} is before start time {start_t}")
        # clamped to what a log time can be: 1e308 s is "after everything", not an overflow
        lo = min(max(math.floor(start_t * 1e9), 0), _MAX_NS) if start_t is not None else None
        hi = min(max(math.ceil(end_t * 1e9), 0), _MAX_NS) if end_t is not None else None
        if self.complete:
            try:
                if not reverse and self.summary.chunk_indexes:
                    yield from self._indexed_messages(wanted, lo, hi)
                    return
                for _schema, channel, message in self._reader.iter_messages(
                        topics=wanted, starting_at=lo, ending_before=hi, reverse=reverse):
                    yield Msg(message.log_time / 1e9, channel.topic, message.data, message.log_time)
            except Exception as err:  # a damaged index or record: McapError, KeyError, or zstd/lz4's own errors
                raise RecordingError(f"{self.path.name} is damaged: {type(err).__name__}: {err}") from err
            return
        found = [m for m in self._stream_messages(wanted, lo, hi)]
        found.sort(key=lambda m: m.log_time_ns, reverse=reverse)
        yield from found

    def _indexed_messages(self, wanted: set[str] | None, lo: int | None, hi: int | None) -> Iterator[Msg]:
        """The chunks that hold ``wanted`` in ``[lo, hi)``, oldest first, merged into log-time order.

        What the ``mcap`` reader's ``iter_messages`` does, at a fifth of the cost: it parses every
        record of a chunk into an object and orders them with a heap of Python objects (its
        ``__lt__`` was 40 % of a 30-min report); here a chunk's messages are sliced out of its
        bytes and ordered as tuples, compared in C. A chunk's messages stay in the heap only
        until a chunk that starts later comes (ours follow each other in time)."""
        summary = self.summary
        topic_of = {cid: ch.topic for cid, ch in summary.channels.items() if wanted is None or ch.topic in wanted}
        chunks = sorted((ci for ci in summary.chunk_indexes
                         if (lo is None or ci.message_end_time >= lo) and (hi is None or ci.message_start_time < hi)
                         and any(cid in topic_of for cid in ci.message_index_offsets)),
                        key=lambda ci: (ci.message_start_time, ci.chunk_start_offset))
        # (log time, chunk offset, place in the chunk): equal times in file order, as the mcap reader has them
        heap: list[tuple[int, int, int, int, bytes]] = []
        for ci in chunks:
            while heap and heap[0][0] < ci.message_start_time:
                t, _o, _k, cid, data = heapq.heappop(heap)
                yield Msg(t / 1e9, topic_of[cid], data, t)
            buf = self._chunk_bytes(ci)
            off, end, k = 0, len(buf), 0
            while off < end:
                opcode, length = _RECORD_HEAD.unpack_from(buf, off)
                off += _RECORD_HEAD.size
                if opcode == Opcode.MESSAGE:
                    cid, _seq, t = _MESSAGE_HEAD.unpack_from(buf, off)
                    if cid in topic_of and (lo is None or t >= lo) and (hi is None or t < hi):
                        heapq.heappush(heap, (t, ci.chunk_start_offset, k, cid, buf[off + _MESSAGE_DATA:off + length]))
                        k += 1
                off += length
        while heap:
            t, _o, _k, cid, data = heapq.heappop(heap)
            yield Msg(t / 1e9, topic_of[cid], data, t)

    def _chunk_bytes(self, ci: ChunkIndex) -> bytes:
        """The records of the chunk ``ci`` points to, decompressed."""
        self._f.seek(ci.chunk_start_offset + _RECORD_HEAD.size)
        stream, size = get_chunk_data_stream(Chunk.read(ReadDataStream(self._f)))  # the library's decompression
        return stream.read(size)

    def _stream_messages(self, wanted: set[str] | None, lo: int | None, hi: int | None) -> Iterator[Msg]:
        self._f.seek(0)
        channels: dict[int, str] = {}
        for rec in stream_records(self._f):
            if isinstance(rec, Channel):
                channels[rec.id] = rec.topic
            elif isinstance(rec, Message):
                topic = channels.get(rec.channel_id)
                if topic is None or (wanted is not None and topic not in wanted):
                    continue
                if (lo is not None and rec.log_time < lo) or (hi is not None and rec.log_time >= hi):
                    continue
                yield Msg(rec.log_time / 1e9, topic, rec.data, rec.log_time)

    def schemas(self) -> dict[str, tuple[str, str, bytes]]:
        """topic → (schema name, schema encoding, schema data)."""
        out = {}
        if self.complete:
            for ch in self.summary.channels.values():
                sc = self.summary.schemas.get(ch.schema_id)
                out[ch.topic] = (sc.name, sc.encoding, sc.data) if sc else ("", "", b"")
            return out
        self._f.seek(0)
        by_id: dict[int, Schema] = {}
        for rec in stream_records(self._f):
            if isinstance(rec, Schema):
                by_id[rec.id] = rec
            elif isinstance(rec, Channel):
                sc = by_id.get(rec.schema_id)
                out[rec.topic] = (sc.name, sc.encoding, sc.data) if sc else ("", "", b"")
        return out

    def snapshots(self, start_t: float | None = None, end_t: float | None = None) -> Iterator[tuple[float, dict]]:
        """Telemetry snapshots as ``(t, dict)``; undecodable ones are skipped."""
        for m in self.messages(_topics.TELEMETRY, start_t, end_t):
            try:
                snap = orjson.loads(m.data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(snap, dict):
                yield m.t, snap

    def events(self, start_t: float | None = None, end_t: float | None = None) -> list[dict[str, Any]]:
        return [e for _t, e in _decoded(self.messages(_topics.EVENTS, start_t, end_t))]

    def safety_events(self) -> int:
        """How many safety events the file holds: from the count written when it was finished, or by
        reading its events (a file repaired after a crash, or written before the count existed)."""
        if self.complete:
            try:
                for m in self._reader.iter_metadata():
                    if m.name == _topics.EVENTS_METADATA_NAME and m.metadata.get("safety_events", "").isdigit():
                        return int(m.metadata["safety_events"])
            except Exception as err:  # a damaged metadata index: count them
                log.debug("metadata index unreadable: %r", err)
        n = 0
        try:
            for m in self.messages(_topics.EVENTS):
                n += SAFETY_MARK in m.data
        except RecordingError as err:  # a damaged chunk: what could be read counts
            log.info("%s: %s; %d safety event(s) before the damage", self.path.name, err, n)
        return n

    # ------------------------------------------------------------------ columns and CSV
    def column_getters(self, columns: list[str]) -> list[Callable[[dict], Any]]:
        """Getters for CSV/report columns: a channel name reads ``values[name]``; a dotted path
        (``setpoint.linear``, ``behavior.target_deg``) or a top-level field (``state``) reads the
        snapshot. ``RecordingError`` names an unknown column."""
        if not columns:
            raise RecordingError("choose at least one column")
        known = set(self.channel_names())
        if not known:  # an older file without a description: the first snapshot's channels
            for _t, snap in self.snapshots():
                known = set((snap.get("values") or {}).keys())
                break
        getters = []
        for col in columns:
            if not isinstance(col, str) or not col:
                raise RecordingError(f"column {col!r} must be a non-empty string")
            head = col.split(".", 1)[0]
            if "." in col or col in SNAPSHOT_FIELDS:
                if head not in SNAPSHOT_FIELDS:
                    raise RecordingError(f"unknown column {col!r}: a path must start with one of "
                                         f"{', '.join(sorted(SNAPSHOT_FIELDS))}")
                getters.append(_path_getter(col.split(".")))
            elif col in known:
                getters.append(_path_getter(["values", col]))
            else:
                raise RecordingError(f"unknown channel {col!r} (recorded: {', '.join(sorted(known)) or 'none'})")
        return getters

    def export_csv(self, out: TextIO, columns: list[str], start_t: float | None = None,
                   end_t: float | None = None, max_rows: int | None = None) -> int:
        """Write ``t`` (unix s) and the chosen columns of each snapshot as CSV; returns the row count.
        Missing or null values are empty cells."""
        rows = -1  # the header
        for chunk in self.iter_csv(columns, start_t, end_t, max_rows):
            out.write(chunk)
            rows += chunk.count("\n")
        return rows

    def iter_csv(self, columns: list[str], start_t: float | None = None, end_t: float | None = None,
                 max_rows: int | None = None, batch_rows: int = 5000) -> Iterator[str]:
        """:meth:`export_csv` as text chunks of ``batch_rows`` rows (for streaming a large export).
        Unknown columns raise before the first chunk."""
        getters = self.column_getters(columns)
        return self._csv_chunks(columns, getters, start_t, end_t, max_rows, batch_rows)

    def _csv_chunks(self, columns, getters, start_t, end_t, max_rows, batch_rows) -> Iterator[str]:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["t", *columns])
        rows = 0
        for t, snap in self.snapshots(start_t, end_t):
            if max_rows is not None and rows >= max_rows:
                break
            w.writerow([f"{t:.6f}", *(_cell(g(snap)) for g in getters)])
            rows += 1
            if rows % batch_rows == 0:
                yield buf.getvalue()
                buf.seek(0)
                buf.truncate()
        if buf.tell():
            yield buf.getvalue()


def _path_getter(parts: list[str]) -> Callable[[dict], Any]:
    def get(snap: dict) -> Any:
        v: Any = snap
        for p in parts:
            if not isinstance(v, dict):
                return None
            v = v.get(p)
        return v
    return get


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    if isinstance(v, (int, str)):
        return str(v)
    return orjson.dumps(v).decode()


def _float(s: str | None) -> float | None:
    try:
        return float(s) if s else None
    except ValueError:
        return None


def _decoded(msgs: Iterable[Msg]) -> Iterator[tuple[float, dict]]:
    for m in msgs:
        try:
            obj = orjson.loads(m.data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            yield m.t, obj


# ---------------------------------------------------------------------- directory-level helpers
_INFO_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}
_INFO_CACHE_MAX = 4096


def recording_info(path: Path) -> dict[str, Any]:
    """:meth:`Recording.info` of a file, cached by (path, size, mtime)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    info = _INFO_CACHE.get(key)
    if info is None:
        with Recording(path) as rec:
            info = rec.info()
        if len(_INFO_CACHE) >= _INFO_CACHE_MAX:
            _INFO_CACHE.clear()
        _INFO_CACHE[key] = info
    return dict(info)


_SAFETY_CACHE: dict[tuple[str, int, int], int] = {}


def safety_event_count(path: Path) -> int:
    """:meth:`Recording.safety_events` of a file, cached by (path, size, mtime); an unreadable file
    counts as holding none (it has nothing anyone can read back)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    n = _SAFETY_CACHE.get(key)
    if n is None:
        try:
            with Recording(path) as rec:
                n = rec.safety_events()
        except RecordingError as err:
            log.info("%s: %s; counted as holding no safety event", path.name, err)
            n = 0
        if len(_SAFETY_CACHE) >= _INFO_CACHE_MAX:
            _SAFETY_CACHE.clear()
        _SAFETY_CACHE[key] = n
    return n


def list_recordings(directory: str | Path, active: str | None = None) -> list[dict[str, Any]]:
    """Every recording in ``directory``, newest first (see :meth:`Recording.info`).

    ``active`` is the file the recorder is writing: it is listed from its size and
    metadata only (``"active": true``, counts empty) instead of being scanned; the caller
    can overlay the live counts from ``Recorder.status()``. Unreadable files are listed
    with an ``error``."""
    directory = Path(directory)
    out = []
    for path in reversed(recording_files(directory)):
        if path.name == active:
            try:
                with Recording(path) as rec:
                    md = rec.metadata
                st = path.stat()
            except (RecordingError, OSError) as err:
                out.append({"file": path.name, "error": str(err), "active": True})
                continue
            started = _float(md.get("started_t"))
            out.append({"file": path.name, "name": md.get("name", ""), "named": md.get("named") == "true",
                        "session": md.get("session", ""), "part": 0, "start_t": started, "end_t": None,
                        "duration_s": None, "size_bytes": st.st_size, "robot": md.get("robot", ""),
                        "profile": md.get("profile", ""), "counts": {}, "complete": False, "active": True})
            continue
        try:
            info = recording_info(path)
        except (RecordingError, OSError) as err:
            out.append({"file": path.name, "error": str(err), "active": False})
            continue
        info["active"] = False
        out.append(info)
    return out


def recent_events(directory: str | Path, limit: int = 100) -> list[dict[str, Any]]:
    """The last ``limit`` events recorded in ``directory`` (newest last), across files and restarts.

    Reads only the event topic of the newest files until it has enough, so serving
    ``/api/events`` after a restart does not depend on the size of the archive."""
    if limit <= 0:
        return []
    found: list[tuple[int, dict]] = []
    for path in reversed(recording_files(Path(directory))):
        try:
            with Recording(path) as rec:
                for m in rec.messages(_topics.EVENTS, reverse=True):
                    try:
                        ev = orjson.loads(m.data)
                    except orjson.JSONDecodeError:
                        continue
                    found.append((m.log_time_ns, ev))
                    if len(found) >= limit:
                        break
        except (RecordingError, OSError) as err:
            log.info("skipping %s while reading events: %s", path.name, err)
            continue
        if len(found) >= limit:
            break
    found.sort(key=lambda p: p[0])
    return [ev for _t, ev in found[-limit:]]
