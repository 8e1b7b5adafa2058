"""``make bench``: orderflow's throughput, latency, operation counts and supervisor sweep, against peers.

A host like ``devhost``: it may import devhost, the roles and ``orderflow``; nothing imports it.
``python -m bench`` runs every benchmark, prints a table and writes ``bench-report.json``.
"""
