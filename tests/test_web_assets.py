"""The dashboard's modules talk HTTP through api.js only (issue 18 item 2).

Under login a state-changing request needs the session's CSRF token, a settings change may
need the password again, and an ended session must send the page to the login page: api.js's
``apiFetch`` does all three. Three modules once had their own ``fetch`` without the token, and
recording, replay, the trajectory runner and the program download were refused with 403
``csrf_failed`` for every logged-in user while local mode (no token needed) worked. So no module
but api.js may call ``fetch`` or another way out (XHR, beacons, event sources); the e2e suite
checks in Chromium that what the page sends under login carries the token.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parent.parent / "web" / "static" / "js"
# ways a page sends a request of its own
REQUEST = re.compile(r"\bfetch\s*\(|\bXMLHttpRequest\b|\bsendBeacon\s*\(|\bnew\s+EventSource\b")
# one left-to-right pass over comments and string literals: whichever starts first wins, so a "//" in a
# URL is not a comment and an apostrophe in a comment is not a string
TOKEN = re.compile(r"//[^\n]*|/\*.*?\*/|`(?:\\.|[^`\\])*`|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


def code_of(text: str) -> str:
    """The module without its comments (newlines kept, so line numbers stay)."""
    def drop_comment(m: re.Match) -> str:
        tok = m.group(0)
        return "\n" * tok.count("\n") if tok.startswith("/") else tok

    return TOKEN.sub(drop_comment, text)


MODULES = sorted(p for p in JS.glob("*.js") if p.name != "api.js")


def test_the_modules_are_found() -> None:
    assert len(MODULES) > 15 and (JS / "api.js").is_file()


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_no_module_but_api_js_sends_a_request_of_its_own(module: Path) -> None:
    hits = [(n, line.strip()) for n, line in enumerate(code_of(module.read_text()).splitlines(), 1)
            if REQUEST.search(line)]
    assert not hits, f"{module.name} sends requests itself; use api.js's apiFetch/apiGet: {hits}"


def test_the_check_sees_a_fetch() -> None:
    assert REQUEST.search(code_of('const r = await fetch("/api/x", { method: "POST" });'))
    assert not REQUEST.search(code_of("// fetch(its report) once\nconst url = 'http://x//y';"))
    assert REQUEST.search(code_of("const u = 'a//b'; fetch(u)"))
    assert REQUEST.search(code_of("// the page's poll\nconst r = await fetch('/api/replay');"))
    assert REQUEST.search(code_of("/* it's */ x();\n fetch(y)"))


def test_api_js_is_where_requests_go_out_and_it_sends_the_token() -> None:
    code = code_of((JS / "api.js").read_text())
    assert len(re.findall(r"\bfetch\s*\(", code)) == 1, "one fetch, in one function"
    assert "X-CSRF-Token" in code and "reauth_required" in code and "goToLogin" in code
