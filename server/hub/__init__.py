"""The fleet's other ends (issue 22, docs/fleet.md): the Zenoh router (:mod:`.router`, ``python -m server
router``) and the hub (:mod:`.app`, ``python -m server hub``). A robot's own end is in the gateway
(:mod:`server.gateway.fleet.robot`)."""
