"""robotics/ stays pure: numpy and a side-effect-free slice of the stdlib only."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "robotics"
FORBIDDEN_STDLIB = {
    "asyncio", "logging", "os", "io", "socket", "subprocess", "threading", "multiprocessing",
    "time", "pathlib", "sys", "random", "shutil", "tempfile", "select", "signal",
}
ALLOWED_THIRD_PARTY = {"numpy", "robotics"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_robotics_module_imports_only_numpy_and_pure_stdlib(path):
    for name in _imports(path):
        if name in ALLOWED_THIRD_PARTY or name == "__future__":
            continue
        assert name in sys.stdlib_module_names, f"{path.name} imports third-party {name}"
        assert name not in FORBIDDEN_STDLIB, f"{path.name} imports {name} (I/O, clocks or logging)"
