"""Bearer tokens of the operator API: each attack first, then the defence that refuses it.

The signing keys are served over real HTTP on loopback, so ``orderflow.signing_keys`` really fetches,
caches and refetches them (through ``jwt.PyJWKClient``), and the endpoint can hang: the key set tests run
requests from several threads against it. Every refusal is checked not to quote the token or any part of
it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from orderflow import signing_keys, telemetry
from orderflow.errors import ErrorKind, TransientError, kind_of
from orderflow.operator_auth import (
    MAX_KEY_ID_CHARS,
    MAX_TOKEN_LIFETIME_S,
    OPERATOR_ROLE,
    REQUIRED_CLAIMS,
    REVIEWER_ROLE,
    Forbidden,
    Principal,
    SigningKeysUnavailable,
    TokenPolicy,
    TokenValidator,
    Unauthenticated,
    authorize,
    http_refusal,
    known_roles,
    validator_from_settings,
    www_authenticate,
)
from orderflow.settings import Settings
from orderflow.settings.operator_api import entra_issuer, entra_jwks_uri, entra_v1_issuer

pytestmark = pytest.mark.unit

TENANT = "3f0c0a5e-2f4e-4d8a-9d1b-7c2a1e0b9f10"
OTHER_TENANT = "9d2b4c6e-1a3f-4e5d-8c7b-6a5f4e3d2c1b"
API_CLIENT_ID = "5b7e2c1d-4a3f-4b2e-9d8c-1f0e2d3c4b5a"
CLI_CLIENT_ID = "7c8d9e0f-1a2b-4c3d-8e4f-5a6b7c8d9e0f"
USER_OID = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
KID = "key-1"


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def attacker_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig"}


class JwksEndpoint:
    """A JWKS endpoint on loopback that serves :attr:`document` and counts the fetches.

    After :meth:`hang` it reads each request and answers nothing until :meth:`answer` (or :meth:`close`).
    """

    def __init__(self) -> None:
        self.document: Any = {"keys": []}
        self.status = 200
        self.fetches = 0
        self.requested = threading.Event()
        self._hanging = False
        self._answer = threading.Event()
        self._count = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with endpoint._count:
                    endpoint.fetches += 1
                endpoint.requested.set()
                if endpoint._hanging:
                    endpoint._answer.wait(30)
                body = json.dumps(endpoint.document).encode()
                self.send_response(endpoint.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/{TENANT}/discovery/v2.0/keys"

    def publish(self, *jwks: dict[str, Any]) -> None:
        self.document = {"keys": list(jwks)}

    def hang(self) -> None:
        """Answer no request from now on, until :meth:`answer`."""
        self.requested.clear()
        self._answer.clear()
        self._hanging = True

    def answer(self) -> None:
        """Answer the requests held, and every later one at once."""
        self._hanging = False
        self._answer.set()

    def close(self) -> None:
        self.answer()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def endpoint(signing_key: rsa.RSAPrivateKey) -> Iterator[JwksEndpoint]:
    served = JwksEndpoint()
    served.publish(public_jwk(signing_key, KID))
    try:
        yield served
    finally:
        served.close()


def make_policy(jwks_uri: str, **changes: Any) -> TokenPolicy:
    values: dict[str, Any] = {
        "issuer": entra_issuer(TENANT),
        "audiences": (API_CLIENT_ID,),
        "tenant_id": TENANT,
        "jwks_uri": jwks_uri,
        "leeway_s": 60.0,
    }
    return TokenPolicy(**{**values, **changes})


@pytest.fixture
def validator(endpoint: JwksEndpoint) -> TokenValidator:
    return TokenValidator(make_policy(endpoint.url))


def claims(**changes: Any) -> dict[str, Any]:
    """An Entra v2.0 access token's claims for a reviewer; a change to None removes the claim."""
    now = int(time.time())
    values: dict[str, Any] = {
        "aud": API_CLIENT_ID,
        "iss": entra_issuer(TENANT),
        "iat": now,
        "nbf": now,
        "exp": now + 3600,
        "azp": CLI_CLIENT_ID,
        "name": "Alice Reviewer",
        "preferred_username": "alice@contoso.example",
        "oid": USER_OID,
        "roles": [REVIEWER_ROLE],
        "sub": "aBcD-pairwise-subject",
        "tid": TENANT,
        "ver": "2.0",
    }
    values.update(changes)
    return {name: value for name, value in values.items() if value is not None}


def sign(
    payload: dict[str, Any], key: rsa.RSAPrivateKey, *, kid: str | None = KID, alg: str = "RS256"
) -> str:
    headers = {"typ": "JWT"} if kid is None else {"kid": kid, "typ": "JWT"}
    return jwt.encode(payload, key, algorithm=alg, headers=headers)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def handmade(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> tuple[str, str]:
    """``(signing input, token)`` of a token put together by hand, as an attacker would."""
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}"
    return signing_input, f"{signing_input}.{b64url(signature)}"


def assert_not_echoed(error: Exception, token: str) -> None:
    texts = [str(error), getattr(error, "reason", "")]
    if isinstance(error, Unauthenticated | Forbidden):
        texts.append(error.www_authenticate())
    for part in (token, *(segment for segment in token.split(".") if len(segment) > 8)):
        for text in texts:
            assert part not in text


def refused(validator: TokenValidator, token: str) -> Unauthenticated:
    with pytest.raises(Unauthenticated) as raised:
        validator.validate_token(token)
    assert_not_echoed(raised.value, token)
    assert raised.value.error == "invalid_token"
    return raised.value


# --- the token every other test breaks ---------------------------------------------------------------


def test_a_valid_token_proves_its_principal(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    principal = validator.authenticate(f"Bearer {sign(claims(), signing_key)}")

    assert principal == Principal(
        object_id=USER_OID,
        tenant_id=TENANT,
        subject="aBcD-pairwise-subject",
        roles=frozenset({REVIEWER_ROLE}),
        app_id=CLI_CLIENT_ID,
        display_name="Alice Reviewer",
    )
    assert principal.audit_fields() == {
        "principalId": USER_OID,
        "tenantId": TENANT,
        "appId": CLI_CLIENT_ID,
        "displayName": "Alice Reviewer",
    }


def test_the_scheme_is_case_insensitive_and_a_v1_app_id_or_username_fills_in(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    token = sign(claims(azp=None, appid=CLI_CLIENT_ID, name=None, roles=None), signing_key)

    principal = validator.authenticate(f"bearer  {token} ")

    assert principal.app_id == CLI_CLIENT_ID
    assert principal.display_name == "alice@contoso.example"  # for display only
    assert principal.roles == frozenset()


# --- no token, not a bearer token, not a token -------------------------------------------------------


@pytest.mark.parametrize("authorization", [None, "", "   ", "Bearer", "Bearer    "])
def test_no_token_is_401_with_a_challenge_that_names_no_error(
    validator: TokenValidator, authorization: str | None
) -> None:
    with pytest.raises(Unauthenticated) as raised:
        validator.authenticate(authorization)

    assert raised.value.kind is ErrorKind.UNAUTHENTICATED
    assert str(raised.value).startswith("[unauthenticated] ")
    assert http_refusal(raised.value) == (401, {"WWW-Authenticate": 'Bearer realm="orderflow"'})


def test_another_scheme_is_not_a_bearer_token(validator: TokenValidator) -> None:
    credentials = "Basic " + base64.b64encode(b"operator:hunter2").decode()

    with pytest.raises(Unauthenticated) as raised:
        validator.authenticate(credentials)

    assert raised.value.reason == "not a bearer token"
    assert raised.value.error is None
    assert_not_echoed(raised.value, credentials.split()[1])


@pytest.mark.parametrize(
    "token",
    [
        "not-a-jwt",
        "a.b.c",
        "eyJhbGciOiJSUzI1NiJ9.eyJvaWQiOiIxIn0",  # two segments
        "two words",
        '"quoted"',
        "x" * 20_000,  # longer than any Entra token
    ],
)
def test_a_malformed_token_is_401_invalid_token(validator: TokenValidator, token: str) -> None:
    with pytest.raises(Unauthenticated) as raised:
        validator.authenticate(f"Bearer {token}")

    assert raised.value.error == "invalid_token"
    assert_not_echoed(raised.value, token)
    status, headers = http_refusal(raised.value)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('Bearer realm="orderflow", error="invalid_token"')


# --- claims that do not fit ---------------------------------------------------------------------------


def test_a_token_for_another_api_is_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    # A token the caller legitimately holds for some other API of the same tenant.
    other_api = sign(claims(aud="00000003-0000-0000-c000-000000000000"), signing_key)

    assert refused(validator, other_api).reason == "wrong audience"


def test_an_audience_list_or_uri_is_accepted_only_when_configured(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey
) -> None:
    uri = f"api://{API_CLIENT_ID}"
    token = sign(claims(aud=uri), signing_key)

    assert refused(TokenValidator(make_policy(endpoint.url)), token).reason == "wrong audience"
    both = TokenValidator(make_policy(endpoint.url, audiences=(API_CLIENT_ID, uri)))
    assert both.validate_token(token).object_id == USER_OID


@pytest.mark.parametrize(
    "issuer",
    [
        entra_issuer(OTHER_TENANT),
        entra_v1_issuer(TENANT),  # a v1.0 token, not configured
        entra_issuer(TENANT) + "/",
        entra_issuer(TENANT).removesuffix("/v2.0"),
        f"https://login.microsoftonline.com/{TENANT}/v2.0.evil.example",
        "https://sts.evil.example/",
    ],
)
def test_a_token_from_another_issuer_is_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey, issuer: str
) -> None:
    assert refused(validator, sign(claims(iss=issuer), signing_key)).reason == "wrong issuer"


def test_v1_tokens_are_accepted_only_when_their_issuer_is_the_configured_one(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey
) -> None:
    v1 = sign(claims(iss=entra_v1_issuer(TENANT), ver="1.0", azp=None, appid=CLI_CLIENT_ID), signing_key)

    accepted = TokenValidator(make_policy(endpoint.url, issuer=entra_v1_issuer(TENANT))).validate_token(v1)

    assert accepted.app_id == CLI_CLIENT_ID


def test_a_token_of_another_tenant_is_refused_even_under_the_configured_issuer(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    assert refused(validator, sign(claims(tid=OTHER_TENANT), signing_key)).reason == "wrong tenant"


def test_an_expired_token_is_refused_past_the_leeway_only(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    now = int(time.time())
    expired = sign(claims(iat=now - 7200, nbf=now - 7200, exp=now - 120), signing_key)
    within_leeway = sign(claims(iat=now - 7200, nbf=now - 7200, exp=now - 30), signing_key)

    assert refused(validator, expired).reason == "token expired"
    assert validator.validate_token(within_leeway).object_id == USER_OID


@pytest.mark.parametrize("claim", ["nbf", "iat"])
def test_a_token_not_yet_valid_is_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey, claim: str
) -> None:
    later = sign(claims(**{claim: int(time.time()) + 600}), signing_key)

    assert refused(validator, later).reason == "token not yet valid"


@pytest.mark.parametrize("claim", REQUIRED_CLAIMS)
def test_a_token_without_a_required_claim_is_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey, claim: str
) -> None:
    reason = refused(validator, sign(claims(**{claim: None}), signing_key)).reason

    assert reason == f"no {claim} claim"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"oid": 42}, "malformed oid claim"),
        ({"oid": ["0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"]}, "malformed oid claim"),
        ({"oid": ""}, "no oid claim"),
        ({"oid": None}, "no oid claim"),
        ({"roles": OPERATOR_ROLE}, "malformed roles claim"),  # a string, not a list: no role by substring
        ({"roles": [OPERATOR_ROLE, 1]}, "malformed roles claim"),
        ({"exp": "tomorrow"}, "malformed exp claim"),
        ({"oid": "not-a-guid"}, "malformed oid claim"),
        ({"oid": "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0-extra"}, "malformed oid claim"),
        ({"tid": "contoso.example"}, "wrong tenant"),
        ({"azp": "the-cli"}, "malformed azp claim"),
    ],
)
def test_a_claim_of_the_wrong_type_is_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey, changes: dict[str, Any], reason: str
) -> None:
    assert refused(validator, sign(claims(**changes), signing_key)).reason == reason


def numeric_date_attacks() -> list[Any]:
    """``(claim, value, reason)``: what an ``exp``, ``nbf`` or ``iat`` might be instead of a number of
    seconds; ``value`` is a function of the current time."""
    values: dict[str, Any] = {
        "numeric-string": str,
        "float-string": lambda now: f"{now}.5",
        "true": lambda now: True,
        "false": lambda now: False,
        "huge": lambda now: 10**40,
        "infinite": lambda now: float("inf"),
        "not-a-number": lambda now: float("nan"),
        "negative": lambda now: -1,
        "list": lambda now: [now],
        "object": lambda now: {"seconds": now},
    }
    return [
        pytest.param(claim, value, f"malformed {claim} claim", id=f"{claim}-{name}")
        for claim in ("exp", "nbf", "iat")
        for name, value in values.items()
    ] + [
        pytest.param(claim, lambda now: None, f"no {claim} claim", id=f"{claim}-null")
        for claim in ("exp", "nbf", "iat")
    ]


def numeric_date_token(claim: str, value: Any, key: rsa.RSAPrivateKey, kid: str = KID) -> str:
    now = int(time.time())
    payload = claims(**{"iat": now, "nbf": now, "exp": now + 3600})
    payload[claim] = value(now + 3600 if claim == "exp" else now)
    return sign(payload, key, kid=kid)


@pytest.mark.parametrize(("claim", "value", "reason"), numeric_date_attacks())
def test_a_time_claim_that_is_not_a_number_of_seconds_is_401(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey, claim: str, value: Any, reason: str
) -> None:
    assert refused(validator, numeric_date_token(claim, value, signing_key)).reason == reason


def test_a_malformed_time_claim_is_refused_before_any_key_is_fetched(
    endpoint: JwksEndpoint, validator: TokenValidator, attacker_key: rsa.RSAPrivateKey
) -> None:
    token = numeric_date_token("exp", str, attacker_key, kid="made-up")

    assert refused(validator, token).reason == "malformed exp claim"
    assert endpoint.fetches == 0


def test_time_claims_with_fractions_of_a_second_are_numbers(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    now = time.time()  # RFC 7519 NumericDate: "can be non-integer"
    token = sign(claims(iat=now, nbf=now, exp=now + 3600.5), signing_key)

    assert validator.validate_token(token).object_id == USER_OID


@pytest.mark.parametrize(
    "form",
    [
        "{" + USER_OID + "}",
        USER_OID.upper(),
        "{" + USER_OID.upper() + "}",
        "urn:uuid:" + USER_OID,
        USER_OID.replace("-", ""),
    ],
    ids=["braces", "upper-case", "braces-upper-case", "urn", "no-hyphens"],
)
def test_guid_claims_are_read_as_guids_whatever_their_written_form(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey, form: str
) -> None:
    tenant_form = form.replace(USER_OID, TENANT).replace(USER_OID.upper(), TENANT.upper())
    tenant_form = tenant_form.replace(USER_OID.replace("-", ""), TENANT.replace("-", ""))
    app_form = tenant_form.replace(TENANT, CLI_CLIENT_ID).replace(TENANT.upper(), CLI_CLIENT_ID.upper())
    app_form = app_form.replace(TENANT.replace("-", ""), CLI_CLIENT_ID.replace("-", ""))
    token = sign(claims(oid=form, tid=tenant_form, azp=app_form), signing_key)

    principal = validator.validate_token(token)

    assert (principal.object_id, principal.tenant_id, principal.app_id) == (USER_OID, TENANT, CLI_CLIENT_ID)
    assert principal.audit_id == f"{TENANT}/{USER_OID}"


@pytest.mark.parametrize(
    ("principal_id", "same"),
    [
        (USER_OID, True),
        ("{" + USER_OID.upper() + "}", True),
        ("urn:uuid:" + USER_OID, True),
        (OTHER_TENANT, False),
        ("not-a-guid", True),  # cannot be told apart from the principal: counted as it
        ("", True),
    ],
)
def test_a_principal_is_compared_by_guid_and_an_id_that_is_no_guid_counts_as_the_same(
    principal_id: str, same: bool
) -> None:
    principal = Principal(object_id=USER_OID, tenant_id=TENANT, subject="s", roles=frozenset())
    unparsable = Principal(object_id="oid-otto", tenant_id=TENANT, subject="s", roles=frozenset())

    assert principal.may_be(principal_id) is same
    assert unparsable.may_be(USER_OID) is True


# --- signatures ---------------------------------------------------------------------------------------


def test_a_forged_signature_under_the_real_key_id_is_refused(
    validator: TokenValidator, attacker_key: rsa.RSAPrivateKey
) -> None:
    forged = sign(claims(roles=[OPERATOR_ROLE, REVIEWER_ROLE]), attacker_key, kid=KID)

    assert refused(validator, forged).reason == "bad signature"


def test_a_payload_changed_after_signing_is_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    header, _, signature = sign(claims(), signing_key).split(".")
    escalated = b64url(json.dumps(claims(roles=[OPERATOR_ROLE])).encode())

    assert refused(validator, f"{header}.{escalated}.{signature}").reason == "bad signature"


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_an_unsigned_token_is_refused_before_any_key_is_fetched(
    validator: TokenValidator, endpoint: JwksEndpoint, alg: str
) -> None:
    _, unsigned = handmade({"alg": alg, "kid": KID, "typ": "JWT"}, claims(roles=[OPERATOR_ROLE]))

    assert refused(validator, unsigned).reason == "signing algorithm not allowed"
    assert endpoint.fetches == 0


def test_hmac_signed_with_the_public_key_is_refused(
    validator: TokenValidator, endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey
) -> None:
    # Key confusion: the public key is public, so an HMAC "signed" with it proves nothing.
    public_pem = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    signing_input, _ = handmade({"alg": "HS256", "kid": KID, "typ": "JWT"}, claims(roles=[OPERATOR_ROLE]))
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()

    assert refused(validator, f"{signing_input}.{b64url(mac)}").reason == "signing algorithm not allowed"
    assert endpoint.fetches == 0


@pytest.mark.parametrize("alg", ["RS512", "PS256"])
def test_other_rsa_algorithms_are_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey, alg: str
) -> None:
    assert refused(validator, sign(claims(), signing_key, alg=alg)).reason == "signing algorithm not allowed"


def test_a_token_without_a_key_id_is_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    assert refused(validator, sign(claims(), signing_key, kid=None)).reason == "no key id"


def test_a_key_of_another_type_under_the_key_id_is_refused(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey
) -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_jwk = {**jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True), "kid": KID}
    endpoint.publish(ec_jwk)

    refusal = refused(TokenValidator(make_policy(endpoint.url)), sign(claims(), signing_key))

    assert refusal.reason == "the signing key is not an RSA key"


# --- the key set: unknown key ids, rotation, outages ---------------------------------------------------


def test_an_unknown_key_id_refetches_the_keys_once_then_is_refused(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey, attacker_key: rsa.RSAPrivateKey
) -> None:
    validator = TokenValidator(make_policy(endpoint.url), refresh_cooldown_s=0)
    validator.validate_token(sign(claims(), signing_key))
    assert endpoint.fetches == 1

    refusal = refused(validator, sign(claims(), attacker_key, kid="made-up"))

    assert refusal.reason == "unknown signing key"
    assert endpoint.fetches == 2


def test_a_burst_of_made_up_key_ids_costs_at_most_one_refetch(
    endpoint: JwksEndpoint, validator: TokenValidator, attacker_key: rsa.RSAPrivateKey
) -> None:
    for n in range(20):
        refused(validator, sign(claims(), attacker_key, kid=f"made-up-{n}"))

    assert endpoint.fetches <= 2  # the first fetch, and one refresh at most per cooldown


def test_a_rolled_over_key_is_picked_up_by_the_refetch(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey, attacker_key: rsa.RSAPrivateKey
) -> None:
    validator = TokenValidator(make_policy(endpoint.url), refresh_cooldown_s=0)
    validator.validate_token(sign(claims(), signing_key))
    new_key = attacker_key  # any key the tenant publishes next
    endpoint.publish(public_jwk(signing_key, KID), public_jwk(new_key, "key-2"))

    principal = validator.validate_token(sign(claims(), new_key, kid="key-2"))

    assert principal.object_id == USER_OID
    assert endpoint.fetches == 2


def test_unreachable_keys_are_a_transient_503_not_a_401(signing_key: rsa.RSAPrivateKey) -> None:
    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    validator = TokenValidator(make_policy(f"http://127.0.0.1:{port}/keys"), fetch_timeout_s=2)
    token = sign(claims(), signing_key)

    with pytest.raises(SigningKeysUnavailable) as raised:
        validator.validate_token(token)

    assert isinstance(raised.value, TransientError)
    assert not isinstance(raised.value, Unauthenticated)
    assert kind_of(str(raised.value)) is ErrorKind.TRANSIENT
    assert http_refusal(raised.value) == (503, {})
    assert_not_echoed(raised.value, token)


@pytest.mark.parametrize(
    ("status", "document"),
    [(500, {"error": "busy"}), (404, {}), (200, ["not", "an", "object"]), (200, {"keys": []})],
)
def test_a_failing_or_empty_key_endpoint_is_transient(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey, status: int, document: Any
) -> None:
    endpoint.status, endpoint.document = status, document

    with pytest.raises(SigningKeysUnavailable):
        TokenValidator(make_policy(endpoint.url)).validate_token(sign(claims(), signing_key))


def test_cached_keys_outlast_an_outage_of_the_endpoint(
    endpoint: JwksEndpoint, validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    validator.validate_token(sign(claims(), signing_key))
    endpoint.status = 503

    assert validator.validate_token(sign(claims(), signing_key)).object_id == USER_OID
    assert endpoint.fetches == 1


def concurrently(validator: TokenValidator, tokens: list[str]) -> tuple[list[threading.Thread], list[Any]]:
    """Threads, already started, each validating one of ``tokens``; what each ended with (a principal or
    the refusal) is appended to the list as it ends."""
    outcomes: list[Any] = []

    def validate(token: str) -> None:
        try:
            outcomes.append(validator.validate_token(token))
        except (Unauthenticated, SigningKeysUnavailable) as refusal:
            outcomes.append(refusal)

    threads = [threading.Thread(target=validate, args=(token,), daemon=True) for token in tokens]
    for thread in threads:
        thread.start()
    return threads, outcomes


def joined(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)


def test_a_cached_key_is_not_held_up_by_unknown_key_ids_while_the_key_endpoint_hangs(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey, attacker_key: rsa.RSAPrivateKey
) -> None:
    # The attack: while the key endpoint hangs, anyone sends tokens naming key ids nobody published, each
    # asking for a refetch (no cooldown here: as once the cooldown has passed).
    validator = TokenValidator(make_policy(endpoint.url), refresh_cooldown_s=0, fetch_timeout_s=5)
    valid = sign(claims(), signing_key)
    validator.validate_token(valid)  # the key is cached
    endpoint.hang()
    made_up = [sign(claims(), attacker_key, kid=f"made-up-{n}") for n in range(6)]
    threads, outcomes = concurrently(validator, made_up)
    assert endpoint.requested.wait(5)  # a refetch is in flight, and hangs

    started = time.monotonic()
    principal = validator.validate_token(valid)
    waited = time.monotonic() - started

    endpoint.answer()
    joined(threads)
    assert principal.object_id == USER_OID
    assert waited < 1.0
    # Once the endpoint answers, each made-up key id is refused as what it is.
    assert [getattr(outcome, "reason", None) for outcome in outcomes] == ["unknown signing key"] * len(
        made_up
    )


def test_a_wait_on_a_hanging_key_endpoint_is_bounded_and_a_503(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey
) -> None:
    validator = TokenValidator(make_policy(endpoint.url), fetch_timeout_s=5, wait_s=0.2)
    endpoint.hang()
    token = sign(claims(), signing_key)

    started = time.monotonic()
    with pytest.raises(SigningKeysUnavailable) as raised:
        validator.validate_token(token)  # no key cached yet: the token cannot be checked
    waited = time.monotonic() - started

    assert waited < 1.0
    assert http_refusal(raised.value) == (503, {})
    assert_not_echoed(raised.value, token)
    endpoint.answer()


def test_concurrent_requests_for_one_unknown_key_id_share_one_fetch(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey, attacker_key: rsa.RSAPrivateKey
) -> None:
    validator = TokenValidator(make_policy(endpoint.url), refresh_cooldown_s=0)
    validator.validate_token(sign(claims(), signing_key))
    endpoint.hang()
    threads, outcomes = concurrently(validator, [sign(claims(), attacker_key, kid="made-up")] * 8)
    assert endpoint.requested.wait(5)

    endpoint.answer()
    joined(threads)

    assert endpoint.fetches == 2  # the first fetch and one refetch, shared
    assert [getattr(outcome, "reason", None) for outcome in outcomes] == ["unknown signing key"] * 8


def test_concurrent_first_requests_share_one_fetch(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey
) -> None:
    validator = TokenValidator(make_policy(endpoint.url))
    endpoint.hang()
    threads, outcomes = concurrently(validator, [sign(claims(), signing_key)] * 8)
    assert endpoint.requested.wait(5)

    endpoint.answer()
    joined(threads)

    assert endpoint.fetches == 1
    assert [getattr(outcome, "object_id", None) for outcome in outcomes] == [USER_OID] * 8


def test_a_repeated_unknown_key_id_is_refused_without_a_refetch_until_its_time_is_up(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey, attacker_key: rsa.RSAPrivateKey
) -> None:
    now = [1000.0]
    validator = TokenValidator(
        make_policy(endpoint.url), refresh_cooldown_s=0, unknown_key_ttl_s=300, monotonic=lambda: now[0]
    )
    validator.validate_token(sign(claims(), signing_key))
    made_up = sign(claims(), attacker_key, kid="made-up")

    assert refused(validator, made_up).reason == "unknown signing key"
    assert endpoint.fetches == 2
    assert refused(validator, made_up).reason == "unknown signing key"
    now[0] += 299
    assert refused(validator, made_up).reason == "unknown signing key"
    assert endpoint.fetches == 2  # remembered as unknown: no refetch
    refused(validator, sign(claims(), attacker_key, kid="made-up-2"))
    assert endpoint.fetches == 3  # another key id may still be a rotation: one refetch

    # The key is published later (a rotation): once its time as unknown is up, it is picked up.
    endpoint.publish(public_jwk(signing_key, KID), public_jwk(attacker_key, "made-up"))
    now[0] += 2
    assert validator.validate_token(made_up).object_id == USER_OID
    assert endpoint.fetches == 4


def test_an_unknown_key_id_during_an_outage_is_a_503_and_is_not_remembered_as_unknown(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey
) -> None:
    validator = TokenValidator(make_policy(endpoint.url), refresh_cooldown_s=0)
    validator.validate_token(sign(claims(), signing_key))
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = sign(claims(), rotated, kid="key-2")
    endpoint.status = 503

    with pytest.raises(SigningKeysUnavailable):
        validator.validate_token(token)  # the key set could not be checked: maybe a rotation

    endpoint.status = 200
    endpoint.publish(public_jwk(signing_key, KID), public_jwk(rotated, "key-2"))
    assert validator.validate_token(token).object_id == USER_OID
    assert endpoint.fetches == 3


def test_the_key_ids_remembered_as_unknown_are_bounded_oldest_forgotten_first(
    endpoint: JwksEndpoint,
    signing_key: rsa.RSAPrivateKey,
    attacker_key: rsa.RSAPrivateKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(signing_keys, "MAX_UNKNOWN_KEY_IDS", 2)
    validator = TokenValidator(make_policy(endpoint.url), refresh_cooldown_s=0)
    validator.validate_token(sign(claims(), signing_key))
    first, second, third = (sign(claims(), attacker_key, kid=f"made-up-{n}") for n in range(3))
    for token in (first, second, third):
        refused(validator, token)
    assert endpoint.fetches == 4

    refused(validator, third)
    assert endpoint.fetches == 4  # still remembered
    refused(validator, first)
    assert endpoint.fetches == 5  # forgotten to make room: one refetch more


def test_a_key_id_longer_than_any_real_one_is_refused_without_a_fetch(
    endpoint: JwksEndpoint, validator: TokenValidator, attacker_key: rsa.RSAPrivateKey
) -> None:
    token = sign(claims(), attacker_key, kid="k" * (MAX_KEY_ID_CHARS + 1))

    assert refused(validator, token).reason == "unknown signing key"
    assert endpoint.fetches == 0


def test_a_key_set_due_for_refresh_keeps_serving_while_it_is_refetched(
    endpoint: JwksEndpoint, signing_key: rsa.RSAPrivateKey
) -> None:
    now = [1000.0]
    validator = TokenValidator(make_policy(endpoint.url), cache_s=3600, monotonic=lambda: now[0])
    valid = sign(claims(), signing_key)
    validator.validate_token(valid)
    endpoint.hang()
    now[0] += 3601

    started = time.monotonic()
    principal = validator.validate_token(valid)
    waited = time.monotonic() - started

    assert principal.object_id == USER_OID
    assert waited < 1.0
    assert endpoint.requested.wait(5)  # the refresh runs beside the request, not before it
    endpoint.answer()


# --- roles --------------------------------------------------------------------------------------------


def test_a_token_without_the_role_is_forbidden_and_recorded(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    reviewer = validator.validate_token(sign(claims(roles=[REVIEWER_ROLE]), signing_key))

    with telemetry.recording() as events, pytest.raises(Forbidden) as raised:
        authorize(reviewer, OPERATOR_ROLE)

    assert events["operator.forbidden"] == 1
    assert raised.value.kind is ErrorKind.FORBIDDEN
    assert (raised.value.principal_id, raised.value.role) == (USER_OID, OPERATOR_ROLE)
    assert str(raised.value).startswith("[forbidden] ")
    status, headers = http_refusal(raised.value)
    assert status == 403
    assert 'error="insufficient_scope"' in headers["WWW-Authenticate"]


def test_a_token_with_the_role_is_allowed(validator: TokenValidator, signing_key: rsa.RSAPrivateKey) -> None:
    operator = validator.validate_token(sign(claims(roles=[OPERATOR_ROLE]), signing_key))

    with telemetry.recording() as events:
        authorize(operator, OPERATOR_ROLE)

    assert events["operator.forbidden"] == 0


def test_a_role_name_the_api_does_not_know_is_a_programming_error() -> None:
    principal = Principal(object_id=USER_OID, tenant_id=TENANT, subject="s", roles=frozenset({"Admin"}))

    with pytest.raises(ValueError, match="unknown app role 'Admin'"):
        authorize(principal, "Admin")
    with pytest.raises(ValueError, match=r"unknown app role .orderflow\.admin."):
        known_roles([REVIEWER_ROLE, "orderflow.admin"])
    assert known_roles([REVIEWER_ROLE, OPERATOR_ROLE, REVIEWER_ROLE]) == (OPERATOR_ROLE, REVIEWER_ROLE)


# --- challenge and configuration ----------------------------------------------------------------------


def test_the_challenge_drops_what_rfc_6750_does_not_allow_in_a_description() -> None:
    challenge = www_authenticate(error="invalid_token", description='say "hi" \\ ünïcode')

    assert challenge == 'Bearer realm="orderflow", error="invalid_token", error_description="say hi  ncode"'


def test_the_policy_comes_from_the_settings_with_entra_defaults() -> None:
    settings = Settings.load(
        {}, OPERATOR_TENANT_ID=TENANT.upper(), OPERATOR_AUDIENCE=f"{API_CLIENT_ID}, api://x"
    )

    policy = TokenPolicy.from_section(settings.operator_api)

    assert policy == TokenPolicy(
        issuer=entra_issuer(TENANT),
        audiences=(API_CLIENT_ID, "api://x"),
        tenant_id=TENANT,
        jwks_uri=entra_jwks_uri(TENANT),
        leeway_s=60.0,
    )


@pytest.mark.parametrize(
    "configured", [{}, {"OPERATOR_TENANT_ID": TENANT}, {"OPERATOR_AUDIENCE": API_CLIENT_ID}]
)
def test_an_operator_api_without_tenant_or_audience_refuses_to_start(configured: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="the operator API is not configured"):
        TokenValidator.from_section(Settings.load({}, **configured).operator_api)


def test_a_jwks_uri_that_is_not_http_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="not an http or https URL"):
        TokenValidator(make_policy("file:///etc/passwd"))


@pytest.mark.parametrize(
    "changes",
    [{"azp": None}, {"nonce": "n-0S6_WzA2Mj"}, {"azp": None, "nonce": "n-0S6_WzA2Mj"}],
    ids=["no-azp-or-appid", "nonce", "id-token-shape"],
)
def test_an_id_token_is_not_a_credential_for_the_api(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey, changes: dict[str, Any]
) -> None:
    # An ID token of the same tenant, signed by the same keys and naming the API as audience (its client
    # id), carries a nonce and no azp: it says who signed in, not that an app may call the API.
    assert refused(validator, sign(claims(**changes), signing_key)).reason == "not an access token"


def test_an_audience_list_is_refused_even_when_it_names_this_api(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    # Entra names one audience; a list holding ours can only come from whoever holds a signing key.
    token = sign(claims(aud=[API_CLIENT_ID, "00000003-0000-0000-c000-000000000000"]), signing_key)

    assert refused(validator, token).reason == "wrong audience"


def test_a_token_valid_for_longer_than_a_day_is_refused(
    validator: TokenValidator, signing_key: rsa.RSAPrivateKey
) -> None:
    now = int(time.time())
    decade = sign(claims(iat=now, nbf=now, exp=now + 10 * 365 * 86_400), signing_key)
    day = sign(claims(iat=now, nbf=now, exp=now + MAX_TOKEN_LIFETIME_S), signing_key)

    assert refused(validator, decade).reason == "token lifetime too long"
    assert validator.validate_token(day).object_id == USER_OID


def test_clients_whose_principal_is_unknown_are_named_when_the_api_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings.load(
        {},
        OPERATOR_TENANT_ID=TENANT,
        OPERATOR_AUDIENCE=API_CLIENT_ID,
        CLIENTS=json.dumps([{"id": "known", "principalId": USER_OID}, {"id": "anon"}, {"id": "anon-2"}]),
    )
    with caplog.at_level(logging.WARNING, logger="orderflow.operator_auth"):
        assert validator_from_settings(settings.operator_api, settings.clients) is not None

    [warning] = [r.getMessage() for r in caplog.records if r.name == "orderflow.operator_auth"]
    assert warning.startswith("clients without a principalId: anon, anon-2;")
