"""The demo services as a deployment runs them (``demo/services/azure/function_app.py`` on a Function App):
the same FastAPI app as ``python -m demo.services``, built from app settings, every route behind Entra ID.

Settings (the template's ``infra/modules/demoservices.bicep`` sets them):

* ``DEMO_SERVICES_TENANT_ID``: the tenant whose v2.0 tokens are accepted (required);
* ``DEMO_SERVICES_AUDIENCE``: the client id of the services' app registration (required);
* ``DEMO_SERVICES_CATALOG_ORDERS``: the first TPC-H orders loaded (default 0: all 15,000), generated with
  ``tpchgen-cli`` at start-up into the temporary directory;
* ``DEMO_SERVICES_FAULTS``: a :class:`~demo.faults.FaultPlan` as JSON (default none: the network faults
  are real here).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

from fastapi import FastAPI

from demo.faults import FaultPlan
from demo.services.app import create_app
from demo.services.auth import DEMO_DRIVER_ROLE, AgentAuth
from demo.services.payments import RefundPolicy
from demo.tpch import DEFAULT_STOCK_DIVISOR, ensure_dataset, load_catalog

HOSTED_REFUND_POLICY = RefundPolicy(fee=Decimal("1.00"), fee_after_s=5.0)
"""The cancellation fee of the local demo (demo.config.DEMO_REFUND_POLICY): a refund more than 5 s after
its charge keeps 1.00."""


def hosted_app(environ: Mapping[str, str], *, data_dir: Path | None = None) -> FastAPI:
    """The demo services from ``environ`` (the module docstring's settings).

    Args:
        environ: The app settings.
        data_dir: Where the TPC-H tables are, or are generated (default: ``<tmp>/tpch``).

    Raises:
        ValueError: the tenant or the audience is missing, or a setting is malformed.
        FileNotFoundError, RuntimeError: the TPC-H tables cannot be generated (demo.tpch.ensure_dataset).
    """
    tenant = environ.get("DEMO_SERVICES_TENANT_ID", "").strip()
    audience = environ.get("DEMO_SERVICES_AUDIENCE", "").strip()
    auth = AgentAuth.entra(tenant, audience)
    report_auth = AgentAuth.entra(tenant, audience, role=DEMO_DRIVER_ROLE)
    orders = int(environ.get("DEMO_SERVICES_CATALOG_ORDERS", "0") or "0")
    faults = FaultPlan.model_validate_json(environ.get("DEMO_SERVICES_FAULTS", "") or "{}")
    tables = ensure_dataset(data_dir or Path(tempfile.gettempdir()) / "tpch")
    catalog = load_catalog(tables, orders=orders or None, stock_divisor=DEFAULT_STOCK_DIVISOR)
    return create_app(catalog, faults, auth=auth, report_auth=report_auth, refund_policy=HOSTED_REFUND_POLICY)
