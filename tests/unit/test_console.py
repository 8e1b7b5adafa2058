"""The web console's static files (operator_api.console): served by the operator API's handler without a
token, each with its content type and a strict Content-Security-Policy; only the console folder's own
files; and the pages build the document from text nodes, never from HTML."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient

from devhost.operator_http import create_operator_app
from operator_api.console import CONSOLE_DIR, CONTENT_SECURITY_POLICY, authority_origin, console_files
from operator_api.handler import handle_operator_request
from operator_api.routes import CONSOLE_CONFIG_PATH, CONSOLE_PATH
from operator_api.routing import OperatorApiSections
from orderflow.clock import FakeClock
from tests.unit.fakes import memory_deps

pytestmark = pytest.mark.unit

EXPECTED_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "main.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}


def get(path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    # validator=None: the API is not configured, so any route that needed a token would answer 503.
    deps = memory_deps(FakeClock())
    answer = handle_operator_request(
        method, path, {}, b"", deps=deps, sections=OperatorApiSections.of(deps.settings), validator=None
    )
    return answer.status, answer.all_headers(), answer.content()


@pytest.mark.parametrize(("name", "content_type"), EXPECTED_TYPES.items())
def test_each_file_is_served_without_a_token_with_its_type_and_the_policy(
    name: str, content_type: str
) -> None:
    status, headers, body = get(f"{CONSOLE_PATH}/{name}")

    assert status == 200
    assert body == (CONSOLE_DIR / name).read_bytes()
    assert headers["Content-Type"] == content_type
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Cache-Control"] == "no-cache"


def test_the_policy_allows_no_inline_script_or_style_and_no_framing() -> None:
    directives = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))

    assert directives["default-src"] == "'none'"
    assert (directives["script-src"], directives["style-src"]) == ("'self'", "'self'")
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY and "data:" not in CONTENT_SECURITY_POLICY


def test_the_folder_is_the_index_and_the_bare_path_redirects_to_it() -> None:
    status, headers, body = get(f"{CONSOLE_PATH}/")
    bare_status, bare_headers, _ = get(CONSOLE_PATH)

    assert (status, headers["Content-Type"]) == (200, "text/html; charset=utf-8")
    assert body == (CONSOLE_DIR / "index.html").read_bytes()
    assert (bare_status, bare_headers["Location"]) == (308, f"{CONSOLE_PATH}/")


@pytest.mark.parametrize(
    "name",
    [
        "../handler.py",
        "..%2Fhandler.py",
        "%2e%2e/handler.py",
        "../console.py",
        "Index.html",
        "index.html/",
        "sub/main.js",
        "main.js%00.html",
        ".hidden.js",
        "nothing.js",
    ],
)
def test_nothing_but_the_folders_own_files_is_served(name: str) -> None:
    status, headers, body = get(f"{CONSOLE_PATH}/{name}")

    assert status == 404
    assert headers["Content-Type"].startswith("application/json")
    assert b"NoSuchRoute" in body


def test_the_files_take_get_only() -> None:
    status, headers, _ = get(f"{CONSOLE_PATH}/index.html", method="POST")

    assert (status, headers["Allow"]) == (405, "GET")


def test_the_local_host_sends_the_files_with_their_headers() -> None:
    built = memory_deps(FakeClock())
    app = create_operator_app(built, OperatorApiSections.of(built.settings), None)
    with TestClient(app) as http:
        page = http.get(f"{CONSOLE_PATH}/")
        script = http.get(f"{CONSOLE_PATH}/main.js")
        api = http.get("/api/operator/orders")

    assert (page.status_code, page.headers["content-type"]) == (200, "text/html; charset=utf-8")
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert script.content == (CONSOLE_DIR / "main.js").read_bytes()
    assert api.status_code == 503  # a data call still needs the API configured and a token


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script":
            self.scripts.append(named)
        if tag == "style" or "style" in named or any(name.startswith("on") for name in named):
            self.inline.append(tag)

    def handle_data(self, data: str) -> None:
        if self.lasttag == "script" and data.strip():
            self.inline.append("script text")


def test_the_page_has_no_inline_script_style_or_handler() -> None:
    markup = _Markup()
    markup.feed((CONSOLE_DIR / "index.html").read_text(encoding="utf-8"))

    assert markup.scripts == [{"type": "module", "src": "main.js"}]
    assert markup.inline == []


HTML_SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|srcdoc"
)


def test_no_script_turns_text_into_markup() -> None:
    scripts = {
        name: content.decode() for name, (content, _) in console_files().items() if name.endswith(".js")
    }

    assert len(scripts) >= 8
    assert {name: HTML_SINKS.findall(text) for name, text in scripts.items() if HTML_SINKS.search(text)} == {}


IMPORT = re.compile(r"""(?:from|import)\s*\(?\s*["']\./([^"']+)["']""")


def test_every_module_a_script_imports_is_a_file_served() -> None:
    served = console_files()
    imported = {
        target
        for name, (content, _) in served.items()
        if name.endswith(".js")
        for target in IMPORT.findall(content.decode())
    }

    assert {"dom.js", "api.js", "page-dashboard.js", "page-order.js", "page-signin.js"} <= imported
    assert sorted(imported - set(served)) == []


def test_the_console_config_is_empty_until_a_client_id_is_set_and_then_widens_connect_src_only() -> None:
    status, _, body = get(CONSOLE_CONFIG_PATH)
    assert (status, json.loads(body)) == (200, {"authority": None, "clientId": None, "scope": None})
    assert get(CONSOLE_CONFIG_PATH, "POST")[0] == 405

    tenant = "5f0e2d4c-3b1a-4987-a6b5-c4d3e2f1a0b9"
    deps = memory_deps(
        FakeClock(),
        OPERATOR_TENANT_ID=tenant,
        OPERATOR_AUDIENCE="api://orderflow-api",
        CONSOLE_CLIENT_ID="c-1",
    )
    answer = handle_operator_request(
        "GET",
        CONSOLE_CONFIG_PATH,
        {},
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=None,
    )
    authority = f"https://login.microsoftonline.com/{tenant}/v2.0"
    assert (answer.status, answer.body) == (
        200,
        {"authority": authority, "clientId": "c-1", "scope": "api://orderflow-api/.default"},
    )
    page = handle_operator_request(
        "GET",
        f"{CONSOLE_PATH}/",
        {},
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=None,
    )
    policy = page.all_headers()["Content-Security-Policy"]
    assert policy == CONTENT_SECURITY_POLICY.replace(
        "connect-src 'self';", "connect-src 'self' https://login.microsoftonline.com;"
    )


@pytest.mark.parametrize(
    "authority",
    ["http://login.example/t", "https://", "https://a b/t", "https://x;script-src *", "javascript:x"],
)
def test_an_authority_that_would_bend_the_policy_is_refused(authority: str) -> None:
    with pytest.raises(ValueError, match="https URL"):
        authority_origin(authority)
