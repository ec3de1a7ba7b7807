"""``python -m server users …`` (server.gateway.auth.cli) and the users file it writes.

Passwords come from standard input (``--password-stdin``) or the prompt (``getpass``,
fed here through monkeypatch: the prompt is the only thing replaced, the file and the
hashes are real). One test runs the CLI as a real process.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from server.gateway.auth import cli
from server.gateway.auth.users import UserError, UserStore
from tests.server.gateway.auth.conftest import CHEAP_HASHER

REPO = Path(__file__).resolve().parents[4]


def run(path: Path, *args: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    rc = cli.main(["users", "--file", str(path), *args], stdin=io.StringIO(stdin), out=out)
    return rc, out.getvalue()


def test_add_passwd_role_remove_list(tmp_path, capsys) -> None:
    path = tmp_path / "state" / "users.json"
    rc, out = run(path, "list")
    assert rc == 0 and "local mode" in out
    assert run(path, "add", "Ada", "--role", "admin", "--password-stdin", stdin="first password\n")[0] == 0
    assert run(path, "add", "otto", "--role", "operator", "--password-stdin", stdin="otto's password\n")[0] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    store = UserStore(path)
    store.load()
    assert store.verify_password("ada", "first password").role.value == "admin"
    old_hash = store.get("ada").password_hash
    assert "first password" not in path.read_text()

    assert run(path, "passwd", "ada", "--password-stdin", stdin="second password\n")[0] == 0
    store.load()
    assert store.get("ada").password_hash != old_hash
    assert store.verify_password("ada", "second password") is not None

    assert run(path, "role", "otto", "viewer")[0] == 0
    rc, out = run(path, "list", "--json")
    assert rc == 0
    listed = {u["name"]: u for u in json.loads(out)}
    assert listed["otto"]["role"] == "viewer" and listed["ada"]["totp"] is False
    assert "password_hash" not in out

    assert run(path, "remove", "otto")[0] == 0
    rc, out = run(path, "list")
    assert "otto" not in out and "ada" in out
    rc, out = run(path, "remove", "ada")
    assert rc == 0 and "local mode" in out


@pytest.mark.parametrize("args, stdin, message", [
    (["add", "x y", "--role", "admin", "--password-stdin"], "long enough pw\n", "user name"),
    (["add", "bob", "--role", "admin", "--password-stdin"], "short\n", "at least 8"),
    (["add", "bob", "--role", "admin", "--password-stdin"], "bobbobbob\n", None),
    (["add", "bob", "--role", "admin", "--password-stdin"], "", "no password"),
    (["add", "ada", "--role", "admin", "--password-stdin"], "long enough pw\n", "exists"),
    (["passwd", "nobody", "--password-stdin"], "long enough pw\n", "no user"),
    (["remove", "nobody"], "", "no user"),
    (["role", "ada", "viewer"], "", "last admin"),
    (["remove", "ada"], "", "last admin"),
])
def test_refused_changes_change_nothing(tmp_path, capsys, args, stdin, message) -> None:
    path = tmp_path / "users.json"
    UserStore(path, hasher=CHEAP_HASHER).add("ada", "admin", "ada's password")
    UserStore(path, hasher=CHEAP_HASHER).add("otto", "operator", "otto's password")
    before = path.read_bytes()
    rc, _ = run(path, *args, stdin=stdin)
    err = capsys.readouterr().err
    if message is None:  # "bobbobbob" is fine: 9 characters, not the name
        assert rc == 0
        return
    assert rc == 1 and message in err, err
    assert path.read_bytes() == before


def test_usage_errors_exit_2(tmp_path, capsys) -> None:
    assert cli.main(["users", "--file", str(tmp_path / "u.json"), "add", "bob"]) == 2  # no --role
    assert cli.main(["users", "frobnicate"]) == 2
    assert cli.main(["users", "--help"]) == 0


def test_prompted_password_must_be_typed_twice(tmp_path, monkeypatch, capsys) -> None:
    path = tmp_path / "users.json"
    typed = iter(["typed password", "typed passwrod"])
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt="": next(typed))
    rc, _ = run(path, "add", "bob", "--role", "viewer")
    assert rc == 1 and "differ" in capsys.readouterr().err and not path.exists()
    typed = iter(["typed password", "typed password"])
    assert run(path, "add", "bob", "--role", "viewer")[0] == 0


def test_totp_secret_is_shown_once(tmp_path) -> None:
    path = tmp_path / "users.json"
    rc, out = run(path, "add", "ada", "--role", "admin", "--totp", "--password-stdin", stdin="ada's password\n")
    assert rc == 0 and "otpauth://totp/teleop:ada?secret=" in out
    rc, out = run(path, "list")
    assert "otpauth" not in out and "yes" in out
    rc, out = run(path, "passwd", "ada", "--keep-password", "--no-totp")
    assert rc == 0
    store = UserStore(path)
    store.load()
    assert store.get("ada").totp_secret is None


def test_profile_names_the_users_file(tmp_path) -> None:
    profile = tmp_path / "robot.toml"
    users = tmp_path / "elsewhere" / "people.json"
    profile.write_text(f'[robot]\nname = "x"\n\n[auth]\nusers_file = "{users}"\n')
    rc = cli.main(["users", "--config", str(profile), "add", "ada", "--role", "admin", "--password-stdin"],
                  stdin=io.StringIO("ada's password\n"), out=io.StringIO())
    assert rc == 0 and users.exists()


def test_concurrent_writers_lose_nothing(tmp_path) -> None:
    """Two stores (as the server and the CLI) add users at the same time: the file lock serialises them."""
    path = tmp_path / "users.json"
    stores = [UserStore(path, hasher=CHEAP_HASHER) for _ in range(2)]
    errors: list[BaseException] = []

    def add_many(store: UserStore, prefix: str) -> None:
        try:
            for i in range(15):
                store.add(f"{prefix}{i}", "viewer", "long enough pw")
        except (UserError, OSError) as err:
            errors.append(err)

    threads = [threading.Thread(target=add_many, args=(s, p)) for s, p in zip(stores, "ab")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    final = UserStore(path)
    final.load()
    assert len(final.names()) == 30
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_cli_as_a_real_process(tmp_path) -> None:
    path = tmp_path / "users.json"
    proc = subprocess.run([sys.executable, "-m", "server.gateway.auth.cli", "users", "--file", str(path), "add", "bot",
                           "--role", "operator", "--password-stdin"], input="from a script\n", text=True,
                          capture_output=True, cwd=REPO, timeout=60, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "added bot (operator)" in proc.stdout
    store = UserStore(path)
    store.load()
    assert store.verify_password("bot", "from a script") is not None
