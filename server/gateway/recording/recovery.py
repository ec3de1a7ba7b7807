"""Repair of recordings left unfinished by a crash (``kill -9``, power cut, disk full).

An unfinished MCAP file has no summary, index or footer: its data section simply
stops, usually inside a chunk that was being written. Everything up to the last
complete chunk is intact (the recorder flushes whole chunks). Recovery reads those
records with the ``mcap`` stream reader and rewrites them into a new file with a
proper summary and chunk index, then atomically replaces the original, so the
recording is listed, seekable and openable in Foxglove like any other. Files with
nothing worth keeping are removed; files that are not MCAP at all are renamed
``*.mcap.corrupt`` so they stop being listed but are not destroyed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from mcap.records import Channel, Header, Message, Metadata, Schema
from mcap.writer import CompressionType, Writer

from server.gateway.recording.files import recording_files
from server.gateway.recording.reader import MAGIC, has_footer, stream_records

log = logging.getLogger(__name__)

TMP_SUFFIX = ".recovering"


def recover_file(path: Path) -> dict[str, Any]:
    """Rewrite an unfinished ``path`` with a summary and index. Returns what was done:
    ``{"file", "action": "ok" | "repaired" | "removed_empty" | "quarantined", "messages",
    "bytes_before", "bytes_after"}``."""
    size = path.stat().st_size
    report: dict[str, Any] = {"file": path.name, "action": "ok", "messages": 0, "bytes_before": size,
                              "bytes_after": size}
    if has_footer(path):
        return report
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            target = path.with_name(path.name + ".corrupt")
            os.replace(path, target)
            log.warning("%s is not an MCAP file; renamed to %s", path.name, target.name)
            return {**report, "action": "quarantined", "bytes_after": 0}
        f.seek(0)
        tmp = path.with_name(path.name + TMP_SUFFIX)
        messages = metadata = 0
        with open(tmp, "wb") as out:
            writer: Writer | None = None
            schema_ids: dict[int, int] = {}
            channel_ids: dict[int, int] = {}
            pending_schemas: dict[int, Schema] = {}
            header = Header(profile="", library="teleop-recorder (recovered)")
            for rec in stream_records(f):
                if isinstance(rec, Header):
                    header = Header(profile=rec.profile, library=f"{rec.library} (recovered)")
                    continue
                if writer is None:
                    writer = Writer(out, compression=CompressionType.ZSTD)
                    writer.start(profile=header.profile, library=header.library)
                if isinstance(rec, Schema):
                    pending_schemas[rec.id] = rec
                elif isinstance(rec, Channel):
                    sid = 0
                    if rec.schema_id:
                        if rec.schema_id not in schema_ids and rec.schema_id in pending_schemas:
                            s = pending_schemas[rec.schema_id]
                            schema_ids[s.id] = writer.register_schema(s.name, s.encoding, s.data)
                        sid = schema_ids.get(rec.schema_id, 0)
                    channel_ids[rec.id] = writer.register_channel(rec.topic, rec.message_encoding, sid,
                                                                  dict(rec.metadata))
                elif isinstance(rec, Message):
                    cid = channel_ids.get(rec.channel_id)
                    if cid is None:
                        continue  # its channel record was lost: the message cannot be interpreted
                    writer.add_message(cid, log_time=rec.log_time, data=rec.data, publish_time=rec.publish_time,
                                       sequence=rec.sequence)
                    messages += 1
                elif isinstance(rec, Metadata):
                    writer.add_metadata(rec.name, dict(rec.metadata))
                    metadata += 1
            if writer is not None:
                writer.finish()
            out.flush()
            os.fsync(out.fileno())
    if messages == 0:
        tmp.unlink()
        path.unlink()
        log.warning("removed %s: unfinished and no complete message in it", path.name)
        return {**report, "action": "removed_empty", "bytes_after": 0}
    os.replace(tmp, path)
    after = path.stat().st_size
    log.warning("repaired unfinished recording %s: %d messages kept (%d → %d bytes)", path.name, messages, size, after)
    return {**report, "action": "repaired", "messages": messages, "bytes_after": after}


def recover_directory(directory: Path, skip: set[str] = frozenset()) -> list[dict[str, Any]]:
    """Repair every unfinished recording in ``directory`` (except the names in ``skip``) and
    remove temporary files of an interrupted recovery. Returns one report per file acted on."""
    directory = Path(directory)
    for tmp in directory.glob(f"*.mcap{TMP_SUFFIX}"):
        tmp.unlink(missing_ok=True)
    reports = []
    for path in recording_files(directory):
        if path.name in skip:
            continue
        report = recover_file(path)
        if report["action"] != "ok":
            reports.append(report)
    return reports
