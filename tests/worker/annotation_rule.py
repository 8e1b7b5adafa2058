"""Apply the Python worker's binding-annotation rule to every function of the app, on this interpreter.

Run as ``python -m tests.worker.annotation_rule PATH`` with any interpreter the app supports: it
imports ``function_app`` (so the app's requirements must be installed there), resolves each user
function's annotations with ``typing.get_type_hints`` as the worker does, and applies the worker's
check from ``azure_functions_runtime.functions.Registry.validate_function_params``: a binding's
annotation must be a class or a ``typing`` generic, as decided by the worker's own ``typing_inspect``
module, loaded from ``PATH``. The 3.11/3.12 worker that ships with the host (4.x) applies the same
rule with the same vendored module. Prints one JSON object: the interpreter's version, the installed
azure-functions version, the functions checked and the annotations the rule refuses.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import json
import sys
import typing
from types import ModuleType


def load_typing_inspect(path: str) -> ModuleType:
    """The worker's ``typing_inspect`` module, loaded from its file."""
    spec = importlib.util.spec_from_file_location("worker_typing_inspect", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refused_annotations(typing_inspect: ModuleType) -> tuple[list[str], list[str]]:
    """The functions checked, and ``function.binding: annotation`` for each annotation refused."""
    import function_app  # noqa: PLC0415 (imported here, after sys.path is the app's)

    checked: list[str] = []
    refused: list[str] = []
    for function in function_app.app.get_functions():
        name = function.get_function_name()
        user_function = function.get_user_function()
        hints = typing.get_type_hints(user_function)
        bound = {binding.name for binding in function.get_bindings()}
        checked.append(name)
        for parameter in inspect.signature(user_function).parameters:
            if parameter not in bound or parameter not in hints:
                continue
            annotation = hints[parameter]
            if not isinstance(annotation, type) and not typing_inspect.is_generic_type(annotation):
                refused.append(f"{name}.{parameter}: {annotation!r}")
    return checked, refused


def main() -> None:
    checked, refused = refused_annotations(load_typing_inspect(sys.argv[1]))
    print(
        json.dumps(
            {
                "python": f"{sys.version_info.major}.{sys.version_info.minor}",
                "azure-functions": importlib.metadata.version("azure-functions"),
                "functions": checked,
                "refused": refused,
            }
        )
    )


if __name__ == "__main__":
    main()
