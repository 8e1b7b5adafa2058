"""``orderflow bulk resubmit|suspend|resume``: the CLI over the real operator API handler, in process (the
client's requests go to the handler over the in-memory stores, with real tokens)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import httpx
import pytest
from typer.testing import CliRunner, Result

from devhost.local_issuer import local_object_id
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orchestrators.starter import run_starter_pass
from orderflow.clock import FakeClock
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from orderflow.records import LastError, ProcessState, StepStatus
from orderflow.timeline import Actor, note
from orderflow.workflows import ORDER_V1, ORDER_V2
from orderflow_client import cli_bulk, cli_common
from orderflow_client.cli import app
from orderflow_client.operator_client import OperatorApiClient
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import RecordingClient, memory_deps, submit_and_claim

pytestmark = pytest.mark.unit

API_URL = "https://operator-api.test"
RUNNING = ("a:p-0", "a:p-1", "a:p-2", "a:p-3")
FAILED = ("a:e-0", "a:e-1", "a:e-2")
OTHER_VERSION = "a:v2-0"
ALL = (*RUNNING, *FAILED, OTHER_VERSION)


@dataclass
class Api:
    """The operator API behind the CLI: its dependencies, the actions it was sent (``(order, action)``),
    and hooks run before it handles a POST and after (by order key): to change an order between listing
    and acting, to fail the connection, or to lose the answer."""

    deps: HostDeps
    trusted: TrustedIssuer
    posts: list[tuple[str, str]] = field(default_factory=list)
    before_post: dict[str, Callable[[], None]] = field(default_factory=dict)
    after_post: dict[str, Callable[[], None]] = field(default_factory=dict)

    def etags(self) -> dict[str, str]:
        return {key: self.deps.states.get(key).etag for key in ALL}

    def audit_id(self, name: str) -> str:
        return f"{self.trusted.issuer.tenant_id}/{local_object_id(name)}"


def make_failed(deps: HostDeps, key: str) -> None:
    """``key`` (order-v1) as its attempt left it after the charge failed for good: ``Error``, unlocked."""
    submit_and_claim(deps, definition=ORDER_V1, order_id=key)
    found = deps.states.get(key)
    record = found.item.model_copy(deep=True)
    record.process_state = ProcessState.ERROR
    record.locked_by = record.complete_by = None
    record.steps["reserve_inventory"].status = StepStatus.COMPLETED
    record.steps["charge_payment"].status = StepStatus.FAILED
    record.retry_budget.spent = record.retry_budget.limit
    record.last_error = LastError(
        kind="permanent", message="declined", step="charge_payment", code="declined", at=deps.clock.now()
    )
    note(found.item, record, Actor("orchestrator", f"{key}:1"))
    deps.states.replace(record, etag=found.etag)


def touch(deps: HostDeps, key: str) -> None:
    """Another writer changes ``key``: a new version, nothing else."""
    found = deps.states.get(key)
    record = found.item.model_copy(deep=True)
    record.updated_at = record.updated_at + timedelta(seconds=1)
    deps.states.replace(record, etag=found.etag)


@pytest.fixture
def api(trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch) -> Api:
    """Four running orders (order-v1, ``Processing``), three ``Error`` ones and one running order-v2."""
    deps = memory_deps(FakeClock(), RETRY_BUDGET=12)
    for key in RUNNING:
        submit_and_claim(deps, definition=ORDER_V1, order_id=key)
    for key in FAILED:
        make_failed(deps, key)
    submit_and_claim(deps, definition=ORDER_V2, order_id=OTHER_VERSION)
    served = Api(deps, trusted)

    def serve(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            _, _, key, action = request.url.path.rsplit("/", 3)
            served.posts.append((key, action))
            hook = served.before_post.get(key)
            if hook is not None:
                hook()
        answer = handle_operator_request(
            request.method,
            request.url.path,
            dict(request.headers),
            request.content,
            deps=deps,
            sections=OperatorApiSections.of(deps.settings),
            validator=trusted.validator,
            query=request.url.query.decode(),
        )
        lost = served.after_post.get(request.url.path.rsplit("/", 2)[1]) if request.method == "POST" else None
        if lost is not None:
            lost()
        return httpx.Response(answer.status, headers=answer.all_headers(), content=answer.content())

    def client(base_url: str, *, token: str, timeout_s: float) -> OperatorApiClient:
        return OperatorApiClient(
            base_url, token=token, timeout_s=timeout_s, transport=httpx.MockTransport(serve)
        )

    monkeypatch.setattr(cli_common, "OperatorApiClient", client)
    monkeypatch.setattr(cli_bulk, "PAGE_SIZE", 2)  # several pages from a few orders
    monkeypatch.setattr(cli_bulk, "RETRY_WAIT_S", 0.0)
    monkeypatch.setenv("ORDERFLOW_API_URL", API_URL)
    monkeypatch.setenv("ORDERFLOW_TOKEN", trusted.issuer.mint(name="otto", roles=[OPERATOR_ROLE]))
    return served


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["bulk", *args], env={"COLUMNS": "250"})


def rows(output: str, keys: tuple[str, ...] = ALL) -> list[str]:
    """The order keys ``output`` names, of ``keys``, in ``keys`` order."""
    return [key for key in keys if key in output]


def test_a_dry_run_lists_exactly_the_matching_orders_and_changes_nothing(api: Api) -> None:
    before = api.etags()

    result = invoke("suspend", "--state", "Processing", "--workflow-version", "order-v1")

    assert result.exit_code == 0, result.output
    assert rows(result.output) == list(RUNNING)
    assert "4 matching orders listed: would act on 4, 0 skipped" in result.output
    assert "Nothing was changed" in result.output
    for key in RUNNING:  # each row shows the version it would act on
        assert api.deps.states.get(key).etag.strip('"') in result.output
    assert api.posts == []
    assert api.etags() == before


def test_a_dry_run_reports_orders_the_action_does_not_apply_to_as_skipped(api: Api) -> None:
    before = api.etags()

    result = invoke("resubmit", "--client", "a")

    assert result.exit_code == 0, result.output
    assert rows(result.output) == list(ALL)
    assert "8 matching orders listed: would act on 3, 5 skipped" in result.output
    assert result.output.count("skip: NotResubmittable") == 5
    assert result.output.count("a new attempt from the failed step") == 3
    assert api.etags() == before


def test_an_executed_bulk_suspend_suspends_exactly_the_matching_orders(api: Api) -> None:
    before = api.etags()

    result = invoke("suspend", "--state", "Processing", "--workflow-version", "order-v1", "--execute")

    assert result.exit_code == 0, result.output
    assert api.posts == [(key, "suspend") for key in RUNNING]
    for key in RUNNING:
        record = api.deps.states.get(key).item
        assert record.suspended_by == api.audit_id("otto")
        entry = record.timeline[-1]
        assert (entry.role, entry.action, entry.by) == ("operator", "suspend", api.audit_id("otto"))
    untouched = {key: etag for key, etag in before.items() if key not in RUNNING}
    assert {key: api.deps.states.get(key).etag for key in untouched} == untouched
    assert api.deps.states.get(OTHER_VERSION).item.suspended_at is None
    assert "│ done     │ 4" in result.output and "not done" not in result.output


def test_an_order_changed_since_the_listing_is_refused_412_and_the_rest_are_done(api: Api) -> None:
    api.before_post["a:p-2"] = lambda: touch(api.deps, "a:p-2")

    result = invoke("suspend", "--state", "Processing", "--workflow-version", "order-v1", "--execute")

    assert result.exit_code == 1, result.output
    assert api.deps.states.get("a:p-2").item.suspended_at is None
    done = [key for key in RUNNING if api.deps.states.get(key).item.suspended_at is not None]
    assert done == ["a:p-0", "a:p-1", "a:p-3"]
    assert "│ done     │ 3" in result.output and "│ refused  │ 1" in result.output
    assert "a:p-2" in result.output and "412" in result.output and "PreconditionFailed" in result.output


def test_a_bulk_resubmit_gives_each_error_order_exactly_one_new_attempt(api: Api) -> None:
    result = invoke("resubmit", "--state", "Error", "--execute")
    again = invoke("resubmit", "--state", "Error,Pending", "--execute")

    assert result.exit_code == 0, result.output
    assert again.exit_code == 0, again.output  # now Pending: skipped, not sent
    assert "3 matching orders listed: acting on 0, 3 skipped" in again.output
    assert api.posts == [(key, "resubmit") for key in FAILED]
    for key in FAILED:
        record = api.deps.states.get(key).item
        assert record.process_state is ProcessState.PENDING
        assert [e.by for e in record.timeline if e.action == "resubmit"] == [api.audit_id("otto")]
    starts = RecordingClient()
    for _ in range(2):
        run_starter_pass(
            states=api.deps.states,
            client=starts,
            clock=api.deps.clock,
            starter=api.deps.settings.starter,
            steps=api.deps.settings.steps,
            scans=api.deps.settings.scans,
            queue_names=api.deps.settings.queues,
            response_queue="r",
            capacity=10,
        )
    assert sorted(starts.started) == [f"{key}:2" for key in FAILED]  # one new attempt each, over two passes
    assert {api.deps.states.get(key).item.attempt for key in FAILED} == {2}


def test_the_limit_caps_what_is_listed_and_acted_on_and_says_so(api: Api) -> None:
    dry = invoke("suspend", "--state", "Processing", "--limit", "3")
    exact = invoke("suspend", "--state", "Processing", "--limit", "5")
    done = invoke("suspend", "--state", "Processing", "--limit", "3", "--execute")

    assert dry.exit_code == 0, dry.output
    assert len(rows(dry.output)) == 3
    assert "The cap was hit: more orders match than --limit 3" in dry.output
    assert "cap was hit" not in exact.output and len(rows(exact.output)) == 5
    assert done.exit_code == 0, done.output
    assert len(api.posts) == 3
    suspended = [key for key in ALL if api.deps.states.get(key).item.suspended_at is not None]
    assert suspended == [key for key, _ in api.posts]


def test_bad_input_exits_2_and_sends_nothing(api: Api) -> None:
    no_filter = invoke("suspend", "--execute")
    bad_state = invoke("suspend", "--state", "Nope", "--execute")

    assert no_filter.exit_code == 2 and "give at least one filter" in no_filter.output
    assert bad_state.exit_code == 2 and "400 InvalidValue" in bad_state.output
    assert api.posts == []


def test_a_transport_failure_is_retried_then_reported_failed_and_the_rest_are_done(api: Api) -> None:
    def unreachable() -> None:
        raise httpx.ConnectError("connection refused")

    api.before_post["a:e-1"] = unreachable

    result = invoke("resubmit", "--state", "Error", "--execute")

    assert result.exit_code == 1, result.output
    assert [key for key, _ in api.posts] == ["a:e-0", "a:e-1", "a:e-1", "a:e-1", "a:e-2"]
    assert api.deps.states.get("a:e-1").item.process_state is ProcessState.ERROR
    assert {api.deps.states.get(k).item.process_state for k in ("a:e-0", "a:e-2")} == {ProcessState.PENDING}
    assert "│ failed   │ 1" in result.output and "could not be reached" in result.output


def test_a_caller_without_the_operator_role_is_refused_once_and_nothing_more_is_sent(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDERFLOW_TOKEN", api.trusted.issuer.mint(name="rita", roles=[REVIEWER_ROLE]))
    before = api.etags()

    result = invoke("resume", "--state", "Processing", "--execute")
    suspended = invoke("suspend", "--state", "Processing", "--execute")

    assert result.exit_code == 0, result.output  # nothing suspended: all skipped, nothing sent
    assert "acting on 0, 5 skipped" in result.output
    assert suspended.exit_code == 1, suspended.output
    assert len(api.posts) == 1
    assert "│ refused  │ 1" in suspended.output and "│ not sent │ 4" in suspended.output
    assert "403" in suspended.output and "Forbidden" in suspended.output
    assert api.etags() == before


def test_an_order_the_api_refuses_for_its_state_is_reported_with_the_code(api: Api) -> None:
    found = api.deps.states.get("a:e-1")
    record = found.item.model_copy(deep=True)
    record.steps["reserve_inventory"].status = StepStatus.COMPENSATING  # a listing cannot see this
    api.deps.states.replace(record, etag=found.etag)
    before = api.deps.states.get("a:e-1").etag

    result = invoke("resubmit", "--state", "Error", "--execute")

    assert result.exit_code == 1, result.output
    assert [key for key, _ in api.posts] == list(FAILED)
    assert api.deps.states.get("a:e-1").etag == before
    assert "│ done     │ 2" in result.output and "│ refused  │ 1" in result.output
    assert "409" in result.output and "NotResubmittable" in result.output
    assert "compensation began" in result.output


def test_an_action_whose_answer_was_lost_is_retried_and_cannot_act_twice(api: Api) -> None:
    lost: list[str] = []

    def lose_the_first_answer() -> None:
        if not lost:
            lost.append("a:e-1")
            raise httpx.ReadTimeout("timed out")

    api.after_post["a:e-1"] = lose_the_first_answer

    result = invoke("resubmit", "--state", "Error", "--execute")

    assert result.exit_code == 1, result.output
    assert [key for key, _ in api.posts] == ["a:e-0", "a:e-1", "a:e-1", "a:e-2"]
    record = api.deps.states.get("a:e-1").item
    assert record.process_state is ProcessState.PENDING
    assert [e.action for e in record.timeline].count("resubmit") == 1
    assert "412" in result.output and "an earlier one may have acted" in result.output
