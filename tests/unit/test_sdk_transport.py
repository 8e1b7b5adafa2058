"""The Azure SDKs' shared transport for remote endpoints: one session, the environment read once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests.sessions
import requests.utils
from azure.core.pipeline.transport import HttpRequest, RequestsTransport

from orderflow import sdk_transport
from orderflow.sdk_transport import EnvironmentReadOnce, shared_transport
from orderflow.stores.cosmos import connection

pytestmark = pytest.mark.unit

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self.server.paths.append(self.path)  # a proxy is sent the absolute URL
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.paths: list[str] = []


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (*PROXY_VARIABLES, *sdk_transport.CA_BUNDLE_VARIABLES):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_the_process_shares_one_transport_whose_session_ignores_the_environment() -> None:
    transport = shared_transport()
    assert shared_transport() is transport
    assert isinstance(transport.session, EnvironmentReadOnce)
    assert transport.session.trust_env is False
    assert transport._session_owner is False  # a client's close leaves the pool to the others


def test_a_proxy_set_at_start_up_is_honoured_and_no_proxy_exempts_a_host(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    clean_environment.setenv("NO_PROXY", "direct.example")
    session = EnvironmentReadOnce()
    account = session.merge_environment_settings("https://acct.documents.azure.com/dbs", {}, None, True, None)
    direct = session.merge_environment_settings("https://direct.example/x", {}, None, True, None)
    assert account["proxies"]["https"] == "http://proxy.example:3128"
    assert "https" not in direct["proxies"]
    clean_environment.setenv("HTTPS_PROXY", "http://later.example:1")
    again = session.merge_environment_settings("https://acct.documents.azure.com/other", {}, None, True, None)
    assert again["proxies"]["https"] == "http://proxy.example:3128"  # read once, on the first request


def test_no_proxy_naming_a_port_exempts_that_port_only_whichever_is_asked_first(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    clean_environment.setenv("NO_PROXY", "acct.example:8443")
    for urls in (
        ("https://acct.example/dbs", "https://acct.example:8443/dbs"),
        ("https://acct.example:8443/dbs", "https://acct.example/dbs"),
    ):
        session = EnvironmentReadOnce()
        found = {url: session.merge_environment_settings(url, {}, None, True, None) for url in urls}
        assert found["https://acct.example/dbs"]["proxies"].get("https") == "http://proxy.example:3128"
        assert "https" not in found["https://acct.example:8443/dbs"]["proxies"]  # as requests decides
        assert not requests.utils.get_environ_proxies("https://acct.example:8443/dbs")


def test_requests_go_through_the_proxy_of_the_environment(
    clean_environment: pytest.MonkeyPatch, server: _Server
) -> None:
    clean_environment.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_address[1]}")
    transport = RequestsTransport(session=EnvironmentReadOnce(), session_owner=False)
    with transport:
        answer = transport.send(HttpRequest("GET", "http://orderflow.invalid/dbs/x"))
    assert (answer.status_code, answer.body()) == (200, b"ok")
    assert server.paths == ["http://orderflow.invalid/dbs/x"]  # the absolute URL: sent to the proxy


def test_no_request_looks_up_netrc_and_a_host_proxies_once(
    clean_environment: pytest.MonkeyPatch, server: _Server
) -> None:
    netrc_lookups: list[str] = []
    proxy_lookups: list[str] = []
    real_proxies = requests.utils.get_environ_proxies

    def count_netrc(url: str, *_args: Any) -> None:
        netrc_lookups.append(url)

    def count_proxies(url: str, no_proxy: str | None = None) -> dict[str, str]:
        proxy_lookups.append(url)
        return dict(real_proxies(url, no_proxy=no_proxy))

    clean_environment.setattr(requests.sessions, "get_netrc_auth", count_netrc)
    clean_environment.setattr(sdk_transport, "get_environ_proxies", count_proxies)
    url = f"http://127.0.0.1:{server.server_address[1]}/q"
    lean = RequestsTransport(session=EnvironmentReadOnce(), session_owner=False)
    with lean:
        statuses = [lean.send(HttpRequest("GET", f"{url}{n}")).status_code for n in range(5)]
    assert statuses == [200] * 5
    assert (len(netrc_lookups), proxy_lookups) == (0, [f"{url}0"])
    with RequestsTransport() as default:  # azure-core's own: a netrc lookup per request
        default.send(HttpRequest("GET", f"{url}5"))
        default.send(HttpRequest("GET", f"{url}6"))
    assert len(netrc_lookups) == 2


def test_the_ca_bundle_of_the_environment_is_read_once_and_an_explicit_choice_wins(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("CURL_CA_BUNDLE", "/etc/ssl/corp.pem")
    session = EnvironmentReadOnce()
    clean_environment.setenv("CURL_CA_BUNDLE", "/elsewhere.pem")
    assert session.ca_bundle == "/etc/ssl/corp.pem"
    assert session.merge_environment_settings("https://a.example/", {}, None, True, None)["verify"] == (
        "/etc/ssl/corp.pem"
    )
    assert session.merge_environment_settings("https://a.example/", {}, None, False, None)["verify"] is False
    assert EnvironmentReadOnce(environ={}).ca_bundle is None


def test_cosmos_stores_connect_over_the_shared_transport_unless_given_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given: list[object] = []

    class Stop(Exception):
        pass

    def fake_client(endpoint: str, **kwargs: Any) -> None:
        given.append(kwargs["transport"])
        raise Stop

    monkeypatch.setattr(connection, "CosmosClient", fake_client)
    with pytest.raises(Stop):
        connection.CosmosStores.connect("https://acct.documents.azure.com:443/", key="a2V5")
    own = RequestsTransport()
    with pytest.raises(Stop):
        connection.CosmosStores.connect("https://acct.documents.azure.com:443/", key="a2V5", transport=own)
    assert given == [shared_transport(), own]
