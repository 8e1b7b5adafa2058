"""The worker indexes and loads the whole app: the failure that would leave a host with no functions.

The worker's indexing (``worker_init_request``) imports ``function_app.py``, applies its own checks to
every function's bindings and annotations, and reports the metadata the host registers; a single
refused annotation fails the whole app.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.worker.conftest import REPO
from tests.worker.rpc import protos
from tests.worker.worker import SUCCESS, FunctionsWorker

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
    assert len(worker.metadata) == len(registered) == 16
    assert set(worker.metadata) == registered


def test_the_worker_loads_every_indexed_function(worker: FunctionsWorker) -> None:
    statuses = {name: response.result.status for name, response in worker.load_responses.items()}

    assert statuses == dict.fromkeys(worker.metadata, SUCCESS)


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
        "submission",
    ]
    for name, binding in triggers.items():
        assert binding["properties"] == {"SupportsDeferredBinding": True}, name
        assert (binding["autoCompleteMessages"], binding["connection"]) == (False, "SERVICEBUS"), name
        assert worker.metadata[name].bindings["message"].direction == protos.BindingInfo.Direction.Value("in")
