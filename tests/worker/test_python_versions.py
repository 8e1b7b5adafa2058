"""The app installs and passes the worker's checks on every Python the README claims: 3.11, 3.12, 3.13.

``make worker-test`` installs ``requirements.txt`` into one environment per version (``.venv`` on 3.11,
``.venv-py312``, and this worker environment on 3.13), which is the install test. Here each
environment is checked: its requirements are consistent (``pip check``), the version markers chose
the azure-functions line that version's worker takes, and every trigger's annotations pass the
worker's own annotation rule (:mod:`tests.worker.annotation_rule`). On 3.13 the worker itself indexes
the app (:mod:`tests.worker.test_indexing`); the 3.11/3.12 worker ships only with the host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import azure_functions_runtime.utils.typing_inspect as worker_typing_inspect
import pytest

from tests.worker.conftest import REPO

pytestmark = pytest.mark.unit

ENVIRONMENTS = {
    "3.11": REPO / ".venv" / "bin" / "python",
    "3.12": REPO / ".venv-py312" / "bin" / "python",
    "3.13": Path(sys.executable),
}
"""The interpreter of each supported version's environment, as ``make worker-test`` builds them."""

AZURE_FUNCTIONS = {"3.11": "1.26.0", "3.12": "1.26.0", "3.13": "2.3.0"}
"""The azure-functions release ``requirements.txt`` selects for each version."""


def interpreter(version: str) -> Path:
    python = ENVIRONMENTS[version]
    if not python.exists():
        pytest.fail(
            f"no Python {version} environment at {python}: run `make worker-test` "
            f"(needs `pyenv install {version}`)"
        )
    return python


@pytest.mark.parametrize("version", sorted(ENVIRONMENTS))
def test_the_requirements_are_installed_and_consistent(version: str) -> None:
    python = interpreter(version)

    pip = subprocess.run([python, "-m", "pip", "check"], check=False, capture_output=True, text=True)

    assert pip.returncode == 0, pip.stdout + pip.stderr


@pytest.mark.parametrize("version", sorted(ENVIRONMENTS))
def test_every_trigger_passes_the_workers_annotation_rule(version: str) -> None:
    python = interpreter(version)

    out = subprocess.run(
        [python, "-m", "tests.worker.annotation_rule", worker_typing_inspect.__file__],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])

    assert report["python"] == version
    assert report["azure-functions"] == AZURE_FUNCTIONS[version]
    assert len(report["functions"]) == 17  # with the one client the test settings register
    assert report["refused"] == []
