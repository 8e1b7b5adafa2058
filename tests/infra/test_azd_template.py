"""What azd needs of the template and reads from it: the service tag on one resource, a region where the
plan exists, the parameters file wiring every switch to an environment variable, the Cosmos DB data-plane
roles ordered after what they depend on, and the azd version the project states.

The templates are evaluated with ``tests/infra/bicep_model.py`` (no Bicep compiler here): a resource's
``dependsOn`` is the list of the resources it names, exactly what ``bicep build`` writes to the ARM
template's ``dependsOn``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from demo.services.bindings import demo_bindings_json
from tests.infra.bicep_model import Resource, ResourceRef, Template, parse_bicep

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
PARAMETERS = INFRA / "main.parameters.json"
MIN_AZD = "1.23.4"
"""The oldest azd release the project states it deploys with (azure.yaml, docs/deploy.md)."""

ENV = {
    "AZURE_ENV_NAME": "dev",
    "AZURE_LOCATION": "swedencentral",
    "AZURE_PRINCIPAL_ID": "33333333-4444-4555-8666-777777777777",
    "SERVICE_BINDINGS": demo_bindings_json("https://services.example.com"),
}
"""An azd environment as `azd env new` and the deploy guide leave it (the optional values unset)."""

_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:=(?P<default>[^}]*))?\}")


def azd_parameters(env: dict[str, str]) -> dict[str, Any]:
    """main.parameters.json as azd hands it to the template for ``env``: each ``${NAME}`` or
    ``${NAME=default}`` substituted (unset: the default, else empty), a bool or int parameter's text
    converted to its type, and an empty value left out (the template's default applies)."""
    declared = parse_bicep(INFRA / "main.bicep")["parameters"]
    values: dict[str, Any] = {}
    for name, spec in json.loads(PARAMETERS.read_text())["parameters"].items():
        text = _REFERENCE.sub(lambda m: env.get(m["name"], m["default"] or ""), spec["value"])
        if text == "":
            continue
        kind = declared[name]["type"]
        values[name] = text.lower() == "true" if kind == "bool" else int(text) if kind == "int" else text
    return values


def deploy(env: dict[str, str]) -> Template:
    """main.bicep evaluated for the azd environment ``env``."""
    return Template(INFRA / "main.bicep", azd_parameters(env))


@pytest.fixture(scope="module")
def main() -> Template:
    return deploy(ENV)


def _of_type(template: Template, type_: str) -> list[Resource]:
    return [r for r in template.all_resources() if r.type == type_ and not r.existing]


# --- the service tag ------------------------------------------------------------------------------


@pytest.mark.parametrize(("demo", "sites"), [("true", ["api", "demo-services"]), ("false", ["api"])])
def test_only_each_site_carries_the_azd_service_tag_of_its_service(demo: str, sites: list[str]) -> None:
    template = deploy({**ENV, "DEPLOY_DEMO_SERVICES": demo})
    services = yaml.safe_load((ROOT / "azure.yaml").read_text())["services"]
    assert sorted(services) == ["api", "demo-services"]
    tagged = [r for r in template.all_resources() if "azd-service-name" in (r.body.get("tags") or {})]
    assert sorted((r.type, r.body["tags"]["azd-service-name"]) for r in tagged) == [
        ("Microsoft.Web/sites", site) for site in sites
    ]
    # Every resource still carries the environment's tag, the plans among them.
    plans = _of_type(template, "Microsoft.Web/serverfarms")
    assert len(plans) == len(sites)
    assert all(plan.body["tags"] == {"azd-env-name": ENV["AZURE_ENV_NAME"]} for plan in plans)


def test_a_demo_environment_deploys_the_demo_services_unless_told_not_to() -> None:
    wired = json.loads(PARAMETERS.read_text())["parameters"]
    assert wired["deployDemoServices"] == {"value": "${DEPLOY_DEMO_SERVICES=true}"}
    assert wired["grantDeployerDemoClientAccess"] == {"value": "${GRANT_DEPLOYER_DEMO_CLIENT_ACCESS=false}"}
    declared = parse_bicep(INFRA / "main.bicep")["parameters"]
    # A deployment without azd's parameters file (production pipelines) gets none.
    assert declared["deployDemoServices"]["default"] is False


# --- regions --------------------------------------------------------------------------------------


def test_the_location_is_one_azd_offers_among_the_flex_consumption_regions() -> None:
    spec = parse_bicep(INFRA / "main.bicep")["parameters"]["location"]
    template = deploy(ENV)
    allowed = template.allowed("location")
    assert allowed is not None and len(allowed) == len(set(allowed)) >= 20
    assert all(re.fullmatch(r"[a-z]+[a-z0-9]*", region) for region in allowed), allowed
    assert {"westeurope", "swedencentral", "eastus", "eastus2", "australiaeast"} <= set(allowed)
    [metadata] = [d["argument"] for d in spec["decorators"] if d["type"] == "metadata"]
    assert template.eval(metadata, {}) == {"azd": {"type": "location"}}
    assert template.output("AZURE_LOCATION") == "swedencentral"


def test_a_region_without_flex_consumption_is_refused_before_anything_is_created() -> None:
    with pytest.raises(ValueError, match="location 'westindia' is not one of its allowed values"):
        deploy({**ENV, "AZURE_LOCATION": "westindia"}).all_resources()


# --- the Cosmos DB data-plane roles ---------------------------------------------------------------


def _depends_on(resource: Resource) -> set[ResourceRef]:
    return set(resource.body.get("dependsOn") or [])


def test_the_cosmos_data_roles_are_assigned_one_after_another_after_every_container() -> None:
    template = deploy({**ENV, "GRANT_DEPLOYER_READ_ACCESS": "true"})
    containers = {
        c.ref for c in _of_type(template, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers")
    }
    roles = _of_type(template, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments")
    by_principal = {str(role.properties["principalId"]): role for role in roles}
    deployer = by_principal.pop(ENV["AZURE_PRINCIPAL_ID"])
    (app,) = by_principal.values()
    assert len(containers) == 5
    assert _depends_on(app) == containers
    assert _depends_on(deployer) == {app.ref}


def test_the_deploy_guide_names_the_containers_the_template_creates(main: Template) -> None:
    guide = (ROOT / "docs" / "deploy.md").read_text()
    [row] = [line for line in guide.splitlines() if line.startswith("| `cosmos.bicep` |")]
    named = set(re.findall(r"`([a-z]+)`", row.split("containers", 1)[1].split("|", 1)[0]))
    created = {
        c.ref.name for c in _of_type(main, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers")
    }
    assert named == created
    counts = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    said = re.search(r"\(`COSMOS_DATABASE`, `orderflow`\), (\w+) containers", " ".join(guide.split()))
    assert said and counts[said[1]] == len(created)
    # The Functions guide's list of what must exist before the app starts.
    functions = " ".join((ROOT / "docs" / "functions.md").read_text().split())
    listed = re.search(r"and its (\w+) containers \(([^)]*)\)", functions)
    assert listed and counts[listed[1]] == len(created)
    assert set(re.findall(r"`([a-z]+)`", listed[2])) == created


# --- the parameters file --------------------------------------------------------------------------


def test_every_parameter_without_a_default_and_every_switch_is_wired_to_the_environment() -> None:
    declared = parse_bicep(INFRA / "main.bicep")["parameters"]
    wired = json.loads(PARAMETERS.read_text())["parameters"]
    assert set(wired) <= set(declared)
    required = {name for name, spec in declared.items() if spec.get("default") is None}
    switches = {name for name, spec in declared.items() if spec["type"] == "bool"}
    assert required | switches <= set(wired), sorted((required | switches) - set(wired))
    assert wired["grantDeployerReadAccess"] == {"value": "${GRANT_DEPLOYER_READ_ACCESS=false}"}


@pytest.mark.parametrize(
    ("env", "reader"),
    [
        ({}, False),  # the default: nobody but the app reads orders
        ({"GRANT_DEPLOYER_READ_ACCESS": "false"}, False),
        ({"GRANT_DEPLOYER_READ_ACCESS": "true"}, True),
        ({"GRANT_DEPLOYER_READ_ACCESS": "true", "AZURE_PRINCIPAL_ID": ""}, False),  # no principal: no role
    ],
)
def test_the_deployer_reads_orders_only_when_the_environment_asks(env: dict[str, str], reader: bool) -> None:
    template = deploy({**ENV, **env})
    roles = _of_type(template, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments")
    readers = [
        r
        for r in roles
        if str(r.properties["roleDefinitionId"]).endswith("/00000000-0000-0000-0000-000000000001")
    ]
    assert [str(r.properties["principalId"]) for r in readers] == (
        [ENV["AZURE_PRINCIPAL_ID"]] if reader else []
    )


# --- the azd version ------------------------------------------------------------------------------


def test_the_minimum_azd_version_is_stated_in_azure_yaml_and_the_deploy_guide() -> None:
    document = yaml.safe_load((ROOT / "azure.yaml").read_text())
    assert document["requiredVersions"] == {"azd": f">= {MIN_AZD}"}
    assert f"azd {MIN_AZD}" in (ROOT / "docs" / "deploy.md").read_text()
