"""A bounded pool for the jobs that read a whole recording (reports, CSV, info, events), with
admission limits per user and in all, one computation per identical request, and cached answers.

Measured on this 2-core VM (bench/bench_reports.py, a 30-minute recording of 90,000 snapshots):
six parallel reports on the gateway's default thread pool (the old way) held the GIL for
~20 s; the lease holder's heartbeats waited up to 0.6 s (link-loss stop at 0.5 s), logins waited
10 s (argon2 shared that thread pool) and the gateway's RSS went to 600 MB and stayed. Hence:

* **its own workers**: ``report_workers`` child processes (``report_pool = "process"``, the
  default) forked from a ``forkserver`` that has the reader preloaded, one process per job, at
  ``nice`` 10, killed with the gateway (``PR_SET_PDEATHSIG``): the job's CPU is not the event
  loop's, its GIL is its own, and its memory goes back to the system when it ends.
  ``report_pool = "thread"`` runs them on a thread pool of that size instead (for comparison;
  the bench prints both);
* **admission**: at most ``reports_per_user`` jobs of one user (or, without a user, one
  address) waiting or running, else 429 ``too_many_jobs``; at most ``report_workers +
  report_queue`` in all, else 503 ``busy``; both with ``Retry-After`` (seconds, from the recent
  job durations). A refused request costs nothing;
* **one computation per question**: a request identical to one in progress (same file, same
  parameters) waits for that job's answer and takes no place;
* **cached answers**: answers are files (:mod:`server.gateway.reports.cache`), sent from the
  file piece by piece; the same question on the same unchanged file is answered from the cache
  without a job.

A client that goes away does not cancel a job (its answer is cached for the next asker);
closing the pool (the gateway stops) kills the running ones.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from pathlib import Path
from typing import Any, Literal

import orjson

from server.errors import ApiError
from server.gateway.reports.cache import Entry, Key, ResultCache
from server.gateway.reports.jobs import SUFFIX, RecordingError, run_job

log = logging.getLogger(__name__)

#: niceness of a worker process: the event loop and the runtime come first
WORKER_NICE = 10
#: how long a job may run before it is killed (a 1 h file's report takes ~10 s here)
JOB_TIMEOUT_S = 600.0
_PRELOAD = ["server.gateway.reports.jobs", "server.gateway.reports.report", "server.gateway.reports.mission"]


class JobRefused(ApiError):
    """Too many jobs (per user: 429 ``too_many_jobs``; in all: 503 ``busy``), with ``Retry-After``."""

    def __init__(self, message: str, *, code: str, status: int, retry_after_s: float) -> None:
        super().__init__(message, code=code, status=status)
        self.retry_after_s = max(1, math.ceil(retry_after_s))
        self.headers = {"Retry-After": str(self.retry_after_s)}


def _child(conn: multiprocessing.connection.Connection, kind: str, path: str, params: dict[str, Any],
           out_path: str) -> None:
    """A worker process: run one job, send ``(ok, size | error)`` back, exit."""
    from server.procutil import die_with_parent

    die_with_parent(signal.SIGKILL)  # the forkserver (our parent) goes when the gateway does
    os.nice(WORKER_NICE)
    try:
        conn.send((True, run_job(kind, path, params, out_path)))
    except RecordingError as err:
        conn.send((False, ("recording", str(err))))
    except BaseException as err:  # noqa: BLE001 - the gateway logs it; the process ends here anyway
        conn.send((False, ("bug", f"{type(err).__name__}: {err}")))
    finally:
        conn.close()


class ReportPool:
    """Runs jobs of :mod:`server.gateway.reports.jobs` under the limits of the module docstring."""

    def __init__(self, cache: ResultCache, *, kind: Literal["process", "thread"] = "process", workers: int = 1,
                 queue: int = 4, per_user: int = 2) -> None:
        self.cache = cache
        self.kind = kind
        self.workers = workers
        self.queue = queue
        self.per_user = per_user
        self._slots = asyncio.Semaphore(workers)
        self._running: dict[Key, asyncio.Future] = {}
        self._by_user: collections.Counter[str] = collections.Counter()
        self._in_flight = 0
        self._durations: collections.deque[float] = collections.deque(maxlen=16)
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._ctx: Any = None
        self._procs: set[Any] = set()
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self.completed = 0
        self.refused = 0
        self.joined = 0
        self.hits = 0

    # ------------------------------------------------------------------ the one call
    async def answer(self, who: str, kind: str, path: Path, params: dict[str, Any]) -> Entry:
        """The cached answer of job ``kind`` on ``path`` with ``params``, computed if needed, pinned:
        call ``cache.release(entry)`` once its file is open. Raises :class:`JobRefused`, or
        :class:`RecordingError` for a bad request on this file."""
        st = await asyncio.to_thread(os.stat, path)
        key: Key = (kind, path.name, st.st_ino, st.st_size, st.st_mtime_ns,
                    orjson.dumps(params, option=orjson.OPT_SORT_KEYS).decode())
        asked = False
        while True:
            entry = self.cache.get(key)
            if entry is not None:
                self.hits += not asked
                return entry
            asked = True
            running = self._running.get(key)
            if running is not None:  # the same question is being answered: wait for it, take no place
                self.joined += 1
            else:
                self._admit(who)
                running = self._running[key] = asyncio.get_running_loop().create_future()
                self._by_user[who] += 1
                self._in_flight += 1
                task = asyncio.create_task(self._compute(key, kind, path, params, running))
                self._tasks.add(task)
                task.add_done_callback(lambda t: self._done(who, t))
            # a request that goes away leaves the job running: its answer is cached for the next one
            await asyncio.shield(running)
            # answered: the loop takes it from the cache, pinned (computing again in the unlikely
            # case that it was evicted before this request woke up)

    def _done(self, who: str, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._by_user[who] -= 1
        if self._by_user[who] <= 0:
            del self._by_user[who]
        self._in_flight -= 1

    def _admit(self, who: str) -> None:
        typical_s = sorted(self._durations)[len(self._durations) // 2] if self._durations else 5.0
        if self._closed:
            raise ApiError("the gateway is stopping", code="busy", status=503)
        if self._by_user[who] >= self.per_user:
            self.refused += 1
            raise JobRefused(f"{who} has {self._by_user[who]} report or export job(s) in progress (at most "
                             f"{self.per_user}): wait for them", code="too_many_jobs", status=429,
                             retry_after_s=typical_s)
        if self._in_flight >= self.workers + self.queue:
            self.refused += 1
            raise JobRefused(f"{self._in_flight} report or export jobs are in progress or waiting (at most "
                             f"{self.workers + self.queue}): try again later", code="busy", status=503,
                             retry_after_s=typical_s * (self._in_flight - self.workers + 1) / self.workers)

    async def _compute(self, key: Key, kind: str, path: Path, params: dict[str, Any], fut: asyncio.Future) -> None:
        """Run the job and settle ``fut``: its answer indexed in the cache, or the error every asker gets
        (:class:`RecordingError` for a bad question, else an :class:`ApiError`; never left pending)."""
        out: Path | None = None
        try:
            out = self.cache.new_path(SUFFIX[kind])
            async with self._slots:
                t0 = time.monotonic()
                if self.kind == "process":
                    await self._in_process(kind, str(path), params, str(out))
                else:
                    await asyncio.get_running_loop().run_in_executor(self._thread_pool(), run_job, kind, str(path),
                                                                     params, str(out))
                self._durations.append(time.monotonic() - t0)
            if self._closed:
                raise ApiError("the gateway is stopping", code="busy", status=503)
            self.cache.add(key, out)
            self.completed += 1
            fut.set_result(None)
        except BaseException as err:
            if out is not None:
                self.cache.discard(out)
                self.cache.discard(Path(str(out) + ".part"))
            if isinstance(err, (RecordingError, ApiError)):
                failure: Exception = err
            elif isinstance(err, Exception):  # a bug, or the cache cannot be written (a full disk)
                log.error("the %s job on %s failed: %s: %s", kind, path.name, type(err).__name__, err,
                          exc_info=not isinstance(err, OSError))
                failure = ApiError(f"the {kind} job failed: {type(err).__name__}: {err}", code="job_failed",
                                   status=500)
            else:
                failure = ApiError("the gateway is stopping", code="busy", status=503)
            if not fut.done():
                fut.set_exception(failure)
                fut.exception()  # retrieved: a request that went away must not leave an unretrieved error
            if not isinstance(err, Exception):
                raise
        finally:
            if self._running.get(key) is fut:
                del self._running[key]

    # ------------------------------------------------------------------ workers
    def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="report")
        return self._threads

    async def _in_process(self, kind: str, path: str, params: dict[str, Any], out: str) -> None:
        if self._ctx is None:
            self._ctx = multiprocessing.get_context("forkserver")
            self._ctx.set_forkserver_preload(_PRELOAD)
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_child, args=(send, kind, path, params, out), name=f"report-{kind}",
                                 daemon=True)
        await asyncio.to_thread(proc.start)  # the first start launches the forkserver (imports: ~1 s)
        send.close()
        self._procs.add(proc)
        loop = asyncio.get_running_loop()
        readable = loop.create_future()
        loop.add_reader(recv.fileno(), lambda: readable.done() or readable.set_result(None))
        try:
            async with asyncio.timeout(JOB_TIMEOUT_S):
                await readable
            try:
                ok, value = recv.recv()
            except EOFError:  # it died without an answer (killed, out of memory)
                raise ApiError(f"the {kind} job on {Path(path).name} ended without an answer (exit code "
                               f"{proc.exitcode}); try again", code="job_failed", status=500) from None
        except TimeoutError:
            raise ApiError(f"the {kind} job on {Path(path).name} took over {JOB_TIMEOUT_S:g} s and was stopped",
                           code="job_failed", status=500) from None
        finally:
            loop.remove_reader(recv.fileno())
            recv.close()
            if proc.is_alive():
                proc.kill()
            await asyncio.to_thread(proc.join, 5.0)
            self._procs.discard(proc)
        if not ok:
            what, message = value
            if what == "recording":
                raise RecordingError(message)
            log.error("the %s job on %s failed: %s", kind, Path(path).name, message)
            raise ApiError(f"the {kind} job failed: {message}", code="job_failed", status=500)

    async def close(self) -> None:
        """Stop: kill running jobs, drop the cache."""
        self._closed = True
        for proc in list(self._procs):
            if proc.is_alive():
                proc.kill()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
        pending = list(self._running.values())
        if pending:  # killed processes answer at once; a thread finishes its job (not waited for long)
            await asyncio.wait([asyncio.ensure_future(asyncio.shield(f)) for f in pending], timeout=5.0)
        self.cache.close()

    def stats(self) -> dict[str, Any]:
        return {"kind": self.kind, "workers": self.workers, "in_flight": self._in_flight,
                "completed": self.completed, "refused": self.refused, "joined": self.joined, "hits": self.hits,
                "cache": self.cache.stats()}


__all__ = ["JobRefused", "ReportPool"]
