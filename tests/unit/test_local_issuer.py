"""The local issuer: a signing key made once (mode 0600, git-ignored) and reused, tokens of Entra's v2.0
shape that the operator API's own check accepts over its served JWKS, a ``login`` command, and nothing
of it trusted or runnable on Azure."""

from __future__ import annotations

import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from typer.testing import CliRunner, Result

from demo.services.bindings import demo_bindings_json
from devhost import local_issuer
from devhost.local_issuer import (
    KEY_FILE,
    LOCAL_API_CLIENT_ID,
    LOCAL_CLI_CLIENT_ID,
    LOCAL_ISSUER,
    LOCAL_TENANT_ID,
    LocalIssuer,
    create_jwks_app,
    ensure_signing_key,
    local_object_id,
)
from devhost.serving import serve_in_thread, server_url, stop
from function_host.azure_policy import check_azure
from orderflow.operator_auth import (
    OPERATOR_ROLE,
    REVIEWER_ROLE,
    Forbidden,
    TokenValidator,
    authorize,
)
from orderflow.settings import Settings
from orderflow.settings.hosts import UnsafeAzureSetting

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
AZURE_IDENTITY = {
    "COSMOS_ENDPOINT": "https://orderflow-cosmos.documents.azure.com:443/",
    "SERVICEBUS__fullyQualifiedNamespace": "orderflow-bus.servicebus.windows.net",
    "SERVICE_BINDINGS": demo_bindings_json("https://orderflow-services.azurewebsites.net"),
}


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    return tmp_path / "local-issuer" / "signing-key.pem"


@pytest.fixture
def issuer(key_file: Path) -> LocalIssuer:
    return LocalIssuer.from_key_file(key_file)


@pytest.fixture
def jwks_uri(issuer: LocalIssuer) -> Iterator[str]:
    """The issuer's JWKS served as the devhost serves it (uvicorn on a free loopback port)."""
    server, thread = serve_in_thread(create_jwks_app(issuer))
    try:
        yield server_url(server) + issuer.jwks_path
    finally:
        stop(server, thread)


@pytest.fixture
def validator(issuer: LocalIssuer, jwks_uri: str) -> TokenValidator:
    """The operator API's validator under the settings the local issuer gives."""
    return TokenValidator.from_section(Settings.load({}, **issuer.operator_settings(jwks_uri)).operator_api)


# --- the key ------------------------------------------------------------------------------------------


def test_the_key_is_made_readable_by_its_owner_only_and_then_reused(key_file: Path) -> None:
    first = LocalIssuer(ensure_signing_key(key_file))
    written = key_file.read_bytes()

    second = LocalIssuer(ensure_signing_key(key_file))

    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert second.key_id == first.key_id
    assert key_file.read_bytes() == written
    assert [path.name for path in key_file.parent.iterdir()] == [key_file.name]  # no draft left behind


def test_processes_starting_at_once_share_one_key(key_file: Path) -> None:
    key_ids: list[str] = []

    def load() -> None:
        key_ids.append(LocalIssuer.from_key_file(key_file).key_id)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert len(key_ids) == 4
    assert len(set(key_ids)) == 1


def test_a_key_file_others_may_read_is_refused(key_file: Path) -> None:
    ensure_signing_key(key_file)
    key_file.chmod(0o644)

    with pytest.raises(ValueError, match="may be read by others"):
        ensure_signing_key(key_file)


def test_a_key_file_that_holds_no_key_is_refused(key_file: Path) -> None:
    key_file.parent.mkdir(parents=True)
    key_file.write_text("not a key")
    key_file.chmod(0o600)

    with pytest.raises(ValueError):
        ensure_signing_key(key_file)


def test_the_default_key_file_is_git_ignored() -> None:
    assert KEY_FILE.is_relative_to(REPO / ".data")
    result = subprocess.run(
        ["git", "check-ignore", "--quiet", str(KEY_FILE.relative_to(REPO))], cwd=REPO, check=False
    )
    assert result.returncode == 0, "the local signing key would be committed"


# --- its tokens ---------------------------------------------------------------------------------------


def test_a_minted_token_has_the_claims_of_an_entra_v2_access_token(issuer: LocalIssuer) -> None:
    token = issuer.mint(name="alice", roles=[REVIEWER_ROLE], now=1_700_000_000)

    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert header == {"alg": "RS256", "kid": issuer.key_id, "typ": "JWT"}
    assert set(claims) == {
        *("aud", "iss", "iat", "nbf", "exp", "azp", "azpacr", "name", "oid"),
        *("preferred_username", "roles", "sub", "tid", "uti", "ver"),
    }
    assert claims["iss"] == LOCAL_ISSUER == f"https://login.orderflow.localhost/{LOCAL_TENANT_ID}/v2.0"
    assert (claims["aud"], claims["azp"], claims["tid"]) == (
        LOCAL_API_CLIENT_ID,
        LOCAL_CLI_CLIENT_ID,
        LOCAL_TENANT_ID,
    )
    assert (claims["iat"], claims["nbf"], claims["exp"]) == (1_700_000_000, 1_700_000_000, 1_700_003_600)
    assert (claims["ver"], claims["roles"], claims["name"]) == ("2.0", [REVIEWER_ROLE], "alice")
    assert claims["oid"] == local_object_id("alice")
    assert "roles" not in jwt.decode(issuer.mint(name="bob"), options={"verify_signature": False})


def test_the_same_name_is_the_same_principal_on_every_login(issuer: LocalIssuer) -> None:
    first, second = (
        jwt.decode(issuer.mint(name="alice"), options={"verify_signature": False}) for _ in range(2)
    )
    bob = jwt.decode(issuer.mint(name="bob"), options={"verify_signature": False})

    assert (first["oid"], first["sub"]) == (second["oid"], second["sub"])
    assert first["uti"] != second["uti"]
    assert bob["oid"] != first["oid"]


def test_local_tokens_pass_the_operator_apis_own_check(
    issuer: LocalIssuer, validator: TokenValidator
) -> None:
    principal = validator.authenticate(f"Bearer {issuer.mint(name='alice', roles=[REVIEWER_ROLE])}")

    assert principal.object_id == local_object_id("alice")
    assert principal.tenant_id == LOCAL_TENANT_ID
    assert principal.app_id == LOCAL_CLI_CLIENT_ID
    assert principal.display_name == "alice"
    authorize(principal, REVIEWER_ROLE)
    with pytest.raises(Forbidden):
        authorize(principal, OPERATOR_ROLE)


def test_the_jwks_holds_the_public_key_only(issuer: LocalIssuer) -> None:
    (key,) = issuer.jwks()["keys"]

    assert set(key) == {"kty", "n", "e", "use", "alg", "kid"}
    assert (key["kty"], key["use"], key["alg"], key["kid"]) == ("RSA", "sig", "RS256", issuer.key_id)


def test_the_local_issuers_settings_are_refused_on_azure(issuer: LocalIssuer) -> None:
    local = issuer.operator_settings(f"http://127.0.0.1:8083{issuer.jwks_path}")

    with pytest.raises(UnsafeAzureSetting) as refused:
        check_azure(Settings.load({**AZURE_IDENTITY, **local}))

    assert refused.value.setting == "OPERATOR_ISSUER"
    with pytest.raises(UnsafeAzureSetting) as refused:
        check_azure(Settings.load({**AZURE_IDENTITY, **local, "OPERATOR_ISSUER": ""}))
    assert refused.value.setting == "OPERATOR_JWKS_URI"


# --- login --------------------------------------------------------------------------------------------


def login(*args: str) -> Result:
    return CliRunner().invoke(local_issuer.cli, ["login", *args])


def test_login_prints_a_token_the_operator_api_accepts(key_file: Path, validator: TokenValidator) -> None:
    result = login(
        "--name", "alice", "--role", OPERATOR_ROLE, "--role", REVIEWER_ROLE, "--key-file", str(key_file)
    )

    assert result.exit_code == 0, result.output
    principal = validator.validate_token(result.stdout.strip())
    assert principal.roles == {OPERATOR_ROLE, REVIEWER_ROLE}
    assert principal.object_id == local_object_id("alice")


def test_login_writes_the_token_readable_by_its_owner_only(
    key_file: Path, tmp_path: Path, validator: TokenValidator
) -> None:
    out = tmp_path / "token"
    out.write_text("an old token")
    out.chmod(0o644)

    result = login("--name", "carol", "--out", str(out), "--key-file", str(key_file))

    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert validator.validate_token(out.read_text().strip()).roles == frozenset()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--name", "alice", "--role", "orderflow.admin"], "unknown app role 'orderflow.admin'"),
        (["--name", "alice", "--role", "Orderflow.Operator"], "unknown app role"),
        (["--name", " "], "--name"),
        (["--name", "alice", "--lifetime-s", "0"], "--lifetime-s"),
        (["--name", "alice", "--lifetime-s", "100000"], "--lifetime-s"),
    ],
)
def test_login_refuses_bad_arguments_before_making_a_key(tmp_path: Path, args: list[str], says: str) -> None:
    key_file = tmp_path / "key.pem"

    result = login(*args, "--key-file", str(key_file))

    assert result.exit_code == 2
    assert says in result.output
    assert not key_file.exists()


def test_login_and_serve_refuse_to_run_on_azure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBSITE_SITE_NAME", "orderflow-func")
    key_file = tmp_path / "key.pem"

    for command in (["login", "--name", "alice"], ["serve"]):
        result = CliRunner().invoke(local_issuer.cli, [*command, "--key-file", str(key_file)])
        assert result.exit_code == 2
        assert "developer's machine only" in result.output
    assert not key_file.exists()
