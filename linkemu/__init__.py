"""An emulated network link for tests and benches: robot and operator namespaces joined through a
shaped, delayed, lossy link (docs/networks.md). Nothing in the product imports this package.

>>> sorted(PROFILES)
['4g', 'bad', 'blackout', 'lan', 'satellite', 'wifi']
"""

from linkemu.link import OPERATOR_IP, ROBOT_IP, Link, LinkError
from linkemu.profiles import PROFILES, Blackouts, Direction, GilbertElliott, Profile, profile, symmetric
from linkemu.requirements import missing

__all__ = ["Blackouts", "Direction", "GilbertElliott", "Link", "LinkError", "OPERATOR_IP", "PROFILES", "Profile",
           "ROBOT_IP", "missing", "profile", "symmetric"]
