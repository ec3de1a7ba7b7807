"""The permission table covers every route of the real app, and the docs show the table."""

from __future__ import annotations

from pathlib import Path

from server.app import create_app
from server.auth import AuthConfig, default_permissions, setup_auth
from server.auth.permissions import ESTOP, LEASE, PUBLIC, Role
from server.config import load_config

REPO = Path(__file__).resolve().parents[2]


def real_app(tmp_path):
    cfg = load_config(REPO / "config" / "rover-sim.toml",
                      overrides={"video": {"enabled": True}, "debug": {"routes": True}})
    app = create_app(cfg)
    table = default_permissions()
    setup_auth(app, AuthConfig.from_table({"users_file": str(tmp_path / "users.json")}), bound_host="127.0.0.1",
               permissions=table)
    return app, table


def test_every_route_of_the_real_app_has_a_rule(tmp_path) -> None:
    app, table = real_app(tmp_path)
    assert table.missing(app) == []
    assert table.unused(app) == []  # and the table names no route that does not exist


def test_the_e_stop_and_the_driving_commands(tmp_path) -> None:
    _, table = real_app(tmp_path)
    assert table.rule("POST", "/api/estop") is ESTOP
    assert table.ws_rule("/ws/telemetry", "estop") is ESTOP
    for name in ("start", "stop", "reset", "heartbeat", "speed"):
        assert table.rule("POST", f"/api/{name}") is LEASE
        assert table.ws_rule("/ws/telemetry", name) is LEASE
    assert table.rule("POST", "/api/auth/login") is PUBLIC
    assert table.rule("PUT", "/api/acquisition").role is Role.ADMIN and table.rule("PUT", "/api/acquisition").reauth
    public = [(m, p) for m, p, r in table.routes() if r.role is None and not r.estop]
    assert public == [("POST", "/api/auth/login"), ("GET", "/login"), ("GET", "/static")]


def test_security_doc_lists_the_permission_table(tmp_path) -> None:
    _, table = real_app(tmp_path)
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    assert table.to_markdown() in text, "docs/security.md: paste PermissionTable.to_markdown() of the real app"
