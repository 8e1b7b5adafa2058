"""The handlers of the routes beside the orders: queues and their dead letters, alerts, the supervisor,
activity over time, and what the web console needs before it has a token (its sign-in settings and its
files) (docs/operator-api.md)."""

from __future__ import annotations

from operator_api.activity import activity, activity_window
from operator_api.alerts import alert_query, list_alerts, supervisor_status
from operator_api.answers import OperatorResponse, Refused
from operator_api.console import console_file
from operator_api.deadletters import (
    NO_SUCH_DEAD_LETTER,
    NotReplayed,
    deployment_queue,
    deployment_queues,
    find_dead_letter,
    purge_dead_letters,
    replay_dead_letter,
    validate_dead_letter_id,
)
from operator_api.routing import Call, OperatorApiSections
from operator_api.schemas import (
    ConsoleConfig,
    DeadLetterList,
    EmptyBody,
    PreviousReplay,
    PurgeAnswer,
    PurgeBody,
    QueueAnswer,
    QueueList,
    ReplayAnswer,
)
from operator_api.views import dead_letter_answer
from orderflow.dependencies import Dependencies
from orderflow.messages import decode_json_object, validate_message
from orderflow.queues.base import DeadLetterQueues
from orderflow.records import format_utc
from orderflow.settings import OperatorApi


def _dead_letter_queues(deps: Dependencies) -> DeadLetterQueues:
    if deps.dead_letters is None:
        raise Refused(503, "NotConfigured", "this host reads no dead-letter queues")
    return deps.dead_letters


def queue_list(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /queues``: the deployment's queues whose dead letters may be read."""
    call.only()
    queues = [
        QueueAnswer(name=q.name, kind=q.kind, owner=q.owner)
        for q in deployment_queues(sections.clients, sections.queues)
    ]
    return OperatorResponse(200, QueueList(queues=queues).to_body())


def dead_letter_list(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /deadletters/{queue}``: a page of the queue's dead letters."""
    call.only("limit", "continuation")
    limit = call.limit("limit", default=20, most=100)
    queues = _dead_letter_queues(deps)
    name = deployment_queue(sections.clients, sections.queues, call.params["queue"])
    try:
        page = queues.dead_letter_page(name, max_messages=limit, continuation=call.query.get("continuation"))
    except ValueError as invalid:
        raise Refused(400, "InvalidContinuation", str(invalid)) from None
    answer = DeadLetterList(
        queue=name,
        dead_letters=[dead_letter_answer(d, name, sections.clients) for d in page.items],
        continuation=page.continuation,
    )
    return OperatorResponse(200, answer.to_body())


def dead_letter_show(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /deadletters/{queue}/{deadLetterId}``: one dead letter."""
    call.only()
    queues = _dead_letter_queues(deps)
    name, dead_letter_id = (
        deployment_queue(sections.clients, sections.queues, call.params["queue"]),
        call.params["deadLetterId"],
    )
    found = find_dead_letter(queues, name, validate_dead_letter_id(dead_letter_id))
    if found is None:
        raise Refused(404, NO_SUCH_DEAD_LETTER, f"no dead letter {dead_letter_id} on {name}")
    return OperatorResponse(200, dead_letter_answer(found, name, sections.clients).to_body())


def dead_letter_replay(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``POST /deadletters/{queue}/{deadLetterId}/replay``: re-send a dead letter and delete it."""
    if call.body.strip():
        validate_message(EmptyBody, decode_json_object(call.body))
    call.only()
    queues = _dead_letter_queues(deps)
    name, dead_letter_id = call.params["queue"], validate_dead_letter_id(call.params["deadLetterId"])
    replayed = replay_dead_letter(
        name,
        dead_letter_id,
        call.caller,
        dead_letters=queues,
        queues=deps.queues,
        states=deps.states,
        replays=deps.alerts,
        clock=deps.clock,
        clients=sections.clients,
        queue_names=sections.queues,
        supervisor=sections.supervisor,
    )
    if isinstance(replayed, NotReplayed):
        raise _not_replayed(replayed, name, dead_letter_id)
    answer = ReplayAnswer(
        queue=name,
        replay_message_id=replayed.message_id,
        order_id=replayed.order_id,
        replayed_by=call.caller.audit_id,
        dead_letter=dead_letter_answer(replayed.dead_letter, name, sections.clients),
    )
    return OperatorResponse(200, answer.to_body())


def _not_replayed(refused: NotReplayed, name: str, dead_letter_id: str) -> Refused:
    """``404 NoSuchDeadLetter``, or ``409 AlreadyReplayed`` with the replay that won as ``error.replayed``."""
    previous = refused.previous
    if previous is None:
        return Refused(404, NO_SUCH_DEAD_LETTER, f"no dead letter {dead_letter_id} on {name}")
    message = (
        f"dead letter {dead_letter_id} on {name} was already replayed by {previous.by} at "
        f"{format_utc(previous.at)}, as message {previous.replay_message_id}"
    )
    replayed = PreviousReplay(
        by=previous.by,
        by_name=previous.by_name,
        at=previous.at,
        replay_message_id=previous.replay_message_id,
        order_id=previous.order_id,
    )
    return Refused(409, refused.reason, message, details={"replayed": replayed.to_body()})


def dead_letter_purge(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``POST /deadletters/{queue}/purge``: remove dead letters (or, in a dry run, list them)."""
    call.only()
    request = validate_message(PurgeBody, decode_json_object(call.body) if call.body.strip() else {})
    queues = _dead_letter_queues(deps)
    name = call.params["queue"]
    purged = purge_dead_letters(
        name,
        call.caller,
        dead_letter_id=None
        if request.dead_letter_id is None
        else validate_dead_letter_id(request.dead_letter_id),
        older_than=request.older_than,
        dry_run=request.dry_run,
        dead_letters=queues,
        clients=sections.clients,
        queue_names=sections.queues,
    )
    answer = PurgeAnswer(
        queue=name,
        dry_run=purged.dry_run,
        count=len(purged.dead_letters),
        dead_letters=[dead_letter_answer(d, name, sections.clients) for d in purged.dead_letters],
    )
    return OperatorResponse(200, answer.to_body())


def alerts(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /alerts``: a page of stored alerts, newest first."""
    query, limit, continuation = alert_query(call.query)
    if deps.alerts is None:
        raise Refused(503, "NotConfigured", "this host keeps no alerts")
    listed = list_alerts(deps.alerts, query, limit=limit, continuation=continuation)
    return OperatorResponse(200, listed.to_body())


def supervisor(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /supervisor``: who sweeps, the latest sweeps and the stuck-orders gauge."""
    if deps.alerts is None:
        raise Refused(503, "NotConfigured", "this host keeps no supervisor status")
    status = supervisor_status(deps.alerts, call.query, now=deps.clock.now())
    return OperatorResponse(200, status.to_body())


def activity_over_time(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /activity``: alerts, dead letters, recoveries and the stuck-orders gauge, bucketed."""
    window = activity_window(call.query, now=deps.clock.now())
    if deps.alerts is None:
        raise Refused(503, "NotConfigured", "this host keeps no alerts or sweep tallies")
    answer = activity(
        window,
        alerts=deps.alerts,
        dead_letters=deps.dead_letters,
        clients=sections.clients,
        queue_names=sections.queues,
    )
    return OperatorResponse(200, answer.to_body())


def _console_config(api: OperatorApi) -> ConsoleConfig:
    sign_in = api.console_sign_in()
    if sign_in is None:
        return ConsoleConfig(authority=None, client_id=None, scope=None)
    authority, client_id, scope = sign_in
    return ConsoleConfig(authority=authority, client_id=client_id, scope=scope)


def console_config(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /console-config`` (no token): how the console signs operators in."""
    return OperatorResponse(200, _console_config(sections.operator_api).to_body())


def console_folder(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /console`` (no token): redirected to the folder, which the page's relative module paths need."""
    return OperatorResponse(308, {}, {"Location": call.path + "/"})


def console(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /console/{*file}`` (no token): one of the web console's files, with its headers."""
    authority = _console_config(sections.operator_api).authority
    found = console_file(call.params["file"], authority=authority)
    if found is None:
        raise Refused(404, "NoSuchRoute", f"no console file {call.path[:200]!r}")
    content, headers = found
    return OperatorResponse(200, {}, headers, raw=content)
