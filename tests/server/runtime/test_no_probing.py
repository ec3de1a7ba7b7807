"""Issue 19 §2: the runtime asks nothing of a driver, a controller, a stage or a behaviour by probing — what each
can do it declares (``Driver.capabilities``, the controller's class attributes and methods) — and no code of the
runtime branches on a profile's name. A ``getattr``/``hasattr`` on one of them, or a comparison with a robot
kind's name, in the runtime fails here (the trajectory behaviour's ``getattr(controller, "saturation")`` did)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
RUNTIME = REPO / "server" / "runtime"
#: the objects whose abilities are declared, by the names the runtime gives them
DECLARING = ("driver", "controller", "behavior", "behaviour", "stage")
KINDS = {"rover", "scara", "stewart", "arm", "platform"}

pytestmark = pytest.mark.unit


def probes(path: Path) -> list[str]:
    out = []
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args and any(w in ast.unparse(node.args[0]).lower() for w in DECLARING):
            out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Compare) and any(isinstance(o, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for o in node.ops):
            names = [c.value for c in (node.left, *node.comparators) if isinstance(c, ast.Constant)]
            names += [e.value for c in node.comparators if isinstance(c, (ast.Tuple, ast.Set, ast.List))
                      for e in c.elts if isinstance(e, ast.Constant)]
            if "profile" in ast.unparse(node) and KINDS & {n for n in names if isinstance(n, str)}:
                out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_runtime_probes_nothing_and_branches_on_no_profile() -> None:
    found = [p for f in sorted(RUNTIME.rglob("*.py")) for p in probes(f)]
    assert found == [], "declare it (a capability, a controller attribute or method) instead:\n" + "\n".join(found)


def test_the_check_sees_a_probe(tmp_path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f(self):\n    return getattr(self.driver, 'axes_config', None) or self.profile == 'rover'\n")
    assert len(probes(sample)) == 2
