"""The profile's ``[auth]`` table as one typed struct (msgspec), with a default for everything.

Loaded with the other gateway tables by :func:`server.config.load_config` (``TABLES``
names it), so an unknown key or a bad value stops start-up with the file and the key
named, like every other table. An empty table is a working set-up: the users file is
``state/users.json`` (relative to the working directory, like ``server.state_dir``);
while it holds no user the server runs in *local mode* (loopback only, every local
client is an admin; ``docs/security.md``).

>>> cfg = AuthConfig.from_table({"session_idle_s": 600, "trusted_proxies": ["127.0.0.1"]})
>>> cfg.session_idle_s, cfg.reauth_s, cfg.tls_enabled
(600.0, 300.0, False)
>>> AuthConfig.from_table({"session_idel_s": 600})
Traceback (most recent call last):
...
server.config.ConfigError: <defaults>: unknown key 'auth.session_idel_s'
>>> AuthConfig.from_table({"trusted_proxies": ["10.0.0.0/33"]})
Traceback (most recent call last):
...
server.config.ConfigError: <defaults>: 'auth' trusted_proxies: '10.0.0.0/33' is not an IP address or network
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any

import msgspec

from server.config import Table, load_config

Positive = Annotated[float, msgspec.Meta(gt=0)]
Count = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]

_ORIGIN_RE = re.compile(r"^https?://[^/?#@\s]+$")


def parse_networks(values: list[str], key: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``["127.0.0.1", "10.0.0.0/8"]`` → networks; a bad entry is an error naming ``key``.

    >>> parse_networks(["::1", "192.168.0.0/16"], "x")
    (IPv6Network('::1/128'), IPv4Network('192.168.0.0/16'))
    """
    out = []
    for v in values:
        try:
            out.append(ipaddress.ip_network(v.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{key}: {v!r} is not an IP address or network") from None
    return tuple(out)


class AuthConfig(Table, frozen=True):
    """Settings of users, sessions, login limits, cross-site defences, the lease and TLS."""

    users_file: str = "state/users.json"   # JSON, written atomically with mode 0600
    users_poll_s: Positive = 2.0           # how often a change by the CLI is noticed
    session_idle_s: Positive = 1800.0      # a session unused this long ends
    session_max_s: Positive = 43200.0      # and every session ends this long after login
    max_sessions_per_user: Count = 16      # the oldest ends when one more logs in
    reauth_s: Positive = 300.0             # user and settings changes need a password this fresh
    login_failures_per_minute: Count = 3   # per client address (IPv6: per /64)
    login_failures_per_hour: Count = 10
    trusted_proxies: list[str] = []        # only these peers' X-Forwarded-For / -Proto are believed
    local_networks: list[str] = []         # added to loopback, RFC 1918, link-local and ULA
    allowed_origins: list[str] = []        # other origins that may call state-changing routes
    allowed_hosts: list[str] = []          # more Host names ("name", "*.example.org", or "*")
    lease_timeout_s: Positive = 30.0       # a pending request wins after the holder idles this long
    tls_cert: str = ""                     # PEM paths; both set = TLS on
    tls_key: str = ""
    tls_self_signed: bool = False          # create a self-signed pair at those paths when missing
    totp_required: bool = False            # every user needs a TOTP second factor to log in

    def __post_init__(self) -> None:
        if self.session_idle_s > self.session_max_s:
            raise ValueError("session_idle_s must not exceed session_max_s")
        if self.login_failures_per_minute > self.login_failures_per_hour:
            raise ValueError("login_failures_per_minute must not exceed login_failures_per_hour")
        parse_networks(self.trusted_proxies, "trusted_proxies")
        parse_networks(self.local_networks, "local_networks")
        for origin in self.allowed_origins:
            if not _ORIGIN_RE.match(origin):
                raise ValueError(f"allowed_origins: {origin!r} is not an origin like 'https://host:port'")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together: set both or neither")
        if self.tls_self_signed and not self.tls_cert:
            raise ValueError("tls_self_signed needs tls_cert and tls_key (where to write the pair)")

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_cert and self.tls_key)

    @classmethod
    def from_table(cls, table: dict[str, Any] | None = None) -> "AuthConfig":
        """The ``[auth]`` table on its own (tests, tools), validated like the profile's."""
        return load_config(None, overrides={"auth": dict(table or {})}, tables=("auth",)).auth
