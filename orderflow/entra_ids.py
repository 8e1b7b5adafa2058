"""Entra's ids (object, tenant and application ids) read as GUIDs, whatever form they are written in.

Entra writes a GUID in lower case with hyphens (``0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0``); the same id can
also be written in upper case, in braces, as a URN or without hyphens. Compared as text, those forms name
different principals, and a rule such as "a reviewer cannot approve their own order" fails open. So every
such id is parsed here and kept, compared and recorded in its canonical form only.
"""

from __future__ import annotations

import re
import uuid

_HYPHENATED = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_GUID_FORMS = re.compile(
    rf"(?:urn:uuid:)?{_HYPHENATED}|\{{{_HYPHENATED}\}}|[0-9a-f]{{32}}",
    re.IGNORECASE,
)
"""The written forms of a GUID read: ``xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (Entra's), the same in braces
or after ``urn:uuid:``, and 32 hex digits, in any case. Nothing else: no spaces, no other brackets."""


def canonical_guid(text: str) -> str:
    """``text`` as a GUID in Entra's form: lower case, hyphenated.

    Raises:
        ValueError: ``text`` is not a GUID in one of the forms of :data:`_GUID_FORMS`.
    """
    if not _GUID_FORMS.fullmatch(text):
        raise ValueError("not a GUID")
    return str(uuid.UUID(text.lower()))


def guid_or_none(text: object) -> str | None:
    """:func:`canonical_guid` of ``text``, or None when it is not a string holding a GUID."""
    if not isinstance(text, str):
        return None
    try:
        return canonical_guid(text)
    except ValueError:
        return None
