"""The alert rules' KQL queries name metrics and dimensions orderflow emits, with values it emits.

Each ``scheduledQueryRules`` query of the evaluated templates (``bicep_model``) is read for the metric
names it filters on (``name == "..."``), the custom dimensions it reads (``customDimensions.<key>``) and
the values it compares them with, and each is checked against :func:`orderflow.telemetry.metric_dimensions`
and the values the code reports. A misspelt metric, dimension or value fails here, where an alert that
never fires would otherwise go unnoticed.
"""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orderflow import telemetry
from orderflow.protocol.transitions.supervision import given_up_error as _given_up_error
from tests.infra.bicep_model import Template
from tests.infra.test_app_against_infra import PARAMS, ROOT

pytestmark = pytest.mark.unit

_METRIC = re.compile(r'\bname\s*==\s*"([^"]+)"')
_DIMENSION = re.compile(r"customDimensions\.(\w+)")
_FILTER = re.compile(r'tostring\(customDimensions\.(\w+)\)\s*==\s*"([^"]*)"')


def _known_values() -> dict[tuple[str, str], set[str]]:
    """The values the code reports, by (metric, dimension), for the dimensions queries compare."""
    roles = ("orderflow", "activities", "supervisor", "intake", "agents")
    sources = [p for d in roles for p in (ROOT / d).rglob("*.py")]
    raised = {name for p in sources for name in re.findall(r'telemetry\.alert\(\s*"(\w+)"', p.read_text())}
    now = datetime(2026, 1, 1, tzinfo=UTC)
    reasons = {_given_up_error(None, out_of_budget, None, now).code for out_of_budget in (True, False)}
    return {(telemetry.ALERTS, "alert"): raised, (telemetry.GAVE_UP, "reason"): reasons}


def alert_queries(template: Template) -> dict[str, str]:
    """Every log alert's query, by the rule's resource name."""
    return {
        rule.ref.name: criterion["query"]
        for rule in template.all_resources()
        if rule.type == "Microsoft.Insights/scheduledQueryRules" and not rule.existing
        for criterion in rule.properties["criteria"]["allOf"]
    }


def query_terms(query: str) -> set[tuple[str, str | None, str | None]]:
    """``(metric, dimension, value)`` for each metric a query filters on: ``(metric, None, None)``, and
    ``(metric, dimension, value)`` for a dimension compared in the same ``or`` branch of its ``where``,
    ``(metric, dimension, None)`` for one it reads elsewhere (``summarize ... by``)."""
    terms: set[tuple[str, str | None, str | None]] = set()
    stages = [stage.strip() for stage in query.split("|")]
    metrics = set(_METRIC.findall(query))
    for stage in stages:
        if stage.startswith("where") and _METRIC.search(stage):
            for branch in stage.removeprefix("where").split(" or "):
                for metric in _METRIC.findall(branch):
                    terms.add((metric, None, None))
                    terms.update((metric, key, value) for key, value in _FILTER.findall(branch))
        else:
            read = set(_DIMENSION.findall(stage))
            terms.update((metric, key, None) for metric in metrics for key in read)
    return terms


def check_alert_queries(template: Template) -> None:
    dimensions = telemetry.metric_dimensions()
    known = _known_values()
    queries = alert_queries(template)
    assert len(queries) == 3, sorted(queries)
    for rule, query in queries.items():
        terms = query_terms(query)
        assert terms, f"{rule}: the query filters on no orderflow metric"
        for metric, key, value in terms:
            assert metric in dimensions, f"{rule}: orderflow emits no metric {metric!r}"
            if key is not None:
                assert key in dimensions[metric], f"{rule}: {metric} has no dimension {key!r}"
            if key is not None and value is not None:
                assert (metric, key) in known, f"{rule}: no known values of {metric}.{key}: add them here"
                assert value in known[(metric, key)], f"{rule}: {metric}.{key} is never {value!r}"


def test_every_alert_query_names_what_orderflow_emits() -> None:
    check_alert_queries(Template(ROOT / "infra" / "main.bicep", PARAMS))


def test_the_budget_alert_counts_refused_steps_and_supervisor_give_ups() -> None:
    queries = alert_queries(Template(ROOT / "infra" / "main.bicep", PARAMS))
    (budget,) = (q for name, q in queries.items() if "budget" in name)
    assert {(m, k, v) for m, k, v in query_terms(budget) if k != "step"} == {
        (telemetry.BUDGET_EXHAUSTED, None, None),
        (telemetry.GAVE_UP, None, None),
        (telemetry.GAVE_UP, "reason", "retry_budget_exhausted"),
    }


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('name == "orderflow.stuck_orders"', 'name == "orderflow.stuck_order"'),
        ("tostring(customDimensions.reason)", "tostring(customDimensions.reasons)"),
        ('== "retry_budget_exhausted"', '== "budget_exhausted"'),
        ('alert) == "compensation_failed"', 'alert) == "compensation_failure"'),
        ("by step = tostring(customDimensions.step)", "by step = tostring(customDimensions.stepName)"),
    ],
)
def test_a_misspelt_query_fails(tmp_path: Path, old: str, new: str) -> None:
    infra = tmp_path / "infra"
    shutil.copytree(ROOT / "infra", infra)
    alerts = infra / "modules" / "alerts.bicep"
    text = alerts.read_text()
    assert text.count(old) == 1, old
    alerts.write_text(text.replace(old, new))
    with pytest.raises(AssertionError):
        check_alert_queries(Template(infra / "main.bicep", PARAMS))
