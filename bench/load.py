"""Closed-loop load: keep a fixed number of orders outstanding, time each from submission to its outcome.

Every system is driven the same way: at most ``concurrency`` orders submitted and not yet finished; a
new one is submitted as soon as one finishes. An order's latency runs from just before its submission
to the moment its outcome is known to the submitter (seconds, ``time.monotonic``); throughput is the
orders finished over the time from the first submission to the last outcome.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orderflow.errors import TransientError
from orderflow_client.client import FINAL_STATUSES, OrderflowClient

T = TypeVar("T")

RESULT_PREFIX = "result "
"""Start of the line on which a peer's process hands its :class:`LoadResult` over, as JSON."""

TIMED_OUT = "TimedOut"
"""The outcome of an order that had not finished when the run's time limit passed."""


POLL_BATCH = 32
"""Replies the load generator asks for in one receive (Storage queues' most)."""

TRANSIENT_PAUSE_S = 0.5
"""Pause before the load generator tries a send or receive again after a transient failure, seconds."""


@dataclass
class LoadResult:
    """What one closed-loop run measured.

    Attributes:
        submitted: Orders submitted.
        latencies_s: Submission-to-outcome time of every finished order, seconds, in finishing order.
        elapsed_s: First submission to last outcome, seconds.
        outcomes: Finished orders by outcome (``Processed``, ``Compensated`` ...), plus ``TimedOut``.
        transient_errors: Sends and receives of the client that failed transiently and were tried again.
    """

    submitted: int
    latencies_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    transient_errors: int = 0

    @property
    def finished(self) -> int:
        """Orders whose outcome arrived."""
        return len(self.latencies_s)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-able data (for a child process to hand it over)."""
        return {
            "submitted": self.submitted,
            "latencies_s": self.latencies_s,
            "elapsed_s": self.elapsed_s,
            "outcomes": self.outcomes,
            "transient_errors": self.transient_errors,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadResult:
        """The inverse of :meth:`to_json`.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not a result.
        """
        return cls(
            submitted=int(data["submitted"]),
            latencies_s=[float(x) for x in data["latencies_s"]],
            elapsed_s=float(data["elapsed_s"]),
            outcomes={str(k): int(v) for k, v in dict(data["outcomes"]).items()},
            transient_errors=int(data.get("transient_errors", 0)),
        )


def run_closed_loop(
    items: Sequence[T],
    run_one: Callable[[T], str],
    *,
    concurrency: int,
    clock: Callable[[], float] = time.monotonic,
) -> LoadResult:
    """Run every item through ``run_one`` on ``concurrency`` threads, one item per thread at a time.

    For systems whose client call blocks until the order's outcome (DBOS's ``get_result``).

    Args:
        items: The orders, submitted in this order.
        run_one: Submits one order, waits for its outcome and returns it; an exception counts as the
            outcome ``error:<ExceptionType>``.
        concurrency: Orders in flight at once (threads).
        clock: Monotonic clock, seconds.

    A send that fails transiently (:class:`~orderflow.errors.TransientError`) is tried again after
    :data:`TRANSIENT_PAUSE_S`, the replies being read meanwhile, and an order's latency still runs from
    its first send; a receive that fails so is tried again after the same pause.

    Raises:
        ValueError: ``concurrency`` is less than 1.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    queue = deque(items)
    lock = threading.Lock()
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    bounds: list[float] = []

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                item = queue.popleft()
            started = clock()
            try:
                outcome = run_one(item)
            except Exception as exc:
                outcome = f"error:{type(exc).__name__}"
            ended = clock()
            with lock:
                latencies.append(ended - started)
                outcomes[outcome] += 1
                bounds.extend((started, ended))

    threads = [threading.Thread(target=worker, name=f"load-{n}") for n in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = max(bounds) - min(bounds) if bounds else 0.0
    return LoadResult(len(items), latencies, elapsed, dict(outcomes))


def run_orderflow_load(
    client: OrderflowClient,
    submissions: Sequence[Mapping[str, Any]],
    *,
    concurrency: int,
    timeout_s: float,
    idle_poll_s: float = 0.02,
    wakeup: threading.Event | None = None,
    announce: Callable[[str], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> LoadResult:
    """Submit orders through the client SDK and time each until its final reply is received.

    One thread submits and polls the client's reply queue. Without ``wakeup`` it receives after each
    round of sends and, when that returned nothing, sleeps ``idle_poll_s``, which bounds how late a reply
    can be noticed. With ``wakeup`` it receives only when woken (a send to the reply queue was
    announced), after a full batch (more may be waiting), or when ``idle_poll_s`` has passed without a
    wake-up (one that was lost): never right after a submission nor after a batch that emptied the
    queue, whose receives would find nothing and compete with the orders' own requests at the emulator.

    Args:
        client: The client; its reply queue receives the replies.
        submissions: Order messages (``SubmitOrder`` fields, camelCase), submitted in this order.
        concurrency: Orders submitted and without a final reply at once.
        timeout_s: Stop waiting this many seconds after the first submission; orders still
            outstanding count as ``TimedOut``.
        idle_poll_s: Longest wait after an empty receive, seconds.
        wakeup: Set when a reply may have arrived (:func:`bench.orderflow_runs.reply_wakeups`); cleared
            here before the receive it starts, which then sees every reply sent before it was set.
        announce: Called with the inbound queue's name after each submission (a
            :class:`~devhost.wakeup_channel.WakeupChannel`'s ``announce``: it wakes the devhosts' idle
            loop of that queue, as their own sends do).
        clock: Monotonic clock, seconds.

    Raises:
        ValueError: ``concurrency`` is less than 1.
        InvalidMessage: a submission is not a valid order.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    first = clock()
    last = first
    deadline = first + timeout_s
    sending = _Sending(deque(submissions), hold_until=first)
    pending, sent_at = sending.pending, sending.sent_at
    more = False  # the last receive returned a full batch: receive again at once
    while (pending or sent_at) and clock() < deadline:
        sending.send(client, concurrency=concurrency, clock=clock, announce=announce)
        if wakeup is not None:
            if not more:
                wakeup.wait(max(0.0, min(idle_poll_s, deadline - clock())))
            # Cleared before the receive, which sees every reply sent before: a set from now on is a
            # reply this receive may have missed.
            wakeup.clear()
        try:
            replies = client.poll(max_messages=POLL_BATCH)
        except TransientError:  # nothing was taken (OrderflowClient.poll): read again after a pause
            sending.transient += 1
            time.sleep(TRANSIENT_PAUSE_S)
            more = True  # its wake-ups were spent on the failed receive
            continue
        now = clock()
        for reply in replies:
            started_at = sent_at.get(reply.order_id)
            if started_at is None or reply.status not in FINAL_STATUSES:
                continue
            del sent_at[reply.order_id]
            latencies.append(now - started_at)
            outcomes[reply.status.value] += 1
            last = now
        more = len(replies) >= POLL_BATCH
        if wakeup is None and not replies:
            time.sleep(idle_poll_s)
    if sent_at or pending:
        outcomes[TIMED_OUT] += len(sent_at) + len(pending)
    return LoadResult(
        len(submissions) - len(pending), latencies, last - first, dict(outcomes), sending.transient
    )


@dataclass
class _Sending:
    """The submissions of :func:`run_orderflow_load` not sent yet (``pending``) and those sent without a
    final reply yet (``sent_at``: order id -> when its first send started)."""

    pending: deque[Mapping[str, Any]]
    hold_until: float
    """After a failed send, none until then (the replies are still read meanwhile)."""
    sent_at: dict[str, float] = field(default_factory=dict)
    tried_at: dict[int, float] = field(default_factory=dict)
    """id(submission) -> its first send, while it is tried again."""
    transient: int = 0
    """Sends and receives that failed transiently."""

    def send(
        self,
        client: OrderflowClient,
        *,
        concurrency: int,
        clock: Callable[[], float],
        announce: Callable[[str], object] | None,
    ) -> None:
        """Send pending submissions while fewer than ``concurrency`` await their final reply, until a send
        fails transiently (then none until :data:`TRANSIENT_PAUSE_S` later)."""
        while self.pending and len(self.sent_at) < concurrency and clock() >= self.hold_until:
            submission = self.pending.popleft()
            started = self.tried_at.pop(id(submission), clock())
            try:
                order_id = client.submit(submission)
            except TransientError:
                # The queue timed out (an emulator's slow spell): the same order again, as a client
                # would; its MessageId and the submission's idempotency make a send that landed harmless.
                self.transient += 1
                self.tried_at[id(submission)] = started
                self.pending.appendleft(submission)
                self.hold_until = clock() + TRANSIENT_PAUSE_S
                return
            self.sent_at[order_id] = started
            if announce is not None:
                announce(client.orders_queue)
