"""What the browser tests share: a running system with the console on it, a signed-in page, and the
steps they take on it (confirm an action, open an order, save a screenshot)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from devhost.durabletask_backend import free_port
from devhost.local_issuer import LocalIssuer
from operator_api.routes import CONSOLE_PATH
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from tests.harness import System, memory_dependencies, running_system
from tests.operator_tokens import local_issuer

WAIT_MS = 15_000
"""How long a page step waits for what it expects (ms)."""


@dataclass
class Console:
    """The running system, the console's URL and the issuer of its tokens."""

    system: System
    url: str
    issuer: LocalIssuer

    def token(self, name: str = "ana") -> str:
        return self.issuer.mint(name=name, roles=[OPERATOR_ROLE, REVIEWER_ROLE])

    def api(self, method: str, path: str, name: str = "ana", **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token(name)}", **kwargs.pop("headers", {})}
        url = f"{self.system.api_url}/api/operator/{path}"
        return httpx.request(method, url, headers=headers, timeout=10, **kwargs)


@contextmanager
def running_console(**settings: Any) -> Iterator[Console]:
    """A system on in-memory stores and queues with the operator API (and so the console) on a free
    port, trusting a local issuer's tokens; ``settings`` as :func:`tests.harness.running_system` takes
    them."""
    issuer = local_issuer()
    port = free_port()
    trust = issuer.operator_settings(f"http://127.0.0.1:{port}{issuer.jwks_path}")
    deps, close = memory_dependencies()
    try:
        with running_system(
            deps, api_port=port, local_issuer=issuer, operator_settings=trust, **settings
        ) as system:
            yield Console(system, f"{system.api_url}{CONSOLE_PATH}/", issuer)
    finally:
        close()


@contextmanager
def signed_in_page(browser: Any, console: Console) -> Iterator[Any]:
    """A page signed in as ``ana``; fails on any script error or console error it logged but a 4xx."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    problems: list[str] = []
    opened.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    opened.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
    opened.goto(console.url)
    opened.wait_for_url(re.compile(r"#/sign-in$"))
    opened.fill("#token", console.token())
    opened.click("#sign-in")
    opened.wait_for_selector("[data-testid=signed-in-as]")
    try:
        yield opened
    finally:
        context.close()
    # A refused action logs the failed request (4xx) as a console error: only those are expected.
    unexpected = [p for p in problems if "the server responded with a status of 4" not in p]
    assert unexpected == []


def shoot(page: Any, artifacts: Path, name: str) -> None:
    """A full-page screenshot, ``console-<name>.png`` in ``artifacts``."""
    page.screenshot(path=str(artifacts / f"console-{name}.png"), full_page=True)


def confirm(page: Any, action: str, *, accept: bool = True, of: str | None = None) -> None:
    """Click the button of ``action`` (the one for dead letter ``of``, when given), then Confirm (or
    Cancel) in the dialog, and wait for the dialog to close."""
    selector = f"[data-action={action}]" + (f"[data-dead-letter='{of}']" if of else "")
    page.click(selector)
    page.wait_for_selector("#confirm[open]")
    page.click("#confirm-ok" if accept else "#confirm-cancel")
    page.wait_for_selector("#confirm:not([open])", state="attached")


def open_order(page: Any, console: Console, order_id: str) -> str:
    """Open the page of the client's order ``order_id``; its key."""
    key = console.system.key(order_id)
    page.goto(f"{console.url}#/orders/{key}")
    page.wait_for_selector("[data-testid=process-state]")
    return key
