"""The runtime API's message types that mirror a driver-side type stay in step with it."""

from __future__ import annotations

import dataclasses
import typing

import msgspec

from drivers.base import ChannelSpec
from server.runtime_api.params import ChannelSpecParams


def test_declared_channels_take_exactly_the_fields_of_a_driver_channel() -> None:
    """``declare_channels`` (vision, external sources) describes a channel as a driver does; a field added to
    ``ChannelSpec`` and not here (or the other way round) would be refused or lost on the way to the dashboard."""
    driver = {f.name: f.default for f in dataclasses.fields(ChannelSpec)}
    params = {f.name: f.default for f in msgspec.structs.fields(ChannelSpecParams)}
    assert params.pop("gauge") is True  # the one addition: listed with the robot's channels or not
    assert params.keys() == driver.keys()
    for name, default in driver.items():
        if default is not dataclasses.MISSING:
            assert params[name] == default, name
    assert set(typing.get_args(typing.get_type_hints(ChannelSpecParams)["kind"])) == {"analog", "digital"}
    # a declared channel round-trips into the driver type with nothing lost
    spec = msgspec.convert({"name": "vision_x", "unit": "m", "kind": "digital", "crit_high": 2.0}, ChannelSpecParams)
    fields = msgspec.structs.asdict(spec)
    fields.pop("gauge")
    assert ChannelSpec(**fields).to_json()["crit_high"] == 2.0
