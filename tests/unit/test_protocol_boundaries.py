"""Only the conditional write replaces a state record, and only the transitions change its state fields
(docs/protocol.md, docs/design.md §6).

A static scan of every first-party module outside ``tests/``:

- **store writes**: a call ``<receiver>.replace(...)`` or ``<receiver>.create(...)`` whose receiver is a
  state store fails the scan outside :data:`STORE_WRITERS`. A receiver is a state store when its name
  (the variable, or the attribute's last part: ``states``, ``deps.states``, ``self.inner``) is a
  conventional name of the state store (:data:`STATE_STORE_NAMES`) or is annotated ``StateStore`` in the
  same module (a parameter, an annotated assignment, or an attribute assigned from either). The other
  stores share the method names (``orders.create``, the breakers' ``self._store.replace``, the alerts'
  and tallies' containers) and are told apart by those names and annotations: none of them is called
  ``states`` or annotated ``StateStore``.
- **state fields**: assigning ``process_state``, ``locked_by`` or ``complete_by`` fails the scan outside
  :data:`FIELD_WRITERS`: as an attribute (``x.locked_by = ...``, chained, augmented or annotated),
  through ``setattr`` with the literal name, as a keyword of a ``StateRecord(...)`` construction or a
  ``replace(...)`` call, or as a key of ``model_copy(update={...})``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

SKIPPED_DIRS = frozenset({"tests", ".venv", "node_modules", ".git", "__pycache__"})

STATE_FIELDS = frozenset({"process_state", "locked_by", "complete_by"})
WRITE_METHODS = frozenset({"replace", "create"})
STATE_STORE_NAMES = frozenset({"states", "state_store"})
STATE_STORE_TYPES = frozenset({"StateStore"})

STORE_WRITERS: dict[str, str] = {
    "orderflow/stores/": "the store adapters (Cosmos DB, in-memory) implement replace and create",
    "orderflow/protocol/conditional.py": "the one conditional write",
    "intake/submission.py": "the initial insert of a new order's record: a create has no version to be "
    "conditional on, and AlreadyExists makes a resubmission a duplicate",
    "orderflow/clock_skew.py": "a state-store decorator (it watches the store's clock), forwarding to it",
    "bench/counting/stores.py": "the benchmark's counting decorator, forwarding to the store it wraps",
    "bench/sweep.py": "the sweep benchmark seeds records straight into a store it owns",
}
"""Path prefix -> why it may call a state store's ``replace`` / ``create``."""

FIELD_WRITERS: dict[str, str] = {
    "orderflow/protocol/transitions": "the transitions: the only code that changes a record's state",
    "orderflow/stores/": "the store adapters decode stored documents into records",
    "bench/sweep.py": "the sweep benchmark seeds records in chosen states",
}
"""Path prefix -> why it may assign ``process_state``, ``locked_by`` or ``complete_by``."""


def _modules() -> Iterator[Path]:
    """Every first-party module outside ``tests/``: ``function_app.py`` and each top-level package's."""
    yield REPO / "function_app.py"
    for package in sorted(path.parent for path in REPO.glob("*/__init__.py")):
        for path in sorted(package.rglob("*.py")):
            if not SKIPPED_DIRS.intersection(path.relative_to(REPO).parts):
                yield path


def _allowed(relative: str, allowed: dict[str, str]) -> bool:
    return any(relative.startswith(prefix) for prefix in allowed)


def _annotated_stores(tree: ast.AST) -> set[str]:
    """Names annotated ``StateStore`` (parameters, annotated assignments), and attributes assigned from
    them (``self.inner = inner``)."""

    def is_store(annotation: ast.expr | None) -> bool:
        # Unparsed, so that a quoted annotation ("StateStore | None") is read as well.
        words = set(re.findall(r"\w+", ast.unparse(annotation))) if annotation is not None else set()
        return bool(words & STATE_STORE_TYPES)

    names = {arg.arg for arg in ast.walk(tree) if isinstance(arg, ast.arg) and is_store(arg.annotation)}
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and is_store(node.annotation):
            names.add(_last_name(node.target) or "")
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _last_name(node.value) in names:
            names.update(name for target in node.targets if (name := _last_name(target)))
    return names - {""}


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def store_writes(source: str) -> list[int]:
    """Lines of ``source`` that call ``replace`` / ``create`` on a state store."""
    tree = ast.parse(source)
    stores = STATE_STORE_NAMES | _annotated_stores(tree)
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in WRITE_METHODS
        and _last_name(node.func.value) in stores
    ]


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [leaf for target in node.targets for leaf in _unpacked(target)]
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def _unpacked(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        return [leaf for element in target.elts for leaf in _unpacked(element)]
    return [target]


def _call_writes(node: ast.Call) -> bool:
    """A call that sets a state field: ``setattr(x, "locked_by", ...)``, ``StateRecord(locked_by=...)``,
    ``replace(x, locked_by=...)`` or ``x.model_copy(update={"locked_by": ...})``."""
    name = _last_name(node.func)
    if name == "setattr" and len(node.args) > 1:
        field = node.args[1]
        return isinstance(field, ast.Constant) and field.value in STATE_FIELDS
    if name in ("StateRecord", "replace") and any(kw.arg in STATE_FIELDS for kw in node.keywords):
        return True
    if name == "model_copy":
        for kw in node.keywords:
            if kw.arg == "update" and isinstance(kw.value, ast.Dict):
                keys = [key.value for key in kw.value.keys if isinstance(key, ast.Constant)]
                if STATE_FIELDS.intersection(keys):
                    return True
    return False


def field_writes(source: str) -> list[int]:
    """Lines of ``source`` that assign ``process_state``, ``locked_by`` or ``complete_by``."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        attributes = [t for t in _targets(node) if isinstance(t, ast.Attribute) and t.attr in STATE_FIELDS]
        lines.extend(target.lineno for target in attributes[:1])
        if isinstance(node, ast.Call) and _call_writes(node):
            lines.append(node.lineno)
    return lines


def test_only_the_conditional_write_replaces_or_creates_a_state_record() -> None:
    found = {
        f"{relative}:{line}"
        for path in _modules()
        if not _allowed(relative := path.relative_to(REPO).as_posix(), STORE_WRITERS)
        for line in store_writes(path.read_text(encoding="utf-8"))
    }
    assert found == set()


def test_only_the_transitions_assign_the_state_fields() -> None:
    found = {
        f"{relative}:{line}"
        for path in _modules()
        if not _allowed(relative := path.relative_to(REPO).as_posix(), FIELD_WRITERS)
        for line in field_writes(path.read_text(encoding="utf-8"))
    }
    assert found == set()


def test_every_allowed_exception_exists() -> None:
    for prefix in (*STORE_WRITERS, *FIELD_WRITERS):
        assert list(REPO.glob(prefix.rstrip("/") + "*")), prefix


# The scan catches each form it names (planted sources).


@pytest.mark.parametrize(
    "source",
    [
        "def f(states):\n    states.replace(r, etag=e)\n",
        "def f(deps):\n    deps.states.create(r)\n",
        "def f(store: StateStore):\n    store.replace(r, etag=e)\n",
        "def f(store: 'StateStore | None'):\n    store.create(r)\n",
        "class W:\n    def __init__(self, inner: StateStore):\n        self.inner = inner\n"
        "    def put(self, r):\n        return self.inner.replace(r, etag='x')\n",
        "state_store: StateStore = make()\nstate_store.create(r)\n",
    ],
)
def test_the_scan_finds_a_state_store_write(source: str) -> None:
    assert store_writes(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "def f(orders: OrderStore):\n    orders.create(doc)\n",
        "class B:\n    def w(self):\n        self._store.replace(doc, etag=e)\n",
        "text.replace('a', 'b')\n",
        "def f(states):\n    states.get(key)\n",
    ],
)
def test_the_scan_leaves_other_stores_alone(source: str) -> None:
    assert store_writes(source) == []


@pytest.mark.parametrize(
    "source",
    [
        "record.process_state = ProcessState.PENDING\n",
        "record.locked_by = record.complete_by = None\n",
        "record.complete_by += delta\n",
        "record.locked_by: str | None = None\n",
        "a.locked_by, b = None, 1\n",
        "setattr(record, 'process_state', ProcessState.ERROR)\n",
        "StateRecord(order_id='o', process_state=ProcessState.PROCESSED)\n",
        "record.model_copy(update={'locked_by': None})\n",
        "dataclasses.replace(record, complete_by=None)\n",
    ],
)
def test_the_scan_finds_a_state_field_write(source: str) -> None:
    assert field_writes(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "state = record.process_state\n",
        "StepStarted(complete_by=record.complete_by)\n",
        "telemetry.event('x', complete_by=at.isoformat())\n",
        "record.model_copy(update={'reply_to': 'q'})\n",
        "if record.locked_by == owner:\n    pass\n",
    ],
)
def test_the_scan_leaves_reads_and_other_fields_alone(source: str) -> None:
    assert field_writes(source) == []
