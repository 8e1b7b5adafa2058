"""checkov finds no failed check in infra/, and each of orderflow's own policies (infra/policies) fails on
a copy of the fixture deployment with its one setting changed.

checkov runs from ``.venv-infra`` (``make .venv-infra/.installed``; its pins conflict with ``.venv``'s)
twice, in parallel (it takes about 3 s of one core to start): on infra/ alone, and once on a folder
holding the good fixture and every variant side by side, its report split by folder. checkov builds one
graph of all the files it reads; should that let one copy change what another is judged to be, the good
copy or a variant would no longer get exactly its expected failures, and the test fails rather than
passes. A skipped built-in check must carry its reason beside the resource
(``// checkov:skip=CKV_AZURE_n:reason``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tests.infra.bicep_types import parse
from tests.infra.fixtures import GOOD, INFRA, REPO, infra_templates, mutated

pytestmark = pytest.mark.unit

CHECKOV = REPO / ".venv-infra" / "bin" / "checkov"
POLICIES = INFRA / "policies"
INSTALL = "make .venv-infra/.installed"
# The check that judges each kind of role assignment's scope.
SCOPE_CHECKS = {
    "Microsoft.Authorization/roleAssignments": "CKV_ORDERFLOW_5",
    "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments": "CKV_ORDERFLOW_6",
}

# Each variant of the fixture: (file, [(old, new)], the failed checks expected as (check id, resource)).
VARIANTS: dict[str, tuple[str, list[tuple[str, str]], set[tuple[str, str]]]] = {
    "service-bus-local-auth": (
        "app.bicep",
        [("    disableLocalAuth: true\n    minimumTlsVersion: '1.2'", "    disableLocalAuth: false\n")],
        {("CKV_ORDERFLOW_1", "Microsoft.ServiceBus/namespaces.serviceBus")},
    ),
    "cosmos-local-auth": (
        "app.bicep",
        [
            (
                "    disableLocalAuth: true\n    disableKeyBasedMetadataWriteAccess",
                "    disableLocalAuth: false\n    disableKeyBasedMetadataWriteAccess",
            )
        ],
        # checkov's own CKV_AZURE_140 tests the same setting of Cosmos DB
        {
            ("CKV_ORDERFLOW_2", "Microsoft.DocumentDB/databaseAccounts.cosmos"),
            ("CKV_AZURE_140", "Microsoft.DocumentDB/databaseAccounts.cosmos"),
        },
    ),
    "storage-shared-key": (
        "app.bicep",
        [("    allowSharedKeyAccess: false\n", "    allowSharedKeyAccess: true\n")],
        {("CKV_ORDERFLOW_3", "Microsoft.Storage/storageAccounts.storage")},
    ),
    "storage-shared-key-left-to-the-default": (
        "app.bicep",
        [("    allowSharedKeyAccess: false\n", "")],
        {("CKV_ORDERFLOW_3", "Microsoft.Storage/storageAccounts.storage")},
    ),
    "app-insights-local-auth": (
        "app.bicep",
        [("    DisableLocalAuth: true\n", "    DisableLocalAuth: !empty(location)\n")],
        {("CKV_ORDERFLOW_4", "Microsoft.Insights/components.appInsights")},
    ),
    "data-role-on-the-namespace": (
        "app.bicep",
        [("  scope: ordersQueue\n", "  scope: serviceBus\n")],
        {("CKV_ORDERFLOW_5", "Microsoft.Authorization/roleAssignments.receiveOrders")},
    ),
    "data-role-on-the-resource-group": (
        "app.bicep",
        [("  scope: ordersQueue\n", "")],
        {("CKV_ORDERFLOW_5", "Microsoft.Authorization/roleAssignments.receiveOrders")},
    ),
    "other-role-on-the-namespace": (
        "app.bicep",
        [("  scope: storage\n", "  scope: serviceBus\n")],
        {("CKV_ORDERFLOW_5", "Microsoft.Authorization/roleAssignments.blobOwner")},
    ),
    # A role id checkov cannot render (a parameter, as a module would take it) names no known role. The
    # parameter's name is new: checkov's graph would render a name another copy defines as a variable.
    "role-id-as-a-parameter": (
        "app.bicep",
        [
            ("param resourceToken string\n", "param resourceToken string\nparam blobRoleId string\n"),
            (
                "'Microsoft.Authorization/roleDefinitions', storageBlobDataOwner)",
                "'Microsoft.Authorization/roleDefinitions', blobRoleId)",
            ),
        ],
        {("CKV_ORDERFLOW_5", "Microsoft.Authorization/roleAssignments.blobOwner")},
    ),
    "log-analytics-local-auth": (
        "app.bicep",
        [
            (
                "      disableLocalAuth: true\n    }\n  }\n}\n\nresource appInsights",
                "      disableLocalAuth: false\n    }\n  }\n}\n\nresource appInsights",
            )
        ],
        {("CKV_ORDERFLOW_7", "Microsoft.OperationalInsights/workspaces.logs")},
    ),
    "log-analytics-local-auth-left-to-the-default": (
        "app.bicep",
        [("    features: {\n      disableLocalAuth: true\n    }\n", "")],
        {("CKV_ORDERFLOW_7", "Microsoft.OperationalInsights/workspaces.logs")},
    ),
    "cosmos-role-on-the-account": (
        "app.bicep",
        [("    scope: '${cosmos.id}/dbs/orderflow'\n", "    scope: cosmos.id\n")],
        {("CKV_ORDERFLOW_6", "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments.cosmosData")},
    ),
}

OWN_CHECKS_ON_THE_FIXTURE = {
    ("CKV_ORDERFLOW_1", "Microsoft.ServiceBus/namespaces.serviceBus"),
    ("CKV_ORDERFLOW_2", "Microsoft.DocumentDB/databaseAccounts.cosmos"),
    ("CKV_ORDERFLOW_3", "Microsoft.Storage/storageAccounts.storage"),
    ("CKV_ORDERFLOW_4", "Microsoft.Insights/components.appInsights"),
    ("CKV_ORDERFLOW_5", "Microsoft.Authorization/roleAssignments.receiveOrders"),
    ("CKV_ORDERFLOW_5", "Microsoft.Authorization/roleAssignments.blobOwner"),
    ("CKV_ORDERFLOW_6", "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments.cosmosData"),
    ("CKV_ORDERFLOW_7", "Microsoft.OperationalInsights/workspaces.logs"),
}


def checkov(folder: Path) -> dict[str, Any]:
    """checkov's JSON report of one folder, with orderflow's policies loaded.

    Raises:
        AssertionError: checkov is not installed, or it failed without a report.
    """
    assert CHECKOV.is_file(), f"checkov is not installed: {INSTALL}"
    command = [
        str(CHECKOV),
        "--framework",
        "bicep",
        "-d",
        str(folder),
        "--external-checks-dir",
        str(POLICIES),
    ]
    # --skip-download: no network; checkov would otherwise fetch guideline links first.
    result = subprocess.run(
        [*command, "--skip-download", "-o", "json"], capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]  # 1: some check failed
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def failed(results: dict[str, Any]) -> set[tuple[str, str]]:
    return {(check["check_id"], check["resource"]) for check in results["failed_checks"]}


def split(report: dict[str, Any], folders: list[str]) -> dict[str, dict[str, Any]]:
    """One report per top folder of a report on their parent (its records' paths are ``/folder/...``)."""
    results = report["results"]
    kinds = ("passed_checks", "failed_checks", "skipped_checks")
    return {
        folder: {
            "parsing_errors": [path for path in results["parsing_errors"] if f"/{folder}/" in path],
            **{
                kind: [r for r in results[kind] if r["file_path"].startswith(f"/{folder}/")] for kind in kinds
            },
        }
        for folder in folders
    }


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """checkov's results (``passed_checks``, ``failed_checks``, ``skipped_checks``, ``parsing_errors``)
    for the good fixture, each variant and (once written) infra/."""
    root = tmp_path_factory.mktemp("checkov")
    shutil.copytree(GOOD, root / "good")
    for name, (file, changes, _) in VARIANTS.items():
        mutated(root / name, file, changes)
    folders = [root] + ([INFRA] if (INFRA / "main.bicep").is_file() else [])
    with ThreadPoolExecutor(max_workers=2) as pool:
        fixtures, *infra = pool.map(checkov, folders)
    found = split(fixtures, ["good", *VARIANTS])
    return found | ({"infra": infra[0]["results"]} if infra else {})


def test_checkov_parses_the_fixture_as_this_suite_does() -> None:
    pinned = (REPO / "requirements-dev.txt").read_text(encoding="utf-8")
    assert f"pycep-parser=={version('pycep-parser')}\n" in pinned
    script = "from importlib.metadata import version; print(version('pycep-parser'))"
    theirs = subprocess.run(
        [str(CHECKOV.parent / "python"), "-c", script], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert theirs == version("pycep-parser")


def test_the_fixture_passes_every_check_and_each_skip_gives_its_reason(reports: dict[str, Any]) -> None:
    report = reports["good"]
    assert report["parsing_errors"] == []
    assert failed(report) == set()
    passed = {(check["check_id"], check["resource"]) for check in report["passed_checks"]}
    assert passed >= OWN_CHECKS_ON_THE_FIXTURE
    skipped = report["skipped_checks"]
    assert skipped and all(check["check_id"].startswith("CKV_AZURE_") for check in skipped)
    assert [check for check in skipped if len(check["check_result"]["suppress_comment"]) < 20] == []


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_changed_setting_fails_exactly_its_policy(variant: str, reports: dict[str, dict[str, Any]]) -> None:
    report = reports[variant]
    assert report["parsing_errors"] == []
    assert report["passed_checks"]  # checkov read this copy
    assert failed(report) == VARIANTS[variant][2]


@pytest.mark.skipif(not (INFRA / "main.bicep").is_file(), reason="infra/main.bicep is not written yet")
def test_infra_passes_every_check_and_each_skip_gives_its_reason(reports: dict[str, dict[str, Any]]) -> None:
    report = reports["infra"]
    assert report["parsing_errors"] == []
    assert report["passed_checks"]
    failures = [
        f"{check['check_id']} {check['resource']} ({check['file_path']}:{check['file_line_range'][0]}): "
        f"{check['check_name']}"
        for check in report["failed_checks"]
    ]
    assert failures == [], "fix it, or skip it beside the resource with the reason"
    skipped = report["skipped_checks"]
    no_reason = [
        check["check_id"] for check in skipped if len(check["check_result"]["suppress_comment"]) < 20
    ]
    assert no_reason == [], "write why beside the skip: // checkov:skip=CKV_...:reason"
    assert not [check for check in skipped if check["check_id"].startswith("CKV_ORDERFLOW_")]


@pytest.mark.skipif(not (INFRA / "main.bicep").is_file(), reason="infra/main.bicep is not written yet")
def test_every_role_assignment_in_infra_passes_its_scope_check(reports: dict[str, dict[str, Any]]) -> None:
    declared = {
        (SCOPE_CHECKS[resource["type"]], f"/{path.relative_to(INFRA)}", f"{resource['type']}.{symbol}")
        for path in infra_templates()
        for symbol, resource in parse(path).get("resources", {}).items()
        if resource["type"] in SCOPE_CHECKS and not resource["existing"]
    }
    passed = {(c["check_id"], c["file_path"], c["resource"]) for c in reports["infra"]["passed_checks"]}
    # The app's queue roles (1 loop) and the client's (4, and the deployer's 2), storage (3), telemetry
    # (1), Cosmos DB (2); the demo services' identity on its own storage and on telemetry (2).
    assert len(declared) == 15
    assert declared <= passed  # none skipped, failed or left unscanned
