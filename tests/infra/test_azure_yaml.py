"""azure.yaml validates against azd's schema (vendored in tests/infra/schemas, draft 2019-09).

The schema leaves a service's ``host`` and ``infra.provider`` open strings (azd extensions register
more), listing the built-in values as ``examples`` only: ``host: functon`` is valid to it. So beside the
schema, each must be one of the values the schema lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.infra.fixtures import REPO
from tests.infra.vendor_azure_types import AZURE_YAML_SCHEMA

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "azure.yaml"
AZURE_YAML = REPO / "azure.yaml"


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = yaml.safe_load(AZURE_YAML_SCHEMA.read_text(encoding="utf-8"))
    return schema


def _listed_values(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The hosts and providers ``document`` names that the schema does not list among its examples."""
    hosts = schema["properties"]["services"]["additionalProperties"]["properties"]["host"]["examples"]
    providers = schema["properties"]["infra"]["properties"]["provider"]["examples"]
    named = [
        (f"services.{name}.host", service.get("host"), hosts)
        for name, service in document["services"].items()
    ]
    named.append(("infra.provider", document.get("infra", {}).get("provider", "bicep"), providers))
    return [
        f"{path}: {value!r} is none of azd's {listed}" for path, value, listed in named if value not in listed
    ]


def _errors(text: str) -> list[str]:
    """Every complaint about an azure.yaml: the schema's, then the unlisted host or provider."""
    schema, document = _schema(), yaml.safe_load(text)
    errors = jsonschema.Draft201909Validator(schema).iter_errors(document)
    found = sorted(f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in errors)
    return found or _listed_values(document, schema)


def test_the_schema_is_draft_2019_09_and_valid() -> None:
    schema = _schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2019-09/schema"
    assert jsonschema.validators.validator_for(schema) is jsonschema.Draft201909Validator
    jsonschema.Draft201909Validator.check_schema(schema)


def test_the_fixture_validates() -> None:
    assert _errors(FIXTURE.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("host: function", "host: functon", "services.api.host: 'functon' is none of azd's ['appservice'"),
        ("  provider: bicep", "  provider: bicp", "infra.provider: 'bicp' is none of azd's ['bicep'"),
        ("name: orderflow", "name: Orderflow", "name: 'Orderflow' does not match"),
        # a function service needs its project folder: the schema says so in one of its anyOf branches
        (
            "    project: .\n",
            "",
            "services.api: {'language': 'python', 'host': 'function'} is not valid under",
        ),
        ("    language: python", "    language: 3", "services.api.language: 3 is not of type 'string'"),
    ],
)
def test_a_broken_copy_fails(old: str, new: str, expected: str) -> None:
    text = FIXTURE.read_text(encoding="utf-8")
    assert text.count(old) == 1
    errors = _errors(text.replace(old, new))
    assert len(errors) == 1 and errors[0].startswith(expected), errors


@pytest.mark.skipif(not AZURE_YAML.is_file(), reason="azure.yaml is not written yet")
def test_the_repository_azure_yaml_validates() -> None:
    assert _errors(AZURE_YAML.read_text(encoding="utf-8")) == []
