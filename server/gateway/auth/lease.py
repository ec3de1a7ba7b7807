"""The control lease: exactly one session drives; the others watch and may ask.

Rules (``docs/security.md`` has the same in prose):

- ``take``: an operator takes a free lease; a held one only by an admin with ``force``
  (an admin takeover: the previous holder is told by the lease state).
- ``request``: an operator asks the holder; one request at a time (first come).
- ``handover``: the holder answers the request: accept (the requester drives now) or deny.
- A request the holder leaves unanswered wins once the holder has been *idle* for
  ``timeout_s``: no driving command or heartbeat since the request (or since its last
  one). An absent holder cannot block the others; a holder who is driving is never
  interrupted, except by an admin's forced take.
- The lease ends on ``release``, on link loss (the runtime's event, through
  :meth:`Lease.on_link_loss`) and when the holder's session ends; a pending request
  then wins at once.

Every change calls the ``listeners`` with a :class:`LeaseChange` (the gateway stops the
robot when the driver changes while it moves, and republishes the state). Pure logic
with an injected clock, no I/O.

>>> t = [0.0]
>>> lease = Lease(timeout_s=30, clock=lambda: t[0], wall_clock=lambda: 1e9 + t[0])
>>> lease.take("s1", "alice"); lease.request("s2", "bob")
>>> lease.check("s2")
Traceback (most recent call last):
...
server.gateway.auth.errors.LeaseError: alice drives (the control lease is held by alice)
>>> t[0] = 31.0; lease.expire(); lease.holder.user
'bob'
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from server.gateway.auth.errors import LeaseError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Party:
    """A session in the lease: its public id, user name, and since when (monotonic and wall clock)."""

    session: str
    user: str
    since: float
    since_t: float

    def to_json(self) -> dict:
        return {"session": self.session, "user": self.user, "since": round(self.since_t, 3)}


@dataclass(frozen=True)
class LeaseChange:
    """``reason``: taken, forced, released, handed_over, denied, requested, request_withdrawn,
    timed_out, link_loss, session_ended."""

    reason: str
    before: Party | None
    after: Party | None

    @property
    def holder_changed(self) -> bool:
        return (self.before and self.before.session) != (self.after and self.after.session)


class Lease:
    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        self.wall_clock = wall_clock
        self.holder: Party | None = None
        self.pending: Party | None = None
        self.version = 0
        self._holder_active = 0.0
        self.listeners: list[Callable[[LeaseChange], None]] = []

    # ------------------------------------------------------------------ helpers
    def _party(self, session: str, user: str) -> Party:
        return Party(session, user, self.clock(), self.wall_clock())

    def _set_holder(self, party: Party | None, reason: str) -> None:
        before = self.holder
        self.holder = party
        self._holder_active = self.clock()
        self.version += 1
        change = LeaseChange(reason, before, party)
        log.info("lease %s: %s → %s", reason, before.user if before else "nobody", party.user if party else "nobody")
        self._notify(change)

    def _notify(self, change: LeaseChange) -> None:
        for fn in list(self.listeners):
            try:
                fn(change)
            except Exception:  # one broken listener must not keep the lease from changing
                log.exception("lease listener failed")

    def _grant_pending_or_free(self, reason: str) -> None:
        nxt, self.pending = self.pending, None
        if nxt is not None:
            nxt = self._party(nxt.session, nxt.user)
        self._set_holder(nxt, reason)

    def holds(self, session: str | None) -> bool:
        return session is not None and self.holder is not None and self.holder.session == session

    # ------------------------------------------------------------------ operations
    def take(self, session: str, user: str, force: bool = False) -> None:
        self.expire()
        if self.holder is None:  # (a pending request exists only while someone holds the lease)
            self._set_holder(self._party(session, user), "taken")
            return
        if self.holds(session):
            self._holder_active = self.clock()
            return
        if not force:
            raise self._held_error()
        if self.pending is not None and self.pending.session == session:
            self.pending = None
        self._set_holder(self._party(session, user), "forced")

    def request(self, session: str, user: str) -> None:
        self.expire()
        if self.holder is None:
            self.take(session, user)
            return
        if self.holds(session):
            return
        if self.pending is not None and self.pending.session != session:
            raise LeaseError(f"{self.pending.user} has already asked {self.holder.user} for the lease",
                             code="lease_requested", details=self.to_json())
        if self.pending is None:
            self.pending = self._party(session, user)
            self.version += 1
            self._notify(LeaseChange("requested", self.holder, self.holder))

    def release(self, session: str) -> None:
        """Give up the lease, or withdraw a request (idempotent)."""
        self.expire()
        self._leave(session, "released")

    def _leave(self, session: str, reason: str) -> None:
        if self.holds(session):
            self._grant_pending_or_free(reason)
        elif self.pending is not None and self.pending.session == session:
            self._clear_request("request_withdrawn")

    def _clear_request(self, reason: str) -> None:
        self.pending = None
        self.version += 1
        self._notify(LeaseChange(reason, self.holder, self.holder))

    def handover(self, session: str, accept: bool = True) -> None:
        """The holder answers the pending request."""
        self.expire()
        if not self.holds(session):
            raise LeaseError("only the holder can hand the lease over" +
                             (f" ({self.holder.user} holds it)" if self.holder else " (nobody holds it)"),
                             code="not_holder", details=self.to_json())
        if self.pending is None:
            raise LeaseError("nobody has asked for the lease", code="no_request", details=self.to_json())
        if accept:
            self._grant_pending_or_free("handed_over")
        else:
            self._holder_active = self.clock()
            self._clear_request("denied")

    def check(self, session: str | None) -> None:
        """May ``session`` drive now? Raises :class:`LeaseError` naming the holder; a pass counts as activity."""
        self.expire()
        if self.holder is None:
            raise LeaseError("nobody holds the control lease: take it first (POST /api/lease/take)",
                             code="lease_required", details=self.to_json())
        if not self.holds(session):
            raise self._held_error()
        self._holder_active = self.clock()

    def _held_error(self) -> LeaseError:
        assert self.holder is not None
        return LeaseError(f"{self.holder.user} drives (the control lease is held by {self.holder.user})",
                          code="lease_held", details=self.to_json())

    # ------------------------------------------------------------------ endings
    def expire(self) -> None:
        """Grant a request the holder has left unanswered while idle for ``timeout_s``."""
        if self.pending is None or self.holder is None:
            return
        idle_since = max(self.pending.since, self._holder_active)
        if self.clock() - idle_since >= self.timeout_s:
            self._grant_pending_or_free("timed_out")

    def on_link_loss(self) -> None:
        """The runtime stopped the robot for link loss: the holder is gone."""
        if self.holder is not None:
            self._grant_pending_or_free("link_loss")

    def on_session_end(self, session: str) -> None:
        self._leave(session, "session_ended")

    # ------------------------------------------------------------------ state
    def to_json(self) -> dict:
        """For telemetry and ``GET /api/lease``: who drives, who asks, and when the request wins."""
        out: dict = {"holder": self.holder.to_json() if self.holder else None, "request": None,
                     "timeout_s": self.timeout_s, "version": self.version}
        if self.pending is not None:
            req = self.pending.to_json()
            if self.holder is not None:
                idle_since = max(self.pending.since, self._holder_active)
                req["wins_in_s"] = round(max(0.0, self.timeout_s - (self.clock() - idle_since)), 3)
            out["request"] = req
        return out
