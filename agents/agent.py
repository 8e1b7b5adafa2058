"""The agent: performs one step against a remote service inside the step's deadline, then answers.

Rules (docs/design.md §1, §3.6):

- transient faults are retried with exponential backoff and jitter (tenacity), only while the deadline
  allows and while the request's ``max_calls`` last: the calls reserved for this attempt from the
  order's end-to-end retry budget in the write that started the step;
- every try carries the same idempotency key, so a retry after "effect applied, response lost" gets the
  stored result instead of a second effect;
- no new call starts after the deadline, and each call's timeout is capped by the time left;
- the answer goes to the response queue named in the request, with a stable message id
  (``{requestId}:response``), so the listener and the orchestration can recognise a duplicate;
- a redelivered request (delivery count above 1: its response send failed and it was abandoned, the
  agent died after making calls, or its lock was lost) makes no call and sends no response. The calls of
  its earlier delivery are unknown and may have spent the whole reservation, so running it again could
  spend the reservation once per delivery. The step's durable timer fires at the deadline instead, the
  supervisor recovers the order with a new attempt and a fresh reservation from what is left of the
  budget, and the idempotency key makes that attempt's call return any effect already applied. Sending
  nothing is deliberate: an earlier delivery still running (its lock expired) must not have its own
  response pre-empted by a failure. So the calls made for one order never exceed its retry budget,
  across every attempt, recovery and redelivery;
- while the service's circuit breaker is open (:mod:`orderflow.breaker`, shared by every host) no
  forward call is made: the answer is a failure of kind ``unavailable`` with the calls made so far, and
  the order waits for the breaker with the rest of its budget (docs/operations.md, "Circuit breakers");
  every call's outcome is told to the breaker, and a half-open breaker's one probe is the call of the
  attempt holding its lease;
- a service that refuses the agent's credential (401, 403: :class:`ServiceAuthRefused`) is a
  configuration fault, not a business refusal: the agent raises the ``service_auth_refused`` alert,
  makes no further call in the attempt and answers a transient failure (code ``service_auth_refused``),
  which the supervisor retries like an outage; the refusal counts against the service's breaker, so
  while it lasts the orders wait (up to ``BREAKER_MAX_WAIT_S``) instead of being compensated;
- a duplicate of a request this host has already taken (the same ``requestId`` sent twice: a sender
  that re-ran, or a transport without broker duplicate detection such as Storage queues) is treated the
  same way, from a bounded in-process log of the request ids taken (:class:`TakenRequests`). Service
  Bus duplicate detection on the MessageId stops most duplicates before they reach any host.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    wait_exponential_jitter,
)

from agents.results import check_result
from agents.services import RemoteService
from orderflow import telemetry, tracing
from orderflow.breaker import DEPENDENCY_UNAVAILABLE, CircuitBreakers
from orderflow.clock import Clock, latest
from orderflow.contracts import undo_step_name
from orderflow.errors import (
    DEADLINE_EXCEEDED,
    SERVICE_AUTH_REFUSED,
    TRANSIENT_EXHAUSTED,
    DeadlineExceeded,
    DependencyUnavailable,
    ErrorKind,
    InvalidMessage,
    PermanentError,
    ServiceAuthRefused,
    TransientError,
)
from orderflow.messages import (
    REPLY_TO_NOT_A_RESPONSE_QUEUE,
    AgentOutcome,
    AgentRequest,
    AgentResponse,
    bounded_message_id,
    parse_message,
    printable_text,
    step_event_name,
)
from orderflow.queues.base import QueueFactory
from orderflow.settings import Agents, Queues

logger = logging.getLogger(__name__)

UNDO_SUFFIX = undo_step_name("")
"""How an undo's request step ends (``{step}:undo``)."""

MIN_CALL_S = 0.05
"""A call is not started with less than this many seconds left before the deadline."""


class TakenRequests:
    """The request ids this host has taken work for, most recent ``capacity`` of them (thread-safe).

    Consumer-side duplicate detection (docs/design.md §3.7) for the agents: a request id taken once is
    never worked on again by this host. Bounded, so a duplicate arriving after ``capacity`` newer
    requests, or on another host, is not caught; the idempotency key still prevents a second effect.

    Args:
        capacity: Request ids remembered.
    """

    def __init__(self, capacity: int = 50_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def take(self, request_id: str) -> bool:
        """Record ``request_id``; True if it was not taken before (work on it), False for a duplicate."""
        with self._lock:
            if request_id in self._ids:
                return False
            self._ids[request_id] = None
            while len(self._ids) > self._capacity:
                self._ids.popitem(last=False)
            return True


@dataclass(frozen=True)
class AgentResult:
    """What handling one request produced: the response sent (None if none was sent) and calls made."""

    response: AgentResponse | None
    calls: int


def handle_request(
    body: str | bytes,
    *,
    delivery_count: int = 1,
    service: RemoteService,
    queues: QueueFactory,
    clock: Clock,
    agents: Agents,
    queue_names: Queues,
    sleep: Callable[[float], None] = time.sleep,
    taken: TakenRequests | None = None,
    breakers: CircuitBreakers | None = None,
    transport_traceparent: str | None = None,
) -> AgentResult:
    """Perform the step a request asks for and send the response, under an ``orderflow.agent`` span
    (a child of the span that sent the request, see :func:`orderflow.tracing.span`).

    Args:
        body: The raw :class:`AgentRequest` body.
        delivery_count: Which delivery of the request message this is: 1 on the first, incremented on
            every redelivery (:attr:`orderflow.queues.base.ReceivedMessage.delivery_count`).
        service: The remote service this agent wraps.
        queues: Where the response is sent.
        clock: Time source (the store's time): the deadline is compared with its latest side.
        agents: Backoff and call-timeout settings (``AGENT_*``).
        queue_names: The queue names a ``replyTo`` must be one of (the response queues) and the request
            queue of ``service``.
        sleep: Sleeps between retries (tests pass a fake).
        taken: This host's log of the request ids it has taken; a request id already in it is a
            duplicate and handled like a redelivery. None: no such check.
        breakers: The dependencies' circuit breakers (:mod:`orderflow.breaker`), keyed by the service's
            name: while the service's is open no forward call is made and the answer is a failure of
            kind ``unavailable`` (``dependency_unavailable``) with the calls made so far. None: none.
        transport_traceparent: The trace context the transport handed over with the message (an Azure
            trigger's), preferred over the request's own ``traceparent``.

    Returns:
        The response sent and the number of remote calls made. ``AgentResult(None, 0)``, no call and
        no response, for a redelivered request (``delivery_count`` > 1: the step's timer and the
        supervisor take over, see the module docstring), for a duplicate of a request already taken, and
        for a request whose deadline had passed on arrival (the orchestration's timer has already won).

    Raises:
        InvalidMessage: the body is not an agent request, or its ``replyTo`` is not one of the
            deployment's response queues (``ReplyToNotAResponseQueue``): dead-letter it, nothing called.
        TransientError: the response could not be sent (abandon the message: its redelivery makes no
            call, and the step's timer takes over).
    """
    request = parse_message(AgentRequest, body)
    if not queue_names.is_response_queue(request.reply_to):
        # Before anything is taken or called: a request that answers elsewhere is not the app's.
        raise InvalidMessage(
            REPLY_TO_NOT_A_RESPONSE_QUEUE,
            f"replyTo {request.reply_to[:64]!r} is not one of the deployment's agent response queues",
        )
    attributes = {
        **tracing.order_attributes(request.order_id, request.instance_id, step=request.step),
        **tracing.messaging_attributes(
            tracing.messaging_system(queues),
            queue_names.agent_queue(service.name),
            message_id=bounded_message_id(request.request_id),
        ),
    }
    with tracing.span(
        tracing.AGENT,
        kind=tracing.CONSUMER,
        parent=request.traceparent,
        transport_parent=transport_traceparent,
        attributes=attributes,
    ) as span:
        result = _perform(
            request,
            delivery_count=delivery_count,
            service=service,
            queues=queues,
            clock=clock,
            agents=agents,
            sleep=sleep,
            taken=taken,
            breakers=breakers,
        )
        tracing.mark_outcome(span, "skipped" if result.response is None else result.response.outcome.value)
        return result


def _perform(
    request: AgentRequest,
    *,
    delivery_count: int,
    service: RemoteService,
    queues: QueueFactory,
    clock: Clock,
    agents: Agents,
    sleep: Callable[[float], None],
    taken: TakenRequests | None,
    breakers: CircuitBreakers | None,
) -> AgentResult:
    """:func:`handle_request` once the request is read and its ``replyTo`` checked."""
    fields = {"order_id": request.order_id, "instance_id": request.instance_id, "step": request.step}
    if _skipped(request, fields, delivery_count=delivery_count, clock=clock, taken=taken):
        return AgentResult(None, 0)
    result, error, calls = _call_service(
        request, service=service, clock=clock, agents=agents, sleep=sleep, breakers=breakers
    )
    response = _response(request, result, error, calls, completed_at=clock.now())
    queues.queue(request.reply_to).send(
        response.to_json(), message_id=bounded_message_id(response.event_id), correlation_id=request.order_id
    )
    telemetry.event(
        "agent.done",
        outcome=response.outcome.value,
        error_kind=response.error_kind,
        error_code=response.error_code,
        calls=calls,
        **fields,
    )
    return AgentResult(response, calls)


_Error = tuple[ErrorKind, str | None, str]
"""A failed step as the response reports it: error kind, code (None: none), message."""


def _skipped(
    request: AgentRequest,
    fields: dict[str, str],
    *,
    delivery_count: int,
    clock: Clock,
    taken: TakenRequests | None,
) -> bool:
    """True (and the reason logged) for a request that gets no call and no response: a redelivery, a
    duplicate of a request already taken, or one whose deadline had passed on arrival."""
    if delivery_count > 1:
        # The first delivery may have spent the whole reservation: never spend it twice.
        telemetry.event("agent.redelivery_skipped", **fields, delivery_count=delivery_count)
        return True
    if taken is not None and not taken.take(request.request_id):
        # The same request sent twice: its first copy has (or had) the reservation; never spend it twice.
        telemetry.event("agent.duplicate_skipped", **fields)
        return True
    if latest(clock) >= request.deadline:  # may have passed by the store's time: start nothing
        telemetry.event("agent.expired_on_arrival", **fields)
        return True
    return False


def _call_once(
    request: AgentRequest, service: RemoteService, timeout_s: float, breakers: CircuitBreakers | None
) -> dict[str, str]:
    """One call, its outcome told to the service's breaker: a transient failure counts against the
    dependency, any answer (a success or a business refusal) for it."""
    try:
        result = service.call(
            request.operation,
            request.payload,
            order_id=request.order_id,
            idempotency_key=request.idempotency_key,
            timeout_s=timeout_s,
            instance_id=request.instance_id,
        )
    except ServiceAuthRefused as exc:
        # A credential to fix, not an order to undo: tell the operator, and count it against the
        # dependency so that, while it lasts, its breaker holds the orders instead of their budgets.
        telemetry.alert(
            SERVICE_AUTH_REFUSED,
            dependency=service.name,
            code=exc.code,
            status=exc.status,
            order_id=request.order_id,
            instance_id=request.instance_id,
            step=request.step,
        )
        if breakers is not None:
            breakers.failed(service.name, holder=request.instance_id)
        raise
    except TransientError:
        if breakers is not None:
            breakers.failed(service.name, holder=request.instance_id)
        raise
    except PermanentError:
        if breakers is not None:
            breakers.succeeded(service.name)
        raise
    if breakers is not None:
        breakers.succeeded(service.name)
    return result


def _call_service(
    request: AgentRequest,
    *,
    service: RemoteService,
    clock: Clock,
    agents: Agents,
    sleep: Callable[[float], None],
    breakers: CircuitBreakers | None = None,
) -> tuple[dict[str, str] | None, _Error | None, int]:
    """Call the service, retrying transient faults within the deadline and ``request.max_calls``, and
    only while the service's circuit breaker lets a forward call through (undos are not held: they
    spend no budget, and an order waiting on its compensation cannot be given back).

    Returns:
        The result (None on failure), the error (None on success) and the number of calls made.
    """
    calls = 0
    held = breakers if not request.step.endswith(UNDO_SUFFIX) else None

    def attempt() -> dict[str, str]:
        nonlocal calls
        left = (request.deadline - latest(clock)).total_seconds()
        if left < MIN_CALL_S:
            raise DeadlineExceeded(f"deadline {request.deadline.isoformat()} passed before call {calls + 1}")
        retry_at = None if held is None else held.admit(service.name, holder=request.instance_id)
        if retry_at is not None:
            raise DependencyUnavailable(service.name, retry_at)
        calls += 1
        called_at = latest(clock)
        result = _call_once(request, service, min(agents.AGENT_CALL_TIMEOUT_S, left), breakers)
        check_result(request.payload, result, called_at=called_at)
        return result

    def stop(state: RetryCallState) -> bool:
        # Stop when the budget is spent or the next backoff would end past the deadline.
        if calls >= request.max_calls:
            return True
        upcoming = state.upcoming_sleep or 0.0
        return (request.deadline - latest(clock)).total_seconds() - upcoming < MIN_CALL_S

    result: dict[str, str] | None = None
    error: _Error | None = None
    if request.max_calls <= 0:
        error = (ErrorKind.BUDGET, "retry_budget_exhausted", "the order's retry budget is spent")
    else:
        retrying = Retrying(
            # The same credential would be refused again: one call per attempt; the supervisor retries.
            retry=retry_if_exception_type(TransientError) & retry_if_not_exception_type(ServiceAuthRefused),
            stop=stop,
            wait=wait_exponential_jitter(
                multiplier=agents.AGENT_BACKOFF_INITIAL_S,
                max=agents.AGENT_BACKOFF_MAX_S,
                jitter=agents.AGENT_BACKOFF_INITIAL_S,
            ),
            sleep=sleep,
            reraise=True,
        )
        try:
            result = retrying(attempt)
        except PermanentError as exc:
            error = (ErrorKind.PERMANENT, exc.code, exc.detail)
        except DeadlineExceeded as exc:
            error = (ErrorKind.TIMEOUT, DEADLINE_EXCEEDED, exc.detail)
        except ServiceAuthRefused as exc:
            error = (ErrorKind.TRANSIENT, SERVICE_AUTH_REFUSED, exc.detail)
        except DependencyUnavailable as exc:
            # No call (or no further call) while the breaker is open: the order waits, its budget kept.
            error = (ErrorKind.UNAVAILABLE, DEPENDENCY_UNAVAILABLE, exc.detail)
        except TransientError as exc:
            kind = ErrorKind.BUDGET if calls >= request.max_calls else ErrorKind.TRANSIENT
            error = (kind, TRANSIENT_EXHAUSTED, exc.detail)
    return result, error, calls


def _response(
    request: AgentRequest,
    result: dict[str, str] | None,
    error: _Error | None,
    calls: int,
    *,
    completed_at: datetime,
) -> AgentResponse:
    """The response to ``request``, with its stable event id (``{requestId}:response``)."""
    return AgentResponse(
        request_id=request.request_id,
        event_id=f"{request.request_id}:response",
        event_name=step_event_name(request.step),
        order_id=request.order_id,
        instance_id=request.instance_id,
        step=request.step,
        outcome=AgentOutcome.SUCCEEDED if error is None else AgentOutcome.FAILED,
        error_kind=None if error is None else error[0].value,
        error_code=None if error is None or error[1] is None else printable_text(error[1], limit=100),
        error_message=None if error is None else printable_text(error[2], limit=500),
        result=result or {},
        calls=calls,
        completed_at=completed_at,
        traceparent=tracing.current_traceparent(),
    )
