"""Who gets a stream slot: one policy for telemetry sockets, video viewers and vision overlays.

Each kind of stream has a fixed number of slots (``telemetry.max_clients``, 100; ``video.max_viewers``,
20, for the viewers and, counted apart, for the overlay sockets). Until issue 18 (item 5) the only
rule was "first come": 100 sockets from one viewer session took every telemetry slot and the
operators' dashboards got 503 ``busy`` until it let go. Now each request that would open a stream
is checked, before the upgrade, against its pool's :class:`~server.settings.SlotLimits`:

- **tiers**: the lease holder's session > operators and admins > viewers. Of ``total`` slots,
  ``lease`` are kept for the holder and ``operators`` more for operators, so viewers can hold at most
  ``total - lease - operators`` and operators ``total - lease``: a crowd of viewers can never
  lock out the operators, nor operators the one who drives;
- **per session**: one login session holds at most ``per_session`` streams of a kind (a dashboard
  tab needs one of each), the lease holder's included;
- **per address**: one client address (behind a trusted proxy, the forwarded one) holds at most
  ``per_address`` streams of a kind *within its tier*, so many sessions from one machine cannot
  take a tier's slots, and a neighbour on the same address (loopback, a NAT) with a higher role
  still gets in. The lease holder is exempt (the reserve is theirs, wherever they are).

Without sessions (local mode: every loopback client is the one admin; or an app without the trust
layer) every client counts as the holder: only ``total`` applies, as before, since there is nobody to
tell apart (docs/security.md, "Connections and streams").

A refusal is 503 ``busy`` naming the limit and its config key. A slot is released when the
request's handler ends (the socket or stream closed), whatever way it ends, by a done-callback on
the handler's task, so a call site is the one line before its upgrade.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from server.errors import ApiError
from server.gateway.auth import AUTH_KEY, Role
from server.settings import SlotLimits

log = logging.getLogger(__name__)


class Tier(enum.IntEnum):
    VIEWER = 0
    OPERATOR = 1
    HOLDER = 2


@dataclass(frozen=True)
class Claimant:
    """Who asks for a slot: their tier, login session (None without one) and client address."""

    tier: Tier
    session: str | None
    address: str


@dataclass(eq=False)
class Slot:
    pool: "SlotPool"
    claimant: Claimant
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.pool.held.discard(self)


@dataclass(eq=False)
class SlotPool:
    """The slots of one kind of stream. ``table`` and ``total_key`` name the config keys in refusals."""

    kind: str
    noun: str
    limits: SlotLimits
    table: str
    total_key: str
    held: set[Slot] = field(default_factory=set)
    refused: int = 0

    def tier_limit(self, tier: Tier) -> int:
        lim = self.limits
        return lim.total - (0 if tier >= Tier.HOLDER else lim.lease) - (0 if tier >= Tier.OPERATOR else lim.operators)

    def refusal(self, who: Claimant) -> str | None:
        """Why ``who`` may not have one more slot now, or None."""
        lim = self.limits
        held = list(self.held)
        if who.session is not None:
            mine = sum(1 for s in held if s.claimant.session == who.session)
            if mine >= lim.per_session:
                return (f"this session already has {mine} {self.noun} open (at most {lim.per_session}: "
                        f"{self.table}.max_per_session); close one first")
        if who.tier < Tier.HOLDER:
            here = sum(1 for s in held if s.claimant.address == who.address and s.claimant.tier == who.tier)
            if here >= lim.per_address:
                return (f"{who.address} already has {here} {self.noun} open for {who.tier.name.lower()}s (at most "
                        f"{lim.per_address}: {self.table}.max_per_address)")
        limit = self.tier_limit(who.tier)
        if len(held) >= limit:
            if who.tier == Tier.HOLDER:
                return f"all {limit} {self.noun} are taken (max {limit}: {self.table}.{self.total_key})"
            kept = "operators and the lease holder" if who.tier == Tier.VIEWER else "the lease holder"
            return (f"the {limit} {self.noun} open to {who.tier.name.lower()}s are taken ({lim.total - limit} more "
                    f"are kept for {kept}; {self.table}.{self.total_key} = {lim.total})")
        return None

    def take(self, who: Claimant) -> Slot:
        why = self.refusal(who)
        if why is not None:
            self.refused += 1
            raise ApiError(f"{why}; try again later", code="busy", status=503)
        slot = Slot(self, who)
        self.held.add(slot)
        return slot

    def stats(self) -> dict[str, Any]:
        tiers = [s.claimant.tier for s in list(self.held)]
        return {"held": len(tiers), "total": self.limits.total, "refused": self.refused,
                **{f"{t.name.lower()}s": tiers.count(t) for t in Tier}}


class Admission:
    """The pools of one gateway (``app[ADMISSION]``), and who a request is."""

    def __init__(self) -> None:
        self.pools: dict[str, SlotPool] = {}

    def add_pool(self, kind: str, noun: str, limits: SlotLimits, table: str, total_key: str) -> SlotPool:
        pool = self.pools[kind] = SlotPool(kind, noun, limits, table, total_key)
        return pool

    @staticmethod
    def claimant(request: web.Request) -> Claimant:
        svc = request.app.get(AUTH_KEY)
        principal = svc.principal(request) if svc is not None else None
        address = svc.client(request) if svc is not None else (request.remote or "?")
        if principal is None or principal.session is None:
            return Claimant(Tier.HOLDER, None, address)
        session = principal.session.id
        if svc.lease.holds(session):
            tier = Tier.HOLDER
        elif principal.role.at_least(Role.OPERATOR):
            tier = Tier.OPERATOR
        else:
            tier = Tier.VIEWER
        return Claimant(tier, session, address)

    def admit(self, request: web.Request, kind: str) -> Slot:
        """A slot of ``kind`` for ``request``, held until its handler ends; 503 ``busy`` saying which limit
        when there is none. Call it in the handler, before the upgrade or the stream's first byte."""
        slot = self.pools[kind].take(self.claimant(request))
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(lambda _t: slot.release())
        return slot

    def stats(self) -> dict[str, Any]:
        return {kind: pool.stats() for kind, pool in self.pools.items()}


ADMISSION = web.AppKey("admission", Admission)


def admission(app: web.Application) -> Admission:
    """The app's :class:`Admission`, made on first use (call it while setting the app up: a running app
    is frozen)."""
    if ADMISSION not in app:
        app[ADMISSION] = Admission()
    return app[ADMISSION]


__all__ = ["ADMISSION", "Admission", "Claimant", "Slot", "SlotPool", "Tier", "admission"]
