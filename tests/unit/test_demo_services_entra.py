"""The demo services as a deployment runs them (demo.services.hosted): Entra ID v2.0 tokens of the tenant,
signed by a key of its JWKS, for the services' app registration, on every route; the service routes take
the agents' app role, the reporting routes the demo driver's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from demo.services.auth import DEMO_DRIVER_ROLE, AgentAuth, entra_issuer, entra_jwks_uri
from demo.services.hosted import hosted_app
from orderflow.bindings import AGENT_ROLE
from tests.harness import TPCH_FIXTURE
from tests.operator_tokens import other_key, signing_key

pytestmark = pytest.mark.unit

TENANT = "0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f"
CLIENT = "9a8b7c6d-5e4f-4321-8765-0fedcba98765"
KID = "tenant-key-1"


class TenantKeys(jwt.PyJWKClient):
    """The tenant's JWKS as Entra publishes it, served from memory: the signing key's public part."""

    def __init__(self, key: rsa.RSAPrivateKey) -> None:
        super().__init__(entra_jwks_uri(TENANT))
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        self._jwks = {"keys": [{**jwk, "kid": KID, "use": "sig", "alg": "RS256"}]}
        self.fetched = 0

    def fetch_data(self) -> Any:
        self.fetched += 1
        return self._jwks


def token(
    *,
    roles: tuple[str, ...] = (AGENT_ROLE,),
    audience: str = CLIENT,
    issuer: str = entra_issuer(TENANT),
    key: rsa.RSAPrivateKey | None = None,
    lifetime_s: int = 3600,
) -> str:
    # Entra stamps iat and nbf five minutes before it issues a token.
    now = int(time.time())
    claims = {
        "iss": issuer,
        "aud": audience,
        "tid": TENANT,
        "iat": now - 300,
        "nbf": now - 300,
        "exp": now + lifetime_s,
        "roles": list(roles),
    }
    return jwt.encode(claims, key or signing_key(), algorithm="RS256", headers={"kid": KID})


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    keys = TenantKeys(signing_key())
    entra = AgentAuth.entra
    monkeypatch.setattr(
        AgentAuth,
        "entra",
        classmethod(lambda cls, tenant, client, **kw: entra(tenant, client, keys=keys, **kw)),
    )
    environ = {"DEMO_SERVICES_TENANT_ID": TENANT, "DEMO_SERVICES_AUDIENCE": CLIENT}
    with TestClient(hosted_app(environ, data_dir=TPCH_FIXTURE), base_url="https://demo.test") as test_client:
        yield test_client


def reserve(client: TestClient, bearer: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": "demo:o1:reserve"}
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    # Part 40 is the fixture's one part in stock at the deployed divisor (one unit).
    body = {"orderId": "demo:o1", "items": [{"sku": "40", "quantity": 1}]}
    response: httpx.Response = client.post("/inventory/reservations", json=body, headers=headers)
    return response


def audit(client: TestClient, bearer: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {}
    response: httpx.Response = client.get("/audit", headers=headers)
    return response


def test_the_agents_call_with_a_tenant_token_for_the_registration_v2_or_v1(client: TestClient) -> None:
    assert reserve(client, token()).status_code == 201
    # A v1.0 token names the app ID URI; the reservation's key is the same call, replayed.
    replayed = reserve(client, token(audience=f"api://{CLIENT}"))
    assert (replayed.status_code, replayed.headers.get("Idempotent-Replayed")) == (201, "true")


def test_a_managed_identitys_day_long_token_is_accepted_and_a_longer_one_refused(client: TestClient) -> None:
    assert reserve(client, token(lifetime_s=24 * 3600)).status_code == 201
    refused = reserve(client, token(lifetime_s=30 * 3600))
    assert (refused.status_code, refused.json()["detail"]) == (401, "the token's lifetime is too long")


@pytest.mark.parametrize(
    ("bearer", "status", "code"),
    [
        (None, 401, "invalid_token"),
        (token(issuer=entra_issuer("11111111-2222-4333-8444-555555555555")), 401, "invalid_token"),
        (token(issuer="https://sts.windows.net/" + TENANT + "/"), 401, "invalid_token"),
        (token(audience="api://another-api"), 401, "invalid_token"),
        (token(key=other_key()), 401, "invalid_token"),  # a forger's key under the tenant's kid
        (token(roles=(DEMO_DRIVER_ROLE,)), 403, "missing_role"),
    ],
    ids=["no token", "another tenant", "v1 issuer", "another audience", "forged", "driver role only"],
)
def test_a_service_route_refuses(client: TestClient, bearer: str | None, status: int, code: str) -> None:
    answer = reserve(client, bearer)
    assert (answer.status_code, answer.json()["error"]) == (status, code)


def test_the_reporting_routes_take_the_demo_drivers_role(client: TestClient) -> None:
    assert audit(client, None).status_code == 401
    assert audit(client, token()).status_code == 403  # the agents' role reads no audit
    answer = audit(client, token(roles=(DEMO_DRIVER_ROLE,)))
    assert answer.status_code == 200
    assert answer.json()["calls_total"] == 0
    facts = client.get("/orders/demo:o1/facts", headers={"Authorization": f"Bearer {token()}"})
    assert facts.status_code == 403
    assert client.put("/faults", json={"transient_rate": 1.0}).status_code == 401


@pytest.mark.parametrize("missing", ["DEMO_SERVICES_TENANT_ID", "DEMO_SERVICES_AUDIENCE"])
def test_the_hosted_services_refuse_to_start_without_their_audience(missing: str, tmp_path: Path) -> None:
    environ = {"DEMO_SERVICES_TENANT_ID": TENANT, "DEMO_SERVICES_AUDIENCE": CLIENT, missing: " "}
    with pytest.raises(ValueError, match="tenant id and their app registration's client id"):
        hosted_app(environ, data_dir=tmp_path)


def test_the_tenant_keys_are_read_once_and_cached() -> None:
    keys = TenantKeys(signing_key())
    auth = AgentAuth.entra(TENANT, CLIENT, keys=keys)
    for _ in range(3):
        assert auth.claims(f"Bearer {token()}")["aud"] == CLIENT
    assert keys.fetched == 1


def signed(claims: dict[str, Any]) -> str:
    return jwt.encode(claims, signing_key(), algorithm="RS256", headers={"kid": KID})


def entra_claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": entra_issuer(TENANT),
        "aud": CLIENT,
        "tid": TENANT,
        "iat": now - 300,
        "nbf": now - 300,
        "exp": now + 3600,
        "roles": [AGENT_ROLE],
    }
    claims.update(changes)
    return {name: value for name, value in claims.items() if value is not None}


def test_a_well_formed_entra_token_with_its_tenant_is_accepted(client: TestClient) -> None:
    assert reserve(client, signed(entra_claims())).status_code == 201


@pytest.mark.parametrize(
    "changes",
    [
        {"iat": "1700000000"},  # a string where Entra writes a number: refused, not a 500
        {"exp": str(int(time.time()) + 3600)},
        {"tid": "11111111-2222-3333-4444-555555555555"},  # another tenant's token under this issuer
        {"aud": [CLIENT, "api://another-app"]},  # Entra's access tokens carry one audience
        {"nbf": None},  # Entra's access tokens always carry nbf
    ],
    ids=["string-iat", "string-exp", "other-tid", "aud-list", "no-nbf"],
)
def test_a_signed_token_with_malformed_or_foreign_claims_is_refused(
    client: TestClient, changes: dict[str, Any]
) -> None:
    response = reserve(client, signed(entra_claims(**changes)))
    assert response.status_code == 401, response.text
    assert response.json()["error"] == "invalid_token"
