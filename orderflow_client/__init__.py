"""The client side of orderflow: the client SDK (:mod:`orderflow_client.client`), the operator API's HTTP
client (:mod:`orderflow_client.operator_client`) and the ``orderflow`` command line over both.

It reaches the system only through a client's queues and the authenticated operator API, and imports
of the core only its messages, records and client text rules. Installed for the CLI and the demo; never
part of the Functions deployment package (``.funcignore``).
"""
