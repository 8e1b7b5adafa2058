"""The client side of orderflow: the client SDK (:mod:`orderflow_client.client`), the operator API's HTTP
client (:mod:`orderflow_client.operator_client`) and the ``orderflow`` command line over both.

It reaches the system only through a client's queues and the authenticated operator API: of the core it
imports the messages and records it sends and shows, the client registry, the client text rules, the
settings and the queue port, never a store, a role or a host (tests/unit/test_layering.py); the local
host's Storage queues (``devhost.wiring.connect_queues``) only when a command sends or reads. Installed
for the CLI and the demo (requirements-client.txt); never part of the Functions deployment package
(``.funcignore``).
"""
