"""``orderflow bulk resubmit|suspend|resume``: one operator action on every order a filter matches.

The filter is ``orders list``'s (same options, same meaning). Without ``--execute`` a command is a dry
run: it pages through the matching orders through the operator API and prints what it would do to each,
touching nothing. With ``--execute`` it lists them the same way, then calls each order's own route
(``POST /orders/{orderId}/{action}``) with ``If-Match`` of the version it listed, so an order written
since the listing is refused (412), never acted on unseen; each call is the per-order action, audited
under the caller's principal on the order's timeline. Orders the action does not apply to
(:func:`orderflow.operator_actions.action_refusal`) are skipped, not sent. ``--limit`` caps the orders
listed (default :data:`DEFAULT_LIMIT`), so a mistyped filter cannot reach the whole store.
docs/operator-api.md#bulk-actions has the details.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from orderflow.client_text import visible
from orderflow.errors import TransientError
from orderflow.operator_actions import OperatorAction, Refusal, action_refusal
from orderflow.records import ProcessState
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
from orderflow_client.order_render import shown

DEFAULT_LIMIT = 1000
"""Most orders one bulk command lists (and so acts on) unless ``--limit`` says otherwise."""
PAGE_SIZE = 100
"""Orders per ``GET /orders`` page (the API's most)."""
RETRIES = 2
"""Further tries of an action that got no answer, or a ``503``. A retry cannot act twice: it carries the
same ``If-Match``, and once a try has acted that version is gone (``412``). So a ``412`` after a retry may
be the earlier try's success, and the summary says so."""
RETRY_WAIT_S = 1.0
"""Seconds between those tries (the API's ``Retry-After``)."""
_NOT_SENT_STATUSES = (401, 403)
"""A refusal of the caller, not of the order: the rest would be refused alike, so they are not sent."""

OpenClient = Callable[[str | None, Path | None], OperatorApiClient]
"""(``--api-url``, ``--token-file``) -> a client of the operator API; exits 2 when neither works."""


class BulkError(Exception):
    """The listing could not be made: ``detail`` says why; ``code`` is the exit code (2: bad input)."""

    def __init__(self, detail: str, *, code: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code


@dataclass(frozen=True)
class Listed:
    """One matching order as listed: its key, state, version (``etag``, an entity tag) and whether it
    is suspended, with ``skip`` set when the action does not apply to it (it is not sent)."""

    order_id: str
    state: str
    etag: str | None
    suspended: bool
    skip: Refusal | None


@dataclass(frozen=True)
class Plan:
    """What a bulk command found: the listed orders (at most ``limit``) and whether more matched."""

    action: OperatorAction
    orders: list[Listed]
    limit: int
    capped: bool

    @property
    def to_send(self) -> list[Listed]:
        """The orders the action applies to, in listing order."""
        return [order for order in self.orders if order.skip is None]


class Outcome(StrEnum):
    """What became of one order of an executed bulk command."""

    DONE = "done"
    REFUSED = "refused"
    FAILED = "failed"
    NOT_SENT = "not sent"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Result:
    """One order's outcome, with the API's status and ``error.code`` (None when it did not answer)."""

    order_id: str
    outcome: Outcome
    status: int | None = None
    code: str | None = None
    message: str = ""


def _listed(action: OperatorAction, summary: dict[str, Any]) -> Listed:
    state, etag = str(summary.get("processState")), summary.get("etag")
    suspended = bool(summary.get("suspended"))
    try:
        skip = action_refusal(action, ProcessState(state), suspended=suspended)
    except ValueError:
        skip = Refusal("UnknownState", f"order is {state}, a state this command does not know")
    if skip is None and not etag:
        skip = Refusal("NoVersion", "the listing gave no ETag to act on")
    return Listed(str(summary.get("orderId")), state, str(etag) if etag else None, suspended, skip)


def _pages(
    client: OperatorApiClient, filters: dict[str, str | int | None], page_size: int
) -> Iterator[list[Any]]:
    """The orders of each page of the listing, to the last page (the caller stops when it has enough).

    Raises:
        BulkError: the API refused the listing, or handed back a token it had already given.
        TransientError: the API could not be reached.
    """
    token: str | None = None
    seen: set[str] = set()
    while True:
        answer = client.list_orders(**filters, limit=page_size, continuation=token)
        if not answer.ok:
            refused = f"the listing was refused: {answer.status} {answer.error_code}: {answer.error_message}"
            raise BulkError(refused, code=2 if answer.status == 400 else 1)
        yield list(answer.body.get("orders") or [])
        token = answer.body.get("continuation")
        if not token:
            return
        if token in seen:
            raise BulkError("the listing handed back a continuation token it gave before", code=1)
        seen.add(token)


def plan_action(
    client: OperatorApiClient, action: OperatorAction, filters: dict[str, str | int | None], *, limit: int
) -> Plan:
    """List every order ``filters`` match (``GET /orders``, page by page), at most ``limit``, and decide
    for each whether ``action`` applies. Reads past ``limit`` to know whether the cap was hit.

    Raises:
        BulkError: the API refused the listing (a bad filter: ``code`` 2).
        TransientError: the API could not be reached.
    """
    found: dict[str, Listed] = {}
    for orders in _pages(client, filters, min(PAGE_SIZE, limit + 1)):
        for summary in orders:
            listed = _listed(action, summary)
            found.setdefault(listed.order_id, listed)  # an order written while paging may come twice
        if len(found) > limit:
            break
    listed_orders = list(found.values())
    return Plan(action, listed_orders[:limit], limit, capped=len(listed_orders) > limit)


def _send(
    client: OperatorApiClient, action: OperatorAction, order: Listed
) -> tuple[OperatorAnswer | str, int]:
    """The API's answer to the action on ``order`` at its listed version (or why there was none), and
    the number of tries it took."""
    for attempt in range(1, RETRIES + 2):
        last = attempt == RETRIES + 1
        try:
            answer = client.act(order.order_id, action.value, if_match=order.etag)
        except TransientError as exc:
            if last:
                return exc.detail, attempt
        else:
            if answer.status != 503 or last:
                return answer, attempt
        time.sleep(RETRY_WAIT_S)
    raise AssertionError("unreachable: the last try returns")


def act_on(client: OperatorApiClient, action: OperatorAction, order: Listed) -> Result:
    """Send ``action`` for one listed order, conditional on its listed version, and say what became of it:
    done (2xx), refused (a 4xx: stale version, a state the action does not apply to ...), or failed (no
    answer, or a server error, after :data:`RETRIES` further tries)."""
    answer, tries = _send(client, action, order)
    if isinstance(answer, str):
        return Result(order.order_id, Outcome.FAILED, message=answer)
    if answer.ok:
        return Result(
            order.order_id, Outcome.DONE, answer.status, message=str(answer.body.get("outcome", ""))
        )
    message = answer.error_message
    if answer.status == 412 and tries > 1:
        message += f" (after {tries} tries: an earlier one may have acted; `orderflow orders show` says)"
    outcome = Outcome.REFUSED if 400 <= answer.status < 500 else Outcome.FAILED
    return Result(order.order_id, outcome, answer.status, answer.error_code, message)


def execute(client: OperatorApiClient, plan: Plan, console: Console) -> list[Result]:
    """Act on every order of ``plan`` the action applies to, one call each, with a progress bar on
    ``console``; a refusal of the caller (401, 403) stops it, the rest reported as not sent. Returns one
    result per listed order, the skipped ones included."""
    results = [Result(o.order_id, Outcome.SKIPPED, code=o.skip.code) for o in plan.orders if o.skip]
    pending = plan.to_send
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"{plan.action.value}", total=len(pending))
        for n, order in enumerate(pending):
            result = act_on(client, plan.action, order)
            results.append(result)
            progress.advance(task)
            if result.status in _NOT_SENT_STATUSES:
                results += [Result(o.order_id, Outcome.NOT_SENT) for o in pending[n + 1 :]]
                break
    return results


def _would(action: OperatorAction, order: Listed) -> str:
    if order.skip is not None:
        return f"skip: {order.skip.code}: {order.skip.detail}"
    if action is OperatorAction.RESUBMIT:
        if order.state == ProcessState.COMPENSATION_FAILED.value:
            return "retry its compensation"
        return "a new attempt from the failed step"
    if action is OperatorAction.SUSPEND:
        return "suspend: it takes no new step until resumed"
    return "resume"


def plan_table(plan: Plan) -> Table:
    """The dry run's table: each listed order, its state and version, and what the action would do."""
    table = Table(title=f"bulk {plan.action.value}: dry run")
    table.add_column("order", overflow="fold")
    for column in ("state", "suspended", "etag", "would"):
        table.add_column(column, overflow="fold")
    for order in plan.orders:
        cells = (
            order.order_id,
            order.state,
            "yes" if order.suspended else "",
            order.etag or "",
            _would(plan.action, order),
        )
        table.add_row(*(shown(cell) for cell in cells))  # text others wrote
    return table


def plan_summary(plan: Plan, *, executing: bool) -> str:
    """One line: how many orders matched, would be (or are being) acted on and skipped, and the cap."""
    verb = "acting on" if executing else "would act on"
    line = (
        f"{len(plan.orders)} matching orders listed: {verb} {len(plan.to_send)}, "
        f"{len(plan.orders) - len(plan.to_send)} skipped"
    )
    if plan.capped:
        line += (
            f". The cap was hit: more orders match than --limit {plan.limit}; only the first {plan.limit} "
            "are considered (narrow the filter, or raise --limit)"
        )
    return line + "."


def results_table(action: OperatorAction, results: list[Result]) -> Table:
    """The summary of an executed bulk command: a count per outcome, then each order not done."""
    table = Table(title=f"bulk {action.value}: summary")
    for column in ("outcome", "orders"):
        table.add_column(column)
    for outcome in Outcome:
        table.add_row(outcome.value, str(sum(1 for r in results if r.outcome is outcome)))
    return table


def problems_table(results: list[Result]) -> Table | None:
    """Each order refused, failed or not sent, with the API's status and code; None when there is none."""
    problems = [r for r in results if r.outcome in (Outcome.REFUSED, Outcome.FAILED, Outcome.NOT_SENT)]
    if not problems:
        return None
    table = Table(title="not done")
    for column in ("order", "outcome", "status", "code", "message"):
        table.add_column(column, overflow="fold")
    for r in problems:
        cells = (
            r.order_id,
            r.outcome.value,
            "" if r.status is None else str(r.status),
            r.code or "",
            r.message,
        )
        table.add_row(*(shown(cell) for cell in cells))
    return table


BulkLimit = Annotated[
    int, typer.Option(min=1, help="Most orders listed, and so acted on: the cap a mistyped filter meets.")
]
Execute = Annotated[
    bool, typer.Option("--execute", help="Act. Without it the command is a dry run that touches nothing.")
]

_HELP = {
    OperatorAction.RESUBMIT: "a new attempt of each Error order, a compensation retry of each "
    "CompensationFailed one",
    OperatorAction.SUSPEND: "suspend each order still on its way: it takes no new step until resumed",
    OperatorAction.RESUME: "resume each suspended order",
}


_errors = Console(stderr=True, soft_wrap=True)


def _fail(message: str, code: int) -> NoReturn:
    """Print ``message`` as one line on stderr and exit with ``code`` (2: bad input; 1: refused or
    unreachable)."""
    _errors.print(f"[red]error:[/red] {escape(visible(message))}")
    raise typer.Exit(code)


def _run(
    open_client: OpenClient,
    console: Console,
    action: OperatorAction,
    filters: dict[str, str | int | None],
    *,
    limit: int,
    execute_it: bool,
    api_url: str | None,
    token_file: Path | None,
) -> int:
    """List, then print the dry run or act and print the summary; the exit code (0, or 1 when anything
    was refused, failed or not sent)."""
    with open_client(api_url, token_file) as client:
        plan = plan_action(client, action, filters, limit=limit)
        if not execute_it:
            console.print(plan_table(plan))
            console.print(Text(plan_summary(plan, executing=False) + " Nothing was changed: --execute acts."))
            return 0
        console.print(Text(plan_summary(plan, executing=True)))
        results = execute(client, plan, console)
    console.print(results_table(action, results))
    problems = problems_table(results)
    if problems is not None:
        console.print(problems)
    return 1 if problems is not None else 0


def _command(open_client: OpenClient, console: Console, action: OperatorAction) -> Callable[..., None]:
    def command(  # noqa: PLR0917 - typer reads each option from a parameter
        state: StateFilter = None,
        client_id: ClientFilter = None,
        workflow_version: VersionFilter = None,
        stuck_for: StuckForFilter = None,
        failed_since: FailedSinceFilter = None,
        limit: BulkLimit = DEFAULT_LIMIT,
        execute_it: Execute = False,
        api_url: ApiUrl = None,
        token_file: TokenFile = None,
    ) -> None:
        filters = order_filters(state, client_id, workflow_version, stuck_for, failed_since)
        if all(value is None for value in filters.values()):
            _fail(
                "give at least one filter: --state, --client, --workflow-version, --stuck-for, "
                "--failed-since",
                2,
            )
        try:
            code = _run(
                open_client,
                console,
                action,
                filters,
                limit=limit,
                execute_it=execute_it,
                api_url=api_url,
                token_file=token_file,
            )
        except BulkError as exc:
            _fail(exc.detail, exc.code)
        except TransientError as exc:
            _fail(exc.detail, 1)
        if code:
            raise typer.Exit(code)

    command.__doc__ = (
        f"Operator: {_HELP[action]}, for every order the filter matches (those of `orders list`). A dry run "
        "unless --execute; each action is conditional on the version listed (412 if the order changed since)."
    )
    return command


def bulk_commands(open_client: OpenClient, console: Console) -> typer.Typer:
    """The ``bulk`` sub-app: ``resubmit``, ``suspend`` and ``resume`` by filter.

    Args:
        open_client: Makes the operator API's client from ``--api-url`` and ``--token-file``.
        console: Where tables, lines and the progress bar go.
    """
    bulk = typer.Typer(
        help="Operator: resubmit, suspend or resume every order a filter matches (a dry run unless "
        "--execute).",
        no_args_is_help=True,
    )
    for action in OperatorAction:
        bulk.command(action.value)(_command(open_client, console, action))
    return bulk
