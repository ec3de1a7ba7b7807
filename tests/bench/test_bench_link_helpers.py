"""The helpers bench/bench_link.py reads its figures through (no link, no server: their arithmetic), and its
skip where the link emulator cannot run (``make bench`` goes on, as the tests skip).

- ``applied_ages``: a command is identified in the runtime's records by its angular ÷ linear ratio, whatever
  the governor's scale; a command hidden behind a later one in the same record is bounded by that record; the
  tag wraps every ``RATIO_STEPS`` commands; a dropped command is left out.
- the peers' restamping keeps the project's message byte for byte except its first ``"t"``, and the clients'
  parse reads it back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bench_link  # noqa: E402
import common  # noqa: E402


tag = bench_link.speed_tag


def test_every_tag_is_read_back_whatever_the_scale():
    for i in range(bench_link.RATIO_STEPS):
        for scale in (1.0, 0.3, 0.731):
            assert bench_link.tag_of(*tag(i, scale)) == i


def test_an_applied_command_is_bounded_by_the_first_record_that_shows_it():
    sent = [100.0, 100.05, 100.10]
    records = [(100.02, *tag(0)), (100.04, *tag(0)), (100.07, *tag(1, scale=0.37)), (100.50, *tag(2))]
    ages = bench_link.applied_ages(sent, [True, True, True], records)
    assert ages == pytest.approx([0.02, 0.02, 0.40])


def test_a_command_hidden_behind_a_later_one_gets_that_records_time():
    sent = [10.0, 10.05, 10.10]
    records = [(10.9, *tag(2))]  # 0 and 1 were applied and replaced before the record was published
    assert bench_link.applied_ages(sent, [True, True, True], records) == pytest.approx([0.9, 0.85, 0.8])


def test_dropped_commands_and_zero_setpoints_are_left_out():
    sent = [1.0, 1.05]
    records = [(1.01, 0.0, 0.0), (1.2, *tag(1))]
    assert bench_link.applied_ages(sent, [False, True], records) == pytest.approx([0.15])


def test_the_tag_wraps_and_the_latest_command_sent_before_the_record_is_meant():
    n = bench_link.RATIO_STEPS + 2
    sent = [i * 0.05 for i in range(n)]
    last = n - 1  # the same tag as command last - RATIO_STEPS
    records = [(sent[last] + 0.03, *tag(last))]
    ages = bench_link.applied_ages(sent, [True] * n, records)
    assert len(ages) == n and ages[-1] == pytest.approx(0.03)


def test_the_peers_restamp_only_the_snapshots_t():
    message = '{"type":"telemetry","dropped":0,"data":{"seq":7,"t":1796180000.25,"state":"idle","link":{"t":3}}}'
    fresh = common._restamp(message)()
    head, tail = message.split("1796180000.25")
    assert fresh.startswith(head) and fresh.endswith(tail) and fresh != message
    assert abs(common.stamp_of(fresh) - float(fresh[len(head):-len(tail)])) == 0
    assert common.stamp_of(fresh.encode()) == common.stamp_of(fresh)


def test_it_skips_with_the_reasons_where_the_emulator_cannot_run(monkeypatch, capsys):
    monkeypatch.setattr(bench_link.linkemu, "missing", lambda: ["not root (just a test)"])
    monkeypatch.setattr(sys, "argv", ["bench_link.py", "--quick"])
    assert bench_link.main() == 0
    out = capsys.readouterr().out
    assert "bench_link: skipped: the link emulator cannot run here: not root (just a test)" in out
