"""The base of every message (camelCase, unknown fields refused, immutable), and of a message that may
carry the sender's trace context."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from orderflow.messages.fields import (
    describe_character,
    forbidden_character,
)
from orderflow.tracing import valid_traceparent


class Envelope(BaseModel):
    """Base of every message: camelCase on the wire, unknown fields rejected, immutable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def to_json(self) -> str:
        """The wire form (camelCase JSON)."""
        return self.model_dump_json(by_alias=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        if isinstance(value, str) and (char := forbidden_character(value)) is not None:
            raise ValueError(
                f"character {describe_character(char)} is not allowed: control, format (zero-width, "
                "bidirectional, byte-order mark) and separator characters, lone surrogates and U+FFFD "
                "are refused in text"
            )
        return value


class Traced(Envelope):
    """An envelope that may carry the sender's W3C trace context (:mod:`orderflow.tracing`).

    Attributes:
        traceparent: The span that sent the message, as a version-00 ``traceparent``; None when the
            sender traced nothing. Read leniently: a value :func:`orderflow.tracing.parse_traceparent`
            refuses (malformed, not a string, any invisible character) is dropped on receipt, never a
            reason to refuse the message, and it is used for tracing only. Left out of the wire form
            (and of every dump) when None, and out of an order's content hash.
    """

    traceparent: str | None = Field(default=None, exclude_if=lambda value: value is None)

    @model_validator(mode="before")
    @classmethod
    def _lenient_traceparent(cls, data: Any) -> Any:
        # Before the fields are validated: a bad trace context must not dead-letter the message.
        if isinstance(data, dict) and "traceparent" in data:
            data = dict(data)
            fixed = valid_traceparent(data["traceparent"])
            if fixed is None:
                del data["traceparent"]
            else:
                data["traceparent"] = fixed
        return data
