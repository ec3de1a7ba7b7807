"""The permission table covers every route of the real gateway app, and the docs show the table."""

from __future__ import annotations

from pathlib import Path

from server.config import load_config
from server.gateway.app import create_app
from server.gateway.auth import AUTH_KEY
from server.gateway.auth.permissions import ESTOP, FEATURE_ROUTES, LEASE, PUBLIC, Role
from server.gateway.hooks import HOOKS
from server.runtime_api.client import RuntimeClient

REPO = Path(__file__).resolve().parents[4]


def real_app(tmp_path, **tables):
    """The gateway app of the default profile with every optional route on (video, debug)."""
    cfg = load_config(REPO / "config" / "rover-sim.toml",
                      overrides={"video": {"enabled": True}, "debug": {"routes": True},
                                 "auth": {"users_file": str(tmp_path / "users.json")}, **tables})
    app = create_app(cfg, RuntimeClient(str(tmp_path / "no.sock")))
    return app, app[AUTH_KEY].permissions


def test_every_route_of_the_real_app_has_a_rule(tmp_path) -> None:
    app, table = real_app(tmp_path)
    assert table.missing(app) == []
    # and the table names no route that does not exist but the replay server's and the optional live view's
    only_elsewhere = [(m, p) for m, p, _ in FEATURE_ROUTES if p.startswith("/api/replay") or p == "/foxglove"]
    assert table.unused(app) == sorted(only_elsewhere, key=lambda mp: (mp[1], mp[0]))


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
    assert public == [("POST", "/api/auth/login"), ("GET", "/healthz"), ("GET", "/login"), ("GET", "/static")]


def test_every_websocket_message_type_of_the_gateway_has_a_rule(tmp_path) -> None:
    from server.gateway.commands import REGISTRY

    _, table = real_app(tmp_path)
    for kind in (*(c.name for c in REGISTRY), "ping"):
        assert table.ws_rule("/ws/telemetry", kind) is not None, kind
    assert table.ws_rule("/ws/video", "ack") is not None


def test_the_gateway_hooks_are_wired(tmp_path) -> None:
    app, _ = real_app(tmp_path)
    hooks = app[HOOKS]
    svc = app[AUTH_KEY]
    assert hooks.authorize_ws == svc.authorize_ws
    assert hooks.on_ws_open and hooks.on_event
    assert svc.lease.listeners


def test_security_doc_lists_the_permission_table(tmp_path) -> None:
    app, table = real_app(tmp_path)
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    assert table.to_markdown(app) in text, \
        "docs/security.md: paste PermissionTable.to_markdown(app) of the real app (video and debug on)"
