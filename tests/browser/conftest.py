"""The browser the console tests drive: Debian's ``chromium``, headless, through Playwright's Python
package with its executable path set (Playwright's own browser downloads are never used).

``make test`` installs ``chromium`` before pytest starts (``make system-deps``); these fixtures only find
it. When it is missing the tests fail under ``CI`` with the command to run, and are skipped with it
otherwise (``pytest -rs`` names the reason).
"""

from __future__ import annotations

import os
import shutil
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


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's chromium executable."""
    found = _chromium()
    if found is None:
        _unavailable(f"the browser tests need Debian's chromium: make system-deps, or {INSTALL} (as root)")
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
