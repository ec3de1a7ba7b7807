"""Real Chromium, logged in: the dashboard says so when the server's users file is lost (issue 18, item 7).

The server keeps the users it had when its users file is deleted or emptied while it runs; every
open dashboard shows a banner saying so (pushed with the lease message, no reload), and it goes when
the file is back.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_auth_login import Browser, start_server

pytestmark = pytest.mark.e2e


def test_an_open_dashboard_shows_the_lost_users_file_and_its_return(server_factory, tmp_path, browser) -> None:
    srv, users = start_server(server_factory, tmp_path, {"ada": "admin", "olga": "operator"})
    before = users.read_bytes()
    b = Browser(browser, srv)
    try:
        b.log_in("olga")
        banner = b.page.locator("#users-file-banner")
        assert banner.is_hidden()
        users.unlink()
        banner.wait_for(state="visible", timeout=15000)
        text = banner.inner_text()
        assert "deleted" in text and "keeping the 2 user(s)" in text, text
        b.panel_says("Signed in as olga (operator).")  # still logged in: nothing fell open
        users.write_bytes(before)
        banner.wait_for(state="hidden", timeout=15000)
        assert not b.problems, b.problems
    finally:
        b.close()
