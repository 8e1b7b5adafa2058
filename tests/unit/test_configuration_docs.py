"""docs/configuration.md documents every setting ``Settings`` reads, and nothing it does not.

The page's reference is generated (``tests/docs_configuration.py``); these tests also hold its
hand-written parts to the code: a variable listed as read by the host must not be a setting.
"""

from __future__ import annotations

import re

import pytest

from orderflow.settings import Settings
from tests.docs_configuration import PAGE, env_names, fields, generated_part, render

pytestmark = pytest.mark.unit

REGENERATE = "run .venv/bin/python -m tests.docs_configuration"
_ROW = re.compile(r"^\|\s*`(?P<name>[A-Za-z_][A-Za-z0-9_]*)`\s*\|", re.MULTILINE)
"""A table row whose first cell is one variable name: ``| `STEP_TIMEOUT_S` | ...``."""


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def _reference_rows() -> list[str]:
    return _ROW.findall(generated_part(_page()))


def _host_rows() -> list[str]:
    page = _page()
    start = page.index("## Read by the host or the platform")
    end = page.index("\n## ", start + 1)
    return _ROW.findall(page[start:end])


def test_settings_are_read_from_variables_named_like_their_fields() -> None:
    # What the page calls a setting's name is the variable Settings.load reads.
    name = env_names()[0]
    assert Settings.load({name: "from the environment"}).values()[name] == "from the environment"
    assert len(env_names()) == len(set(env_names())) == len(fields())


def test_every_setting_is_documented() -> None:
    missing = [name for name in env_names() if name not in _reference_rows()]
    assert not missing, f"settings missing from {PAGE.name}: {missing}; {REGENERATE}"


def test_no_documented_setting_is_unknown() -> None:
    unknown = [name for name in _reference_rows() if name not in env_names()]
    assert not unknown, f"{PAGE.name} documents settings Settings does not read: {unknown}; {REGENERATE}"
    doubled = sorted({name for name in _reference_rows() if _reference_rows().count(name) > 1})
    assert not doubled, f"{PAGE.name} documents these settings twice: {doubled}"


def test_variables_read_by_the_host_are_not_settings() -> None:
    rows = _host_rows()
    assert "TASK_HUB_NAME" in rows
    misfiled = [name for name in rows if name in env_names()]
    assert not misfiled, f"{misfiled} are Settings fields: they belong in the reference of {PAGE.name}"


def test_the_reference_is_what_the_generator_writes() -> None:
    assert generated_part(_page()) == render(), f"{PAGE.name} is out of date; {REGENERATE}"


def test_every_setting_says_what_it_is_for() -> None:
    # The reference's "meaning" column is the field's description: an undescribed setting documents nothing.
    undescribed = sorted(name for name, info in fields().items() if not (info.description or "").strip())
    assert undescribed == []
