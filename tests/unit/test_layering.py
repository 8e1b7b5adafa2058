"""Dependencies point one way (docs/design.md §6): hosts -> roles -> orderflow/.

Every first-party module outside ``tests/`` belongs to one layer, and each layer may import only the
layers :data:`MAY_IMPORT` names:

- the core (``orderflow``) imports no role and no host;
- a role (``intake``, ``operator_api``, ``orchestrators``, ``activities``, ``agents``, ``supervisor``)
  imports the core and itself: never another role, never a host;
- the Azure host's support modules (``function_host`` but its blueprints) import the core alone; the
  one exception is the Durable Functions adapter, which implements the orchestrators' workflow-context
  port and imports that port (:data:`PORTS`);
- a blueprint (``function_host/blueprints/<role>.py``) imports its own role, the core and the support
  modules; ``function_app`` imports the blueprints, the support modules and the core;
- nothing outside the hosts imports ``function_host`` or ``function_app``, and nothing but the hosts and
  the drivers that drive the local host (``demo``, ``bench``) imports ``devhost``; the two hosts never
  import each other, and a host never imports a driver (the host runs roles; drivers drive it). Nothing
  imports ``bench`` and nothing but the tests imports ``tests``;
- role and core code never import the Functions SDKs;
- the local-only adapters (Storage queues, the loopback HTTP transport, the blob lease) live in
  ``devhost``: neither the Functions app nor its core and roles import them or the Storage SDKs they
  wrap;
- the client package (``orderflow_client``: the client SDK and the CLI) imports itself and, of the core,
  only the modules :data:`CLIENT_CORE` names, and of the local host only the Storage queues it sends and
  reads on (:data:`LOCAL_QUEUES`); the Functions package (the core, the roles, the Azure host) never
  imports it, and only the demo and the benchmarks do;
- the Functions package never imports the CLI's libraries (:data:`CLIENT_ONLY_LIBRARIES`), which
  ``requirements.txt`` does not install;
- ``infra/policies`` (checks that checkov loads in its own venv, outside the app's layers) imports no
  first-party module.

Each rule is checked twice (and its checker shown planted sources that break it and that do not).
Statically, on every import in every module's source (:func:`imports_in`:
module level, inside functions, under ``TYPE_CHECKING``, and ``importlib.import_module`` or
``__import__`` with a literal name), so an import in a code path no test runs is seen too. And by
importing each layer's modules in a fresh interpreter and reading ``sys.modules``, which also sees what
is imported on a module's behalf (a name built at run time, a re-export).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

CORE = "orderflow"
ROLES = ("intake", "operator_api", "orchestrators", "activities", "agents", "supervisor")
BLUEPRINTS = "function_host.blueprints"
FUNCTIONS_SDKS = ("azure.functions", "azure.durable_functions", "azurefunctions")
"""The Functions SDKs (the worker's bindings, Durable Functions, the binding extensions)."""

HOST_SUPPORT = "host support"
LOCAL_HOST = "devhost"
CLIENT = "orderflow_client"
BENCH = "bench"
DEMO = "demo"
FUNCTION_APP = "function_app"


def role(name: str) -> str:
    return f"role {name}"


def blueprint(name: str) -> str:
    return f"blueprint {name}"


MAY_IMPORT: dict[str, frozenset[str]] = {
    CORE: frozenset({CORE}),
    **{role(r): frozenset({CORE, role(r)}) for r in ROLES},
    HOST_SUPPORT: frozenset({CORE, HOST_SUPPORT}),
    **{blueprint(r): frozenset({CORE, role(r), HOST_SUPPORT}) for r in ROLES},
    FUNCTION_APP: frozenset({CORE, HOST_SUPPORT, *(blueprint(r) for r in ROLES)}),
    LOCAL_HOST: frozenset({CORE, *(role(r) for r in ROLES), LOCAL_HOST}),
    BENCH: frozenset({CORE, *(role(r) for r in ROLES), LOCAL_HOST, DEMO, CLIENT, BENCH}),
    # The demo's drivers run the local host and read what its roles define (a route, a limit).
    DEMO: frozenset({CORE, *(role(r) for r in ROLES), LOCAL_HOST, DEMO, CLIENT}),
    CLIENT: frozenset({CORE, CLIENT}),
}
"""The layers each layer may import directly (a layer always imports itself, a package its modules)."""

PORTS: dict[str, frozenset[str]] = {"function_host.durable": frozenset({"orchestrators.context"})}
"""A host support module that implements a role's port may import that port module, and nothing else
of the role: the Durable Functions workflow-context adapter implements :mod:`orchestrators.context`."""


def layer_of(module: str) -> str | None:
    """The layer of a first-party module, or None for the tests (and anything unknown)."""
    top = module.split(".", maxsplit=1)[0]
    if module.startswith(BLUEPRINTS + "."):
        return blueprint(module.split(".")[2]) if module.split(".")[2] in ROLES else None
    if top == "function_host":
        return HOST_SUPPORT
    if top in ROLES:
        return role(top)
    if top in (CORE, FUNCTION_APP, LOCAL_HOST, BENCH, DEMO, CLIENT):
        return top
    return None


FIRST_PARTY = frozenset(
    {CORE, *ROLES, "function_host", FUNCTION_APP, LOCAL_HOST, BENCH, DEMO, CLIENT, "tests"}
)
FUNCTIONS_PACKAGE = frozenset(
    {CORE, *(role(r) for r in ROLES), HOST_SUPPORT, *(blueprint(r) for r in ROLES), FUNCTION_APP}
)
"""The layers the Functions deployment package holds (.funcignore)."""

CLIENT_CORE = (
    "orderflow.messages",
    "orderflow.records",
    "orderflow.errors",
    "orderflow.client_text",
    "orderflow.clients",
    "orderflow.operator_actions",
    "orderflow.settings",
    "orderflow.telemetry",
    "orderflow.tracing",
    "orderflow.queues.base",
)
"""What the client package may import of the core: the messages and records it sends and shows, the
rules for client text, the client registry and the operator actions' preconditions, the settings it
connects with, its log guard and trace context, and the queue port. Never a store, a role or a host:
orders are read through the operator API."""

CLIENT_ONLY_LIBRARIES = ("typer", "rich")
"""The CLI's libraries (requirements-client.txt), which the Functions package neither installs nor imports."""


DEMO_SERVICES_PACKAGE = REPO / "demo" / "services" / "azure"
"""The demo services' Function App package (demo.services.package): its ``function_app.py`` is the root
module of another deployment, which builds the app from that deployment's settings when imported."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every first-party module outside ``tests/``, tracked or not: name -> file."""
    found = {FUNCTION_APP: REPO / "function_app.py"}
    for top in sorted(FIRST_PARTY - {FUNCTION_APP, "tests"}):
        paths = [p for p in sorted((REPO / top).rglob("*.py")) if DEMO_SERVICES_PACKAGE not in p.parents]
        found.update({_module_name(path): path for path in paths})
    return found


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` names, a relative one resolved against ``module``'s package."""
    if not node.level:
        return node.module or ""
    package = module.split(".")
    if module not in modules() or modules()[module].name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imports_in(module: str, source: str | None = None) -> Iterator[tuple[str, int]]:
    """Every module ``module``'s source (its file's, or ``source``) imports, with the line: ``from a
    import b`` names ``a.b`` when that is a module of the repository, else ``a``."""
    if source is None:
        source = modules()[module].read_text(encoding="utf-8")
    tree = ast.parse(source, filename=module)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield (submodule if submodule in modules() else source), node.lineno
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.args[0].value, node.lineno


LOCAL_QUEUES: dict[str, frozenset[str]] = {"orderflow_client.cli_client": frozenset({"devhost.wiring"})}
"""The ``orderflow`` command's submit, watch and cancel send and read on the local host's Storage queues,
so that module may import :mod:`devhost.wiring`, inside the function that connects them (importing the
command loads nothing of the local host)."""


DEMO_DRIVER: dict[str, frozenset[str]] = {"orderflow_client.cli_demo": frozenset({"demo.azure"})}
"""``orderflow demo --azure`` runs the demo's driver of a deployment, imported by name when the command
runs, from a checkout (the installed command holds no demo)."""


def _allowed(importer: str, imported: str) -> bool:
    """Whether first-party module ``importer`` may import first-party module ``imported``."""
    if any(imported in allowed.get(importer, ()) for allowed in (PORTS, LOCAL_QUEUES, DEMO_DRIVER)):
        return True
    source, target = layer_of(importer), layer_of(imported)
    return source is not None and target in MAY_IMPORT[source]


def _is_first_party(module: str) -> bool:
    return module.split(".", maxsplit=1)[0] in FIRST_PARTY


def _is_under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def layer_breaches(module: str, source: str | None = None) -> list[str]:
    """The imports of ``module`` (its source, or ``source``) that break the layers: a first-party module
    its layer may not import, or, from the client package, a core module :data:`CLIENT_CORE` does not
    name; and, from the Functions package, a library of :data:`CLIENT_ONLY_LIBRARIES`."""
    breaches = []
    for imported, line in imports_in(module, source):
        if _is_first_party(imported) and not _allowed(module, imported):
            breaches.append(f"{module}:{line} imports {imported}")
        elif layer_of(module) == CLIENT and layer_of(imported) == CORE:
            if not _is_under(imported, CLIENT_CORE):
                breaches.append(f"{module}:{line} imports {imported}, not the client's part of the core")
        elif layer_of(module) in FUNCTIONS_PACKAGE and _is_under(imported, CLIENT_ONLY_LIBRARIES):
            breaches.append(f"{module}:{line} imports {imported}, a library of the CLI only")
    return breaches


LAYERS = sorted(MAY_IMPORT)


def layer_modules(layer: str) -> list[str]:
    return [name for name in modules() if layer_of(name) == layer]


def test_every_module_outside_the_tests_belongs_to_a_layer() -> None:
    unplaced = [name for name in modules() if layer_of(name) is None]
    assert unplaced == [], "a blueprint is named after its role; a new package needs a layer here"
    assert {layer_of(name) for name in modules()} == set(LAYERS)
    top_level = {path.name for path in REPO.iterdir() if (path / "__init__.py").is_file()}
    top_level |= {path.stem for path in REPO.glob("*.py")}
    assert top_level == FIRST_PARTY  # a new top-level package is placed in a layer before it is used


def test_the_checkov_policies_import_nothing_of_orderflow() -> None:
    policies = sorted((REPO / "infra" / "policies").glob("*.py"))
    imported = {
        name.split(".", maxsplit=1)[0]
        for path in policies
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert len(policies) >= 2 and "checkov" in imported
    assert imported & (FIRST_PARTY | {"infra"}) == set()


@pytest.mark.parametrize("layer", LAYERS)
def test_every_import_in_the_source_follows_the_layers(layer: str) -> None:
    broken = [breach for module in layer_modules(layer) for breach in layer_breaches(module)]
    assert layer_modules(layer)
    assert broken == [], f"{layer} may import {sorted(MAY_IMPORT[layer])} only"


@pytest.mark.parametrize(
    ("module", "source", "breach"),
    [
        ("orderflow.records", "from orderflow_client.client import ReplyLog", "orderflow_client.client"),
        ("orderflow.planted", "import orderflow_client", "orderflow_client"),
        ("operator_api.planted", "from orderflow_client import cli", "orderflow_client.cli"),
        ("function_host.planted", "from devhost.host import Host", "devhost.host"),
        ("function_app", "import devhost", "devhost"),
        ("function_host.blueprints.intake", "import orderflow_client.operator_client", "orderflow_client"),
        ("orderflow.planted", "import typer", "typer, a library of the CLI only"),
        ("orderflow.planted", "def f():\n    from rich.table import Table", "rich.table, a library"),
        ("supervisor.planted", "import rich", "rich, a library of the CLI only"),
        ("function_host.planted", "import typer.testing", "typer.testing, a library"),
        ("orderflow_client.planted", "from orderflow.stores.cosmos import CosmosStores", "orderflow.stores"),
        ("orderflow_client.planted", "from supervisor.sweep import sweep", "supervisor.sweep"),
        ("orderflow_client.planted", "from devhost.host import Host", "devhost.host"),
    ],
)
def test_a_planted_import_that_breaks_the_layers_is_found(module: str, source: str, breach: str) -> None:
    [found] = layer_breaches(module, source)
    assert found.startswith(f"{module}:") and f" imports {breach}" in found


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("orderflow_client.planted", "from orderflow.messages import SubmitOrder\nimport typer, rich"),
        ("demo.planted", "from orderflow_client.client import OrderflowClient"),
        ("demo.planted", "from orderflow_client.operator_client import OperatorApiClient"),
        ("bench.planted", "import orderflow_client.client"),
    ],
)
def test_a_planted_import_the_layers_allow_is_not_a_breach(module: str, source: str) -> None:
    assert layer_breaches(module, source) == []


def wiring_taken(module: str, source: str | None = None) -> set[str]:
    """The names ``module`` (its source, or ``source``) imports from :mod:`devhost.wiring`."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8") if source is None else source)
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "devhost.wiring"
        for alias in node.names
    }


def test_the_client_package_connects_to_queues_only_never_to_a_store() -> None:
    # devhost.wiring connects to the stores too; the client reads orders through the operator API.
    taken = {name for module in layer_modules(CLIENT) for name in wiring_taken(module)}
    assert taken == {"connect_queues"}
    planted = "from devhost.wiring import connect_queues, connect_stores"
    assert wiring_taken("orderflow_client.cli", planted) - {"connect_queues"} == {"connect_stores"}
    assert layer_breaches("orderflow_client.cli", "from orderflow.wiring import connect_stores") != []


def test_the_functions_package_can_reach_neither_the_client_package_nor_the_local_host() -> None:
    reachable = {layer: _transitively(layer) for layer in FUNCTIONS_PACKAGE}
    assert reachable[FUNCTION_APP] >= {CORE, HOST_SUPPORT, role("intake")}
    assert {layer: {CLIENT, LOCAL_HOST} & reached for layer, reached in reachable.items()} == {
        layer: set() for layer in FUNCTIONS_PACKAGE
    }


def _transitively(layer: str) -> frozenset[str]:
    """The layers whose modules importing ``layer`` may load: what it may import, and so on."""
    reached, frontier = {layer}, [layer]
    while frontier:
        for following in MAY_IMPORT[frontier.pop()] - reached:
            reached.add(following)
            frontier.append(following)
    return frozenset(reached)


def _loaded_when_importing(names: list[str], *, after: tuple[str, ...] = ()) -> list[str]:
    """The modules that importing ``names`` in a fresh interpreter adds to ``sys.modules``, once the
    modules ``after`` names are imported (what they load is left out)."""
    script = (
        "import importlib, json, sys\n"
        f"for name in {after!r}:\n"
        "    importlib.import_module(name)\n"
        "before = set(sys.modules)\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def test_the_local_host_runs_roles_and_never_imports_the_drivers_that_drive_it() -> None:
    assert {DEMO, BENCH}.isdisjoint(_transitively(LOCAL_HOST))
    host_imports = {imported for module in layer_modules(LOCAL_HOST) for imported, _ in imports_in(module)}
    assert "devhost.host" in host_imports  # the walk saw the host's own imports
    assert [name for name in host_imports if layer_of(name) in {DEMO, BENCH}] == []
    driver_imports = {imported for module in layer_modules(DEMO) for imported, _ in imports_in(module)}
    assert {"devhost.__main__", "devhost.emulators", "devhost.serving"} <= driver_imports


DURABLE_FUNCTIONS_SDK = "azure.durable_functions"
AZURE_HOST_LAYERS = frozenset({HOST_SUPPORT, FUNCTION_APP, *(blueprint(r) for r in ROLES)})


def test_the_durable_functions_sdk_loads_the_agents_package_and_nothing_of_it() -> None:
    # azure-functions-durable tries `from agents import ...` on import, for its optional OpenAI Agents
    # integration (the openai-agents distribution's top-level package is `agents` too). With the app's
    # folder first on sys.path it finds the agents role instead, loads its empty __init__ and gives up
    # on the ImportError. The role's __init__ must stay empty, and the SDK reach nothing else of ours.
    loaded = [name for name in _loaded_when_importing([DURABLE_FUNCTIONS_SDK]) if _is_first_party(name)]
    assert loaded == ["agents"]
    assert (REPO / "agents" / "__init__.py").read_text(encoding="utf-8") == ""


@pytest.mark.parametrize("layer", LAYERS)
def test_importing_a_layer_loads_only_what_it_may_import(layer: str) -> None:
    # Entry points run their command on import; the static test reads them.
    names = [name for name in layer_modules(layer) if not name.endswith("__main__")]
    reachable = _transitively(layer)
    ports = {port for module, allowed in PORTS.items() if layer_of(module) in reachable for port in allowed}
    ports |= {port.rsplit(".", 1)[0] for port in ports}  # a port's package is loaded with it
    # What the Durable Functions SDK loads of ours is its own doing (the test above), not the layer's.
    after = (DURABLE_FUNCTIONS_SDK,) if layer in AZURE_HOST_LAYERS else ()
    loaded = [name for name in _loaded_when_importing(names, after=after) if _is_first_party(name)]
    assert set(names) <= set(loaded)
    assert [name for name in loaded if layer_of(name) not in reachable and name not in ports] == []


def test_role_and_core_code_never_imports_the_functions_sdks() -> None:
    code = [name for name in modules() if layer_of(name) in {CORE, *(role(r) for r in ROLES)}]
    assert "orchestrators.workflow" in code and "intake.submission" in code and "orderflow.records" in code

    def is_sdk(name: str) -> bool:
        return any(name == sdk or name.startswith(sdk + ".") for sdk in FUNCTIONS_SDKS)

    written = [
        f"{module}:{line} imports {name}"
        for module in code
        for name, line in imports_in(module)
        if is_sdk(name)
    ]
    assert written == []
    assert [name for name in _loaded_when_importing(code) if is_sdk(name)] == []


def _import_without(names: list[str], absent: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """Import ``names`` in a fresh interpreter in which the packages ``absent`` names cannot be imported,
    as where they are not installed; prints what of them ``sys.modules`` then holds."""
    script = (
        "import importlib, importlib.abc, json, sys\n"
        "class Absent(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {absent!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {absent!r})))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_the_functions_package_imports_without_the_clis_libraries() -> None:
    # httpx loads rich for its own command line when rich is installed (as in .venv), and does without
    # it otherwise: the app is imported here as the deployment, which installs neither, imports it.
    names = sorted(name for name in modules() if layer_of(name) in FUNCTIONS_PACKAGE)
    assert "function_app" in names and "orderflow.records" in names and "supervisor.sweep" in names

    imported = _import_without(names, CLIENT_ONLY_LIBRARIES)

    assert imported.returncode == 0, imported.stderr[-2000:]
    assert json.loads(imported.stdout.splitlines()[-1]) == []


def test_the_clis_libraries_are_missed_where_they_are_needed() -> None:
    # The check above can fail: the CLI itself does not import without them.
    imported = _import_without(["orderflow_client.cli"], CLIENT_ONLY_LIBRARIES)

    assert imported.returncode != 0
    assert "ModuleNotFoundError: No module named 'typer'" in imported.stderr


def _requirements(name: str) -> set[str]:
    """The distributions a requirements file names directly (its ``-r`` includes left out)."""
    lines = (REPO / name).read_text(encoding="utf-8").splitlines()
    return {
        re.split(r"[\s=<>!~;\[]", line.strip(), maxsplit=1)[0].lower()
        for line in lines
        if line.strip() and not line.lstrip().startswith(("#", "-"))
    }


def test_the_functions_package_requirements_leave_the_clis_libraries_out() -> None:
    app, client = _requirements("requirements.txt"), _requirements("requirements-client.txt")

    assert {"azure-functions", "azure-cosmos", "httpx"} <= app
    assert set(CLIENT_ONLY_LIBRARIES) & app == set()
    assert set(CLIENT_ONLY_LIBRARIES) <= client
    assert "-r requirements-client.txt" in (REPO / "requirements-dev.txt").read_text(encoding="utf-8")


def test_function_app_imports_with_the_real_sdks() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import function_app; print(type(function_app.app).__name__)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "DFApp"


LOCAL_ONLY_SDKS = ("azure.storage.queue", "azure.storage.blob")
"""The SDKs of the local-only adapters: Storage queues (Azurite) and the supervisors' blob lease."""


def test_the_app_and_its_core_load_no_local_only_adapter() -> None:
    shipped = [
        name for name in modules() if layer_of(name) in {CORE, *(role(r) for r in ROLES), *AZURE_HOST_LAYERS}
    ]
    assert "orderflow.queues.memory" in shipped and "function_app" in shipped

    def is_local_only(name: str) -> bool:
        return name.split(".", maxsplit=1)[0] == LOCAL_HOST or any(
            name == sdk or name.startswith(sdk + ".") for sdk in LOCAL_ONLY_SDKS
        )

    written = [
        f"{module}:{line} imports {name}"
        for module in shipped
        for name, line in imports_in(module)
        if is_local_only(name) and name not in LOCAL_QUEUES.get(module, ())
    ]
    assert written == []
    loaded = _loaded_when_importing(shipped, after=(DURABLE_FUNCTIONS_SDK,))
    assert [name for name in loaded if is_local_only(name)] == []
    probe = _loaded_when_importing(["devhost.wiring"])  # what the check would see of a local adapter
    assert {"devhost.wiring", "devhost.queues.storage", "azure.storage.queue"} <= set(probe)
