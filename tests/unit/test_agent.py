"""The agent: retries inside the deadline and the call budget, one idempotency key, one response.

Time is a :class:`FakeClock` moved only by the fake service (call duration) and the fake ``sleep``
(backoff), so every deadline decision is deterministic and nothing really sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from azure.core.credentials import AccessTokenInfo
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agents.agent import MIN_CALL_S, AgentResult, TakenRequests, handle_request
from agents.services import INSTANCE_HEADER, HttpRemoteService, classify_http
from demo.services.bindings import DEMO_OPERATIONS, demo_bindings
from orderflow import telemetry
from orderflow.bindings import CachedTokens, NoAuth
from orderflow.clock import FakeClock
from orderflow.consumer import Settlement, redelivery_delay_s, settle
from orderflow.errors import InvalidMessage, PermanentError, ServiceAuthRefused, TransientError
from orderflow.messages import AgentOutcome, AgentRequest, AgentResponse, parse_message
from orderflow.queues.base import DeadLetter, MessageQueue, ReceivedMessage
from orderflow.queues.memory import InMemoryQueue, InMemoryQueueFactory
from orderflow.settings import Settings

pytestmark = pytest.mark.unit

START = datetime(2026, 1, 1, tzinfo=UTC)
REPLY_QUEUE = "agent-responses-local"
PAYLOAD: dict[str, Any] = {"items": [{"sku": "10", "quantity": 5}]}

Outcome = dict[str, str] | Exception


@dataclass(frozen=True)
class Call:
    """One call the fake service received, with the fake time it started at."""

    operation: str
    payload: dict[str, Any]
    order_id: str
    idempotency_key: str
    timeout_s: float
    at: datetime


@dataclass
class ScriptedService:
    """A :class:`RemoteService` that plays ``outcomes`` in order (the last one repeats forever).

    Each call moves the clock by ``duration_s``, like a remote call taking that long.
    """

    clock: FakeClock
    outcomes: list[Outcome]
    duration_s: float = 0.0
    name: str = "inventory"
    calls: list[Call] = field(default_factory=list)
    instances: list[str | None] = field(default_factory=list)

    def call(
        self,
        operation: str,
        payload: Mapping[str, Any],
        *,
        order_id: str,
        idempotency_key: str,
        timeout_s: float,
        instance_id: str | None = None,
    ) -> dict[str, str]:
        self.instances.append(instance_id)
        self.calls.append(
            Call(operation, dict(payload), order_id, idempotency_key, timeout_s, self.clock.now())
        )
        self.clock.advance(self.duration_s)
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


@dataclass
class FakeSleep:
    """Records each backoff and moves the clock by it (plus ``overshoot_s``, a late wake-up)."""

    clock: FakeClock
    overshoot_s: float = 0.0
    slept: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds + self.overshoot_s)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def queues(clock: FakeClock) -> InMemoryQueueFactory:
    def monotonic() -> float:
        return (clock.now() - START).total_seconds()

    return InMemoryQueueFactory(clock=monotonic)


@pytest.fixture
def settings() -> Settings:
    return Settings.load({}, AGENT_CALL_TIMEOUT_S=5.0, AGENT_BACKOFF_INITIAL_S=0.2, AGENT_BACKOFF_MAX_S=2.0)


def request_body(*, deadline_s: float = 8.0, max_calls: int = 10) -> str:
    return AgentRequest(
        request_id="o-1:1:reserve",
        order_id="o-1",
        instance_id="o-1:1",
        step="reserve",
        operation="reserve",
        idempotency_key="o-1:reserve",
        deadline=START + timedelta(seconds=deadline_s),
        reply_to=REPLY_QUEUE,
        payload=PAYLOAD,
        max_calls=max_calls,
    ).to_json()


def run(
    body: str,
    service: ScriptedService,
    queues: InMemoryQueueFactory,
    clock: FakeClock,
    settings: Settings,
    sleep: Callable[[float], None],
) -> AgentResult:
    return handle_request(
        body,
        service=service,
        queues=queues,
        clock=clock,
        agents=settings.agents,
        queue_names=settings.queues,
        sleep=sleep,
    )


def sent_responses(queues: InMemoryQueueFactory) -> list[AgentResponse]:
    return [parse_message(AgentResponse, m.body) for m in queues.queue(REPLY_QUEUE).peek_all()]


def the_response(result: AgentResult) -> AgentResponse:
    assert result.response is not None
    return result.response


def test_success_on_first_call_sends_one_succeeded_response(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(clock, [{"reservationId": "r-42"}])
    sleep = FakeSleep(clock)

    result = run(request_body(), service, queues, clock, settings, sleep)

    assert result.calls == 1
    assert service.calls == [Call("reserve", PAYLOAD, "o-1", "o-1:reserve", 5.0, START)]
    assert sleep.slept == []
    response = the_response(result)
    assert response.outcome is AgentOutcome.SUCCEEDED
    assert response.result == {"reservationId": "r-42"}
    assert (response.error_kind, response.error_code, response.error_message) == (None, None, None)
    assert response.event_id == "o-1:1:reserve:response"
    assert response.event_name == "reserve:response"
    assert (response.instance_id, response.step, response.calls) == ("o-1:1", "reserve", 1)
    messages = queues.queue(REPLY_QUEUE).peek_all()
    assert [(m.message_id, m.correlation_id) for m in messages] == [("o-1:1:reserve:response", "o-1")]
    assert parse_message(AgentResponse, messages[0].body) == response


def test_transient_twice_then_success_retries_with_the_same_key(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(
        clock, [TransientError("503"), TransientError("503"), {"reservationId": "r-1"}], duration_s=0.1
    )
    sleep = FakeSleep(clock)

    result = run(request_body(), service, queues, clock, settings, sleep)

    assert result.calls == 3
    assert [c.idempotency_key for c in service.calls] == ["o-1:reserve"] * 3
    assert the_response(result).outcome is AgentOutcome.SUCCEEDED
    assert the_response(result).result == {"reservationId": "r-1"}
    assert the_response(result).calls == 3
    # Exponential backoff from AGENT_BACKOFF_INITIAL_S, plus tenacity's jitter (at most 1 s).
    assert len(sleep.slept) == 2
    for n, slept in enumerate(sleep.slept):
        floor = settings.agents.AGENT_BACKOFF_INITIAL_S * 2**n
        assert floor <= slept <= min(floor + 1.0, settings.agents.AGENT_BACKOFF_MAX_S)
    # Each retry starts after the previous call's duration plus the backoff: the sleep really waited.
    gaps = [(b.at - a.at).total_seconds() for a, b in zip(service.calls, service.calls[1:], strict=False)]
    assert gaps == pytest.approx([0.1 + s for s in sleep.slept], abs=1e-5)
    assert len(sent_responses(queues)) == 1


@pytest.mark.parametrize(
    ("code", "message"), [("out_of_stock", "sku 10 is out of stock"), ("card_declined", "declined")]
)
def test_permanent_error_is_not_retried(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings, code: str, message: str
) -> None:
    service = ScriptedService(clock, [PermanentError(code, message), {"reservationId": "never"}])
    sleep = FakeSleep(clock)

    result = run(request_body(), service, queues, clock, settings, sleep)

    assert result.calls == 1
    assert sleep.slept == []
    response = the_response(result)
    assert response.outcome is AgentOutcome.FAILED
    assert (response.error_kind, response.error_code) == ("permanent", code)
    assert response.error_message is not None
    assert message in response.error_message
    assert response.result == {}
    assert sent_responses(queues) == [response]


def test_a_remote_error_text_with_control_and_format_characters_still_makes_a_response(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    # The remote service's words are relayed, not trusted: a newline or a bidi override in them must
    # not make the response invalid (it would be lost and the step would time out).
    service = ScriptedService(
        clock, [PermanentError("out\nof_stock", "line one\nline two \u202egnp.exe\x00")]
    )

    result = run(request_body(), service, queues, clock, settings, FakeSleep(clock))

    response = the_response(result)
    assert (response.error_kind, response.error_code) == ("permanent", "out of_stock")
    assert response.error_message == "out of_stock: line one line two  gnp.exe "
    assert sent_responses(queues) == [response]


@pytest.mark.parametrize("call_duration_s", [0.0, 0.3, 1.1])
def test_transient_until_the_deadline_starts_no_call_after_it(
    clock: FakeClock,
    queues: InMemoryQueueFactory,
    settings: Settings,
    call_duration_s: float,
) -> None:
    deadline = START + timedelta(seconds=3.0)
    service = ScriptedService(clock, [TransientError("still down")], duration_s=call_duration_s)
    sleep = FakeSleep(clock)

    result = run(request_body(deadline_s=3.0, max_calls=100), service, queues, clock, settings, sleep)

    assert len(service.calls) >= 2, "a transient fault is retried while the deadline allows"
    assert result.calls == len(service.calls)
    for call in service.calls:
        left = (deadline - call.at).total_seconds()
        assert call.at < deadline
        assert left >= MIN_CALL_S
        assert call.timeout_s <= left
        assert call.timeout_s <= settings.agents.AGENT_CALL_TIMEOUT_S
    # The first call has 3 s left, less than AGENT_CALL_TIMEOUT_S: its timeout is the time left.
    assert service.calls[0].timeout_s == pytest.approx(3.0)
    # No backoff was allowed to run past the deadline either.
    assert len(sleep.slept) == len(service.calls) - 1
    response = the_response(result)
    assert response.outcome is AgentOutcome.FAILED
    assert (response.error_kind, response.error_code) == ("transient", "transient_exhausted")
    assert response.calls == len(service.calls)
    assert sent_responses(queues) == [response]


def test_a_late_wake_up_past_the_deadline_starts_no_call(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(clock, [TransientError("503")])
    sleep = FakeSleep(clock, overshoot_s=5.0)  # the process was paused during the backoff

    result = run(request_body(deadline_s=3.0), service, queues, clock, settings, sleep)

    assert [c.at for c in service.calls] == [START]
    assert result.calls == 1
    response = the_response(result)
    assert response.outcome is AgentOutcome.FAILED
    assert (response.error_kind, response.error_code) == ("timeout", "deadline_exceeded")
    assert sent_responses(queues) == [response]


def test_max_calls_bounds_the_calls_and_reports_budget_exhausted(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(clock, [TransientError("503")], duration_s=0.1)
    sleep = FakeSleep(clock)

    result = run(request_body(deadline_s=600.0, max_calls=3), service, queues, clock, settings, sleep)

    assert len(service.calls) == 3
    assert result.calls == 3
    assert len(sleep.slept) == 2
    response = the_response(result)
    assert response.outcome is AgentOutcome.FAILED
    assert (response.error_kind, response.error_code) == ("budget_exhausted", "transient_exhausted")
    assert response.calls == 3


def test_max_calls_zero_makes_no_call_and_answers_budget_exhausted(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(clock, [{"reservationId": "never"}])

    result = run(request_body(max_calls=0), service, queues, clock, settings, FakeSleep(clock))

    assert service.calls == []
    assert result.calls == 0
    response = the_response(result)
    assert response.outcome is AgentOutcome.FAILED
    assert (response.error_kind, response.error_code) == ("budget_exhausted", "retry_budget_exhausted")
    assert response.calls == 0
    assert sent_responses(queues) == [response]


@pytest.mark.parametrize("late_by_s", [0.0, 0.001, 30.0])
def test_request_expired_on_arrival_makes_no_call_and_sends_nothing(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings, late_by_s: float
) -> None:
    service = ScriptedService(clock, [{"reservationId": "never"}])
    clock.advance(8.0 + late_by_s)

    result = run(request_body(deadline_s=8.0), service, queues, clock, settings, FakeSleep(clock))

    assert result == AgentResult(None, 0)
    assert service.calls == []
    assert queues.queue(REPLY_QUEUE).approximate_count() == 0


def test_too_little_time_left_on_arrival_answers_timeout_without_a_call(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(clock, [{"reservationId": "never"}])
    clock.advance(8.0 - MIN_CALL_S / 2)

    result = run(request_body(deadline_s=8.0), service, queues, clock, settings, FakeSleep(clock))

    assert service.calls == []
    response = the_response(result)
    assert (response.outcome, response.error_kind, response.error_code) == (
        AgentOutcome.FAILED,
        "timeout",
        "deadline_exceeded",
    )
    assert response.calls == 0


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "InvalidJson"),
        (json.dumps({"requestId": "x"}), "MissingField"),
        (request_body().replace('"maxCalls":10', '"maxCalls":-1'), "InvalidField"),
    ],
)
def test_invalid_body_raises_invalid_message_and_does_nothing(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings, body: str, reason: str
) -> None:
    service = ScriptedService(clock, [{"reservationId": "never"}])

    with pytest.raises(InvalidMessage) as raised:
        run(body, service, queues, clock, settings, FakeSleep(clock))

    assert raised.value.reason == reason
    assert service.calls == []
    assert queues.queue(REPLY_QUEUE).approximate_count() == 0


# --- redelivery: a redelivered request never spends the reservation again ----------------------------


@dataclass
class FlakyReplies:
    """Queues whose reply queue fails the first ``failing_sends`` sends, as an unreachable broker does.

    Every other queue, and every later send, is the in-memory queue itself.
    """

    queues: InMemoryQueueFactory
    failing_sends: int = 1
    failed: int = 0

    def queue(self, name: str) -> MessageQueue:
        inner = self.queues.queue(name)
        return FlakyQueue(inner, self) if name == REPLY_QUEUE else inner

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        return self.queues.dead_letters(name, max_messages=max_messages)


class FlakyQueue:
    """An in-memory queue whose sends fail while its :class:`FlakyReplies` has failures left."""

    def __init__(self, inner: InMemoryQueue, owner: FlakyReplies) -> None:
        self.name = inner.name
        self._inner = inner
        self._owner = owner

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    def send(self, body: str, **options: Any) -> None:
        if self._owner.failed < self._owner.failing_sends:
            self._owner.failed += 1
            raise TransientError("reply queue unreachable")
        self._inner.send(body, **options)


def test_a_duplicate_of_a_taken_request_makes_no_call_even_as_a_first_delivery(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    # A Storage queue has no duplicate detection: the same request sent twice arrives twice, each copy
    # a first delivery. Only the first copy may spend the reservation.
    service = ScriptedService(
        clock, [TransientError("503"), TransientError("503"), TransientError("503")] * 2
    )
    taken = TakenRequests()

    first, second = (
        handle_request(
            request_body(max_calls=3),
            service=service,
            queues=queues,
            clock=clock,
            agents=settings.agents,
            queue_names=settings.queues,
            sleep=FakeSleep(clock),
            taken=taken,
        )
        for _ in range(2)
    )

    assert first.calls == 3
    assert second == AgentResult(None, 0)
    assert len(service.calls) == 3  # never more than max_calls for one request
    assert len(sent_responses(queues)) == 1


def test_taken_requests_forget_the_oldest_beyond_capacity() -> None:
    taken = TakenRequests(capacity=2)
    # "a" is forgotten when "c" comes in, so it is taken again; then "b" is the oldest and goes.
    assert [taken.take(r) for r in ("a", "b", "a", "c", "a", "b")] == [True, True, False, True, True, True]


@pytest.mark.parametrize("delivery_count", [2, 3, 10])
def test_a_redelivered_request_makes_no_call_and_sends_nothing(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings, delivery_count: int
) -> None:
    service = ScriptedService(clock, [{"reservationId": "never"}])
    with telemetry.recording() as counted:
        result = handle_request(
            request_body(max_calls=4),
            delivery_count=delivery_count,
            service=service,
            queues=queues,
            clock=clock,
            agents=settings.agents,
            queue_names=settings.queues,
            sleep=FakeSleep(clock),
        )

    assert result == AgentResult(None, 0)
    assert service.calls == []
    assert queues.queue(REPLY_QUEUE).approximate_count() == 0
    assert counted["agent.redelivery_skipped"] == 1


def test_a_first_delivery_given_explicitly_is_handled_as_before(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(clock, [{"reservationId": "r-1"}])

    result = handle_request(
        request_body(),
        delivery_count=1,
        service=service,
        queues=queues,
        clock=clock,
        agents=settings.agents,
        queue_names=settings.queues,
        sleep=FakeSleep(clock),
    )

    assert result.calls == 1
    assert sent_responses(queues) == [the_response(result)]
    assert the_response(result).result == {"reservationId": "r-1"}


def test_a_malformed_redelivered_body_is_still_dead_lettered_with_its_reason(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(clock, [{"reservationId": "never"}])

    with pytest.raises(InvalidMessage) as raised:
        handle_request(
            "{not json",
            delivery_count=2,
            service=service,
            queues=queues,
            clock=clock,
            agents=settings.agents,
            queue_names=settings.queues,
            sleep=FakeSleep(clock),
        )

    assert raised.value.reason == "InvalidJson"
    assert service.calls == []


def test_a_failed_response_send_raises_transient_after_the_calls(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    service = ScriptedService(clock, [TransientError("503"), {"reservationId": "r-1"}], duration_s=0.1)
    replies = FlakyReplies(queues)

    with pytest.raises(TransientError) as raised:
        handle_request(
            request_body(max_calls=3),
            service=service,
            queues=replies,
            clock=clock,
            agents=settings.agents,
            queue_names=settings.queues,
            sleep=FakeSleep(clock),
        )

    assert "reply queue unreachable" in raised.value.detail
    assert len(service.calls) == 2
    assert replies.failed == 1
    assert queues.queue(REPLY_QUEUE).approximate_count() == 0


def test_an_abandoned_request_is_redelivered_and_makes_no_further_call(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    # Through the in-memory request queue and the one settlement policy, as the devhost runs an agent.
    requests = queues.queue("agent-inventory")
    requests.send(request_body(max_calls=3), message_id="o-1:1:reserve", correlation_id="o-1")
    service = ScriptedService(
        clock, [TransientError("503"), TransientError("503"), {"reservationId": "r-1"}], duration_s=0.1
    )
    replies = FlakyReplies(queues)
    results: list[AgentResult] = []

    def handler(message: ReceivedMessage) -> None:
        results.append(
            handle_request(
                message.body,
                delivery_count=message.delivery_count,
                service=service,
                queues=replies,
                clock=clock,
                agents=settings.agents,
                queue_names=settings.queues,
                sleep=FakeSleep(clock),
            )
        )

    [first] = requests.receive(max_messages=1, lock_s=30)
    first_settlement = settle(requests, first, handler, max_delivery_count=10)
    calls_of_the_first_delivery = len(service.calls)
    # A little past the redelivery delay: the clocks' float seconds must not land on the boundary.
    clock.advance(redelivery_delay_s(first.delivery_count) + 0.01)
    [second] = requests.receive(max_messages=1, lock_s=30)
    second_settlement = settle(requests, second, handler, max_delivery_count=10)

    assert (first.delivery_count, first_settlement) == (1, Settlement.ABANDONED)
    assert calls_of_the_first_delivery == 3
    assert (second.delivery_count, second_settlement) == (2, Settlement.COMPLETED)
    assert results == [AgentResult(None, 0)]
    assert len(service.calls) == calls_of_the_first_delivery == 3  # == max_calls, never more
    assert queues.queue(REPLY_QUEUE).approximate_count() == 0
    assert requests.approximate_count() == 0


OUTCOMES: dict[str, Callable[[], Outcome]] = {
    "ok": lambda: {"reservationId": "r-1"},
    "transient": lambda: TransientError("503"),
    "permanent": lambda: PermanentError("out_of_stock", "sku 10"),
}


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    max_calls=st.integers(0, 6),
    outcomes=st.lists(st.sampled_from(sorted(OUTCOMES)), min_size=1, max_size=8),
    duration_s=st.sampled_from([0.0, 0.1, 1.5]),
    first_send_fails=st.booleans(),
    redeliveries=st.integers(0, 6),
)
def test_no_sequence_of_deliveries_of_one_request_exceeds_its_max_calls(
    max_calls: int, outcomes: list[str], duration_s: float, first_send_fails: bool, redeliveries: int
) -> None:
    clock = FakeClock(START)

    def monotonic() -> float:
        return (clock.now() - START).total_seconds()

    queues = InMemoryQueueFactory(clock=monotonic)
    service = ScriptedService(clock, [OUTCOMES[name]() for name in outcomes], duration_s=duration_s)
    replies = FlakyReplies(queues, failing_sends=1 if first_send_fails else 0)
    settings = Settings.load(
        {}, AGENT_CALL_TIMEOUT_S=5.0, AGENT_BACKOFF_INITIAL_S=0.2, AGENT_BACKOFF_MAX_S=2.0
    )
    body = request_body(deadline_s=8.0, max_calls=max_calls)
    raised: list[int] = []
    results: dict[int, AgentResult] = {}

    for delivery_count in range(1, redeliveries + 2):
        try:
            results[delivery_count] = handle_request(
                body,
                delivery_count=delivery_count,
                service=service,
                queues=replies,
                clock=clock,
                agents=settings.agents,
                queue_names=settings.queues,
                sleep=FakeSleep(clock),
            )
        except TransientError:
            raised.append(delivery_count)

    assert len(service.calls) <= max_calls
    assert raised == ([1] if first_send_fails else [])
    assert all(results[n] == AgentResult(None, 0) for n in range(2, redeliveries + 2))
    responses = sent_responses(queues)
    assert len(responses) == (0 if first_send_fails else 1)
    if not first_send_fails:
        assert results[1].calls == responses[0].calls == len(service.calls)


# --- classify_http --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, {}),
        (500, {"error": "internal"}),
        (502, {}),
        (507, {}),
        (599, {"error": "odd"}),
        (425, {}),
        (429, {"error": "throttled"}),
        (408, {}),
        (409, {"error": "request_in_progress", "permanent": False}),
        (400, {"error": "flaky", "permanent": False}),
    ],
)
def test_classify_http_transient(status: int, body: dict[str, Any]) -> None:
    error = classify_http(status, body)

    assert isinstance(error, TransientError)
    assert f"HTTP {status}" in str(error)


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (402, {"error": "card_declined", "message": "insufficient funds"}, "card_declined"),
        (409, {"error": "out_of_stock", "message": "sku 10"}, "out_of_stock"),
        (422, {"error": "invalid_carrier", "detail": "no such carrier"}, "invalid_carrier"),
        (422, {}, "http_422"),
        (404, {}, "http_404"),
        (503, {"error": "closed_for_good", "permanent": True}, "closed_for_good"),
    ],
)
def test_classify_http_permanent(status: int, body: dict[str, Any], code: str) -> None:
    error = classify_http(status, body)

    assert isinstance(error, PermanentError)
    assert error.code == code
    assert f"HTTP {status}" in error.detail


def test_classify_http_carries_the_remote_message() -> None:
    error = classify_http(402, {"error": "card_declined", "message": "insufficient funds"})

    assert isinstance(error, PermanentError)
    assert error.detail == "card_declined: insufficient funds (HTTP 402)"


# --- HttpRemoteService over httpx.MockTransport --------------------------------------------------

Handler = Callable[[httpx.Request], httpx.Response]


def http_service(name: str, handler: Handler, *, tokens: CachedTokens | None = None) -> HttpRemoteService:
    """``name`` bound as the demo binds it, at ``http://demo.test``: with ``tokens`` as the demo does
    (entra), without them on a binding whose auth is none."""
    client = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://demo.test")
    binding = demo_bindings("http://demo.test").services[name]
    if tokens is None:
        binding = binding.model_copy(update={"auth": NoAuth(mode="none", reason="a mock transport")})
    return HttpRemoteService(name, binding, tokens=tokens, client=client)


def call(service: HttpRemoteService, operation: str = "reserve", timeout_s: float = 2.5) -> dict[str, str]:
    return service.call(
        operation, PAYLOAD, order_id="o-1", idempotency_key="o-1:reserve", timeout_s=timeout_s
    )


def test_http_service_sends_key_and_json_body_and_extracts_result_fields() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"reservationId": "r-7", "status": "held", "internal": 1})

    result = call(http_service("inventory", handler))

    assert result == {"reservationId": "r-7"}
    [request] = seen
    assert request.method == "POST"
    assert request.url == "http://demo.test/inventory/reservations"
    assert request.headers["Idempotency-Key"] == "o-1:reserve"
    assert INSTANCE_HEADER not in request.headers  # only sent when the caller names an attempt
    assert json.loads(request.content) == {"orderId": "o-1", **PAYLOAD}
    assert request.extensions["timeout"] == {"connect": 2.5, "read": 2.5, "write": 2.5, "pool": 2.5}


def test_http_service_stringifies_result_fields_of_each_route() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == DEMO_OPERATIONS["payment"]["charge"].path
        return httpx.Response(200, json={"chargeId": "ch-1", "amount": 1000.5, "currency": "USD"})

    result = call(http_service("payment", handler), "charge")

    assert result == {"chargeId": "ch-1", "amount": "1000.5", "currency": "USD"}


def test_http_service_same_key_on_every_try_through_the_agent(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    answers = [
        httpx.Response(503, json={"error": "unavailable"}),
        httpx.Response(201, json={"reservationId": "r"}),
    ]
    keys: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append((request.headers["Idempotency-Key"], request.headers[INSTANCE_HEADER]))
        return answers.pop(0)

    result = handle_request(
        request_body(),
        service=http_service("inventory", handler),
        queues=queues,
        clock=clock,
        agents=settings.agents,
        queue_names=settings.queues,
        sleep=FakeSleep(clock),
    )

    # The same key on every try, each tagged with the attempt it was made for.
    request = AgentRequest.model_validate_json(request_body())
    assert keys == [("o-1:reserve", request.instance_id)] * 2
    assert the_response(result).result == {"reservationId": "r"}
    assert the_response(result).calls == 2


@pytest.mark.parametrize(
    "failure",
    [
        lambda request: httpx.ReadTimeout("read timed out", request=request),
        lambda request: httpx.ConnectTimeout("connect timed out", request=request),
        lambda request: httpx.ConnectError("connection refused", request=request),
        lambda request: httpx.RemoteProtocolError("peer closed connection", request=request),
    ],
    ids=["read-timeout", "connect-timeout", "connect-error", "protocol-error"],
)
def test_http_service_transport_failures_are_transient(
    failure: Callable[[httpx.Request], Exception],
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise failure(request)

    with pytest.raises(TransientError) as raised:
        call(http_service("inventory", handler))

    assert "inventory" in raised.value.detail
    assert isinstance(raised.value.__cause__, httpx.TransportError)


def test_http_service_non_json_500_is_transient() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="<html>Internal Server Error</html>")

    with pytest.raises(TransientError) as raised:
        call(http_service("inventory", handler))

    assert raised.value.detail == "http_500 (HTTP 500)"


def test_http_service_business_refusal_is_permanent() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"error": "out_of_stock", "message": "sku 10"})

    with pytest.raises(PermanentError) as raised:
        call(http_service("inventory", handler))

    assert raised.value.code == "out_of_stock"


def test_http_service_unknown_operation_is_permanent_and_sends_nothing() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    with pytest.raises(PermanentError) as raised:
        call(http_service("inventory", handler), "charge")

    assert raised.value.code == "unknown_operation"
    assert seen == []


@pytest.mark.parametrize(
    ("name", "operation", "path", "answer", "expected"),
    [
        (
            "inventory",
            "release",
            "/inventory/reservations/release",
            {"undone": True, "forwardKey": "o-1:reserve_inventory", "reservationId": "res_1"},
            {"undone": "true", "reservationId": "res_1"},
        ),
        (
            "payment",
            "refund",
            "/payments/refunds",
            {
                "undone": True,
                "chargeId": "ch_1",
                "refundId": "re_1",
                "amount": "12.50",
                "refundedTotal": "12.50",
            },
            {"undone": "true", "chargeId": "ch_1", "refundId": "re_1", "amount": "12.50"},
        ),
        (
            "shipping",
            "cancel",
            "/shipping/shipments/cancel",
            {"undone": False, "forwardKey": "o-1:ship", "reason": "never_applied"},
            {"undone": "false", "reason": "never_applied"},
        ),
    ],
    ids=["release", "refund", "cancel-never-applied"],
)
def test_http_service_undo_routes_post_by_forward_key_and_stringify_booleans_as_json(
    name: str, operation: str, path: str, answer: dict[str, Any], expected: dict[str, str]
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=answer)

    payload = {"forwardKey": "o-1:step", "reservationId": "res_1"}
    result = http_service(name, handler).call(
        operation, payload, order_id="o-1", idempotency_key="o-1:step:undo", timeout_s=2.0
    )

    assert result == expected
    [request] = seen
    assert request.url == f"http://demo.test{path}"
    assert request.headers["Idempotency-Key"] == "o-1:step:undo"
    assert json.loads(request.content) == {
        "orderId": "o-1",
        "forwardKey": "o-1:step",
        "reservationId": "res_1",
    }


def test_http_service_undo_in_progress_is_transient() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"error": "request_in_progress", "permanent": False})

    with pytest.raises(TransientError):
        http_service("inventory", handler).call(
            "release", {"forwardKey": "o-1:reserve"}, order_id="o-1", idempotency_key="k", timeout_s=1.0
        )


@pytest.mark.parametrize(
    "reply_to",
    [
        "client-a",
        "orders-a",
        "agent-responses-h1-deadletter",
        "agent-responsesx",
        "agent-x",
    ],
)
def test_a_request_that_answers_outside_the_response_queues_is_dead_lettered_uncalled(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings, reply_to: str
) -> None:
    # A forged request (a refund, say) naming a client's queue: the agent calls nothing and sends nothing.
    forged = json.loads(request_body())
    forged["replyTo"] = reply_to
    service = ScriptedService(clock, [{"reservationId": "r-42"}])

    with pytest.raises(InvalidMessage) as refused:
        run(json.dumps(forged), service, queues, clock, settings, FakeSleep(clock))

    assert refused.value.reason == "ReplyToNotAResponseQueue"
    assert service.calls == []
    assert reply_to not in queues.names() or queues.queue(reply_to).peek_all() == []


@pytest.mark.parametrize("reply_to", ["agent-responses", "agent-responses-h1", "agent-responses-local"])
def test_the_shared_and_every_hosts_response_queue_are_answered(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings, reply_to: str
) -> None:
    request = json.loads(request_body())
    request["replyTo"] = reply_to

    result = run(
        json.dumps(request),
        ScriptedService(clock, [{"reservationId": "r-42"}]),
        queues,
        clock,
        settings,
        FakeSleep(clock),
    )

    assert [m.message_id for m in queues.queue(reply_to).peek_all()] == [the_response(result).event_id]


# --- a service refusing the agent's credential ---------------------------------------------------


class CountingCredential:
    """Hands out ``token-1``, ``token-2`` ... valid for an hour, counting the fetches."""

    def __init__(self) -> None:
        self.fetched: list[str] = []

    def get_token_info(self, *scopes: str) -> AccessTokenInfo:
        self.fetched.extend(scopes)
        return AccessTokenInfo(f"token-{len(self.fetched)}", 2_000_000_000)


@pytest.mark.parametrize(("status", "code"), [(401, "invalid_token"), (403, "missing_role")])
def test_http_service_classifies_401_and_403_as_an_auth_refusal_and_drops_the_token(
    status: int, code: str
) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        # An auth refusal is never a business refusal, whatever its body says.
        return httpx.Response(status, json={"error": code, "permanent": True})

    credential = CountingCredential()
    service = http_service("payment", handler, tokens=CachedTokens(credential))
    for _ in range(2):
        with pytest.raises(ServiceAuthRefused) as raised:
            call(service, "charge")
        assert isinstance(raised.value, TransientError)
        assert not isinstance(raised.value, PermanentError)
        assert (raised.value.service, raised.value.status, raised.value.code) == ("payment", status, code)
        assert "service_auth_refused" in str(raised.value)

    # Each refusal drops the cached token: the next call asks the credential for a new one.
    assert seen == ["Bearer token-1", "Bearer token-2"]
    assert credential.fetched == ["api://orderflow-demo-services/.default"] * 2


def test_classify_http_maps_auth_statuses_apart_from_business_refusals() -> None:
    assert isinstance(classify_http(401, {}, service="s"), ServiceAuthRefused)
    assert isinstance(classify_http(403, {"permanent": True}, service="s"), ServiceAuthRefused)
    assert isinstance(classify_http(402, {"error": "card_declined"}, service="s"), PermanentError)
    assert isinstance(classify_http(404, {}, service="s"), PermanentError)


def test_agent_answers_an_auth_refusal_as_a_transient_failure_with_an_alert_after_one_call(
    clock: FakeClock, queues: InMemoryQueueFactory, settings: Settings
) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(403, json={"error": "missing_role", "permanent": False})

    alerts: list[tuple[str, Mapping[str, Any]]] = []
    previous = telemetry.use_alert_sink(lambda name, fields: alerts.append((name, dict(fields))))
    try:
        result = handle_request(
            request_body(),
            service=http_service("inventory", handler, tokens=CachedTokens(CountingCredential())),
            queues=queues,
            clock=clock,
            agents=settings.agents,
            queue_names=settings.queues,
            sleep=FakeSleep(clock),
        )
    finally:
        telemetry.use_alert_sink(previous)

    response = the_response(result)
    # Not retried within the attempt (the same credential would be refused), not a permanent refusal
    # (which would compensate the order): a transient failure the supervisor retries.
    assert len(calls) == 1
    assert response.outcome is AgentOutcome.FAILED
    assert (response.error_kind, response.error_code) == ("transient", "service_auth_refused")
    assert response.calls == 1
    [(name, fields)] = alerts
    assert name == "service_auth_refused"
    assert (fields["dependency"], fields["status"], fields["code"]) == ("inventory", 403, "missing_role")
    assert fields["order_id"] == "o-1"
