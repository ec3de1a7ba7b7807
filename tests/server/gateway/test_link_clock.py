"""The clock-sync exchange (server/gateway/link.py) on a made-up clock: the offset and round trip it measures,
one ping in flight on a reliable socket, and on a lossy data channel pings on time and answers to any recent one."""

from __future__ import annotations

import pytest

from server.gateway.link import LinkClock
from server.errors import ValidationError

OFFSET_S = 3600.0   # the client's clock is an hour ahead
ONE_WAY_S = 0.05


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def exchange(link: LinkClock, clock: Clock, lost: bool = False) -> dict | None:
    """One ping out, the client's answer back after the one-way delay each way (None: the ping was lost)."""
    ping = link.ping()
    clock.t += ONE_WAY_S
    answer = {"type": "sync", "t1": ping["t1"], "t2": clock.t + OFFSET_S, "t3": clock.t + OFFSET_S + 0.001}
    clock.t += ONE_WAY_S + 0.001
    if lost:
        return answer
    link.answer(answer)
    return None


def test_two_answers_sync_it_with_the_offset_and_round_trip_measured():
    clock = Clock()
    link = LinkClock(clock)
    assert not link.synced and link.to_server(5.0) is None
    for _ in range(2):
        exchange(link, clock)
        clock.t += 1.0
    assert link.synced
    assert link.offset_s == pytest.approx(OFFSET_S, abs=1e-9)
    assert link.rtt_s == pytest.approx(2 * ONE_WAY_S, abs=1e-9)
    assert link.to_server(clock.t + OFFSET_S) == pytest.approx(clock.t, abs=1e-9)


def test_a_reliable_socket_has_one_ping_in_flight_and_refuses_an_answer_to_another():
    clock = Clock()
    link = LinkClock(clock)
    first = link.ping()
    clock.t += 1.0
    assert not link.due()  # the first is still in flight
    with pytest.raises(ValidationError, match="t1"):
        link.answer({"t1": first["t1"] - 1.0, "t2": 1.0, "t3": 1.0})
    clock.t += 5.0
    assert link.due()  # given up after 5 s


def test_a_lossy_channel_pings_on_time_and_takes_an_answer_to_any_recent_ping_once():
    clock = Clock()
    link = LinkClock(clock, lossy=True)
    late = exchange(link, clock, lost=True)  # its answer comes late, after the next exchange
    clock.t += 0.2
    assert link.due()  # not held back by the one in flight
    exchange(link, clock)
    link.answer(late)
    assert link.synced and link.count == 2
    assert link.offset_s == pytest.approx(OFFSET_S, abs=1e-9)
    with pytest.raises(ValidationError, match="t1"):
        link.answer(late)  # answered once
    with pytest.raises(ValidationError, match="t1"):
        link.answer({"t1": 1.0, "t2": 1.0, "t3": 1.0})  # no ping of ours
