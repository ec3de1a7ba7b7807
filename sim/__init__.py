"""Physics of each robot and its virtual sensors.

Synchronous and deterministic: every step takes ``dt_s`` and randomness comes
from a seeded :class:`numpy.random.Generator`; nothing here reads the wall clock.
"""
