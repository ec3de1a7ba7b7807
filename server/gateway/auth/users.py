"""The users file: names, roles, argon2id password hashes and optional TOTP secrets.

One JSON file (``[auth] users_file``), read and written by the server and by
``python -m server users …`` alike. Every change is read-modify-write under an
exclusive ``flock`` on ``<file>.lock``, starting from what is on disk, and lands with
an atomic rename of a 0600 temporary file (then ``fsync`` of the folder), so a crash
or a concurrent CLI never leaves half a file or loses the other's change. The server
notices changes made by the CLI by polling the file's ``stat`` (:meth:`UserStore.changed_on_disk`).

A server never falls back to local mode while it runs: when its users file is deleted,
emptied (0 bytes) or made invalid, :meth:`UserStore.reload` keeps the users it had, says why
in :attr:`UserStore.problem` (the server logs it, fails its ``/healthz`` users check and shows
it on the dashboard) and refuses changes until the file is usable again; before that fix a
deleted or 0-byte file meant local mode within one poll, with every session revoked (issue 18).
A write that fails (a full disk) changes nothing: no partial file, no temporary file left, and a
:class:`UserError` that says so (``disk_full``, ``write_failed``).

Hashing is argon2id from ``argon2-cffi`` with its RFC 9106 "low memory" defaults
(64 MiB, 3 passes, 4 lanes: about 0.1 s here), so it is CPU work: the server calls
these methods from a worker thread, never on the event loop. An unknown user name
is verified against a dummy hash of the same cost, so the answer takes as long
whether or not the name exists.

>>> import tempfile, pathlib, argon2
>>> path = pathlib.Path(tempfile.mkdtemp()) / "users.json"
>>> store = UserStore(path, hasher=argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1))
>>> store.load(); store.configured
False
>>> _ = store.add("alice", Role.ADMIN, "correct horse battery")
>>> store.verify_password("alice", "correct horse battery").role, store.verify_password("alice", "wrong") is None
(<Role.ADMIN: 'admin'>, True)
>>> oct(path.stat().st_mode & 0o777)
'0o600'
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import logging
import os
import re
import secrets
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import argon2
import msgspec
import pyotp

from server.gateway.auth.permissions import Role

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,31}$")
PASSWORD_MIN_CHARS = 8
PASSWORD_MAX_BYTES = 1024
OTP_ISSUER = "teleop"
FILE_VERSION = 1
_NO_STAMP = object()


class User(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    role: Role
    password_hash: str
    totp_secret: str | None = None
    created: str = ""
    password_changed: str = ""

    def public(self) -> dict:
        """What an admin may see: never the hash or the TOTP secret."""
        return {"name": self.name, "role": self.role.value, "totp": self.totp_secret is not None,
                "created": self.created, "password_changed": self.password_changed}


class UsersFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    version: int = FILE_VERSION
    users: list[User] = []


class UsersFileError(ValueError):
    """The users file exists but cannot be used (unreadable, not JSON, wrong shape)."""


class UserError(ValueError):
    """A refused change; ``code`` is the API error code (``invalid``, ``not_found``, ``exists``, ``last_admin``)."""

    def __init__(self, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.code = code


def utc_now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def check_name(name: str) -> str:
    """A user name, normalised to lower case.

    >>> check_name("Alice"), check_name("ops.bot-2")
    ('alice', 'ops.bot-2')
    >>> check_name("al ice")
    Traceback (most recent call last):
    ...
    server.gateway.auth.users.UserError: user name 'al ice' must be 1-32 characters of a-z, 0-9, '.', '_', '-' (starting with a letter or digit)
    """
    if not isinstance(name, str) or not NAME_RE.match(name.lower()):
        raise UserError(f"user name {name!r} must be 1-32 characters of a-z, 0-9, '.', '_', '-' "
                        "(starting with a letter or digit)")
    return name.lower()


def check_password(password: str, name: str = "") -> str:
    if not isinstance(password, str) or len(password) < PASSWORD_MIN_CHARS:
        raise UserError(f"the password must have at least {PASSWORD_MIN_CHARS} characters")
    if len(password.encode()) > PASSWORD_MAX_BYTES:
        raise UserError(f"the password must be at most {PASSWORD_MAX_BYTES} bytes")
    if name and password.lower() == name.lower():
        raise UserError("the password must not be the user name")
    return password


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) so that readers see the old or the new file, never a part.
    An ``OSError`` (disk full) leaves the old file and no temporary file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:  # the rename is done: a folder that cannot be synced now does not undo it
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        log.warning("users file %s written, but its folder could not be synced: %s", path, err)


def storage_error(err: OSError, path: Path) -> "UserError":
    """The refusal for a users file that cannot be written (the change was not made)."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return UserError(f"cannot write the users file {path}: the disk is full ({err.strerror}); nothing changed",
                         code="disk_full")
    return UserError(f"cannot write the users file {path}: {err.strerror or err}; nothing changed",
                     code="write_failed")


class UserStore:
    """The users of one file, in memory, with locked read-modify-write changes.

    Thread-safe: the server reads it on the event loop and changes it from worker threads.
    """

    def __init__(self, path: str | Path, hasher: argon2.PasswordHasher | None = None) -> None:
        self.path = Path(path)
        self.hasher = hasher or argon2.PasswordHasher()
        self._users: dict[str, User] = {}
        self._stamp: tuple[int, int, int] | None = None
        #: why the file on disk is not what this store uses (deleted, emptied, invalid), or None
        self.problem: str | None = None
        self._bad_stamp: object = _NO_STAMP  # the unusable file's stat (not re-read until it changes)
        self._lock = threading.RLock()
        self._dummy_hash: str | None = None
        self._otp_last_counter: dict[str, int] = {}

    # ------------------------------------------------------------------ reading
    @property
    def configured(self) -> bool:
        """At least one user: login is on. No user (or no file): local mode."""
        return bool(self._users)

    def names(self) -> list[str]:
        return sorted(self._users)

    def get(self, name: str) -> User | None:
        return self._users.get(name.lower()) if isinstance(name, str) else None

    def users(self) -> list[User]:
        return [self._users[n] for n in sorted(self._users)]

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def changed_on_disk(self) -> bool:
        """Has the file changed since we last read or wrote it (or since it was found unusable)?
        One ``stat``: call it off the event loop."""
        stamp = self._stat()
        return stamp != self._stamp and (self.problem is None or stamp != self._bad_stamp)

    def _read(self) -> tuple[dict[str, User], tuple[int, int, int] | None, bool]:
        """The users in the file, its stat, and whether it says anything (False: missing or blank,
        which is no users; a JSON file may list none on purpose)."""
        stamp = self._stat()
        if stamp is None:
            return {}, None, False
        try:
            raw = self.path.read_bytes()
            mode = self.path.stat().st_mode
        except OSError as err:
            raise UsersFileError(f"cannot read the users file {self.path}: {err}") from None
        if mode & 0o077:
            log.warning("users file %s is readable by others (mode %o): it should be 0600; the next change fixes it",
                        self.path, mode & 0o777)
        if not raw.strip():
            return {}, stamp, False
        try:
            doc = msgspec.json.decode(raw, type=UsersFile)
        except msgspec.DecodeError as err:
            raise UsersFileError(f"the users file {self.path} is not valid: {err}") from None
        if doc.version != FILE_VERSION:
            raise UsersFileError(f"the users file {self.path} has version {doc.version}; this server reads {FILE_VERSION}")
        users: dict[str, User] = {}
        for u in doc.users:
            try:
                name = check_name(u.name)
            except UserError as err:
                raise UsersFileError(f"the users file {self.path}: {err}") from None
            if name in users:
                raise UsersFileError(f"the users file {self.path} names {name!r} twice")
            u.name = name
            users[name] = u
        return users, stamp, True

    def load(self) -> None:
        """(Re)read the file; a missing file is no users. Raises :class:`UsersFileError`."""
        self.reload()

    def reload(self) -> set[str]:
        """Re-read the file; returns the names whose credentials changed or who were removed.

        Raises :class:`UsersFileError` for a file that cannot be used, and for one that was deleted
        or emptied while this store has users: the users are kept, :attr:`problem` says why."""
        with self._lock:
            try:
                users, stamp, present = self._read()
            except UsersFileError as err:
                self._unusable(f"{err}; keeping the {len(self._users)} user(s) it had" if self._users else str(err))
                raise
            if not present and self._users:
                what = "deleted" if stamp is None else "emptied"
                self._unusable(f"the users file {self.path} was {what} while the server runs; keeping the "
                               f"{len(self._users)} user(s) it had (a running server never falls back to local "
                               "mode): restore the file, or restart the server to run in local mode")
                raise UsersFileError(self.problem)
            self.problem, self._bad_stamp = None, _NO_STAMP
            old = self._users
            changed = {n for n, u in old.items()
                       if n not in users or users[n].password_hash != u.password_hash
                       or users[n].totp_secret != u.totp_secret}
            self._users, self._stamp = users, stamp
            return changed

    def _unusable(self, why: str) -> None:
        self.problem = why
        self._bad_stamp = self._stat()

    # ------------------------------------------------------------------ checking credentials
    def dummy_hash(self) -> str:
        """A hash of the same cost as the real ones, for unknown names (computed once)."""
        if self._dummy_hash is None:
            self._dummy_hash = self.hasher.hash(secrets.token_urlsafe(18))
        return self._dummy_hash

    def verify_password(self, name: str, password: str) -> User | None:
        """The user when ``password`` is right; None otherwise. Takes one argon2 verify either way."""
        user = self.get(name) if isinstance(name, str) else None
        encoded = user.password_hash if user is not None else self.dummy_hash()
        try:
            ok = self.hasher.verify(encoded, password)
        except argon2.exceptions.VerificationError:
            ok = False
        except argon2.exceptions.InvalidHashError:
            log.error("user %r has a malformed password hash in %s: reset it with 'users passwd'", name, self.path)
            ok = False
        return user if ok and user is not None else None

    def verify_otp(self, user: User, code: str, now_s: float | None = None) -> bool:
        """A TOTP code of ``user`` (±1 step of 30 s for clock drift), each code accepted once."""
        if user.totp_secret is None or not isinstance(code, str):
            return False
        code = code.strip().replace(" ", "")
        if not code.isdigit():
            return False
        totp = pyotp.TOTP(user.totp_secret)
        now_s = time.time() if now_s is None else now_s
        counter = totp.timecode(dt.datetime.fromtimestamp(now_s, dt.timezone.utc))
        with self._lock:
            last = self._otp_last_counter.get(user.name, -1)
            for c in (counter - 1, counter, counter + 1):
                if c > last and pyotp.utils.strings_equal(code, totp.generate_otp(c)):
                    self._otp_last_counter[user.name] = c
                    return True
        return False

    # ------------------------------------------------------------------ changing
    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, User]]:
        """Exclusive file lock; yields the users as on disk now; writes them back on success. Refused
        (``users_file``) while the file is unusable or was deleted or emptied under this store's users,
        and (``disk_full``, ``write_failed``) when it cannot be written: nothing changes then."""
        if self.problem is not None:
            raise UserError(f"{self.problem}; user changes are refused until it is fixed", code="users_file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as err:
            raise storage_error(err, self.path) from None
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            with self._lock:
                try:
                    users, _, present = self._read()
                except UsersFileError as err:
                    raise UserError(f"{err}; user changes are refused until it is fixed", code="users_file") from None
                if not present and self._users:
                    raise UserError(f"the users file {self.path} was deleted or emptied; user changes are refused "
                                    "until it is restored", code="users_file")
                yield users
                doc = UsersFile(users=[users[n] for n in sorted(users)])
                try:
                    write_atomic(self.path, msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")
                except OSError as err:
                    raise storage_error(err, self.path) from None
                self._users, self._stamp = users, self._stat()
        finally:
            os.close(lock_fd)  # releases the flock

    def _modify(self, fn: Callable[[dict[str, User]], object]) -> object:
        with self._locked() as users:
            return fn(users)

    def add(self, name: str, role: Role, password: str, totp: bool = False) -> User:
        """Add a user; with ``totp`` a new secret is made (``provisioning_uri(user)`` for the app)."""
        name = check_name(name)
        role = Role.parse(role) if isinstance(role, str) else role
        encoded = self.hasher.hash(check_password(password, name))
        now = utc_now_iso()
        user = User(name=name, role=role, password_hash=encoded,
                    totp_secret=pyotp.random_base32() if totp else None, created=now, password_changed=now)

        def apply(users: dict[str, User]) -> None:
            if name in users:
                raise UserError(f"user {name!r} exists (change it with 'users passwd')", code="exists")
            users[name] = user

        self._modify(apply)
        return user

    def update(self, name: str, *, role: Role | str | None = None, password: str | None = None,
               totp: bool | None = None) -> tuple[User, bool]:
        """Change any of role, password and second factor (a new secret when ``totp`` is True), all
        or nothing. Returns the user and whether a credential changed (its sessions must end)."""
        name = check_name(name)
        role = Role.parse(role) if isinstance(role, str) else role
        encoded = self.hasher.hash(check_password(password, name)) if password is not None else None

        def apply(users: dict[str, User]) -> User:
            user = self._existing(users, name)
            if role is not None and user.role is Role.ADMIN and role is not Role.ADMIN:
                self._keep_an_admin(users, name)
            if role is not None:
                user.role = role
            if encoded is not None:
                user.password_hash = encoded
                user.password_changed = utc_now_iso()
            if totp is not None:
                user.totp_secret = pyotp.random_base32() if totp else None
            return user

        user = self._modify(apply)
        if totp is not None:
            self._otp_last_counter.pop(name, None)
        return user, encoded is not None or totp is not None  # type: ignore[return-value]

    def remove(self, name: str, allow_last_admin: bool = False) -> None:
        name = check_name(name)

        def apply(users: dict[str, User]) -> None:
            user = self._existing(users, name)
            if user.role is Role.ADMIN and not allow_last_admin:
                self._keep_an_admin(users, name)
            del users[name]

        self._modify(apply)

    @staticmethod
    def _existing(users: dict[str, User], name: str) -> User:
        if name not in users:
            raise UserError(f"no user {name!r}", code="not_found")
        return users[name]

    @staticmethod
    def _keep_an_admin(users: dict[str, User], leaving: str) -> None:
        others = [u for n, u in users.items() if n != leaving]
        if others and not any(u.role is Role.ADMIN for u in others):
            raise UserError(f"{leaving!r} is the last admin: the other users could not manage users any more; "
                            "make another user admin first", code="last_admin")

    @staticmethod
    def provisioning_uri(user: User) -> str | None:
        """``otpauth://`` URI for an authenticator app (shown once, when the secret is made)."""
        if user.totp_secret is None:
            return None
        return pyotp.TOTP(user.totp_secret).provisioning_uri(name=user.name, issuer_name=OTP_ISSUER)


def startup_notice(users: UserStore) -> str:
    """Local mode and how to leave it, or how many users may log in (the start-up line of the launcher and the
    gateway)."""
    if not users.configured:
        return (f"local mode: no user in {users.path}; only this machine may connect, as admin. "
                "Add a user to allow others: python -m server users add NAME --role admin")
    return f"login required: {len(users.names())} user(s) in {users.path}"
