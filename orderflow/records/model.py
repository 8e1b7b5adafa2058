"""The base of every stored model (camelCase JSON, unknown fields kept), the schema and purge versions,
and the order's and a step's statuses."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

SCHEMA_VERSION = 1
"""Version of the stored record and document shapes written by this code."""

REDACTED = "[redacted]"
"""What a text field holds once the retention purge removed its payment or customer data (docs/data.md)."""

DATA_PURGE_VERSION = 3
"""The retention purge this code applies (a state record's ``dataPurgeVersion``; docs/data.md).

0: never purged. 1: the compensation log's data and undo results only. 2: also step results, error and
reply texts and the order document. 3: also the order document's ``carrier`` (every field
:data:`orderflow.client_fields.CLIENT_FIELDS` marks). The number rises whenever the purge covers more, so
that a record a narrower purge marked is purged again.
"""


class Model(BaseModel):
    """Base of stored models: camelCase JSON, snake_case attributes, unknown fields kept.

    Unknown fields are kept (``extra="allow"``) so that a record written by a newer schema survives a
    read-modify-write by older code.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def to_json_dict(self) -> dict[str, Any]:
        """The stored form: camelCase keys, JSON-native values."""
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_stored(cls, doc: Mapping[str, Any]) -> Self:
        """Parse a stored document, dropping the store's system properties (``_etag``, ``_ts`` ...)."""
        return cls.model_validate({k: v for k, v in doc.items() if not k.startswith("_")})

    def copied(self) -> Self:
        """A deep copy that shares nothing with this model, unknown fields included.

        Built by pydantic-core (a dump, then a validation) instead of ``model_copy(deep=True)``, whose
        ``copy.deepcopy`` walk is about four times slower on a state record (the copy every fenced write
        hands its mutation). Every field counts as set in the copy.
        """
        return self.model_validate(self.model_dump())


class ProcessState(StrEnum):
    """Where an order is in its life (the state record's ``processState``)."""

    PENDING = "Pending"
    PROCESSING = "Processing"
    AWAITING_REVIEW = "AwaitingReview"
    PROCESSED = "Processed"
    ERROR = "Error"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"
    CANCELLED = "Cancelled"


class StepStatus(StrEnum):
    """Where one step of an order is (``steps[name].status``)."""

    NOT_STARTED = "NotStarted"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"
