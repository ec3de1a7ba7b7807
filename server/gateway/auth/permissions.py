"""Who may do what: roles, and one declarative table of every route and websocket message.

Anything not in the table is refused (default deny), so a route added without a line
here cannot be reached; :meth:`PermissionTable.missing` lists such routes for a test.

A :class:`Rule` is the lowest role that may call the route, plus three flags: ``lease``
(the caller must hold the control lease: it drives), ``reauth`` (a password entered
within ``reauth_s``: user and settings changes) and ``page`` (an HTML page: a browser
without a session is sent to ``/login`` instead of getting a JSON 401). Two rules stand
apart: :data:`PUBLIC` (no session needed) and :data:`ESTOP` (every authenticated caller,
whatever the role or lease; never refused for its body, content type, CSRF token or rate).

>>> t = PermissionTable()
>>> t.route("POST", "/api/start", LEASE)
>>> t.route("GET", "/api/state", VIEWER)
>>> t.rule("POST", "/api/start").label, t.rule("HEAD", "/api/state").label
('operator+lease', 'viewer')
>>> t.rule("POST", "/api/unknown") is None
True
>>> Role.ADMIN.at_least(Role.OPERATOR), Role.parse("viewer")
(True, <Role.VIEWER: 'viewer'>)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:  # annotations only: the launcher reads Role (through users.py) without loading aiohttp
    from aiohttp import web

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Role(enum.StrEnum):
    """viewer (watch) < operator (drive) < admin (settings, acquisition, calibration, users)."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def at_least(self, other: "Role") -> bool:
        return self.rank >= other.rank

    @classmethod
    def parse(cls, text: str) -> "Role":
        try:
            return cls(text)
        except ValueError:
            raise ValueError(f"role must be one of {', '.join(r.value for r in cls)}, not {text!r}") from None


_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


@dataclass(frozen=True)
class Rule:
    """What a route or message needs. ``role=None`` with ``estop=False`` is public."""

    role: Role | None
    lease: bool = False
    reauth: bool = False
    page: bool = False
    estop: bool = False
    stream: bool = False     # a websocket or a streaming response: ended when its session ends
    csv: bool = False        # also takes a text/csv body (an upload); Origin, CSRF and role still apply

    @property
    def public(self) -> bool:
        return self.role is None and not self.estop

    @property
    def label(self) -> str:
        """The name used in docs and the refusal table: ``viewer``, ``operator+lease``, ``admin+reauth``…"""
        if self.estop:
            return "estop"
        if self.role is None:
            return "public"
        return "+".join([self.role.value] + [f for f in ("lease", "reauth") if getattr(self, f)])


PUBLIC = Rule(None)
PAGE_PUBLIC = Rule(None, page=True)
VIEWER = Rule(Role.VIEWER)
PAGE = Rule(Role.VIEWER, page=True)
STREAM = Rule(Role.VIEWER, stream=True)
OPERATOR = Rule(Role.OPERATOR)
LEASE = Rule(Role.OPERATOR, lease=True)
LEASE_CSV = Rule(Role.OPERATOR, lease=True, csv=True)
OPERATOR_CSV = Rule(Role.OPERATOR, csv=True)
ADMIN = Rule(Role.ADMIN)
ADMIN_REAUTH = Rule(Role.ADMIN, reauth=True)
ADMIN_LEASE_REAUTH = Rule(Role.ADMIN, lease=True, reauth=True)
ESTOP = Rule(None, estop=True)


class PermissionTable:
    """Route ``(method, canonical path)`` → :class:`Rule`, and ``(socket path, message type)`` → Rule.

    The path is aiohttp's canonical resource path (``/api/users/{name}``, ``/static`` for
    a static folder). ``HEAD`` follows ``GET``.
    """

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str], Rule] = {}
        self._ws: dict[tuple[str, str], Rule] = {}

    def route(self, method: str, path: str, rule: Rule) -> None:
        self._routes[(method.upper(), path)] = rule

    def ws(self, path: str, msg_type: str, rule: Rule) -> None:
        self._ws[(path, msg_type)] = rule

    def rule(self, method: str, path: str) -> Rule | None:
        method = method.upper()
        if method == "HEAD":
            method = "GET"
        return self._routes.get((method, path))

    def ws_rule(self, path: str, msg_type: str) -> Rule | None:
        return self._ws.get((path, msg_type))

    def routes(self) -> list[tuple[str, str, Rule]]:
        return [(m, p, r) for (m, p), r in sorted(self._routes.items(), key=lambda kv: (kv[0][1], kv[0][0]))]

    def ws_messages(self) -> list[tuple[str, str, Rule]]:
        return [(p, t, r) for (p, t), r in sorted(self._ws.items())]

    def missing(self, app: web.Application) -> list[tuple[str, str]]:
        """Registered routes that have no rule (each would answer 403 to everyone)."""
        out = set()
        for route in app.router.routes():
            resource = route.resource
            if resource is None:
                continue
            if route.method in ("HEAD", "*") and self.rule("GET", resource.canonical) is not None:
                continue
            if self.rule(route.method, resource.canonical) is None:
                out.add((route.method, resource.canonical))
        return sorted(out, key=lambda mp: (mp[1], mp[0]))

    def unused(self, app: web.Application) -> list[tuple[str, str]]:
        """Rules for routes the app does not register (harmless; stale lines in the table)."""
        have = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None}
        return sorted(((m, p) for (m, p) in self._routes if (m, p) not in have), key=lambda mp: (mp[1], mp[0]))

    def to_markdown(self, app: web.Application | None = None) -> str:
        """The table as Markdown for ``docs/security.md`` (with ``app``: only the routes it has)."""
        have = None if app is None else {(r.method, r.resource.canonical) for r in app.router.routes()
                                         if r.resource is not None}
        lines = ["| method | path | needs |", "|---|---|---|"]
        lines += [f"| {m} | `{p}` | {r.label} |" for m, p, r in self.routes() if have is None or (m, p) in have]
        lines += ["", "| websocket | message type | needs |", "|---|---|---|"]
        lines += [f"| `{p}` | `{t}` | {r.label} |" for p, t, r in self.ws_messages()]
        return "\n".join(lines)


def add_routes(table: PermissionTable, rules: Iterable[tuple[str, str, Rule]]) -> None:
    for method, path, rule in rules:
        table.route(method, path, rule)


# The gateway's routes that are no command (server/gateway/app.py, video/routes.py, navigation.py); the auth
# package's own routes are added by setup_auth, the commands' by the command registry
# (server/gateway/commands.py). A route added to the gateway needs a line here (or a
# ``table.route(...)`` call from the code that adds it): without one it answers 403 to everyone.
APP_ROUTES: tuple[tuple[str, str, Rule], ...] = (
    ("GET", "/", PAGE),
    ("GET", "/static", PUBLIC),                 # JS/CSS: the login page needs them; no secrets in them
    ("GET", "/api/state", VIEWER),
    ("GET", "/api/robot", VIEWER),
    ("GET", "/api/robot.svg", VIEWER),
    ("GET", "/api/events", VIEWER),
    ("GET", "/api/acquisition", VIEWER),
    ("PUT", "/api/acquisition", ADMIN_REAUTH),
    ("GET", "/api/telemetry", ADMIN),            # names every client's address
    ("GET", "/ws/telemetry", STREAM),
    ("GET", "/api/calibration", VIEWER),
    ("GET", "/api/mission", VIEWER),
    ("GET", "/api/mission/report", VIEWER),
    ("GET", "/api/mission/report.html", VIEWER),
    ("GET", "/api/mission/report.csv", VIEWER),
    ("GET", "/api/experiments", VIEWER),
    ("GET", "/api/experiments/report", VIEWER),
    ("GET", "/api/experiments/report.html", VIEWER),
    ("GET", "/ws/video", STREAM),
    ("GET", "/video.mjpeg", STREAM),
    ("GET", "/api/video/snapshot.jpg", VIEWER),
    ("GET", "/api/video", VIEWER),
    ("PUT", "/api/video", ADMIN_REAUTH),
    ("POST", "/api/debug/block", ADMIN),         # only with [debug] routes = true (tests)
    ("POST", "/api/debug/driver", ADMIN),
)

# Issue 11's routes (server/gateway/recording, observability): watching and downloading is for
# viewers; starting or stopping a recording is for the operator who holds the lease (a recording
# fills the disk and pruning then makes room: the one who drives, and answers for the run, decides
# that; a bystanding operator once evicted the always-on black box with 25 s of a named recording,
# issue 18); deleting is for admins; replay moves the dashboard's playback, not the robot. /metrics
# names clients and users: admin (a local Prometheus is the local admin in local mode).
FEATURE_ROUTES: tuple[tuple[str, str, Rule], ...] = (
    ("GET", "/api/recordings", VIEWER),
    ("GET", "/api/recordings/status", VIEWER),
    ("POST", "/api/recordings/start", LEASE),
    ("POST", "/api/recordings/stop", LEASE),
    ("GET", "/api/recordings/{file}", VIEWER),
    ("DELETE", "/api/recordings/{file}", ADMIN_REAUTH),
    ("GET", "/api/recordings/{file}/info", VIEWER),
    ("GET", "/api/recordings/{file}/csv", VIEWER),
    ("GET", "/api/recordings/{file}/report", VIEWER),
    ("GET", "/api/recordings/{file}/report.html", VIEWER),
    ("GET", "/api/recordings/{file}/missions", VIEWER),
    ("GET", "/api/recordings/{file}/missions.html", VIEWER),
    ("GET", "/api/recordings/{file}/events", VIEWER),
    ("GET", "/api/replay", VIEWER),
    ("POST", "/api/replay/play", OPERATOR),
    ("POST", "/api/replay/pause", OPERATOR),
    ("POST", "/api/replay/seek", OPERATOR),
    ("POST", "/api/replay/speed", OPERATOR),
    ("GET", "/metrics", ADMIN),
    ("GET", "/healthz", PUBLIC),                # a load balancer's or supervisor's probe; says up or down only
    ("GET", "/foxglove", STREAM),               # the Foxglove live view, relayed: ends with the session
    # issue 13: arms and platforms (reading a report needs no lease)
    ("GET", "/api/trajectory", VIEWER),
    ("GET", "/api/trajectory/report", VIEWER),
    ("GET", "/api/trajectory/report.svg", VIEWER),
    # issue 14: vision (watching is for viewers; driving to a marker is motion: the lease)
    ("GET", "/api/vision", VIEWER),
    ("GET", "/ws/vision", STREAM),                # marker overlays: ends with the session
    ("POST", "/api/debug/vision", ADMIN),         # only with [debug] routes = true (tests)
    # issue 22: the fleet link's state (router, reconnections, counts)
    ("GET", "/api/fleet/link", VIEWER),
)

#: websocket messages that are no command (the commands' rows come from the registry)
WS_MESSAGES: tuple[tuple[str, str, Rule], ...] = (
    ("/ws/telemetry", "ping", VIEWER),
    ("/ws/telemetry", "sync", VIEWER),             # issue 20: the server's clock-sync exchange (server.gateway.link)
    ("/ws/telemetry", "subscribe", VIEWER),        # issue 20 §5: this socket's channels, rate and encoding
    ("/ws/video", "ack", VIEWER),
)


def default_permissions(commands: tuple[Iterable[tuple[str, str, Rule]], Iterable[tuple[str, str, Rule]]]
                        = ((), ())) -> PermissionTable:
    """The table of every route and websocket message of the gateway (and of issue 11's features); ``commands``:
    the command registry's rows, its HTTP routes and its message types
    (:meth:`server.gateway.commands.Registry.permission_rows`: each command's rule is declared once, with the
    command)."""
    table = PermissionTable()
    routes, messages = commands
    add_routes(table, APP_ROUTES)
    add_routes(table, FEATURE_ROUTES)
    add_routes(table, routes)
    for path, msg_type, rule in (*WS_MESSAGES, *messages):
        table.ws(path, msg_type, rule)
    return table
