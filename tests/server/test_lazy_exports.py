"""The packages that export lazily (server/lazy.py) name each export twice: in the table given to
``lazy_exports`` (what runs) and under ``if TYPE_CHECKING:`` (what readers, type checkers and the import
contracts see). The two must agree, name for name and object for object."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from server.lazy import lazy_exports

REPO = Path(__file__).resolve().parents[2]
LAZY = sorted(p for p in (REPO / "server").rglob("__init__.py") if "lazy_exports(" in p.read_text())


def type_checking_imports(path: Path) -> dict[str, str]:
    """name -> module of every ``from M import name`` under ``if TYPE_CHECKING:``."""
    out: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.dump(imp)
                out.update({alias.asname or alias.name: imp.module for alias in imp.names})
    return out


def package_name(path: Path) -> str:
    return ".".join(path.parent.relative_to(REPO).parts)


def test_the_lazy_packages_are_found() -> None:
    assert {package_name(p) for p in LAZY} >= {
        "server.gateway.auth", "server.gateway.video", "server.gateway.webrtc", "server.gateway.recording",
        "server.gateway.observability", "server.gateway.vision", "server.gateway.reports"}


@pytest.mark.parametrize("path", LAZY, ids=package_name)
def test_type_checking_imports_equal_the_lazy_table(path: Path) -> None:
    declared = type_checking_imports(path)
    pkg = importlib.import_module(package_name(path))
    assert sorted(declared) == pkg.__all__
    for name, module in declared.items():
        assert getattr(pkg, name) is getattr(importlib.import_module(module), name), name


def test_a_name_from_two_submodules_is_refused() -> None:
    with pytest.raises(ValueError, match="two submodules"):
        lazy_exports("demo", {"a": ("x",), "b": ("x",)})


def test_an_unknown_name_is_an_attribute_error() -> None:
    pkg = importlib.import_module("server.gateway.webrtc")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pkg.nope  # noqa: B018


def test_importing_a_settings_module_does_not_load_the_package_exports() -> None:
    """What the laziness is for: the launcher reads [video]'s settings without the encoders and aiohttp."""
    code = ("import sys; import server.gateway.video.settings, server.gateway.auth.config; "
            "print(sorted(m for m in ('aiohttp', 'av', 'cv2', 'server.gateway.video.routes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def imported_of(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    code += f"\nimport sys\nprint(' '.join(m for m in {modules!r} if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_gateway_with_video_vision_and_the_fleet_off_imports_none_of_their_libraries() -> None:
    """~390 gateways start in a test run and most users' have no camera: numpy, OpenCV, aiortc, Zenoh and
    cryptography (the fleet's signatures) were ~150 ms of every start's CPU. Each is imported by what needs it:
    video and vision when on, a report when rendered (in its worker), the fleet link when ``[fleet] enabled``."""
    heavy = ("numpy", "cv2", "aiortc", "av", "zenoh", "cryptography")
    code = ("import asyncio, sys\n"
            "from server.config import GATEWAY_TABLES, load_config\n"
            "from server.gateway.app import create_app\n"
            "from server.gateway.serve import serve_app\n"
            "from server.runtime_api.client import RuntimeClient\n"
            "profile = load_config('config/rover-sim.toml', overrides={'video': {'enabled': False}},"
            " tables=GATEWAY_TABLES)\n"
            "async def build():\n"
            "    create_app(profile, RuntimeClient('/nonexistent.sock'))\n"
            "asyncio.run(build())\n")
    assert imported_of(code, heavy) == [], "imported at a gateway's start"


def test_the_launcher_loads_every_table_of_every_profile_without_numpy_or_the_simulator() -> None:
    """The launcher checks the whole profile and runs none of it: its runtime tables live in
    server/runtime/settings.py, an arm's or a platform's ``[robot]`` and ``[limits]`` in
    server/runtime/controllers/tables.py (their controllers import numpy and the kinematics), and it does not
    build the driver (the runtime does, and refuses a bad driver table itself: tests/server/test_config.py).
    With numpy and the simulator a launcher was ~0.27 s of CPU to listening, ~0.10 without, on ~390 server
    starts a test run."""
    heavy = ("numpy", "cv2", "sim.rover", "drivers.sim.rover", "server.runtime.loop", "server.runtime.estimation",
             "server.runtime.controllers.scara", "server.runtime.controllers.stewart", "robotics.kinematics.scara")
    code = ("import sys, glob\n"
            "import server.__main__, server.launcher\n"
            "from server.config import load_config\n"
            "for pattern in ('config/rover-*.toml', 'config/scara-*.toml', 'config/stewart-*.toml'):\n"
            "    for path in sorted(glob.glob(pattern)):\n"
            "        load_config(path)\n")
    assert imported_of(code, heavy) == [], "imported by loading the profiles"
