"""checkov checks of what orderflow's Bicep templates must hold and checkov's own checks do not test.

Loaded by ``checkov --framework bicep --external-checks-dir infra/policies`` (tests/infra/test_checkov.py).
Each check gets one resource's configuration as pycep parses it, with variables already rendered; a
resource in a loop or behind a condition is unwrapped to its body. A setting must be the literal value:
an expression that might evaluate to it fails, since nothing here can evaluate it. Why Python checks and
not YAML policies: docs/testing.md (the infrastructure checks).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from checkov.bicep.checks.resource.base_resource_check import BaseResourceCheck
from checkov.common.models.enums import CheckCategories, CheckResult
from pycep import BicepParser

SERVICE_BUS_NAMESPACE = "Microsoft.ServiceBus/namespaces"
SERVICE_BUS_QUEUE = "Microsoft.ServiceBus/namespaces/queues"
SERVICE_BUS_DATA_ROLES = frozenset(
    {
        "090c5cfd-751d-490a-894a-3ce6f1109419",  # Azure Service Bus Data Owner
        "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",  # Azure Service Bus Data Sender
        "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",  # Azure Service Bus Data Receiver
    }
)
_GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


def resource_body(conf: dict[str, Any]) -> dict[str, Any]:
    """The body of a resource declaration: inside its ``[for ...]`` loop and ``if (...)`` condition."""
    while isinstance(conf.get("config"), dict) and ("loop_type" in conf or "condition" in conf):
        conf = conf["config"]
    return conf


class LiteralPropertyCheck(BaseResourceCheck):  # type: ignore[misc]  # checkov is untyped
    """Passes when ``properties.<name>`` of the resource is the literal ``expected`` value; ``name`` may
    be a dotted path into nested objects (``features.disableLocalAuth``)."""

    def __init__(self, check_id: str, title: str, resource_type: str, name: str, expected: object) -> None:
        self.property_name, self.expected = name, expected
        super().__init__(
            name=title,
            id=check_id,
            categories=(CheckCategories.IAM,),
            supported_resources=(resource_type,),
        )

    def scan_resource_conf(self, conf: dict[str, Any]) -> CheckResult:
        value: object = resource_body(conf).get("properties")
        for key in self.property_name.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        same = type(value) is type(self.expected) and value == self.expected
        return CheckResult.PASSED if same else CheckResult.FAILED


@cache
def _resource_types(path: str) -> dict[str, str]:
    """Symbolic name -> resource type of every resource declared in the Bicep file at ``path``."""
    parsed = BicepParser().parse(file_path=Path(path))
    return {name: str(resource["type"]) for name, resource in parsed.get("resources", {}).items()}


def _referenced_symbol(value: object) -> str | None:
    """The symbol an expression starts from: ``queue``, ``queues[i]``, ``queue.id`` -> the resource."""
    while isinstance(value, dict) and "operator" in value:
        operands = value["operator"].get("operands", {})
        value = operands.get("operand_1", operands.get("array"))
    return value if isinstance(value, str) else None


class ServiceBusRoleScopeCheck(BaseResourceCheck):  # type: ignore[misc]  # checkov is untyped
    """A role assignment is never scoped to a Service Bus namespace, and a Service Bus data role
    (Owner, Sender, Receiver) is assigned on a queue only: not on a namespace, resource group or
    subscription (docs/clients.md: rights on single queues only). The scope's type is read from the
    resource the ``scope:`` names in the same file; a data role whose scope cannot be resolved fails.
    So does an assignment whose role id is not a literal GUID once the file's variables are rendered
    (a module parameter or a loop variable): which role it grants cannot be known, so it is not passed."""

    def __init__(self) -> None:
        super().__init__(
            name="Ensure role assignments are never scoped to a Service Bus namespace, and Service Bus "
            "data roles are scoped to a queue",
            id="CKV_ORDERFLOW_5",
            categories=(CheckCategories.IAM,),
            supported_resources=("Microsoft.Authorization/roleAssignments",),
        )
        self._scanned_file = ""

    def run(self, scanned_file: str, *args: Any, **kwargs: Any) -> Any:
        self._scanned_file = scanned_file  # the scope is a symbol of this file
        return super().run(scanned_file, *args, **kwargs)

    def scan_resource_conf(self, conf: dict[str, Any]) -> CheckResult:
        body = resource_body(conf)
        symbol = _referenced_symbol(body.get("scope"))
        scope_type = _resource_types(self._scanned_file).get(symbol) if symbol else None
        if scope_type == SERVICE_BUS_NAMESPACE:
            return CheckResult.FAILED
        role = str((body.get("properties") or {}).get("roleDefinitionId", ""))
        roles = set(_GUID.findall(role.lower()))
        if not roles or (roles & SERVICE_BUS_DATA_ROLES and scope_type != SERVICE_BUS_QUEUE):
            return CheckResult.FAILED
        return CheckResult.PASSED


# '${account.id}/dbs/orderflow' or '${account.id}/dbs/${databaseName}': checkov keeps an interpolated
# string as its text, so the database name is a literal or one interpolated symbol.
_DATABASE_SCOPE = re.compile(r".+/dbs/(?:[A-Za-z0-9_-]+|\$\{[A-Za-z_][A-Za-z0-9_]*\})")


class CosmosRoleScopeCheck(BaseResourceCheck):  # type: ignore[misc]  # checkov is untyped
    """A Cosmos DB data-plane role assignment is scoped to a database: its ``properties.scope`` is a
    string ending in ``/dbs/<name>``, never the account (docs/deploy.md: the app's data-plane role is on
    its database only). An expression that is not such a string (``account.id``) fails."""

    def __init__(self) -> None:
        super().__init__(
            name="Ensure Cosmos DB SQL role assignments are scoped to a database, not the account",
            id="CKV_ORDERFLOW_6",
            categories=(CheckCategories.IAM,),
            supported_resources=("Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments",),
        )

    def scan_resource_conf(self, conf: dict[str, Any]) -> CheckResult:
        scope = (resource_body(conf).get("properties") or {}).get("scope")
        database = isinstance(scope, str) and _DATABASE_SCOPE.fullmatch(scope)
        return CheckResult.PASSED if database else CheckResult.FAILED


checks = (
    LiteralPropertyCheck(
        "CKV_ORDERFLOW_1",
        "Ensure Service Bus namespaces disable local (SAS key) authentication",
        SERVICE_BUS_NAMESPACE,
        "disableLocalAuth",
        True,
    ),
    LiteralPropertyCheck(
        "CKV_ORDERFLOW_2",
        "Ensure Cosmos DB accounts disable local (key) authentication",
        "Microsoft.DocumentDB/databaseAccounts",
        "disableLocalAuth",
        True,
    ),
    LiteralPropertyCheck(
        "CKV_ORDERFLOW_3",
        "Ensure storage accounts refuse shared key access",
        "Microsoft.Storage/storageAccounts",
        "allowSharedKeyAccess",
        False,
    ),
    LiteralPropertyCheck(
        "CKV_ORDERFLOW_4",
        "Ensure Application Insights components disable local (instrumentation key) authentication",
        "Microsoft.Insights/components",
        "DisableLocalAuth",
        True,
    ),
    ServiceBusRoleScopeCheck(),
    CosmosRoleScopeCheck(),
    LiteralPropertyCheck(
        "CKV_ORDERFLOW_7",
        "Ensure Log Analytics workspaces disable local (shared key) authentication",
        "Microsoft.OperationalInsights/workspaces",
        "features.disableLocalAuth",
        True,
    ),
)
