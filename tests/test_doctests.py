"""Every docstring example in the product's packages runs (STYLE.md: a tiny worked example in each
public docstring, run as a doctest). ``pytest --doctest-modules`` only collects ``tests/``, so
without this the examples in ``robotics/``, ``sim/``, ``drivers/`` and ``server/`` were never run:
one in ``server/gateway/ratelimit.py`` had been wrong since it was written."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("robotics", "sim", "drivers", "server")


def _modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        root = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(root.__path__, pkg + "."):
            if not info.name.endswith("__main__"):
                names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see above)"
