"""State estimation on numpy: attitude, magnetometer calibration, UWB positioning, planar pose.

Pure math: no I/O, no clocks; callers pass ``dt_s`` and sensor samples in SI
units (m, s, rad, m/s², rad/s). Bad input raises :class:`ValueError`.

>>> from robotics.estimation.attitude import compass_heading_deg
>>> compass_heading_deg(0.0)
90.0
"""
