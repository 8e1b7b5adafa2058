"""The worker indexes and loads the whole app: the failure that would leave a host with no functions.

The worker's indexing (``worker_init_request``) imports ``function_app.py``, applies its own checks to
every function's bindings and annotations, and reports the metadata the host registers; a single
refused annotation fails the whole app.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from demo.services.bindings import demo_bindings_json
from orderflow.settings import AZURE_PLATFORM_VARIABLES
from tests.worker.conftest import REPO
from tests.worker.rpc import protos
from tests.worker.worker import SUCCESS, FunctionsWorker
from tests.worker.worker import failure as failure_of

pytestmark = pytest.mark.unit


def registered_functions() -> set[str]:
    """The names ``function_app.app.get_functions()`` returns, in a fresh interpreter (the app builds
    its functions once: a second call in the worker's process refuses the names as duplicates)."""
    script = "import function_app\nfor f in function_app.app.get_functions(): print(f.get_function_name())"
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def trigger_binding(function: Any) -> dict[str, Any]:
    """The function's trigger binding, as the worker reported it to the host."""
    triggers: list[dict[str, Any]] = [
        binding for raw in function.raw_bindings if (binding := json.loads(raw))["type"].endswith("Trigger")
    ]
    [trigger] = triggers
    return trigger


def test_the_worker_indexes_every_function_the_app_registers(worker: FunctionsWorker) -> None:
    registered = registered_functions()

    assert worker.init_response.result.status == SUCCESS
    assert len(worker.metadata) == len(registered) == 17
    assert set(worker.metadata) == registered


def test_the_worker_loads_every_indexed_function(worker: FunctionsWorker) -> None:
    failures = {name: failure_of(response) for name, response in worker.load_responses.items()}

    assert set(failures) == set(worker.metadata)
    assert {name: message for name, message in failures.items() if message is not None} == {}


def test_every_function_is_reported_as_worker_indexed_python(worker: FunctionsWorker) -> None:
    for name, function in worker.metadata.items():
        assert (function.language, function.script_file, function.properties["worker_indexed"]) == (
            "python",
            "function_app.py",
            "True",
        ), name


def test_service_bus_triggers_ask_the_host_for_sdk_types_and_manual_settlement(
    worker: FunctionsWorker,
) -> None:
    triggers = {
        name: binding
        for name, function in worker.metadata.items()
        if (binding := trigger_binding(function))["type"] == "serviceBusTrigger"
    }

    assert sorted(triggers) == [
        "agent_courier",
        "agent_inventory",
        "agent_payment",
        "agent_shipping",
        "response_listener",
        "submission_a",
    ]
    for name, binding in triggers.items():
        assert binding["properties"] == {"SupportsDeferredBinding": True}, name
        assert (binding["autoCompleteMessages"], binding["connection"]) == (False, "SERVICEBUS"), name
        assert worker.metadata[name].bindings["message"].direction == protos.BindingInfo.Direction.Value("in")


def test_the_operator_api_is_one_anonymous_http_trigger_answering_through_its_return_value(
    worker: FunctionsWorker,
) -> None:
    http = {
        name: binding
        for name, function in worker.metadata.items()
        if (binding := trigger_binding(function))["type"] == "httpTrigger"
    }

    assert sorted(http) == ["operator_api"]
    assert (http["operator_api"]["authLevel"], http["operator_api"]["route"]) == (
        "ANONYMOUS",
        "operator/{*path}",
    )
    bindings = worker.metadata["operator_api"].bindings
    assert bindings["$return"].direction == protos.BindingInfo.Direction.Value("out")
    assert bindings["$return"].type == "http"


def index_in_a_fresh_worker(**environment: str) -> dict[str, Any]:
    """Index the app in a worker process of its own, with ``environment`` added to the settings."""
    env = {key: value for key, value in os.environ.items() if key not in AZURE_PLATFORM_VARIABLES}
    env.update(environment)
    command = [sys.executable, "-m", "tests.worker.index_once"]
    out = subprocess.run(command, check=False, cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_on_azure_a_setting_with_no_safe_value_stops_the_app_at_indexing() -> None:
    # SERVICE_BINDINGS defaults to none: no step's operation has a mapping.
    result = index_in_a_fresh_worker(
        WEBSITE_INSTANCE_ID="0123abcd",
        COSMOS_ENDPOINT="https://orderflow.documents.azure.com:443/",
        SERVICEBUS__fullyQualifiedNamespace="orderflow.servicebus.windows.net",
    )

    assert result["ok"] is False
    assert result["error"] == (
        "worker init failed: UnsafeAzureSetting: SERVICE_BINDINGS courier: no mapping for operation 'cancel'"
    )
    assert "\n" not in result["error"]


def test_on_azure_identity_settings_index_every_function() -> None:
    result = index_in_a_fresh_worker(
        WEBSITE_INSTANCE_ID="0123abcd",
        COSMOS_ENDPOINT="https://orderflow.documents.azure.com:443/",
        SERVICEBUS__fullyQualifiedNamespace="orderflow.servicebus.windows.net",
        SERVICE_BINDINGS=demo_bindings_json("https://demo-services.example.com"),
    )

    assert result == {"ok": True, "functions": 17}
