"""The dependencies a test wires, with the settings beside them, as a host holds both."""

from __future__ import annotations

from dataclasses import dataclass, field

from devhost.settings import LocalSettings
from orderflow.dependencies import Dependencies
from orderflow.settings import Settings


@dataclass
class HostDeps(Dependencies):
    """:class:`Dependencies` and the settings they were wired with: a test hands each role function the
    sections it reads from :attr:`settings`, as a host does (the roles never read it off the container).

    Attributes:
        settings: The settings the test loaded.
        local: The local host's own settings a test's devhost runs with; None: their defaults.
    """

    settings: Settings = field(kw_only=True)
    local: LocalSettings | None = field(default=None, kw_only=True)
