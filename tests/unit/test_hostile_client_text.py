"""A client's hostile text (tests/hostile_text.py) sent through the real intake, then every operator
surface that shows it: the local host's operator API over loopback answers valid UTF-8 JSON of the
documented shape, the CLI prints no raw control character (the text made visible, still recognisable),
and the log records written while the messages were handled (made as the hosts make them: see
tests/conftest.py) are one line each with no forged field."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from devhost.operator_http import create_operator_app
from devhost.serving import serve_in_thread, server_url, stop
from operator_api.routing import OperatorApiSections
from operator_api.schemas import (
    ActivityAnswer,
    AlertList,
    DeadLetterAnswer,
    DeadLetterList,
    PurgeAnswer,
    ReplayAnswer,
)
from orderflow import telemetry
from orderflow.client_text import encodable, visible
from orderflow.clock import FakeClock
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow_client import cli
from tests.host_deps import HostDeps
from tests.hostile_text import INBOUND, hostile_cases, raw_controls, send_hostile, unsafe_characters
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps

pytestmark = pytest.mark.unit

API = "/api/operator"


@dataclass(frozen=True)
class Served:
    """The local host's operator API on loopback, over ``deps``."""

    deps: HostDeps
    url: str


@pytest.fixture
def served(trusted: TrustedIssuer) -> Iterator[Served]:
    deps = memory_deps(FakeClock())
    server, thread = serve_in_thread(
        create_operator_app(deps, OperatorApiSections.of(deps.settings), trusted.validator)
    )
    try:
        yield Served(deps, server_url(server))
    finally:
        stop(server, thread)


def _after_every_dead_letter(deps: HostDeps) -> str:
    """A time after every dead letter of the inbound queue was dead-lettered (ISO 8601), for a purge."""
    assert deps.dead_letters is not None
    page = deps.dead_letters.dead_letter_page(INBOUND)
    return (max(d.dead_lettered_at for d in page.items) + timedelta(seconds=1)).isoformat()


def _json(response: httpx.Response, shape: type[BaseModel]) -> dict[str, Any]:
    """The answer's body: strict UTF-8, JSON, of ``shape``."""
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    body: dict[str, Any] = json.loads(response.content.decode("utf-8"))
    shape.model_validate(body)
    return body


@hostile_cases
def test_every_operator_route_that_shows_client_text_answers_valid_json(
    served: Served, trusted: TrustedIssuer, hostile: str
) -> None:
    send_hostile(served.deps, hostile)
    later = _after_every_dead_letter(served.deps)

    with httpx.Client(base_url=served.url + API, headers=trusted.bearer("otto", OPERATOR_ROLE)) as api:
        listed = api.get(f"/deadletters/{INBOUND}", params={"limit": 100})
        assert listed.status_code == 200, listed.content[:300]
        ids = [d["deadLetterId"] for d in _json(listed, DeadLetterList)["deadLetters"]]
        shown = [api.get(f"/deadletters/{INBOUND}/{dead_id}") for dead_id in ids]
        dry_run = api.post(f"/deadletters/{INBOUND}/purge", json={"olderThan": later, "dryRun": True})
        alerts = api.get("/alerts")
        activity = api.get("/activity")
        replayed = api.post(f"/deadletters/{INBOUND}/{ids[0]}/replay")
        purged = api.post(f"/deadletters/{INBOUND}/purge", json={"olderThan": later})

    assert len(ids) == 3
    assert all(answer.status_code == 200 for answer in shown)
    messages = {_json(answer, DeadLetterAnswer)["messageId"] for answer in shown}
    assert any(m.startswith("order ") for m in messages)  # the text is there, not dropped
    assert (dry_run.status_code, _json(dry_run, PurgeAnswer)["count"]) == (200, 3)
    assert alerts.status_code == 200 and _json(alerts, AlertList)["alerts"]
    assert activity.status_code == 200 and _json(activity, ActivityAnswer)
    assert replayed.status_code == 200 and _json(replayed, ReplayAnswer)
    assert (purged.status_code, _json(purged, PurgeAnswer)["count"]) == (200, 2)


def _cli(served: Served, trusted: TrustedIssuer, *args: str) -> bytes:
    env = {
        "ORDERFLOW_API_URL": served.url,
        "ORDERFLOW_TOKEN": trusted.issuer.mint(name="otto", roles=[OPERATOR_ROLE]),
        "COLUMNS": "250000",  # wide enough that no cell is folded: the text is checked whole
    }
    result = CliRunner().invoke(cli.app, list(args), env=env)
    assert result.exit_code == 0, result.output[:2000]
    return result.stdout_bytes


def _recognisable(hostile: str) -> str:
    """What the CLI shows of ``hostile``: the API's text (a surrogate as U+FFFD) made visible."""
    return visible(encodable(hostile))


@hostile_cases
def test_the_cli_shows_client_text_with_its_control_characters_made_visible(
    served: Served, trusted: TrustedIssuer, hostile: str
) -> None:
    send_hostile(served.deps, hostile)
    later = _after_every_dead_letter(served.deps)
    assert served.deps.dead_letters is not None
    page = served.deps.dead_letters.dead_letter_page(INBOUND)
    first = next(d for d in page.items if d.body == hostile)

    outputs = {
        "list": _cli(served, trusted, "deadletters", "list", INBOUND),
        "show": _cli(served, trusted, "deadletters", "show", INBOUND, first.dead_letter_id),
        "purge --dry-run": _cli(
            served, trusted, "deadletters", "purge", INBOUND, "--older-than", later, "--dry-run"
        ),
        "alerts": _cli(served, trusted, "alerts"),
        "replay": _cli(served, trusted, "deadletters", "replay", INBOUND, first.dead_letter_id),
    }

    for command, output in outputs.items():
        assert raw_controls(output) == [], command
    assert _recognisable(hostile) in outputs["show"].decode()  # the body, whole
    for command in ("list", "purge --dry-run"):  # in a table: the message id's start, at least
        assert _recognisable(hostile)[:60] in outputs[command].decode(), command


_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"(?:\+\d+)?|[^\s"=\\]+)(?: |$)')


def _fields(rendered: str) -> list[str]:
    """The field names of an event line's ``key=value`` part, read as a log parser would; fails when
    the part is not made of such fields alone."""
    found = list(_FIELD.finditer(rendered))
    assert "".join(m.group(0) for m in found) == rendered, rendered
    return [m.group(1) for m in found]


@hostile_cases
def test_log_records_made_while_handling_client_text_are_one_line_with_no_forged_field(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, hostile: str
) -> None:
    # The field names each event or alert line was rendered from, in the order the lines were made.
    rendered_from: list[list[str]] = []
    render = telemetry._rendered

    def recording(fields: Mapping[str, Any]) -> str:
        rendered_from.append(list(fields))
        return render(fields)

    monkeypatch.setattr(telemetry, "_rendered", recording)
    deps = memory_deps(FakeClock())
    with caplog.at_level(logging.INFO):
        send_hostile(deps, hostile)

    records = caplog.records
    assert records
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    for record in records:
        line = formatter.format(record)
        assert "\n" not in line and unsafe_characters(line) == [], line[:300]
        if record.name in ("orderflow.events", "orderflow.alerts"):
            name = record.__dict__["event"].removeprefix("alert.")
            prefix = f"ALERT {name} " if record.name == "orderflow.alerts" else f"{name} "
            message = record.getMessage()
            assert message.startswith(prefix)
            assert _fields(message.removeprefix(prefix)) == rendered_from.pop(0)
    assert rendered_from == []  # every line rendered was a record checked
    dead_lettered = [r for r in records if r.__dict__.get("event") == "message.dead_lettered"]
    assert len(dead_lettered) == 2
