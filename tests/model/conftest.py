"""Finding spin and gcc for the model tests. ``make test`` installs both before pytest starts
(``make system-deps``); these fixtures only find them. When one is missing the tests fail under ``CI``
with the command to run, and are skipped with it otherwise (``pytest -rs`` names the reason).
"""

from __future__ import annotations

import os
import shutil

import pytest

INSTALL = "apt-get install -y spin gcc"


@pytest.fixture(scope="session")
def spin() -> str:
    """The ``spin`` executable (its verifier is compiled with ``gcc``, which must be on ``PATH`` too)."""
    found, compiler = shutil.which("spin"), shutil.which("gcc")
    if found is None or compiler is None:
        reason = f"the model tests need spin and gcc: make system-deps, or {INSTALL} (as root)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    assert found is not None
    return found
