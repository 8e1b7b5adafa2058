"""``orderflow orders show|list``, ``resubmit``, ``suspend`` and ``resume``: the CLI over the operator API,
in process (the client's requests go to the handler over the in-memory stores, with real tokens)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from devhost.local_issuer import local_object_id
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow.client_text import encodable, visible
from orderflow.clock import FakeClock
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.records import LastError, ProcessState
from orderflow.timeline import TIMELINE_WINDOW, Actor, note
from orderflow.workflows import ORDER_V1
from orderflow_client import cli_common
from orderflow_client.cli import app
from orderflow_client.operator_client import OperatorApiClient
from tests.host_deps import HostDeps
from tests.hostile_text import hostile_cases, raw_controls
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps, submit_and_claim
from tests.unit.test_corrections import shipment_refused

pytestmark = pytest.mark.unit

API_URL = "https://operator-api.test"


@pytest.fixture
def api(trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> HostDeps:
    """The operator API behind the CLI, holding a:o-1 (running) and a:o-2 (Error)."""
    deps = memory_deps(FakeClock())
    for key in ("a:o-1", "a:o-2"):
        submit_and_claim(deps, definition=ORDER_V1, order_id=key)
    found = deps.states.get("a:o-2")
    failed = found.item.model_copy(deep=True)
    failed.process_state, failed.locked_by = ProcessState.ERROR, None
    deps.states.replace(failed, etag=found.etag)

    def serve(request: httpx.Request) -> httpx.Response:
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
        return httpx.Response(answer.status, headers=answer.all_headers(), content=answer.content())

    def client(base_url: str, *, token: str, timeout_s: float) -> OperatorApiClient:
        return OperatorApiClient(
            base_url, token=token, timeout_s=timeout_s, transport=httpx.MockTransport(serve)
        )

    monkeypatch.setattr(cli_common, "OperatorApiClient", client)
    monkeypatch.setenv("ORDERFLOW_API_URL", API_URL)
    monkeypatch.setenv("ORDERFLOW_TOKEN", trusted.issuer.mint(name="otto", roles=[OPERATOR_ROLE]))
    monkeypatch.setenv("COLUMNS", "250")
    return deps


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def test_orders_show_renders_the_state_steps_log_replies_and_the_whole_timeline(api: HostDeps) -> None:
    for n in range(TIMELINE_WINDOW):  # some of it moves to history: show reads it back
        found = api.states.get("a:o-1")
        record = found.item.model_copy(deep=True)
        record.updated_at = record.updated_at + timedelta(seconds=1)
        note(found.item, record, Actor("operator", f"t/{n}"), action=f"look-{n}")
        api.states.replace(record, etag=found.etag)
    etag = api.states.get("a:o-1").etag.strip('"')

    result = invoke("orders", "show", "a:o-1")

    assert result.exit_code == 0, result.output
    for title in ("order a:o-1", "steps", "compensation log", "replies sent", "timeline"):
        assert title in result.output
    assert "Processing" in result.output and "reserve_inventory" in result.output
    budget = api.states.get("a:o-1").item.retry_budget
    assert f"{budget.spent} of {budget.limit} calls spent" in result.output
    assert etag in result.output
    assert "submit" in result.output and "claim" in result.output
    assert all(f"look-{n}" in result.output for n in range(TIMELINE_WINDOW))


@hostile_cases
def test_orders_show_and_list_make_the_control_characters_of_stored_text_visible(
    api: HostDeps, hostile: str
) -> None:
    # A service's error message and an actor's name are text others wrote, kept on the record.
    found = api.states.get("a:o-2")
    record = found.item.model_copy(deep=True)
    record.last_error = LastError(kind="Permanent", code=hostile[:40], message=hostile, at=record.updated_at)
    note(found.item, record, Actor("operator", hostile), action="look")
    api.states.replace(record, etag=found.etag)

    shown = CliRunner().invoke(app, ["orders", "show", "a:o-2"], env={"COLUMNS": "250000"})
    listed = CliRunner().invoke(app, ["orders", "list", "--state", "Error"], env={"COLUMNS": "250000"})

    assert (shown.exit_code, listed.exit_code) == (0, 0), shown.output[:500] + listed.output[:500]
    assert raw_controls(shown.stdout_bytes) == [] and raw_controls(listed.stdout_bytes) == []
    assert visible(encodable(hostile)) in shown.stdout_bytes.decode()


def test_orders_list_filters_through_the_api(api: HostDeps) -> None:
    errors = invoke("orders", "list", "--state", "Error")
    everything = invoke("orders", "list", "--limit", "1")

    assert errors.exit_code == 0, errors.output
    assert "a:o-2" in errors.output and "a:o-1" not in errors.output
    assert "more: --continuation" in everything.output


def test_resubmit_acts_on_the_version_read_and_refuses_a_stale_etag(
    api: HostDeps, trusted: TrustedIssuer
) -> None:
    stale = invoke("resubmit", "a:o-2", "--etag", '"not-the-version"')
    etag = api.states.get("a:o-2").etag
    assert stale.exit_code == 1
    assert "412 PreconditionFailed" in stale.output
    assert api.states.get("a:o-2").etag == etag

    done = invoke("resubmit", "a:o-2")

    assert done.exit_code == 0, done.output
    assert "NewAttempt" in done.output
    record = api.states.get("a:o-2").item
    assert record.process_state is ProcessState.PENDING
    assert record.timeline[-1].by == f"{trusted.issuer.tenant_id}/{local_object_id('otto')}"


def test_suspend_and_resume(api: HostDeps) -> None:
    suspended = invoke("suspend", "a:o-1")
    again = invoke("suspend", "a:o-1")
    resumed = invoke("resume", "a:o-1")

    assert suspended.exit_code == 0 and "suspended a:o-1" in suspended.output
    assert again.exit_code == 1 and "AlreadySuspended" in again.output
    assert resumed.exit_code == 0 and api.states.get("a:o-1").item.suspended_at is None


def test_resubmit_with_input_sends_the_corrected_fields_of_a_json_object_file(
    api: HostDeps, tmp_path: Path, trusted: TrustedIssuer
) -> None:
    shipment_refused(api, "a:o-3")  # order-v4: the carrier CAMEL refused
    corrected = tmp_path / "carrier.json"
    corrected.write_text('{"carrier": "AIR"}', encoding="utf-8")

    done = invoke("resubmit", "a:o-3", "--input", str(corrected))

    assert done.exit_code == 0, done.output
    assert "resubmitted a:o-3 (NewAttempt, corrected carrier); the order is Pending." in done.output
    record = api.states.get("a:o-3").item
    [correction] = record.corrections
    assert (correction.input, correction.by) == (
        {"carrier": "AIR"},
        f"{trusted.issuer.tenant_id}/{local_object_id('otto')}",
    )
    assert record.steps["create_shipment"].idempotency_key == "a:o-3:create_shipment:correction-1"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('["carrier", "AIR"]', "holds array: --input takes a JSON object"),
        ('"AIR"', "holds string: --input takes a JSON object"),
        ("{}", "holds an empty object"),
        ('{"carrier": ', "is not JSON"),
        ('{"carrier": "AIR", "carrier": "SHIP"}', "duplicate key 'carrier'"),
        ('{"carrier": NaN}', "is not JSON"),
        ('\ufeff{"carrier": "AIR"}', "byte-order mark"),
    ],
)
def test_resubmit_refuses_an_input_file_that_is_not_a_json_object_before_calling(
    api: HostDeps, tmp_path: Path, content: str, says: str
) -> None:
    etag = shipment_refused(api, "a:o-3").etag
    corrected = tmp_path / "input.json"
    corrected.write_text(content, encoding="utf-8")

    refused = invoke("resubmit", "a:o-3", "--input", str(corrected))
    missing = invoke("resubmit", "a:o-3", "--input", str(tmp_path / "nowhere.json"))

    assert refused.exit_code == 2
    assert says in " ".join(refused.output.split())
    assert missing.exit_code == 2 and "cannot read" in missing.output
    assert api.states.get("a:o-3").etag == etag


def test_resubmit_with_input_the_step_does_not_take_or_an_invalid_value_exits_1(
    api: HostDeps, tmp_path: Path
) -> None:
    etag = shipment_refused(api, "a:o-3").etag
    items = tmp_path / "items.json"
    items.write_text('{"items": [{"sku": "1", "quantity": 1}]}', encoding="utf-8")
    blank = tmp_path / "blank.json"
    blank.write_text('{"carrier": " "}', encoding="utf-8")

    not_allowed = invoke("resubmit", "a:o-3", "--input", str(items))
    invalid = invoke("resubmit", "a:o-3", "--input", str(blank))
    stale = invoke("resubmit", "a:o-3", "--etag", '"not-the-version"', "--input", str(blank))

    assert not_allowed.exit_code == 1 and "409 InputNotCorrectable" in not_allowed.output
    assert invalid.exit_code == 1 and "422 InvalidInput" in invalid.output
    assert stale.exit_code == 1 and "412 PreconditionFailed" in stale.output
    assert api.states.get("a:o-3").etag == etag


def test_orders_show_renders_an_input_correction_and_who_made_it(api: HostDeps, tmp_path: Path) -> None:
    shipment_refused(api, "a:o-3")
    corrected = tmp_path / "carrier.json"
    corrected.write_text('{"carrier": "AIR"}', encoding="utf-8")
    assert invoke("resubmit", "a:o-3", "--input", str(corrected)).exit_code == 0

    shown = invoke("orders", "show", "a:o-3")
    plain = invoke("orders", "show", "a:o-1")

    assert shown.exit_code == 0, shown.output
    assert "input corrections" in shown.output
    assert "a:o-3:create_shipment:correction-1" in shown.output and "'carrier': 'AIR'" in shown.output
    assert "resubmit (corrected carrier)" in shown.output
    assert "otto" in shown.output
    assert "input corrections" not in plain.output
