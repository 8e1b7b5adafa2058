"""Every resource in infra/ type-checks against the Bicep compiler's definitions (bicep_types.py)."""

from __future__ import annotations

import gzip
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.infra import vendor_azure_types
from tests.infra.bicep_types import check_file, parse, resource_types
from tests.infra.fixtures import GOOD, INFRA, infra_templates, mutated

pytestmark = pytest.mark.unit

SHARED_TYPES = vendor_azure_types.DEFAULT_SHARED / "azure-types"


def _problems(folder: Path) -> list[str]:
    return [
        str(problem)
        for path in sorted(folder.glob("*.bicep"))
        for problem in check_file(path, relative_to=folder)
    ]


def test_the_fixture_type_checks_and_uses_every_vendored_resource_type() -> None:
    assert _problems(GOOD) == []
    declared = {
        resource["type"] for path in GOOD.glob("*.bicep") for resource in parse(path)["resources"].values()
    }
    readme = (vendor_azure_types.TARGET / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`(Microsoft\.[\w/]+)`", readme))
    assert declared == documented


# (file, old text, new text, the one problem expected)
MUTATIONS = {
    "a misspelt property": (
        "app.bicep",
        "    disableLocalAuth: true\n    minimumTlsVersion: '1.2'",
        "    disableLocalAuh: true\n    minimumTlsVersion: '1.2'",
        "app.bicep: serviceBus: properties.disableLocalAuh: no such property "
        "(did you mean disableLocalAuth?) "
        "(Microsoft.ServiceBus/namespaces@2026-01-01)",
    ),
    "a read-only property": (
        "app.bicep",
        "    retentionInDays: 30\n",
        "    retentionInDays: 30\n    customerId: 'x'\n",
        "app.bicep: logs: properties.customerId: read-only property: set by Azure, not by the template "
        "(Microsoft.OperationalInsights/workspaces@2026-03-01)",
    ),
    "an unknown API version": (
        "app.bicep",
        "'Microsoft.ServiceBus/namespaces@2026-01-01' = {",
        "'Microsoft.ServiceBus/namespaces@2025-05-01' = {",
        "app.bicep: serviceBus: (body): Microsoft.ServiceBus/namespaces@2025-05-01 is not a known type "
        "and API version (vendored versions: ['2026-01-01']; tests/infra/azure-types/README.md)",
    ),
    "an unknown version of the subscription's resource group": (
        "main.bicep",
        "Microsoft.Resources/resourceGroups@2025-04-01",
        "Microsoft.Resources/resourceGroups@2019-05-01",
        "main.bicep: rg: (body): Microsoft.Resources/resourceGroups@2019-05-01 is not a known type and API "
        "version (vendored versions: ['2025-04-01']; tests/infra/azure-types/README.md)",
    ),
    "a literal outside the allowed ones": (
        "app.bicep",
        "name: 'Standard'\n    tier: 'Standard'",
        "name: 'Standrd'\n    tier: 'Standard'",
        "app.bicep: serviceBus: sku.name: \"Standrd\" is none of 'Basic', 'Standard', 'Premium' "
        "(Microsoft.ServiceBus/namespaces@2026-01-01)",
    ),
    "a required property left out": (
        "app.bicep",
        "    databaseAccountOfferType: 'Standard'\n",
        "",
        "app.bicep: cosmos: properties.databaseAccountOfferType: required property missing "
        "(Microsoft.DocumentDB/databaseAccounts@2026-03-15)",
    ),
    "an unknown discriminator value": (
        "app.bicep",
        "type: 'Continuous'\n      continuousModeProperties",
        "type: 'Continous'\n      continuousModeProperties",
        "app.bicep: cosmos: properties.backupPolicy.type: 'Continous' is none of 'Continuous', 'Periodic' "
        "(Microsoft.DocumentDB/databaseAccounts@2026-03-15)",
    ),
    "a property of another discriminated element": (
        "app.bicep",
        "      continuousModeProperties: {\n        tier: 'Continuous7Days'\n      }\n",
        "      periodicModeProperties: {\n        backupIntervalInMinutes: 240\n      }\n",
        "app.bicep: cosmos: properties.backupPolicy.periodicModeProperties: no such property (did you mean "
        "continuousModeProperties?) (Microsoft.DocumentDB/databaseAccounts@2026-03-15)",
    ),
    "a misspelt property of a nested child resource": (
        "app.bicep",
        "        publicAccess: 'None'",
        "        publicAcess: 'None'",
        "app.bicep: storage__blobServices__deployments: properties.publicAcess: no such property "
        "(did you mean publicAccess?) (Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01)",
    ),
    "a read-only property two children deep": (
        "app.bicep",
        "          id: 'orders'\n",
        "          id: 'orders'\n          _etag: 'x'\n",
        "app.bicep: cosmos__database__orders: properties.resource._etag: read-only property: "
        "set by Azure, not by the template "
        "(Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2026-03-15)",
    ),
    "a read-only property in an array item": (
        "app.bicep",
        "        failoverPriority: 0\n",
        "        failoverPriority: 0\n        documentEndpoint: 'x'\n",
        "app.bicep: cosmos: properties.locations[0].documentEndpoint: read-only property: "
        "set by Azure, not by the template (Microsoft.DocumentDB/databaseAccounts@2026-03-15)",
    ),
    "a string where an integer goes, in a loop's body": (
        "app.bicep",
        "    maxDeliveryCount: 10\n",
        "    maxDeliveryCount: '10'\n",
        'app.bicep: queues: properties.maxDeliveryCount: "10" where an integer is expected '
        "(Microsoft.ServiceBus/namespaces/queues@2026-01-01)",
    ),
    "an unknown kind of site configuration": (
        "app.bicep",
        "  name: 'appsettings'\n",
        "  name: 'appsetting'\n",
        "app.bicep: settings: name: 'appsetting' is none of 'appsettings', 'authsettings', 'authsettingsV2', "
        "'azurestorageaccounts', 'backup', 'connectionstrings', 'logs', 'metadata', 'pushsettings', "
        "'slotConfigNames', 'web' (Microsoft.Web/sites/config@2025-03-01)",
    ),
    "a misspelt property in one branch of a conditional": (
        "app.bicep",
        "    siteConfig: {\n      minTlsVersion: '1.2'\n      ftpsState: 'Disabled'\n"
        "      http20Enabled: true\n    }",
        "    siteConfig: empty(location) ? { minTlsVersion: '1.2' } : { minTlsVersio: '1.2' }",
        "app.bicep: functionApp: properties.siteConfig.minTlsVersio: no such property (did you mean "
        "minTlsVersion?) (Microsoft.Web/sites@2025-03-01)",
    ),
    "a misspelt property in an argument of union()": (
        "app.bicep",
        "  properties: {\n    reserved: true\n    zoneRedundant: true\n  }",
        "  properties: union({ reserved: true }, { zoneRedundnt: true })",
        "app.bicep: plan: properties.zoneRedundnt: no such property (did you mean zoneRedundant?) "
        "(Microsoft.Web/serverfarms@2025-03-01)",
    ),
}


@pytest.mark.parametrize("case", MUTATIONS)
def test_a_change_the_compiler_would_reject_is_reported_and_nothing_else(case: str, tmp_path: Path) -> None:
    file, old, new, expected = MUTATIONS[case]
    assert _problems(mutated(tmp_path / "copy", file, [(old, new)])) == [expected]


def test_expressions_are_accepted_where_their_type_is_unknown(tmp_path: Path) -> None:
    copy = mutated(
        tmp_path / "copy",
        "app.bicep",
        [
            ("    retentionInDays: 30\n", "    retentionInDays: empty(location) ? 30 : 90\n"),
            ("name: 'Standard'\n    tier: 'Standard'", "name: location\n    tier: 'Standard'"),
            ("    maxDeliveryCount: 10\n", "    maxDeliveryCount: length(queueNames)\n"),
        ],
    )
    assert _problems(copy) == []


@pytest.mark.skipif(not (INFRA / "main.bicep").is_file(), reason="infra/main.bicep is not written yet")
@pytest.mark.parametrize("template", infra_templates(), ids=lambda path: str(path.relative_to(INFRA)))
def test_every_resource_in_infra_type_checks(template: Path) -> None:
    assert [str(problem) for problem in check_file(template, relative_to=INFRA)] == []


# The queue properties every queue shares, misspelt in the module that writes them (infra/).
QUEUE_MISSPELLINGS = {
    "servicebus.bicep": ("requiresDuplicateDetection: true", "requiresDuplicateDetecton: true", "queues"),
    "client.bicep": ("enablePartitioning: false", "enablePartitoning: false", "inbound"),
}


@pytest.mark.skipif(not (INFRA / "main.bicep").is_file(), reason="infra/main.bicep is not written yet")
@pytest.mark.parametrize("module", QUEUE_MISSPELLINGS)
def test_a_misspelt_queue_property_in_infra_is_reported(module: str, tmp_path: Path) -> None:
    old, new, symbol = QUEUE_MISSPELLINGS[module]
    copy = tmp_path / "infra"
    shutil.copytree(INFRA, copy)
    path = copy / "modules" / module
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    wrong, right = new.split(":")[0], old.split(":")[0]
    assert [str(problem) for problem in check_file(path, relative_to=copy)] == [
        f"modules/{module}: {symbol}: properties.{wrong}: no such property (did you mean {right}?) "
        "(Microsoft.ServiceBus/namespaces/queues@2026-01-01)"
    ]


def test_every_vendored_file_is_listed_and_loads() -> None:
    listed = {vendor_azure_types.vendored_path(*entry) for entry in vendor_azure_types.VENDORED}
    assert set(vendor_azure_types.TARGET.rglob("types.json.gz")) == listed
    assert {version for _, version in resource_types()} >= {entry[2] for entry in vendor_azure_types.VENDORED}
    readme = (vendor_azure_types.TARGET / "README.md").read_text(encoding="utf-8")
    for folder, namespace, version in vendor_azure_types.VENDORED:
        assert f"`{folder}/{namespace}/{version}`" in readme


def shared_types(folder: Path = SHARED_TYPES) -> Path:
    """``folder``, the compiler's type definitions beside this checkout, which the vendored copy is from.

    Raises:
        pytest.fail.Exception: it is missing and ``CI`` is set: CI must compare, never skip.
        pytest.skip.Exception: it is missing on a developer's machine.
    """
    if not folder.is_dir():
        message = f"the shared type definitions are not beside this checkout: {folder}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI compares the vendored copy with them: check them out there)")
        pytest.skip(message)
    return folder


def test_ci_fails_rather_than_skips_without_the_shared_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "shared" / "azure-types"
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI compares"):
        shared_types(missing)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        shared_types(missing)
    assert shared_types(tmp_path) == tmp_path


@pytest.mark.parametrize("entry", vendor_azure_types.VENDORED, ids=lambda entry: f"{entry[1]}@{entry[2]}")
def test_the_vendored_copy_is_the_source(entry: tuple[str, str, str]) -> None:
    root = shared_types()
    source = (root / entry[0] / entry[1] / entry[2] / "types.json").read_bytes()
    vendored = vendor_azure_types.vendored_path(*entry).read_bytes()
    assert gzip.decompress(vendored) == source
    assert vendored == vendor_azure_types.compress(source)  # re-vendoring changes no byte
