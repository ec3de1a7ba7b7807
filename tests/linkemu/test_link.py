"""The link emulator measured: delay, jitter, rate, queue, loss and bursts per direction, order under
jitter, blackouts and stalls switched while traffic flows, live profile changes and NAT.

This is the one place where a test asserts a measured figure (the emulator is the thing under
test, and a figure is what it promises). Tolerances are wide enough for a loaded 2-core VM:
medians of one-way delay within ±25 % of the profile's, rates within ±25 %, loss fractions
within ±40 % (binomial spread over a few thousand probes is ±15 %), burst lengths within
±35 %. Delays are taken from kernel receive stamps (``SO_TIMESTAMPNS``), so a receiving thread
that wakes late does not count; a *lower* bound (no packet before ``delay − jitter``) is exact,
since load only ever adds time. Measured here at load 10–15 (docs/networks.md has the figures):
20.2 / 80.3 ms for 20 / 80 ms, a ±20 ms jitter's standard deviation 11.3 ms (11.5 expected),
2.00 and 9.83 Mbit/s for 2 and 10, 5.5 % for 5 % loss, Gilbert–Elliott 7.8 % in runs of 4.2
for 7.4 % in runs of 4.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time

import msgspec
import pytest

from linkemu import PROFILES, Blackouts, Direction, GilbertElliott, Link, Profile
from linkemu.traffic import BulkFlow, probe, udp_rate_bit_s
from tests.conftest import wait_until
from tests.linkemu.plugin import skip_unless_links

DELAY_TOLERANCE = 0.25
RATE_TOLERANCE = 0.25
LOSS_TOLERANCE = 0.40
BURST_TOLERANCE = 0.35


def two_way(name: str, uplink: Direction, downlink: Direction | None = None, **kw) -> Profile:
    return Profile(name=name, uplink=uplink, downlink=downlink or uplink, **kw)


def within(measured: float, expected: float, tolerance: float) -> bool:
    return abs(measured - expected) <= tolerance * expected


@pytest.fixture(scope="module")
def link():
    """One link for the module; each test sets the profile it measures (a live change each time)."""
    skip_unless_links()
    with Link("lan", seed=7) as link:
        yield link


def test_one_way_delay_differs_per_direction(link):
    link.set_profile(two_way("asym", Direction(delay_s=0.020), Direction(delay_s=0.080)))
    up = probe(link, "uplink", 100, 0.02)
    down = probe(link, "downlink", 100, 0.02)
    up_ms, down_ms = statistics.median(up.delays_s) * 1e3, statistics.median(down.delays_s) * 1e3
    assert within(up_ms, 20, DELAY_TOLERANCE), f"uplink median {up_ms:.2f} ms for 20 ms"
    assert within(down_ms, 80, DELAY_TOLERANCE), f"downlink median {down_ms:.2f} ms for 80 ms"
    assert min(up.delays_s) >= 0.020 and min(down.delays_s) >= 0.080, "a packet left before its delay"
    assert up.loss == 0 and down.loss == 0


def test_jitter_spreads_delay_but_keeps_order(link):
    link.set_profile(two_way("jitter", Direction(delay_s=0.060, jitter_s=0.020)))
    sparse = probe(link, "uplink", 120, 0.04)  # 40 ms apart: order-keeping seldom holds one back
    delays = sparse.delays_s
    median_ms, sd_ms = statistics.median(delays) * 1e3, statistics.pstdev(delays) * 1e3
    expected_sd_ms = 20 / 3 ** 0.5  # uniform on ±20 ms
    assert within(median_ms, 60, DELAY_TOLERANCE), f"median {median_ms:.2f} ms for 60 ms"
    assert within(sd_ms, expected_sd_ms, 0.35), f"standard deviation {sd_ms:.2f} ms for {expected_sd_ms:.2f} ms"
    assert min(delays) >= 0.040, f"a packet left after {min(delays) * 1e3:.2f} ms, before 60 − 20 ms"
    dense = probe(link, "uplink", 1000, 0.001)  # 1 ms apart, jitter ±20 ms: without order-keeping, reordered
    assert dense.loss == 0
    assert dense.in_order, "the delay line reordered packets"


def test_rate_is_capped_per_direction(link):
    link.set_profile(two_way("rate", Direction(rate_bit_s=2e6, queue_s=0.1), Direction(rate_bit_s=8e6, queue_s=0.1)))
    up = udp_rate_bit_s(link, "uplink", offered_bit_s=3e6, seconds=3.0)
    down = udp_rate_bit_s(link, "downlink", offered_bit_s=12e6, seconds=3.0)
    assert within(up, 2e6, RATE_TOLERANCE), f"uplink carried {up / 1e6:.3f} Mbit/s for 2"
    assert within(down, 8e6, RATE_TOLERANCE), f"downlink carried {down / 1e6:.3f} Mbit/s for 8"


def test_a_full_queue_adds_its_length_in_delay(link):
    """Bufferbloat: a flood fills the 200 ms queue, and a probe behind it waits ~200 ms more."""
    link.set_profile(two_way("queue", Direction(rate_bit_s=1e6, queue_s=0.2, delay_s=0.010)))
    done = threading.Event()  # the flood lasts until the probes are through (60 s at most)
    flood = threading.Thread(target=udp_rate_bit_s, args=(link, "uplink", 2e6, 60.0), kwargs={"until": done})
    flood.start()
    try:
        # full: 200 ms at 1 Mbit/s is 25,000 bytes (tbf's limit, plus its bucket); the probes start behind 80 % of it
        wait_until(lambda: link.queued_bytes("uplink") >= 20_000, 20.0, "the flood to fill the uplink's queue")
        probes = probe(link, "uplink", 40, 0.05, port=40011)
    finally:
        done.set()
        flood.join()
    delivered = probes.delays_s
    assert len(delivered) > 10, f"only {len(delivered)} of 40 probes got through the full queue"
    median_ms = statistics.median(delivered) * 1e3
    assert within(median_ms, 210, DELAY_TOLERANCE), f"median {median_ms:.1f} ms behind a full queue, for 210 ms"


def test_random_loss_drops_on_the_receiving_side(link):
    link.set_profile(two_way("loss", Direction(loss=0.05), Direction()))
    before = link.stats()["uplink"]["lost_random"]
    up = probe(link, "uplink", 3000, 0.001)
    down = probe(link, "downlink", 1000, 0.001)
    assert within(up.loss, 0.05, LOSS_TOLERANCE), f"uplink lost {up.loss:.2%} for 5 %"
    assert down.loss == 0, f"downlink lost {down.loss:.2%} with no loss configured"
    counted = link.stats()["uplink"]["lost_random"] - before
    assert counted == len(up.lost_seqs), f"nftables counted {counted} drops, the receiver missed {len(up.lost_seqs)}"


def test_gilbert_elliott_losses_come_in_bursts(link):
    bursts = GilbertElliott(p_bad=0.02, p_good=0.25)  # 7.4 % lost, in runs of 4 on average
    link.set_profile(two_way("ge", Direction(), Direction(bursts=bursts)))
    down = probe(link, "downlink", 5000, 0.001)
    runs = down.loss_runs()
    mean_run = statistics.mean(runs)
    assert within(down.loss, bursts.mean_loss, LOSS_TOLERANCE), f"lost {down.loss:.2%} for {bursts.mean_loss:.2%}"
    assert within(mean_run, bursts.mean_burst_packets, BURST_TOLERANCE), f"runs of {mean_run:.2f} for 4"
    # random loss at 7.4 % makes runs of ≥ 2 one time in 13; these bursts, three times in four
    share_long = sum(r >= 2 for r in runs) / len(runs)
    assert share_long > 0.5, f"only {share_long:.0%} of the loss runs are longer than one packet"
    assert link.stats()["downlink"]["lost_bursts"] >= len(down.lost_seqs)


def test_blackout_on_and_off_while_traffic_flows(link):
    link.set_profile(two_way("plain", Direction(delay_s=0.010)))
    with link.dark():
        up = probe(link, "uplink", 30, 0.01, drain_s=0.3)
        down = probe(link, "downlink", 30, 0.01, drain_s=0.3)
        assert link.stats()["uplink"]["dark"]
    assert not up.received and not down.received, "packets crossed a dark link"
    assert probe(link, "uplink", 30, 0.01).loss == 0, "the link did not come back"

    with link.dark("uplink"):  # one direction only
        assert not probe(link, "uplink", 20, 0.01, drain_s=0.3).received
        assert probe(link, "downlink", 20, 0.01).loss == 0

    # a timed blackout, started by the API in the middle of a stream (after its 80th probe, in the sending
    # thread: not after a sleep, which a loaded machine can stretch past the stream): a hole of its length
    def dark_at_80(seq: int) -> None:
        if seq == 79:
            link.blackout(1.0)

    p = probe(link, "uplink", 300, 0.01, on_sent=dark_at_80)
    sent_times = [s for _, s, _ in p.received]
    hole_s = max(b - a for a, b in zip(sent_times, sent_times[1:]))
    assert 0.75 <= hole_s <= 1.5, f"a 1 s blackout made a hole of {hole_s:.3f} s"
    assert p.received[-1][0] == 299, "the stream did not resume after the blackout"


def test_a_stall_delivers_everything_late_and_in_order(link):
    link.set_profile(two_way("plain", Direction(delay_s=0.010)))
    began: list[float] = []

    def stall_at_50(seq: int) -> None:
        # mid-stream (a sleep could miss the stream), told from a thread of its own so the sender keeps its
        # pace while the delay line answers: on a loaded machine the answer came ~0.35 s late, and a sender
        # that waited for it sent next to nothing during the stall
        if seq == 49:
            threading.Thread(target=lambda: began.append(link.stall(0.4, "uplink"))).start()

    wall_minus_mono = time.time() - time.monotonic()
    p = probe(link, "uplink", 150, 0.01, on_sent=stall_at_50)
    assert p.loss == 0, f"a stall lost {len(p.lost_seqs)} packets"
    assert p.in_order
    assert began, "the delay line did not answer the stall"
    start = began[0] + wall_minus_mono  # the probes' stamps are wall-clock time (same machine)
    end = start + 0.4
    during = [(seq, sent, got) for seq, sent, got in p.received if start + 0.005 <= sent < end - 0.005]
    assert len(during) >= 5, f"{len(during)} probes sent during the 0.4 s stall"  # ~40 at a 10 ms pace
    early = [(seq, round(end - got, 3)) for seq, sent, got in during if got < end - 0.005]
    assert not early, f"sent during the stall, delivered before its end (seq, s early): {early}"
    assert max(p.delays_s) <= 1.0, f"the longest wait was {max(p.delays_s) * 1e3:.0f} ms in a 0.4 s stall"


def test_blackout_schedule_of_a_profile(link):
    link.set_profile(two_way("sched", Direction(delay_s=0.005), blackouts=Blackouts(off_s=0.6, first_s=0.5)))
    p = probe(link, "uplink", 200, 0.01)  # 2 s: dark from 0.5 to 1.1 s
    sent = [s for _, s, _ in p.received]
    hole_s = max(b - a for a, b in zip(sent, sent[1:]))
    assert 0.45 <= hole_s <= 0.9, f"a 0.6 s scheduled blackout made a hole of {hole_s:.3f} s"


def test_profile_changes_live_without_a_restart(link):
    """The profile changes after the 50th of 150 probes, in the sending thread (not after a sleep: a loaded
    machine once let the whole stream go by before the change, a fresh-clone run): the first 40 took the old
    delay, the last 40, sent after the change, the new one; the same delay line carried them all."""
    link.set_profile(two_way("before", Direction(delay_s=0.010)))
    pid = link.delayline_info["pid"]

    def change_at_50(seq: int) -> None:
        if seq == 49:
            link.set_profile(two_way("after", Direction(delay_s=0.100)))

    delays = probe(link, "uplink", 150, 0.01, drain_s=2.0, on_sent=change_at_50).delays_s
    assert len(delays) >= 140, len(delays)
    assert within(statistics.median(delays[:40]), 0.010, DELAY_TOLERANCE)
    assert within(statistics.median(delays[-40:]), 0.100, DELAY_TOLERANCE)
    assert link.delayline_info["pid"] == pid and link.alive


@pytest.mark.parametrize("name", list(PROFILES))
def test_named_profile_delays(link, name):
    """Each named profile applies live and gives its one-way delay in each direction."""
    profile = PROFILES[name]
    link.set_profile(msgspec.structs.replace(profile, blackouts=None))
    for which in ("uplink", "downlink"):
        d = profile.direction(which)
        p = probe(link, which, 60, 0.02)
        assert len(p.received) >= 40, f"{name} {which}: {len(p.received)} of 60 probes arrived"
        median_s = statistics.median(p.delays_s)
        # tiny delays (lan, wifi) are below the delay line's ~0.3 ms overhead: an absolute margin
        assert abs(median_s - d.delay_s) <= max(DELAY_TOLERANCE * d.delay_s, 0.002), \
            f"{name} {which}: median {median_s * 1e3:.2f} ms for {d.delay_s * 1e3:g} ms"


def test_bulk_tcp_flow_fills_the_uplink(link):
    """The competing-download helper: a TCP flow takes most of a 2 Mbit/s uplink within seconds."""
    link.set_profile(two_way("bulk", Direction(rate_bit_s=2e6, queue_s=0.1, delay_s=0.020)))
    with BulkFlow(link, "uplink") as flow:
        time.sleep(3.0)
        goodput = flow.goodput_bit_s()
    assert 0.6 * 2e6 <= goodput <= 1.05 * 2e6, f"bulk TCP {goodput / 1e6:.2f} Mbit/s on a 2 Mbit/s uplink"


def test_nat_lets_the_robot_dial_out_but_not_the_operator_in(link_factory):
    link = link_factory("lan", nat=True)
    listener = link.socket_in("operator")
    listener.bind((link.operator_ip, 5000))
    listener.listen()
    out = link.socket_in("robot")
    out.settimeout(10)
    out.connect((link.operator_ip, 5000))
    conn, peer = listener.accept()
    assert peer[0] == link.robot_ip_seen_by_operator == "10.77.2.1", peer
    out.sendall(b"ping")
    assert conn.recv(4) == b"ping"
    inward = link.socket_in("robot")
    inward.bind((link.robot_ip, 5001))
    inward.listen()
    dialer = link.socket_in("operator")
    dialer.settimeout(1.5)
    with pytest.raises(OSError):
        dialer.connect((link.robot_ip, 5001))
    for s in (listener, out, conn, inward, dialer):
        s.close()


def test_without_nat_both_sides_see_each_others_address(link):
    link.set_profile("lan")
    listener = link.socket_in("robot")
    listener.bind((link.robot_ip, 5002))
    listener.listen()
    dialer = link.socket_in("operator")
    dialer.settimeout(10)
    dialer.connect((link.robot_ip, 5002))
    conn, peer = listener.accept()
    assert peer[0] == link.operator_ip
    for s in (listener, dialer, conn):
        s.close()


def test_bad_requests_are_refused_and_change_nothing(link):
    link.set_profile("4g")
    with pytest.raises(ValueError, match="no link profile 'nope'"):
        link.set_profile("nope")
    with pytest.raises(ValueError, match="direction"):
        link.blackout(1.0, direction="sideways")
    from linkemu import LinkError

    with pytest.raises(LinkError, match="duration_s"):
        link.blackout(-1.0)
    with pytest.raises(LinkError, match="duration_s"):
        link.stall(float("nan"))
    assert link.profile.name == "4g" and not link.stats()["uplink"]["dark"]


def test_udp_blocked_drops_udp_both_ways_and_lets_tcp_through(link):
    """The firewall that passes TCP only (the video's fallback test): no UDP datagram crosses while it is
    on, TCP connects and carries data, and it switches off live; a profile change keeps it."""
    link.set_profile("lan")

    def udp_crosses(src: str, dst: str, dst_ip: str, port: int) -> bool:
        rx = link.socket_in(dst, type=socket.SOCK_DGRAM)
        rx.bind((dst_ip, port))
        rx.settimeout(0.3)
        tx = link.socket_in(src, type=socket.SOCK_DGRAM)
        try:
            for _ in range(5):
                tx.sendto(b"x", (dst_ip, port))
                try:
                    return rx.recv(16) == b"x"
                except TimeoutError:
                    continue
            return False
        finally:
            rx.close()
            tx.close()

    assert udp_crosses("operator", "robot", link.robot_ip, 5010)
    link.block_udp()
    try:
        link.set_profile("4g")  # a profile change keeps the block
        assert link.udp_blocked
        assert not udp_crosses("operator", "robot", link.robot_ip, 5011)
        assert not udp_crosses("robot", "operator", link.operator_ip, 5012)
        assert link.stats()["udp"] == {"blocked": True, "dropped": 10}
        listener = link.socket_in("robot")
        listener.bind((link.robot_ip, 5013))
        listener.listen()
        dialer = link.socket_in("operator")
        dialer.settimeout(10)
        dialer.connect((link.robot_ip, 5013))
        conn, _ = listener.accept()
        dialer.sendall(b"tcp")
        assert conn.recv(3) == b"tcp"
        for s in (listener, dialer, conn):
            s.close()
    finally:
        link.block_udp(False)
    link.set_profile("lan")
    assert udp_crosses("robot", "operator", link.operator_ip, 5014)
    assert link.stats()["udp"]["blocked"] is False
