"""The fixture deployment of tests/infra and copies of it with one thing changed."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
GOOD = Path(__file__).resolve().parent / "fixtures" / "good"
"""A small deployment in the shape of orderflow's (main.bicep and one module) that passes every check."""


def infra_templates() -> list[Path]:
    """Every ``.bicep`` file under ``infra/``, sorted."""
    return sorted(INFRA.rglob("*.bicep"))


def mutated(target: Path, file: str, replacements: list[tuple[str, str]]) -> Path:
    """A copy of the good fixture in ``target`` with each ``(old, new)`` replaced once in ``file``.

    Raises:
        AssertionError: an ``old`` text is not in the file exactly once (the fixture changed).
    """
    shutil.copytree(GOOD, target)
    path = target / file
    text = path.read_text(encoding="utf-8")
    for old, new in replacements:
        assert text.count(old) == 1, f"{old!r} is not once in {file}"
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    return target
