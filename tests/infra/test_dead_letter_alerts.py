"""The Azure dead-letter alerts: one per queue (split by ``EntityName``), at once on orderflow's own queues,
only above a threshold on a client's queues, which a client can fill at will by resending a refused
message (docs/deploy.md, "Alerts")."""

from __future__ import annotations

from typing import Any

import pytest

from orderflow.settings import Settings
from orderflow.workflows import agent_names
from tests.infra.bicep_model import Template
from tests.infra.test_app_against_infra import PARAMS, ROOT

pytestmark = pytest.mark.unit


def dead_letter_criteria() -> dict[str, dict[str, Any]]:
    """The ``DeadletteredMessages`` criterion of each metric alert rule, by the rule's name."""
    template = Template(ROOT / "infra" / "main.bicep", PARAMS)
    return {
        rule.ref.name: criterion
        for rule in template.all_resources()
        if rule.type == "Microsoft.Insights/metricAlerts"
        for criterion in rule.properties["criteria"]["allOf"]
        if criterion["metricName"] == "DeadletteredMessages"
    }


def test_internal_queues_fire_on_any_dead_letter_and_client_queues_above_a_threshold_each() -> None:
    criteria = dead_letter_criteria()
    assert len(criteria) == 2, sorted(criteria)
    (internal,) = (c for name, c in criteria.items() if "client" not in name)
    (clients,) = (c for name, c in criteria.items() if "client" in name)
    settings = Settings.load({})
    agents = {settings.queues.agent_queue(name) for name in agent_names()}
    own = agents | {settings.queues.AGENT_RESPONSES_QUEUE}

    [internal_split] = internal["dimensions"]
    assert (internal_split["name"], internal_split["operator"], set(internal_split["values"])) == (
        "EntityName",
        "Include",
        own,
    )
    assert (internal["operator"], internal["threshold"], internal["timeAggregation"]) == (
        "GreaterThan",
        0,
        "Maximum",
    )
    # Every other queue (each client's inbound and reply queue) is a series of its own, over a threshold.
    [client_split] = clients["dimensions"]
    assert (client_split["name"], client_split["operator"], set(client_split["values"])) == (
        "EntityName",
        "Exclude",
        own,
    )
    assert clients["operator"] == "GreaterThan" and clients["threshold"] >= 1
