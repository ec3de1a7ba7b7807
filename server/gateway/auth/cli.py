"""``python -m server users add|passwd|role|remove|list``: manage the users file from a shell.

The password is asked twice at a prompt (``getpass``: not echoed, not in the shell's
history), or read as one line from standard input with ``--password-stdin`` for
scripts (``printf '%s\\n' "$PW" | python -m server users add bot --role operator
--password-stdin``). A running server notices the change within ``[auth] users_poll_s``;
a new password, a new second factor or a removal ends that user's sessions.

Exit status: 0 done, 1 refused (the message says why; nothing changed), 2 usage error.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import TextIO

from server.config import ConfigError, load_config
from server.gateway.auth.config import AuthConfig
from server.gateway.auth.permissions import Role
from server.gateway.auth.users import UserError, UsersFileError, UserStore


class CliError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m server users",
        description="Manage the users who may log in to teleop (roles: viewer < operator < admin).",
        epilog="With no user the server runs in local mode (this machine only, no login).",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--file", help=f"users file (default: {AuthConfig().users_file}, or the profile's)")
    where.add_argument("--config", help="TOML profile whose [auth] users_file to use")
    sub = p.add_subparsers(dest="command", required=True)

    add = sub.add_parser("add", help="add a user (asks for the password)")
    add.add_argument("name")
    add.add_argument("--role", required=True, choices=[r.value for r in Role])
    add.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    add.add_argument("--totp", action="store_true", help="require a TOTP one-time code too (prints the secret)")

    pw = sub.add_parser("passwd", help="set a new password (ends the user's sessions)")
    pw.add_argument("name")
    pw.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    factor = pw.add_mutually_exclusive_group()
    factor.add_argument("--totp", action="store_true", default=None, help="make a new TOTP secret (prints it)")
    factor.add_argument("--no-totp", dest="totp", action="store_false", help="turn the TOTP second factor off")
    pw.add_argument("--keep-password", action="store_true", help="change only the second factor")

    role = sub.add_parser("role", help="change a user's role (takes effect at once)")
    role.add_argument("name")
    role.add_argument("role", choices=[r.value for r in Role])

    rm = sub.add_parser("remove", help="remove a user (ends their sessions)")
    rm.add_argument("name")
    rm.add_argument("--force", action="store_true", help="allow removing the last admin while other users remain")

    ls = sub.add_parser("list", help="list the users")
    ls.add_argument("--json", action="store_true", help="as JSON")
    return p


def users_file(args: argparse.Namespace) -> Path:
    if args.file:
        return Path(args.file)
    if args.config:
        try:
            return Path(load_config(args.config, tables=("auth",)).auth.users_file)
        except ConfigError as err:
            raise CliError(f"cannot read the profile: {err}") from None
    return Path(AuthConfig().users_file)


def read_password(from_stdin: bool, stdin: TextIO) -> str:
    if from_stdin:
        line = stdin.readline()
        if not line:
            raise CliError("no password on standard input")
        return line.rstrip("\r\n")
    first = getpass.getpass("New password: ")
    if getpass.getpass("Again: ") != first:
        raise CliError("the two passwords differ; nothing changed")
    return first


def show_totp(store: UserStore, user, out: TextIO) -> None:
    uri = store.provisioning_uri(user)
    if uri:
        out.write(f"TOTP secret for {user.name}: {user.totp_secret}\n"
                  f"  add it to an authenticator app (or open this URI as a QR code): {uri}\n"
                  "  it is not shown again.\n")


def run(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    store = UserStore(users_file(args))
    store.load()
    cmd = args.command
    if cmd == "list":
        users = [u.public() for u in store.users()]
        if args.json:
            out.write(json.dumps(users, indent=2) + "\n")
        elif not users:
            out.write(f"no users in {store.path}: the server runs in local mode (this machine only)\n")
        else:
            out.write(f"{'name':<20} {'role':<9} {'totp':<5} password changed\n")
            for u in users:
                out.write(f"{u['name']:<20} {u['role']:<9} {'yes' if u['totp'] else 'no':<5} "
                          f"{u['password_changed']}\n")
        return 0
    if cmd == "add":
        user = store.add(args.name, Role(args.role), read_password(args.password_stdin, stdin), totp=args.totp)
        out.write(f"added {user.name} ({user.role.value}) to {store.path}\n")
        show_totp(store, user, out)
    elif cmd == "passwd":
        if args.keep_password and args.totp is None:
            raise CliError("--keep-password needs --totp or --no-totp")
        password = None if args.keep_password else read_password(args.password_stdin, stdin)
        user, _ = store.update(args.name, password=password, totp=args.totp)
        out.write(f"changed {user.name}; their sessions end\n")
        if args.totp:
            show_totp(store, user, out)
    elif cmd == "role":
        user, _ = store.update(args.name, role=Role(args.role))
        out.write(f"{user.name} is now {user.role.value}\n")
    elif cmd == "remove":
        store.remove(args.name, allow_last_admin=args.force)
        out.write(f"removed {args.name.lower()}"
                  + ("" if store.configured else "; no user left: local mode (this machine only)") + "\n")
    return 0


def main(argv: list[str] | None = None, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    """Run the ``users`` command line (``argv`` without the program name; a leading ``users`` is skipped)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["users"]:
        argv = argv[1:]
    stdin = stdin or sys.stdin
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage
        return int(exc.code or 0) and 2
    try:
        return run(args, stdin, out)
    except (UserError, UsersFileError, CliError, ValueError) as err:
        sys.stderr.write(f"users: {err}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("users: interrupted; nothing changed\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
