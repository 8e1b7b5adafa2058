"""The demo services accept only orderflow's agents: a bearer token from the local issuer, for their
audience, not expired, with the agents' app role; and the agents get one through their credential seam."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient

from agents.services import HttpRemoteService
from demo.faults import FaultPlan
from demo.services.app import create_app
from demo.services.auth import AgentAuth
from demo.services.bindings import DEMO_SERVICES_AUDIENCE, DEMO_SERVICES_SCOPE, demo_bindings
from demo.tpch import Catalog
from devhost.local_issuer import LocalIssuer
from devhost.service_credential import LOCAL_AGENTS_CLIENT_ID, LocalAgentCredential, audience_of
from orderflow.bindings import AGENT_ROLE, CachedTokens
from orderflow.errors import ServiceAuthRefused
from tests.operator_tokens import other_key, signing_key

pytestmark = pytest.mark.unit

BODY = {"orderId": "o1", "items": [{"sku": "10", "quantity": 1}]}


def issuer(audience: str = DEMO_SERVICES_AUDIENCE) -> LocalIssuer:
    return LocalIssuer(signing_key(), audience=audience, client_id=LOCAL_AGENTS_CLIENT_ID)


def agent_token(
    *,
    audience: str = DEMO_SERVICES_AUDIENCE,
    roles: tuple[str, ...] = (AGENT_ROLE,),
    now: float | None = None,
    lifetime_s: int = 3600,
) -> str:
    return issuer(audience).mint(name="orderflow-agents", roles=roles, now=now, lifetime_s=lifetime_s)


@pytest.fixture
def client() -> Iterator[TestClient]:
    catalog = Catalog(orders=[], stock={10: 10}, balances={1: Decimal("500.00")}, stock_divisor=1)
    app = create_app(catalog, FaultPlan(), auth=AgentAuth.trusting(issuer()))
    with TestClient(app, base_url="http://demo.test") as test_client:
        yield test_client


def reserve(client: TestClient, authorization: str | None, key: str = "o1:reserve") -> httpx.Response:
    headers = {"Idempotency-Key": key}
    if authorization is not None:
        headers["Authorization"] = authorization
    response: httpx.Response = client.post("/inventory/reservations", json=BODY, headers=headers)
    return response


def audit(client: TestClient) -> dict[str, Any]:
    answer: dict[str, Any] = client.get("/audit").json()
    return answer


def assert_refused(response: httpx.Response, status: int, code: str, client: TestClient) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code
    if status == 401:
        assert response.headers["WWW-Authenticate"] == f'Bearer error="{code}"'
    # Refused before the idempotency layer: no call counted, no effect, the key still free.
    assert audit(client)["calls_total"] == 0
    assert client.get("/stock/10").json()["available"] == 10


def test_a_call_without_a_token_is_refused(client: TestClient) -> None:
    assert_refused(reserve(client, None), 401, "invalid_token", client)
    assert_refused(reserve(client, "Basic b3JkZXJmbG93OnB3"), 401, "invalid_token", client)
    assert_refused(reserve(client, "Bearer "), 401, "invalid_token", client)


def test_a_token_for_another_audience_is_refused(client: TestClient) -> None:
    # A valid token of the same issuer, minted for the operator API.
    token = agent_token(audience="084b0e28-87b8-4c96-a75e-8e9dedc1b69c")
    response = reserve(client, f"Bearer {token}")
    assert_refused(response, 401, "invalid_token", client)
    assert "not for api://orderflow-demo-services" in response.json()["detail"]


def test_an_expired_token_is_refused(client: TestClient) -> None:
    # Issued two hours ago for an hour: expired well past the leeway.
    token = agent_token(now=time.time() - 7200)
    response = reserve(client, f"Bearer {token}")
    assert_refused(response, 401, "invalid_token", client)
    assert response.json()["detail"] == "the token has expired"


def test_a_token_living_longer_than_a_day_is_refused(client: TestClient) -> None:
    # Only a signing key's holder mints a token for a hundred years; Entra's live about an hour.
    response = reserve(client, f"Bearer {agent_token(lifetime_s=100 * 365 * 24 * 3600)}")
    assert_refused(response, 401, "invalid_token", client)
    assert response.json()["detail"] == "the token's lifetime is too long"


def test_a_token_without_the_agents_app_role_is_refused(client: TestClient) -> None:
    assert_refused(reserve(client, f"Bearer {agent_token(roles=())}"), 403, "missing_role", client)
    assert_refused(
        reserve(client, f"Bearer {agent_token(roles=('orderflow.operator',))}"), 403, "missing_role", client
    )


def test_a_forged_or_foreign_token_is_refused(client: TestClient) -> None:
    forged = LocalIssuer(other_key(), audience=DEMO_SERVICES_AUDIENCE).mint(name="x", roles=[AGENT_ROLE])
    assert_refused(reserve(client, f"Bearer {forged}"), 401, "invalid_token", client)
    foreign = LocalIssuer(
        signing_key(), issuer="https://elsewhere.example/v2.0", audience=DEMO_SERVICES_AUDIENCE
    )
    assert_refused(
        reserve(client, f"Bearer {foreign.mint(name='x', roles=[AGENT_ROLE])}"), 401, "invalid_token", client
    )
    claims = jwt.decode(agent_token(), options={"verify_signature": False})
    unsigned = jwt.encode(claims, key="", algorithm="none")
    assert_refused(reserve(client, f"Bearer {unsigned}"), 401, "invalid_token", client)


def test_the_agents_token_is_accepted(client: TestClient) -> None:
    response = reserve(client, f"Bearer {agent_token()}")

    assert response.status_code == 201, response.text
    assert client.get("/stock/10").json()["available"] == 9
    assert audit(client)["effects_total"] == 1


def test_an_agent_calls_through_its_credential_seam_and_is_accepted(client: TestClient) -> None:
    binding = demo_bindings("http://demo.test").services["inventory"]
    tokens = CachedTokens(LocalAgentCredential(signing_key()))
    service = HttpRemoteService("inventory", binding, tokens=tokens, client=client)

    result = service.call("reserve", BODY, order_id="o1", idempotency_key="o1:reserve", timeout_s=5)

    assert result["reservationId"]
    assert client.get("/stock/10").json()["available"] == 9
    assert audience_of(DEMO_SERVICES_SCOPE) == DEMO_SERVICES_AUDIENCE


def test_an_agent_whose_identity_lacks_the_role_gets_an_auth_refusal_not_a_business_one(
    client: TestClient,
) -> None:
    binding = demo_bindings("http://demo.test").services["inventory"]
    tokens = CachedTokens(LocalAgentCredential(signing_key(), roles=()))
    service = HttpRemoteService("inventory", binding, tokens=tokens, client=client)

    with pytest.raises(ServiceAuthRefused) as raised:
        service.call("reserve", BODY, order_id="o1", idempotency_key="o1:reserve", timeout_s=5)

    assert (raised.value.status, raised.value.code) == (403, "missing_role")
    assert client.get("/stock/10").json()["available"] == 10


def test_the_steering_routes_need_no_token_and_every_agent_call_does(client: TestClient) -> None:
    # Steering (/faults, /refund-policy) is for whoever runs the demo on this machine; the services listen
    # on loopback only. Every call an agent makes is behind the token check.
    assert client.get("/refund-policy").status_code == 200
    assert client.put("/refund-policy", json={"fee": "1.00"}).json()["fee"] == "1.00"
    assert client.get("/faults").status_code == 200
    for path in ("/payments/charges", "/payments/refunds", "/inventory/reservations", "/shipping/shipments"):
        assert client.post(path, json={}).status_code == 401, path


def test_a_path_with_a_trailing_slash_is_refused_before_any_redirect(client: TestClient) -> None:
    # A redirect answered before the token check tells an unauthenticated caller which routes exist.
    response = client.post("/inventory/reservations/", json=BODY, follow_redirects=False)
    assert response.status_code in (401, 404), response.headers
    assert "location" not in response.headers


def test_the_services_load_no_page_from_a_content_network(client: TestClient) -> None:
    # FastAPI's /docs and /redoc pull scripts from a CDN; the OpenAPI document itself stays.
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
    assert client.get("/openapi.json").json()["info"]["title"] == "orderflow demo services"
