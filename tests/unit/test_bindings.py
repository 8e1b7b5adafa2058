"""Service bindings: what start-up refuses (one line each), how a request is built, and the token cache."""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.core.credentials import AccessTokenInfo
from azure.core.exceptions import ClientAuthenticationError

from demo.services.bindings import demo_bindings, demo_bindings_json, main
from orderflow.bindings import (
    CachedTokens,
    EntraAuth,
    OperationBinding,
    ServiceBindings,
    is_private_host,
)
from orderflow.settings import Settings
from orderflow.settings.hosts import UnsafeAzureSetting
from orderflow.settings.workflow import check_bindings

pytestmark = pytest.mark.unit


def bindings_with(**changes: Any) -> dict[str, Any]:
    """The demo's bindings at an https URL, with ``changes`` applied to the payment binding."""
    raw: dict[str, Any] = json.loads(demo_bindings_json("https://services.example.com"))
    raw["payment"].update(changes)
    return raw


def refusals(raw: dict[str, Any], *, azure: bool) -> list[str]:
    return Settings.load({}, SERVICE_BINDINGS=json.dumps(raw)).agents.binding_refusals(azure=azure)


def test_the_demo_bindings_serve_every_workflow_locally_and_at_an_https_url_on_azure() -> None:
    assert (
        Settings.load(
            {}, SERVICE_BINDINGS=demo_bindings_json("http://127.0.0.1:8082")
        ).agents.binding_refusals(azure=False)
        == []
    )
    assert refusals(bindings_with(), azure=True) == []


def test_start_up_refuses_plain_http_to_a_public_host_everywhere() -> None:
    raw = bindings_with(baseUrl="http://payments.example.com")
    expected = ["payment: plain http to payments.example.com, a public host: use https"]
    assert refusals(raw, azure=False) == expected
    assert refusals(raw, azure=True) == expected
    settings = Settings.load({}, SERVICE_BINDINGS=json.dumps(raw))
    with pytest.raises(UnsafeAzureSetting) as refused:
        check_bindings(settings.agents, azure=False)
    assert str(refused.value) == f"SERVICE_BINDINGS {expected[0]}"
    assert "\n" not in str(refused.value)


def test_start_up_refuses_no_authentication_on_azure_to_a_public_host() -> None:
    raw = bindings_with(auth={"mode": "none", "reason": "the service takes no credential"})
    assert refusals(raw, azure=False) == []
    assert refusals(raw, azure=True) == [
        "payment: auth none to services.example.com, a public host: use entra "
        "(only a private host may go without)"
    ]
    # A private host may go without, with its reason.
    private = bindings_with(baseUrl="http://payments.internal", auth={"mode": "none", "reason": "a VNet"})
    assert refusals(private, azure=True) == []
    with pytest.raises(
        UnsafeAzureSetting, match=r"^SERVICE_BINDINGS payment: auth none to services\.example\.com"
    ):
        check_bindings(Settings.load({}, SERVICE_BINDINGS=json.dumps(raw)).agents, azure=True)


def test_no_authentication_needs_a_reason_and_auth_has_no_default() -> None:
    with pytest.raises(ValueError, match=r"^SERVICE_BINDINGS payment\.auth\.none\.reason: Field required"):
        ServiceBindings.parse(json.dumps(bindings_with(auth={"mode": "none"})))
    raw = bindings_with()
    del raw["payment"]["auth"]
    with pytest.raises(ValueError, match=r"^SERVICE_BINDINGS payment\.auth: Field required"):
        ServiceBindings.parse(json.dumps(raw))


def test_start_up_refuses_a_step_whose_operation_has_no_mapping() -> None:
    raw = bindings_with()
    del raw["payment"]["operations"]["refund"]
    assert refusals(raw, azure=False) == ["payment: no mapping for operation 'refund'"]
    del raw["courier"]  # the fallback provider of order-v3's shipment
    assert refusals(raw, azure=False) == [
        "courier: no mapping for operation 'cancel'",
        "courier: no mapping for operation 'ship'",
        "payment: no mapping for operation 'refund'",
    ]
    assert (
        Settings.load({}).agents.binding_refusals(azure=False)[0]
        == "courier: no mapping for operation 'cancel'"
    )


def test_azure_refuses_a_loopback_binding() -> None:
    assert refusals(bindings_with(baseUrl="http://127.0.0.1:8082"), azure=True) == [
        "payment: 127.0.0.1 is a loopback address, where nothing answers on Azure"
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[1]", "SERVICE_BINDINGS is not a JSON object of service name -> binding"),
        (
            "{",
            "SERVICE_BINDINGS is not JSON: Expecting property name enclosed in double quotes at position 1",
        ),
    ],
)
def test_a_setting_that_does_not_parse_is_refused_at_load(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Settings.load({}, SERVICE_BINDINGS=value)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"baseUrl": "ftp://x.example.com"}, "baseUrl"),
        ({"baseUrl": "https://user:pw@x.example.com"}, "carries credentials"),
        ({"operations": {"charge": {"path": "/charges/{customerId}"}}}, "customerId"),
        ({"operations": {"charge": {"path": "charges"}}}, "must start with '/'"),
        ({"operations": {"charge": {"path": "/c", "method": "GET"}}}, "method"),
        ({"timeoutS": 0}, "timeoutS"),
    ],
)
def test_a_malformed_binding_is_refused_naming_the_field(changes: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=r"^SERVICE_BINDINGS payment") as refused:
        ServiceBindings.parse(json.dumps(bindings_with(**changes)))
    assert fragment in str(refused.value)


def test_the_path_template_fills_and_quotes_its_placeholders() -> None:
    route = OperationBinding(path="/orders/{orderId}/refunds/{forwardKey}", result=("refundId",))
    path = route.path_for(order_id="c/o 1", idempotency_key="k", forward_key="c/o 1:charge")
    assert path == "/orders/c%2Fo%201/refunds/c%2Fo%201%3Acharge"


@pytest.mark.parametrize(
    ("host", "private"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("10.1.2.3", True),
        ("192.168.0.9", True),
        ("[fd00::1]", True),
        ("payments", True),
        ("payments.internal", True),
        ("app.internal.blue-sky.westeurope.azurecontainerapps.io", True),
        ("svc.ns.svc.cluster.local", True),
        ("payments.example.com", False),
        ("8.8.8.8", False),
        ("internal.example.com", False),
        ("app.internal.example.com", False),
        ("internal.azurecontainerapps.io", False),
        ("", False),
    ],
)
def test_private_hosts(host: str, private: bool) -> None:
    assert is_private_host(host) is private


def test_the_demo_binding_round_trips_through_its_json() -> None:
    bindings = demo_bindings("http://127.0.0.1:1")
    assert ServiceBindings.parse(bindings.to_json()) == bindings


# --- the credential seam's cache -----------------------------------------------------------------


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedCredential:
    """Hands out ``t1``, ``t2`` ... expiring ``lifetime_s`` after the fake clock, ``refresh_on`` as told."""

    def __init__(self, clock: FakeClock, *, lifetime_s: int, refresh_after_s: int | None) -> None:
        self.clock = clock
        self.lifetime_s = lifetime_s
        self.refresh_after_s = refresh_after_s
        self.fetches = 0
        self.failing = False

    def get_token_info(self, *scopes: str) -> AccessTokenInfo:
        assert scopes == ("api://svc/.default",)
        if self.failing:
            raise ClientAuthenticationError("the identity endpoint is down")
        self.fetches += 1
        now = int(self.clock())
        refresh = None if self.refresh_after_s is None else now + self.refresh_after_s
        return AccessTokenInfo(f"t{self.fetches}", now + self.lifetime_s, refresh_on=refresh)


def test_tokens_are_cached_until_refresh_on_then_fetched_again() -> None:
    clock = FakeClock(1_000_000.0)
    credential = ScriptedCredential(clock, lifetime_s=3600, refresh_after_s=1800)
    tokens = CachedTokens(credential, clock=clock)

    assert [tokens.token("api://svc/.default") for _ in range(3)] == ["t1"] * 3
    clock.now += 1799
    assert tokens.token("api://svc/.default") == "t1"
    clock.now += 1  # refresh_on reached, an half hour before expiry
    assert tokens.token("api://svc/.default") == "t2"
    assert credential.fetches == 2


def test_without_refresh_on_a_token_is_refreshed_five_minutes_before_expiry() -> None:
    clock = FakeClock(1_000_000.0)
    credential = ScriptedCredential(clock, lifetime_s=3600, refresh_after_s=None)
    tokens = CachedTokens(credential, clock=clock)

    assert tokens.token("api://svc/.default") == "t1"
    clock.now += 3600 - 301
    assert tokens.token("api://svc/.default") == "t1"
    clock.now += 1
    assert tokens.token("api://svc/.default") == "t2"


def test_a_failed_refresh_keeps_a_token_still_valid_and_raises_once_it_is_not() -> None:
    clock = FakeClock(1_000_000.0)
    credential = ScriptedCredential(clock, lifetime_s=3600, refresh_after_s=1800)
    tokens = CachedTokens(credential, clock=clock)
    assert tokens.token("api://svc/.default") == "t1"

    credential.failing = True
    clock.now += 1800
    assert tokens.token("api://svc/.default") == "t1"  # still valid: used while the refresh fails
    clock.now += 1800 - 29
    with pytest.raises(ClientAuthenticationError):
        tokens.token("api://svc/.default")
    credential.failing = False
    assert tokens.token("api://svc/.default") == "t2"


def test_a_forgotten_token_is_fetched_again_at_once() -> None:
    clock = FakeClock(1_000_000.0)
    credential = ScriptedCredential(clock, lifetime_s=3600, refresh_after_s=1800)
    tokens = CachedTokens(credential, clock=clock)
    assert tokens.token("api://svc/.default") == "t1"
    tokens.forget("api://svc/.default")
    assert tokens.token("api://svc/.default") == "t2"


def test_the_bindings_command_prints_the_demo_bindings_for_a_scope_and_refuses_a_bad_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["https://services.example.com", "--scope", "api://demo-services/.default"]) == 0
    printed = ServiceBindings.parse(capsys.readouterr().out)
    assert {b.auth.scope for b in printed.services.values() if isinstance(b.auth, EntraAuth)} == {
        "api://demo-services/.default"
    }
    assert main(["ftp://services.example.com"]) == 2
    assert "python -m demo.services.bindings: " in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert "--scope" in capsys.readouterr().out
