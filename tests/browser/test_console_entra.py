""" "Sign in with Microsoft" in headless Chromium: the console's authorization code flow with PKCE against a
fake authority that Playwright's ``page.route`` serves (its OpenID configuration, the authorize redirect
and the token endpoint), which issues a token signed by the local issuer's key, as the other browser
tests' tokens are. The test checks what the page sent at each step (the S256 challenge of the verifier it
redeems, its state, client id, redirect URI and scope), that the code left the address bar, and that the
console then calls the API with that token. Screenshots go to ``.test-artifacts/``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from operator_api.routes import CONSOLE_PATH
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from tests.browser.helpers import WAIT_MS, Console, running_console, shoot

pytestmark = pytest.mark.browser

ORIGIN = "https://login.fake-entra.test"
AUTHORITY = f"{ORIGIN}/tenant-1/v2.0"
CLIENT_ID = "7b3f6c1e-0d2a-4c5b-9e8f-1a2b3c4d5e6f"
CODE = "one-time-code-1"


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    with running_console(CONSOLE_CLIENT_ID=CLIENT_ID, CONSOLE_AUTHORITY=AUTHORITY) as console:
        yield console


class FakeAuthority:
    """An Entra-like authority served by ``page.route``: what it was asked, and its answers."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.authorize: dict[str, str] = {}
        self.redeem: dict[str, str] = {}
        self.redeem_origin: str | None = None

    def handle(self, route: Any) -> None:
        request = route.request
        cors = {"Access-Control-Allow-Origin": "*", "Content-Type": "application/json"}
        url = urlsplit(request.url)
        if url.path == "/tenant-1/v2.0/.well-known/openid-configuration":
            configuration = {
                "issuer": AUTHORITY,
                "authorization_endpoint": f"{ORIGIN}/tenant-1/oauth2/v2.0/authorize",
                "token_endpoint": f"{ORIGIN}/tenant-1/oauth2/v2.0/token",
            }
            route.fulfill(status=200, headers=cors, body=json.dumps(configuration))
        elif url.path == "/tenant-1/oauth2/v2.0/authorize":
            self.authorize = {k: v[0] for k, v in parse_qs(url.query).items()}
            answer = urlencode({"code": CODE, "state": self.authorize["state"]})
            route.fulfill(status=302, headers={"Location": f"{self.authorize['redirect_uri']}?{answer}"})
        elif url.path == "/tenant-1/oauth2/v2.0/token" and request.method == "POST":
            self.redeem = {k: v[0] for k, v in parse_qs(request.post_data or "").items()}
            self.redeem_origin = request.headers.get("origin")
            issued = {"token_type": "Bearer", "expires_in": 3600, "access_token": self.token}
            route.fulfill(status=200, headers=cors, body=json.dumps(issued))
        else:
            route.fulfill(status=404, headers=cors, body="{}")


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of ``verifier`` (RFC 7636 §4.2)."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def test_sign_in_with_microsoft_redeems_the_code_with_its_verifier_and_calls_the_api_with_the_token(
    browser: Any, console: Console, artifacts: Path
) -> None:
    token = console.issuer.mint(name="erin", roles=[OPERATOR_ROLE, REVIEWER_ROLE])
    fake = FakeAuthority(token)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    sent: list[tuple[str, str | None]] = []
    page.on("request", lambda r: sent.append((r.url, r.headers.get("authorization"))))
    try:
        page.route(f"{ORIGIN}/**", fake.handle)
        page.goto(console.url)
        page.wait_for_url(re.compile(r"#/sign-in$"))
        page.wait_for_selector("#sign-in-microsoft")
        assert page.locator("#token").count() == 1  # the paste-a-token form is still offered
        shoot(page, artifacts, "sign-in-microsoft")

        page.click("#sign-in-microsoft")
        page.wait_for_selector("[data-testid=signed-in-as]:text-is('erin')")
        page.wait_for_selector("[data-testid=order-count]")

        redirect = f"{console.system.api_url}{CONSOLE_PATH}/"
        assert {k: fake.authorize[k] for k in ("client_id", "response_type", "redirect_uri", "scope")} == {
            "client_id": CLIENT_ID,
            "response_type": "code",
            "redirect_uri": redirect,
            "scope": f"api://{console.issuer.audience}/.default",
        }
        assert fake.authorize["code_challenge_method"] == "S256"
        assert len(fake.authorize["state"]) >= 16
        assert fake.redeem["grant_type"] == "authorization_code" and fake.redeem["code"] == CODE
        assert (fake.redeem["client_id"], fake.redeem["redirect_uri"]) == (CLIENT_ID, redirect)
        assert s256(fake.redeem["code_verifier"]) == fake.authorize["code_challenge"]
        assert fake.redeem_origin == console.system.api_url  # a browser's cross-origin call, as Entra wants
        assert "code=" not in page.url and page.url.endswith("#/")

        api_calls = [
            (url, auth)
            for url, auth in sent
            if url.startswith(f"{console.system.api_url}/api/operator/orders")
        ]
        assert api_calls and all(auth == f"Bearer {token}" for _, auth in api_calls)
        assert problems == []
        shoot(page, artifacts, "signed-in-with-microsoft")
    finally:
        context.close()


def test_an_answer_that_is_not_this_tabs_sign_in_is_refused_and_nothing_is_kept(
    browser: Any, console: Console
) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    try:
        page.goto(f"{console.url}?{urlencode({'code': CODE, 'state': 'forged'})}")
        page.wait_for_selector("#notice:text('Sign-in failed')")
        assert page.url.endswith("#/sign-in") and "code=" not in page.url
        assert page.evaluate("window.sessionStorage.getItem('orderflow.operatorToken')") is None
    finally:
        context.close()


def test_the_console_config_names_the_sign_in_and_the_policy_lets_the_page_reach_the_authority(
    console: Console,
) -> None:
    configured = console.api("GET", "console-config").json()
    assert configured == {
        "authority": AUTHORITY,
        "clientId": CLIENT_ID,
        "scope": f"api://{console.issuer.audience}/.default",
    }
    served = console.api("GET", "console/")
    assert f"connect-src 'self' {ORIGIN};" in served.headers["content-security-policy"]
