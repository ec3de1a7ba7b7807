"""The fleet (issue 22, docs/fleet.md): a robot's gateway dials out to a Zenoh router (:mod:`.robot`), a hub
serves many robots' dashboards and obeys its users' permissions (:mod:`server.hub`), and the safety stays on
each robot: its runtime's link-loss watchdog decides every stop when the hub, the router or the network goes.

``[fleet]`` (:mod:`.config`), the keys (:mod:`.keys`), the hub's signatures (:mod:`.trust`) and the
self-reconnecting Zenoh session (:mod:`.link`) are shared by both ends.
"""
