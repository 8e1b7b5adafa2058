"""A local host built on a test's wiring, handed the settings the test loaded beside its dependencies."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from devhost.host import DevHost
from devhost.roles import ALL_ROLES
from tests.host_deps import HostDeps


def dev_host(deps: HostDeps, roles: Iterable[str] = ALL_ROLES, **options: Any) -> DevHost:
    """A :class:`DevHost` running ``roles`` on ``deps`` with ``deps.settings`` and, unless ``options``
    name their own, ``deps.local``; ``options`` are its other keywords (``local``, ``lease``,
    ``api_port`` ...)."""
    options.setdefault("local", deps.local)
    return DevHost(deps, roles, settings=deps.settings, **options)
