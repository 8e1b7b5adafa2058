"""Dependencies point one way: hosts -> roles -> orderflow/. Role code never imports the Functions SDKs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
ROLE_PACKAGES = ("orderflow", "orchestrators", "activities", "agents", "supervisor")
AZURE_HOST_MODULES = frozenset({"orchestrators.durable_functions_adapter"})
"""Host-side modules that live beside their role (the Durable Functions adapter, blueprints): only
the Azure host imports them."""


def _modules() -> list[str]:
    names = []
    for package in ROLE_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if name not in AZURE_HOST_MODULES and not name.endswith(".blueprint"):
                names.append(name)
    return names


def test_role_code_never_imports_the_functions_sdks() -> None:
    modules = _modules()
    assert "orchestrators.workflow" in modules and "orderflow.records" in modules
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0:2] in (['azure', 'functions'], "
        "['azure', 'durable_functions']))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


ROLES = ("orchestrators", "activities", "agents", "supervisor")


@pytest.mark.parametrize("role", ROLES)
def test_a_role_imports_no_other_role_and_no_host(role: str) -> None:
    # What two roles share (workflow definitions, activity contracts, messages) lives in orderflow/.
    modules = [name for name in _modules() if name.split(".")[0] == role]
    assert modules
    others = (*(other for other in ROLES if other != role), "function_host", "function_app", "devhost")
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {others!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_the_azure_host_support_imports_no_role() -> None:
    # function_host serves the blueprints (wiring, settlement, the durable client) from the core alone;
    # only the blueprints import roles.
    script = (
        "import importlib, sys\n"
        "importlib.import_module('function_host')\n"
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {ROLES!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_orderflow_core_imports_no_role_or_host() -> None:
    script = (
        "import importlib, pkgutil, sys, orderflow\n"
        "for info in pkgutil.walk_packages(orderflow.__path__, 'orderflow.'):\n"
        "    importlib.import_module(info.name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('orchestrators', 'activities', 'agents', 'supervisor', 'devhost', 'demo'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_nothing_imports_the_benchmark() -> None:
    # bench is a host: it may import devhost, the roles and orderflow, and nothing may import it.
    roots = (*ROLE_PACKAGES, "devhost", "demo")
    script = (
        "import importlib, pkgutil, sys\n"
        f"for root in {roots!r}:\n"
        "    package = importlib.import_module(root)\n"
        "    for info in pkgutil.walk_packages(package.__path__, root + '.'):\n"
        "        if not info.name.endswith(('.blueprint', '__main__')):\n"
        "            importlib.import_module(info.name)\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'bench')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_function_app_imports_with_the_real_sdks() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import function_app; print(type(function_app.app).__name__)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "DFApp"
