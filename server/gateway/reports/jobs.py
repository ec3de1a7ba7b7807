"""The work behind the recording routes that read a whole file: info, events, CSV, reports.

Each job reads one recording and writes its answer to a file (``out_path``), never to
memory the gateway holds: the gateway sends that file as it is and keeps it as the cached
answer (:mod:`server.gateway.reports.cache`). A job runs in a worker of
:class:`server.gateway.reports.pool.ReportPool`, a child process by default, so its CPU
time is not the event loop's and its memory is returned when it ends. Why a process:
six parallel reports of a 30-minute file in the gateway's threads held the GIL so much
that the lease holder's heartbeats waited up to 612 ms (a link-loss stop) and the
gateway's RSS went from 121 to 605 MB for good (issue 18; bench/bench_reports.py).

A job is named by a string (``JOBS``) so a process worker can be handed it; its
parameters are plain values. Bad parameters (an unknown column, end before start) raise
:class:`server.gateway.recording.reader.RecordingError` before anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import orjson

from server.gateway.recording.reader import Recording, RecordingError

#: suffix (and so content type) of each job's answer
SUFFIX = {"info": ".json", "events": ".json", "report": ".json", "report.html": ".html", "csv": ".csv",
          "missions": ".json", "missions.html": ".html"}


def _info(path: str, params: dict[str, Any], out: Any) -> None:
    with Recording(path) as rec:
        out.write(orjson.dumps({**rec.info(), "robot_description": rec.robot, "channels": rec.channel_names()},
                               option=orjson.OPT_SERIALIZE_NUMPY))


def _events(path: str, params: dict[str, Any], out: Any) -> None:
    with Recording(path) as rec:
        out.write(orjson.dumps({"events": rec.events(params.get("start_t"), params.get("end_t"))}))


# the report modules (numpy, the plotter) are imported by the job: the gateway imports this module at start for
# the names below, and the pool's forkserver preloads them (pool._PRELOAD) so that every job finds them imported
def _report(path: str, params: dict[str, Any], out: Any) -> None:
    from server.gateway.reports.report import run_report

    rep = run_report(path, params.get("channels"), None, params.get("start_t"), params.get("end_t"),
                     plots=bool(params.get("plots")))
    out.write(orjson.dumps(rep, option=orjson.OPT_SERIALIZE_NUMPY))


def _report_html(path: str, params: dict[str, Any], out: Any) -> None:
    from server.gateway.reports.report import report_html, run_report

    rep = run_report(path, params.get("channels"), None, params.get("start_t"), params.get("end_t"), plots=True)
    out.write(report_html(rep).encode())


def _csv(path: str, params: dict[str, Any], out: Any) -> None:
    with Recording(path) as rec:
        # the column check raises before the first row; rows are written as they are read
        for chunk in rec.iter_csv(params["columns"], params.get("start_t"), params.get("end_t"),
                                  params.get("max_rows")):
            out.write(chunk.encode())


def _missions(path: str, params: dict[str, Any], out: Any) -> None:
    from server.gateway.reports.mission import recorded_missions

    out.write(orjson.dumps(recorded_missions(path), option=orjson.OPT_SERIALIZE_NUMPY))


def _missions_html(path: str, params: dict[str, Any], out: Any) -> None:
    from server.gateway.reports.mission import recorded_missions_html

    out.write(recorded_missions_html(path).encode())


JOBS: dict[str, Callable[[str, dict[str, Any], Any], None]] = {
    "info": _info, "events": _events, "report": _report, "report.html": _report_html, "csv": _csv,
    "missions": _missions, "missions.html": _missions_html}


def run_job(kind: str, path: str, params: dict[str, Any], out_path: str) -> int:
    """Run job ``kind`` on the recording at ``path`` and write its answer to ``out_path``
    (through ``<out_path>.part``, renamed when complete). Returns the answer's size in bytes.
    Nothing is left at either path when it raises."""
    part = out_path + ".part"
    try:
        with open(part, "wb") as out:
            JOBS[kind](path, params, out)
        os.replace(part, out_path)
    except BaseException:
        Path(part).unlink(missing_ok=True)
        raise
    return os.stat(out_path).st_size


__all__ = ["JOBS", "RecordingError", "SUFFIX", "run_job"]
