"""Every error code the server can return is documented in docs/api.md (issue 8, item 16)."""

from __future__ import annotations

import re

from tests.conftest import REPO

PATTERNS = [
    r'code="([a-z_]+)"',  # ApiError(..., code="...")
    r'code = "([a-z_]+)"',  # class attribute of an ApiError subclass
    r'Refused\("([a-z_]+)"',  # supervisor refusals → 409
    r'return "([a-z_]+)", f"',  # Supervisor.not_running_reason
    r'"code": "([a-z_]+)"',  # hand-built error objects
    r'_ws_error\(client, "([a-z_]+)"',  # video websocket errors
    r'\d{3}: "([a-z_]+)"',  # aiohttp status → code map
    r'get\(exc\.status, "([a-z_]+)"\)',  # its fallback
]


def codes_in_source() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "server").rglob("*.py"):
        text = path.read_text()
        for pattern in PATTERNS:
            found.update(re.findall(pattern, text))
    return found


def test_the_scan_finds_the_codes_it_should() -> None:
    codes = codes_in_source()
    assert {"malformed", "not_finite", "estop_latched", "rate_limited", "safety_channel", "http_error"} <= codes


def test_every_error_code_is_documented() -> None:
    doc = (REPO / "docs" / "api.md").read_text()
    missing = sorted(c for c in codes_in_source() if f"`{c}`" not in doc)
    assert not missing, f"error codes missing from docs/api.md: {missing}"
