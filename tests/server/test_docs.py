"""Docs stay true to the code: every config key and every route is documented."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec

from server.config import TABLES, load_config, table_structs
from server.gateway.app import create_app
from server.runtime_api.client import RuntimeClient

REPO = Path(__file__).resolve().parents[2]


def leaf_keys(structs: tuple[type, ...], prefix: str = "") -> list[str]:
    out = []
    for member in structs:  # [robot] and [limits]: every profile's struct
        for f in msgspec.structs.fields(member):
            key = f"{prefix}{f.encode_name}"
            out.append(key)
            for arg in typing.get_args(f.type) or (f.type,):  # list[Rule] → Rule's keys too
                if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
                    out += leaf_keys((arg,), key + ".")
    return list(dict.fromkeys(out))


def test_the_key_scan_finds_nested_keys() -> None:
    keys = [k for name in TABLES for k in leaf_keys(table_structs(name), name + ".")]
    assert "safety.rules.when" in keys and "loop.max_stall_s" in keys and "video.max_viewers" in keys


def test_configuration_doc_names_every_key() -> None:
    # configuration.md, and the feature docs it points to for their own tables
    text = "".join((REPO / "docs" / name).read_text() for name in ("configuration.md", "recording.md",
                                                                      "observability.md", "security.md"))
    keys = [k for name in TABLES for k in leaf_keys(table_structs(name), name + ".")]
    missing = [k for k in keys if f"`{k.rsplit('.', 1)[-1]}" not in text and k not in text]
    assert not missing, f"undocumented config keys: {missing}"


def test_api_doc_names_every_route() -> None:
    text = (REPO / "docs" / "api.md").read_text() + (REPO / "docs" / "video.md").read_text()
    cfg = load_config(REPO / "config" / "rover-sim.toml")
    app = create_app(cfg, RuntimeClient("/nonexistent"))
    routes = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    skip = {"/", "/static"}
    missing = sorted(r for r in routes if r not in skip and not r.startswith("/api/debug") and r not in text)
    assert not missing, f"undocumented routes: {missing}"
