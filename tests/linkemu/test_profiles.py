"""Profiles are data: the named ones say what the issue asks of them, bad values are refused with the
field named, and a profile survives a round trip through JSON (the delay line's control protocol).
Also every linkemu module's doctests (what the kernel is asked for, as text). No root needed."""

from __future__ import annotations

import doctest
import importlib
import math

import msgspec
import pytest

from linkemu import PROFILES, Blackouts, Direction, GilbertElliott, Profile, profile
from linkemu import control

MODULES = ["linkemu", "linkemu.profiles", "linkemu.gilbert_elliott", "linkemu.shaping", "linkemu.control",
           "linkemu.netns", "linkemu.tun", "linkemu.traffic"]


@pytest.mark.parametrize("module", MODULES)
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and (result.attempted > 0 or module == "linkemu"), result


def test_the_named_profiles_are_the_issues():
    four_g = PROFILES["4g"]
    assert (four_g.uplink.rate_bit_s, four_g.downlink.rate_bit_s) == (2e6, 10e6)
    for d in (four_g.uplink, four_g.downlink):
        assert (d.delay_s, d.jitter_s, d.loss, d.queue_s) == (0.060, 0.020, 0.02, 0.25)
    bad = PROFILES["bad"]
    for d in (bad.uplink, bad.downlink):
        assert (d.rate_bit_s, d.delay_s, d.loss) == (1e6, 0.150, 0.05)
    sat = PROFILES["satellite"]
    assert sat.uplink.delay_s == sat.downlink.delay_s == 0.300 and sat.uplink.rate_bit_s == 10e6
    assert PROFILES["blackout"].blackouts.off_s == 3.0
    assert {"lan", "wifi"} <= set(PROFILES)


def test_profiles_are_frozen_and_replaceable():
    p = PROFILES["4g"]
    with pytest.raises(AttributeError):
        p.uplink.delay_s = 0.0
    q = msgspec.structs.replace(p, name="4g-slow", uplink=msgspec.structs.replace(p.uplink, delay_s=0.2))
    assert q.uplink.delay_s == 0.2 and p.uplink.delay_s == 0.060


@pytest.mark.parametrize("kwargs", [dict(), dict(rate_bit_s=1.0), dict(loss=1.0), dict(loss=0.0, jitter_s=0.5),
                                    dict(delay_s=60.0)])
def test_ok__direction(kwargs):
    Direction(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    (dict(rate_bit_s=0.0), "rate_bit_s"), (dict(rate_bit_s=-1.0), "rate_bit_s"), (dict(rate_bit_s=math.inf), "rate_bit_s"),
    (dict(loss=1.01), "loss"), (dict(loss=-0.1), "loss"), (dict(loss=math.nan), "loss"),
    (dict(delay_s=-0.001), "delay_s"), (dict(jitter_s=math.nan), "jitter_s"), (dict(queue_s=0.0), "queue_s"),
])
def test_fail__direction(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field} must be within"):
        Direction(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    (dict(p_bad=1.5, p_good=0.5), "bursts.p_bad"), (dict(p_bad=0.1, p_good=0.0), "bursts.p_good"),
    (dict(p_bad=0.1, p_good=0.5, loss_bad=2.0), "bursts.loss_bad"),
])
def test_fail__bursts(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field} must be within"):
        GilbertElliott(**kwargs)


def test_fail__blackouts_repeating_faster_than_they_last():
    with pytest.raises(ValueError, match="^blackouts.every_s must be within"):
        Blackouts(off_s=3.0, every_s=2.0)


def test_unknown_names_and_fields_are_refused():
    with pytest.raises(ValueError, match="no link profile 'lte'; the named ones are lan, wifi, 4g"):
        profile("lte")
    with pytest.raises(msgspec.ValidationError, match="unknown field `delay_ms`"):
        msgspec.convert({"delay_ms": 5}, Direction)
    with pytest.raises(msgspec.ValidationError, match="loss must be within"):
        msgspec.convert({"loss": 3}, Direction)


@pytest.mark.parametrize("name", list(PROFILES))
def test_profile_round_trips_through_the_control_protocol(name):
    request = control.Configure(profile=PROFILES[name], seed=3)
    assert control.decode_request(control.encode(request)) == request
    assert isinstance(PROFILES[name], Profile)
