"""The settings sections the activities read, handed to them by their host beside the dependencies."""

from __future__ import annotations

from dataclasses import dataclass

from orderflow.settings import Breakers, Queues, Settings, Starter, Steps


@dataclass(frozen=True, slots=True)
class ActivitySections:
    """What the activities read of the settings, one section each.

    Attributes:
        steps: Review threshold and default, calls per step (``start_step``, ``start_undo``).
        starter: The claim's timeout and start latency (``start_step``, ``record_review``).
        breakers: Whether and how long a failing dependency holds its orders (``start_step``,
            ``record_step_failure``).
        queues: The agents' queue names (``start_step``, ``start_undo``).
    """

    steps: Steps
    starter: Starter
    breakers: Breakers
    queues: Queues

    @classmethod
    def of(cls, settings: Settings) -> ActivitySections:
        """The activities' sections of ``settings``."""
        return cls(
            steps=settings.steps, starter=settings.starter, breakers=settings.breakers, queues=settings.queues
        )
