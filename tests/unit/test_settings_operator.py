"""The operator API's token settings: a tenant id that can match a ``tid`` claim, Entra's issuer and keys
derived from it, and on Azure nothing but the tenant's own Entra issuer and keys (never a local one)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from demo.services.bindings import demo_bindings_json
from function_host.azure_policy import check_azure
from orderflow.settings import Settings
from orderflow.settings.hosts import UnsafeAzureSetting
from orderflow.settings.operator_api import entra_issuer, entra_jwks_uri, entra_v1_issuer

pytestmark = pytest.mark.unit

TENANT = "3f0c0a5e-2f4e-4d8a-9d1b-7c2a1e0b9f10"
API_CLIENT_ID = "5b7e2c1d-4a3f-4b2e-9d8c-1f0e2d3c4b5a"
AZURE_IDENTITY = {
    "COSMOS_ENDPOINT": "https://orderflow-cosmos.documents.azure.com:443/",
    "SERVICEBUS__fullyQualifiedNamespace": "orderflow-bus.servicebus.windows.net",
    "SERVICE_BINDINGS": demo_bindings_json("https://orderflow-services.azurewebsites.net"),
}
"""Settings an Azure deployment with a system-assigned identity runs with (as in test_settings)."""
ENTRA = {"OPERATOR_TENANT_ID": TENANT, "OPERATOR_AUDIENCE": API_CLIENT_ID}


@pytest.mark.parametrize(
    "tenant", ["contoso.onmicrosoft.com", "common", "organizations", "3f0c0a5e", "x" * 36]
)
def test_a_tenant_that_is_not_a_guid_is_refused(tenant: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings.load({"OPERATOR_TENANT_ID": tenant})
    (error,) = refused.value.errors()
    assert error["loc"] == ("OPERATOR_TENANT_ID",)
    assert "a GUID" in error["msg"]


def test_the_tenant_is_kept_in_lowercase_as_the_tid_claim_has_it() -> None:
    assert (
        Settings.load({"OPERATOR_TENANT_ID": f" {TENANT.upper()} "}).operator_api.OPERATOR_TENANT_ID == TENANT
    )


@pytest.mark.parametrize("leeway", ["-1", "301", "nan"])
def test_a_leeway_outside_0_to_300_seconds_is_refused(leeway: str) -> None:
    with pytest.raises(ValidationError):
        Settings.load({"OPERATOR_TOKEN_LEEWAY_S": leeway})


def test_issuer_and_keys_derive_from_the_tenant_unless_set() -> None:
    derived = Settings.load(ENTRA)
    assert derived.operator_api.operator_issuer() == f"https://login.microsoftonline.com/{TENANT}/v2.0"
    assert (
        derived.operator_api.operator_jwks_uri()
        == f"https://login.microsoftonline.com/{TENANT}/discovery/v2.0/keys"
    )
    assert derived.operator_api.operator_audiences() == (API_CLIENT_ID,)

    explicit = Settings.load(
        {**ENTRA, "OPERATOR_ISSUER": "https://local/v2.0", "OPERATOR_JWKS_URI": "http://127.0.0.1:1/keys"}
    )
    assert (explicit.operator_api.operator_issuer(), explicit.operator_api.operator_jwks_uri()) == (
        "https://local/v2.0",
        "http://127.0.0.1:1/keys",
    )


def test_nothing_is_derived_without_a_tenant() -> None:
    settings = Settings.load({})
    assert (
        settings.operator_api.operator_issuer(),
        settings.operator_api.operator_jwks_uri(),
        settings.operator_api.operator_audiences(),
    ) == (
        "",
        "",
        (),
    )


def test_audiences_are_split_on_commas() -> None:
    settings = Settings.load({"OPERATOR_AUDIENCE": f" {API_CLIENT_ID} ,api://orderflow-api,, "})
    assert settings.operator_api.operator_audiences() == (API_CLIENT_ID, "api://orderflow-api")


# --- on Azure ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "operator",
    [
        {},  # no operator API configured: it refuses every call, which is safe
        ENTRA,
        {**ENTRA, "OPERATOR_ISSUER": entra_issuer(TENANT), "OPERATOR_JWKS_URI": entra_jwks_uri(TENANT)},
        {**ENTRA, "OPERATOR_ISSUER": entra_v1_issuer(TENANT)},  # v1.0 tokens, configured on purpose
        {**ENTRA, "OPERATOR_JWKS_URI": "https://login.microsoftonline.com:443/common/discovery/v2.0/keys"},
        {**ENTRA, "OPERATOR_AUDIENCE": f"{API_CLIENT_ID},api://orderflow-api"},
    ],
)
def test_the_tenants_entra_issuer_and_keys_pass_the_azure_check(operator: dict[str, str]) -> None:
    check_azure(Settings.load({**AZURE_IDENTITY, **operator}))


LOCAL_ISSUER = f"https://login.orderflow.localhost/{TENANT}/v2.0"


@pytest.mark.parametrize(
    ("operator", "setting", "says"),
    [
        (
            {"OPERATOR_AUDIENCE": API_CLIENT_ID},
            "OPERATOR_TENANT_ID",
            "is empty while OPERATOR_AUDIENCE is set",
        ),
        ({"OPERATOR_JWKS_URI": entra_jwks_uri(TENANT)}, "OPERATOR_TENANT_ID", "is empty"),
        ({"OPERATOR_TENANT_ID": TENANT}, "OPERATOR_AUDIENCE", "is empty"),
        ({**ENTRA, "OPERATOR_ISSUER": LOCAL_ISSUER}, "OPERATOR_ISSUER", "is not the Entra issuer"),
        (
            {**ENTRA, "OPERATOR_ISSUER": entra_issuer("9d2b4c6e-1a3f-4e5d-8c7b-6a5f4e3d2c1b")},
            "OPERATOR_ISSUER",
            f"set {entra_issuer(TENANT)}",
        ),
        (
            {**ENTRA, "OPERATOR_ISSUER": "https://login.microsoftonline.com/common/v2.0"},
            "OPERATOR_ISSUER",
            "is not the Entra issuer",
        ),
        (
            {**ENTRA, "OPERATOR_JWKS_URI": f"http://127.0.0.1:8083/{TENANT}/discovery/v2.0/keys"},
            "OPERATOR_JWKS_URI",
            "is not https at login.microsoftonline.com",
        ),
        (
            {**ENTRA, "CONSOLE_AUTHORITY": "https://login.fake-entra.test/tenant-1/v2.0"},
            "CONSOLE_AUTHORITY",
            "is not https at login.microsoftonline.com",
        ),
        (
            {**ENTRA, "OPERATOR_JWKS_URI": f"http://login.microsoftonline.com/{TENANT}/discovery/v2.0/keys"},
            "OPERATOR_JWKS_URI",
            "is not https",
        ),
        (
            {**ENTRA, "OPERATOR_JWKS_URI": "https://login.microsoftonline.com.evil.example/keys"},
            "OPERATOR_JWKS_URI",
            "is not https at login.microsoftonline.com",
        ),
        (
            {**ENTRA, "OPERATOR_JWKS_URI": "https://login.microsoftonline.com:8443/keys"},
            "OPERATOR_JWKS_URI",
            "is not https at login.microsoftonline.com",
        ),
        (
            {**ENTRA, "OPERATOR_JWKS_URI": "https://user@login.microsoftonline.com/keys"},
            "OPERATOR_JWKS_URI",
            "is not https at login.microsoftonline.com",
        ),
    ],
)
def test_any_other_issuer_or_key_set_is_refused_on_azure(
    operator: dict[str, str], setting: str, says: str
) -> None:
    with pytest.raises(UnsafeAzureSetting) as refused:
        check_azure(Settings.load({**AZURE_IDENTITY, **operator}))
    assert refused.value.setting == setting
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


CONSOLE_CLIENT_ID = "3c1b5a7e-9d2f-4e6b-8a0c-1d2e3f4a5b6c"


def test_the_consoles_sign_in_derives_from_the_tenant_and_audience_once_its_client_id_is_set() -> None:
    assert (
        Settings.load(ENTRA).operator_api.console_sign_in() is None
    )  # no CONSOLE_CLIENT_ID: paste a token only
    assert (
        Settings.load({"CONSOLE_CLIENT_ID": CONSOLE_CLIENT_ID}).operator_api.console_sign_in() is None
    )  # no tenant
    derived = Settings.load({**ENTRA, "CONSOLE_CLIENT_ID": CONSOLE_CLIENT_ID}).operator_api.console_sign_in()
    assert derived == (entra_issuer(TENANT), CONSOLE_CLIENT_ID, f"api://{API_CLIENT_ID}/.default")
    uri = Settings.load({**ENTRA, "OPERATOR_AUDIENCE": "api://orderflow-api", "CONSOLE_CLIENT_ID": "c"})
    assert uri.operator_api.console_sign_in() == (entra_issuer(TENANT), "c", "api://orderflow-api/.default")
    chosen = {"CONSOLE_AUTHORITY": "https://login.example/t/v2.0/", "CONSOLE_SCOPE": "api://x/operate"}
    given = Settings.load({**ENTRA, "CONSOLE_CLIENT_ID": "c", **chosen}).operator_api.console_sign_in()
    assert given == ("https://login.example/t/v2.0", "c", "api://x/operate")


@pytest.mark.parametrize(
    "authority", ["http://login.microsoftonline.com/t/v2.0", "login.microsoftonline.com"]
)
def test_a_console_authority_that_is_not_https_is_refused(authority: str) -> None:
    with pytest.raises(ValidationError, match="CONSOLE_AUTHORITY must be an https URL"):
        Settings.load({"CONSOLE_AUTHORITY": authority})
