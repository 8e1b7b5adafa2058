"""Every Bicep file in infra/ parses with pycep, the parser checkov scans Bicep with."""

from __future__ import annotations

from pathlib import Path

import pytest
from lark.exceptions import LarkError

from tests.infra.bicep_types import parse
from tests.infra.fixtures import GOOD, INFRA, infra_templates, mutated

pytestmark = pytest.mark.unit


def _resources(path: Path) -> list[str]:
    return sorted(parse(path).get("resources", {}))


def test_the_fixture_parses_with_every_resource_nested_ones_included() -> None:
    assert _resources(GOOD / "main.bicep") == ["rg"]
    resources = _resources(GOOD / "app.bicep")
    assert len(resources) == 21
    assert {"storage__blobServices__deployments", "cosmos__database__orders", "queues"} <= set(resources)


@pytest.mark.skipif(not (INFRA / "main.bicep").is_file(), reason="infra/main.bicep is not written yet")
@pytest.mark.parametrize("template", infra_templates(), ids=lambda path: str(path.relative_to(INFRA)))
def test_every_template_in_infra_parses(template: Path) -> None:
    parsed = parse(template)  # raises on a syntax error
    assert parsed.get("resources") or parsed.get("modules"), "a template that declares nothing"


def test_a_template_with_a_syntax_error_does_not_parse(tmp_path: Path) -> None:
    copy = mutated(tmp_path / "broken", "app.bicep", [("output serviceBusNamespace string", "output = ")])
    with pytest.raises(LarkError):
        parse(copy / "app.bicep")


def test_more_than_five_blank_or_comment_lines_in_a_row_inside_an_object_do_not_parse(tmp_path: Path) -> None:
    # A limit of this pycep version's grammar, which the Bicep compiler does not have: checkov would
    # report the file as a parsing error and check nothing in it.
    six_comments = "".join(f"    // note {n}\n" for n in range(6))
    copy = mutated(
        tmp_path / "long",
        "app.bicep",
        [("    retentionInDays: 30\n", six_comments + "    retentionInDays: 30\n")],
    )
    with pytest.raises(LarkError):
        parse(copy / "app.bicep")
