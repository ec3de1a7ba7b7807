"""The rate controller as a table of inputs (pure: times are passed in)."""

from __future__ import annotations

from server.gateway.video.ratecontrol import RateController
from server.gateway.video.settings import DEFAULT_TIERS
from server.gateway.video.tiers import Tier

LADDER = [Tier(t.name, t.width, t.height, t.fps, t.min_bitrate_bit_s, t.max_bitrate_bit_s) for t in DEFAULT_TIERS]


def feed_remb(rc: RateController, bit_s: float, t0: float, seconds: float, sent_share: float = 1.0) -> float:
    t = t0
    while t < t0 + seconds:
        rc.on_sent(now=t, nbytes=int(rc.bitrate_bit_s * sent_share / 8 / 10))
        rc.on_remb(bit_s, now=t)
        t += 0.1
    return t


def test_a_thin_path_steps_down_to_a_tier_within_70_percent_of_it() -> None:
    rc = RateController(LADDER, now=0.0)
    t = feed_remb(rc, 2_000_000, 0.0, 6.0)
    assert rc.tier == "640x480@30"
    feed_remb(rc, 400_000, t, 5.0)
    assert rc.tier == "480x360@15" and rc.bitrate_bit_s <= 0.7 * 400_000 + 1


def test_a_low_remb_from_a_still_scene_is_not_a_thin_path() -> None:
    rc = RateController(LADDER, now=0.0)
    feed_remb(rc, 300_000, 0.0, 10.0, sent_share=0.1)  # we sent a tenth of the target: REMB ≈ 1.5 × that
    assert rc.tier == "640x480@30"


def test_a_lower_remb_in_the_first_seconds_is_ignored() -> None:
    rc = RateController(LADDER, now=0.0)
    feed_remb(rc, 300_000, 0.0, 4.0)
    assert rc.tier == "640x480@30"


def test_it_comes_back_up_with_hysteresis_and_no_flapping() -> None:
    rc = RateController(LADDER, now=0.0)
    t = feed_remb(rc, 150_000, 6.0, 4.0)
    assert rc.tier == "320x240@10"
    t = feed_remb(rc, 3_000_000, t, 3.0)
    assert rc.tier == "320x240@10"  # within the cooldown after stepping down
    feed_remb(rc, 3_000_000, t, 40.0)
    assert rc.tier == "640x480@30" and rc.switches["up"] == 3


def test_sustained_loss_steps_down() -> None:
    rc = RateController(LADDER, now=0.0)
    for i in range(8):
        rc.on_report(now=6.0 + i, fraction_lost=0.05, rtt_s=0.3)
    assert rc.tier != "640x480@30" and rc.switches["down"] >= 1


# ---------------------------------------------------------------- a congested path, or a starved end?
# The same delay signals (a lower REMB, a longer round trip) come from a queue in the path and from a CPU
# that runs an end late (ratecontrol.py, item 4). Each case: ~10 s healthy on a 3 Mbit/s path, then 8 s of
# the case. Times in s; ``age`` is each packet's age at the handoff (capture → transport).

HEALTHY_AGE_S = 0.008
PATH_BIT_S = 3_000_000


def run(rc: RateController, t0: float, seconds: float, *, remb: float, rtt_s: float, age_s: float = HEALTHY_AGE_S,
        loss: float = 0.0, receiver_lag_s: float | None = None, sent_share: float = 1.0,
        remb_before: float = PATH_BIT_S, remb_lag_s: float = 0.5) -> float:
    """10 packets and REMBs a second, an RTCP report and a browser health message each second. Chromium's
    estimator follows a change ``remb_lag_s`` late (its trend line needs a few hundred ms of arrivals)."""
    t = t0
    while t < t0 + seconds:
        rc.on_sent(now=t, nbytes=int(rc.bitrate_bit_s * sent_share / 8 / 10), age_s=age_s)
        rc.on_remb(remb if t >= t0 + remb_lag_s else remb_before, now=t)
        if round(t * 10) % 10 == 0:
            rc.on_report(now=t, fraction_lost=loss, rtt_s=rtt_s, jitter_s=0.002)
            if receiver_lag_s is not None:
                rc.on_health(now=t, lag_s=receiver_lag_s)
        t = round(t + 0.1, 6)
    return t


def healthy(rc: RateController) -> float:
    return run(rc, 0.0, 10.0, remb=PATH_BIT_S, rtt_s=0.02)


# what a starved sender does to the signals: packets leave 150 ms after capture instead of 8, Chromium's
# estimator sees their late, bunched arrival and says 0.85 × what arrived, aiortc reads the reports late
STARVED_SENDER = dict(remb=0.85 * 500_000, rtt_s=0.02 + 0.15, age_s=0.158, sent_share=0.5)
# a starved receiver: Chromium's threads late (it says so), its estimate down; the RTT (LSR/DLSR) is clean
STARVED_RECEIVER = dict(remb=0.85 * 500_000, rtt_s=0.025, receiver_lag_s=0.2)
# a congested path with both ends on time: the queue grows (RTT + 250 ms), REMB follows the bottleneck
CONGESTED = dict(remb=450_000, rtt_s=0.27)


def test_ok__a_starved_sender_keeps_its_tier() -> None:
    rc = RateController(LADDER, now=0.0)
    run(rc, healthy(rc), 8.0, **STARVED_SENDER)
    assert rc.tier == "640x480@30" and rc.switches["down"] == 0
    assert rc.held_starved > 0 and rc.to_json()["starved"]


def test_ok__a_starved_receiver_keeps_its_tier() -> None:
    rc = RateController(LADDER, now=0.0)
    run(rc, healthy(rc), 8.0, **STARVED_RECEIVER)
    assert rc.tier == "640x480@30" and rc.switches["down"] == 0 and rc.held_starved > 0


def test_ok__a_congested_path_with_both_ends_on_time_steps_down() -> None:
    rc = RateController(LADDER, now=0.0)
    run(rc, healthy(rc), 8.0, **CONGESTED)
    assert rc.tier != "640x480@30" and rc.bitrate_bit_s <= 0.7 * 450_000 + 1
    assert rc.held_starved == 0 and not rc.to_json()["starved"]


def test_ok__a_starved_sender_on_a_lossy_path_still_steps_down() -> None:
    rc = RateController(LADDER, now=0.0)
    run(rc, healthy(rc), 8.0, **{**STARVED_SENDER, "loss": 0.03})
    assert rc.tier != "640x480@30"


def test_ok__a_starved_sender_with_a_queue_beyond_its_lateness_steps_down() -> None:
    rc = RateController(LADDER, now=0.0)
    run(rc, healthy(rc), 8.0, **{**STARVED_SENDER, "rtt_s": 0.02 + 0.15 + 0.25})  # 250 ms of queue on top
    assert rc.tier != "640x480@30"


# the websocket path: acks. A frame a second would do; 30 a second as the dashboard sends them.

def run_acks(rc: RateController, t0: float, seconds: float, *, rtt_s: float, hold_s: float = 0.0,
             age_s: float = HEALTHY_AGE_S, lag_s: float | None = None) -> float:
    t = t0
    while t < t0 + seconds:
        nbytes = int(rc.bitrate_bit_s / 8 / 30)
        rc.on_sent(now=t, nbytes=nbytes, age_s=age_s)
        if lag_s is not None:
            rc.on_health(now=t, lag_s=lag_s)
        rc.on_ack(now=t, nbytes=nbytes, rtt_s=rtt_s, hold_s=hold_s)
        t = round(t + 1 / 30, 6)
    return t


def test_ok__acks_held_by_a_slow_decoder_are_not_a_queue() -> None:
    rc = RateController(LADDER, now=0.0)
    t = run_acks(rc, 0.0, 5.0, rtt_s=0.01)
    run_acks(rc, t, 8.0, rtt_s=0.01 + 0.3, hold_s=0.3)  # the browser held each frame 300 ms (decode queue)
    assert rc.tier == "640x480@30" and rc.switches["down"] == 0


def test_ok__acks_late_because_the_sender_is_late_are_not_a_queue() -> None:
    rc = RateController(LADDER, now=0.0)
    t = run_acks(rc, 0.0, 5.0, rtt_s=0.01)
    run_acks(rc, t, 8.0, rtt_s=0.01 + 0.2, age_s=0.2 + HEALTHY_AGE_S, lag_s=0.0)
    assert rc.tier == "640x480@30"


def test_fail__acks_late_with_nothing_to_explain_it_is_a_queue() -> None:
    rc = RateController(LADDER, now=0.0)
    t = run_acks(rc, 0.0, 5.0, rtt_s=0.01)
    run_acks(rc, t, 8.0, rtt_s=0.01 + 0.3)
    assert rc.tier != "640x480@30" and rc.switches["down"] >= 1


def test_fail__acks_late_beyond_the_decoder_hold_is_a_queue() -> None:
    rc = RateController(LADDER, now=0.0)
    t = run_acks(rc, 0.0, 5.0, rtt_s=0.01)
    run_acks(rc, t, 8.0, rtt_s=0.01 + 0.1 + 0.3, hold_s=0.1)
    assert rc.tier != "640x480@30"


# ---------------------------------------------------------------- an app-limited sender probes a clean path
# After a bad spell the controller sits at the lowest tier; back on a clean LAN a starved camera sends less
# than the tier asks, and Chromium's REMB (at most 1.5 × what arrives) says only that. Before, it stayed
# at 320x240@10 for minutes (tests/linkemu/test_webrtc_adapts.py at load 17).

def after_a_bad_spell() -> tuple[RateController, float]:
    rc = RateController(LADDER, now=0.0)
    t = healthy(rc)
    t = run(rc, t, 15.0, remb=120_000, rtt_s=0.32, loss=0.05)
    assert rc.tier == "320x240@10"
    return rc, t


def test_ok__an_app_limited_sender_on_a_clean_path_climbs_back() -> None:
    rc, t = after_a_bad_spell()
    t0 = t
    while t < t0 + 60.0:  # the camera gives a third of what the tier asks; REMB is 1.5 × what arrives
        sent = rc.bitrate_bit_s / 3
        rc.on_sent(now=t, nbytes=int(sent / 8 / 10), age_s=0.4)  # a starved sender, too
        rc.on_remb(1.5 * sent, now=t)
        if round(t * 10) % 10 == 0:
            rc.on_report(now=t, fraction_lost=0.0, rtt_s=0.02, jitter_s=0.1)
        t = round(t + 0.1, 6)
    assert rc.switches["up"] >= 1 and rc.tier != "320x240@10" and rc.probes > 0, rc.to_json()


def test_fail__an_app_limited_sender_on_a_lossy_path_does_not_probe() -> None:
    rc, t = after_a_bad_spell()
    t0 = t
    while t < t0 + 60.0:
        sent = rc.bitrate_bit_s / 3
        rc.on_sent(now=t, nbytes=int(sent / 8 / 10), age_s=0.01)
        rc.on_remb(1.5 * sent, now=t)
        if round(t * 10) % 10 == 0:
            rc.on_report(now=t, fraction_lost=0.05, rtt_s=0.32, jitter_s=0.01)
        t = round(t + 0.1, 6)
    assert rc.tier == "320x240@10" and rc.switches["up"] == 0 and rc.probes == 0, rc.to_json()


def test_fail__an_app_limited_sender_behind_a_queue_does_not_probe() -> None:
    rc, t = after_a_bad_spell()
    run(rc, t, 60.0, remb=1.5 * 30_000, rtt_s=0.02 + 0.4, sent_share=1 / 3)  # on time, RTT + 400 ms: a queue
    assert rc.tier == "320x240@10" and rc.probes == 0, rc.to_json()


def test_ok__a_starved_app_limited_sender_climbs_back_whatever_a_starved_receiver_says() -> None:
    """At load 20 Chromium's REMB fell to 8 kbit/s on a clean lan (a starved receiver): not the path's word."""
    rc, t = after_a_bad_spell()
    t0 = t
    while t < t0 + 60.0:
        sent = rc.bitrate_bit_s / 3
        rc.on_sent(now=t, nbytes=int(sent / 8 / 10), age_s=0.01 if t < t0 + 1 else 0.3)
        rc.on_remb(8_000, now=t)
        if round(t * 10) % 10 == 0:
            rc.on_report(now=t, fraction_lost=0.0, rtt_s=0.04, jitter_s=0.14)
            rc.on_health(now=t, lag_s=0.2)
        t = round(t + 0.1, 6)
    assert rc.switches["up"] >= 1 and rc.tier != "320x240@10" and rc.probes > 0, rc.to_json()
