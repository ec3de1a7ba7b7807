"""The report job pool and its answer cache, in process, with real worker processes (issue 18, item 4)."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

import pytest

from server.errors import ApiError
from server.gateway.recording.reader import RecordingError
from server.gateway.reports.cache import LOCK_NAME, ResultCache
from server.gateway.reports.pool import JobRefused, ReportPool
from tests.server.gateway.recording.synthetic import write_long_recording

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    return write_long_recording(tmp_path_factory.mktemp("rec"), 120)  # 6,000 snapshots


def key(file: str, ino: int = 1, params: str = "{}") -> tuple:
    return ("report", file, ino, 100, 5, params)


def answer(cache: ResultCache, size: int):
    path = cache.new_path(".json")
    path.write_bytes(b"x" * size)
    return path


# ---------------------------------------------------------------------- the cache
def test_the_cache_keeps_its_budget_least_recently_used_first_and_never_a_pinned_answer(tmp_path):
    cache = ResultCache(tmp_path, max_bytes=250)
    a, b = cache.add(key("a.mcap"), answer(cache, 100)), cache.add(key("b.mcap"), answer(cache, 100))
    pinned = cache.get(key("a.mcap"))                # a is being sent (and now the most recently used)
    cache.add(key("c.mcap"), answer(cache, 100))       # over budget: b goes, not the pinned a
    assert cache.get(key("b.mcap")) is None and not b.path.exists()
    cache.release(pinned)
    cache.add(key("d.mcap"), answer(cache, 100))       # a (released, least recently used) goes now
    assert not a.path.exists() and cache.bytes == 200
    cache.close()
    assert not cache.root.joinpath("x").exists() and list(tmp_path.iterdir()) == []


def test_an_answer_over_the_whole_budget_is_served_once_then_removed(tmp_path):
    cache = ResultCache(tmp_path, max_bytes=50)
    big = cache.add(key("a.mcap"), answer(cache, 100))
    entry = cache.get(key("a.mcap"))
    assert entry is big and big.path.exists()
    cache.release(entry)
    assert not big.path.exists() and cache.get(key("a.mcap")) is None and cache.bytes == 0


def test_a_changed_or_deleted_recording_drops_its_answers(tmp_path):
    cache = ResultCache(tmp_path, max_bytes=10_000)
    old = cache.add(key("a.mcap", ino=1), answer(cache, 10))
    other = cache.add(key("b.mcap"), answer(cache, 10))
    new = cache.add(key("a.mcap", ino=2), answer(cache, 10))   # a.mcap was replaced: the old answer goes
    assert not old.path.exists() and cache.get(key("a.mcap", ino=1)) is None
    cache.forget("a.mcap")
    assert not new.path.exists() and other.path.exists() and cache.bytes == 10


def test_the_directories_of_gateways_that_died_are_removed_and_live_ones_kept(tmp_path):
    dead, live = tmp_path / "111-dead", tmp_path / "222-live"
    for d in (dead, live):
        d.mkdir()
        (d / LOCK_NAME).touch()
        (d / "answer.json").write_bytes(b"{}")
    fd = os.open(live / LOCK_NAME, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        cache = ResultCache(tmp_path, max_bytes=100)
        mine = cache.dir
        assert not dead.exists() and live.exists() and mine.exists()
        cache.close()
        assert not mine.exists() and live.exists()
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- the pool
@pytest.fixture
async def pool(tmp_path):
    made = []

    def make(**kw) -> ReportPool:
        made.append(ReportPool(ResultCache(tmp_path / "cache", 64 * 1024 * 1024), **kw))
        return made[-1]

    yield make
    for p in made:
        await p.close()


@pytest.mark.parametrize("kind", ["process", "thread"])
async def test_identical_questions_share_one_job_and_the_next_is_a_cache_hit(pool, recording, kind):
    p = pool(kind=kind, workers=1, queue=0, per_user=1)
    entries = await asyncio.gather(*(p.answer("vera", "events", recording, {}) for _ in range(5)))
    assert len({e.path for e in entries}) == 1 and entries[0].path.read_bytes().startswith(b'{"events":[')
    for e in entries:
        p.cache.release(e)
    again = await p.answer("vera", "events", recording, {})
    p.cache.release(again)
    assert p.stats() | {"cache": None} == {"kind": kind, "workers": 1, "in_flight": 0, "completed": 1, "refused": 0,
                                           "joined": 4, "hits": 1, "cache": None}


async def in_flight(p: ReportPool, n: int, timeout_s: float = 30.0) -> None:
    """Until ``n`` jobs are admitted (an answer stats its file in a thread first: one loop pass is not enough)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while p.stats()["in_flight"] < n:
        assert asyncio.get_running_loop().time() < deadline, f"{n} job(s) not admitted within {timeout_s} s"
        await asyncio.sleep(0.005)


async def test_limits_per_user_and_in_all(pool, recording):
    p = pool(workers=1, queue=1, per_user=1)
    first = asyncio.ensure_future(p.answer("vera", "report", recording, {"plots": True}))
    await in_flight(p, 1)
    with pytest.raises(JobRefused) as refused:                       # vera has one in progress
        await p.answer("vera", "report", recording, {"plots": False})
    assert refused.value.status == 429 and refused.value.code == "too_many_jobs"
    assert int(refused.value.headers["Retry-After"]) >= 1
    second = asyncio.ensure_future(p.answer("otto", "report", recording, {"plots": False}))
    await in_flight(p, 2)
    with pytest.raises(JobRefused) as refused:                       # one running, one waiting: full
        await p.answer("ada", "csv", recording, {"columns": ["battery_v"]})
    assert refused.value.status == 503 and refused.value.code == "busy"
    for e in await asyncio.gather(first, second):
        p.cache.release(e)
    assert p.stats()["refused"] == 2 and p.stats()["in_flight"] == 0
    p.cache.release(await p.answer("ada", "csv", recording, {"columns": ["battery_v"]}))  # room again


@pytest.mark.parametrize("kind", ["process", "thread"])
async def test_a_bad_question_is_every_askers_error_and_leaves_nothing(pool, recording, kind):
    p = pool(kind=kind)
    results = await asyncio.gather(*(p.answer(who, "csv", recording, {"columns": ["no_such_channel"]})
                                     for who in ("vera", "otto")), return_exceptions=True)
    assert all(isinstance(r, RecordingError) and "no_such_channel" in str(r) for r in results)
    assert [f.name for f in p.cache.dir.iterdir()] == [LOCK_NAME]
    assert p.stats()["in_flight"] == 0 and p.stats()["cache"]["answers"] == 0


async def test_a_worker_that_dies_is_a_job_failed_and_the_pool_goes_on(pool, recording):
    p = pool(workers=1)
    job = asyncio.ensure_future(p.answer("vera", "report.html", recording, {}))
    for _ in range(3000):  # until its worker process is started (at most 30 s)
        if p._procs:
            break
        await asyncio.sleep(0.01)
    for proc in list(p._procs):
        os.kill(proc.pid, 9)
    with pytest.raises(ApiError) as failed:
        await job
    assert failed.value.status == 500 and failed.value.code == "job_failed"
    assert [f.name for f in p.cache.dir.iterdir()] == [LOCK_NAME]     # no half-written answer
    p.cache.release(await p.answer("vera", "events", recording, {}))


async def test_closing_kills_the_running_jobs_and_removes_the_answers(pool, recording, tmp_path):
    p = pool(workers=1)
    p.cache.release(await p.answer("vera", "events", recording, {}))
    job = asyncio.ensure_future(p.answer("vera", "report.html", recording, {}))
    await asyncio.sleep(0.5)
    directory = p.cache.dir
    await p.close()
    with pytest.raises(ApiError):
        await job
    assert not directory.exists()
