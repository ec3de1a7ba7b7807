"""The one JSON parser (server/validation.py): objects with a key twice are refused at every depth, however
the key is spelled (issue 18, item 8); integers beyond 64 bits are out of limits wherever they are."""

from __future__ import annotations

import msgspec
import pytest

from server.errors import MalformedError, ValidationError
from server.validation import convert, parse_object

OK = [
    b'{"type": "speed", "linear": 0.1, "angular": 0}',
    b'{"a": {"x": 1}, "b": {"x": 2}}',  # the same key in two objects
    b'{"markers": [{"id": 1, "x_m": 0}, {"id": 2, "x_m": 1}]}',
    b'{"s": "type", "type": "x"}',  # a value spelled like a key
    b'{"k": "v\\"", "k2": ":"}',  # escapes and colons in strings
    b'{"a" : 1, "b" :{"a" : 2}}',
    b'{"t": 1e400}',  # beyond a float: decoded the slow way, not a duplicate
]
FAIL = [
    (b'{"type": "estop", "type": "ping", "t": 1}', "type"),
    (b'{"a": {"x": 1, "x": 2}}', "x"),
    (b'{"a": [{"x": 1}, {"y": 1, "y": 2}]}', "y"),
    (b'{"\\u0074ype": "estop", "type": "speed"}', "type"),
    (b'{"a" : 1, "b": 2, "a" : 3}', "a"),
    (b'{"x": ",", "a": 1, "a": 2}', "a"),
    (b'{"t": 1e400, "t": 2}', "t"),
]


@pytest.mark.parametrize("raw", OK)
def test_ok__objects_without_a_repeated_key(raw: bytes) -> None:
    assert isinstance(parse_object(raw), dict)
    assert isinstance(parse_object(raw.decode()), dict)


@pytest.mark.parametrize("raw, key", FAIL)
def test_fail__an_object_with_a_key_twice(raw: bytes, key: str) -> None:
    for text in (raw, raw.decode()):
        with pytest.raises(MalformedError) as err:
            parse_object(text)
        assert repr(key) in err.value.message and err.value.status == 400


class Fit(msgspec.Struct):
    degree: int = 2
    gain: float = 1.0


@pytest.mark.parametrize("raw, field", [(b'{"degree": 9223372036854775808}', "degree"),
                                        (b'{"gain": -1' + b"0" * 400 + b"}", "gain")])
def test_fail__an_integer_beyond_64_bits(raw: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        convert(parse_object(raw), Fit)
    assert err.value.code == "out_of_limits" and err.value.message.startswith(field)


def test_ok__a_64_bit_integer() -> None:
    assert convert(parse_object(b'{"degree": 9223372036854775807}'), Fit).degree == 2 ** 63 - 1
