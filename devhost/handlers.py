"""The host's handlers of the submission and agent queues: each message parsed and handed to its role
function with this process's dependencies."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from agents.agent import TakenRequests, handle_request
from agents.services import HttpRemoteService
from devhost.loops import Wakeups
from intake.client_admission import ClientAdmission
from intake.submission import IntakeOutcome, handle_intake_message
from orderflow.attempts import AttemptStarts
from orderflow.clients import RegisteredClient
from orderflow.dependencies import Dependencies, OrderCache
from orderflow.queues.base import ReceivedMessage
from orderflow.settings import Settings

STARTER_WAKEUP = "@starter"
"""The :class:`Wakeups` event that runs the starter early: set once a submission has written a
``Pending`` record, in this process and, through the wake-up channel, in the others (not a queue name:
no queue name holds ``@``)."""


def submission_handler(
    deps: Dependencies,
    client: RegisteredClient,
    settings: Settings,
    *,
    admission: ClientAdmission | None,
    order_cache: OrderCache | None,
    wakeups: Wakeups,
    claim_on_submit: Callable[[], AbstractContextManager[AttemptStarts | None]] = nullcontext,
) -> Callable[[ReceivedMessage], None]:
    """The handler of ``client``'s inbound queue: the client is the queue's, never the body's.

    Args:
        deps: The process's dependencies (its queues wake its own loops).
        client: The registered client whose inbound queue this is.
        settings: The settings whose sections the intake reads.
        admission: The process's admission control, or None to admit everything.
        order_cache: The cache an order this handler creates is put in, or None.
        wakeups: Where an accepted order the submission did not start, or a cancel, wakes the starters
            (:data:`STARTER_WAKEUP`).
        claim_on_submit: Entered once per message, around its handling: where this process starts a new
            order's attempt at once (:func:`intake.claim_on_submit.start_at_once`), or None (no
            orchestrator here, or no room); the room it took ends when the message's handling does.
    """

    def handle(message: ReceivedMessage) -> None:
        with claim_on_submit() as starts:
            result = handle_intake_message(
                message.body,
                client=client,
                reply_to=message.reply_to,
                orders=deps.orders,
                states=deps.states,
                queues=deps.queues,
                clock=deps.clock,
                steps=settings.steps,
                starter=settings.starter,
                queue_names=settings.queues,
                admission=admission,
                order_cache=order_cache,
                message_id=message.message_id,
                replays=deps.alerts,
                claim_on_submit=starts,
            )
        pending = result.outcome is IntakeOutcome.ACCEPTED and not result.started
        if pending or result.outcome is IntakeOutcome.CANCEL:
            # A record may be Pending now: the starters claim it at once, not at their next tick,
            # in this process and (through the wake-up channel) the others; the claim's ETag
            # condition settles which one wins.
            wakeups.notify(STARTER_WAKEUP)

    return handle


def agent_handler(
    deps: Dependencies, settings: Settings, service: HttpRemoteService
) -> Callable[[ReceivedMessage], None]:
    """The handler of ``service``'s agent request queue, with the log of the requests it has taken (and
    the agents and queues sections of ``settings``)."""
    taken = TakenRequests()

    def handle(message: ReceivedMessage) -> None:
        handle_request(
            message.body,
            delivery_count=message.delivery_count,
            service=service,
            queues=deps.queues,
            clock=deps.clock,
            agents=settings.agents,
            queue_names=settings.queues,
            taken=taken,
            breakers=deps.breakers,
        )

    return handle
