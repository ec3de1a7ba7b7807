"""The e-stop scan (server/gateway/estop.py): whatever the parser would read as an e-stop, the scan sees, in any
bytes; what only looks like one inside a string is not (issue 18, items 8 and 10)."""

from __future__ import annotations

import pytest

from server.gateway.estop import looks_like_estop
from server.validation import parse_object

ESTOPS = [
    b'{"type": "estop"}', b'{"type":"estop","type":"ping"}', b'{"type":"ping","type":"estop"}',
    b'{"type"\n:\t"estop"}', b'{"\\u0074ype": "estop"}', b'{"type": "e\\u0073top"}', b'{"\\u0074ype":"\\u0065stop"}',
    b'{"a": {"type": "estop"}}', b'{"type": "estop", "reason": "\xff\xfe"}', b'{"type": "estop", "x": ',
    b'\x00\x01{"type":"estop"}',
]
NOT = [b'{"type": "ping"}', b'{"note": "\\"type\\": \\"estop\\""}', b'{"type": "estops"}', b'{"kind": "estop"}',
       b"\xff\xfe\xfd", b""]


@pytest.mark.parametrize("raw", ESTOPS)
def test_ok__an_estop_however_it_is_written(raw: bytes) -> None:
    assert looks_like_estop(raw)


@pytest.mark.parametrize("raw", NOT)
def test_fail__no_estop(raw: bytes) -> None:
    assert not looks_like_estop(raw)


@pytest.mark.parametrize("raw", [b'{"type": "estop"}', b'{"\\u0074ype": "e\\u0073top", "id": 1}',
                                 b'{"id": 1, "type": "\\u0065stop"}'])
def test_ok__what_the_parser_reads_as_an_estop_the_scan_sees(raw: bytes) -> None:
    assert parse_object(raw)["type"] == "estop" and looks_like_estop(raw)
