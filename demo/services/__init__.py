"""The demo's three remote services (inventory, payments, shipping), one module each, in one FastAPI app.

They stand in for the third-party services the agents wrap, and misbehave on
purpose (see :mod:`demo.faults`). All state lives in memory, seeded from a
TPC-H :class:`~demo.tpch.Catalog`, and every change happens under one asyncio
lock.

Every mutating endpoint requires an ``Idempotency-Key`` header and honours it
the way Stripe does:

* the first completed request's status and body are stored and replayed, with
  the header ``Idempotent-Replayed: true``, for any later request carrying the
  same key and the same body (same endpoint, same target, same JSON);
* the same key with a different body -> 422 ``idempotency_key_reuse``;
* the same key while the first request is still running -> 409
  ``request_in_progress`` (``permanent: false``: retry later);
* business outcomes (2xx and 4xx such as ``out_of_stock``) are stored; 5xx
  answers, requests that fail validation and requests refused by the key
  checks above are not, so the client may retry them.

Undo endpoints (release, refund, cancel) are also idempotent by state: undoing
something already undone changes nothing and succeeds.

An undo can be more than a reset: the payment service keeps a cancellation fee
(:class:`RefundPolicy`, default none) when a charge is refunded more than
``fee_after_s`` seconds (by the app's monotonic clock) after it was made. Such
a refund, by charge id or by forward key, returns the amount asked minus the
fee still owed on the charge, never below 0; the fee is kept at most once per
charge in total, also across partial refunds, and within the window refunds
are in full. Refund answers carry ``feeKept`` (what that call kept, a string
with 2 dp), the order's facts record it per charge and in the summary, and
``netCharged`` stays the money still charged (the fee, after a full refund
that kept one). The policy is set with ``--cancellation-fee 2.50 --fee-after-s
60`` on the command line and read or replaced at runtime with ``GET`` / ``PUT
/refund-policy`` (``{"fee": "2.50", "fee_after_s": 60.0}``).

Each service can also undo a step knowing only the forward call's idempotency
key (``{orderId}:{step}``), whatever became of that call: the undo-by-key
endpoints undo the effect the key's stored outcome names, and when the key has
no effect (never arrived, or refused) they leave a *tombstone* on it, so a
stale or hung forward call arriving later is refused (409 ``cancelled``) and
applies nothing. While the forward call is still in flight they answer 409
``request_in_progress`` (``permanent: false``, not stored). Both decisions are
taken under the lock: the forward call creates its stored entry only if the key
has no tombstone, and the undo writes a tombstone only if the key has no stored
entry or one whose outcome had no effect, so a key never gets both an effect
and a tombstone.

A request is handled in this order: key check, call counted and fault decided
(``undo_refused`` answers 422 and ``transient`` 503 here, ``latency`` sleeps), body validation,
tombstone check (forward calls only), key lookup (reuse / in progress /
replay), ``hang`` sleep, effect applied and
response stored under the lock, ``lost_response`` answers 500.

Modules: :mod:`demo.services.inventory`, :mod:`demo.services.payments` and
:mod:`demo.services.shipping` (each service's state and router),
:mod:`demo.services.idempotency` (the key checks above), :mod:`demo.services.ledger`
(what the services share: keys, tombstones, audit, order facts),
:mod:`demo.services.app` (:func:`~demo.services.app.create_app` composes the routers) and
:mod:`demo.services.cli`.

Run it with ``python -m demo.services --port 8082`` (see
:func:`demo.services.cli.main`; ``--faults JSON``, ``--cancellation-fee AMOUNT``,
``--fee-after-s SECONDS``), or in process with :func:`devhost.serving.serve_in_thread`
and :func:`devhost.serving.stop`.
"""
