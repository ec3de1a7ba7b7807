"""The trust layer: users and roles, sessions, login limits, cross-site defences, the control lease, TLS.

The gateway needs only this surface (``docs/security.md`` says why each piece is as it is):

- :class:`AuthConfig` — the profile's ``[auth]`` table (``AuthConfig.from_table(table)``);
- :func:`check_bind` — refuse a non-loopback address while no user exists;
- :func:`default_permissions` — the permission table of today's routes and websocket messages;
- :func:`setup_auth` → :class:`AuthService` — middleware, headers, routes, housekeeping;
  then ``service.authorize_ws(request, msg_type)``, ``service.track_ws(request, ws)``,
  ``service.principal(request)``, ``service.lease`` (``on_link_loss()``, ``to_json()``),
  ``service.on_lease_change(fn)``, ``service.csrf_token(request)``;
- :func:`server.gateway.auth.tls.ssl_context` — TLS from the config (self-signed on request);
- :func:`server.gateway.auth.cli.main` — ``python -m server users add|passwd|role|remove|list``.
"""

from typing import TYPE_CHECKING

from server.lazy import lazy_exports

if TYPE_CHECKING:
    from server.gateway.auth.config import AuthConfig
    from server.gateway.auth.errors import AuthError
    from server.gateway.auth.lease import Lease, LeaseChange
    from server.gateway.auth.net import BindRefused, check_bind, is_local_network
    from server.gateway.auth.permissions import PermissionTable, Role, Rule, default_permissions
    from server.gateway.auth.service import AUTH_KEY, AuthService, Principal
    from server.gateway.auth.setup import setup_auth
    from server.gateway.auth.users import UsersFileError

# imported on first use (server/lazy.py): loading a profile reads this package's settings class only
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "config": ("AuthConfig",),
    "errors": ("AuthError",),
    "lease": ("Lease", "LeaseChange"),
    "net": ("BindRefused", "check_bind", "is_local_network"),
    "permissions": ("PermissionTable", "Role", "Rule", "default_permissions"),
    "service": ("AUTH_KEY", "AuthService", "Principal"),
    "setup": ("setup_auth",),
    "users": ("UsersFileError",),
})
