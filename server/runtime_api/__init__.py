"""The runtime API, both ends of it (docs/runtime-api.md): the wire (:mod:`.protocol`: framed JSON over a
Unix socket), the parameter structs every method converts with (:mod:`.params`, also the gateway's edge
checks), the gateway's client (:mod:`.client`) and the server side's plumbing (:mod:`.service`: connections,
requests by a method table, snapshot and event publishing, who holds control).

Why one package: a change to a method (its name, its params, its reply) used to touch five modules in
three packages (``server/protocol.py``, ``server/runtime_api.py``, ``server/commands.py``,
``server/runtime/service.py``, ``server/gateway/runtime_client.py``). The methods' *implementations* stay in
:mod:`server.runtime.service`: they need the robot, and this package imports neither the runtime nor the
gateway (``lint-imports``), so both processes import it and neither drags in the other.

Nothing is re-exported here: ``import server.runtime_api.client`` must not import the service's side.
"""
