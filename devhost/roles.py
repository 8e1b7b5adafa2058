"""The roles a local host process runs, as ``python -m devhost --roles`` names them."""

from __future__ import annotations

from collections.abc import Iterable

ALL_ROLES = ("submission", "starter", "orchestrator", "agents", "listener", "supervisor", "api")
"""Roles a devhost process can run. ``starter`` and ``listener`` need ``orchestrator`` in the same
process (they talk to its durabletask backend); ``api`` is the operator API over HTTP on loopback."""


def check_roles(roles: Iterable[str]) -> frozenset[str]:
    """The roles as a set, once checked.

    Raises:
        ValueError: no role, a role not in :data:`ALL_ROLES`, or ``starter``/``listener`` without
            ``orchestrator``.
    """
    chosen = frozenset(roles)
    if not chosen:
        raise ValueError(f"no roles given; choose from {','.join(ALL_ROLES)} or 'all'")
    unknown = chosen - set(ALL_ROLES)
    if unknown:
        raise ValueError(f"unknown roles: {sorted(unknown)}; choose from {','.join(ALL_ROLES)} or 'all'")
    if chosen & {"starter", "listener"} and "orchestrator" not in chosen:
        raise ValueError("the starter and listener roles need the orchestrator role in the same process")
    return chosen


def parse_roles(text: str) -> tuple[str, ...]:
    """``--roles``: ``all``, or role names separated by commas (spaces around them ignored).

    Raises:
        ValueError: as :func:`check_roles`.
    """
    if text.strip() == "all":
        return ALL_ROLES
    roles = tuple(dict.fromkeys(r.strip() for r in text.split(",") if r.strip()))
    check_roles(roles)
    return roles
