"""The azd hooks that register the demo services with Entra ID (infra/hooks/demo-services-entra.sh): run
by azure.yaml around provisioning, parsed by sh, naming the app roles the services check and the settings
the template reads and writes. Tenants are not reachable here: the Graph calls themselves are not run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from demo.services.auth import DEMO_DRIVER_ROLE
from orderflow.bindings import AGENT_ROLE
from tests.infra.bicep_model import parse_bicep
from tests.infra.fixtures import INFRA, REPO

pytestmark = pytest.mark.unit

HOOK = INFRA / "hooks" / "demo-services-entra.sh"


def test_azure_yaml_runs_the_hook_around_provisioning() -> None:
    hooks = yaml.safe_load((REPO / "azure.yaml").read_text())["hooks"]
    assert hooks == {
        "preprovision": {"shell": "sh", "run": "sh infra/hooks/demo-services-entra.sh pre"},
        "postprovision": {"shell": "sh", "run": "sh infra/hooks/demo-services-entra.sh post"},
    }
    subprocess.run(["sh", "-n", str(HOOK)], check=True)


def test_the_hook_names_the_roles_the_services_check_and_the_template_settings() -> None:
    text = HOOK.read_text()
    assert f'AGENT_ROLE="{AGENT_ROLE}"' in text
    assert f'DRIVER_ROLE="{DEMO_DRIVER_ROLE}"' in text
    wired = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert wired["demoServicesClientId"] == {"value": "${DEMO_SERVICES_CLIENT_ID}"}
    assert "azd env set DEMO_SERVICES_CLIENT_ID" in text
    outputs = parse_bicep(INFRA / "main.bicep")["outputs"]
    read = set(re.findall(r"\$\{(AZURE_[A-Z_]+)", text))
    # azd's own (the environment, the deployer) and the template's outputs.
    assert read - {"AZURE_ENV_NAME", "AZURE_PRINCIPAL_ID", "AZURE_PRINCIPAL_TYPE"} <= set(outputs)
    assert "AZURE_APP_IDENTITY_PRINCIPAL_ID" in read


@pytest.mark.parametrize("step", ["pre", "post"])
def test_nothing_runs_when_the_demo_services_are_not_deployed(step: str) -> None:
    result = subprocess.run(
        [shutil.which("sh") or "/bin/sh", str(HOOK), step],
        env={"DEPLOY_DEMO_SERVICES": "false", "PATH": "/nonexistent"},  # no az, no azd: none is called
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
