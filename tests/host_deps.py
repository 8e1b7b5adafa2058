"""The dependencies a test wires, with the settings beside them, as a host holds both."""

from __future__ import annotations

from dataclasses import dataclass, field

from orderflow.dependencies import Dependencies
from orderflow.settings import Settings


@dataclass
class HostDeps(Dependencies):
    """:class:`Dependencies` and the settings they were wired with: a test hands each role function the
    sections it reads from :attr:`settings`, as a host does (the roles never read it off the container).

    Attributes:
        settings: The settings the test loaded.
    """

    settings: Settings = field(kw_only=True)
