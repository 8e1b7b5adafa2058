"""docs/architecture.md's module map matches the tree.

The map names packages, not every module: every top-level package or module (a folder holding Python
code, a ``.py`` file at the root), and every package directly inside a top-level one, has a row; every
path a row names exists; every module (``name.py``) or folder (``name/``) a row's description names in a
code span exists inside that row's package (its first folder). A package added, moved or removed
without its row fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "architecture.md"
NOT_SOURCE = frozenset({"node_modules", "build", "__pycache__"})
"""Folders at the root that hold no source of the repository's own (installed or generated)."""

_CODE_SPAN = re.compile(r"`([^`]+)`")
_NAMED_PATH = re.compile(r"[A-Za-z_][\w/-]*\.py|[A-Za-z_][\w-]*/")


def map_rows(text: str) -> list[tuple[list[str], str]]:
    """The module map's rows of a page's ``text``: the paths each row names, and its description.

    Raises:
        AssertionError: the page has no module map, or a row names no path.
    """
    section = text.split("\n## Module map\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "no module map table"
    parsed = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        paths = _CODE_SPAN.findall(cells[0])
        assert paths, row
        parsed.append((paths, cells[-1]))
    return parsed


def _is_source_folder(path: Path) -> bool:
    return path.is_dir() and not path.name.startswith(".") and path.name not in NOT_SOURCE


def _holds_python(folder: Path) -> bool:
    return any(
        not any(part.startswith(".") or part in NOT_SOURCE for part in p.relative_to(folder).parts)
        for p in folder.rglob("*.py")
    )


def tree_entries(root: Path) -> set[str]:
    """What the map must name under ``root``: each top-level module (``name.py``), each top-level folder
    holding Python code (``name/``) and each package directly inside a top-level package
    (``name/sub/``)."""
    found = {p.name for p in root.glob("*.py")}
    for folder in filter(_is_source_folder, root.iterdir()):
        if folder.name.endswith(".egg-info") or not _holds_python(folder):
            continue
        found.add(f"{folder.name}/")
        if (folder / "__init__.py").is_file() and folder.name != "tests":
            found |= {
                f"{folder.name}/{sub.name}/" for sub in folder.iterdir() if (sub / "__init__.py").is_file()
            }
    return found


def missing_paths(root: Path, rows: list[tuple[list[str], str]]) -> list[str]:
    """Paths the rows name, and modules or folders their descriptions name, that do not exist."""
    missing = []
    for paths, description in rows:
        missing += [path for path in paths if not (root / path).exists()]
        base = root / next((path for path in paths if path.endswith("/")), "")
        for span in _CODE_SPAN.findall(description):
            if _NAMED_PATH.fullmatch(span) and not (base / span).exists():
                missing.append(f"{span} (in the row of {', '.join(paths)})")
    return missing


def test_every_package_of_the_tree_has_a_row_and_every_row_names_what_exists() -> None:
    rows = map_rows(PAGE.read_text(encoding="utf-8"))
    named = {path for paths, _ in rows for path in paths}

    assert sorted(tree_entries(REPO) - named) == [], "packages the module map does not name"
    assert missing_paths(REPO, rows) == [], "the module map names what does not exist"


def test_the_map_names_the_layers_the_dependency_rule_names() -> None:
    rows = map_rows(PAGE.read_text(encoding="utf-8"))
    named = {path for paths, _ in rows for path in paths}

    hosts = ("function_app.py", "function_host/", "devhost/", "bench/", "demo/")
    roles = ("intake/", "operator_api/", "orchestrators/", "activities/", "agents/", "supervisor/")
    assert {*hosts, *roles, "orderflow/"} <= named


PAGE_OF_A_SMALL_TREE = """# Architecture

## Module map

| path | layer | what it holds |
|---|---|---|
| `app.py` | host | the entry point |
| `core/` | core | the model (`model.py`) and the ports (`ports/`) |
| `gone/` | core | a package that was moved |

## Dependencies
"""


def test_a_package_without_a_row_and_a_row_without_its_package_are_both_found(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("", encoding="utf-8")
    for package in ("core", "core/ports", "core/adapters", "roles"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "node_modules" / "x").mkdir(parents=True)
    (tmp_path / "node_modules" / "x" / "y.py").write_text("", encoding="utf-8")
    rows = map_rows(PAGE_OF_A_SMALL_TREE)

    assert tree_entries(tmp_path) == {"app.py", "core/", "core/ports/", "core/adapters/", "roles/"}
    assert tree_entries(tmp_path) - {p for paths, _ in rows for p in paths} == {
        "core/adapters/",
        "core/ports/",
        "roles/",
    }
    assert missing_paths(tmp_path, rows) == ["model.py (in the row of core/)", "gone/"]
