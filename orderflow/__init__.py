"""orderflow's shared core: records and their state machine, store and queue ports with their adapters,
settings and telemetry. Roles and hosts build on it; it imports neither, nor the client package."""
