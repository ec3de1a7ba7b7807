"""The deployment files: docker-compose.yml validated against a schema of the Compose keys it uses, the
Dockerfile consistent with it, and the two-command promise of the README and CI."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from server.config import load_config

REPO = Path(__file__).resolve().parent.parent

STR_LIST = {"type": "array", "items": {"type": "string"}}
# A subset of the Compose Specification (compose-spec.json): every key we use, typed; unknown keys refused.
COMPOSE_SCHEMA = {
    "type": "object",
    "required": ["services"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$"},
        "volumes": {"type": "object", "additionalProperties": {"type": ["object", "null"]}},
        "services": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "build": {"type": "object", "additionalProperties": False,
                              "properties": {"context": {"type": "string"}, "dockerfile": {"type": "string"}}},
                    "image": {"type": "string"},
                    "command": STR_LIST,
                    "ports": {"type": "array", "items": {"type": "string", "pattern": r"^\d+:\d+(/(tcp|udp))?$"}},
                    "cap_add": STR_LIST,
                    "ulimits": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "volumes": {"type": "array", "items": {"type": "string", "pattern": r"^[^:]+:/[^:]+(:(ro|rw))?$"}},
                    "devices": STR_LIST,
                    "stop_signal": {"type": "string", "pattern": "^SIG[A-Z]+$"},
                    "stop_grace_period": {"type": "string", "pattern": r"^\d+(ms|s|m)$"},
                    "restart": {"enum": ["no", "always", "on-failure", "unless-stopped"]},
                    "healthcheck": {
                        "type": "object", "additionalProperties": False, "required": ["test"],
                        "properties": {
                            "test": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                            "interval": {"type": "string", "pattern": r"^\d+(ms|s|m)$"},
                            "timeout": {"type": "string", "pattern": r"^\d+(ms|s|m)$"},
                            "retries": {"type": "integer", "minimum": 1},
                            "start_period": {"type": "string", "pattern": r"^\d+(ms|s|m)$"},
                        },
                    },
                },
            },
        },
    },
}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_compose_file_is_valid(compose: dict) -> None:
    jsonschema.validate(compose, COMPOSE_SCHEMA)
    svc = compose["services"]["teleop"]
    assert (REPO / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
    for volume in svc["volumes"]:
        source = volume.split(":")[0]
        assert source in compose.get("volumes", {}) or (REPO / source).exists(), volume
    assert svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")


def test_compose_command_runs_a_valid_profile(compose: dict) -> None:
    cmd = compose["services"]["teleop"]["command"]
    assert cmd[:3] == ["python", "-m", "server"]
    config = cmd[cmd.index("--config") + 1].removeprefix("/app/")
    load_config(REPO / config)  # raises if the profile is invalid
    port = cmd[cmd.index("--port") + 1]
    assert any(p.endswith(f":{port}") for p in compose["services"]["teleop"]["ports"])
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"


def test_dockerfile_copies_what_the_server_needs() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11" in text
    for part in ("server", "drivers", "sim", "robotics", "web", "config"):
        assert re.search(rf"^COPY {part} ", text, re.M), part
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert cmd, "exec-form CMD"
    assert "--host" in cmd.group(1) and "0.0.0.0" in cmd.group(1)


def test_readme_and_ci_promise_two_commands() -> None:
    head = "\n".join((REPO / "README.md").read_text().splitlines()[:40])
    assert "make run" in head and "make test" in head
    ci = (REPO / ".ci" / "run").read_text()
    commands = [shlex.split(line)[0] for line in ci.splitlines() if line.strip() and not line.startswith("#")]
    assert "make" in commands
    assert "make test" in ci


# ---------------------------------------------------------------------- the lock files (make lock)
def _pins(lock: Path) -> dict[str, tuple[str, int]]:
    """name → (version, hashes) of every pin in a ``uv pip compile --generate-hashes`` file."""
    from packaging.utils import canonicalize_name

    pins: dict[str, tuple[str, int]] = {}
    name = None
    for line in lock.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+)", line):
            name = canonicalize_name(m.group(1))
            pins[name] = (m.group(2), 0)
        elif name and line.strip().startswith("--hash=sha256:"):
            pins[name] = (pins[name][0], pins[name][1] + 1)
    return pins


@pytest.mark.parametrize("lock, extras", [("requirements.lock", ("test",)), ("requirements-run.lock", ())])
def test_the_lock_agrees_with_pyproject(lock: str, extras: tuple[str, ...]) -> None:
    """Every dependency pyproject.toml asks for is pinned, at a version it allows, with hashes. `make lock`
    mends a lock that disagrees."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    wanted += [Requirement(line) for line in (REPO / "scripts" / "lock-build.in").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    pins = _pins(REPO / lock)
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{lock}: {req.name} is not pinned (run make lock)"
        version, hashes = pins[name]
        assert req.specifier.contains(version, prereleases=True), \
            f"{lock}: {req.name}=={version} is outside pyproject.toml's {req.specifier} (run make lock)"
        assert hashes >= 1, f"{lock}: {req.name} has no hash"
    assert all(h >= 1 for _, h in pins.values()), f"{lock}: a pin without hashes"
    if not extras:  # the run lock holds no test tool
        test_only = {canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["test"]}
        assert not test_only & set(pins), f"{lock} pins test tools: {sorted(test_only & set(pins))}"


def test_the_set_up_installs_from_the_lock() -> None:
    make = (REPO / "Makefile").read_text()
    assert "--require-hashes -r $(LOCK)" in make and "LOCK   := requirements.lock" in make
    assert "--no-deps" in make  # the project itself adds nothing the lock did not pin
    assert "pip install --require-hashes -r requirements-run.lock" in (REPO / "Dockerfile").read_text()


def test_the_installer_is_pinned_with_hashes_at_the_version_make_lock_uses() -> None:
    """uv installs the lock (Makefile): pip installs uv itself from scripts/uv-installer.lock, with hashes, at
    the UV_VERSION that `make lock` resolves with; `make lock` installs it from there too while the pin is that
    version (a new UV_VERSION is installed by its version, once, and written to the file)."""
    make = (REPO / "Makefile").read_text()
    version = re.search(r"^UV_VERSION \?= (\S+)$", make, re.M).group(1)
    pins = _pins(REPO / "scripts" / "uv-installer.lock")
    assert pins == {"uv": (version, pins["uv"][1])} and pins["uv"][1] >= 1, pins
    assert "UV_LOCK := scripts/uv-installer.lock" in make
    set_up, lock = make[make.index("$(STAMP):"):make.index("\nrun:")], make[make.index("\nlock:"):]
    assert "--require-hashes -r $(UV_LOCK)" in set_up
    assert "if grep -q '^uv==$(UV_VERSION) ' $(UV_LOCK); then" in lock and "--require-hashes -r $(UV_LOCK)" in lock
