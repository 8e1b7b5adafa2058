"""The roles take the settings sections they read: no role module reads ``.settings`` off the dependency
container (or anything else), so which settings a role function depends on is in its signature.

Checked on the source of every module of the roles (:data:`tests.unit.test_layering.ROLES`), with
planted sources that read the settings off the container (found) and that take a section (not found).
"""

from __future__ import annotations

import ast

import pytest

from tests.unit.test_layering import ROLES, modules

pytestmark = pytest.mark.unit

ATTRIBUTE = "settings"


def _dotted_root(node: ast.expr) -> str | None:
    """The first name of a dotted expression (``orderflow`` of ``orderflow.settings``), or None when the
    expression is not a plain dotted name (a call, a subscript)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def settings_reads(source: str) -> list[int]:
    """The lines of ``source`` that read ``settings`` as an attribute of an object (``deps.settings``,
    ``self.deps.settings``, ``getattr(deps, "settings")``); the package path ``orderflow.settings`` is not
    a read."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == ATTRIBUTE:
            if _dotted_root(node.value) != "orderflow":
                found.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == ATTRIBUTE
        ):
            found.append(node.lineno)
    return sorted(found)


def role_modules() -> dict[str, str]:
    """Every role module's source, by module name."""
    return {
        name: path.read_text(encoding="utf-8")
        for name, path in modules().items()
        if name.split(".", maxsplit=1)[0] in ROLES
    }


def test_no_role_module_reads_the_settings_off_an_object() -> None:
    sources = role_modules()
    assert "activities.steps" in sources and "operator_api.plane_routes" in sources  # the walk found them
    assert {name.split(".")[0] for name in sources} == set(ROLES)

    reads = [f"{name}:{line}" for name, source in sorted(sources.items()) for line in settings_reads(source)]

    assert reads == []


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("def f(data, deps):\n    return deps.settings.steps.REVIEW_AMOUNT_ABOVE\n", [2]),
        ("class H:\n    def f(self):\n        return self.deps.settings.queues\n", [3]),
        ("def f(deps):\n    s = deps.settings\n    return s.starter\n", [2]),
        ("def f(deps):\n    return getattr(deps, 'settings').clients\n", [2]),
        ("def f():\n    return dependencies().settings.agents\n", [2]),
    ],
)
def test_a_planted_read_of_the_settings_off_an_object_is_found(source: str, lines: list[int]) -> None:
    assert settings_reads(source) == lines


@pytest.mark.parametrize(
    "source",
    [
        "def f(data, deps, sections):\n    return sections.steps.REVIEW_AMOUNT_ABOVE\n",
        "def f(deps, *, steps):\n    return steps.RETRY_BUDGET\n",
        "import orderflow.settings\n\nSteps = orderflow.settings.Steps\n",
        "from orderflow.settings import Settings\n\n\ndef of(s: Settings):\n    return s.steps\n",
        'def f():\n    """Reads deps.settings.steps, which this text only names."""\n',
    ],
)
def test_a_role_that_takes_its_sections_is_not_a_read(source: str) -> None:
    assert settings_reads(source) == []
