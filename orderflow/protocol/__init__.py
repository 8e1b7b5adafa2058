"""The concurrency protocol: the state machine, every transition as a pure function, the one
conditional write of a state record, and the keys that make effects idempotent (docs/protocol.md).

Nothing here does I/O beyond the state-store port, and nothing imports an SDK.
"""
