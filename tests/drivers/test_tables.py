"""drivers/tables.py: the one explainer of msgspec errors, and the drivers' table conversion (ok/fail tables)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import msgspec
import pytest
from msgspec import Meta

from drivers.errors import DriverConfigError
from drivers.tables import convert_table, explain, non_finite_path


class Target(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    to: tuple[float, float]
    speed_m_s: Annotated[float, Meta(gt=0.0, le=100.0)] = 1.0


class Radar(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    rate_hz: Annotated[float, Meta(gt=0.0, le=1000.0)] = 20.0
    mode: Literal["pulse", "cw"] = "cw"
    window_s: float | None = None
    targets: list[Target] = []
    gains: dict[str, float] = {}


def error(data, cls=Radar) -> msgspec.ValidationError:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert(data, cls)
    return info.value


@pytest.mark.parametrize("data, kind, path, field, want, got", [
    ({"rate": 1}, "unknown_field", "", "rate", (), None),
    ({"targets": [{}]}, "missing_field", ".targets[0]", "to", (), None),
    ({"rate_hz": "fast"}, "wrong_type", ".rate_hz", None, ("float",), "str"),
    ({"window_s": "x"}, "wrong_type", ".window_s", None, ("float", "null"), "str"),
    ({"rate_hz": 0}, "out_of_limits", ".rate_hz", None, (), None),
    ({"targets": [{"to": [0, 0], "speed_m_s": 101}]}, "out_of_limits", ".targets[0].speed_m_s", None, (), None),
    ({"mode": "fm"}, "invalid", ".mode", None, (), None),
    ({"targets": [{"to": [1]}]}, "invalid", ".targets[0].to", None, (), None),
])
def test_explain_takes_the_error_apart(data, kind, path, field, want, got) -> None:
    e = explain(error(data))
    assert (e.kind, e.path, e.field, e.want, e.got) == (kind, path, field, want, got)
    assert "`" not in e.detail


@pytest.mark.parametrize("data, want", [
    ({"a": 1.0, "b": [1, 2.5]}, None),
    ({"a": math.nan}, ".a"),
    ({"b": [0.0, {"c": math.inf}]}, ".b[1].c"),
    ([1.0, -math.inf], "[1]"),
])
def test_non_finite_path(data, want) -> None:
    assert non_finite_path(data) == want


@pytest.mark.parametrize("data, check", [
    ({}, lambda r: r.rate_hz == 20.0 and r.targets == []),
    ({"rate_hz": 5, "targets": [{"to": [1, 2]}]}, lambda r: r.rate_hz == 5.0 and r.targets[0].to == (1.0, 2.0)),
    ({"gains": {"left": 1.5}}, lambda r: r.gains == {"left": 1.5}),
])
def test_ok__convert_table(data, check) -> None:
    assert check(convert_table(data, Radar, "radar"))


@pytest.mark.parametrize("data, key, message", [
    ({"rate": 1}, "radar.rate", "unknown key (known: rate_hz, mode, window_s, targets, gains)"),
    ({"targets": [{"to": [0, 0], "pace": 1}]}, "radar.targets[0].pace", "unknown key (known: to, speed_m_s)"),
    ({"targets": [{}]}, "radar.targets[0].to", "is required"),
    ({"rate_hz": "fast"}, "radar.rate_hz", "must be a number, not a text"),
    ({"window_s": True}, "radar.window_s", "must be a number, not true or false"),
    ({"rate_hz": 0}, "radar.rate_hz", "must be > 0.0"),
    ({"rate_hz": 1e4}, "radar.rate_hz", "must be <= 1000.0"),
    ({"rate_hz": math.nan}, "radar.rate_hz", "must be a finite number"),
    ({"mode": "fm"}, "radar.mode", "invalid enum value 'fm'"),
    ({"targets": [{"to": [1]}]}, "radar.targets[0].to", "must be a list of length 2, got 1"),
    ({"targets": {"to": [1, 2]}}, "radar.targets", "must be a list, not a table"),
])
def test_fail__convert_table_names_the_key(data, key, message) -> None:
    with pytest.raises(DriverConfigError) as info:
        convert_table(data, Radar, "radar")
    assert (info.value.key, info.value.message) == (key, message)
    assert str(info.value) == f"{key}: {message}"


def test_fail__convert_table_without_a_prefix_names_the_bare_key() -> None:
    with pytest.raises(DriverConfigError) as info:
        convert_table({"rate_hz": -1}, Radar)
    assert info.value.key == "rate_hz"
