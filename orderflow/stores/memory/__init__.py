"""In-memory state and order stores with the same semantics as the Cosmos DB adapters.

They serve fast unit tests and single-process demos. The contract suite
(``tests/integration/test_store_contract.py``) runs the same tests against these and against
:mod:`orderflow.stores.cosmos`, so anything a role relies on behaves identically in both:

- documents are kept as JSON text in their stored (camelCase) form, so a caller can never mutate the
  store through a model it passed in or got back, and what round-trips is exactly what Cosmos keeps;
- every write gets a new opaque, quoted ETag; a replace applies only if the caller's ETag is current;
- queries evaluate :class:`~orderflow.stores.base.StateQuery` on the stored JSON with Cosmos SQL's
  semantics (a missing field counts as null; times compare as fixed-width strings), return items in
  id order, and page with opaque continuation tokens bound to the query that produced them.

One lock guards each store; it is held only to copy JSON text in or o
The adapter's modules: :mod:`.queries` (query semantics), :mod:`.container` (one container),
:mod:`.state` (state records), :mod:`.documents` (orders and breakers) and :mod:`.alerts` (alerts,
tallies and replay records).
"""

from orderflow.stores.memory.alerts import InMemoryAlertStore
from orderflow.stores.memory.documents import InMemoryBreakerStore, InMemoryOrderStore
from orderflow.stores.memory.queries import alert_matches, matches, query_fingerprint
from orderflow.stores.memory.state import InMemoryStateStore

__all__ = [
    "InMemoryAlertStore",
    "InMemoryBreakerStore",
    "InMemoryOrderStore",
    "InMemoryStateStore",
    "alert_matches",
    "matches",
    "query_fingerprint",
]
