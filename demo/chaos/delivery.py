"""Delivery faults at the transport seam of a devhost process: duplicated and late messages.

``make chaos`` (:mod:`demo.chaos.run`) starts its devhost processes with :data:`CHAOS_ENV` set to a
:class:`DeliveryFaults` plan (JSON). Each process then wraps its queue factory in
:class:`FaultyQueueFactory`, so every message a role sends may be

- **duplicated**: sent a second time with the same body and message id, as an at-least-once transport
  may deliver it. Storage queues have no broker duplicate detection, so the copy reaches the consumer:
  submissions, agent requests, agent responses and client replies each meet their own consumer's
  de-duplication;
- **late** (agent responses only): sent with a visibility delay longer than the step's deadline, so the
  orchestration's durable timer wins the race, the record stays ``Processing`` with an expired
  ``completeBy``, the supervisor recovers it, and the answer, when it shows up, must be dropped.

Whether a message is faulted is a pure function of (seed, fault, queue, message id), the same draw as the
demo services' faults (:func:`demo.faults.uniform`): a run is reproducible however sends interleave, and a
message re-sent under the same id (an activity re-run) gets the same decision. Agent responses and
requests carry the attempt in their id, so each attempt draws afresh.

Every injected fault is counted in a :class:`FaultLog`, which appends one JSON line per fault to a file of
its own process (one write, flushed at once), so the counts survive a SIGKILL; :func:`read_fault_logs`
adds up a run's files.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from demo.chaos.claim_kills import MARKERS, KillPoint
from demo.faults import uniform
from orderflow.errors import InvalidMessage
from orderflow.messages import AgentResponse, parse_message
from orderflow.queues.base import DeadLetter, ForwardingQueue, MessageQueue, QueueFactory, ReceivedMessage
from orderflow.records import format_utc
from orderflow.settings import Settings

logger = logging.getLogger(__name__)

AfterSend = Callable[[str, str], None]
"""Called with a queue's name and a message id after the message was sent."""

CHAOS_ENV = "DEVHOST_CHAOS"
"""Environment variable holding a devhost process's :class:`DeliveryFaults` plan as JSON (unset: none)."""

LATE_MARGIN_S = 1.0
"""Seconds a late agent response stays invisible beyond ``STEP_TIMEOUT_S``. The response is sent no earlier
than its step started, so it becomes visible at least this long after the step's deadline."""


class DeliveryFault(StrEnum):
    """The kinds of delivery fault; values are the names in the fault log and the chaos report."""

    DUPLICATE = "duplicate"
    LATE = "late"
    KILL_BEFORE_CLAIM = "kill_before_claim"
    """Drawn here, done by the driver: the process is killed after a new order's ``Received`` reply,
    between the create of its record and its claim (:mod:`demo.chaos.claim_kills`)."""
    LONG_HANDLER = "long_handler"
    """Not injected but seen: a handler that outlasted half its message's lock, kept the lock by renewal
    and completed the message (the chaos run makes such handlers with slow calls to the demo services)."""


class DeliveryFaults(BaseModel):
    """How often a devhost process duplicates or delays what it sends. Shares are probabilities in [0, 1].

    Attributes:
        duplicate_share: Share of sends delivered twice (same body, same message id).
        late_share: Share of agent responses delivered after their step's deadline.
        long_handlers: Count the handlers that completed their message after renewing its lock
            (:attr:`DeliveryFault.LONG_HANDLER`).
        claim_kill_share: Share of new orders whose submitting process is killed between the create of
            their record and its claim (:attr:`DeliveryFault.KILL_BEFORE_CLAIM`).
        seed: Seed of the draws.
        log_dir: Directory of the per-process fault logs (empty: counted in memory only).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    duplicate_share: float = Field(0.0, ge=0, le=1)
    late_share: float = Field(0.0, ge=0, le=1)
    long_handlers: bool = False
    claim_kill_share: float = Field(0.0, ge=0, le=1)
    seed: int = 0
    log_dir: str = ""

    @property
    def active(self) -> bool:
        """Whether any fault can happen (or long handlers are counted)."""
        return (
            self.duplicate_share > 0 or self.late_share > 0 or self.long_handlers or self.claim_kill_share > 0
        )

    def hits(self, fault: DeliveryFault, queue: str, message_id: str) -> bool:
        """Whether ``fault`` applies to the message ``message_id`` sent to ``queue`` (deterministic)."""
        shares = {
            DeliveryFault.DUPLICATE: self.duplicate_share,
            DeliveryFault.LATE: self.late_share,
            DeliveryFault.KILL_BEFORE_CLAIM: self.claim_kill_share,
        }
        share = shares.get(fault, 0.0)
        return share > 0 and uniform(self.seed, fault.value, f"{queue}/{message_id}", 0) < share

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DeliveryFaults | None:
        """The plan in :data:`CHAOS_ENV` (default environment: ``os.environ``), or None when unset.

        Raises:
            pydantic.ValidationError: the variable is set but is not a valid plan.
        """
        text = (os.environ if env is None else env).get(CHAOS_ENV, "")
        return cls.model_validate_json(text) if text.strip() else None


class FaultLog:
    """Counts injected faults; with a path, also appends one JSON line per fault to that file.

    Each line is ``{"fault": "duplicate", "queue": "...", "messageId": "...", "at": "<UTC>"}``, written and
    flushed in one call, so what was counted before a SIGKILL is on disk. Thread-safe.

    Args:
        path: The log file (its directory is created); None counts in memory only.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, fault: DeliveryFault, queue: str, message_id: str) -> None:
        """Count one injected fault (and append its line to the file)."""
        line = json.dumps(
            {
                "fault": fault.value,
                "queue": queue,
                "messageId": message_id,
                "at": format_utc(datetime.now(UTC)),
            }
        )
        with self._lock:
            self.counts[fault.value] += 1
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as out:
                    out.write(line + "\n")


def read_fault_logs(directory: Path) -> Counter[str]:
    """Faults counted in every ``*.jsonl`` log under ``directory``, by kind (``duplicate``, ``late``).

    A line cut short by a SIGKILL mid-write is skipped: that fault may or may not have been sent.
    """
    counts: Counter[str] = Counter()
    if not directory.is_dir():
        return counts
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                fault = json.loads(line)["fault"]
            except (ValueError, KeyError, TypeError):
                continue
            counts[str(fault)] += 1
    return counts


LatePredicate = Callable[[str, str, str], bool]
"""Whether a message (queue name, message id, body) is one that may be delivered late."""


def never_late(_queue: str, _message_id: str, _body: str) -> bool:
    """No message is delivered late."""
    return False


def agent_responses(settings: Settings) -> LatePredicate:
    """Agent responses: sent to a response queue (``AGENT_RESPONSES_QUEUE``, or a host's own
    ``agent-responses-<hostid>``) under the response's id ``{requestId}:response``, or, where that id is
    too long for a ``MessageId`` and was hashed, with a body that is an agent response. A review decision
    forwarded to the same queue is not an agent response and is never delayed."""
    prefix = settings.queues.AGENT_RESPONSES_QUEUE

    def is_agent_response(queue: str, message_id: str, body: str) -> bool:
        if not (queue == prefix or queue.startswith(f"{prefix}-")):
            return False
        if message_id.endswith(":response"):
            return True
        try:
            return parse_message(AgentResponse, body).event_id.endswith(":response")
        except InvalidMessage:
            return False

    return is_agent_response


class FaultyQueue(ForwardingQueue):
    """A :class:`MessageQueue` that duplicates or delays some of what is sent through it.

    Receiving and settling pass straight through: the faults are the sender's side of the transport. With
    :attr:`DeliveryFaults.long_handlers`, a message whose lock was renewed and that is then completed is
    counted as a :attr:`DeliveryFault.LONG_HANDLER`.
    """

    def __init__(
        self,
        inner: MessageQueue,
        faults: DeliveryFaults,
        log: FaultLog,
        *,
        late_for: LatePredicate,
        late_delay_s: float,
        after_send: AfterSend | None = None,
    ) -> None:
        super().__init__(inner)
        self._faults = faults
        self._log = log
        self._late_for = late_for
        self._late_delay_s = late_delay_s
        self._after_send = after_send
        self._renewed: set[str] = set()
        self._renewed_lock = threading.Lock()

    def renew_lock(self, message: ReceivedMessage, *, lock_s: float) -> None:
        """Renew the lock on the inner queue; remember the message when long handlers are counted."""
        self._inner.renew_lock(message, lock_s=lock_s)
        if self._faults.long_handlers:
            with self._renewed_lock:
                self._renewed.add(message.transport_id or message.message_id)

    def complete(self, message: ReceivedMessage) -> None:
        """Complete on the inner queue; count a long handler if the message's lock was renewed."""
        self._inner.complete(message)
        with self._renewed_lock:
            key = message.transport_id or message.message_id
            renewed = key in self._renewed
            self._renewed.discard(key)
        if renewed:
            self._log.record(DeliveryFault.LONG_HANDLER, self.name, message.message_id)

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Abandon on the inner queue (a renewed message abandoned is no long handler that held)."""
        self._inner.abandon(message, delay_s=delay_s)
        with self._renewed_lock:
            self._renewed.discard(message.transport_id or message.message_id)

    def send(
        self,
        body: str,
        *,
        message_id: str,
        correlation_id: str | None = None,
        delay_s: float = 0.0,
        reply_to: str | None = None,
    ) -> None:
        """Send the message; for a drawn share, delay it past the deadline and/or send it twice.

        Raises:
            Whatever the inner queue raises for the first copy; a failed second copy is only logged
            (nothing was counted, and the sender's message did go out).
        """
        late = self._late_for(self.name, message_id, body) and self._faults.hits(
            DeliveryFault.LATE, self.name, message_id
        )
        if late:
            delay_s = max(delay_s, self._late_delay_s)
        self._inner.send(
            body, message_id=message_id, correlation_id=correlation_id, delay_s=delay_s, reply_to=reply_to
        )
        if late:
            self._log.record(DeliveryFault.LATE, self.name, message_id)
        if self._faults.hits(DeliveryFault.DUPLICATE, self.name, message_id):
            self._send_duplicate(body, message_id, correlation_id, delay_s, reply_to)
        if self._after_send is not None:
            self._after_send(self.name, message_id)

    def _send_duplicate(
        self, body: str, message_id: str, correlation_id: str | None, delay_s: float, reply_to: str | None
    ) -> None:
        try:
            self._inner.send(
                body, message_id=message_id, correlation_id=correlation_id, delay_s=delay_s, reply_to=reply_to
            )
        except Exception:
            logger.warning("duplicate of %s to %s not sent", message_id, self.name, exc_info=True)
            return
        self._log.record(DeliveryFault.DUPLICATE, self.name, message_id)


class FaultyQueueFactory:
    """A :class:`QueueFactory` whose queues duplicate and delay sends by a :class:`DeliveryFaults` plan.

    Args:
        inner: The real queues (Azurite locally).
        faults: The plan.
        log: Where injected faults are counted.
        late_for: Which messages may be delivered late (default: none; a devhost passes
            :func:`agent_responses`).
        late_delay_s: Visibility delay of a late message, seconds; longer than the step's deadline.
        after_send: Called with the queue and message id after each send (a devhost's
            :meth:`~demo.chaos.claim_kills.KillPoint.after_send`), or None.
    """

    def __init__(
        self,
        inner: QueueFactory,
        faults: DeliveryFaults,
        log: FaultLog,
        *,
        late_for: LatePredicate = never_late,
        late_delay_s: float = 0.0,
        after_send: AfterSend | None = None,
    ) -> None:
        self._inner = inner
        self.faults = faults
        self.log = log
        self._late_for = late_for
        self._late_delay_s = late_delay_s
        self._after_send = after_send
        self._queues: dict[str, FaultyQueue] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FaultyQueueFactory({self._inner!r}, {self.faults!r})"

    def queue(self, name: str) -> FaultyQueue:
        """The queue ``name`` of the inner factory, wrapped (one wrapper per name)."""
        with self._lock:
            wrapped = self._queues.get(name)
            if wrapped is None:
                wrapped = FaultyQueue(
                    self._inner.queue(name),
                    self.faults,
                    self.log,
                    late_for=self._late_for,
                    late_delay_s=self._late_delay_s,
                    after_send=self._after_send,
                )
                self._queues[name] = wrapped
            return wrapped

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """Dead letters of ``name``, from the inner factory."""
        return self._inner.dead_letters(name, max_messages=max_messages)


def with_delivery_faults(
    queues: QueueFactory, settings: Settings, env: Mapping[str, str] | None = None
) -> QueueFactory:
    """A devhost process's queues: ``queues`` itself, or wrapped when :data:`CHAOS_ENV` holds an active plan.

    The process logs its faults to ``<log_dir>/<HOST_ID>-<pid>.jsonl`` (a restarted process writes a new
    file); late agent responses are delayed ``STEP_TIMEOUT_S`` + :data:`LATE_MARGIN_S` seconds; with a
    ``claim_kill_share``, a drawn new order's ``Received`` reply asks the driver to kill the process
    (:class:`~demo.chaos.claim_kills.KillPoint`, requests under ``<log_dir>/claim-kills``).

    Raises:
        pydantic.ValidationError: the plan in the environment is not valid.
    """
    faults = DeliveryFaults.from_env(env)
    if faults is None or not faults.active:
        return queues
    path = Path(faults.log_dir) / f"{settings.queues.HOST_ID}-{os.getpid()}.jsonl" if faults.log_dir else None
    logger.warning("delivery faults injected: %s", faults.model_dump_json())
    return FaultyQueueFactory(
        queues,
        faults,
        FaultLog(path),
        late_for=agent_responses(settings),
        late_delay_s=settings.steps.STEP_TIMEOUT_S + LATE_MARGIN_S,
        after_send=_kill_point(faults, settings),
    )


def _kill_point(faults: DeliveryFaults, settings: Settings) -> AfterSend | None:
    """The process's kill point between the create and the claim, or None when none is drawn."""
    if faults.claim_kill_share <= 0 or not faults.log_dir:
        return None
    point = KillPoint(
        frozenset(client.reply_queue for client in settings.clients.clients()),
        lambda queue, message_id: faults.hits(DeliveryFault.KILL_BEFORE_CLAIM, queue, message_id),
        Path(faults.log_dir) / MARKERS,
    )
    return point.after_send
