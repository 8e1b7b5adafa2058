"""The browser the console tests drive: Debian's ``chromium``, headless, through Playwright's Python
package with its executable path set (Playwright's own browser downloads are never used).

When ``chromium`` is missing the set-up installs it with ``apt-get install -y chromium`` if it runs as
root; otherwise the tests are skipped with the command to run (and fail, under ``CI``, rather than skip).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.helpers import Console, signed_in_page

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / ".test-artifacts"
"""Where the screenshots go (git-ignored)."""
INSTALL = "apt-get install -y chromium"


def _chromium() -> str | None:
    return shutil.which("chromium") or next(
        (path for path in ("/usr/bin/chromium", "/usr/lib/chromium/chromium") if Path(path).is_file()), None
    )


def _install_chromium() -> str | None:
    """Install Debian's chromium when running as root with apt-get (refreshing the package lists only if
    the first try fails); the executable, or None."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    for commands in ([install], [["apt-get", "update", "-q"], install]):
        for command in commands:
            subprocess.run(command, env=env, capture_output=True, check=False, timeout=600)
        if _chromium():
            return _chromium()
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's chromium executable, installed first if missing and possible."""
    found = _chromium() or _install_chromium()
    if found is None:
        _unavailable(f"the browser tests need Debian's chromium: {INSTALL} (as root)")
    assert found is not None
    return found


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    """A headless Chromium for one test module. Not for the session: Playwright's sync API keeps an event
    loop running on this thread until it stops, and later tests call ``asyncio.run``."""
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415 (only the browser tests need it)
    except ImportError:
        pytest.fail("the browser tests need Playwright's Python package: pip install -r requirements-dev.txt")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """The screenshot folder, made if missing."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def page(browser: Any, console: Console) -> Iterator[Any]:
    """A page signed in to the console of the module's ``console`` fixture."""
    with signed_in_page(browser, console) as opened:
        yield opened
