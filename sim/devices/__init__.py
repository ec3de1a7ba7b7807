"""Device emulators: real bytes on a pseudo-terminal, driven by the simulator's physics.

Each device is a deterministic model (time passed in, never read) served by
:class:`sim.devices.pty.PtyRunner`; ``python -m sim.devices.firmata`` (or
``faulhaber_ascii``, ``faulhaber_mcv3``) prints the pty path and serves until
Ctrl-C, so the real driver path can be tried without hardware.
"""
