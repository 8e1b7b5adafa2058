"""Cosmos DB adapters of the state and order stores, over the synchronous ``azure-cosmos`` SDK.

The same code talks to Azure Cosmos DB (Entra ID token credential, TLS verified) and to the local
``@vercel/cosmosdb-server`` emulator (account key, self-signed certificate). Both containers are
partitioned on ``/orderId`` and every item's ``id`` equals its order id, so a point read costs one
request.

HTTP outcomes map onto :mod:`orderflow.errors`: 409 → AlreadyExists, 412 → ConcurrencyConflict,
404 → NotFound, 408/429/449/5xx, client timeouts and connection failures → TransientError; any other
status → PermanentError. The SDK already retries throttling (429) and connection failures with
bounded back-off; nothing here retries again.

What cosmosdb-server 1.0.1 (with @zeit/cosmosdb-query 0.7.2) was probed to support, all of which
real Cosmos DB supports with the same meaning:

- null tests: ``c.x = null`` and ``IS_NULL(c.x)`` match an explicit null only; ``NOT IS_DEFINED(c.x)``
  matches a missing field only. The queries use ``(NOT IS_DEFINED(c.x) OR IS_NULL(c.x))`` so a record
  written before a field existed counts as null, as the models read it.
- ``c.processState IN (@s0, @s1)`` and ``ARRAY_CONTAINS(@states, c.processState)`` both work; ``IN``
  with one parameter per value is used (the form Cosmos DB serves from its index).
- string range comparisons with parameters (``c.completeBy < @completeByBefore``); a comparison with
  null is false, as in Cosmos DB. ``IS_STRING`` guards make "is set" explicit.
- ``SELECT VALUE COUNT(1)`` with a filter, cross-partition: returns one number.
- cross-partition paging with ``maxItemCount``: a token comes back only when more items match; the
  last page has no token. A token that is not JSON (garbage, truncated) is silently ignored and the
  scan restarts from the beginning; JSON of the wrong shape gives 400. This is why tokens are wrapped
  in an envelope carrying a query fingerprint (a foreign or garbled token → InvalidContinuation on
  both platforms instead of a silent restart).
- point read of a missing item answers **500** ("Cannot read properties of undefined"), not 404 (a bug
  in its read handler); replace of a missing item answers 404 correctly. :meth:`CosmosContainer.read`
  disambiguates a 500 with a one-item count query, which is also correct on Cosmos DB.

The adapter's modules: :mod:`.container` (one container: errors, paging), :mod:`.queries`
(the SQL), :mod:`.state` (state records and their moved-out timeline), :mod:`.documents` (orders and
breakers), :mod:`.alerts` (alerts, tallies and replay records) and :mod:`.connection` (the account
and its containers).
"""

from orderflow.stores.cosmos.alerts import REPLAY_QUERY_PAGES, CosmosAlertStore
from orderflow.stores.cosmos.connection import (
    BREAKER_PARTITION_KEY_PATH,
    HISTORY_CONTAINER,
    PARTITION_KEY_PATH,
    CosmosStores,
)
from orderflow.stores.cosmos.container import MAX_COUNT_PAGES, Parameters
from orderflow.stores.cosmos.documents import CosmosBreakerStore, CosmosOrderStore
from orderflow.stores.cosmos.queries import alert_query_sql, replay_query_sql, state_query_sql
from orderflow.stores.cosmos.state import HISTORY_SQL, CosmosStateStore

__all__ = [
    "BREAKER_PARTITION_KEY_PATH",
    "HISTORY_CONTAINER",
    "HISTORY_SQL",
    "MAX_COUNT_PAGES",
    "PARTITION_KEY_PATH",
    "REPLAY_QUERY_PAGES",
    "CosmosAlertStore",
    "CosmosBreakerStore",
    "CosmosOrderStore",
    "CosmosStateStore",
    "CosmosStores",
    "Parameters",
    "alert_query_sql",
    "replay_query_sql",
    "state_query_sql",
]
