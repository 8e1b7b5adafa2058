"""A counting wrapper of the queue port (for benchmarks).

:class:`CountingQueueFactory` wraps a :class:`~orderflow.queues.base.QueueFactory`; every queue it hands
out counts the calls it forwards (keyword arguments passed through as given) in an
:class:`~bench.counting.OperationCounts`, labelled with the queue's role as ``role_of`` names it
(``orders``, ``agent_requests`` ...; the queue name itself by default).

Operations counted: ``send``, ``receive`` (calls), ``received`` (messages those calls returned),
``complete``, ``abandon``, ``renew_lock``, ``dead_letter`` and ``approximate_count``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.counting import OperationCounts
from orderflow.queues.base import DeadLetter, MessageQueue, QueueFactory, ReceivedMessage


def _same(name: str) -> str:
    return name


class CountingQueue:
    """A :class:`~orderflow.queues.base.MessageQueue` that counts the calls it forwards under ``role``."""

    def __init__(self, inner: MessageQueue, *, role: str, counts: OperationCounts) -> None:
        self.inner = inner
        self.name = inner.name
        self.role = role
        self.counts = counts

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, role={self.role!r})"

    def send(self, body: str, **kwargs: Any) -> None:
        """Count ``send`` and forward."""
        self.counts.add("send", self.role)
        self.inner.send(body, **kwargs)

    def receive(self, **kwargs: Any) -> list[ReceivedMessage]:
        """Count ``receive``, forward, then count the messages returned as ``received``."""
        self.counts.add("receive", self.role)
        messages = self.inner.receive(**kwargs)
        self.counts.add("received", self.role, len(messages))
        return messages

    def complete(self, message: ReceivedMessage, **kwargs: Any) -> None:
        """Count ``complete`` and forward."""
        self.counts.add("complete", self.role)
        self.inner.complete(message, **kwargs)

    def abandon(self, message: ReceivedMessage, **kwargs: Any) -> None:
        """Count ``abandon`` and forward."""
        self.counts.add("abandon", self.role)
        self.inner.abandon(message, **kwargs)

    def renew_lock(self, message: ReceivedMessage, **kwargs: Any) -> None:
        """Count ``renew_lock`` and forward."""
        self.counts.add("renew_lock", self.role)
        self.inner.renew_lock(message, **kwargs)

    def dead_letter(self, message: ReceivedMessage, **kwargs: Any) -> None:
        """Count ``dead_letter`` and forward."""
        self.counts.add("dead_letter", self.role)
        self.inner.dead_letter(message, **kwargs)

    def approximate_count(self, **kwargs: Any) -> int:
        """Count ``approximate_count`` and forward."""
        self.counts.add("approximate_count", self.role)
        return self.inner.approximate_count(**kwargs)


class CountingQueueFactory:
    """A :class:`~orderflow.queues.base.QueueFactory` whose queues count what is done with them.

    Args:
        inner: The factory every call goes to.
        counts: Where to count (a new one by default; share it to aggregate several factories).
        role_of: Maps a queue name to the label its operations are counted under (default: the name).

    Attributes:
        counts: The tally.
    """

    def __init__(
        self,
        inner: QueueFactory,
        *,
        counts: OperationCounts | None = None,
        role_of: Callable[[str], str] = _same,
    ) -> None:
        self.inner = inner
        self.counts = counts if counts is not None else OperationCounts()
        self._role_of = role_of

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def queue(self, name: str, **kwargs: Any) -> CountingQueue:
        """The inner factory's queue ``name``, counting under ``role_of(name)``."""
        return CountingQueue(self.inner.queue(name, **kwargs), role=self._role_of(name), counts=self.counts)

    def dead_letters(self, name: str, **kwargs: Any) -> list[DeadLetter]:
        """Forwarded uncounted: reading dead letters is an operator's action, not the system's work."""
        return self.inner.dead_letters(name, **kwargs)
