"""Login sessions in memory: a secret token per session, idle and absolute expiry, revocation.

The token (32 random bytes, URL-safe) is the cookie value for a browser and the
bearer token for a script; the store keeps only its SHA-256, so a leaked dump of the
store holds nothing that logs in. Each session also has a public id (for the lease
and the logs: it names a session without being able to act as it) and a CSRF token
(synchronizer pattern: the dashboard echoes it in ``X-CSRF-Token``).

A session ends after ``idle_s`` without use, ``max_s`` after login whatever the use,
on logout, and when its user's password or second factor changes or the user is
removed. Ending calls the ``on_end`` listeners (the lease frees, websockets close).
The clock is injected, so the tests drive time.

>>> t = [0.0]
>>> store = SessionStore(idle_s=60, max_s=3600, clock=lambda: t[0])
>>> token, s = store.create("alice", via="cookie", remote="127.0.0.1")
>>> store.lookup(token) is s
True
>>> t[0] = 61.0
>>> store.lookup(token) is None, s.ended
(True, 'idle')
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from typing import Callable, Literal

Via = Literal["cookie", "bearer", "fleet"]   # fleet: a hub user's session on a robot (never a token)


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(eq=False)
class Session:
    user: str
    via: Via
    remote: str
    created: float
    last_seen: float
    reauth_at: float              # when the password was last entered (login counts)
    id: str = field(default_factory=lambda: secrets.token_hex(6))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    ended: str | None = None      # why it ended; None while alive

    def check_csrf(self, value: str | None) -> bool:
        return bool(value) and hmac.compare_digest(value.encode(), self.csrf.encode())

    def to_json(self, now: float) -> dict:
        return {"id": self.id, "user": self.user, "via": self.via, "remote": self.remote,
                "age_s": round(now - self.created, 3), "idle_s": round(now - self.last_seen, 3)}


class SessionStore:
    def __init__(self, idle_s: float, max_s: float, max_per_user: int = 16,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self.max_s = max_s
        self.max_per_user = max_per_user
        self.clock = clock
        self._by_digest: dict[bytes, Session] = {}
        self._digest_of: dict[str, bytes] = {}    # session id → digest
        self.on_end: list[Callable[[Session, str], None]] = []

    def __len__(self) -> int:
        return len(self._by_digest)

    def create(self, user: str, via: Via, remote: str) -> tuple[str, Session]:
        """A new session; the oldest of ``user``'s sessions ends when they would exceed ``max_per_user``."""
        now = self.clock()
        mine = sorted(self.of_user(user), key=lambda s: s.created)
        for old in mine[: max(0, len(mine) - self.max_per_user + 1)]:
            self.end(old, "too_many_sessions")
        token = secrets.token_urlsafe(32)
        session = Session(user=user, via=via, remote=remote, created=now, last_seen=now, reauth_at=now)
        digest = token_digest(token)
        self._by_digest[digest] = session
        self._digest_of[session.id] = digest
        return token, session

    def expiry_reason(self, session: Session, now: float | None = None) -> str | None:
        now = self.clock() if now is None else now
        if session.ended:
            return session.ended
        if now - session.created >= self.max_s:
            return "max_age"
        if now - session.last_seen >= self.idle_s:
            return "idle"
        return None

    def lookup(self, token: str | None, touch: bool = True) -> Session | None:
        """The live session of ``token`` (its use counts as activity), or None."""
        if not token or len(token) > 256:
            return None
        session = self._by_digest.get(token_digest(token))
        if session is None:
            return None
        return session if self.alive(session, touch=touch) else None

    def alive(self, session: Session, touch: bool = False) -> bool:
        """Is ``session`` still valid? Ends it when it has just expired."""
        now = self.clock()
        why = self.expiry_reason(session, now)
        if why is not None:
            self.end(session, why)
            return False
        if touch:
            session.last_seen = now
        return True

    def by_id(self, session_id: str) -> Session | None:
        digest = self._digest_of.get(session_id)
        return self._by_digest.get(digest) if digest is not None else None

    def of_user(self, user: str) -> list[Session]:
        return [s for s in self._by_digest.values() if s.user == user]

    def end(self, session: Session, reason: str) -> None:
        """End one session (idempotent) and tell the listeners."""
        digest = self._digest_of.pop(session.id, None)
        if digest is not None:
            self._by_digest.pop(digest, None)
        if session.ended is None:
            session.ended = reason
            for fn in list(self.on_end):
                fn(session, reason)

    def revoke_user(self, user: str, reason: str) -> int:
        """End every session of ``user``; returns how many ended."""
        mine = self.of_user(user)
        for s in mine:
            self.end(s, reason)
        return len(mine)

    def sweep(self) -> int:
        """End every expired session (run periodically, so the lease frees without a request)."""
        now = self.clock()
        expired = [(s, why) for s in list(self._by_digest.values()) if (why := self.expiry_reason(s, now))]
        for s, why in expired:
            self.end(s, why)
        return len(expired)
