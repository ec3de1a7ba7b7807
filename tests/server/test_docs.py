"""Docs stay true to the code: every config key and every route is documented."""

from __future__ import annotations

from pathlib import Path

from server.app import create_app
from server.config import ANY_TABLE, SCHEMA, load_config

REPO = Path(__file__).resolve().parents[2]


def leaf_keys(schema: dict, prefix: str = "") -> list[str]:
    out = []
    for key, spec in schema.items():
        if isinstance(spec, dict):
            out += leaf_keys(spec, f"{prefix}{key}.")
        elif isinstance(spec, list):
            out.append(prefix + key)
            out += leaf_keys(spec[0], "")
        elif spec is ANY_TABLE:
            out.append(prefix + key)
        else:
            out.append(key)
    return out


def test_configuration_doc_names_every_key() -> None:
    text = (REPO / "docs" / "configuration.md").read_text()
    missing = [k for k in leaf_keys(SCHEMA) if f"`{k.rsplit('.', 1)[-1]}" not in text and f"{k}" not in text]
    assert not missing, f"undocumented config keys: {missing}"


def test_api_doc_names_every_route() -> None:
    text = (REPO / "docs" / "api.md").read_text() + (REPO / "docs" / "video.md").read_text()
    cfg = load_config(REPO / "config" / "rover-sim.toml")
    app = create_app(cfg)
    routes = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    skip = {"/", "/static"}
    missing = sorted(r for r in routes if r not in skip and not r.startswith("/api/debug") and r not in text)
    assert not missing, f"undocumented routes: {missing}"
