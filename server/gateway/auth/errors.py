"""The trust layer's refusals, as members of the server's one error tree.

Each refusal is an :class:`server.errors.ApiError`, so a handler that raises one gets
the same ``{"error": {"code", "message"}}`` body from the server's error middleware as
from the auth middleware (which turns them into responses itself, so the order of the
middlewares does not matter). The codes are documented in ``docs/security.md``:

=========================== ====== =====================================================
code                        status when
=========================== ====== =====================================================
``unauthenticated``         401    no valid session, token or local-mode client
``invalid_credentials``     401    wrong user name, password or one-time code
``otp_required``            401    the password was right; a one-time code is needed
``reauth_required``         401    the route needs a password entered within ``reauth_s``
``forbidden``               403    the role is too low, or the route is not in the table
``csrf_failed``             403    a cookie request without the session's CSRF token
``bad_origin``              403    a foreign ``Origin`` or a cross-site fetch
``bad_host``                400    a ``Host`` header outside the allow-list
``unsupported_media_type``  415    a state-changing body that is not ``application/json``
``lease_required``          409    a driving command while nobody holds the lease
``lease_held``              409    a driving command from someone who does not hold it
``rate_limited``            429    too many failed logins from this address
=========================== ====== =====================================================
"""

from __future__ import annotations

from server.errors import ApiError


class AuthError(ApiError):
    """A refusal by the trust layer. ``headers`` go on the HTTP response (Retry-After); ``details``
    (the lease state, for a lease refusal) go in the error object."""

    status = 401
    code = "unauthenticated"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 headers: dict[str, str] | None = None, details: dict | None = None) -> None:
        super().__init__(message, code=code, status=status, details=details)
        self.headers = headers or {}

    def to_json(self) -> dict:
        out = super().to_json()
        if self.details is not None:
            out["details"] = self.details
        return out


class Unauthenticated(AuthError):
    status = 401
    code = "unauthenticated"


class Forbidden(AuthError):
    status = 403
    code = "forbidden"


class BadRequestOrigin(AuthError):
    """The request did not come from the dashboard's own origin (or an allowed one)."""

    status = 403
    code = "bad_origin"


class BadHost(AuthError):
    """DNS rebinding guard: the ``Host`` header names a server we are not."""

    status = 400
    code = "bad_host"


class UnsupportedMediaType(AuthError):
    status = 415
    code = "unsupported_media_type"


class LeaseError(AuthError):
    """Someone else drives (``lease_held``, naming them) or nobody does (``lease_required``)."""

    status = 409
    code = "lease_held"


class RateLimited(AuthError):
    status = 429
    code = "rate_limited"
