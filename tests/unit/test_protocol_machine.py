"""The concurrency protocol as a state machine: every actor, interleaved at random, against the state store.

Hypothesis plays the protocol's actors in any order, over a few orders and two hosts, with a fake clock,
and after every step checks what the protocol promises (docs/design.md §3, §4):

- one owner at a time: ``lockedBy`` names the record's latest attempt or nobody, attempts' tenures never
  overlap, and each attempt's orchestration is started at most once, after its claim;
- a superseded attempt changes nothing: any write it tries leaves the record byte for byte as it was
  (same ETag) and sends no agent request;
- every change of ``processState`` is one the protocol allows, made by the actor allowed to make it:
  terminal states are final, ``Error`` and ``CompensationFailed`` are left only by an operator;
- ``attempt`` never goes back, nor does ``failureCount`` but by an operator's resubmit;
- every completed step has its compensation entry, written before the next step starts, and a
  compensated order has undone every one of them;
- the retry budget holds: reservations within what was spent, spent within the limit, and the calls the
  agents made within the limit too (an operator's resubmit tops the limit up);
- an idempotency key is never sent with two payloads, and a step an operator corrected is called under
  its latest correction's key;
- a settled order owes its client the reply that matches its state, or has sent it, and the client never
  hears an outcome the order did not have;
- a suspended order starts nothing: no claim, no recovery, no step, until it is resumed (an attempt that
  reaches its next step hands the order back, ``Pending``); a suspend or resume changes only the flag
  (an attempt waiting for a review keeps its ``completeBy``);
- no commit of a hold (order-v6's capture and stock commit) reaches its service after the hold expired
  there (:class:`HoldsMachine`: the services grant short holds, and the clock's jumps lapse them).

Each rule calls the real role function with real payloads: submission, the starters' claim, the
orchestrations' activities (their payloads built by the real workflow body, run by
:mod:`tests.unit.scripted_runtime`), the agents, the response listener, the supervisor's sweep and reply
relay, a client's cancel, an operator's and a reviewer's decision (the operator API's actions, for a
verified principal: a compensate, a resubmit with or without corrected input, a suspend and a resume).
Only the clock, the durable runtime and the remote services are fakes.
``tests/integration/test_protocol_machine_cosmos.py`` runs the same machine against cosmosdb-server.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agents.agent import handle_request
from intake.submission import handle_intake_message
from operator_api.compensate import compensate_order
from operator_api.resubmit import resubmit_order
from operator_api.review import review_order
from operator_api.suspension import set_suspension
from orchestrators.listener import handle_response
from orchestrators.starter import run_starter_pass
from orderflow.attempts import (
    CLAIMABLE_STATES,
    FirstRequests,
    claim,
    first_requests_for,
    send_first_request,
    start_attempt,
    started_by_claim,
)
from orderflow.clock import FakeClock
from orderflow.contracts import (
    BEGIN_COMPENSATION,
    FINISH_COMPENSATION,
    FINISH_ORDER,
    RECORD_REVIEW,
    RECORD_STEP_FAILURE,
    START_STEP,
    START_UNDO,
    StartedStep,
    StartStepInput,
    StepResult,
)
from orderflow.dependencies import RecordCache
from orderflow.errors import NotFound, PermanentError, TransientError
from orderflow.messages import AgentRequest, CancelOrder, StatusReply, parse_message
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE, Principal
from orderflow.protocol.keys import corrected_key, undo_key
from orderflow.protocol.state_machine import TERMINAL_STATES, can_transition
from orderflow.queues.base import DeadLetter, MessageQueue, ReceivedMessage
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import (
    ATTEMPT_HISTORY_MAX,
    ProcessState,
    ReviewDecision,
    StateRecord,
    StepStatus,
    UndoStatus,
    client_order_id,
    format_utc,
    instance_id_for,
    order_key,
    parse_instance_id,
)
from orderflow.replies import resend_pending_replies
from orderflow.settings import Settings
from orderflow.stores.base import OrderStore, StateQuery, StateStore, Versioned
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow.workflows import (
    ORDER_V1,
    ORDER_V2,
    ORDER_V3,
    ORDER_V4,
    ORDER_V6,
    WorkflowDefinition,
    agent_names,
    workflow_for,
)
from supervisor.recovery import SWEPT_STATES, expired_query, recover
from supervisor.sweep import SweepCursor, run_sweep
from tests.activity_json import (
    begin_compensation,
    finish_compensation,
    finish_order,
    record_review,
    record_step_failure,
    start_step,
    start_undo,
)
from tests.host_deps import HostDeps
from tests.unit.fakes import (
    TEST_CLIENT,
    memory_deps,
    order_body,
    received,
    start_v2_step,
    submit_and_claim,
    suspend,
)
from tests.unit.scripted_runtime import ScriptedClient, ScriptedOrchestration

pytestmark = pytest.mark.unit

P = ProcessState

TENANT = "0a1b2c3d-0000-4000-8000-000000000001"
OPERATOR = Principal(
    object_id="0a1b2c3d-0000-4000-8000-0000000000aa",
    tenant_id=TENANT,
    subject="ana",
    roles=frozenset({OPERATOR_ROLE}),
)
"""The operator of the machine's decisions, as the operator API verifies one."""
REVIEWER = Principal(
    object_id="0a1b2c3d-0000-4000-8000-0000000000bb",
    tenant_id=TENANT,
    subject="rui",
    roles=frozenset({REVIEWER_ROLE}),
)
"""The reviewer of the machine's decisions."""

SETTINGS: dict[str, Any] = {
    "CLAIM_TIMEOUT_S": 30.0,
    "STEP_TIMEOUT_S": 8.0,
    # Enough for one run of the three steps, not for many retries: running out of it is explored too.
    "RETRY_BUDGET": 5,
    "AGENT_MAX_CALLS_PER_STEP": 2,
    "SUPERVISOR_MAX_FAILURES": 3,
    "SUPERVISOR_BACKOFF_INITIAL_S": 1.0,
    "SUPERVISOR_BACKOFF_MAX_S": 4.0,
    "SUPERVISOR_EXTENDED_BACKOFF_AFTER": 2,
    "SUPERVISOR_EXTENDED_BACKOFF_S": 10.0,
    # One record per page and two per sweep: sweeps resume a scan through its continuation token.
    "SUPERVISOR_PAGE_SIZE": 1,
    "SUPERVISOR_MAX_RECORDS": 2,
    "REVIEW_AMOUNT_ABOVE": 500.0,
    "REVIEW_TIMEOUT_S": 60.0,
    "REPLY_GRACE_S": 5.0,
}
"""Short deadlines; the clock's jumps (:data:`TIME_STEPS`) pass each of them."""

TIME_STEPS = (0.5, 2.0, 9.0, 31.0, 61.0)
"""Seconds the clock may jump: within a step, past a step's deadline, a claim's, a review's."""

HOSTS = ("h1", "h2")

REPLY_QUEUE = "client-a"

REFUSED_CARRIER = "CAMEL"
"""A carrier the remote shipping service refuses, whatever the script says (:class:`ScriptedService`)."""

ORDER_KINDS: dict[str, tuple[WorkflowDefinition, str, str]] = {
    # The current workflow; large enough to pause for a review before the charge.
    "large": (ORDER_V3, "1000.50", "TRUCK"),
    # The first workflow: undone one step at a time; no review, no fallback carrier.
    "small": (ORDER_V1, "100.00", "TRUCK"),
    # A carrier no shipping service takes: order-v4 waits in Error for an operator's correction of it.
    "correctable": (ORDER_V4, "100.00", REFUSED_CARRIER),
    # Stock and payment held until an expiry the clock's jumps may pass: re-acquired, or compensated.
    "held": (ORDER_V6, "100.00", "TRUCK"),
}
"""What an order is: its workflow, its amount and its carrier."""

IN_FLIGHT = 2
"""Most orders on their way (not settled) at once: a new one is submitted when one settles."""

OUTAGES = 2
"""Outages of the client's reply queue in one run."""

REQUEST_LIMITS = {
    "cancel": (1, 2),
    "compensate": (2, 3),
    "resubmit": (1, 2),
    "operator_resubmit": (2, 3),
    "suspend": (2, 3),
}
"""How often a client cancels or resubmits, and an operator decides: (about one order, in one run). A stop
ends an order early, so stops are few; a second decision about an order may retry a failed compensation,
or resubmit it again; a second suspend of an order comes after its resume."""

CORRECTIONS = (None, {"carrier": "AIR"}, {"carrier": "RAIL"}, {"items": [{"sku": "11", "quantity": 1}]})
"""What an operator's resubmit of an ``Error`` order gives as corrected input: none, a carrier (taken
where the failed step is order-v4's refused shipment), or a field no step takes (refused)."""

REMOTE_BEHAVIOURS: dict[str, tuple[str, ...]] = {
    "succeeds": ("ok",),
    "succeeds after a fault": ("fault", "ok"),
    "keeps failing": ("fault",),
    "refuses": ("refused",),
}
"""What the remote service behind an agent answers to each call (the last answer repeats)."""

SERVICE_HOLD_S = 15
"""Most seconds the scripted services keep a hold, whatever the workflow asks (a service may grant less;
orderflow goes by the ``expiresAt`` it answers): a step's deadline and the skew margin (10 s) fit, but one
jump of the clock more and the hold lapses before its commit."""

ANSWERS_AT_ONCE = ("succeeds", "succeeds", "later", *REMOTE_BEHAVIOURS)
"""How an agent handles a request just sent: at once (success weighs double, so that orders get far), or
``later``: the request waits in the agent's inbox (the agent is slow, or died)."""


class Actor(StrEnum):
    """Who made a change the machine observed."""

    SUBMISSION = "submission"
    STARTER = "starter"
    OWNER = "owning attempt"
    SUPERSEDED = "superseded attempt"
    AGENT = "agent"
    LISTENER = "listener"
    SUPERVISOR = "supervisor"
    CLIENT = "client"
    OPERATOR = "operator"
    REVIEWER = "reviewer"
    WORLD = "clock or outage"


ALLOWED: dict[tuple[ProcessState, ProcessState], frozenset[Actor]] = {
    (P.PENDING, P.PROCESSING): frozenset({Actor.STARTER}),
    (P.PENDING, P.CANCELLED): frozenset({Actor.CLIENT}),  # nothing was done yet
    (P.PENDING, P.COMPENSATING): frozenset({Actor.CLIENT, Actor.OPERATOR}),  # an earlier attempt did steps
    # Re-queued after completeBy passed, or handed back by its attempt because the order is suspended.
    (P.PROCESSING, P.PENDING): frozenset({Actor.SUPERVISOR, Actor.OWNER}),
    (P.PROCESSING, P.PROCESSED): frozenset({Actor.OWNER}),
    (P.PROCESSING, P.AWAITING_REVIEW): frozenset({Actor.OWNER}),
    (P.PROCESSING, P.COMPENSATING): frozenset({Actor.OWNER, Actor.SUPERVISOR}),  # or the supervisor gave up
    (P.PROCESSING, P.ERROR): frozenset({Actor.OWNER}),  # past a point of no return
    (P.AWAITING_REVIEW, P.PROCESSING): frozenset({Actor.OWNER}),  # the decision is recorded
    # The waiting attempt died (supervisor), or its order was suspended and its owner handed it back
    # (release_suspended; a decision already made stays on the record for the next attempt).
    (P.AWAITING_REVIEW, P.PENDING): frozenset({Actor.SUPERVISOR, Actor.OWNER}),
    (P.AWAITING_REVIEW, P.COMPENSATING): frozenset({Actor.SUPERVISOR}),
    (P.COMPENSATING, P.COMPENSATED): frozenset({Actor.OWNER}),
    (P.COMPENSATING, P.CANCELLED): frozenset({Actor.OWNER}),  # the undo of a client's cancel
    (P.COMPENSATING, P.COMPENSATION_FAILED): frozenset({Actor.OWNER, Actor.SUPERVISOR}),
    (P.COMPENSATING, P.ERROR): frozenset({Actor.OWNER}),  # past a point of no return
    (P.COMPENSATION_FAILED, P.COMPENSATING): frozenset({Actor.OPERATOR}),  # retried once the cause is fixed
    (P.ERROR, P.PENDING): frozenset({Actor.OPERATOR}),  # resubmitted
    (P.ERROR, P.COMPENSATING): frozenset({Actor.OPERATOR}),
}
"""Every ``processState`` change the protocol allows, and who may make it. No other change may happen."""

FINAL_REPLY: dict[ProcessState, str] = {
    P.PROCESSED: "Processed",
    P.ERROR: "Failed",
    P.COMPENSATED: "Compensated",
    P.COMPENSATION_FAILED: "CompensationFailed",
    P.CANCELLED: "Cancelled",
}
"""The reply a settled order owes its client (orderflow.replies)."""

ACTIVITIES: dict[str, Callable[[dict[str, Any], HostDeps], dict[str, Any]]] = {
    START_STEP: start_step,
    FINISH_ORDER: finish_order,
    RECORD_STEP_FAILURE: record_step_failure,
    RECORD_REVIEW: record_review,
    BEGIN_COMPENSATION: begin_compensation,
    START_UNDO: start_undo,
    FINISH_COMPENSATION: finish_compensation,
}

StoreFactory = Callable[[], tuple[StateStore, OrderStore, Callable[[], None]]]
"""Makes an empty state store and order store, and a function that releases them."""


def memory_stores() -> tuple[StateStore, OrderStore, Callable[[], None]]:
    """The in-memory stores (the ETag semantics of Cosmos DB)."""
    return InMemoryStateStore(), InMemoryOrderStore(), lambda: None


class Host:
    """One process: a starter, orchestrations, a response listener, a supervisor, a record cache.

    ``claimable`` and ``expired`` hold a page its starter or supervisor read and has not acted on yet.
    """

    def __init__(self, name: str, deps: HostDeps) -> None:
        self.name = name
        self.deps = deps
        self.client = ScriptedClient(deps.clock)
        self.cursor = SweepCursor()
        self.claimable: list[Versioned[StateRecord]] = []
        self.expired: list[Versioned[StateRecord]] = []
        self.response_queue = f"agent-responses-{name}"

    def __repr__(self) -> str:
        return self.name


class Write:
    """An activity an orchestration ran, with its payload."""

    def __init__(self, orchestration: ScriptedOrchestration, activity: str, payload: dict[str, Any]) -> None:
        self.orchestration = orchestration
        self.activity = activity
        self.payload = payload
        self.replayed = False

    def __repr__(self) -> str:
        return f"{self.activity} of {self.orchestration.instance_id}"


@dataclass(frozen=True)
class SupersededWrite:
    """A write tried by an attempt that did not own the record: the record (ETag, stored form) before and
    after it, and how many agent requests it sent."""

    write: Write
    before: tuple[str, dict[str, Any]]
    after: tuple[str, dict[str, Any]]
    requests_sent: int


@dataclass(frozen=True)
class Seen:
    """A version of a record the machine observed, and the actor of the step that made it."""

    etag: str
    record: StateRecord
    by: Actor


class ProtocolMachine(RuleBasedStateMachine):
    """Orders, two hosts, one state store; the rules are the protocol's actors."""

    KINDS: tuple[str, ...] = tuple(ORDER_KINDS)
    """The kinds of order the machine submits."""
    MORE_SETTINGS: dict[str, Any] = {}
    """Settings over :data:`SETTINGS`."""

    def __init__(self, stores: StoreFactory = memory_stores) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.states, self.orders, self._release = stores()
        self.queues = ReplyOutage(InMemoryQueueFactory(), REPLY_QUEUE)
        self.settings = Settings.load({}, **{**SETTINGS, **self.MORE_SETTINGS})
        self.hosts = {name: self._host(name) for name in HOSTS}
        self.submitted: dict[str, str] = {}  # order id -> kind
        self.inbox: list[AgentRequest] = []  # requests the agents received and have not handled
        self.request_ids: set[str] = set()
        self.payloads: dict[str, dict[str, Any]] = {}  # idempotency key -> the payload first sent under it
        self.budget_limits: dict[str, int] = {}  # order id -> its budget's limit after an operator's resubmit
        self.writes: list[Write] = []
        self.superseded_writes: list[SupersededWrite] = []
        self.calls_made: Counter[str] = Counter()  # remote calls made for each order's forward steps
        self.requests: Counter[tuple[str, str]] = Counter()  # (request, order id or "*") -> times sent
        self.replies: defaultdict[str, set[str]] = defaultdict(set)  # statuses each client heard
        self.seen: dict[str, list[Seen]] = {}
        self.paused_sends: list[tuple[Host, StateRecord, StartedStep]] = []  # first requests owed
        self.outages = 0
        self.held_until: dict[str, datetime] = {}  # a hold's key -> when the remote service expires it
        self.late_commits: list[str] = []  # commits that reached a service after their hold expired
        self.actor = Actor.WORLD
        self._stale = True

    def _host(self, name: str) -> Host:
        deps = HostDeps(
            states=self.states,
            orders=self.orders,
            queues=self.queues,
            clock=self.clock,
            settings=Settings.load({}, **{**SETTINGS, **self.MORE_SETTINGS}, HOST_ID=name),
        )
        return Host(name, deps)

    def teardown(self) -> None:
        self._release()

    # --- The client, an operator, a reviewer ---------------------------------------------------------

    @initialize(host=st.sampled_from(HOSTS))
    def orders_arrive(self, host: str) -> None:
        """An order of each kind is submitted, and one host's starter claims both."""
        for kind in self.KINDS:
            self.client_submits_an_order(kind)
        self.starter_runs_a_pass(host)

    @precondition(lambda self: len(self._in_flight()) < IN_FLIGHT)
    @rule(kind=st.sampled_from(sorted(ORDER_KINDS)))
    def client_submits_an_order(self, kind: str) -> None:
        """A new order, when fewer than :data:`IN_FLIGHT` are still on their way."""
        self._acting_as(Actor.SUBMISSION)
        order_id = f"a:o-{len(self.submitted) + 1}"  # the key: the body holds o-N
        self.submitted[order_id] = kind
        self._submit(order_id)

    @precondition(lambda self: self._may_ask("resubmit", settled=True))
    @rule(data=st.data())
    def client_submits_again(self, data: st.DataObject) -> None:
        """The client lost the reply of a settled order and sends the order again: it hears the outcome."""
        order_id = self._asks("resubmit", data, settled=True)
        self._acting_as(Actor.SUBMISSION)
        self._submit(order_id)

    @precondition(lambda self: self._may_ask("cancel"))
    @rule(data=st.data())
    def client_cancels(self, data: st.DataObject) -> None:
        """The client cancels an order: the owner stops at its next write and undoes what was done."""
        order_id = self._asks("cancel", data)
        self._acting_as(Actor.CLIENT)
        self._send_to_submission(
            CancelOrder(schema_version=1, type="CancelOrder", order_id=client_order_id(order_id))
        )

    @precondition(lambda self: self._may_ask("compensate"))
    @rule(data=st.data())
    def operator_decides_to_compensate(self, data: st.DataObject) -> None:
        """An operator stops an order and has it compensated, or retries a compensation that failed."""
        order_id = self._asks("compensate", data)
        self._acting_as(Actor.OPERATOR)
        compensate_order(
            order_id,
            OPERATOR,
            reason=None,
            states=self.states,
            queues=self.queues,
            clock=self.clock,
            grace_s=self.settings.starter.CLAIM_TIMEOUT_S,
        )

    @precondition(lambda self: self._errors_to_resubmit())
    @rule(data=st.data(), corrected=st.sampled_from(CORRECTIONS))
    def operator_resubmits(self, data: st.DataObject, corrected: dict[str, Any] | None) -> None:
        """An operator resubmits an ``Error`` (or ``CompensationFailed``) order on the version read,
        perhaps with corrected input; a refusal writes nothing."""
        order_id = data.draw(st.sampled_from(self._errors_to_resubmit()), label="order")
        self.requests["operator_resubmit", order_id] += 1
        self.requests["operator_resubmit", "*"] += 1
        self._acting_as(Actor.OPERATOR)
        seen = self.states.get(order_id)
        outcome = resubmit_order(
            order_id,
            OPERATOR,
            if_match=seen.etag,
            states=self.states,
            queues=self.queues,
            clock=self.clock,
            grace_s=self.settings.starter.CLAIM_TIMEOUT_S,
            retry_budget=self.settings.steps.RETRY_BUDGET,
            corrected=corrected,
            orders=self.orders,
        )
        if outcome.action is None:
            assert self.states.get(order_id).etag == seen.etag, f"{order_id}: a refused resubmit wrote"
        else:
            self.budget_limits[order_id] = outcome.record.retry_budget.limit

    @precondition(lambda self: self._awaiting_review())
    @rule(data=st.data(), decision=st.sampled_from(["approve", "reject"]))
    def reviewer_decides(self, data: st.DataObject, decision: str) -> None:
        """A reviewer's decision: recorded in the record (the first one wins), then forwarded to the
        waiting attempt's host, whose listener raises it on the orchestration."""
        order_id = data.draw(st.sampled_from(self._awaiting_review()), label="order")
        self._acting_as(Actor.REVIEWER)
        with suppress(TransientError):  # a failed forward: the caller would retry
            review_order(
                order_id,
                ReviewDecision(decision),
                REVIEWER,
                states=self.states,
                queues=self.queues,
                clock=self.clock,
                grace_s=self.settings.starter.CLAIM_TIMEOUT_S,
                clients=self.settings.clients.clients(),
            )
        self._listen()

    @precondition(lambda self: self._may_ask("suspend"))
    @rule(data=st.data())
    def operator_suspends(self, data: st.DataObject) -> None:
        """An operator suspends an order on the version read (a settled or suspended one is refused)."""
        order_id = self._asks("suspend", data)
        self._change_suspension(order_id, suspend=True)

    @precondition(lambda self: self._suspended())
    @rule(data=st.data())
    def operator_resumes(self, data: st.DataObject) -> None:
        """An operator resumes a suspended order (one the poison guard suspended, too)."""
        order_id = data.draw(st.sampled_from(self._suspended()), label="order")
        self._change_suspension(order_id, suspend=False)

    # --- Scheduler: starters --------------------------------------------------------------------------

    @precondition(lambda self: self._claimable())
    @rule(host=st.sampled_from(HOSTS))
    def starter_runs_a_pass(self, host: str) -> None:
        """A starter claims ready records, starts each claimed attempt's orchestration and sends the
        request of the step each claim started (the orchestration then only waits for its answer)."""
        starter = self.hosts[host]
        self._acting_as(Actor.STARTER)
        run_starter_pass(
            states=self.states,
            client=starter.client,
            clock=self.clock,
            starter=starter.deps.settings.starter,
            steps=starter.deps.settings.steps,
            scans=starter.deps.settings.scans,
            queue_names=starter.deps.settings.queues,
            response_queue=starter.response_queue,
            capacity=IN_FLIGHT,
            on_claimed=starter.deps.cache.put,
            first_requests=self._first_requests(starter),
        )
        self._collect_agent_requests()

    @precondition(lambda self: self._claimable())
    @rule(host=st.sampled_from(HOSTS))
    def starter_pauses_before_its_first_requests(self, host: str) -> None:
        """A starter claims and schedules as its pass does, then stops (a long pause of its process)
        before it sends the first requests it owes."""
        starter = self.hosts[host]
        self._acting_as(Actor.STARTER)
        query = StateQuery(
            process_states=CLAIMABLE_STATES, unlocked=True, ready_at=self.clock.now(), not_suspended=True
        )
        for found in self.states.query(query, max_item_count=IN_FLIGHT).items:
            won = claim(
                self.states,
                found,
                self.clock,
                starter.deps.settings.starter,
                starter.deps.settings.steps,
                host_id=starter.deps.settings.queues.HOST_ID,
            )
            if won is None:
                continue
            starter.deps.cache.put(won)
            first = started_by_claim(won.item)
            if first is not None:
                self.paused_sends.append((starter, won.item, first))
            start_attempt(
                starter.client,
                won.item,
                response_queue=starter.response_queue,
                step_timeout_s=self.settings.steps.STEP_TIMEOUT_S,
                first_step=first,
            )

    @precondition(lambda self: self.paused_sends)
    @rule(data=st.data())
    def paused_starter_sends_a_first_request(self, data: st.DataObject) -> None:
        """The paused starter goes on and sends a first request it owed, however long after its claim."""
        starter, record, started = data.draw(st.sampled_from(self.paused_sends), label="first request")
        self.paused_sends.remove((starter, record, started))
        self._acting_as(Actor.STARTER)
        taken_over = self._recovered_since(record)
        send_first_request(
            self._first_requests(starter),
            record,
            started,
            clock=self.clock,
            queue_names=starter.deps.settings.queues,
            response_queue=starter.response_queue,
        )
        sent = self._collect_agent_requests()
        assert not (taken_over and sent), f"{record.locked_by} sent its first request after a recovery"

    @precondition(lambda self: self._claimable() and not self._reads("claimable"))
    @rule()
    def both_starters_read_the_same_page(self) -> None:
        """Both starters read the claimable records; each claims from its copy later, maybe stale."""
        self._acting_as(Actor.STARTER)
        query = StateQuery(process_states=CLAIMABLE_STATES, unlocked=True, ready_at=self.clock.now())
        page = self.states.query(query, max_item_count=IN_FLIGHT).items
        for starter in self.hosts.values():
            starter.claimable = list(page)

    @precondition(lambda self: self._reads("claimable"))
    @rule(data=st.data(), dies_after_claim=st.booleans())
    def starter_claims_from_its_read(self, data: st.DataObject, dies_after_claim: bool) -> None:
        """Claim with the ETag read earlier: the claim applies only if nobody moved the record since.
        A starter that dies after its claim starts no orchestration: the supervisor recovers the record."""
        starter = self.hosts[data.draw(st.sampled_from(self._reads("claimable")), label="starter")]
        page, starter.claimable = starter.claimable, []
        self._acting_as(Actor.STARTER)
        for found in page:
            won = claim(
                self.states,
                found,
                self.clock,
                starter.deps.settings.starter,
                starter.deps.settings.steps,
                host_id=starter.deps.settings.queues.HOST_ID,
            )
            if won is not None and not dies_after_claim:
                starter.deps.cache.put(won)
                start_attempt(
                    starter.client,
                    won.item,
                    response_queue=starter.response_queue,
                    step_timeout_s=self.settings.steps.STEP_TIMEOUT_S,
                )

    # --- Scheduler: orchestrations --------------------------------------------------------------------

    @precondition(lambda self: self._waiting_on_an_activity())
    @rule(data=st.data(), worker=st.sampled_from(HOSTS))
    def orchestration_activity_runs(self, data: st.DataObject, worker: str) -> None:
        """The activity an orchestration waits on runs on a worker: any instance of a Functions app runs
        any activity, each with its own record cache. The agent may answer the request the activity sent
        at once, or later."""
        self._activity_runs(data, self.hosts[worker], times=1)

    @precondition(lambda self: self._waiting_on_an_activity())
    @rule(data=st.data(), worker=st.sampled_from(HOSTS))
    def orchestration_activity_runs_twice(self, data: st.DataObject, worker: str) -> None:
        """Activities run at least once: the first result was lost, the runtime runs the activity again a
        little later, and the orchestration gets the second result."""
        self._activity_runs(data, self.hosts[worker], times=2)

    @precondition(lambda self: self._superseded())
    @rule(data=st.data(), worker=st.sampled_from(HOSTS))
    def superseded_attempt_writes_again(self, data: st.DataObject, worker: str) -> None:
        """A write of an attempt that no longer owns the record runs again, late: a work item delivered
        twice, even after its orchestration moved on."""
        write = data.draw(st.sampled_from(self._superseded()), label="write")
        write.replayed = True
        with suppress(TransientError):
            self._run(write, self.hosts[worker])

    @precondition(lambda self: self._due_timers())
    @rule(data=st.data())
    def durable_timer_fires(self, data: st.DataObject) -> None:
        """A step's (or a review's) durable timer fires: the orchestration stops waiting for the answer.
        An answer that arrives before the timer fires wins the race, even past the deadline."""
        instance_id = data.draw(st.sampled_from(self._due_timers()), label="orchestration")
        self._acting_as(Actor.WORLD)
        self.orchestrations[instance_id].fire_timer()

    # --- Agents ----------------------------------------------------------------------------------------

    @precondition(lambda self: self.inbox)
    @rule(data=st.data(), remote=st.sampled_from(sorted(REMOTE_BEHAVIOURS)))
    def agent_handles_a_request(self, data: st.DataObject, remote: str) -> None:
        """An agent handles a request that waited in its inbox. A request never handled: the agent died."""
        self._agent_handles(data.draw(st.sampled_from(self.inbox), label="request"), remote)

    # --- Supervisor -----------------------------------------------------------------------------------

    @precondition(lambda self: self._expired() or self._owed())
    @rule(host=st.sampled_from(HOSTS))
    def supervisor_sweeps(self, host: str) -> None:
        """A bounded sweep (the scan resumes where the host's last sweep stopped), then the relay of
        replies still owed after their grace period."""
        supervisor = self.hosts[host]
        self._acting_as(Actor.SUPERVISOR)
        run_sweep(
            states=self.states,
            queues=self.queues,
            clock=self.clock,
            supervisor=self.settings.supervisor,
            scans=self.settings.scans,
            host_id=self.settings.queues.HOST_ID,
            cursor=supervisor.cursor,
        )
        resend_pending_replies(
            states=self.states,
            queues=self.queues,
            clock=self.clock,
            grace_s=self.settings.supervisor.REPLY_GRACE_S,
        )

    @precondition(lambda self: self._expired() and not self._reads("expired"))
    @rule()
    def both_supervisors_read_the_same_page(self) -> None:
        """Both supervisors read the expired records; each recovers from its copy later, maybe stale."""
        self._acting_as(Actor.SUPERVISOR)
        page = self.states.query(expired_query(self.clock.now()), max_item_count=IN_FLIGHT).items
        for supervisor in self.hosts.values():
            supervisor.expired = list(page)

    @precondition(lambda self: self._reads("expired"))
    @rule(data=st.data())
    def supervisor_recovers_from_its_read(self, data: st.DataObject) -> None:
        """Recover with the ETag read earlier: at most one supervisor wins each record."""
        supervisor = self.hosts[data.draw(st.sampled_from(self._reads("expired")), label="supervisor")]
        page, supervisor.expired = supervisor.expired, []
        self._acting_as(Actor.SUPERVISOR)
        for found in page:
            recover(
                self.states,
                found,
                queues=self.queues,
                clock=self.clock,
                supervisor=self.settings.supervisor,
                host_id=self.settings.queues.HOST_ID,
            )

    # --- The world ------------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from(TIME_STEPS))
    def time_passes(self, seconds: float) -> None:
        self._acting_as(Actor.WORLD)
        self.clock.advance(seconds)

    @precondition(lambda self: not self.queues.down and self.outages < OUTAGES)
    @rule()
    def reply_queue_goes_down(self) -> None:
        """The client's reply queue goes down: every send to it fails until it comes back."""
        self._acting_as(Actor.WORLD)
        self.queues.down = True
        self.outages += 1

    @precondition(lambda self: self.queues.down)
    @rule()
    def reply_queue_comes_back(self) -> None:
        """Replies owed meanwhile are sent by the writer's retry or by the supervisor's relay."""
        self._acting_as(Actor.WORLD)
        self.queues.down = False

    # --- Invariants -----------------------------------------------------------------------------------

    @invariant()
    def one_owner_at_a_time(self) -> None:
        for order_id, record in self._records():
            state = record.process_state
            assert record.locked_by in (None, instance_id_for(order_id, record.attempt)), record.locked_by
            if state is P.PENDING:
                assert record.locked_by is None, f"{order_id} is Pending but owned by {record.locked_by}"
            if state in (P.PROCESSING, P.AWAITING_REVIEW):
                assert record.locked_by is not None, f"{order_id} is {state} without an owner"
            history = record.attempt_history
            first = record.attempt - len(history) + 1
            assert [entry.attempt for entry in history] == list(range(first, record.attempt + 1))
            assert all(entry.instance_id == instance_id_for(order_id, entry.attempt) for entry in history)
            for earlier, later in pairwise(history):
                # A tenure ends, in the write that takes lockedBy away from it, before the next claim.
                assert earlier.ended_at is not None, f"{earlier.instance_id} never ended"
                assert earlier.ended_at <= later.claimed_at, f"{earlier.instance_id} overlaps the next"
            if history and history[-1].ended_at is None:
                assert record.locked_by == history[-1].instance_id
                assert state in (P.PROCESSING, P.AWAITING_REVIEW, P.COMPENSATING), f"{order_id} is {state}"

    @invariant()
    def each_attempt_is_started_once_after_its_claim(self) -> None:
        started = [instance for host in self.hosts.values() for instance in host.client.instances]
        assert len(started) == len(set(started)), f"an attempt started twice: {started}"
        records = dict(self._records())
        for instance_id in started:
            order_id, attempt = parse_instance_id(instance_id)
            record = records[order_id]
            assert attempt <= record.attempt
            if attempt > record.attempt - ATTEMPT_HISTORY_MAX:
                assert instance_id in {entry.instance_id for entry in record.attempt_history}

    @invariant()
    def a_superseded_attempt_changes_nothing(self) -> None:
        for tried in self.superseded_writes:
            assert tried.after == tried.before, f"{tried.write} wrote the record"
            assert tried.requests_sent == 0, f"{tried.write} sent an agent request"

    @invariant()
    def every_change_of_state_is_allowed(self) -> None:
        for order_id, seen in self._observed():
            first = seen[0]
            assert (first.by, first.record.process_state, first.record.attempt) == (
                Actor.SUBMISSION,
                P.PENDING,
                0,
            )
            for before, after in pairwise(seen):
                move = (before.record.process_state, after.record.process_state)
                if move[0] is move[1]:
                    continue
                assert after.by in ALLOWED.get(move, ()), f"{order_id}: {move[0]} -> {move[1]} by {after.by}"
                if move == (P.PROCESSING, P.PENDING) and after.by is Actor.OWNER:
                    assert after.record.suspended_at is not None, f"{order_id}: its attempt gave it back"
                assert can_transition(*move), f"{order_id}: the state machine forbids {move}"

    @invariant()
    def terminal_states_are_final(self) -> None:
        for order_id, seen in self._observed():
            states = [version.record.process_state for version in seen]
            for index, state in enumerate(states):
                if state in TERMINAL_STATES:
                    assert set(states[index:]) == {state}, f"{order_id} left {state}: {states[index:]}"

    @invariant()
    def counters_never_go_back(self) -> None:
        for order_id, seen in self._observed():
            for before, after in pairwise(seen):
                assert after.record.attempt >= before.record.attempt, order_id
                if after.by is not Actor.OPERATOR:  # an operator's resubmit or retry starts afresh
                    assert after.record.failure_count >= before.record.failure_count, order_id
                    assert after.record.compensation_failures >= before.record.compensation_failures

    @invariant()
    def no_commit_reaches_an_expired_hold(self) -> None:
        """A capture or a stock commit is sent only while every hold is live for its deadline and the skew
        margin: none reaches its service after the hold expired there."""
        assert not self.late_commits, self.late_commits

    @invariant()
    def every_completed_step_can_be_undone(self) -> None:
        for order_id, record in self._records():
            definition = workflow_for(record.workflow_version)
            entries = {entry.step: entry for entry in record.compensation_log}
            assert len(entries) == len(record.compensation_log), f"{order_id}: a step logged twice"
            for index, step in enumerate(definition.steps):
                status = record.steps[step.name].status
                if status is StepStatus.COMPLETED:
                    entry = entries.get(step.name)
                    assert entry is not None, f"{order_id}: {step.name} completed without an entry"
                    assert entry.undo == (None if step.irreversible else step.undo)
                    assert entry.undo_key == undo_key(order_id, step.name)
                if record.steps[step.name].attempts:
                    # Started: every earlier step had completed and logged its entry.
                    for earlier in definition.steps[:index]:
                        assert record.steps[earlier.name].status not in (
                            StepStatus.NOT_STARTED,
                            StepStatus.RUNNING,
                            StepStatus.FAILED,
                        ), f"{order_id}: {step.name} started before {earlier.name} completed"
                        assert earlier.name in entries, f"{order_id}: {earlier.name} has no entry"

    @invariant()
    def a_compensated_order_undid_every_step(self) -> None:
        for order_id, record in self._records():
            if record.process_state in (P.COMPENSATED, P.CANCELLED):
                log = record.compensation_log
                left = [entry.step for entry in log if entry.undo and entry.status != UndoStatus.COMPENSATED]
                assert not left, f"{order_id} is {record.process_state} but {left} are not undone"
                # Nor had it passed a point of no return: an irreversible step never started, or refused.
                for step in workflow_for(record.workflow_version).steps:
                    state = record.steps[step.name]
                    if step.irreversible and state.attempts:
                        assert state.status is StepStatus.FAILED, f"{order_id}: {step.name} may have shipped"

    @invariant()
    def a_corrected_step_is_called_under_its_latest_correction(self) -> None:
        for order_id, record in self._records():
            numbers = [c.number for c in record.corrections]
            assert numbers == list(range(1, len(numbers) + 1)), f"{order_id}: corrections {numbers}"
            for correction in record.corrections:
                assert correction.idempotency_key == corrected_key(
                    order_id, correction.step, correction.number
                )
                assert set(correction.input) <= set(
                    workflow_for(record.workflow_version).step(correction.step).correctable
                )
            latest = {c.step: c for c in record.corrections}
            for step, correction in latest.items():
                assert record.steps[step].idempotency_key == correction.idempotency_key, order_id

    @invariant()
    def the_retry_budget_holds(self) -> None:
        for order_id, record in self._records():
            budget = record.retry_budget
            reserved = sum(step.reserved_calls for step in record.steps.values())
            # An operator's resubmit tops the budget up: RETRY_BUDGET calls left from then on.
            assert budget.limit == self.budget_limits.get(order_id, self.settings.steps.RETRY_BUDGET)
            assert 0 <= reserved <= budget.spent <= budget.limit, f"{order_id}: {reserved} in {budget}"
            assert self.calls_made[order_id] <= budget.limit, f"{order_id}: {self.calls_made[order_id]} calls"

    @invariant()
    def a_settled_order_owes_or_sent_its_reply(self) -> None:
        for order_id, record in self._records():
            expected = FINAL_REPLY.get(record.process_state)
            owed = record.pending_reply.status if record.pending_reply is not None else None
            if expected is not None:
                assert owed in (None, expected), f"{order_id} is {record.process_state} but owes {owed}"
                assert owed == expected or expected in self.replies[order_id], f"{order_id}: no {expected}"
            heard = self.replies[order_id] & set(FINAL_REPLY.values())
            been = {FINAL_REPLY.get(version.record.process_state) for version in self.seen[order_id]}
            assert heard <= been, f"{order_id}: the client heard {heard}, the order was {been}"

    @invariant()
    def a_suspended_order_starts_nothing(self) -> None:
        for order_id, seen in self._observed():
            for before, after in pairwise(seen):
                if before.record.suspended_at is None:
                    continue
                # What ran before the suspend may finish (the step's request is with its agent); nothing
                # new begins: no claim, no recovery to a new attempt, no step.
                assert after.record.attempt == before.record.attempt, f"{order_id}: claimed while suspended"
                assert before.record.locked_by is not None or after.record.locked_by is None, order_id
                started = {
                    name: (state.attempts, state.fallback)
                    for name, state in after.record.steps.items()
                    if (state.attempts, state.fallback)
                    != (before.record.steps[name].attempts, before.record.steps[name].fallback)
                }
                assert not started, f"{order_id}: {started} started while suspended by {after.by}"

    # --- Plumbing -------------------------------------------------------------------------------------

    def _acting_as(self, actor: Actor) -> None:
        """Who acts from now on: what changes next is theirs (what the previous actor did is observed
        first)."""
        self._sync()
        self.actor = actor
        self._stale = True

    def _sync(self) -> None:
        """Observe each record's new version, and the replies the client received, since an actor
        began to act."""
        if not self._stale:
            return
        self._stale = False
        for order_id in self.submitted:
            seen = self.seen.setdefault(order_id, [])
            found = self._read(order_id)
            if found is not None and (not seen or seen[-1].etag != found.etag):
                seen.append(Seen(found.etag, found.item, self.actor))
        for message in received(self.queues.inner.queue(REPLY_QUEUE)):
            reply = parse_message(StatusReply, message.body)
            self.replies[order_key(TEST_CLIENT.client_id, reply.order_id)].add(reply.status.value)

    def _read(self, order_id: str) -> Versioned[StateRecord] | None:
        try:
            return self.states.get(order_id)
        except NotFound:
            return None

    def _records(self) -> list[tuple[str, StateRecord]]:
        self._sync()
        return [(order_id, seen[-1].record) for order_id, seen in self.seen.items() if seen]

    def _observed(self) -> list[tuple[str, list[Seen]]]:
        self._sync()
        return [(order_id, seen) for order_id, seen in self.seen.items() if seen]

    def _in_flight(self) -> list[str]:
        return [order_id for order_id, record in self._records() if record.process_state not in FINAL_REPLY]

    def _claimable(self) -> list[str]:
        """Orders a starter's query finds now."""
        now = self.clock.now()
        return [
            order_id
            for order_id, record in self._records()
            if record.process_state in CLAIMABLE_STATES
            and record.locked_by is None
            and record.suspended_at is None
            and (record.next_attempt_at is None or record.next_attempt_at <= now)
        ]

    def _expired(self) -> list[str]:
        """Orders a supervisor's query finds now."""
        now = self.clock.now()
        return [
            order_id
            for order_id, record in self._records()
            if record.process_state in SWEPT_STATES
            and record.complete_by
            and record.complete_by < now
            and record.suspended_at is None
        ]

    def _owed(self) -> list[str]:
        return [order_id for order_id, record in self._records() if record.pending_reply is not None]

    def _awaiting_review(self) -> list[str]:
        return [order_id for order_id, r in self._records() if r.process_state is P.AWAITING_REVIEW]

    def _errors_to_resubmit(self) -> list[str]:
        per_order, per_run = REQUEST_LIMITS["operator_resubmit"]
        if self.requests["operator_resubmit", "*"] >= per_run:
            return []
        return [
            order_id
            for order_id, record in self._records()
            if record.process_state in (P.ERROR, P.COMPENSATION_FAILED)
            and self.requests["operator_resubmit", order_id] < per_order
        ]

    def _suspended(self) -> list[str]:
        return [order_id for order_id, record in self._records() if record.suspended_at is not None]

    def _change_suspension(self, order_id: str, *, suspend: bool) -> None:
        """An operator's suspend or resume: it writes the flag and nothing else, or refuses and writes
        nothing. A resumed ``Pending`` order is ready at once."""
        self._acting_as(Actor.OPERATOR)
        seen = self.states.get(order_id)
        outcome = set_suspension(
            order_id,
            OPERATOR,
            suspend=suspend,
            if_match=seen.etag,
            states=self.states,
            queues=self.queues,
            clock=self.clock,
        )
        after = self.states.get(order_id)
        action = "suspend" if suspend else "resume"
        if outcome.refusal is not None:
            assert after.etag == seen.etag, f"{order_id}: a refused {action} wrote"
            return
        kept = ("process_state", "locked_by", "attempt", "complete_by", "steps", "compensation_log")
        changed = [name for name in kept if getattr(after.item, name) != getattr(seen.item, name)]
        assert not changed, f"{order_id}: a {action} changed {changed}"
        assert (after.item.suspended_at is not None) is suspend, order_id
        if suspend:
            assert after.item.suspended_by == OPERATOR.audit_id, after.item.suspended_by
        elif after.item.process_state is P.PENDING and after.item.locked_by is None:
            assert after.item.next_attempt_at == self.clock.now(), f"{order_id} is not ready after its resume"

    def _may_ask(self, request: str, *, settled: bool = False) -> list[str]:
        """Orders ``request`` may still be sent about: claimed at least once (begun), or ``settled``."""
        per_order, per_run = REQUEST_LIMITS[request]
        if self.requests[request, "*"] >= per_run:
            return []
        return [
            order_id
            for order_id, record in self._records()
            if (record.process_state in FINAL_REPLY if settled else record.attempt > 0)
            and self.requests[request, order_id] < per_order
        ]

    def _asks(self, request: str, data: st.DataObject, *, settled: bool = False) -> str:
        """The order a ``request`` is about, drawn and counted."""
        order_id = data.draw(st.sampled_from(self._may_ask(request, settled=settled)), label="order")
        self.requests[request, order_id] += 1
        self.requests[request, "*"] += 1
        return order_id

    def _submit(self, order_id: str) -> None:
        definition, amount, carrier = ORDER_KINDS[self.submitted[order_id]]
        self._send_to_submission(order_body(order_id, amount=amount, carrier=carrier), definition)

    def _send_to_submission(
        self,
        message: str | CancelOrder,
        definition: WorkflowDefinition | None = None,
    ) -> None:
        """A message on the submission path. A failed reply send abandons it (it would be redelivered)."""
        with suppress(TransientError):
            handle_intake_message(
                message if isinstance(message, str) else message.to_json(),
                client=TEST_CLIENT,
                orders=self.orders,
                states=self.states,
                queues=self.queues,
                clock=self.clock,
                steps=self.settings.steps,
                starter=self.settings.starter,
                queue_names=self.settings.queues,
                definition=definition,
            )

    @property
    def orchestrations(self) -> dict[str, ScriptedOrchestration]:
        """Every orchestration any host started, by instance id."""
        return {i: run for host in self.hosts.values() for i, run in host.client.instances.items()}

    def _waiting_on_an_activity(self) -> list[str]:
        return [i for i, run in self.orchestrations.items() if run.running and run.activity is not None]

    def _due_timers(self) -> list[str]:
        return [i for i, run in self.orchestrations.items() if run.running and run.due_timer() is not None]

    def _superseded(self) -> list[Write]:
        """Writes of attempts that no longer own their record, not replayed yet."""
        owners = {order_id: record.locked_by for order_id, record in self._records()}
        return [
            write
            for write in self.writes
            if owners[write.payload["orderId"]] != write.orchestration.instance_id and not write.replayed
        ]

    def _reads(self, page: str) -> list[str]:
        """Hosts holding a ``claimable`` (starter) or ``expired`` (supervisor) page not acted on yet."""
        return [name for name, host in self.hosts.items() if getattr(host, page)]

    def _activity_runs(self, data: st.DataObject, worker: Host, *, times: int) -> None:
        instance_id = data.draw(st.sampled_from(self._waiting_on_an_activity()), label="orchestration")
        orchestration = self.orchestrations[instance_id]
        task = orchestration.activity
        assert task is not None
        write = Write(orchestration, task.name, task.payload)
        self.writes.append(write)
        waiting = len(self.inbox)
        try:
            for run in range(times):
                if run:
                    self.clock.advance(0.5)  # the runtime runs it again a little later
                result = self._run(write, worker)
        except TransientError as error:  # the reply queue is down after the write: the runtime retries
            orchestration.activity_raised(error)
        else:
            orchestration.complete_activity(result)
        for request in self.inbox[waiting:]:
            answer = data.draw(st.sampled_from(ANSWERS_AT_ONCE), label="agent")
            if answer != "later":
                self._agent_handles(request, answer)

    def _run(self, write: Write, worker: Host) -> dict[str, Any]:
        """Run ``write``'s activity on ``worker``; a write tried by a non-owner is kept to be checked."""
        order_id = write.payload["orderId"]
        before = self.states.get(order_id)
        owner = before.item.locked_by == write.orchestration.instance_id
        self._acting_as(Actor.OWNER if owner else Actor.SUPERSEDED)
        try:
            result = ACTIVITIES[write.activity](write.payload, worker.deps)
            if write.activity == START_STEP and result.get("outcome") == "budget_exhausted":
                # A refusal for budget is true: the write that refused (with the previous step's
                # completion, which gives back what its reservation did not use) leaves no call.
                left = self.states.get(order_id).item.retry_budget.remaining
                assert left == 0, f"{write.payload['step']} refused for budget with {left} call(s) left"
            return result
        finally:
            sent = self._collect_agent_requests()
            if not owner:
                after = self.states.get(order_id)
                self.superseded_writes.append(
                    SupersededWrite(write, _stored(before), _stored(after), len(sent))
                )

    def _first_requests(self, starter: Host) -> FirstRequests:
        first = first_requests_for(starter.deps, starter.deps.settings.starter)  # as the hosts build it
        assert first is not None
        return first

    def _recovered_since(self, claimed: StateRecord) -> bool:
        """Whether the supervisor moved the record away from the attempt ``claimed`` started."""
        seen = self.seen.get(claimed.order_id, [])
        return any(
            later.by is Actor.SUPERVISOR and later.record.attempt == claimed.attempt
            for later in seen
            if later.record.updated_at >= claimed.updated_at
        )

    def _collect_agent_requests(self) -> list[AgentRequest]:
        """Move the requests sent to the agents' queues into their inbox. A request sent again under the
        same message id is dropped, as the broker's duplicate detection drops it (the retry budget needs it:
        docs/configuration.md)."""
        sent = []
        for agent in agent_names():
            for message in received(self.queues.queue(self.settings.queues.agent_queue(agent))):
                request = parse_message(AgentRequest, message.body)
                sent.append(request)
                # A key is never reused for another call: a remote service would answer the new call with
                # the old one's stored outcome (the demo services refuse it as idempotency_key_reuse).
                first = self.payloads.setdefault(request.idempotency_key, request.payload)
                assert first == request.payload, f"{request.idempotency_key} reused for {request.payload}"
                if message.message_id not in self.request_ids:
                    self.request_ids.add(message.message_id)
                    self.inbox.append(request)
        return sent

    def _agent_handles(self, request: AgentRequest, remote: str) -> None:
        """The agent calls its remote service (retrying faults within the request's calls) and answers on
        the response queue of the host that asked, whose listener raises the answer on the orchestration."""
        self.inbox.remove(request)
        self._acting_as(Actor.AGENT)
        done = handle_request(
            request.to_json(),
            service=ScriptedService(REMOTE_BEHAVIOURS[remote], holds=self),
            queues=self.queues,
            clock=self.clock,
            agents=self.settings.agents,
            queue_names=self.settings.queues,
            sleep=lambda _seconds: None,
        )
        if not request.step.endswith(":undo"):  # undos spend no budget
            self.calls_made[request.order_id] += done.calls
        self._listen()

    def _listen(self) -> None:
        """Each host's response listener raises what its response queue holds on its orchestrations."""
        self._acting_as(Actor.LISTENER)
        for host in self.hosts.values():
            for message in received(self.queues.queue(host.response_queue)):
                handle_response(message.body, client=host.client)


def _stored(found: Versioned[StateRecord]) -> tuple[str, dict[str, Any]]:
    return found.etag, found.item.to_json_dict()


class ScriptedService:
    """A remote service that answers each call with the next answer of a script (the last one repeats).

    It keeps holds as a service does, on the machine's clock: a call with ``holdS`` acquires one for that
    long, at most :data:`SERVICE_HOLD_S` (``holdId``, ``expiresAt``); a commit (``holdKey``) that
    arrives once its hold expired is kept in ``holds.late_commits`` and refused for good.
    """

    name = "scripted"

    def __init__(self, script: tuple[str, ...], *, holds: ProtocolMachine | None = None) -> None:
        self._answers = list(script)
        self._holds = holds

    def call(
        self,
        operation: str,
        payload: Any,
        *,
        order_id: str,
        idempotency_key: str,
        timeout_s: float,
        instance_id: str | None = None,
    ) -> dict[str, str]:
        answer = self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]
        if answer != "fault" and operation == "ship" and payload.get("carrier") == REFUSED_CARRIER:
            answer = "refused"
        if answer == "fault":
            raise TransientError(f"{operation} timed out")
        if answer == "refused":
            raise PermanentError("refused", f"{operation} refused")
        if self._holds is not None:
            return self._held(operation, payload, idempotency_key)
        return {"ref": idempotency_key}

    def _held(self, operation: str, payload: Any, idempotency_key: str) -> dict[str, str]:
        """The answer of a call that acquires or commits a hold (or of any other call)."""
        assert self._holds is not None
        now = self._holds.clock.now()
        if "holdS" in payload:
            until = now + timedelta(seconds=min(int(payload["holdS"]), SERVICE_HOLD_S))
            self._holds.held_until[idempotency_key] = until
            return {"ref": idempotency_key, "holdId": idempotency_key, "expiresAt": format_utc(until)}
        if "holdKey" in payload:
            held = self._holds.held_until.get(payload["holdKey"])
            if held is None or now >= held:
                self._holds.late_commits.append(f"{operation} {idempotency_key} at {now} (held until {held})")
                raise PermanentError("hold_expired", f"{operation}: the hold expired")
        return {"ref": idempotency_key}


class ReplyOutage:
    """In-memory queues whose client reply queue can be down: every send to it then fails."""

    def __init__(self, inner: InMemoryQueueFactory, reply_queue: str) -> None:
        self.inner = inner
        self.reply_queue = reply_queue
        self.down = False

    def queue(self, name: str) -> MessageQueue:
        if self.down and name == self.reply_queue:
            return _Unreachable(name)
        return self.inner.queue(name)

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        return self.inner.dead_letters(name, max_messages=max_messages)


class _Unreachable:
    """A queue that cannot be reached."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _fail(self) -> TransientError:
        return TransientError(f"queue {self.name} is unreachable")

    def send(
        self,
        body: str,
        *,
        message_id: str,
        correlation_id: str | None = None,
        delay_s: float = 0.0,
        reply_to: str | None = None,
    ) -> None:
        raise self._fail()

    def receive(self, *, max_messages: int = 16, lock_s: float = 30.0) -> list[ReceivedMessage]:
        raise self._fail()

    def complete(self, message: ReceivedMessage) -> None:
        raise self._fail()

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        raise self._fail()

    def renew_lock(self, message: ReceivedMessage, *, lock_s: float) -> None:
        raise self._fail()

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        raise self._fail()

    def approximate_count(self) -> int:
        raise self._fail()


MACHINE_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
"""Long runs (each runs a few orders from submission to their end), few of them: a few seconds."""


def test_the_protocol_holds_under_any_interleaving() -> None:
    run_state_machine_as_test(ProtocolMachine, settings=MACHINE_SETTINGS)


class HoldsMachine(ProtocolMachine):
    """The same machine over orders that hold stock and payment (order-v6) only, with the budget for
    their five steps and a re-acquisition: the clock's jumps lapse holds between acquisition and commit."""

    KINDS = ("held",)
    MORE_SETTINGS = {"RETRY_BUDGET": 10}

    @precondition(lambda self: len(self._in_flight()) < IN_FLIGHT)
    @rule(kind=st.just("held"))
    def client_submits_an_order(self, kind: str) -> None:
        """A new order that holds resources, when fewer than :data:`IN_FLIGHT` are on their way."""
        super().client_submits_an_order(kind)


def test_no_commit_follows_an_expired_hold_under_any_interleaving() -> None:
    # More runs: an order reaches its commits in a fraction of them only.
    run_state_machine_as_test(HoldsMachine, settings=settings(MACHINE_SETTINGS, max_examples=80))


# --- Regressions the machine found -------------------------------------------------------------------


def test_an_owner_writes_through_a_worker_whose_record_cache_lags() -> None:
    # The activities of one orchestration run on any worker, each with its own record cache. Worker B
    # cached the record when it started the reservation; worker A recorded the reservation and started
    # the charge. B then records the charge and starts the shipment: on its cached copy the charge had
    # not started, so the change looked illegal. It must be decided on a fresh read instead.
    clock = FakeClock()
    worker_a = memory_deps(clock)
    worker_b = HostDeps(
        states=worker_a.states,
        orders=worker_a.orders,
        queues=worker_a.queues,
        clock=clock,
        settings=worker_a.settings,
        cache=RecordCache(),
    )
    submit_and_claim(worker_a, definition=ORDER_V1)

    def start(worker: HostDeps, step: str, completed: str | None = None) -> dict[str, Any]:
        done = StepResult(step=completed, result={"ref": completed}, calls=1) if completed else None
        payload = StartStepInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            step=step,
            timeout_s=8,
            completed=done,
            response_queue="agent-responses-h1",
        ).to_payload()
        return start_step(payload, worker)

    assert start(worker_b, "reserve_inventory")["outcome"] == "started"
    assert start(worker_a, "charge_payment", completed="reserve_inventory")["outcome"] == "started"

    assert start(worker_b, "create_shipment", completed="charge_payment")["outcome"] == "started"
    steps = worker_a.states.get("a:o-1").item.steps
    assert [steps[name].status for name in ORDER_V1.step_names] == [
        StepStatus.COMPLETED,
        StepStatus.COMPLETED,
        StepStatus.RUNNING,
    ]


def test_a_suspended_attempt_awaiting_review_waits_on_when_its_activity_runs_again() -> None:
    # The attempt paused charge_payment for review, and the AwaitingReview reply could not be sent, so
    # its start_step ran again after an operator suspended the order. It ended the attempt, handing the
    # order back Pending: a change only the supervisor may make, to an attempt the suspend asked nothing
    # of. The re-run keeps waiting instead.
    clock = FakeClock()
    deps = memory_deps(clock, REVIEW_AMOUNT_ABOVE=1.0)
    submit_and_claim(deps, definition=ORDER_V2)

    assert start_v2_step(deps, "reserve_inventory")["outcome"] == "started"
    assert start_v2_step(deps, "charge_payment")["outcome"] == "awaiting_review"
    waiting = deps.states.get("a:o-1")
    suspend(deps, OPERATOR)
    before = deps.states.get("a:o-1")

    assert start_v2_step(deps, "charge_payment")["outcome"] == "awaiting_review"
    after = deps.states.get("a:o-1").item
    assert (after.process_state, after.locked_by, after.complete_by, after.attempt_history) == (
        ProcessState.AWAITING_REVIEW,
        "a:o-1:1",
        waiting.item.complete_by,
        before.item.attempt_history,
    )
