"""Settings refuse values that would only fail later, in every loop: NaN, infinity, non-positive
durations and counts, durations beyond a timedelta, a Cosmos DB key that is not base64; and, on Azure,
every setting that has no safe value there (a key, a connection string, unverified TLS, loopback)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from demo.services.bindings import demo_bindings_json
from devhost.settings import LocalSettings
from function_host.azure_policy import check_azure
from orderflow.settings import Settings, describe_invalid_settings, on_azure
from orderflow.settings.base import MAX_DURATION_S
from orderflow.settings.hosts import UnsafeAzureSetting, is_loopback_host

pytestmark = pytest.mark.unit

EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("STEP_TIMEOUT_S", "nan", "finite number"),
        ("STEP_TIMEOUT_S", "inf", "finite number"),
        ("STEP_TIMEOUT_S", "0", "greater than 0"),
        ("STEP_TIMEOUT_S", "-1", "greater than 0"),
        ("STEP_TIMEOUT_S", "1e308", "at most 315360000 seconds"),
        ("CLAIM_TIMEOUT_S", "0", "greater than 0"),
        ("START_LATENCY_S", "-0.5", "greater than or equal to 0"),
        ("COMPENSATION_LOG_RETENTION_S", str(MAX_DURATION_S * 2), "at most"),
        ("SUPERVISOR_BACKOFF_MAX_S", "-1", "greater than or equal to 0"),
        ("RETRY_BUDGET", "0", "greater than or equal to 1"),
        ("STARTER_BATCH", "0", "greater than or equal to 1"),
        ("SUPERVISOR_MAX_FAILURES", "0", "greater than or equal to 1"),
        ("COSMOS_KEY", "garbage", "should be base64"),
    ],
)
def test_a_value_that_would_fail_later_is_refused_naming_the_setting(
    name: str, value: str, problem: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings.load({name: value})
    (error,) = refused.value.errors()
    assert error["loc"] == (name,)
    assert problem in error["msg"]
    if name == "COSMOS_KEY":
        assert value not in str(refused.value.errors(include_input=False))  # a secret is never echoed


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("POLL_INTERVAL_S", "0", "greater than 0"),
        ("MAX_IN_FLIGHT_PER_HOST", "0", "greater than or equal to 1"),
    ],
)
def test_a_local_hosts_value_that_would_fail_later_is_refused_naming_the_setting(
    name: str, value: str, problem: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        LocalSettings.load({name: value})
    (error,) = refused.value.errors()
    assert error["loc"] == (name,)
    assert problem in error["msg"]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("START_LATENCY_S", "0", 0.0),  # no allowance: the first step's deadline counts from the claim
        ("COMPENSATION_LOG_RETENTION_S", "0", 0.0),  # 0 never purges
        ("STEP_TIMEOUT_S", str(MAX_DURATION_S), MAX_DURATION_S),
        ("COSMOS_KEY", EMULATOR_KEY, EMULATOR_KEY),
        ("COSMOS_KEY", "", ""),  # empty on Azure: managed identity
    ],
)
def test_edge_values_that_mean_something_are_kept(name: str, value: str, expected: object) -> None:
    assert Settings.load({name: value}).values()[name] == expected


@pytest.mark.parametrize(
    ("dead_letters", "data"),
    [("2592001", "2592000"), ("0", "2592000"), ("86400", "3600")],
)
def test_dead_letters_may_not_outlive_the_data_retention(dead_letters: str, data: str) -> None:
    with pytest.raises(
        ValidationError, match=r"DEAD_LETTER_RETENTION_S .* at most COMPENSATION_LOG_RETENTION_S"
    ):
        Settings.load({"DEAD_LETTER_RETENTION_S": dead_letters, "COMPENSATION_LOG_RETENTION_S": data})


@pytest.mark.parametrize(
    ("dead_letters", "data"),
    [("2592000", "2592000"), ("60", "2592000"), ("0", "0"), ("1209600", "0")],
)
def test_dead_letters_kept_no_longer_than_the_data_are_accepted(dead_letters: str, data: str) -> None:
    loaded = Settings.load({"DEAD_LETTER_RETENTION_S": dead_letters, "COMPENSATION_LOG_RETENTION_S": data})
    assert float(dead_letters) == loaded.supervisor.DEAD_LETTER_RETENTION_S


def test_the_default_dead_letter_retention_is_two_weeks_within_the_default_data_retention() -> None:
    defaults = Settings.load({})
    assert (
        defaults.supervisor.DEAD_LETTER_RETENTION_S
        == 14 * 86_400
        <= defaults.supervisor.COMPENSATION_LOG_RETENTION_S
    )


# --- on Azure ------------------------------------------------------------------------------------------

SERVICE_BUS_EMULATOR = (
    "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
    "UseDevelopmentEmulator=true;"
)
AZURE_IDENTITY = {
    "COSMOS_ENDPOINT": "https://orderflow-cosmos.documents.azure.com:443/",
    "SERVICEBUS__fullyQualifiedNamespace": "orderflow-bus.servicebus.windows.net",
    "SERVICE_BINDINGS": demo_bindings_json("https://orderflow-services.azurewebsites.net"),
}
"""Settings an Azure deployment with a system-assigned identity runs with."""


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WEBSITE_INSTANCE_ID": "8ef3a1c0d6"}, True),  # App Service plans (what the host itself tests)
        ({"WEBSITE_SITE_NAME": "orderflow-func"}, True),  # every plan, Linux Consumption included
        ({}, False),
        # What func start sets: none of it means Azure.
        ({"WEBSITE_HOSTNAME": "localhost:7071", "AZURE_FUNCTIONS_ENVIRONMENT": "Development"}, False),
        ({"WEBSITE_SITE_NAME": " ", "WEBSITE_INSTANCE_ID": ""}, False),
    ],
)
def test_azure_is_the_platform_setting_its_instance_or_site_variable(
    environ: dict[str, str], expected: bool
) -> None:
    assert on_azure(environ) is expected


@pytest.mark.parametrize(
    "extra",
    [
        {},
        # A user-assigned identity: the host's connection and orderflow's credential name the same one.
        {
            "SERVICEBUS__credential": "managedidentity",
            "SERVICEBUS__clientId": "6d1f0b9e-0000-4000-8000-000000000001",
        },
        {"AZURE_CLIENT_ID": "6d1f0b9e-0000-4000-8000-000000000001"},
        # A private address is reachable from a VNet, without TLS and, with a reason, without a token.
        {"SERVICE_BINDINGS": demo_bindings_json("http://10.1.2.3:8082")},
        {
            "SERVICE_BINDINGS": demo_bindings_json("http://10.1.2.3:8082").replace(
                '{"mode":"entra","scope":"api://orderflow-demo-services/.default"}',
                '{"mode":"none","reason":"a VNet"}',
            )
        },
    ],
)
def test_identity_settings_pass_the_azure_check(extra: dict[str, str]) -> None:
    check_azure(Settings.load({**AZURE_IDENTITY, **extra}))


@pytest.mark.parametrize(
    ("override", "setting", "says"),
    [
        (
            {"SERVICE_BINDINGS": demo_bindings_json("http://127.0.0.1:8082")},
            "SERVICE_BINDINGS",
            "127.0.0.1 is a loopback",
        ),
        (
            {"SERVICE_BINDINGS": demo_bindings_json("http://localhost:8082/")},
            "SERVICE_BINDINGS",
            "localhost is a loopback",
        ),
        (
            {"SERVICE_BINDINGS": demo_bindings_json("http://[::1]:8082")},
            "SERVICE_BINDINGS",
            "::1 is a loopback",
        ),
        (
            {"SERVICE_BINDINGS": demo_bindings_json("http://127.1:8082")},
            "SERVICE_BINDINGS",
            "a loopback address",
        ),
        (
            {"SERVICE_BINDINGS": demo_bindings_json("http://0.0.0.0:8082")},
            "SERVICE_BINDINGS",
            "a loopback address",
        ),
        ({"SERVICE_BINDINGS": "{}"}, "SERVICE_BINDINGS", "no mapping for operation"),
        (
            {"SERVICE_BINDINGS": demo_bindings_json("http://services.example.com")},
            "SERVICE_BINDINGS",
            "plain http",
        ),
        ({"COSMOS_ENDPOINT": ""}, "COSMOS_ENDPOINT", "is empty"),
        ({"COSMOS_ENDPOINT": "https://localhost:8081/"}, "COSMOS_ENDPOINT", "names localhost, a loopback"),
        (
            {"COSMOS_ENDPOINT": "http://orderflow-cosmos.documents.azure.com/"},
            "COSMOS_ENDPOINT",
            "not an https URL",
        ),
        ({"COSMOS_KEY": EMULATOR_KEY}, "COSMOS_KEY", "managed identity"),
        ({"COSMOS_VERIFY_TLS": "false"}, "COSMOS_VERIFY_TLS", "is false"),
        ({"SERVICEBUS": SERVICE_BUS_EMULATOR}, "SERVICEBUS", "is a connection string"),
        ({"SERVICEBUS__fullyQualifiedNamespace": ""}, "SERVICEBUS__fullyQualifiedNamespace", "is empty"),
        (
            {"SERVICEBUS__fullyQualifiedNamespace": "localhost"},
            "SERVICEBUS__fullyQualifiedNamespace",
            "names localhost, a loopback address",
        ),
        (
            {"SERVICEBUS__fullyQualifiedNamespace": SERVICE_BUS_EMULATOR},
            "SERVICEBUS__fullyQualifiedNamespace",
            "is not a host name",
        ),
        (
            {"SERVICEBUS__clientId": "6d1f0b9e-0000-4000-8000-000000000001"},
            "SERVICEBUS__credential",
            "is not 'managedidentity'",
        ),
        ({"STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"}, "STORAGE_CONNECTION_STRING", "is set"),
    ],
)
def test_a_setting_with_no_safe_value_on_azure_is_refused_in_one_line_naming_it(
    override: dict[str, str], setting: str, says: str
) -> None:
    with pytest.raises(UnsafeAzureSetting) as refused:
        check_azure(Settings.load({**AZURE_IDENTITY, **override}))
    message = str(refused.value)
    assert refused.value.setting == setting
    assert message.startswith(f"{setting} ")
    assert says in message
    assert "\n" not in message
    for secret in (EMULATOR_KEY, "SAS_KEY_VALUE"):  # a secret is never echoed
        assert secret not in message


def test_the_defaults_are_refused_on_azure_first_setting_first() -> None:
    # A deployment that set nothing: the first connection setting in declared order is named.
    with pytest.raises(UnsafeAzureSetting) as refused:
        check_azure(Settings.load({}))
    assert refused.value.setting == "COSMOS_ENDPOINT"
    # Every connection given but the service bindings: with none, no step has a mapping.
    with pytest.raises(UnsafeAzureSetting) as refused:
        check_azure(
            Settings.load({**AZURE_IDENTITY, "SERVICE_BINDINGS": Settings.load({}).agents.SERVICE_BINDINGS})
        )
    assert refused.value.setting == "SERVICE_BINDINGS"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST.", True),
        ("api.localhost", True),
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("127.1", True),  # the resolver's short form
        ("2130706433", True),  # 127.0.0.1 as one number
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", True),  # unspecified: connects to this machine
        ("::", True),
        ("10.0.0.1", False),
        ("192.168.1.20", False),
        ("orderflow-bus.servicebus.windows.net", False),
        ("localhost.example.com", False),
        ("::2", False),
        ("128.0.0.1", False),
    ],
)
def test_loopback_hosts_in_every_spelling(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_a_settings_error_never_shows_the_value_it_refused() -> None:
    key = "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQQ==" + "!"

    with pytest.raises(ValidationError) as refused:
        Settings.load(env={"COSMOS_KEY": key})

    assert key[:10] not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://ｌｏｃａｌｈｏｓｔ:8082",
        "http://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ:8082",
        "http://１２７.０.０.１:8082",
        "http://localhost.localdomain:8082",
        "http://ip6-localhost:8082",
        "http://127.0.0.1%2e:8082",
        "http://example.com:99999",
    ],
)
def test_azure_refuses_a_service_binding_that_is_loopback_in_disguise_or_not_a_host(url: str) -> None:
    env = {
        "COSMOS_ENDPOINT": "https://orderflow.documents.azure.com:443/",
        "SERVICEBUS__fullyQualifiedNamespace": "orderflow.servicebus.windows.net",
        "SERVICE_BINDINGS": demo_bindings_json("http://127.0.0.1:1").replace("http://127.0.0.1:1", url),
    }

    # A host that is no DNS name or address is refused wherever the settings load; a loopback in
    # disguise, on Azure.
    with pytest.raises((UnsafeAzureSetting, ValidationError)) as refused:
        check_azure(Settings.load(env=env))
    assert "SERVICE_BINDINGS" in str(refused.value)


@pytest.mark.parametrize(
    "namespace",
    [
        "ｌｏｃａｌｈｏｓｔ",
        "localhost.localdomain",
        "my ns.servicebus.windows.net",
        "ns.servicebus.windows.net?x",
    ],
)
def test_azure_refuses_a_namespace_that_is_not_an_ascii_host_name_or_is_loopback(namespace: str) -> None:
    settings = Settings.load(
        env={
            "COSMOS_ENDPOINT": "https://orderflow.documents.azure.com:443/",
            "SERVICEBUS__fullyQualifiedNamespace": namespace,
            "SERVICE_BINDINGS": demo_bindings_json("https://demo.example.com"),
        }
    )

    with pytest.raises(UnsafeAzureSetting) as refused:
        check_azure(settings)
    assert refused.value.setting == "SERVICEBUS__fullyQualifiedNamespace"


def test_a_host_with_undecodable_bytes_is_no_loopback_and_no_host_name() -> None:
    # os.environ keeps bytes that are not UTF-8 as lone surrogates.
    env = {
        "COSMOS_ENDPOINT": "https://orderflow.documents.azure.com:443/",
        "SERVICEBUS__fullyQualifiedNamespace": "orderflow.servicebus.windows.net",
        "SERVICE_BINDINGS": demo_bindings_json("https://x.example.com").replace(
            "x.example.com", "pay\udcffments.example.com"
        ),
    }

    assert is_loopback_host("pay\udcffments.example.com") is False
    with pytest.raises(ValidationError) as refused:
        Settings.load(env=env)
    assert "SERVICE_BINDINGS" in str(refused.value)


# --- remote-call timeouts against the roles' deadlines ---------------------------------------------------


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        (
            {"STEP_TIMEOUT_S": "2"},
            "STORE_OPERATION_TIMEOUT_S (2.5 s) must be shorter than STEP_TIMEOUT_S (2 s)",
        ),
        (
            {"CLAIM_TIMEOUT_S": "2.5"},
            "STORE_OPERATION_TIMEOUT_S (2.5 s) must be shorter than CLAIM_TIMEOUT_S (2.5 s)",
        ),
        ({"SCAN_MAX_S": "1"}, "STORE_OPERATION_TIMEOUT_S (2.5 s) must be shorter than SCAN_MAX_S (1 s)"),
        (
            {"STORE_READ_TIMEOUT_S": "3"},
            "STORE_READ_TIMEOUT_S (3 s) must be at most STORE_OPERATION_TIMEOUT_S (2.5 s)",
        ),
        (
            {"QUEUE_LOCK_S": "5"},
            "QUEUE_READ_TIMEOUT_S (2.5 s) must be shorter than half of QUEUE_LOCK_S (5 s)",
        ),
        (
            {"OPERATOR_API_TIMEOUT_S": "5"},
            "OPERATOR_JWKS_TIMEOUT_S (5 s) must be shorter than OPERATOR_API_TIMEOUT_S (5 s)",
        ),
    ],
)
def test_a_timeout_not_shorter_than_the_deadline_of_its_role_is_refused_naming_both(
    values: dict[str, str], refusal: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings.load(values)
    assert describe_invalid_settings(refused.value).startswith(refusal)


def test_the_default_timeouts_fit_the_default_deadlines_and_a_shorter_set_fits_shorter_ones() -> None:
    assert Settings.load({}).connections.STORE_OPERATION_TIMEOUT_S < Settings.load({}).steps.STEP_TIMEOUT_S
    fast = Settings.load(
        {
            "STEP_TIMEOUT_S": "1.5",
            "STORE_OPERATION_TIMEOUT_S": "1.2",
            "STORE_READ_TIMEOUT_S": "1",
            "STORE_CONNECTION_TIMEOUT_S": "1",
            "QUEUE_READ_TIMEOUT_S": "1.2",
        }
    )
    assert (fast.steps.STEP_TIMEOUT_S, fast.connections.STORE_OPERATION_TIMEOUT_S) == (1.5, 1.2)
