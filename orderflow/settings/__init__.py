"""Every setting orderflow reads, as a frozen composition of small typed sections.

Precedence, highest first: keyword arguments to :meth:`Settings.load` (tests, the devhost CLI), then
environment variables (Azure app settings / ``local.settings.json`` ``Values``), then the defaults.
Setting names are the environment variable names, identical across Bicep app settings,
``local.settings.json`` and the sections. Durations are seconds; times are UTC.

Each role takes the sections it reads (``settings.steps``, ``settings.supervisor`` ...), never the whole
composition; a host loads it once and hands each role its sections. The defaults suit a developer's
machine; on Azure (:func:`on_azure`) some have no safe value, and
:func:`function_host.azure_policy.check_azure` refuses them at start-up. What only the local host reads
(its worker threads, its supervisor lease, its wake-ups) is no part of this composition: the local host
defines and loads it itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from pydantic import ConfigDict, model_validator
from pydantic.fields import FieldInfo

from orderflow.settings.base import (
    AZURE_PLATFORM_VARIABLES,
    TIMEOUT_BOUNDS,
    Section,
    describe_invalid_settings,
    on_azure,
    timeout_refusals,
)
from orderflow.settings.connections import Connections
from orderflow.settings.operator_api import OperatorApi
from orderflow.settings.queues import _QUEUE_SETTINGS, Clients, Queues
from orderflow.settings.supervisor import Alerts, Consumers, Scans, Supervisor
from orderflow.settings.workflow import Agents, Breakers, Starter, Steps

__all__ = [
    "AZURE_PLATFORM_VARIABLES",
    "Agents",
    "Alerts",
    "Breakers",
    "Clients",
    "Connections",
    "Consumers",
    "OperatorApi",
    "Queues",
    "Scans",
    "Section",
    "Settings",
    "Starter",
    "Steps",
    "Supervisor",
    "describe_invalid_settings",
    "on_azure",
]


# Bases in reverse: pydantic collects fields from the last base first, so the queue names are
# validated before CLIENTS, whose validator checks client queues against them.
class _Flat(
    OperatorApi,
    Consumers,
    Alerts,
    Scans,
    Supervisor,
    Breakers,
    Agents,
    Steps,
    Starter,
    Clients,
    Queues,
    Connections,
):
    """Every section's fields in one model: validated together, so one error lists every invalid
    setting and the checks across sections (:data:`TIMEOUT_BOUNDS`) see them all."""

    model_config = ConfigDict(title="Settings")

    def model_post_init(self, context: Any, /) -> None:
        """Check the client registry against this model's own queue names."""
        queues = Queues.model_construct(**{name: getattr(self, name) for name in _QUEUE_SETTINGS})
        Clients.model_post_init(self, {"queues": queues})

    @model_validator(mode="after")
    def _timeouts_end_before_their_deadlines(self) -> Self:
        values = {name: float(getattr(self, name)) for bound in TIMEOUT_BOUNDS for name in bound[:2]}
        for refusal in timeout_refusals(values):
            raise ValueError(refusal)
        return self


@dataclass(frozen=True, slots=True)
class Settings:
    """orderflow's configuration: one frozen section per group of readers. Build it with :meth:`load`."""

    connections: Connections
    queues: Queues
    clients: Clients
    starter: Starter
    steps: Steps
    agents: Agents
    breakers: Breakers
    supervisor: Supervisor
    scans: Scans
    alerts: Alerts
    consumers: Consumers
    operator_api: OperatorApi

    SECTIONS: ClassVar[tuple[tuple[str, type[Section]], ...]] = (
        ("connections", Connections),
        ("queues", Queues),
        ("clients", Clients),
        ("starter", Starter),
        ("steps", Steps),
        ("agents", Agents),
        ("breakers", Breakers),
        ("supervisor", Supervisor),
        ("scans", Scans),
        ("alerts", Alerts),
        ("consumers", Consumers),
        ("operator_api", OperatorApi),
    )
    """Every section, ``(attribute, class)``, in the order the configuration reference lists them."""

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``env`` (default: ``os.environ``) and keyword overrides (a setting's name
        and its value, e.g. ``STEP_TIMEOUT_S=3``).

        Only environment variables named like a setting are read; others are ignored.

        Raises:
            pydantic.ValidationError: a value has the wrong type or breaks a bound, a keyword names no
                setting, or two settings contradict each other (one error lists them all).
        """
        source = os.environ if env is None else env
        values: dict[str, Any] = {name: source[name] for name in _Flat.model_fields if name in source}
        values.update(overrides)
        flat = _Flat.model_validate(values)
        return cls._of(flat.model_dump())

    @classmethod
    def _of(cls, values: Mapping[str, Any]) -> Settings:
        """The composition of already validated ``values`` (every setting, by name)."""

        def section(kind: type[Section], context: dict[str, Any] | None = None) -> Any:
            mine = {name: values[name] for name in kind.model_fields}
            return kind.model_validate(mine, context=context)

        queues = section(Queues)
        built = {attr: section(kind, {"queues": queues}) for attr, kind in cls.SECTIONS if attr != "queues"}
        return cls(queues=queues, **built)

    def values(self) -> dict[str, Any]:
        """Every setting by name, as :meth:`load` takes them back."""
        merged: dict[str, Any] = {}
        for attr, _ in self.SECTIONS:
            merged.update(getattr(self, attr).model_dump())
        return merged

    def replace(self, **overrides: Any) -> Settings:
        """These settings with ``overrides`` (a setting's name and its value), validated as :meth:`load`.

        Raises:
            pydantic.ValidationError: as :meth:`load`.
        """
        return Settings.load({}, **{**self.values(), **overrides})

    @classmethod
    def fields(cls) -> dict[str, FieldInfo]:
        """Every setting's definition by name (its environment variable), section by section."""
        return {name: info for _, kind in cls.SECTIONS for name, info in kind.model_fields.items()}
