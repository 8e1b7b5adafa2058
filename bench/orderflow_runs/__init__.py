"""orderflow under measurement: devhost processes for throughput and latency, in-process runs for counts.

- :func:`throughput_run` starts ``python -m devhost`` processes the way ``make demo`` does
  (:mod:`demo.fleet`'s ``Fleet``, ``devhost_specs``, ``host_env``) and drives them through the client
  SDK from this process, closed loop (:func:`bench.load.run_orderflow_load`).
- :func:`counting_run` runs every role in this process (:class:`devhost.host.DevHost`) over the real
  Cosmos DB (cosmosdb-server) and Storage-queue (Azurite) adapters wrapped in the counting wrappers, so
  each store and queue operation is counted where it is made, labelled with the function that made it.
- :func:`hard_down_run` runs the same in-process system while one demo service answers every call 503,
  and counts from the demo services' audit how many calls each order made to it.

Every run uses a database, queues and a lease blob of its own on the shared emulators.

The package's modules: :mod:`.throughput`, :mod:`.counts` and :mod:`.hard_down`.
"""

from __future__ import annotations

from bench.orderflow_runs.counts import CountedSystem, count_breakdown, counted_system, counting_run
from bench.orderflow_runs.hard_down import (
    HARD_DOWN_BREAKER_SETTINGS,
    HARD_DOWN_SETTINGS,
    hard_down_calls,
    hard_down_comparison,
    hard_down_run,
)
from bench.orderflow_runs.throughput import (
    CLIENT_WAKEUP_ID,
    REMOTE_STEPS,
    WOKEN_IDLE_POLL_S,
    WRITE_HELPERS,
    ClientWakeups,
    Measuring,
    connect_stores,
    isolation,
    probed_start,
    queue_role,
    recoveries,
    reply_wakeups,
    summarise_load,
    throughput_run,
)

__all__ = [
    "CLIENT_WAKEUP_ID",
    "HARD_DOWN_BREAKER_SETTINGS",
    "HARD_DOWN_SETTINGS",
    "REMOTE_STEPS",
    "WOKEN_IDLE_POLL_S",
    "WRITE_HELPERS",
    "ClientWakeups",
    "CountedSystem",
    "Measuring",
    "connect_stores",
    "count_breakdown",
    "counted_system",
    "counting_run",
    "hard_down_calls",
    "hard_down_comparison",
    "hard_down_run",
    "isolation",
    "probed_start",
    "queue_role",
    "recoveries",
    "reply_wakeups",
    "summarise_load",
    "throughput_run",
]
