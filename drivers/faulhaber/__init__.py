"""FAULHABER motion controllers: ASCII (MCDC/MCBL 300x) and MC V3.0 (binary, CiA 402).

Codecs: :mod:`~drivers.faulhaber.ascii`, :mod:`~drivers.faulhaber.mcv3` (sans-IO);
the motion-axis interface: :mod:`~drivers.faulhaber.axis`; the drivers
``faulhaber-ascii`` and ``faulhaber-mcv3``: :mod:`~drivers.faulhaber.driver`;
programs from a programmed joint motion: :mod:`~drivers.faulhaber.program`.
"""
