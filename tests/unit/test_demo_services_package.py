"""The demo services' Function App package (demo.services.package) holds everything its entry point
imports and reads: built into a folder, ``function_app`` imports there, with nothing of the checkout, and
serves the services behind Entra ID."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from demo.services.package import PACKAGE, REPO, TRACKED, build, clean, requirements
from tests.harness import TPCH_FIXTURE

pytestmark = pytest.mark.unit

# Imported in a fresh interpreter from the package folder alone: the checkout's editable install is
# taken off the import system first, so a module the package lacks cannot be found there.
IMPORT = """
import json, os, sys
checkout = os.path.realpath(sys.argv[1])
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
sys.path[:] = ["."] + [p for p in sys.path if p and os.path.realpath(p) != checkout]
import function_app
from azure.functions import AsgiFunctionApp
first = ("demo", "orderflow", "devhost", "tests")
mine = {n: getattr(m, "__file__", "") for n, m in sys.modules.items() if n.split(".")[0] in first}
routes = sorted(function_app.services.openapi()["paths"])
print(json.dumps({"asgi": isinstance(function_app.app, AsgiFunctionApp), "modules": mine, "routes": routes}))
"""


def test_the_built_package_imports_on_its_own_and_serves_the_services(tmp_path: Path) -> None:
    target = build(tmp_path, data_dir=TPCH_FIXTURE)
    env = {"DEMO_SERVICES_TENANT_ID": "0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f", "DEMO_SERVICES_AUDIENCE": "c"}
    result = subprocess.run(
        [sys.executable, "-I", "-c", IMPORT, str(REPO)],
        cwd=target,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["asgi"] is True
    assert found["modules"] and all(Path(f).is_relative_to(target) for f in found["modules"].values() if f)
    assert {"/inventory/reservations", "/payments/charges", "/shipping/shipments", "/audit"} <= set(
        found["routes"]
    )
    assert sorted(p.name for p in (target / "tpch").iterdir()) == [
        "customer.csv",
        "lineitem.csv",
        "orders.csv",
        "partsupp.csv",
    ]
    assert (target / "requirements.txt").read_text() == requirements()
    assert "fastapi==" in requirements() and "azure-functions==" in requirements()
    assert not (target / "demo" / "services" / "azure").exists()


def test_clean_leaves_only_the_tracked_files(tmp_path: Path) -> None:
    target = build(tmp_path, data_dir=TPCH_FIXTURE)
    clean(target)
    assert {p.name for p in target.iterdir()} == set(TRACKED)
    assert {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"} == set(TRACKED)
