"""The ``[recording]`` config table as a typed struct (msgspec).

Sizes are bytes and times seconds, so there is nothing to convert; every field has a
default, so an empty or missing table means "recorder available, nothing recorded
until a named recording is started".

>>> cfg = load_recording_config({"always_on": True, "flush_s": 0.5})
>>> cfg.always_on, cfg.flush_s, cfg.rotate_s
(True, 0.5, 3600.0)
>>> load_recording_config({"flush_s": 0})
Traceback (most recent call last):
...
ValueError: [recording] Expected `float` >= 0.05 - at `$.flush_s`
>>> load_recording_config({"flush": 1})
Traceback (most recent call last):
...
ValueError: [recording] Object contains unknown field `flush`
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

MiB = 1024 * 1024


class RecordingConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Where and how runs are recorded to MCAP files."""

    #: directory of the recordings (relative paths are relative to the working directory)
    dir: str = "recordings"
    #: record every run from start-up, without a named recording being started
    always_on: bool = False
    #: start a new file when the current one reaches this size …
    rotate_bytes: Annotated[int, msgspec.Meta(ge=64 * 1024)] = 256 * MiB
    #: … or this age
    rotate_s: Annotated[float, msgspec.Meta(ge=1.0)] = 3600.0
    #: delete the oldest files when the directory holds more than this
    budget_bytes: Annotated[int, msgspec.Meta(ge=MiB)] = 4096 * MiB
    #: pruning order among the files without safety events: false = named recordings first (what an
    #: operator records cannot evict the always-on one), true = automatic ones first
    keep_named: bool = False
    #: at most this much data is lost by a crash: the current chunk is closed and flushed this often
    flush_s: Annotated[float, msgspec.Meta(ge=0.05, le=60.0)] = 1.0
    #: also fsync after each flush (survives a power cut, costs disk writes)
    fsync: bool = False
    #: record camera frames as foxglove.CompressedImage on /camera/image
    video_frames: bool = False
    #: at most this many frames per second are recorded (the rest are skipped, not counted as drops)
    video_fps: Annotated[float, msgspec.Meta(gt=0.0, le=120.0)] = 5.0
    #: messages waiting for the writer thread; above this snapshots and frames are dropped and counted
    queue_size: Annotated[int, msgspec.Meta(ge=16, le=1_000_000)] = 4096
    #: bytes waiting for the writer thread (frames are big); same policy as ``queue_size``
    queue_bytes: Annotated[int, msgspec.Meta(ge=MiB)] = 64 * MiB
    #: chunk compression
    compression: Literal["zstd", "lz4", "none"] = "zstd"
    #: a chunk is closed at this size even before ``flush_s``
    chunk_bytes: Annotated[int, msgspec.Meta(ge=4096, le=64 * MiB)] = MiB
    #: where report, CSV, info and event jobs run: child processes, or threads of the gateway
    report_pool: Literal["process", "thread"] = "process"
    #: jobs running at once
    report_workers: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1
    #: jobs waiting for a worker beyond those (more: 503 busy)
    report_queue: Annotated[int, msgspec.Meta(ge=0, le=256)] = 4
    #: jobs one user (or address) may have running or waiting (more: 429 too_many_jobs)
    reports_per_user: Annotated[int, msgspec.Meta(ge=1, le=64)] = 2
    #: disk kept for job answers, in ``[server] state_dir``/report-cache
    report_cache_bytes: Annotated[int, msgspec.Meta(ge=0)] = 256 * MiB


def load_recording_config(table: dict[str, Any] | None) -> RecordingConfig:
    """Validate a ``[recording]`` table; errors are ``ValueError`` naming the key."""
    try:
        return msgspec.convert(table or {}, RecordingConfig)
    except msgspec.ValidationError as err:
        raise ValueError(f"[recording] {err}") from None
