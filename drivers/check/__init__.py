"""Check a driver against the project's driver contract: ``python -m drivers.check module:Class --config my.toml``."""
