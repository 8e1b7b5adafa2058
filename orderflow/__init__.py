"""orderflow's shared core: records and their state machine, store and queue ports with their adapters,
settings, telemetry, and the client SDK and CLI. Roles and hosts build on it; it imports neither."""
