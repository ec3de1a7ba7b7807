"""A viewer's encoded stream (server/gateway/video/tiers.py ``Subscription``): a packet that waited in the
viewer's queue past the age budget flushes it (the viewer skips to the next keyframe, it never lags), but
a packet that *arrived* already old — a starved machine, capture, encoder and loop all late — is still
the freshest picture and is sent (``late_sent``). Before, the second case flushed too: on ``make run`` at
load 20–27 the dashboard showed one frame in 50 s. A fake clock; no processes."""

from __future__ import annotations

import asyncio

from server.gateway.video.encoder import EncodedPacket
from server.gateway.video.tiers import Subscription

BUDGET_S = 0.25


class FakeTiers:
    def __init__(self) -> None:
        self.keyframe_requests = 0

    def request_keyframe(self, tier: str, codec: str) -> None:
        self.keyframe_requests += 1

    def release(self, sub, tier: str) -> None:
        pass

    def attach(self, sub, tier: str) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def packet(seq: int, capture_t: float, key: bool = False) -> EncodedPacket:
    return EncodedPacket("h264", "hi", seq, capture_t, seq * 3000, key, b"x" * 100, 640, 480, 4.0, capture_t)


def subscription() -> tuple[Subscription, FakeTiers, Clock]:
    tiers, clock = FakeTiers(), Clock()
    return Subscription(tiers, "h264", "hi", BUDGET_S, clock), tiers, clock


def test_packets_that_arrive_already_late_are_still_sent_in_order():
    sub, tiers, clock = subscription()
    for seq in range(1, 6):  # every packet reaches the loop 0.4 s after capture, the viewer keeps up
        clock.t += 1 / 30
        sub.push(packet(seq, clock.t - 0.4, key=seq == 1))
        got = sub.get_nowait()
        assert got is not None and got.seq == seq
    assert sub.counters["late_sent"] == 5 and sub.counters["dropped_stale"] == 0
    assert tiers.keyframe_requests == 0


def test_late_packets_a_little_behind_each_other_are_not_flushed():
    sub, tiers, clock = subscription()
    sub.push(packet(1, clock.t - 0.4, key=True))
    clock.t += 1 / 30
    sub.push(packet(2, clock.t - 0.4))  # the sender had not taken the first yet: a queue of two, both late
    assert [sub.get_nowait().seq, sub.get_nowait().seq] == [1, 2]
    assert sub.counters["dropped_stale"] == 0


def test_a_packet_that_waited_in_the_queue_past_the_budget_flushes_it_and_waits_for_a_keyframe():
    sub, tiers, clock = subscription()
    sub.push(packet(1, clock.t, key=True))
    for seq in range(2, 12):  # the viewer's path is slow: nothing taken for 10 frames (0.33 s)
        clock.t += 1 / 30
        sub.push(packet(seq, clock.t))
    assert sub.counters["dropped_stale"] >= 1 and tiers.keyframe_requests == 1
    clock.t += 1 / 30
    sub.push(packet(12, clock.t))  # a P-frame: skipped until the keyframe
    assert sub.get_nowait() is None
    sub.push(packet(13, clock.t, key=True))
    assert sub.get_nowait().seq == 13


def test_get_returns_a_late_arrival_instead_of_waiting_forever():
    sub, tiers, clock = subscription()

    async def main():
        sub.push(packet(1, clock.t - 1.0, key=True))
        return await asyncio.wait_for(sub.get(), 5)

    assert asyncio.run(main()).seq == 1
