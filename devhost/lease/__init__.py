"""Leader election of the local host's supervisor loops: the protocol and its guard
(:mod:`devhost.lease.election`), the blob lease (:mod:`devhost.lease.blob`) and its in-memory twin
(:mod:`devhost.lease.memory`)."""
