"""``lazy_exports``: a package's public names imported when first used, not when the package is.

A package ``__init__`` that re-exports from its submodules makes every ``import pkg.small`` pay for
``pkg.heavy`` too: the launcher and every process that loads a profile read the ``[video]`` table's
settings class from ``server.gateway.video.settings``, and through ``server/gateway/video/__init__``
paid for aiohttp, the encoders and cv2 (0.7 s of CPU a server start, for the config alone). With
``lazy_exports`` the names stay where users import them from (``from server.gateway.video import
setup_video``), resolved on first use (PEP 562), and ``__all__`` is made from the same table::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"routes": ("setup_video",),
                                                            "settings": ("VideoConfig",)})

The package also imports the same names under ``if TYPE_CHECKING:`` so that readers, type checkers and
the import contracts see them; ``tests/server/test_lazy_exports.py`` holds the two lists equal.

>>> import sys, types
>>> pkg = types.ModuleType("demo_pkg"); pkg.__path__ = []; sys.modules["demo_pkg"] = pkg
>>> getattr_, dir_, all_ = lazy_exports("demo_pkg", {"json": ("dumps",)}, root="")
>>> getattr_("dumps")({"a": 1})
'{"a": 1}'
>>> "dumps" in dir_(), all_
(True, ['dumps'])
>>> del sys.modules["demo_pkg"]
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, modules: dict[str, tuple[str, ...]], *, root: str | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: ``modules`` maps each submodule (relative to
    ``package``, or to ``root`` when given) to the public names it gives."""
    base = package if root is None else root
    names = {name: sub for sub, exported in modules.items() for name in exported}
    if len(names) != sum(len(exported) for exported in modules.values()):
        raise ValueError(f"{package}: a name exported from two submodules")

    def __getattr__(name: str) -> Any:
        sub = names.get(name)
        if sub is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{base}.{sub}" if base else sub), name)
        setattr(sys.modules[package], name, value)  # once: the next lookup is an ordinary attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__, sorted(names)


__all__ = ["lazy_exports"]
