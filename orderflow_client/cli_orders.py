"""The operator's and the reviewer's commands on orders, through the operator API: ``status``,
``orders list`` and ``orders show``, ``review``, ``compensate``, ``resubmit``, ``suspend`` and ``resume``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import Field, ValidationError
from rich.table import Table

from orderflow.errors import InvalidMessage, OrderflowError
from orderflow.messages import NOT_AN_OBJECT, decode_json_object, json_type
from orderflow.records import (
    CompensationEntry,
    LastError,
    Model,
    ProcessState,
    RetryBudget,
    ReviewDecision,
    StepState,
    UndoStatus,
    UtcDatetime,
)
from orderflow_client.cli_common import (
    OrderKey,
    call_operator_api,
    check_order_key,
    connect_operator_api,
    console,
    fail,
    markup,
    row,
    state_of,
)
from orderflow_client.cli_options import (
    ApiUrl,
    ClientFilter,
    FailedSinceFilter,
    StateFilter,
    StuckForFilter,
    TokenFile,
    VersionFilter,
    order_filters,
)
from orderflow_client.operator_client import OperatorAnswer, OperatorApiClient
from orderflow_client.order_render import order_panel, orders_table, shown

commands = typer.Typer()
"""The commands on orders, added to the ``orderflow`` command (:mod:`orderflow_client.cli`)."""


@commands.command()
def compensate(
    order_id: OrderKey,
    reason: Annotated[str | None, typer.Option(help="Why, kept with the order.")] = None,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Operator: stop an order and undo it, or retry a compensation that ended CompensationFailed.

    Calls the operator API with your token (app role orderflow.operator); the API records who you are.
    Exits 1 when it refuses (the order is finished, past its point of no return ...), 2 on bad input.
    """
    answer = call_operator_api(
        order_id, api_url, token_file, lambda client: client.compensate(order_id, reason=reason)
    )
    console.print(
        f"compensation of {markup(order_id)} accepted ({markup(answer.body.get('outcome'))}); the order "
        f"is {markup(state_of(answer))}. `orderflow orders show {markup(order_id)}` shows how it goes on."
    )


@commands.command()
def review(
    order_id: OrderKey,
    approve: Annotated[bool, typer.Option("--approve", help="Approve: the order goes on.")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Reject: the order is compensated.")] = False,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Reviewer: approve or reject an order awaiting review; the order goes on, or is compensated.

    Give exactly one of --approve and --reject (exit 2 otherwise). Calls the operator API with your
    token (app role orderflow.reviewer); the API records who you are. The first decision wins: exits 1
    when the order is not awaiting review or another decision is in force.
    """
    if approve == reject:
        fail(
            "give one of --approve and --reject"
            if not approve
            else "--approve and --reject exclude each other; give one",
            code=2,
        )
    answer = call_operator_api(
        order_id, api_url, token_file, lambda client: client.review(order_id, approve=approve)
    )
    console.print(
        f"{'approval' if approve else 'rejection'} of {markup(order_id)} recorded, decided by "
        f"{markup(answer.body.get('decidedBy'))}; the order is {markup(state_of(answer))}."
    )


orders_app = typer.Typer(
    help="Operator: list and show orders through the operator API.", no_args_is_help=True
)
commands.add_typer(orders_app, name="orders")

MAX_TIMELINE_PAGES = 100
"""Most timeline pages ``orders show`` reads (10 chunks of 17 entries each)."""


def _whole_timeline(client: OperatorApiClient, order_id: str) -> OperatorAnswer:
    """Every timeline entry of the order, read page by page; one answer holding them all."""
    entries: list[Any] = []
    token: str | None = None
    for _ in range(MAX_TIMELINE_PAGES):
        page = client.get_timeline(order_id, continuation=token)
        if not page.ok:
            return page
        entries += page.body.get("entries") or []
        token = page.body.get("continuation")
        if not token:
            break
    return OperatorAnswer(200, {"entries": entries})


@orders_app.command("show")
def orders_show(order_id: OrderKey, api_url: ApiUrl = None, token_file: TokenFile = None) -> None:
    """Show an order: state, steps, compensation log, retry budget, replies sent and its timeline.

    Reads it through the operator API (app role orderflow.operator or orderflow.reviewer). The ETag
    printed is the version shown: `orderflow resubmit --etag` acts only on that version.
    """
    view = call_operator_api(order_id, api_url, token_file, lambda client: client.get_order(order_id))
    timeline = call_operator_api(
        order_id, api_url, token_file, lambda client: _whole_timeline(client, order_id)
    )
    console.print(order_panel(view.body, timeline=timeline.body["entries"], etag=view.etag))


@orders_app.command("list")
def orders_list(  # noqa: PLR0917 - typer reads each option from a parameter
    state: StateFilter = None,
    client_id: ClientFilter = None,
    workflow_version: VersionFilter = None,
    stuck_for: StuckForFilter = None,
    failed_since: FailedSinceFilter = None,
    limit: Annotated[int, typer.Option(help="Orders per page (1-100).")] = 50,
    continuation: Annotated[str | None, typer.Option(help="The token a previous page printed.")] = None,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """List orders by state, client, workflow version, stuck or failed time, a page at a time."""
    filters = order_filters(state, client_id, workflow_version, stuck_for, failed_since)
    filters.update(limit=limit, continuation=continuation)
    answer = call_operator_api(None, api_url, token_file, lambda client: client.list_orders(**filters))
    console.print(orders_table(answer.body.get("orders") or []))
    token = answer.body.get("continuation")
    if token:
        console.print(shown(f"more: --continuation {token}"))


def _act(
    order_id: str,
    action: str,
    etag: str | None,
    api_url: str | None,
    token_file: Path | None,
    *,
    corrected: dict[str, Any] | None = None,
) -> OperatorAnswer:
    def call(client: OperatorApiClient) -> OperatorAnswer:
        seen = etag
        if seen is None and action == "resubmit":
            current = client.get_order(order_id)
            if not current.ok:
                return current
            seen = current.etag
            console.print(shown(f"acting on {order_id} as it is now: {current.body.get('processState')}"))
        return client.act(order_id, action, if_match=seen, corrected=corrected)

    return call_operator_api(order_id, api_url, token_file, call)


EtagOption = Annotated[
    str | None, typer.Option("--etag", help="The ETag `orders show` printed: act only on that version.")
]


def _corrected_input(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``: a resubmit's corrected input, read as strictly as the API reads the
    body (:func:`orderflow.messages.decode_json_object`: no duplicate key, no NaN, UTF-8 without a
    byte-order mark), so that the file means one thing and the API is sent what it says.

    Raises:
        typer.Exit: 2, after a one-line error, when the file cannot be read or holds no JSON object.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}", code=2)
    try:
        data = decode_json_object(raw)
    except InvalidMessage as exc:
        if exc.reason == NOT_AN_OBJECT:
            fail(f"{path} holds {json_type(json.loads(raw))}: {_INPUT_TAKES}", code=2)
        fail(f"{path} {exc.description.removeprefix('body ')}", code=2)
    if not data:
        fail(f"{path} holds an empty object: {_INPUT_TAKES}", code=2)
    # Sent as plain JSON values (a fraction as a float, as before): the HTTP client encodes no Decimal.
    plain: dict[str, Any] = json.loads(raw)
    return plain


_INPUT_TAKES = '--input takes a JSON object of fields, e.g. {"carrier": "UPS"}'


@commands.command()
def resubmit(
    order_id: OrderKey,
    etag: EtagOption = None,
    input_file: Annotated[
        Path | None,
        typer.Option(
            "--input",
            help='A JSON object file of corrected fields for the failed step, e.g. {"carrier": "UPS"}.',
        ),
    ] = None,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Operator: a new attempt of an Error order from its failed step (with --input, on corrected input
    where the step allows it), or a CompensationFailed order's compensation retried. Conditional on the
    version seen (--etag, else the one read now): exits 1 when someone changed the order since (412), it
    is in another state or the step takes no such correction (409), or a value is refused (422)."""
    corrected = None if input_file is None else _corrected_input(input_file)
    answer = _act(order_id, "resubmit", etag, api_url, token_file, corrected=corrected)
    fields = "" if corrected is None else f", corrected {', '.join(sorted(corrected))}"
    console.print(
        shown(
            f"resubmitted {order_id} ({answer.body.get('outcome')}{fields}); the order is {state_of(answer)}."
        )
    )


@commands.command()
def suspend(
    order_id: OrderKey, etag: EtagOption = None, api_url: ApiUrl = None, token_file: TokenFile = None
) -> None:
    """Operator: suspend an order: it takes no new step (nothing claims or recovers it) until resumed."""
    answer = _act(order_id, "suspend", etag, api_url, token_file)
    console.print(shown(f"suspended {order_id}; the order is {state_of(answer)}."))


@commands.command()
def resume(
    order_id: OrderKey, etag: EtagOption = None, api_url: ApiUrl = None, token_file: TokenFile = None
) -> None:
    """Operator: resume a suspended order."""
    answer = _act(order_id, "resume", etag, api_url, token_file)
    console.print(shown(f"resumed {order_id}; the order is {state_of(answer)}."))


def _undo_progress(entry: CompensationEntry, state: ProcessState) -> str:
    """What ``status`` says of a compensation log entry's undo. ``Pending`` is only shown while a
    compensation is under way or stuck (the undo is still to run); otherwise the entry is a record of how
    to undo the step, which runs only if the order is compensated, or never (it ended Processed)."""
    if entry.status != UndoStatus.PENDING:
        return entry.status
    if entry.undo is None:
        return "(cannot be undone)"
    if state is ProcessState.PROCESSED:
        return "not needed (the order was Processed)"
    if state in (ProcessState.COMPENSATING, ProcessState.COMPENSATION_FAILED):
        return "Pending"
    return "not run (only if the order is compensated)"


class _ReviewShown(Model):
    """What ``status`` shows of an order's review (the view leaves the host's response queue out)."""

    step: str
    deadline: UtcDatetime
    decision: ReviewDecision | None = None
    decided_by: str | None = None
    decided_by_name: str | None = None


class _StatusShown(Model):
    """What ``status`` shows of the operator API's view of an order's state record (``GET
    /orders/{orderId}``: the record's stored form, camelCase), read back into the core's types so that
    each value is shown as the record holds it."""

    process_state: ProcessState
    locked_by: str | None = None
    complete_by: UtcDatetime | None = None
    attempt: int = 0
    failure_count: int = 0
    next_attempt_at: UtcDatetime | None = None
    retry_budget: RetryBudget
    steps: dict[str, StepState] = Field(default_factory=dict)
    last_error: LastError | None = None
    compensation_log: list[CompensationEntry] = Field(default_factory=list)
    compensation_error: LastError | None = None
    compensation_failures: int = 0
    review: _ReviewShown | None = None
    cancel_requested_at: UtcDatetime | None = None
    stop_requested_by: str | None = None
    stop_requested_by_name: str | None = None


def _order_view(order_id: str, api_url: str | None, token_file: Path | None) -> _StatusShown:
    """The order's state record as the operator API shows it.

    Raises:
        typer.Exit: 2, after a one-line error, on a bad order key, no URL or token, or a 400; 1 when the
            order is unknown, the API refused or failed, could not be reached, or answered no order view.
    """
    check_order_key(order_id)
    with connect_operator_api(api_url, token_file) as client:
        try:
            answer = client.get_order(order_id)
        except OrderflowError as exc:
            fail(f"cannot read order {order_id}: {exc.detail}", code=1)
    if answer.status == 404:
        fail(f"no order {order_id}", code=1)
    if not answer.ok:
        refused = f"{answer.status} {answer.error_code}: {answer.error_message}"
        fail(f"cannot read order {order_id}: {refused}", code=2 if answer.status == 400 else 1)
    try:
        return _StatusShown.model_validate(answer.body)
    except ValidationError as exc:
        fail(
            f"cannot read order {order_id}: the API's answer is not an order: {exc.errors()[0]['msg']}",
            code=1,
        )


def _state_table(order_id: str, record: _StatusShown) -> Table:
    table = Table(title=shown(f"order {order_id}"))
    table.add_column("field")
    table.add_column("value")
    for name in ("process_state", "locked_by", "complete_by", "attempt", "failure_count", "next_attempt_at"):
        row(table, name, str(getattr(record, name)))
    row(table, "retry_budget", f"{record.retry_budget.spent}/{record.retry_budget.limit}")
    for name, step in record.steps.items():
        row(table, f"step {name}", f"{step.status.value} (attempts {step.attempts}) {step.result or ''}")
    if record.last_error:
        # A Processed order's lastError is history (a failure it recovered from), not its outcome.
        label = "last_error (recovered)" if record.process_state.value == "Processed" else "last_error"
        row(table, label, f"{record.last_error.kind} {record.last_error.code}: {record.last_error.message}")
    for entry in record.compensation_log:
        undo = entry.undo or "irreversible"
        progress = _undo_progress(entry, record.process_state)
        row(table, f"undo {entry.step}", f"{undo} {progress} {entry.undo_result or entry.data or ''}")
    if record.compensation_error:
        error = record.compensation_error
        row(
            table,
            "compensation_error",
            f"{error.step} {error.code}: {error.message} (stuck {record.compensation_failures} times)",
        )
    if record.review:
        review = record.review
        name = f" ({review.decided_by_name})" if review.decided_by_name else ""
        decided = f"{review.decision.value} by {review.decided_by}{name}" if review.decision else "undecided"
        row(table, "review", f"{review.step}: {decided}, deadline {review.deadline.isoformat()}")
    if record.cancel_requested_at:
        row(
            table,
            "stop requested",
            f"{record.stop_requested_by or 'client'}"
            f"{f' ({record.stop_requested_by_name})' if record.stop_requested_by_name else ''}"
            f" at {record.cancel_requested_at.isoformat()}",
        )
    return table


@commands.command()
def status(order_id: OrderKey, api_url: ApiUrl = None, token_file: TokenFile = None) -> None:
    """Show an order's state record: state, lock, deadline, budget, steps, undo log, review, stop.

    Reads it through the operator API (app role orderflow.operator or orderflow.reviewer); `orders show`
    adds the timeline and the ETag. Exits 1 when there is no such order or the API refused, 2 on bad input.
    """
    console.print(_state_table(order_id, _order_view(order_id, api_url, token_file)))
