"""README.md is the way into docs/: it links every page there, and no relative link in either is broken.

A link's anchor, when it has one, must name a heading of the page it points to, spelled as GitHub
spells heading anchors (lower case, punctuation dropped, spaces as hyphens, ``-1`` for a repeat).
Links inside code blocks and code spans are not links; links to other sites are not checked.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]

_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def _prose(path: Path) -> list[str]:
    """The lines of ``path`` outside fenced code blocks, with code spans blanked out."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def _links(path: Path) -> list[str]:
    return [target for line in _prose(path) for target in _LINK.findall(line)]


def _is_relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) and not target.startswith("//")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: ``## `host.json`, and why`` → ``hostjson-and-why``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown page, repeats numbered as GitHub numbers them."""
    found: set[str] = set()
    seen: Counter[str] = Counter()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced and (match := _HEADING.match(line)):
            base = slug(match[2])
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return found


def _resolve(page: Path, target: str) -> tuple[Path, str]:
    path, _, anchor = unquote(target).partition("#")
    return ((page.parent / path).resolve() if path else page), anchor


def test_the_slugs_are_githubs() -> None:
    assert slug("`host.json`, and why") == "hostjson-and-why"
    assert slug("3. The concurrency protocol (the heart of the system)") == (
        "3-the-concurrency-protocol-the-heart-of-the-system"
    )
    assert slug("The demo's settings") == "the-demos-settings"
    assert slug("Scheduler–Agent–Supervisor") == "scheduleragentsupervisor"


def test_there_are_pages_and_links_to_check() -> None:
    assert len(DOCS) >= 3
    assert _links(README) and sum(len(_links(page)) for page in DOCS) > 10


def test_the_readme_links_every_docs_page() -> None:
    linked = {_resolve(README, target)[0] for target in _links(README) if _is_relative(target)}
    unlinked = [page.relative_to(REPO).as_posix() for page in DOCS if page.resolve() not in linked]
    assert not unlinked, f"README.md does not link {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        if not _is_relative(target):
            continue
        path, anchor = _resolve(page, target)
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif not path.is_relative_to(REPO):
            broken.append(f"{target}: outside the repository")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(REPO).as_posix()}")
    assert not broken, f"broken links in {page.relative_to(REPO).as_posix()}: {broken}"
