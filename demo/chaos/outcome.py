"""The chaos report assembled: the demo report's keys, the chaos counts, and the intruder's part, which
the driver counts as an operator once the intruder's last messages are dead-lettered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from demo.chaos.config import INTRUDER_SETTLE_S, REPLAY_SETTLE_S
from demo.chaos.faults import (
    count_alerts,
)
from demo.chaos.report import (
    WORKFLOW_BEHAVIOURS,
    Chaos,
    count_misrouted_replies,
    max_recovery_s,
    unexercised,
)
from demo.intruder.attacks import Attack, AttackKind, attack_counts
from demo.intruder.effects import (
    CrossClientEffects,
    OperatorFindings,
    count_cross_client_effects,
    flood_alerts,
    settled_own_orders,
)
from demo.intruder.intruder import Intruder
from demo.intruder.operator import OperatorSession, operator_token, replayed_victims, victim_etags
from demo.outcome import (
    STORE_TIME_SLACK_S,
    all_records,
    build_report,
    catalog_records,
)
from demo.system import DemoSystem, Settling
from devhost.queues.factory import StorageQueueFactory
from operator_api.alerts import MAX_LIMIT
from operator_api.deadletters import every_dead_letter
from orderflow.records import StateRecord
from orderflow.settings import Settings
from orderflow_client.client import OrderflowClient
from orderflow_client.operator_client import OperatorApiClient


def chaos_report(
    system: DemoSystem,
    chaos_clients: list[OrderflowClient],
    settling: Settling,
    chaos: Chaos,
    *,
    processes: int,
    clients: int,
    asked: Mapping[str, Any],
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The chaos report (its own keys, the demo report's others, then ``unexercised``) and the
    mismatched orders."""
    attacker = chaos.attacker
    others = [attacker.client.client_id] if attacker is not None else []
    offset_s = chaos.skewed.offset_s if chaos.skewed is not None else 0.0
    demo_report, mismatched = build_report(
        system,
        chaos_clients,
        settling,
        processes=processes,
        kills=len(chaos.killer.kills) if chaos.killer is not None else 0,
        others=others,
        clock_slack_s=STORE_TIME_SLACK_S,  # the skewed host stamps on the store's time too
    )
    intruder_report = _intruder_report(system, attacker, settling) if attacker is not None else {}
    records = catalog_records(all_records(system.stores.state), others)
    report: dict[str, Any] = {
        "orders": len(system.catalog.orders),
        "settled": demo_report["submitted"] - demo_report["not_terminal"],
        "not_terminal": demo_report["not_terminal"],
        "duplicate_effects": demo_report["duplicate_effects"],
        "uncompensated_effects": demo_report["uncompensated_effects"],
        "misrouted_replies": count_misrouted_replies(
            {c.reply_queue: c.replies.received for c in chaos_clients}, settling.owners
        )
        + sum(c.replies.foreign for c in chaos_clients)
        + intruder_report.pop("intruder_misrouted_replies", 0),
        "cross_client_effects": intruder_report.pop("cross_client_effects", 0),
        "max_recovery_s": max_recovery_s(records),
        **chaos.counts(system.run_dir),
        "clock_offset_s": offset_s,
        "clock_skew_alerts": count_alerts(system.run_dir, "clock_skew"),
        "clients": clients,
        "duplicate_replies_dropped": sum(c.replies.duplicates for c in chaos_clients),
        **intruder_report,
    }
    report.update({k: v for k, v in demo_report.items() if k not in report})
    report["unexercised"] = unexercised(report, **asked, behaviours=WORKFLOW_BEHAVIOURS)
    return report, mismatched


def _intruder_report(system: DemoSystem, attacker: Intruder, settling: Settling) -> dict[str, Any]:
    """The intruder's keys of the report: ``cross_client_effects`` (and by kind),
    ``intruder_misrouted_replies`` (replies it got for an order id it never submitted, for
    ``misrouted_replies``), ``intruder_attacks`` per kind, ``intruder_refusals`` (403s on foreign queues),
    ``intruder_orders`` and ``intruder_orders_settled``, ``intruder_replays`` and
    ``intruder_conflict_alerts``.

    Once its last messages are dead-lettered and its own orders settled (or :data:`INTRUDER_SETTLE_S`
    passed), the driver acts as an operator (:func:`_as_operator`) and counts what it was shown too.
    """
    attacks = attacker.snapshot()
    # The account key's factory: only it may read the intruder's dead-letter queue.
    with StorageQueueFactory.from_connection_string(system.endpoints.storage_connection_string) as queues:

        def count(operator: OperatorFindings | None) -> tuple[CrossClientEffects, list[StateRecord]]:
            attacker.sdk.poll()
            records = all_records(system.stores.state)
            effects = count_cross_client_effects(
                records,
                intruder=attacker.client,
                clients=system.clients,
                owners=settling.owners,
                attacks=attacks,
                dead_letters=every_dead_letter(queues, attacker.client.inbound_queue),
                operator=operator,
            )
            return effects, records

        _await_refusals(lambda: count(None), attacker.client.client_id, INTRUDER_SETTLE_S)
        findings = _as_operator(system, attacker, attacks, lambda f: count(f)[0])
        effects, records = count(findings)
    own, settled = settled_own_orders(records, attacker.client.client_id)
    mine = attacker.own_order_ids()
    flood = flood_alerts(findings.alerts, attacker.client.client_id)
    return {
        "cross_client_effects": effects.total,
        "intruder_misrouted_replies": count_misrouted_replies(
            {attacker.client.reply_queue: attacker.sdk.replies.received},
            dict.fromkeys(mine, attacker.client.reply_queue),
        )
        + attacker.sdk.replies.foreign,
        "cross_client_effects_by_kind": vars(effects).copy(),
        "intruder_attacks": attack_counts(attacks),
        "intruder_refusals": sum(1 for a in attacks if a.refused),
        "intruder_orders": own,
        "intruder_orders_settled": settled,
        "intruder_replays": len(findings.replayed),
        "intruder_conflict_alerts": {"stored": len(flood), "count": sum(a.count for a in flood)},
    }


def _await_refusals(
    count: Callable[[], tuple[CrossClientEffects, list[StateRecord]]], client_id: str, within_s: float
) -> None:
    """Count every second until every attack was refused as expected and the intruder's own orders
    settled, or ``within_s`` seconds passed."""
    deadline = time.monotonic() + within_s
    while True:
        effects, records = count()
        own, settled = settled_own_orders(records, client_id)
        if (effects.attack_unrefused == 0 and settled == own) or time.monotonic() >= deadline:
            return
        time.sleep(1.0)


def _as_operator(
    system: DemoSystem,
    attacker: Intruder,
    attacks: Sequence[Attack],
    count: Callable[[OperatorFindings], CrossClientEffects],
) -> OperatorFindings:
    """The driver as an operator, through the operator API (:mod:`demo.intruder.operator`): list the
    intruder's dead letters, replay its ``correlation_id`` attacks, wait (up to :data:`REPLAY_SETTLE_S`)
    for the replays to be dead-lettered again, list them again, and read the stored alerts; the ETags
    of the victim records the replays name are read before and after."""
    queue = attacker.client.inbound_queue
    correlation = {a.message_id for a in attacks if a.kind is AttackKind.CORRELATION_ID}
    victims = replayed_victims(attacks)
    with OperatorApiClient(system.api_url, token=operator_token()) as api:
        session = OperatorSession(api)
        findings = session.findings
        before = victim_etags(system.stores.state, victims)
        session.replay(queue, session.dead_letters(queue), correlation)
        deadline = time.monotonic() + REPLAY_SETTLE_S
        while count(findings).attack_unrefused and time.monotonic() < deadline:
            time.sleep(1.0)
        session.dead_letters(queue)
        after = victim_etags(system.stores.state, victims)
        findings.victims_changed = sum(1 for key, etag in after.items() if before.get(key) != etag)
        findings.alerts = session.alerts()
    findings.alert_page = MAX_LIMIT
    findings.alert_window_s = Settings.load(env=system.env).alerts.ALERT_WINDOW_S
    return findings
